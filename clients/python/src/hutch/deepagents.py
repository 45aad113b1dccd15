"""A Deep Agents (Python deepagents 0.7) sandbox backend served by hutchd's own routes.

Every file operation goes to hutchd's native file API (`fs/ls`, `fs/read`, `fs/edit`, ...,
`GET/PUT files`), never to a `python3 -c` script inside the sandbox as deepagents' `BaseSandbox`
does: the sandbox's image needs no python3, and paths are confined to the sandbox's root by hutchd.

    from hutch.deepagents import HutchBackend
    backend = HutchBackend.create()          # a new sandbox, deleted by backend.close()
    agent = create_deep_agent(model=..., backend=backend)

Importable without deepagents: the result types are then this module's own dataclasses with the
same fields; with deepagents installed they are deepagents' own and `HutchBackend` subclasses its
`BaseSandbox`, so `isinstance(backend, SandboxBackendProtocol)` holds.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from hutch.client import Client, Sandbox
from hutch.errors import (FileNotFound, HutchError, IsDirectory, NoMatch, NotUnique,
                          PayloadTooLarge, PermissionDenied)

try:  # deepagents is optional: its types when present, ours (same fields) when not.
    from deepagents.backends.protocol import (DeleteResult, EditResult, ExecuteResponse,
                                              FileDownloadResponse, FileUploadResponse,
                                              GlobResult, GrepResult, LsResult, ReadResult,
                                              WriteResult)
    from deepagents.backends.sandbox import BaseSandbox as _Base

    HAVE_DEEPAGENTS = True
except ImportError:
    HAVE_DEEPAGENTS = False

    @dataclass
    class ExecuteResponse:  # type: ignore[no-redef]
        output: str
        exit_code: int | None = None
        truncated: bool = False

    @dataclass
    class ReadResult:  # type: ignore[no-redef]
        error: str | None = None
        file_data: dict[str, Any] | None = None
        total_lines: int | None = None
        start_line: int | None = None
        end_line: int | None = None
        next_offset: int | None = None
        no_lines_requested: bool = False

    @dataclass
    class WriteResult:  # type: ignore[no-redef]
        error: str | None = None
        path: str | None = None

    @dataclass
    class EditResult:  # type: ignore[no-redef]
        error: str | None = None
        path: str | None = None
        occurrences: int | None = None

    @dataclass
    class DeleteResult:  # type: ignore[no-redef]
        error: str | None = None
        path: str | None = None

    @dataclass
    class LsResult:  # type: ignore[no-redef]
        error: str | None = None
        entries: list[dict[str, Any]] | None = None

    @dataclass
    class GrepResult:  # type: ignore[no-redef]
        error: str | None = None
        matches: list[dict[str, Any]] | None = None
        truncated: bool = False

    @dataclass
    class GlobResult:  # type: ignore[no-redef]
        error: str | None = None
        matches: list[dict[str, Any]] | None = None
        truncated: bool = False

    @dataclass
    class FileUploadResponse:  # type: ignore[no-redef]
        path: str
        error: str | None = None

    @dataclass
    class FileDownloadResponse:  # type: ignore[no-redef]
        path: str
        content: bytes | None = None
        error: str | None = None

    class _Base:  # type: ignore[no-redef]
        """Async twins of every operation (deepagents' default: the sync one in a thread).
        `self: Any`: the sync methods are those of the subclass."""

        async def als(self: Any, path: str) -> LsResult:
            return await asyncio.to_thread(self.ls, path)

        async def aread(self: Any, file_path: str, offset: int = 0,
                        limit: int = 2000) -> ReadResult:
            return await asyncio.to_thread(self.read, file_path, offset, limit)

        async def awrite(self: Any, file_path: str, content: str) -> WriteResult:
            return await asyncio.to_thread(self.write, file_path, content)

        async def aedit(self: Any, file_path: str, old_string: str, new_string: str,
                        replace_all: bool = False) -> EditResult:
            return await asyncio.to_thread(self.edit, file_path, old_string, new_string,
                                           replace_all)

        async def agrep(self: Any, pattern: str, path: str | None = None,
                        glob: str | None = None, *, max_count: int | None = None) -> GrepResult:
            return await asyncio.to_thread(self.grep, pattern, path, glob, max_count=max_count)

        async def aglob(self: Any, pattern: str, path: str | None = None) -> GlobResult:
            return await asyncio.to_thread(self.glob, pattern, path)

        async def adelete(self: Any, file_path: str) -> DeleteResult:
            return await asyncio.to_thread(self.delete, file_path)

        async def aupload_files(self: Any,
                                files: list[tuple[str, bytes]]) -> list[FileUploadResponse]:
            return await asyncio.to_thread(self.upload_files, files)

        async def adownload_files(self: Any, paths: list[str]) -> list[FileDownloadResponse]:
            return await asyncio.to_thread(self.download_files, paths)

        async def aexecute(self: Any, command: str, *,
                           timeout: int | None = None) -> ExecuteResponse:
            return await asyncio.to_thread(self.execute, command, timeout=timeout)


# The four per-file errors of the protocol; hutchd's batch routes already answer with them.
_FILE_ERRORS = ("file_not_found", "permission_denied", "is_directory", "invalid_path")
# fs/upload's JSON body is limited to 8 MiB: batches stay under it (base64 grows by 4/3), and a
# file too big for a batch goes alone through the streamed PUT.
_BATCH_BYTES = 4 << 20


def _per_file_error(error: HutchError) -> str:
    if error.code in _FILE_ERRORS:
        return str(error.code)
    if isinstance(error, PermissionDenied) or error.code == "not_a_regular_file":
        return "permission_denied"
    return "invalid_path"


def _make_read_result(**fields: Any) -> ReadResult:
    # no_lines_requested is newer than some 0.7 releases: passed only where the type has it.
    known = {f.name for f in dataclasses.fields(ReadResult)}
    return ReadResult(**{k: v for k, v in fields.items() if k in known})


class HutchBackend(_Base):  # type: ignore[misc]
    """The Deep Agents sandbox backend of one hutch sandbox."""

    def __init__(self, sandbox: Sandbox, *, owned: bool = False) -> None:
        self.sandbox = sandbox
        self._owned = owned

    @classmethod
    def create(cls, client: Client | None = None, **create: Any) -> HutchBackend:
        """A backend on a new sandbox (`Client.create`'s arguments), deleted by `close()`."""
        return cls((client or Client()).create(**create), owned=True)

    @classmethod
    def from_id(cls, sandbox_id: str, client: Client | None = None) -> HutchBackend:
        """A backend on an existing sandbox; `close()` leaves it running."""
        return cls((client or Client()).get(sandbox_id))

    def close(self) -> None:
        """Deletes the sandbox if this backend created it."""
        if self._owned:
            self.sandbox.delete()
            self._owned = False

    def __enter__(self) -> HutchBackend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def id(self) -> str:
        return self.sandbox.id

    @property
    def _files(self) -> Any:
        return self.sandbox.files

    def _default_path(self, path: str | None) -> str:
        return path if path else self.sandbox.info.workdir or "/"

    # ---- execute ----

    def execute(self, command: str, *, timeout: int | None = None) -> ExecuteResponse:
        """`/bin/sh -c command`; output is stdout then stderr; `timeout` None or 0 is the
        sandbox's default_timeout_seconds (a timed-out command has exit code 124)."""
        result = self.sandbox.exec(command, timeout=timeout or None)
        return ExecuteResponse(output=result.stdout + result.stderr,
                               exit_code=result.exit_code, truncated=result.truncated)

    # ---- files ----

    def ls(self, path: str) -> LsResult:
        try:
            entries = self._files.ls(path)
        except HutchError as e:
            return LsResult(error=f"Error: cannot list '{path}': {e.message}")
        return LsResult(entries=[{"path": e.path + ("/" if e.is_dir else ""), "is_dir": e.is_dir,
                                  "size": e.size, "modified_at": e.modified_at}
                                 for e in entries])

    def read(self, file_path: str, offset: int = 0, limit: int = 2000) -> ReadResult:
        """Lines from `offset` (0-based); a file that is not UTF-8 comes back whole as base64
        with exact bytes (hutchd's line read would have replaced them with U+FFFD)."""
        if limit <= 0:
            return _make_read_result(file_data={"content": "", "encoding": "utf-8"},
                                     no_lines_requested=True)
        offset = max(0, offset)
        try:
            window = self._files.read(file_path, offset, limit)
            if "\ufffd" in window.content:
                raw = self._files.read_bytes(file_path)
                try:
                    raw.decode("utf-8")
                except UnicodeDecodeError:
                    return _make_read_result(file_data={
                        "content": base64.b64encode(raw).decode(), "encoding": "base64"})
        except FileNotFound:
            return _make_read_result(error=f"Error: File '{file_path}' not found")
        except IsDirectory:
            return _make_read_result(error=f"Error: '{file_path}' is a directory, not a file")
        except HutchError as e:
            return _make_read_result(error=f"Error: cannot read '{file_path}': {e.message}")
        if window.total_lines == 0:
            return _make_read_result(file_data={"content": "", "encoding": "utf-8"})
        if window.end_line <= window.start_line:
            return _make_read_result(
                error=f"Error: Line offset {offset} exceeds file length "
                      f"({window.total_lines} lines)")
        # Lines joined without the last one's newline, as deepagents' own read returns them.
        content = window.content[:-1] if window.content.endswith("\n") else window.content
        return _make_read_result(
            file_data={"content": content, "encoding": "utf-8"},
            total_lines=window.total_lines, start_line=window.start_line + 1,
            end_line=window.end_line,
            next_offset=window.end_line if window.next_offset is not None else None)

    def write(self, file_path: str, content: str) -> WriteResult:
        try:
            self._files.write(file_path, content)
        except PayloadTooLarge:
            try:
                self._files.upload(file_path, content.encode())
            except HutchError as e:
                return WriteResult(error=f"Error: cannot write '{file_path}': {e.message}")
        except HutchError as e:
            return WriteResult(error=f"Error: cannot write '{file_path}': {e.message}")
        return WriteResult(path=file_path)

    def edit(self, file_path: str, old_string: str, new_string: str,
             replace_all: bool = False) -> EditResult:
        """The words of failures are those deepagents' own backends use (its tests match
        "not found" and "multiple")."""
        try:
            occurrences = self._files.edit(file_path, old_string, new_string,
                                           replace_all=replace_all)
        except NoMatch:
            return EditResult(error=f"Error: String not found in file: '{old_string}'")
        except NotUnique:
            return EditResult(error=f"Error: String '{old_string}' appears multiple times in "
                                    "the file. Use replace_all=True to replace all occurrences, "
                                    "or give more context to make it unique.")
        except FileNotFound:
            return EditResult(error=f"Error: File '{file_path}' not found")
        except HutchError as e:
            if e.code == "bad_request" and not old_string:
                return EditResult(error="Error: String not found in file: old_string is empty")
            return EditResult(error=f"Error: cannot edit '{file_path}': {e.message}")
        return EditResult(path=file_path, occurrences=occurrences)

    def grep(self, pattern: str, path: str | None = None, glob: str | None = None, *,
             max_count: int | None = None) -> GrepResult:
        try:
            found = self._files.grep(pattern, self._default_path(path), glob=glob,
                                     max_count=max_count)
        except HutchError as e:
            return GrepResult(error=f"Error: grep in '{path}': {e.message}")
        return GrepResult(matches=[{"path": m.path, "line": m.line, "text": m.text}
                                   for m in found.matches], truncated=found.truncated)

    def glob(self, pattern: str, path: str | None = None) -> GlobResult:
        try:
            paths = self._files.glob(pattern, self._default_path(path))
        except HutchError as e:
            return GlobResult(error=f"Error: glob in '{path}': {e.message}")
        return GlobResult(matches=[{"path": p, "is_dir": False} for p in paths])

    def delete(self, file_path: str) -> DeleteResult:
        try:
            self._files.remove_tree(file_path)
        except FileNotFound:
            return DeleteResult(error=f"Error: File '{file_path}' not found")
        except HutchError as e:
            return DeleteResult(error=f"Error: cannot delete '{file_path}': {e.message}")
        return DeleteResult(path=file_path)

    def upload_files(self, files: Sequence[tuple[str, bytes]]) -> list[FileUploadResponse]:
        """One result per input, in order; small files go in batches, big ones streamed."""
        results: list[FileUploadResponse | None] = [None] * len(files)
        batch: list[int] = []
        batch_bytes = 0

        def flush() -> None:
            nonlocal batch, batch_bytes
            if batch:
                answers = self._files.upload_many([files[i] for i in batch])
                for i, answer in zip(batch, answers):
                    results[i] = FileUploadResponse(path=files[i][0], error=answer.error)
            batch, batch_bytes = [], 0

        for index, (path, content) in enumerate(files):
            if len(content) > _BATCH_BYTES:
                try:
                    self._files.upload(path, content)
                    results[index] = FileUploadResponse(path=path)
                except HutchError as e:
                    results[index] = FileUploadResponse(path=path, error=_per_file_error(e))
                continue
            if batch_bytes + len(content) > _BATCH_BYTES:
                flush()
            batch.append(index)
            batch_bytes += len(content)
        flush()
        return [r for r in results if r is not None]

    def download_files(self, paths: Sequence[str]) -> list[FileDownloadResponse]:
        """One result per input, in order, with exact bytes (streamed GET per file: no size
        limit and no base64 inflation)."""
        results = []
        for path in paths:
            try:
                results.append(FileDownloadResponse(path=path,
                                                     content=self._files.read_bytes(path)))
            except HutchError as e:
                results.append(FileDownloadResponse(path=path, error=_per_file_error(e)))
        return results


__all__ = ["HutchBackend", "HAVE_DEEPAGENTS", "ExecuteResponse", "ReadResult", "WriteResult",
           "EditResult", "DeleteResult", "LsResult", "GrepResult", "GlobResult",
           "FileUploadResponse", "FileDownloadResponse"]
