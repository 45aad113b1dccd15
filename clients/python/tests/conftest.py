"""Starts a real hutchd for the suite (as tests/daemon/daemon_fixture.cc does for the C++ tests):
a temp dir with its unix socket and state dir, the binaries of HUTCH_BUILD_DIR (default
<repo>/build), --destroy-on-exit so nothing outlives the run.

hutchd runs sandboxes as root; without root or without the built binaries the suite stops with
the reason and exit status 77 (skipped, for ctest), unless HUTCH_MUST_WORK=1 (CI): then 1.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO / "clients" / "python" / "src"))

import hutch  # noqa: E402


def _unavailable(reason: str) -> None:
    # The whole session ends: exit status 77 is what ctest counts as skipped (SKIP_RETURN_CODE),
    # so a host that cannot run the suite never reports it passed.
    if os.environ.get("HUTCH_MUST_WORK") == "1":
        pytest.exit(f"HUTCH_MUST_WORK=1 but {reason}", returncode=1)
    pytest.exit(f"SKIPPING the hutch Python client suite: {reason}", returncode=77)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Daemon:
    def __init__(self, build_dir: Path) -> None:
        self.binary = build_dir / "daemon" / "hutchd"
        # Short: the state dir's sockets must fit in 107 bytes (docs/api.md).
        self.dir = Path(tempfile.mkdtemp(prefix="hutch-py-", dir="/tmp"))
        # Recipe bakes bind their directory from inside a user namespace: it must be traversable.
        os.chmod(self.dir, 0o711)
        self.socket = str(self.dir / "d.sock")
        self.state_dir = self.dir / "state"
        self.log_path = self.dir / "hutchd.log"
        self.token = "python-suite-token-0123456789"
        self.token_file = self.dir / "token"
        self.token_file.write_text(self.token + "\n")
        os.chmod(self.token_file, 0o600)
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self, *extra: str, destroy_on_exit: bool = True) -> None:
        log = open(self.log_path, "ab")
        self.process = subprocess.Popen(
            [str(self.binary), "--socket", self.socket, "--state-dir", str(self.state_dir),
             "--log-level", "debug", *(["--destroy-on-exit"] if destroy_on_exit else []),
             "--listen", f"127.0.0.1:{self.port}", "--token-file", str(self.token_file), *extra],
            stdout=subprocess.DEVNULL, stderr=log)
        log.close()
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"hutchd exited with {self.process.returncode}:\n{self.log()}")
            try:
                with hutch.Client(self.socket) as client:
                    client.health()
                return
            except hutch.HutchError:
                time.sleep(0.02)
        raise RuntimeError(f"hutchd did not answer within 15 s:\n{self.log()}")

    def stop(self, sig: int = signal.SIGTERM) -> int:
        if self.process is None:
            return 0
        self.process.send_signal(sig)
        try:
            code = self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            code = self.process.wait()
        self.process = None
        return code

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def cleanup(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)


def build_dir() -> Path:
    """The build with hutchd and its zygote (the suite stops when there is none)."""
    if os.geteuid() != 0:
        _unavailable("hutchd creates real sandboxes and needs root")
    build = Path(os.environ.get("HUTCH_BUILD_DIR") or REPO / "build")
    for binary in ("daemon/hutchd", "daemon/hutchd-zygote"):
        if not os.access(build / binary, os.X_OK):
            _unavailable(f"{build / binary} is not built (set HUTCH_BUILD_DIR)")
    return build


@pytest.fixture(scope="session")
def daemon() -> Iterator[Daemon]:
    d = Daemon(build_dir())
    d.start()
    yield d
    code = d.stop()
    if code != 0:
        print(d.log(), file=sys.stderr)
    d.cleanup()
    assert code == 0, f"hutchd exited with {code}"


@pytest.fixture()
def client(daemon: Daemon) -> Iterator[hutch.Client]:
    with hutch.Client(daemon.socket) as c:
        yield c


@pytest.fixture()
def sandbox(client: hutch.Client) -> Iterator[hutch.Sandbox]:
    with client.create(labels={"suite": "python"}) as sb:
        yield sb
