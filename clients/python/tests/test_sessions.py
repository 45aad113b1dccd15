"""Sessions, watch, network policy, secrets and mounts through the client, against a real hutchd."""

from __future__ import annotations

import threading
import time

import pytest

import hutch


def test_session_keeps_cwd_and_exports(sandbox: hutch.Sandbox) -> None:
    with sandbox.session("build", env={"BASE": "b"}) as session:
        assert session.name == "build"
        session.exec("mkdir -p /tmp/work && cd /tmp/work && export A=1", check=True)
        result = session.exec('pwd; echo "$A $BASE"', check=True)
        assert result.stdout == "/tmp/work\n1 b\n"
        assert [s.name for s in sandbox.sessions()] == ["build"]
        lines: list[str] = []
        session.exec("echo streamed", on_stdout=lines.append, check=True)
        assert "".join(lines) == "streamed\n"
    assert sandbox.sessions() == []
    with pytest.raises(hutch.NotFound) as caught:
        hutch.Session(sandbox, "build").exec("true")
    assert caught.value.code == "session_not_found"


def test_session_names_are_generated_and_checked(sandbox: hutch.Sandbox) -> None:
    first, second = sandbox.session(), sandbox.session()
    assert first.name != second.name and first.name and second.name
    with pytest.raises(hutch.BadRequest) as bad:
        sandbox.session("../x")
    assert bad.value.code == "invalid_session_name"
    with pytest.raises(hutch.Conflict) as taken:
        sandbox.session(first.name)
    assert taken.value.code == "session_exists"


def test_a_busy_session_refuses_a_second_command(sandbox: hutch.Sandbox) -> None:
    session = sandbox.session("busy")
    marker = "/tmp/busy-started"
    finished: list[hutch.ExecResult] = []
    runner = threading.Thread(
        target=lambda: finished.append(session.exec(f"touch {marker}; sleep 2; echo done")))
    runner.start()
    deadline = time.monotonic() + 10
    while not sandbox.files.exists(marker):
        assert time.monotonic() < deadline, "the first command never started"
        time.sleep(0.02)
    with pytest.raises(hutch.Conflict) as caught:
        session.exec("true")
    assert caught.value.code == "session_busy"
    runner.join(30)
    assert finished and finished[0].stdout == "done\n"


def test_session_timeout_exits_124_and_the_session_goes_on(sandbox: hutch.Sandbox) -> None:
    session = sandbox.session()
    assert session.exec("cd /tmp; sleep 30", timeout=1).exit_code == 124
    assert session.exec("pwd").stdout != "/tmp\n"  # a timed-out command's state is not kept
    assert session.exec("echo ok").stdout == "ok\n"


def test_watch_sees_writes_from_inside_and_resumes(sandbox: hutch.Sandbox) -> None:
    sandbox.files.mkdir("/tmp/w")
    stream = sandbox.watch("/tmp/w", recursive=True)
    events = iter(stream)
    sandbox.exec("echo a > /tmp/w/a.txt && mkdir /tmp/w/sub && echo b > /tmp/w/sub/b.txt",
                 check=True)
    seen: list[hutch.WatchEvent] = []
    while not any(e.path == "/tmp/w/sub/b.txt" and e.event == "create" for e in seen):
        seen.append(next(events))
    stream.close()
    assert any(e.event == "create" and e.path == "/tmp/w/a.txt" and not e.is_dir for e in seen)
    assert any(e.event == "create" and e.path == "/tmp/w/sub" and e.is_dir for e in seen)
    assert [e.seq for e in seen] == sorted(e.seq for e in seen)
    assert stream.last_seq == seen[-1].seq

    sandbox.exec("mv /tmp/w/a.txt /tmp/w/c.txt", check=True)
    resumed = iter(sandbox.watch("/tmp/w", recursive=True, since=stream.last_seq))
    moved = next(e for e in resumed if e.event == "move")
    assert (moved.from_path, moved.path) == ("/tmp/w/a.txt", "/tmp/w/c.txt")
    assert moved.seq > seen[-1].seq


@pytest.mark.parametrize("path, error", [("/proc", hutch.PermissionDenied),
                                         ("/no/such/dir", hutch.FileNotFound),
                                         ("/etc/hostname", hutch.NotADirectory)])
