"""Files through hutchd: bytes and text, streamed transfers, the fs operations, confinement."""

from __future__ import annotations

import hashlib
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import hutch

SRC = str(Path(__file__).resolve().parents[1] / "src")


def test_bytes_and_text(sandbox: hutch.Sandbox) -> None:
    files = sandbox.files
    every_byte = bytes(range(256)) * 4
    assert files.write_bytes("/work/bin/data.bin", every_byte) == 1024
    assert files.read_bytes("/work/bin/data.bin") == every_byte
    text = "héllo\nwörld\n"
    assert files.write_text("/work/note.txt", text) == len(text.encode())
    assert files.read_text("/work/note.txt") == "héllo\nwörld\n"
    # The kernel's view inside the sandbox: same bytes, owned by the sandbox's root.
    inside = sandbox.exec("sha256sum /work/bin/data.bin; stat -c '%u %a' /work/note.txt")
    assert inside.stdout.split()[0] == hashlib.sha256(every_byte).hexdigest()
    assert inside.stdout.splitlines()[1] == "0 644"
    files.write_bytes("/work/script.sh", b"#!/bin/sh\necho run\n", mode=0o755)
    assert files.stat("/work/script.sh").mode & 0o777 == 0o755
    assert sandbox.exec("/work/script.sh").stdout == "run\n"
    assert b"".join(files.iter_bytes("/work/bin/data.bin", start=10, end=19)) == every_byte[10:20]


def test_upload_from_file_objects_paths_and_iterables(sandbox: hutch.Sandbox,
                                                      tmp_path: Path) -> None:
    host = tmp_path / "host.bin"
    host.write_bytes(os.urandom(300_000))
    assert sandbox.files.upload("/up/from-path", host) == 300_000
    with open(host, "rb") as f:
        assert sandbox.files.upload("/up/from-file", f) == 300_000
    assert sandbox.files.upload("/up/from-bytesio", io.BytesIO(b"abc")) == 3
    assert sandbox.files.upload("/up/from-iter", iter([b"a" * 1000, b"b" * 24])) == 1024
    for name in ("from-path", "from-file"):
        assert sandbox.files.read_bytes(f"/up/{name}") == host.read_bytes()
    assert sandbox.files.read_bytes("/up/from-iter") == b"a" * 1000 + b"b" * 24
    out = tmp_path / "down.bin"
    assert sandbox.files.download("/up/from-path", out) == 300_000
    assert out.read_bytes() == host.read_bytes()
    buffer = io.BytesIO()
    sandbox.files.download("/up/from-bytesio", buffer)
    assert buffer.getvalue() == b"abc"


LARGE_TRANSFER = r"""
import hashlib, json, resource, sys
sys.path.insert(0, sys.argv[1])
import hutch
size = int(sys.argv[4])
def blocks():
    state = hashlib.sha256(b"seed").digest()
    for i in range(size // (1 << 16)):
        block = (state * 2048)[: 1 << 16]
        state = hashlib.sha256(state).digest()
        yield block
sent = hashlib.sha256()
def hashed():
    for block in blocks():
        sent.update(block)
        yield block
with hutch.Client(sys.argv[2]) as client:
    box = client.get(sys.argv[3])
    written = box.files.upload("/big/file.bin", hashed())
    received = hashlib.sha256()
    total = 0
    for chunk in box.files.iter_bytes("/big/file.bin"):
        received.update(chunk)
        total += len(chunk)
print(json.dumps({"written": written, "total": total, "sent": sent.hexdigest(),
                  "received": received.hexdigest(),
                  "max_rss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}))
"""


