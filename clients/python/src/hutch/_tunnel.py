"""Raw TCP tunnels to a sandbox's port (`POST /v1/sandboxes/{id}/tunnel/{port}`, docs/api.md)
and a local port forward made of them, as `hutch port-forward` does.

After hutchd's `200` head the connection carries the port's bytes both ways, so a tunnel is the
socket itself. The head is read one byte at a time: a server that speaks first (ssh, a database's
greeting) may already have sent bytes behind it, and a buffered read would take them from the
socket the caller gets. The head is some forty bytes, so this costs forty small reads per tunnel.
"""

from __future__ import annotations

import select
import socket
import ssl
import threading
from typing import Any

from hutch._transport import Transport
from hutch.errors import HutchConnectionError, HutchError, ProtocolError, error_for

_MAX_HEAD = 64 * 1024
_RELAY_BLOCK = 1 << 16


def _connect(transport: Transport, timeout: float | None) -> socket.socket:
    if transport.socket_path is not None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(timeout)
            sock.connect(transport.socket_path)
        except OSError:
            sock.close()
            raise
        return sock
    sock = socket.create_connection((transport._host, transport._port or 80), timeout=timeout)
    if transport._scheme == "https":
        try:
            return ssl.create_default_context().wrap_socket(sock, server_hostname=transport._host)
        except (OSError, ssl.SSLError):
            sock.close()
            raise
    return sock


def _read_head(sock: socket.socket) -> bytes:
    head = bytearray()
    while not head.endswith(b"\r\n\r\n"):
        byte = sock.recv(1)
        if not byte:
            raise HutchConnectionError(
                f"hutchd closed the tunnel's connection inside its answer's head: {bytes(head)!r}")
        head += byte
        if len(head) > _MAX_HEAD:
            raise ProtocolError("hutchd's answer to the tunnel request has no end to its head")
    return bytes(head)


def _read_error_body(sock: socket.socket, headers: dict[str, str]) -> bytes:
    """An error answer's JSON: Content-Length bytes, or up to EOF (the answer closes)."""
    want = int(headers["content-length"]) if "content-length" in headers else None
    body = bytearray()
    while want is None or len(body) < want:
        block = sock.recv(_RELAY_BLOCK if want is None else want - len(body))
        if not block:
            break
        body += block
    return bytes(body)


def open_tunnel(transport: Transport, path: str, timeout: float | None) -> socket.socket:
    """The connection to hutchd once it answered `200` to `POST path`, in blocking mode; the
    hutch error of hutchd's code otherwise (`port_unreachable`, `sandbox_not_found`, ...)."""
    what = f"POST {path} to {transport.describe()}"
    try:
        sock = _connect(transport, timeout)
    except OSError as e:
        raise HutchConnectionError(f"{what}: {e}") from e
    try:
        head = [f"POST {transport._prefix}{path} HTTP/1.1", "Host: hutch", "Content-Length: 0"]
        if transport.token:
            head.append(f"Authorization: Bearer {transport.token}")
        sock.sendall(("\r\n".join(head) + "\r\n\r\n").encode())
        answer = _read_head(sock).decode("latin-1").split("\r\n")
        status_line = answer[0].split(" ", 2)
        if len(status_line) < 2 or not status_line[0].startswith("HTTP/"):
            raise ProtocolError(f"{what}: not an HTTP answer: {answer[0][:100]!r}")
        headers: dict[str, str] = {}
        for line in answer[1:]:
            name, _, value = line.partition(":")
            if name:
                headers[name.strip().lower()] = value.strip()
        status = int(status_line[1])
        if status != 200:
            raise error_for(status, _read_error_body(sock, headers), headers.get("x-request-id"))
        # From here on the bytes are the port's: waiting on them is the caller's business.
        sock.settimeout(None)
        return sock
    except BaseException as e:
        sock.close()
        if isinstance(e, (OSError, ValueError)) and not isinstance(e, HutchError):
            raise HutchConnectionError(f"{what}: {e}") from e
        raise


