"""HTTP/1.1 to hutchd over its unix socket or TCP, with http.client only.

Connections are kept alive and reused: an answer read to its end puts its connection back in a
small pool, a stream holds its own connection until it is closed. hutchd closes a connection idle
for 5 s (docs/api.md, Limits): a pooled connection idle for 4 s, or one hutchd already closed
(readable before any request), is dropped before use. A request whose reused connection still
turns out closed under it is sent again once on a new connection, unless it is a POST (which
may have reached hutchd) or its body is a stream that cannot be sent twice.
"""

from __future__ import annotations

import http.client
import json
import os
import select
import socket
import threading
import time
import urllib.parse
from collections.abc import Iterable, Iterator
from typing import IO, Any, Union

from hutch.errors import HutchConnectionError, ProtocolError, error_for

DEFAULT_SOCKET = "/run/hutch/hutchd.sock"
# hutchd's keep-alive idle limit is 5 s: a connection idle this long may be closing.
_MAX_IDLE_SECONDS = 4.0
_BLOCK = 1 << 20

Body = Union[bytes, IO[bytes], Iterable[bytes], None]


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float | None) -> None:
        super().__init__("hutch", timeout=timeout, blocksize=_BLOCK)
        self._path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(self.timeout)
            sock.connect(self._path)
        except OSError:
            sock.close()
            raise
        self.sock = sock


