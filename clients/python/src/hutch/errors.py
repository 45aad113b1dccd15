"""One exception hierarchy for everything hutchd answers with an error.

Every `HutchError` raised for an HTTP answer carries hutchd's error `code` (`sandbox_not_found`,
`invalid_path`, ...), the HTTP `status` and the `request_id` of the `X-Request-Id` header, which is
what hutchd's log lines name (`request=r42`): quote it when reporting a problem.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from hutch.models import ExecResult


class HutchError(Exception):
    """Base of every error of this package."""

    def __init__(
        self,
        message: str,
        *,
        code: str | None = None,
        status: int | None = None,
        request_id: str | None = None,
        body: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.status = status
        self.request_id = request_id
        self.body = body or {}

    def __str__(self) -> str:
        parts = [self.message]
        if self.code:
            parts.append(f"code={self.code}")
        if self.status is not None:
            parts.append(f"status={self.status}")
        if self.request_id:
            parts.append(f"request={self.request_id}")
        return " ".join(parts)


class HutchConnectionError(HutchError):
    """hutchd could not be reached, or the connection broke mid-answer."""


class ProtocolError(HutchError):
    """hutchd's answer was not what the API documents (not JSON, a cut stream)."""


class BadRequest(HutchError):
    """400: invalid field, invalid JSON, invalid path, ..."""


class InvalidPath(BadRequest):
    """400 invalid_path: not absolute, contains NUL, ..."""


class Unauthorized(HutchError):
    """401: TCP without a valid bearer token."""


class PermissionDenied(HutchError):
    """403: the file operation is not allowed (EACCES/EPERM/EROFS, /proc, /sys)."""


class NotFound(HutchError):
    """404: no such sandbox, process, file, recipe or checkpoint."""


class SandboxNotFound(NotFound):
    pass


class ProcessNotFound(NotFound):
    pass


class FileNotFound(NotFound):
    pass


class RecipeNotFound(NotFound):
    pass


class CheckpointNotFound(NotFound):
    pass


class Conflict(HutchError):
    """409: paused sandbox, closed stdin, is_directory, already_exists, not_empty, ..."""


class VolumeNotFound(NotFound):
    """No volume of that name (`volume_not_found`)."""


class VolumeBusy(Conflict):
    """The volume is attached read-write to another sandbox, or in use when deleted
    (`volume_busy`; the message names the sandbox)."""


class VolumeExists(Conflict):
    """A volume of that name exists (`volume_exists`)."""


class SandboxPaused(Conflict):
    pass


class AlreadyExists(Conflict):
    pass


class IsDirectory(Conflict):
    pass


class NotADirectory(Conflict):
    pass


class NotEmpty(Conflict):
    pass


class PayloadTooLarge(HutchError):
    """413: a JSON body, fs/write content or fs/download entry over hutchd's limit."""


class Unprocessable(HutchError):
    """422: fs/edit found no match or several, or a recipe bake failed."""


class NoMatch(Unprocessable):
    pass


class NotUnique(Unprocessable):
    pass


class BakeFailed(Unprocessable):
    """422 bake_failed: `log` is the bake's output."""

    @property
    def log(self) -> str:
        error = self.body.get("error", {})
        return str(error.get("log", "")) if isinstance(error, dict) else ""


class TooManyRequests(HutchError):
    """429: too many requests in flight or connections open; retry later."""


class ServerError(HutchError):
    """500 runtime_error / io_error: the message names the syscall, argument and errno."""


class BadGateway(ServerError):
    """502: the sandbox's port answered nothing usable through hutchd's proxy or tunnel."""


class PortUnreachable(BadGateway):
    """502 port_unreachable: nothing listens on the sandbox's port (the message names both
    connect errors, or says the sandbox's network is "none")."""


class Unavailable(HutchError):
    """503."""


class InsufficientStorage(HutchError):
    """507: a file write hit the sandbox's disk quota; nothing of it is left."""


class CommandError(HutchError):
    """An exec run with `check=True` exited non-zero (or timed out); `result` has its output."""

    def __init__(self, result: ExecResult, argv: list[str]) -> None:
        what = "timed out" if result.timed_out else f"exited with status {result.exit_code}"
        super().__init__(f"command {argv!r} {what}")
        self.result = result
        self.argv = argv

    @property
    def exit_code(self) -> int:
        return self.result.exit_code


_BY_CODE: dict[str, type[HutchError]] = {
    "invalid_path": InvalidPath,
    "sandbox_not_found": SandboxNotFound,
    "process_not_found": ProcessNotFound,
    "file_not_found": FileNotFound,
    "recipe_not_found": RecipeNotFound,
    "checkpoint_not_found": CheckpointNotFound,
    "volume_not_found": VolumeNotFound,
    "volume_busy": VolumeBusy,
    "volume_exists": VolumeExists,
    "sandbox_paused": SandboxPaused,
    "already_exists": AlreadyExists,
    "is_directory": IsDirectory,
    "not_a_directory": NotADirectory,
    "not_empty": NotEmpty,
    "no_match": NoMatch,
    "not_unique": NotUnique,
    "bake_failed": BakeFailed,
    "port_unreachable": PortUnreachable,
}

_BY_STATUS: dict[int, type[HutchError]] = {
    400: BadRequest,
    401: Unauthorized,
    403: PermissionDenied,
    404: NotFound,
    405: BadRequest,
    408: BadRequest,
    409: Conflict,
    413: PayloadTooLarge,
    416: BadRequest,
    422: Unprocessable,
    429: TooManyRequests,
    431: BadRequest,
    502: BadGateway,
    503: Unavailable,
    507: InsufficientStorage,
}


def error_for(status: int, body: bytes, request_id: str | None) -> HutchError:
    """The exception for an error answer of hutchd (`{"error": {"code", "message"}}`)."""
    import json

    parsed: dict[str, Any] = {}
    try:
        value = json.loads(body) if body else {}
        if isinstance(value, dict):
            parsed = value
    except ValueError:
        pass
    error = parsed.get("error")
    code = message = None
    if isinstance(error, dict):
        code = error.get("code")
        message = error.get("message")
    if not message:
        message = body.decode("utf-8", "replace").strip() or f"HTTP {status}"
    cls = _BY_CODE.get(code or "") or _BY_STATUS.get(status) or (
        ServerError if status >= 500 else HutchError
    )
    return cls(message, code=code, status=status, request_id=request_id, body=parsed)
