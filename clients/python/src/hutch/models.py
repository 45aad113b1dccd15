"""Typed views of hutchd's answers (docs/api.md). Each keeps the JSON it came from in `raw`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


def _dict(value: Any) -> dict[str, Any]:
    return dict(value) if isinstance(value, dict) else {}


@dataclass
class SandboxInfo:
    id: str
    state: str
    created_at: str = ""
    rootfs: str = ""
    labels: dict[str, str] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    limits: dict[str, Any] = field(default_factory=dict)
    network: str = ""
    hostname: str = ""
    workdir: str = "/"
    idle_ttl_seconds: float | None = None
    default_timeout_seconds: float | None = None
    max_lifetime_seconds: float | None = None
    init_pid: int | None = None
    recipe: str | None = None
    layers: list[str] = field(default_factory=list)
    raw: dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> SandboxInfo:
        return cls(
            id=data["id"], state=data.get("state", ""), created_at=data.get("created_at", ""),
            rootfs=data.get("rootfs", ""), labels=_dict(data.get("labels")),
            env=_dict(data.get("env")), limits=_dict(data.get("limits")),
            network=data.get("network", ""), hostname=data.get("hostname", ""),
            workdir=data.get("workdir", "/"), idle_ttl_seconds=data.get("idle_ttl_seconds"),
            default_timeout_seconds=data.get("default_timeout_seconds"),
            max_lifetime_seconds=data.get("max_lifetime_seconds"),
            init_pid=data.get("init_pid"), recipe=data.get("recipe"),
            layers=list(data.get("layers") or []), raw=data)


@dataclass
class ExecResult:
    """What a command did: a value for every exit status (non-zero is not an exception)."""

    exit_code: int
    stdout: str = ""
    stderr: str = ""
    duration_ms: float = 0.0
    timed_out: bool = False
    oom_killed: bool = False
    truncated: bool = False
    start_error: str | None = None
    raw: dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out

    @property
    def output(self) -> str:
        """stdout then stderr, as an agent reads a command's output."""
        return self.stdout + self.stderr

    @classmethod
    def from_json(cls, data: dict[str, Any], stdout: str | None = None,
                  stderr: str | None = None) -> ExecResult:
        return cls(
            exit_code=int(data.get("exit_code", -1)),
            stdout=data.get("stdout", "") if stdout is None else stdout,
            stderr=data.get("stderr", "") if stderr is None else stderr,
            duration_ms=float(data.get("duration_ms", 0.0)),
            timed_out=bool(data.get("timed_out", False)),
            oom_killed=bool(data.get("oom_killed", False)),
            truncated=bool(data.get("truncated", False)),
            start_error=data.get("start_error"), raw=data)


@dataclass
class OutputEvent:
    """One line of a streamed exec: `stream` is "stdout" or "stderr"."""

    stream: str
    data: str


@dataclass
class ProcessStatus:
    pid: int
    state: str
    argv: list[str] = field(default_factory=list)
    started_at: str = ""
    duration_ms: float = 0.0
    exit_code: int | None = None
    term_signal: int | None = None
    raw: dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def running(self) -> bool:
        return self.state == "running"

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ProcessStatus:
        return cls(pid=int(data["pid"]), state=data.get("state", ""),
                   argv=list(data.get("argv") or []), started_at=data.get("started_at", ""),
                   duration_ms=float(data.get("duration_ms") or 0.0),
                   exit_code=data.get("exit_code"), term_signal=data.get("term_signal"),
                   raw=data)


@dataclass
class OutputChunk:
    """Background output from `offset` to `next_offset` (bytes of the stream)."""

    data: bytes
    offset: int
    next_offset: int
    eof: bool
    truncated: bool

    @property
    def text(self) -> str:
        return self.data.decode("utf-8", "replace")


@dataclass
class FileEntry:
    path: str
    is_dir: bool = False
    size: int = 0
    modified_at: str = ""
    type: str = ""
    mode: int = 0
    link_target: str | None = None

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> FileEntry:
        return cls(path=data["path"], is_dir=bool(data.get("is_dir", False)),
                   size=int(data.get("size", 0)), modified_at=data.get("modified_at", ""),
                   type=data.get("type", ""), mode=int(data.get("mode", 0)),
                   link_target=data.get("link_target"))


@dataclass
class TextWindow:
    """fs/read: lines `start_line` (0-based) to `end_line` of `total_lines`."""

    content: str
    total_lines: int
    start_line: int
    end_line: int
    next_offset: int | None

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> TextWindow:
        return cls(content=data.get("content", ""), total_lines=int(data.get("total_lines", 0)),
                   start_line=int(data.get("start_line", 0)),
                   end_line=int(data.get("end_line", 0)), next_offset=data.get("next_offset"))


@dataclass
class GrepMatch:
    path: str
    line: int
    text: str


@dataclass
class GrepResult:
    matches: list[GrepMatch]
    truncated: bool


