"""Raw TCP tunnels (`sandbox.tunnel`, `AsyncSandbox.tunnel`) and local port forwards
(`sandbox.port_forward`) against a real hutchd, to a TCP echo server running inside the sandbox."""

from __future__ import annotations

import asyncio
import os
import socket
import threading
import time
from collections.abc import Iterator

import pytest

import hutch
import hutch.aio
from conftest import Daemon

ECHO_PORT = 7000
BANNER_PORT = 7001
CLOSED_PORT = 7999

# Echoes every connection's bytes; at the client's EOF it answers "<eof>" and half-closes in turn,
# so a test sees that its half-close went through and that it can still read afterwards.
# With a banner it speaks first, as ssh does.
ECHO_SERVER = r"""
import socket, sys, threading
port = int(sys.argv[1])
banner = sys.argv[2].encode() if len(sys.argv) > 2 else b""
def serve(conn):
    try:
        with conn:
            if banner:
                conn.sendall(banner)
            while data := conn.recv(65536):
                conn.sendall(data)
            conn.sendall(b"<eof>")
            conn.shutdown(socket.SHUT_WR)
    except OSError:
        pass
listener = socket.create_server(("127.0.0.1", port))
while True:
    conn, _ = listener.accept()
    threading.Thread(target=serve, args=(conn,), daemon=True).start()
"""


@pytest.fixture(scope="module")
def servers(daemon: Daemon) -> Iterator[hutch.Sandbox]:
    """A sandbox running the echo server on ECHO_PORT and a banner-first one on BANNER_PORT."""
    with hutch.Client(daemon.socket) as client, client.create(labels={"suite": "tunnel"}) as sb:
        sb.files.write_text("/srv/echo.py", ECHO_SERVER)
        sb.spawn(["python3", "/srv/echo.py", str(ECHO_PORT)])
        sb.spawn(["python3", "/srv/echo.py", str(BANNER_PORT), "hello from inside\n"])
        for port in (ECHO_PORT, BANNER_PORT):
            deadline = time.monotonic() + 20
            while True:
                try:
                    sb.tunnel(port).close()
                    break
                except hutch.PortUnreachable:
                    assert time.monotonic() < deadline, f"the server on {port} did not listen"
                    time.sleep(0.05)
        yield sb


def _recv_all(sock: socket.socket) -> bytes:
    chunks = []
    while block := sock.recv(1 << 16):
        chunks.append(block)
    return b"".join(chunks)


def _echo(sock: socket.socket, payload: bytes) -> bytes:
    """Sends `payload` then a half-close from a thread while reading everything back (an echo
    of a large payload fills both directions' buffers: sending it all first would deadlock)."""
    def send() -> None:
        sock.sendall(payload)
        sock.shutdown(socket.SHUT_WR)

    sender = threading.Thread(target=send)
    sender.start()
    received = _recv_all(sock)
    sender.join()
    return received


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_tunnel_echoes_a_mebibyte_byte_exact_and_passes_the_half_close(
        servers: hutch.Sandbox) -> None:
    payload = os.urandom(1 << 20)
    with servers.tunnel(ECHO_PORT) as sock:
        assert sock.gettimeout() is None
        assert _echo(sock, payload) == payload + b"<eof>"


def test_tunnel_keeps_what_the_server_sent_first(servers: hutch.Sandbox) -> None:
    with servers.tunnel(BANNER_PORT) as sock:
        assert _echo(sock, b"ping") == b"hello from inside\nping<eof>"


def test_tunnel_errors_carry_hutchds_code(servers: hutch.Sandbox, daemon: Daemon) -> None:
    with pytest.raises(hutch.PortUnreachable) as closed:
        servers.tunnel(CLOSED_PORT)
    assert (closed.value.code, closed.value.status) == ("port_unreachable", 502)
    assert str(CLOSED_PORT) in closed.value.message and closed.value.request_id
    assert isinstance(closed.value, hutch.ServerError)
    with pytest.raises(hutch.BadRequest) as invalid:
        servers.tunnel(0)
    assert invalid.value.code == "invalid_port"
    with hutch.Client(daemon.socket) as client:
        gone = hutch.Sandbox(client, hutch.SandboxInfo.from_json({"id": "sb-000000000000"}))
        with pytest.raises(hutch.SandboxNotFound):
            gone.tunnel(ECHO_PORT)


