"""deepagents 0.7's result types, with ReadResult's window checks (its __post_init__)."""

from __future__ import annotations

import abc
from dataclasses import dataclass
from typing import Any


@dataclass
class ExecuteResponse:
    output: str
    exit_code: int | None = None
    truncated: bool = False


@dataclass
class ReadResult:
    error: str | None = None
    file_data: dict[str, Any] | None = None
    total_lines: int | None = None
    start_line: int | None = None
    end_line: int | None = None
    next_offset: int | None = None
    no_lines_requested: bool = False

    def __post_init__(self) -> None:
        if (self.start_line is None) != (self.end_line is None):
            raise ValueError("start_line and end_line must be set together")
        if self.next_offset is not None and self.start_line is None:
            raise ValueError("next_offset requires a window")
        if self.total_lines is not None and self.start_line is None:
            raise ValueError("total_lines requires a window")
        if self.start_line is not None and self.end_line is not None:
            if self.start_line < 1 or self.end_line < self.start_line:
                raise ValueError("window must satisfy 1 <= start_line <= end_line")
            if self.total_lines is not None and self.total_lines < self.end_line:
                raise ValueError("total_lines < end_line")
            if self.next_offset is not None and self.next_offset != self.end_line:
                raise ValueError("next_offset must equal end_line")


@dataclass
class WriteResult:
    error: str | None = None
    path: str | None = None


@dataclass
class EditResult:
    error: str | None = None
    path: str | None = None
    occurrences: int | None = None


@dataclass
class DeleteResult:
    error: str | None = None
    path: str | None = None


@dataclass
class LsResult:
    error: str | None = None
    entries: list[dict[str, Any]] | None = None


@dataclass
class GrepResult:
    error: str | None = None
    matches: list[dict[str, Any]] | None = None
    truncated: bool = False


@dataclass
class GlobResult:
    error: str | None = None
    matches: list[dict[str, Any]] | None = None
    truncated: bool = False


@dataclass
class FileUploadResponse:
    path: str
    error: str | None = None


@dataclass
class FileDownloadResponse:
    path: str
    content: bytes | None = None
    error: str | None = None


class BackendProtocol(abc.ABC):  # noqa: B024
    pass


class SandboxBackendProtocol(BackendProtocol):
    pass
