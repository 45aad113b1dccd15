"""The Deep Agents 0.7 backend protocol served by hutchd's native routes."""

from __future__ import annotations

import asyncio
import base64
import inspect
import subprocess
import sys
from pathlib import Path

import pytest

import hutch
from hutch.deepagents import HAVE_DEEPAGENTS, HutchBackend


@pytest.fixture()
def backend(client: hutch.Client):
    with HutchBackend.create(client, labels={"suite": "deepagents"}) as b:
        yield b


def test_identity_and_lifecycle(client: hutch.Client) -> None:
    backend = HutchBackend.create(client)
    assert backend.id.startswith("sb-")
    attached = HutchBackend.from_id(backend.id, client)
    attached.close()  # not the owner: the sandbox stays
    assert client.get(backend.id).id == backend.id
    backend.close()
    with pytest.raises(hutch.SandboxNotFound):
        client.get(backend.id)
    # deepagents drops `timeout` silently unless execute takes it as a keyword.
    parameter = inspect.signature(HutchBackend.execute).parameters["timeout"]
    assert parameter.kind is inspect.Parameter.KEYWORD_ONLY and parameter.default is None
    if HAVE_DEEPAGENTS:
        from deepagents.backends.protocol import SandboxBackendProtocol
        assert isinstance(backend, SandboxBackendProtocol)


def test_execute(backend: HutchBackend) -> None:
    result = backend.execute("echo out; echo err >&2; exit 3")
    assert (result.output, result.exit_code, result.truncated) == ("out\nerr\n", 3, False)
    assert backend.execute("cat <<EOF\nheredoc\nEOF").output == "heredoc\n"
    timed = backend.execute("sleep 30", timeout=1)
    assert timed.exit_code == 124


def test_write_read_windows(backend: HutchBackend) -> None:
    ten = "".join(f"line {i}\n" for i in range(1, 11))
    assert backend.write("/w/a.txt", ten).path == "/w/a.txt"
    whole = backend.read("/w/a.txt")
    assert whole.error is None and whole.file_data["encoding"] == "utf-8"
    assert whole.file_data["content"] == "\n".join(f"line {i}" for i in range(1, 11))
    window = (whole.start_line, whole.end_line, whole.total_lines, whole.next_offset)
    assert window == (1, 10, 10, None)
    page = backend.read("/w/a.txt", offset=2, limit=3)
    assert page.file_data["content"] == "line 3\nline 4\nline 5"
    assert (page.start_line, page.end_line, page.next_offset) == (3, 5, 5)
    past = backend.read("/w/a.txt", offset=50)
    assert past.error and "exceeds" in past.error
    assert "not found" in backend.read("/w/none.txt").error
    assert backend.read("/w/a.txt", limit=0).file_data["content"] == ""
    backend.write("/w/empty.txt", "")
    empty = backend.read("/w/empty.txt")
    assert empty.error is None and empty.file_data["content"] == "" and empty.start_line is None
    # write overwrites (0.7).
    backend.write("/w/a.txt", "new\n")
    assert backend.read("/w/a.txt").file_data["content"] == "new"


def test_binary_reads_are_exact_base64(backend: HutchBackend) -> None:
    payload = bytes(range(256)) + b"\xff\xfe\x00" * 100
    assert backend.upload_files([("/bin/blob.dat", payload)])[0].error is None
    result = backend.read("/bin/blob.dat")
    assert result.error is None and result.file_data["encoding"] == "base64"
    assert base64.b64decode(result.file_data["content"]) == payload
    assert backend.download_files(["/bin/blob.dat"])[0].content == payload


def test_edit_error_words(backend: HutchBackend) -> None:
    backend.write("/e.txt", "alpha beta alpha")
    ok = backend.edit("/e.txt", "beta", "gamma")
    assert (ok.error, ok.path, ok.occurrences) == (None, "/e.txt", 1)
    assert "not found" in backend.edit("/e.txt", "delta", "x").error.lower()
    assert "multiple" in backend.edit("/e.txt", "alpha", "x").error.lower()
    assert "not found" in backend.edit("/missing.txt", "a", "b").error.lower()
    everywhere = backend.edit("/e.txt", "alpha", "omega", replace_all=True)
    assert everywhere.occurrences == 2
    assert backend.read("/e.txt").file_data["content"] == "omega gamma omega"