@dataclass
class FileResult:
    """One file of a batch upload or download: `error` is None on success, else one of
    `file_not_found`, `permission_denied`, `is_directory`, `invalid_path`."""

    path: str
    content: bytes | None = None
    size: int | None = None
    error: str | None = None
    message: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


@dataclass
class Recipe:
    name: str
    digest: str
    created: str = ""
    size: int = 0
    base: str = ""

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Recipe:
        return cls(name=data["name"], digest=data.get("digest", ""),
                   created=data.get("created", ""), size=int(data.get("size") or 0),
                   base=data.get("base", ""))


@dataclass
class BakeResult:
    name: str
    digest: str
    cached: bool
    log: str


@dataclass
class SnapshotResult:
    name: str
    digest: str
    files: int = 0
    bytes: int = 0
    frozen_ms: float = 0.0
    duration_ms: float = 0.0
    # The sandbox's volumes, which the snapshot does not include (they are mounts, not layers).
    volumes_excluded: list[str] = field(default_factory=list)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> SnapshotResult:
        return cls(name=data["name"], digest=data.get("digest", ""),
                   files=int(data.get("files") or 0), bytes=int(data.get("bytes") or 0),
                   frozen_ms=float(data.get("frozen_ms") or 0.0),
                   duration_ms=float(data.get("duration_ms") or 0.0),
                   volumes_excluded=list(data.get("volumes_excluded") or []))


@dataclass
class Checkpoint:
    name: str
    digest: str
    created: str = ""


@dataclass
class Health:
    status: str
    sandboxes: int
    recovered: dict[str, int] = field(default_factory=dict)


@dataclass
class Pool:
    rootfs: str
    size: int
    idle: int


@dataclass
class WatchEvent:
    """One inotify event of a watch: create, modify, delete, move (with `from_path`), attrib,
    or overflow/reset/limit (rescan: events were lost or a directory is not watched)."""

    seq: int
    event: str
    path: str = ""
    is_dir: bool = False
    from_path: str | None = None
    raw: dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> WatchEvent:
        return cls(seq=int(data.get("seq", 0)), event=str(data.get("event", "")),
                   path=str(data.get("path", "")), is_dir=bool(data.get("is_dir", False)),
                   from_path=data.get("from"), raw=data)


@dataclass
class NetworkState:
    """GET .../network: the mode, the policy's lists, counters (None without the engine)."""

    mode: str
    allow: list[str] = field(default_factory=list)
    deny: list[str] = field(default_factory=list)
    stats: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
    ca_pem: str | None = None
    placeholders: dict[str, str] = field(default_factory=dict)
    raw: dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> NetworkState:
        return cls(mode=str(data.get("mode", "")), allow=list(data.get("allow") or []),
                   deny=list(data.get("deny") or []), stats=data.get("stats"),
                   error=data.get("error"), ca_pem=data.get("ca_pem"),
                   placeholders=_dict(data.get("placeholders")), raw=data)


@dataclass
class SecretInfo:
    """A secret hutchd holds: its name and source (file, environment, api), never its value."""

    name: str
    source: str = ""
    updated: str = ""

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> SecretInfo:
        return cls(name=str(data["name"]), source=str(data.get("source", "")),
                   updated=str(data.get("updated", "")))


@dataclass
class VolumeAttachment:
    """A sandbox a volume is mounted in, at `target`."""

    sandbox: str
    target: str
    readonly: bool = False
    shared: bool = False
    ending: bool = False  # the sandbox is being torn down


@dataclass
class Volume:
    """A persistent volume: `size_bytes` is its quota; `used_bytes` and `available_bytes` what its
    filesystem holds now (None when hutchd could not look)."""

    name: str
    size_bytes: int
    created: str = ""
    used_bytes: int | None = None
    available_bytes: int | None = None
    attached: list[VolumeAttachment] = field(default_factory=list)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Volume:
        def count(key: str) -> int | None:
            value = data.get(key)
            return None if value is None else int(value)
        return cls(name=str(data["name"]), size_bytes=int(data["size_bytes"]),
                   created=str(data.get("created", "")), used_bytes=count("used_bytes"),
                   available_bytes=count("available_bytes"),
                   attached=[VolumeAttachment(sandbox=str(a["sandbox"]), target=str(a["target"]),
                                              readonly=bool(a.get("readonly", False)),
                                              shared=bool(a.get("shared", False)),
                                              ending=bool(a.get("ending", False)))
                             for a in data.get("attached") or []])


@dataclass
class PortToken:
    """A port token: `token` (and `url`, a browser link) only in the answer that made it."""

    id: str
    port: int
    expires_at: str = ""
    token: str | None = None
    url: str | None = None

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> PortToken:
        return cls(id=str(data["id"]), port=int(data["port"]),
                   expires_at=str(data.get("expires_at", "")), token=data.get("token"),
                   url=data.get("url"))