class Response:
    """An answer whose body has not been read yet; `close()` gives the connection back."""

    def __init__(self, transport: Transport, conn: http.client.HTTPConnection,
                 raw: http.client.HTTPResponse) -> None:
        self._transport = transport
        self._conn: http.client.HTTPConnection | None = conn
        self.raw = raw
        self.status = raw.status
        self.headers = raw.headers
        self.request_id = raw.getheader("X-Request-Id")

    def read(self, amount: int | None = None) -> bytes:
        try:
            return self.raw.read(amount)
        except (OSError, http.client.HTTPException) as e:
            self._discard()
            raise HutchConnectionError(f"reading hutchd's answer: {e}",
                                       request_id=self.request_id) from e

    def iter_chunks(self, size: int = _BLOCK) -> Iterator[bytes]:
        while True:
            block = self.read1(size)
            if not block:
                return
            yield block

    def read1(self, size: int = _BLOCK) -> bytes:
        try:
            return self.raw.read1(size)
        except (OSError, http.client.HTTPException) as e:
            self._discard()
            raise HutchConnectionError(f"reading hutchd's answer: {e}",
                                       request_id=self.request_id) from e

    def iter_lines(self) -> Iterator[bytes]:
        while True:
            try:
                line = self.raw.readline()
            except (OSError, http.client.HTTPException) as e:
                self._discard()
                raise HutchConnectionError(f"reading hutchd's stream: {e}",
                                           request_id=self.request_id) from e
            if not line:
                return
            yield line

    def close(self) -> None:
        """Gives the connection back when the answer was read whole, else closes it."""
        if self._conn is None:
            return
        conn, self._conn = self._conn, None
        if self.raw.isclosed() and not self.raw.will_close:
            self._transport._release(conn)
        else:
            self.raw.close()
            conn.close()

    def _discard(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def __enter__(self) -> Response:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Transport:
    """Sends requests to hutchd; thread-safe (each request takes a connection of its own)."""

    def __init__(self, socket_path: str | None = None, url: str | None = None,
                 token: str | None = None, timeout: float | None = 660.0) -> None:
        if url is None and socket_path is None:
            url = os.environ.get("HUTCH_URL") or None
            socket_path = os.environ.get("HUTCH_SOCKET") or (None if url else DEFAULT_SOCKET)
        self.token = token if token is not None else os.environ.get("HUTCH_TOKEN") or None
        self.timeout = timeout
        self.socket_path = socket_path
        self.url = url
        if url is not None and socket_path is None:
            parsed = urllib.parse.urlsplit(url)
            if parsed.scheme not in ("http", "https") or not parsed.hostname:
                raise ValueError(f"HUTCH_URL must be http[s]://host:port, not {url!r}")
            self._scheme = parsed.scheme
            self._host = parsed.hostname
            self._port = parsed.port
            self._prefix = parsed.path.rstrip("/")
        else:
            self._scheme = "unix"
            self._prefix = ""
        self._idle: list[tuple[http.client.HTTPConnection, float]] = []
        self._lock = threading.Lock()

    def describe(self) -> str:
        return self.socket_path if self._scheme == "unix" else str(self.url)

    def _new_connection(self) -> http.client.HTTPConnection:
        if self._scheme == "unix":
            return _UnixConnection(str(self.socket_path), self.timeout)
        if self._scheme == "https":
            return http.client.HTTPSConnection(self._host, self._port, timeout=self.timeout,
                                               blocksize=_BLOCK)
        return http.client.HTTPConnection(self._host, self._port, timeout=self.timeout,
                                          blocksize=_BLOCK)

    def _acquire(self) -> tuple[http.client.HTTPConnection, bool]:
        now = time.monotonic()
        with self._lock:
            while self._idle:
                conn, since = self._idle.pop()
                if now - since < _MAX_IDLE_SECONDS and not _dropped(conn):
                    return conn, True
                conn.close()
        return self._new_connection(), False

    def _release(self, conn: http.client.HTTPConnection) -> None:
        # The next user of a pooled connection gets the transport's own timeout.
        conn.timeout = self.timeout
        if conn.sock is not None:
            conn.sock.settimeout(self.timeout)
        with self._lock:
            self._idle.append((conn, time.monotonic()))

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for conn, _ in idle:
            conn.close()

    def request(self, method: str, path: str, *, query: dict[str, Any] | None = None,
                json_body: Any = None, body: Body = None, length: int | None = None,
                headers: dict[str, str] | None = None,
                timeout: float | None = None) -> Response:
        """Sends a request and returns its answer, raising the hutch error of a status >= 400."""
        target = self._prefix + path
        if query:
            pairs = [(k, v) for k, v in query.items() if v is not None]
            expanded: list[tuple[str, str]] = []
            for key, value in pairs:
                values = value if isinstance(value, list) else [value]
                expanded += [(key, _query_value(v)) for v in values]
            target += "?" + urllib.parse.urlencode(expanded)
        all_headers = {"Accept": "application/json"}
        if self.token:
            all_headers["Authorization"] = f"Bearer {self.token}"
        if json_body is not None:
            body = json.dumps(json_body).encode()
            all_headers["Content-Type"] = "application/json"
        elif body is not None:
            all_headers["Content-Type"] = "application/octet-stream"
        chunked = False
        if isinstance(body, (bytes, bytearray, memoryview)):
            all_headers["Content-Length"] = str(len(body))
        elif body is None:
            if method in ("POST", "PUT"):
                all_headers["Content-Length"] = "0"
        elif length is not None:
            all_headers["Content-Length"] = str(length)
        else:
            chunked = True
        all_headers.update(headers or {})
        # A POST that may have reached hutchd is never sent twice (an exec would run twice).
        replayable = method != "POST" and (
            body is None or isinstance(body, (bytes, bytearray, memoryview)))
        while True:
            conn, reused = self._acquire()
            if timeout is not None:
                conn.timeout = timeout
                if conn.sock is not None:
                    conn.sock.settimeout(timeout)
            try:
                conn.request(method, target, body=body, headers=all_headers,
                             encode_chunked=chunked)
                raw = conn.getresponse()
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError) as e:
                conn.close()
                if reused and replayable:
                    continue
                raise HutchConnectionError(f"{method} {path} to {self.describe()}: {e}") from e
            except (OSError, http.client.HTTPException) as e:
                conn.close()
                raise HutchConnectionError(f"{method} {path} to {self.describe()}: {e}") from e
            break
        response = Response(self, conn, raw)
        if response.status >= 400:
            data = response.read()
            response.close()
            raise error_for(response.status, data, response.request_id)
        return response

    def call(self, method: str, path: str, **kwargs: Any) -> Any:
        """A request whose answer is JSON (or empty: None)."""
        with self.request(method, path, **kwargs) as response:
            data = response.read()
            if not data:
                return None
            try:
                return json.loads(data)
            except ValueError as e:
                raise ProtocolError(f"{method} {path}: answer is not JSON: {data[:200]!r}",
                                    status=response.status,
                                    request_id=response.request_id) from e

    def text(self, method: str, path: str, **kwargs: Any) -> str:
        with self.request(method, path, **kwargs) as response:
            return response.read().decode("utf-8", "replace")


def _dropped(conn: http.client.HTTPConnection) -> bool:
    """Whether hutchd closed an idle connection: readable while no request is out means EOF."""
    if conn.sock is None:
        return True
    try:
        readable, _, _ = select.select([conn.sock], [], [], 0)
    except (OSError, ValueError):
        return True
    return bool(readable)


def _query_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
