"""An asyncio facade over the synchronous client.

Thin by design: each call runs the synchronous client in a worker thread (`asyncio.to_thread`),
so the event loop never blocks on hutchd, and streams (`stream`, `follow`, `iter_bytes`) are
async iterators whose every step runs in a thread. The HTTP work stays in one implementation.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from typing import Any

from hutch.client import Client, ExecStream, Files, Process, Sandbox
from hutch.models import ExecResult, OutputEvent

_DONE = object()


async def _iterate(make: Any, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
    iterator: Iterator[Any] = await asyncio.to_thread(lambda: iter(make(*args, **kwargs)))
    try:
        while True:
            item = await asyncio.to_thread(next, iterator, _DONE)
            if item is _DONE:
                return
            yield item
    finally:
        close = getattr(iterator, "close", None)
        if close is not None:
            await asyncio.to_thread(close)


def _wrap(value: Any) -> Any:
    if isinstance(value, Sandbox):
        return AsyncSandbox(value)
    if isinstance(value, Process):
        return AsyncProcess(value)
    if isinstance(value, list):
        return [_wrap(v) for v in value]
    if isinstance(value, tuple):
        return tuple(_wrap(v) for v in value)
    return value


class _Proxy:
    """Every method of the wrapped object as a coroutine running it in a thread."""

    _sync: Any

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._sync, name)
        if not callable(attribute):
            return attribute

        async def call(*args: Any, **kwargs: Any) -> Any:
            return _wrap(await asyncio.to_thread(attribute, *args, **kwargs))

        return call


class AsyncClient(_Proxy):
    """`async with AsyncClient() as client: sandbox = await client.create()`."""

    def __init__(self, socket: str | None = None, **options: Any) -> None:
        self._sync = Client(socket, **options)
        self.recipes = _Recipes(self._sync)

    @property
    def sync(self) -> Client:
        return self._sync

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._sync.close()


class _Recipes(_Proxy):
    def __init__(self, client: Client) -> None:
        self._sync = client.recipes


class AsyncSandbox(_Proxy):
    """`async with await client.create() as sandbox:` deletes the sandbox on exit."""

    def __init__(self, sandbox: Sandbox) -> None:
        self._sync = sandbox
        self.files = AsyncFiles(sandbox.files)

    @property
    def id(self) -> str:
        return self._sync.id

    @property
    def sync(self) -> Sandbox:
        return self._sync

    async def __aenter__(self) -> AsyncSandbox:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await asyncio.to_thread(self._sync.delete)

    async def stream(self, command: Any, **options: Any) -> AsyncExecStream:
        return AsyncExecStream(await asyncio.to_thread(self._sync.stream, command, **options))


class AsyncExecStream:
    def __init__(self, stream: ExecStream) -> None:
        self._stream = stream
        self._events = _iterate(lambda: stream)

    @property
    def result(self) -> ExecResult | None:
        return self._stream.result

    def __aiter__(self) -> AsyncIterator[OutputEvent]:
        return self._events

    async def aclose(self) -> None:
        await asyncio.to_thread(self._stream.close)

    async def __aenter__(self) -> AsyncExecStream:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


class AsyncProcess(_Proxy):
    def __init__(self, process: Process) -> None:
        self._sync = process

    @property
    def pid(self) -> int:
        return self._sync.pid

    def follow(self, stream: str = "stdout", offset: int = 0, **options: Any) -> AsyncIterator[Any]:
        return _iterate(self._sync.follow, stream, offset, **options)


class AsyncFiles(_Proxy):
    def __init__(self, files: Files) -> None:
        self._sync = files

    def iter_bytes(self, path: str, chunk_size: int = 1 << 20,
                   **options: Any) -> AsyncIterator[bytes]:
        return _iterate(self._sync.iter_bytes, path, chunk_size, **options)


__all__ = ["AsyncClient", "AsyncSandbox", "AsyncProcess", "AsyncFiles", "AsyncExecStream"]