def test_ls_grep_glob_delete(backend: HutchBackend) -> None:
    backend.write("/p/src/m.py", "def f():\n    return 'needle'\n")
    backend.write("/p/src/n.txt", "needle in text\n")
    backend.write("/p/.hidden/h.py", "needle\n")
    listing = backend.ls("/p/src")
    assert listing.error is None
    assert [(e["path"], e["is_dir"]) for e in listing.entries] == [
        ("/p/src/m.py", False), ("/p/src/n.txt", False)]
    assert [e["path"] for e in backend.ls("/p").entries] == ["/p/.hidden/", "/p/src/"]
    assert backend.ls("/nope").error
    grep = backend.grep("'needle'", "/p")
    assert grep.error is None
    assert [(m["path"], m["line"]) for m in grep.matches] == [("/p/src/m.py", 2)]
    assert [m["path"] for m in backend.grep("needle", "/p/src", glob="*.txt").matches] == [
        "/p/src/n.txt"]
    capped = backend.grep("needle", "/p", max_count=1)
    assert len(capped.matches) == 1 and capped.truncated
    assert [m["path"] for m in backend.glob("**/*.py", "/p").matches] == ["/p/src/m.py"]
    assert [m["path"] for m in backend.glob("*.txt", "/p").matches] == ["/p/src/n.txt"]
    assert backend.delete("/p/src").path == "/p/src"
    assert backend.ls("/p/src").error
    assert "not found" in backend.delete("/p/src").error


def test_upload_download_partial_errors(backend: HutchBackend) -> None:
    big = bytes(range(256)) * (5 << 12)  # 5 MiB: goes alone, streamed
    uploads = backend.upload_files([("/u/a.bin", b"\x00a"), ("not/absolute", b"x"),
                                    ("/u/big.bin", big), ("/proc/forbidden", b"x")])
    assert [(u.path, u.error) for u in uploads] == [
        ("/u/a.bin", None), ("not/absolute", "invalid_path"), ("/u/big.bin", None),
        ("/proc/forbidden", "permission_denied")]
    downloads = backend.download_files(["/u/big.bin", "/u/none", "/u", "rel", "/u/a.bin"])
    assert [(d.path, d.error) for d in downloads] == [
        ("/u/big.bin", None), ("/u/none", "file_not_found"), ("/u", "is_directory"),
        ("rel", "invalid_path"), ("/u/a.bin", None)]
    assert downloads[0].content == big and downloads[4].content == b"\x00a"
    assert downloads[1].content is None


def test_async_twins(backend: HutchBackend) -> None:
    async def scenario() -> None:
        assert (await backend.awrite("/as/x.txt", "one two\n")).error is None
        assert (await backend.aread("/as/x.txt")).file_data["content"] == "one two"
        assert (await backend.aedit("/as/x.txt", "two", "2")).occurrences == 1
        assert [e["path"] for e in (await backend.als("/as")).entries] == ["/as/x.txt"]
        assert (await backend.agrep("one", "/as")).matches[0]["line"] == 1
        assert [m["path"] for m in (await backend.aglob("*.txt", "/as")).matches] == ["/as/x.txt"]
        assert (await backend.aexecute("cat /as/x.txt", timeout=10)).output == "one 2\n"
        up = await backend.aupload_files([("/as/b.bin", b"\x01\x02")])
        assert up[0].error is None
        down = await backend.adownload_files(["/as/b.bin"])
        assert down[0].content == b"\x01\x02"
        assert (await backend.adelete("/as")).error is None

    asyncio.run(scenario())


WITH_DEEPAGENTS = r"""
import base64, sys
sys.path[:0] = [sys.argv[1], sys.argv[2]]
import hutch
from deepagents.backends import protocol
from deepagents.backends.sandbox import BaseSandbox
from hutch.deepagents import HAVE_DEEPAGENTS, HutchBackend
assert HAVE_DEEPAGENTS
assert issubclass(HutchBackend, BaseSandbox)
with hutch.Client(sys.argv[3]) as client:
    backend = HutchBackend.from_id(sys.argv[4], client)
    backend.write("/da/t.txt", "a\nb\nc\n")
    backend.upload_files([("/da/b.bin", b"\xff\x00\xfe")])
    results = [backend.read("/da/t.txt"), backend.read("/da/t.txt", 1, 1),
               backend.read("/da/t.txt", 9), backend.read("/da/t.txt", 0, 0),
               backend.read("/da/none"), backend.read("/da/b.bin")]
    assert all(type(r) is protocol.ReadResult for r in results)
    second = results[1]
    assert (second.file_data["content"], second.start_line, second.next_offset) == ("b", 2, 2)
    assert base64.b64decode(results[5].file_data["content"]) == b"\xff\x00\xfe"
    assert type(backend.execute("true")) is protocol.ExecuteResponse
    assert type(backend.ls("/da")) is protocol.LsResult
    assert type(backend.edit("/da/t.txt", "zz", "y")) is protocol.EditResult
    assert type(backend.upload_files([("/da/c", b"")])[0]) is protocol.FileUploadResponse
print("ok")
"""


def test_subclasses_base_sandbox_when_deepagents_is_installed(daemon, sandbox) -> None:
    # deepagents' shapes (a stand-in package: no PyPI here) in a process of their own; its
    # ReadResult refuses inconsistent windows, as deepagents' does.
    tests = Path(__file__).resolve().parent
    run = subprocess.run([sys.executable, "-c", WITH_DEEPAGENTS, str(tests / "stub_deepagents"),
                          str(tests.parent / "src"), daemon.socket, sandbox.id],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0 and run.stdout == "ok\n", run.stderr