def _pump(source: socket.socket, sink: socket.socket) -> None:
    """Copies until `source` ends, then passes the EOF on as a half-close of `sink`."""
    try:
        while block := source.recv(_RELAY_BLOCK):
            sink.sendall(block)
    except OSError:
        # One side was reset or the forward is closing: end both directions.
        for sock in (source, sink):
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        return
    try:
        sink.shutdown(socket.SHUT_WR)
    except OSError:
        pass


class _Forwarded:
    """One accepted connection and its tunnel: a thread per direction, as each may block on a
    full peer while the other still has to flow (an echo server sending back a large upload)."""

    def __init__(self, forward: PortForward, client: socket.socket) -> None:
        self.forward = forward
        self.client = client
        self.tunnel: socket.socket | None = None
        self.thread = threading.Thread(target=self._run, name="hutch-port-forward-conn",
                                       daemon=True)

    def _run(self) -> None:
        try:
            try:
                self.tunnel = self.forward._open()
            except HutchError as e:
                self.forward.last_error = e
                return
            if self.forward._closing.is_set():
                return
            upstream = threading.Thread(target=_pump, args=(self.client, self.tunnel),
                                        name="hutch-port-forward-up", daemon=True)
            upstream.start()
            _pump(self.tunnel, self.client)
            upstream.join()
        finally:
            if self.tunnel is not None:
                self.tunnel.close()
            self.client.close()

    def abort(self) -> None:
        """Ends both directions (each pump's recv returns); the thread then closes the sockets."""
        for sock in (self.client, self.tunnel):
            if sock is not None:
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass


class PortForward:
    """A listener on `127.0.0.1:port` whose every connection is tunnelled to the sandbox's port
    (`hutch port-forward`). `close()` (or leaving `with`) stops listening, ends the connections
    in flight and joins every thread it started."""

    def __init__(self, transport: Transport, path: str, target: str, local_port: int,
                 timeout: float | None) -> None:
        self._transport = transport
        self._path = path
        self._timeout = timeout
        self.target = target
        self.last_error: HutchError | None = None
        """The error of the last connection whose tunnel could not be opened (it was closed)."""
        self._closing = threading.Event()
        self._lock = threading.Lock()
        self._connections: set[_Forwarded] = set()
        # A first tunnel before listening: a wrong id or a port with nothing behind it is an
        # error here, not a connection reset later.
        self._open().close()
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            self._listener.bind(("127.0.0.1", local_port))
            self._listener.listen(64)
        except OSError as e:
            self._listener.close()
            raise HutchConnectionError(f"listening on 127.0.0.1:{local_port}: {e}") from e
        self.port: int = self._listener.getsockname()[1]
        # A socket pair wakes the accept loop: closing a socket another thread waits on in
        # accept(2) does not wake it.
        self._wake_read, self._wake_write = socket.socketpair()
        self._acceptor = threading.Thread(target=self._accept_loop, name="hutch-port-forward",
                                          daemon=True)
        self._acceptor.start()

    @property
    def address(self) -> tuple[str, int]:
        return ("127.0.0.1", self.port)

    def __repr__(self) -> str:
        return f"PortForward(127.0.0.1:{self.port} -> {self.target})"

    def _open(self) -> socket.socket:
        return open_tunnel(self._transport, self._path, self._timeout)

    def _accept_loop(self) -> None:
        while True:
            readable, _, _ = select.select([self._listener, self._wake_read], [], [])
            if self._wake_read in readable:
                return
            try:
                client, _ = self._listener.accept()
            except OSError:
                continue
            connection = _Forwarded(self, client)
            with self._lock:
                # Ended connections are dropped here, not by their own threads: close() joins
                # every thread still in the set, so none outlives it.
                self._connections = {c for c in self._connections if c.thread.is_alive()}
                self._connections.add(connection)
            connection.thread.start()

    @property
    def connections(self) -> int:
        """Connections being forwarded now."""
        with self._lock:
            return sum(c.thread.is_alive() for c in self._connections)

    def close(self) -> None:
        if self._closing.is_set():
            return
        self._closing.set()
        self._wake_write.send(b"x")
        self._acceptor.join()
        self._listener.close()
        self._wake_read.close()
        self._wake_write.close()
        with self._lock:
            connections = list(self._connections)
        for connection in connections:
            connection.abort()
        for connection in connections:
            connection.thread.join()

    def __enter__(self) -> PortForward:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