def _transfer(daemon, sandbox: hutch.Sandbox, size: int) -> dict:
    # A process of its own, so its peak RSS measures this transfer alone.
    run = subprocess.run([sys.executable, "-c", LARGE_TRANSFER, SRC, daemon.socket, sandbox.id,
                          str(size)], capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr
    report = json.loads(run.stdout)
    assert report["written"] == report["total"] == size
    assert report["sent"] == report["received"]
    return report


def test_large_streamed_upload_and_download_in_bounded_memory(daemon,
                                                              sandbox: hutch.Sandbox) -> None:
    small = _transfer(daemon, sandbox, 1 << 16)
    large = _transfer(daemon, sandbox, 64 << 20)
    inside = sandbox.exec("sha256sum /big/file.bin", timeout=120).stdout.split()[0]
    assert inside == large["sent"]
    # 64 MiB went up and came back; the client's peak grew by a few 1 MiB buffers at most.
    grown_kib = large["max_rss_kib"] - small["max_rss_kib"]
    print(f"large transfer: peak RSS {small['max_rss_kib']} KiB for 64 KiB, "
          f"{large['max_rss_kib']} KiB for 64 MiB")
    assert grown_kib < 16 * 1024, (small, large)


def test_fs_operations(sandbox: hutch.Sandbox) -> None:
    files = sandbox.files
    files.mkdir("/w/src/pkg")
    with pytest.raises(hutch.AlreadyExists) as caught:
        files.mkdir("/w/src/pkg", parents=False)
    assert caught.value.status == 409
    files.write("/w/src/pkg/a.py", "import os\n# TODO one\nx = 1\n")
    files.write("/w/src/b.py", "# TODO two\n")
    files.write("/w/README.md", "TODO three\n")
    entries = files.ls("/w/src")
    assert [(e.path, e.is_dir) for e in entries] == [("/w/src/b.py", False), ("/w/src/pkg", True)]
    assert entries[0].size == len("# TODO two\n") and entries[0].type == "file"
    assert files.stat("/w/src/pkg").is_dir
    assert files.exists("/w/README.md") and not files.exists("/w/nothing")
    assert files.glob("**/*.py", "/w") == ["/w/src/b.py", "/w/src/pkg/a.py"]
    assert files.glob("*.md", "/w") == ["/w/README.md"]
    grep = files.grep("TODO", "/w", glob="*.py")
    assert [(m.path, m.line, m.text) for m in grep.matches] == [
        ("/w/src/b.py", 1, "# TODO two"), ("/w/src/pkg/a.py", 2, "# TODO one")]
    assert not grep.truncated
    capped = files.grep("TODO", "/w", max_count=1)
    assert len(capped.matches) == 1 and capped.truncated
    window = files.read("/w/src/pkg/a.py", offset=1, limit=1)
    assert (window.content, window.total_lines, window.start_line, window.end_line,
            window.next_offset) == ("# TODO one\n", 3, 1, 2, 2)
    assert files.edit("/w/src/pkg/a.py", "x = 1", "x = 2") == 1
    with pytest.raises(hutch.NoMatch) as no_match:
        files.edit("/w/src/pkg/a.py", "absent", "y")
    assert (no_match.value.status, no_match.value.code) == (422, "no_match")
    files.write("/w/dup.txt", "a a a")
    with pytest.raises(hutch.NotUnique):
        files.edit("/w/dup.txt", "a", "b")
    assert files.edit("/w/dup.txt", "a", "b", replace_all=True) == 3
    assert files.read_text("/w/dup.txt") == "b b b"
    files.move("/w/dup.txt", "/w/moved/dup.txt")
    assert files.read_text("/w/moved/dup.txt") == "b b b"
    files.write("/w/other.txt", "o")
    with pytest.raises(hutch.AlreadyExists):
        files.move("/w/other.txt", "/w/moved/dup.txt")
    files.move("/w/other.txt", "/w/moved/dup.txt", overwrite=True)
    assert files.read_text("/w/moved/dup.txt") == "o"
    with pytest.raises(hutch.NotEmpty):
        files.delete("/w/moved")
    files.delete("/w/moved", recursive=True)
    files.delete("/w/README.md")
    files.remove_tree("/w/src")
    assert sandbox.exec("ls -A /w").stdout == ""
    with pytest.raises(hutch.FileNotFound) as missing:
        files.read_bytes("/w/src/b.py")
    assert (missing.value.status, missing.value.code) == (404, "file_not_found")
    assert missing.value.request_id


def test_batches_report_per_file(sandbox: hutch.Sandbox) -> None:
    results = sandbox.files.upload_many([("/batch/a.bin", b"\x00\x01"), ("relative", b"x"),
                                         ("/batch/b.txt", b"text")])
    assert [(r.path, r.ok, r.error) for r in results] == [
        ("/batch/a.bin", True, None), ("relative", False, "invalid_path"),
        ("/batch/b.txt", True, None)]
    assert results[0].size == 2
    down = sandbox.files.download_many(["/batch/a.bin", "/batch/missing", "/batch"])
    assert [(d.content, d.error) for d in down] == [
        (b"\x00\x01", None), (None, "file_not_found"), (None, "is_directory")]


def test_confinement_refused_and_surfaced(sandbox: hutch.Sandbox, tmp_path: Path) -> None:
    files = sandbox.files
    secret = tmp_path / "host-secret"
    secret.write_text("host only")
    with pytest.raises(hutch.InvalidPath) as relative:
        files.read_bytes("../../" + str(secret))
    assert (relative.value.status, relative.value.code) == (400, "invalid_path")
    assert relative.value.request_id
    # `..` and absolute symlinks resolve inside the sandbox's root, never to the host's.
    with pytest.raises(hutch.FileNotFound):
        files.read_bytes("/tmp/../../../.." + str(secret))
    sandbox.exec(f"ln -s {secret} /tmp/escape", check=True)
    with pytest.raises(hutch.FileNotFound):
        files.read_bytes("/tmp/escape")
    files.write_bytes("/tmp/escape", b"replaced inside")
    assert secret.read_text() == "host only"
    assert sandbox.exec("cat /tmp/escape").stdout == "replaced inside"
    with pytest.raises(hutch.PermissionDenied) as proc:
        files.write_bytes("/proc/sys/kernel/hostname", b"evil")
    assert proc.value.status == 403
    with pytest.raises(hutch.PermissionDenied):
        files.delete("/", recursive=True)
    assert sandbox.exec("test -d /usr && echo kept").stdout == "kept\n"
    with pytest.raises(hutch.InvalidPath):
        files.ls("relative/dir")
    with pytest.raises(hutch.IsDirectory):
        files.read_bytes("/tmp")
