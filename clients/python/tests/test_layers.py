"""Recipes, snapshots, forks and checkpoints through the client (real erofs layers)."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

import hutch


def test_recipe_bake_list_create_delete(daemon, client: hutch.Client) -> None:
    name = "py-" + uuid.uuid4().hex[:8]
    recipe = daemon.dir / name
    recipe.mkdir()
    (recipe / "setup.sh").write_text("echo baked > /etc/baked-by-recipe\necho $SECRET_X\n")
    baked = client.recipes.bake(str(recipe), env={"SECRET_X": "visible-in-log"})
    assert baked.name == name and baked.digest.startswith("sha256:") and not baked.cached
    assert "visible-in-log" in baked.log
    assert client.recipes.bake(str(recipe), env={"SECRET_X": "visible-in-log"}).cached
    assert name in [r.name for r in client.recipes.list()]
    sb = client.create(recipe=name)
    try:
        assert sb.info.recipe == name and sb.info.layers
        assert sb.exec("cat /etc/baked-by-recipe").stdout == "baked\n"
        assert sb.exec("echo ${SECRET_X:-unset}").stdout == "unset\n"
    finally:
        # Until its teardown is done the sandbox still uses the layer, which gc then keeps.
        sb.delete(wait=True)
    client.recipes.delete(name)
    assert name not in [r.name for r in client.recipes.list()]
    with pytest.raises(hutch.RecipeNotFound) as caught:
        client.create(recipe=name)
    assert caught.value.status == 404
    removed = client.gc_layers(grace_seconds=0)
    assert removed and all(layer.startswith("sha256:") for layer in removed)


def test_bake_failure_carries_the_log(daemon, client: hutch.Client) -> None:
    recipe: Path = daemon.dir / ("py-fail-" + uuid.uuid4().hex[:6])
    recipe.mkdir()
    (recipe / "setup.sh").write_text("echo about to fail\nexit 3\n")
    with pytest.raises(hutch.BakeFailed) as caught:
        client.recipes.bake(str(recipe))
    assert caught.value.status == 422 and caught.value.code == "bake_failed"
    assert "about to fail" in caught.value.log


def test_snapshot_and_fork(client: hutch.Client, sandbox: hutch.Sandbox) -> None:
    name = "py-snap-" + uuid.uuid4().hex[:8]
    sandbox.files.write_text("/state.txt", "before")
    snap = sandbox.snapshot(name)
    assert snap.name == name and snap.files >= 1 and snap.digest.startswith("sha256:")
    try:
        with client.create(recipe=name) as copy:
            assert copy.files.read_text("/state.txt") == "before"
        snapshot, forks = sandbox.fork(count=2, labels={"fork": "yes"})
        try:
            assert len(forks) == 2 and snapshot.digest
            assert all(f.info.labels == {"fork": "yes"} for f in forks)
            forks[0].files.write_text("/state.txt", "fork0")
            assert forks[1].files.read_text("/state.txt") == "before"
            assert sandbox.files.read_text("/state.txt") == "before"
        finally:
            for fork in forks:
                fork.delete()
    finally:
        client.recipes.delete(name)


def test_checkpoint_and_rollback(sandbox: hutch.Sandbox) -> None:
    sandbox.files.write_text("/data.txt", "v1")
    checkpoint = sandbox.checkpoint("one")
    assert checkpoint.name == "one"
    assert [c.name for c in sandbox.checkpoints()] == ["one"]
    sandbox.files.write_text("/data.txt", "v2")
    proc = sandbox.spawn(["sleep", "100"])
    rolled = sandbox.rollback("one")
    assert rolled.info.state == "running"
    assert sandbox.files.read_text("/data.txt") == "v1"
    assert not proc.status().running
    with pytest.raises(hutch.CheckpointNotFound):
        sandbox.rollback("never-made")