def test_watch_refuses_what_it_cannot_watch(sandbox: hutch.Sandbox, path: str,
                                            error: type[hutch.HutchError]) -> None:
    with pytest.raises(error):
        iter(sandbox.watch(path)).__next__()


def test_network_policy_and_log(client: hutch.Client) -> None:
    policy = {"mode": "filtered", "allow": ["allowed.test"]}
    with client.create(network=policy) as sandbox:
        state = sandbox.network()
        assert (state.mode, state.allow, state.error) == ("filtered", ["allowed.test"], None)
        assert state.stats is not None and state.ca_pem and "BEGIN CERTIFICATE" in state.ca_pem
        lookup = sandbox.exec_python("import socket\ntry:\n socket.getaddrinfo('denied.test', 80)\n"
                                     " print('resolved')\nexcept OSError:\n print('refused')")
        assert lookup.stdout == "refused\n"
        denied = [line for line in sandbox.network_log() if line.get("name") == "denied.test"]
        assert denied and not denied[0]["allowed"] and denied[0]["protocol"] == "dns"

        changed = sandbox.set_network({"mode": "open", "deny": ["denied.test"]})
        assert (changed.mode, changed.deny) == ("open", ["denied.test"])
        assert sandbox.network().mode == "open"
        with pytest.raises(hutch.Conflict) as fixed:
            sandbox.set_network("loopback")
        assert fixed.value.code == "network_mode_fixed"
    with client.create() as plain:
        assert plain.network().stats is None


def test_secrets_are_write_only(client: hutch.Client) -> None:
    client.set_secret("PY_SUITE_TOKEN", "s3cret-value")
    try:
        listed = {s.name: s for s in client.secrets()}
        assert listed["PY_SUITE_TOKEN"].source == "api"
        assert "s3cret-value" not in repr(client.secrets())
    finally:
        client.delete_secret("PY_SUITE_TOKEN")
    assert "PY_SUITE_TOKEN" not in {s.name for s in client.secrets()}
    with pytest.raises(hutch.NotFound) as missing:
        client.delete_secret("PY_SUITE_TOKEN")
    assert missing.value.code == "secret_not_found"
    with pytest.raises(hutch.BadRequest) as bad:
        client.set_secret("bad name", "x")
    assert bad.value.code == "bad_secret"


def test_mounts_reach_hutchd(client: hutch.Client, tmp_path) -> None:
    # The suite's hutchd has no --mount-root: every mount is refused, naming the source.
    with pytest.raises(hutch.BadRequest) as refused:
        client.create(mounts=[{"source": str(tmp_path), "target": "/skills", "readonly": True}])
    assert refused.value.code == "mount_source_refused"
    assert str(tmp_path) in str(refused.value)


def test_ports_proxy_and_port_tokens(daemon, sandbox: hutch.Sandbox) -> None:
    import urllib.error
    import urllib.request

    sandbox.files.write_text("/tmp/site/index.html", "served from inside")
    sandbox.spawn(["python3", "-m", "http.server", "8000", "--bind", "127.0.0.1"],
                  workdir="/tmp/site")
    deadline = time.monotonic() + 20
    while True:
        try:
            status, body = sandbox.port_request(8000, "/index.html")
            break
        except hutch.HutchError as e:
            assert e.code == "port_unreachable" and time.monotonic() < deadline, e
            time.sleep(0.05)
    assert (status, body) == (200, b"served from inside")

    token = sandbox.port_token(8000, ttl_seconds=60)
    assert token.token and token.token.startswith("hpt_") and token.port == 8000
    assert [t.id for t in sandbox.port_tokens(8000)] == [token.id]
    assert sandbox.port_tokens(8000)[0].token is None  # the value is shown once
    url = f"{daemon.url}/v1/sandboxes/{sandbox.id}/ports/8000/index.html"
    with urllib.request.urlopen(urllib.request.Request(
            url, headers={"X-Hutch-Port-Token": token.token}), timeout=10) as answer:
        assert answer.read() == b"served from inside"
    sandbox.revoke_port_token(8000, token.id)
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(urllib.request.Request(
            url, headers={"X-Hutch-Port-Token": token.token}), timeout=10)
    assert refused.value.code == 401
    with pytest.raises(hutch.NotFound):
        sandbox.revoke_port_token(8000, token.id)
