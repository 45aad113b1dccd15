"""Sandboxes, exec, background processes, errors and the transport against a real hutchd."""

from __future__ import annotations

import os
import threading
import time
import uuid

import pytest

import hutch


def unique_labels() -> dict[str, str]:
    return {"test": uuid.uuid4().hex[:12]}


# ---- daemon ----

def test_health_metrics_pools(client: hutch.Client) -> None:
    health = client.health()
    assert health.status == "ok"
    assert health.sandboxes >= 0
    before = client.metric_values()["hutch_requests_total"]
    client.health()
    after = client.metric_values()
    assert after["hutch_requests_total"] > before
    assert 'hutch_sandboxes{state="running"}' in after
    assert "hutch_create_seconds_count" in client.metrics()
    assert client.pools() == []


def test_tcp_needs_the_token(daemon, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HUTCH_URL", daemon.url)
    monkeypatch.delenv("HUTCH_SOCKET", raising=False)
    monkeypatch.setenv("HUTCH_TOKEN", daemon.token)
    with hutch.Client() as client:
        assert client.transport.describe() == daemon.url
        assert client.health().status == "ok"
        assert client.list(unique_labels()) == []
    with hutch.Client(url=daemon.url, token="not-the-token-at-all") as client:
        with pytest.raises(hutch.Unauthorized) as caught:
            client.list()
    assert caught.value.status == 401
    # Refused before routing (the connection closes): hutchd gives such an answer no request id.
    assert caught.value.code == "unauthorized"


def test_socket_from_environment(daemon, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HUTCH_URL", raising=False)
    monkeypatch.setenv("HUTCH_SOCKET", daemon.socket)
    with hutch.Client() as client:
        assert client.transport.describe() == daemon.socket
        assert client.health().status == "ok"


def test_unreachable_daemon_is_a_connection_error(tmp_path) -> None:
    with hutch.Client(str(tmp_path / "nothing.sock")) as client:
        with pytest.raises(hutch.HutchConnectionError):
            client.health()


def test_keep_alive_reuses_one_connection_and_reconnects(client: hutch.Client) -> None:
    client.health()
    assert len(client.transport._idle) == 1
    first = client.transport._idle[0][0]
    for _ in range(5):
        client.health()
    assert [conn for conn, _ in client.transport._idle] == [first]
    # hutchd closes idle connections (after 5 s): a closed socket under a pooled connection
    # must cost a reconnect, not an error.
    first.sock.shutdown(2)
    assert client.health().status == "ok"
    assert [conn is first for conn, _ in client.transport._idle] == [False]


def test_connection_closed_by_hutchd_when_idle_is_reopened(
        sandbox: hutch.Sandbox, monkeypatch: pytest.MonkeyPatch) -> None:
    import hutch._transport
    # Keep the pooled connection past hutchd's 5 s keep-alive limit, so hutchd has closed it.
    monkeypatch.setattr(hutch._transport, "_MAX_IDLE_SECONDS", 60.0)
    transport = sandbox.client.transport
    assert sandbox.exec("echo one").stdout == "one\n"
    stale = transport._idle[0][0]
    time.sleep(5.5)
    assert sandbox.exec("echo two").stdout == "two\n"
    assert [conn is stale for conn, _ in transport._idle] == [False]


def test_concurrent_requests_from_threads(client: hutch.Client) -> None:
    errors: list[BaseException] = []

    def worker() -> None:
        try:
            for _ in range(10):
                assert client.health().status == "ok"
        except BaseException as e:  # noqa: BLE001 - reported by the assertion below
            errors.append(e)

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


# ---- sandboxes ----

def test_create_get_list_delete(client: hutch.Client) -> None:
    labels = unique_labels()
    sb = client.create(labels=labels, env={"GREETING": "hello"}, hostname="py-box",
                       idle_ttl_seconds=300, default_timeout_seconds=120)
    try:
        assert sb.id.startswith("sb-")
        assert sb.info.state == "running"
        assert sb.info.labels == labels
        assert sb.info.hostname == "py-box"
        assert sb.info.init_pid and os.path.exists(f"/proc/{sb.info.init_pid}")
        got = client.get(sb.id)
        assert got.info.env == {"GREETING": "hello"}
        assert got.info.default_timeout_seconds == 120
        assert [s.id for s in client.list(labels)] == [sb.id]
        assert client.list({"test": "no-such-label-value"}) == []
        assert sb.exec("echo $GREETING; hostname").stdout == "hello\npy-box\n"
    finally:
        sb.delete(wait=True)
    assert not os.path.exists(f"/proc/{sb.info.init_pid}/root/proc")
    with pytest.raises(hutch.SandboxNotFound):
        client.get(sb.id)
    sb.delete()  # idempotent


def test_context_manager_deletes(client: hutch.Client) -> None:
    with client.create() as sb:
        sandbox_id = sb.id
        assert sb.exec(["true"]).ok
    with pytest.raises(hutch.SandboxNotFound):
        client.get(sandbox_id)


def test_get_or_create_by_labels(client: hutch.Client) -> None:
    labels = unique_labels()
    first = client.get_or_create(labels, hostname="first")
    try:
        again = client.get_or_create(labels, hostname="second")
        assert again.id == first.id
        assert again.info.hostname == "first"
    finally:
        first.delete()
    fresh = client.get_or_create(labels)
    try:
        assert fresh.id != first.id
    finally:
        fresh.delete()


def test_pause_resume_and_logs(sandbox: hutch.Sandbox) -> None:
    assert sandbox.pause().info.state == "paused"
    with pytest.raises(hutch.SandboxPaused) as caught:
        sandbox.exec("true")
    assert caught.value.status == 409
    assert caught.value.code == "sandbox_paused"
    with pytest.raises(hutch.SandboxPaused):
        sandbox.stream("true")
    assert sandbox.files.read_bytes("/etc/hostname")  # file operations still work
    assert sandbox.refresh().info.state == "paused"
    assert sandbox.resume().info.state == "running"
    assert sandbox.exec("echo back").stdout == "back\n"
    events = [e["event"] for e in sandbox.logs()]
    assert "created" in events and "paused" in events and "resumed" in events
    assert "exec_ended" in events


# ---- exec ----

def test_exec_results(sandbox: hutch.Sandbox) -> None:
    result = sandbox.exec(["/bin/sh", "-c", "echo out; echo err >&2; exit 3"])
    assert (result.stdout, result.stderr, result.exit_code) == ("out\n", "err\n", 3)
    assert not result.ok and not result.timed_out
    assert result.output == "out\nerr\n"
    assert sandbox.exec("pwd", workdir="/tmp").stdout == "/tmp\n"
    assert sandbox.exec("echo $A$B", env={"A": "x", "B": "y"}).stdout == "xy\n"
    assert sandbox.exec("cat", stdin="piped\n").stdout == "piped\n"
    assert sandbox.exec("wc -c", stdin=b"12345").stdout.strip() == "5"
    missing = sandbox.exec(["/no/such/binary"])
    assert missing.exit_code == 127 and missing.start_error
    big = sandbox.exec("head -c 100000 /dev/zero | tr '\\0' a", max_output_bytes=1000)
    assert big.truncated and len(big.stdout) == 1000


def test_exec_check_raises_with_the_result(sandbox: hutch.Sandbox) -> None:
    assert sandbox.exec("true", check=True).ok
    with pytest.raises(hutch.CommandError) as caught:
        sandbox.exec("echo nope >&2; exit 7", check=True)
    assert caught.value.exit_code == 7
    assert caught.value.result.stderr == "nope\n"
    assert caught.value.argv == ["/bin/sh", "-c", "echo nope >&2; exit 7"]


def test_exec_timeout_kills_the_tree(sandbox: hutch.Sandbox) -> None:
    started = time.monotonic()
    result = sandbox.exec("sleep 100 & sleep 100", timeout=1)
    assert result.timed_out and result.exit_code == 124
    assert time.monotonic() - started < 30
    assert sandbox.exec("pgrep -x sleep || echo none").stdout == "none\n"


def test_exec_aliases(sandbox: hutch.Sandbox) -> None:
    result = sandbox.exec_bash('echo "$0:$1:$2"', ["a", "b c"])
    assert result.stdout == "bash:a:b c\n"
    assert sandbox.exec_python("import sys; print(sys.argv[1:])", ["x"]).stdout == "['x']\n"
    with pytest.raises(hutch.CommandError):
        sandbox.exec_bash("exit 4", check=True)


def test_exec_bad_input_is_a_bad_request(sandbox: hutch.Sandbox) -> None:
    with pytest.raises(hutch.BadRequest) as caught:
        sandbox.exec([])
    assert caught.value.status == 400 and caught.value.code == "bad_request"
    assert caught.value.request_id and caught.value.request_id.startswith("r")
    with pytest.raises(hutch.BadRequest):
        sandbox.exec("true", env={"BAD-KEY": "x"})
    with pytest.raises(hutch.BadRequest):
        sandbox.exec("true", timeout=-1)
    with pytest.raises(ValueError):
        sandbox.exec("cat", stdin=b"\xff\xfe")


def test_stream_iterator(sandbox: hutch.Sandbox) -> None:
    with sandbox.stream("echo one; sleep 0.2; echo two >&2; echo three; exit 2") as events:
        seen = [(e.stream, e.data) for e in events]
    assert "".join(d for s, d in seen if s == "stdout") == "one\nthree\n"
    assert "".join(d for s, d in seen if s == "stderr") == "two\n"
    assert events.result is not None and events.result.exit_code == 2


def test_stream_delivers_output_as_it_happens(sandbox: hutch.Sandbox) -> None:
    arrivals: list[float] = []
    started = time.monotonic()
    result = sandbox.exec("echo early; sleep 1.5; echo late",
                          on_stdout=lambda data: arrivals.append(time.monotonic() - started))
    assert result.exit_code == 0 and result.stdout == ""
    assert len(arrivals) == 2
    assert arrivals[1] - arrivals[0] > 1.0


def test_stream_callbacks_and_check(sandbox: hutch.Sandbox) -> None:
    out: list[str] = []
    err: list[str] = []
    result = sandbox.exec("echo a; echo b >&2", on_stdout=out.append, on_stderr=err.append)
    assert "".join(out) == "a\n" and "".join(err) == "b\n" and result.ok
    with pytest.raises(hutch.CommandError):
        sandbox.exec("exit 5", on_stdout=out.append, check=True)


def test_closing_a_stream_kills_the_command(sandbox: hutch.Sandbox) -> None:
    stream = sandbox.stream("while true; do echo tick; sleep 0.05; done")
    for event in stream:
        assert event.data.startswith("tick")
        break
    stream.close()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        # "[e]cho tick" does not match the command line of the sh running this pgrep.
        if sandbox.exec("pgrep -f '[e]cho tick' || echo none").stdout == "none\n":
            break
        time.sleep(0.1)
    else:
        pytest.fail("the streamed command outlived its closed stream")


# ---- background processes ----

def test_background_stdin_output_wait(sandbox: hutch.Sandbox) -> None:
    proc = sandbox.spawn(["cat"], stdin="first\n")
    assert proc.pid > 0 and proc.last_status and proc.last_status.running
    assert proc.write_stdin("second\n") == 7
    assert proc.write_stdin(b"\x00\xffthird\n") == 8
    proc.close_stdin()
    status = proc.wait(timeout=30)
    assert status.state == "exited" and status.exit_code == 0
    assert proc.read_all() == b"first\nsecond\n\x00\xffthird\n"
    with pytest.raises(hutch.Conflict) as caught:
        proc.write_stdin("late")
    assert caught.value.code == "conflict"
    assert [p.pid for p in sandbox.processes()] == [proc.pid]


def test_background_output_offsets_and_follow(sandbox: hutch.Sandbox) -> None:
    proc = sandbox.spawn("for i in 1 2 3 4 5; do echo line$i; sleep 0.1; done; echo bad >&2")
    chunks = list(proc.follow())
    data = b"".join(c.data for c in chunks)
    assert data == b"".join(b"line%d\n" % i for i in range(1, 6))
    assert proc.status().state == "exited"
    assert [c.offset for c in chunks][1:] == [c.next_offset for c in chunks][:-1]
    part = proc.output(offset=6, limit=6)
    assert (part.data, part.offset, part.next_offset) == (b"line2\n", 6, 12)
    assert proc.output("stderr").data == b"bad\n"
    resumed = b"".join(c.data for c in proc.follow(offset=24))
    assert resumed == b"line5\n"


def test_reconnect_to_a_process_by_pid(daemon, sandbox: hutch.Sandbox) -> None:
    proc = sandbox.spawn("echo started; sleep 1; echo finished")
    with hutch.Client(daemon.socket) as other:
        again = other.get(sandbox.id).process(proc.pid)
        assert again.status().argv == ["/bin/sh", "-c", "echo started; sleep 1; echo finished"]
        assert again.read_all() == b"started\nfinished\n"
        assert again.wait().exit_code == 0
        with pytest.raises(hutch.ProcessNotFound) as caught:
            other.get(sandbox.id).process(99999)
        assert caught.value.status == 404


def test_signals_and_kill_tree(sandbox: hutch.Sandbox) -> None:
    proc = sandbox.spawn(["sleep", "100"])
    proc.signal("TERM")
    status = proc.wait(timeout=20)
    assert status.state == "exited" and status.term_signal == 15
    tree = sandbox.spawn("sleep 200 & sleep 200 & wait")
    assert tree.wait(timeout=0.5).running
    tree.kill_tree()
    assert not tree.wait(timeout=20).running
    deadline = time.monotonic() + 10
    while sandbox.exec("pgrep -x sleep || echo none").stdout != "none\n":
        assert time.monotonic() < deadline, "kill_tree left descendants"
        time.sleep(0.1)
    with pytest.raises(hutch.BadRequest):
        proc.signal("NOT_A_SIGNAL")
    killed = sandbox.spawn(["sleep", "100"])
    killed.kill()
    assert killed.wait(timeout=20).term_signal == 9
    assert sandbox.process(killed.pid).last_status.state == "exited"


# ---- hostile ids ----

@pytest.mark.parametrize("bad_id, status, code", [
    ("sb-000000000000", 404, "sandbox_not_found"),
    ("../../v1/health", 404, "not_found"),
    ("x" * 300, 404, "sandbox_not_found"),
    ("%00", 405, "method_not_allowed"),
])
def test_bad_sandbox_ids(client: hutch.Client, bad_id: str, status: int, code: str) -> None:
    # The id is sent percent-encoded: it can never reach another route.
    with pytest.raises(hutch.HutchError) as caught:
        client.get(bad_id)
    assert (caught.value.status, caught.value.code) == (status, code)
    with pytest.raises(hutch.HutchError):
        client.get(bad_id).exec("true")


def test_errors_carry_the_request_id(client: hutch.Client) -> None:
    with pytest.raises(hutch.SandboxNotFound) as first:
        client.get("sb-000000000000")
    with pytest.raises(hutch.SandboxNotFound) as second:
        client.get("sb-000000000000")
    assert first.value.request_id and second.value.request_id
    assert first.value.request_id != second.value.request_id
    assert "sb-000000000000" in first.value.message
    assert f"request={first.value.request_id}" in str(first.value)


def _wait_for(pty: hutch.Pty, text: bytes) -> bytes:
    deadline = time.monotonic() + 10
    while text not in (screen := pty.output().data) and time.monotonic() < deadline:
        time.sleep(0.02)
    return screen


def test_pty_terminal_size_resize_input_and_exit(sandbox: hutch.Sandbox) -> None:
    term = sandbox.pty("trap 'stty size' WINCH; stty size; while :; do sleep 0.05; done",
                       cols=90, rows=20)
    assert isinstance(term, hutch.Process)
    assert b"20 90\r\n" in _wait_for(term, b"20 90\r\n")
    assert term.resize(100, 30).running
    assert b"30 100\r\n" in _wait_for(term, b"30 100\r\n")
    listed = sandbox.ptys()
    assert [p.pid for p in listed] == [term.pid] and isinstance(listed[0], hutch.Pty)
    assert listed[0].last_status is not None and listed[0].last_status.running
    assert term.close().term_signal == 9

    shell = sandbox.pty("read line; echo got:$line; exit 4")
    assert shell.write("hello\r") == 6
    assert shell.wait(timeout=10).exit_code == 4
    assert b"got:hello\r\n" in shell.output().data
    with pytest.raises(hutch.HutchError) as caught:
        shell.write("late")
    assert caught.value.status == 409
    with pytest.raises(hutch.HutchError) as caught:
        sandbox.pty(cols=0)
    assert caught.value.status == 400
