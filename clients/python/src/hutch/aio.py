"""An asyncio facade over the synchronous client.

Thin by design: each call runs the synchronous client in a worker thread (`asyncio.to_thread`),
so the event loop never blocks on hutchd. `AsyncSandbox.stream` is read on the event loop itself
(an asyncio connection of its own, no thread held while a command runs); `AsyncSandbox.tunnel` too
(a raw TCP tunnel as asyncio streams); `follow` and `iter_bytes` are async iterators whose every
step runs in a thread.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

from hutch._async_stream import AsyncHttpStream, open_stream, open_tunnel
from hutch.client import Client, Files, Process, Sandbox, Session
from hutch.errors import ProtocolError
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
    if isinstance(value, Session):
        return AsyncSession(value)
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

    async def stream(self, command: Any, *, workdir: str | None = None,
                     env: dict[str, str] | None = None, stdin: str | bytes | None = None,
                     timeout: float | None = None,
                     max_output_bytes: int | None = None) -> AsyncExecStream:
        """A streamed exec read on the event loop (no thread); leaving it early (`aclose`,
        or `async with`) kills the command's whole tree, as closing a sync stream does."""
        body = self._sync._exec_body(command, workdir, env, stdin, timeout, max_output_bytes)
        body["stream"] = True
        http = await open_stream(self._sync.client.transport, "POST",
                                 self._sync.path + "/exec", body)
        return AsyncExecStream(http)

    async def tunnel(self, port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """A raw TCP tunnel to the sandbox's `port` on the event loop: its streams once hutchd
        answered (`writer.write_eof()` is a half-close); PortUnreachable when nothing listens."""
        return await open_tunnel(self._sync.client.transport,
                                 f"{self._sync.path}/tunnel/{int(port)}")

    def watch(self, path: str, **options: Any) -> AsyncIterator[Any]:
        """The watch's events as an async iterator (each step in a thread)."""
        return _iterate(self._sync.watch, path, **options)

    def network_log(self, **options: Any) -> AsyncIterator[Any]:
        return _iterate(self._sync.network_log, **options)


class AsyncExecStream:
    """Async iterator of `OutputEvent`s; `result` is set once it ended."""

    def __init__(self, http: AsyncHttpStream) -> None:
        self._http = http
        self.result: ExecResult | None = None

    async def _events(self) -> AsyncIterator[OutputEvent]:
        try:
            async for line in self._http.lines():
                if not line.strip():
                    continue
                try:
                    event = json.loads(line)
                except ValueError as e:
                    raise ProtocolError(f"exec stream line is not JSON: {line[:200]!r}",
                                        request_id=self._http.request_id) from e
                if "exit_code" in event:
                    self.result = ExecResult.from_json(event, stdout="", stderr="")
                    continue
                for name in ("stdout", "stderr"):
                    if name in event:
                        yield OutputEvent(name, event[name])
        finally:
            await self._http.close()
        if self.result is None:
            raise ProtocolError("the exec stream ended without its final line",
                                request_id=self._http.request_id)

    def __aiter__(self) -> AsyncIterator[OutputEvent]:
        return self._events()

    async def aclose(self) -> None:
        await self._http.close()

    async def __aenter__(self) -> AsyncExecStream:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


class AsyncSession(_Proxy):
    """A shell session: `await session.exec(...)`, `await session.delete()`."""

    def __init__(self, session: Session) -> None:
        self._sync = session

    @property
    def name(self) -> str:
        return self._sync.name


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


__all__ = ["AsyncClient", "AsyncSandbox", "AsyncSession", "AsyncProcess", "AsyncFiles",
           "AsyncExecStream"]
