"""Persistent volumes through the client, against a real hutchd: a workspace that outlives its
sandbox (the idle-timeout-and-recreate case), one writer at a time, read-only attachments, quota,
deletion."""

from __future__ import annotations

import uuid

import pytest

import hutch

MiB = 1 << 20


@pytest.fixture()
def volume(client: hutch.Client):
    name = "py-" + uuid.uuid4().hex[:12]
    made = client.create_volume(name, 32 * MiB)
    yield made
    try:
        client.delete_volume(name)
    except hutch.VolumeNotFound:
        pass


def test_workspace_outlives_its_sandbox(client: hutch.Client, volume: hutch.Volume) -> None:
    assert volume.size_bytes == 32 * MiB and volume.attached == []
    workspace = [{"name": volume.name, "target": "/workspace"}]
    with client.create(volumes=workspace) as first:
        first.exec("echo kept > /workspace/notes && stat -c %u /workspace/notes", check=True)
        attached = client.volume(volume.name).attached
        assert [(a.sandbox, a.target, a.readonly) for a in attached] == [
            (first.id, "/workspace", False)]
        with pytest.raises(hutch.VolumeBusy) as busy:
            client.create(volumes=workspace)
        assert first.id in str(busy.value)
        with client.create(volumes=[{**workspace[0], "readonly": True}]) as reader:
            result = reader.exec("cat /workspace/notes; touch /workspace/x")
            assert result.stdout == "kept\n" and "Read-only file system" in result.stderr
        snapshot = first.snapshot("py-snap-" + uuid.uuid4().hex[:8])
        assert snapshot.volumes_excluded == [volume.name]
        with pytest.raises(hutch.VolumeBusy):
            client.delete_volume(volume.name)
        first.delete(wait=True)
    with client.create(volumes=workspace) as second:
        assert second.exec("cat /workspace/notes", check=True).stdout == "kept\n"
        full = second.exec("dd if=/dev/zero of=/workspace/big bs=1M count=64")
        assert full.exit_code != 0 and "No space left on device" in full.stderr
    assert volume.name in [v.name for v in client.volumes()]
    used = client.volume(volume.name).used_bytes
    assert used is not None and used > 16 * MiB


def test_volume_errors(client: hutch.Client, volume: hutch.Volume) -> None:
    with pytest.raises(hutch.VolumeExists):
        client.create_volume(volume.name, 32 * MiB)
    with pytest.raises(hutch.BadRequest) as bad:
        client.create_volume("../x", 32 * MiB)
    assert bad.value.code == "bad_volume"
    with pytest.raises(hutch.BadRequest):
        client.create_volume("py-negative", -1)
    with pytest.raises(hutch.VolumeNotFound):
        client.volume("py-never-made")
    with pytest.raises(hutch.VolumeNotFound):
        client.create(volumes=[{"name": "py-never-made", "target": "/w"}])
    client.delete_volume(volume.name)
    with pytest.raises(hutch.VolumeNotFound):
        client.delete_volume(volume.name)
