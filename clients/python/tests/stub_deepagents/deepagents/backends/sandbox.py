"""deepagents 0.7's BaseSandbox contract: four abstract members for subclasses."""

from __future__ import annotations

from abc import ABC, abstractmethod

from deepagents.backends.protocol import (ExecuteResponse, FileDownloadResponse,
                                          FileUploadResponse, SandboxBackendProtocol)


class BaseSandbox(SandboxBackendProtocol, ABC):
    @property
    @abstractmethod
    def id(self) -> str: ...

    @abstractmethod
    def execute(self, command: str, *, timeout: int | None = None) -> ExecuteResponse: ...

    @abstractmethod
    def upload_files(self, files: list[tuple[str, bytes]]) -> list[FileUploadResponse]: ...

    @abstractmethod
    def download_files(self, paths: list[str]) -> list[FileDownloadResponse]: ...