def test_tunnel_over_tcp_with_the_bearer_token(servers: hutch.Sandbox, daemon: Daemon) -> None:
    with hutch.Client(url=daemon.url, token=daemon.token) as client:
        with client.get(servers.id).tunnel(ECHO_PORT) as sock:
            assert _echo(sock, b"over tcp") == b"over tcp<eof>"
    with hutch.Client(url=daemon.url, token="not-the-token") as client:
        sandbox = hutch.Sandbox(client, servers.info)
        with pytest.raises(hutch.Unauthorized):
            sandbox.tunnel(ECHO_PORT)


def test_async_tunnel_streams(servers: hutch.Sandbox, daemon: Daemon) -> None:
    payload = os.urandom(1 << 20)

    async def run() -> bytes:
        async with hutch.aio.AsyncClient(daemon.socket) as client:
            sandbox = await client.get(servers.id)
            with pytest.raises(hutch.PortUnreachable):
                await sandbox.tunnel(CLOSED_PORT)
            reader, writer = await sandbox.tunnel(BANNER_PORT)

            async def send() -> None:
                writer.write(payload)
                await writer.drain()
                writer.write_eof()

            sending = asyncio.create_task(send())
            echoed = await reader.read()
            await sending
            writer.close()
            await writer.wait_closed()
            return echoed

    assert asyncio.run(run()) == b"hello from inside\n" + payload + b"<eof>"


def test_port_forward_serves_plain_sockets_and_closes_everything(
        servers: hutch.Sandbox) -> None:
    threads, fds = threading.active_count(), _open_fds()
    with servers.port_forward(ECHO_PORT) as forward:
        assert forward.port > 0 and forward.address == ("127.0.0.1", forward.port)
        payload = os.urandom(1 << 20)
        with socket.create_connection(forward.address, timeout=30) as plain:
            assert _echo(plain, payload) == payload + b"<eof>"
        # Several at once, each its own tunnel.
        results: dict[int, bytes] = {}

        def one(i: int) -> None:
            with socket.create_connection(forward.address, timeout=30) as s:
                results[i] = _echo(s, f"client {i}".encode() * 1000)

        clients = [threading.Thread(target=one, args=(i,)) for i in range(8)]
        for c in clients:
            c.start()
        for c in clients:
            c.join()
        assert results == {i: f"client {i}".encode() * 1000 + b"<eof>" for i in range(8)}
        # One left open when the forward closes: closing ends it rather than waiting for it.
        lingering = socket.create_connection(forward.address, timeout=30)
        lingering.sendall(b"still here")
        assert lingering.recv(100) == b"still here"
        port = forward.port
    with lingering:
        assert _recv_all(lingering) == b""
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port), timeout=5).close()
    assert threading.active_count() == threads
    assert _open_fds() <= fds
    assert forward.last_error is None


def test_port_forward_to_a_closed_port_fails_at_once(servers: hutch.Sandbox) -> None:
    threads = threading.active_count()
    with pytest.raises(hutch.PortUnreachable):
        servers.port_forward(CLOSED_PORT)
    assert threading.active_count() == threads


def test_port_forward_reports_a_tunnel_that_failed_later(daemon: Daemon) -> None:
    with hutch.Client(daemon.socket) as client:
        sandbox = client.create(labels={"suite": "tunnel-gone"})
        sandbox.files.write_text("/srv/echo.py", ECHO_SERVER)
        sandbox.spawn(["python3", "/srv/echo.py", str(ECHO_PORT)])
        deadline = time.monotonic() + 20
        while True:
            try:
                forward = sandbox.port_forward(ECHO_PORT)
                break
            except hutch.PortUnreachable:
                assert time.monotonic() < deadline
                time.sleep(0.05)
        with forward:
            sandbox.delete(wait=True)
            with socket.create_connection(forward.address, timeout=30) as plain:
                assert _recv_all(plain) == b""
            assert isinstance(forward.last_error, hutch.SandboxNotFound)
