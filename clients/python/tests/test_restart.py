"""Reconnecting by pid across a hutchd restart: a daemon of this test's own (the suite's has
--destroy-on-exit), killed with SIGKILL while a background process writes, and started again on
the same state dir. The process handle made from the pid reads on from the last offset."""

from __future__ import annotations

import signal
import time

import hutch
from conftest import Daemon, build_dir


def test_a_background_process_is_reattached_after_a_restart() -> None:
    daemon = Daemon(build_dir())
    daemon.start(destroy_on_exit=False)
    try:
        with hutch.Client(daemon.socket) as client:
            sandbox = client.create()
            process = sandbox.spawn("for i in $(seq 1 20); do echo $i; sleep 0.05; done; exit 5")
            first = process.output()
        daemon.stop(signal.SIGKILL)
        time.sleep(0.3)
        daemon.start(destroy_on_exit=False)
        with hutch.Client(daemon.socket) as client:
            again = client.get(sandbox.id).process(process.pid)
            rest = b"".join(chunk.data for chunk in again.follow(offset=first.next_offset))
            assert first.data + rest == "".join(f"{i}\n" for i in range(1, 21)).encode()
            assert again.wait(timeout=20).exit_code == 5
            client.get(sandbox.id).delete(wait=True)
    finally:
        daemon.stop()
        daemon.cleanup()
