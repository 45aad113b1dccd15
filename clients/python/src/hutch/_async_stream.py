"""Streamed exec on the event loop itself: one asyncio connection per stream, no thread.

A minimal HTTP/1.1 exchange (a request with a JSON body, then a chunked or sized answer read
line by line) is all a stream needs; every other async call goes through the sync client in a
thread (hutch.aio).
"""

from __future__ import annotations

import asyncio
import json
import ssl
from collections.abc import AsyncIterator
from typing import Any

from hutch._transport import Transport
from hutch.errors import HutchConnectionError, ProtocolError, error_for

_LINE_LIMIT = 16 << 20


class AsyncHttpStream:
    """The body of one answer, read as it arrives."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                 status: int, headers: dict[str, str]) -> None:
        self.reader = reader
        self.writer = writer
        self.status = status
        self.headers = headers
        self.request_id = headers.get("x-request-id")

    async def _body(self) -> AsyncIterator[bytes]:
        if self.headers.get("transfer-encoding", "").lower() == "chunked":
            while True:
                size_line = await self.reader.readline()
                if not size_line:
                    raise HutchConnectionError("the stream ended inside a chunk",
                                               request_id=self.request_id)
                size = int(size_line.split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    await self.reader.readline()
                    return
                yield await self.reader.readexactly(size)
                await self.reader.readexactly(2)
        elif "content-length" in self.headers:
            yield await self.reader.readexactly(int(self.headers["content-length"]))
        else:
            while block := await self.reader.read(1 << 16):
                yield block

    async def read(self) -> bytes:
        return b"".join([block async for block in self._body()])

    async def lines(self) -> AsyncIterator[bytes]:
        pending = b""
        try:
            async for block in self._body():
                pending += block
                *complete, pending = pending.split(b"\n")
                for line in complete:
                    yield line
        except (OSError, asyncio.IncompleteReadError, ValueError) as e:
            raise HutchConnectionError(f"reading hutchd's stream: {e}",
                                       request_id=self.request_id) from e
        if pending:
            yield pending

    async def close(self) -> None:
        self.writer.close()
        try:
            await self.writer.wait_closed()
        except OSError:
            pass


async def open_stream(transport: Transport, method: str, path: str,
                      body: Any) -> AsyncHttpStream:
    """Sends the request on a connection of its own; raises the hutch error of a status >= 400."""
    data = json.dumps(body).encode()
    stream = await _exchange(transport, method, path, ["Content-Type: application/json",
                                                        f"Content-Length: {len(data)}",
                                                        "Connection: close"], data)
    if stream.status >= 400:
        answer = await stream.read()
        await stream.close()
        raise error_for(stream.status, answer, stream.request_id)
    return stream


async def open_tunnel(transport: Transport,
                      path: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """`POST path` for a raw tunnel: the connection's streams once hutchd answered `200` (bytes
    the port sent behind the head stay in the reader's buffer); the hutch error otherwise."""
    stream = await _exchange(transport, "POST", path, ["Content-Length: 0"], b"")
    if stream.status != 200:
        answer = await stream.read()
        await stream.close()
        raise error_for(stream.status, answer, stream.request_id)
    return stream.reader, stream.writer


async def _exchange(transport: Transport, method: str, path: str, fields: list[str],
                    data: bytes) -> AsyncHttpStream:
    """Sends one request on a connection of its own and reads its answer's head."""
    try:
        if transport.socket_path is not None:
            reader, writer = await asyncio.open_unix_connection(transport.socket_path,
                                                                limit=_LINE_LIMIT)
        else:
            secure = ssl.create_default_context() if transport._scheme == "https" else None
            reader, writer = await asyncio.open_connection(transport._host, transport._port,
                                                           ssl=secure, limit=_LINE_LIMIT)
    except OSError as e:
        raise HutchConnectionError(f"{method} {path} to {transport.describe()}: {e}") from e
    head = [f"{method} {transport._prefix}{path} HTTP/1.1", "Host: hutch", *fields]
    if transport.token:
        head.append(f"Authorization: Bearer {transport.token}")
    try:
        writer.write(("\r\n".join(head) + "\r\n\r\n").encode() + data)
        await writer.drain()
        status_line = await reader.readline()
        parts = status_line.decode("latin-1").split(" ", 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/"):
            raise ProtocolError(f"{method} {path}: not an HTTP answer: {status_line[:100]!r}")
        headers: dict[str, str] = {}
        while (line := await reader.readline()) not in (b"\r\n", b"\n", b""):
            name, _, value = line.decode("latin-1").partition(":")
            headers[name.strip().lower()] = value.strip()
    except (OSError, asyncio.IncompleteReadError) as e:
        writer.close()
        raise HutchConnectionError(f"{method} {path} to {transport.describe()}: {e}") from e
    except ProtocolError:
        writer.close()
        raise
    return AsyncHttpStream(reader, writer, int(parts[1]), headers)
