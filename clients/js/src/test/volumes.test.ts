// Persistent volumes against a real hutchd: a workspace that outlives its sandbox, one writer at
// a time, read-only attachments, snapshots without it, deletion refused while attached.
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { describe, test } from "node:test";
import type { HutchClient } from "../index.js";
import { hutchdForSuite, rejectsWith, skipReason } from "./hutchd.js";

const skip = skipReason();
const MiB = 1 << 20;

describe("persistent volumes", { skip }, () => {
  let client: HutchClient;
  hutchdForSuite({ started: (started) => void (client = started) });

  test("a workspace outlives its sandbox and has one writer at a time", async () => {
    const name = `js-${randomBytes(6).toString("hex")}`;
    const made = await client.createVolume(name, 32 * MiB);
    assert.equal(made.sizeBytes, 32 * MiB);
    assert.deepEqual(made.attached, []);
    const workspace = [{ name, target: "/workspace" }];
    const first = await client.create({ volumes: workspace });
    assert.equal((await first.exec("echo kept > /workspace/notes && stat -c %u /workspace/notes")).stdout, "0\n");
    const attached = (await client.volume(name)).attached;
    assert.deepEqual(attached.map((a) => [a.sandbox, a.target, a.readonly]), [[first.id, "/workspace", false]]);
    await rejectsWith(client.create({ volumes: workspace }), 409, "volume_busy");
    const reader = await client.create({ volumes: [{ name, target: "/workspace", readonly: true }] });
    const read = await reader.exec("cat /workspace/notes; touch /workspace/x");
    assert.equal(read.stdout, "kept\n");
    assert.match(read.stderr, /Read-only file system/);
    await reader.delete({ wait: true });
    const snapshot = await first.snapshot(`js-snap-${randomBytes(4).toString("hex")}`);
    assert.deepEqual(snapshot.volumesExcluded, [name]);
    await rejectsWith(client.deleteVolume(name), 409, "volume_busy");
    await first.delete({ wait: true });

    const second = await client.create({ volumes: workspace });
    assert.equal((await second.exec("cat /workspace/notes")).stdout, "kept\n");
    await second.delete({ wait: true });
    assert.ok((await client.volumes()).some((volume) => volume.name === name));
    await client.deleteVolume(name);
    await rejectsWith(client.volume(name), 404, "volume_not_found");
  });

  test("bad names and sizes are refused", async () => {
    await rejectsWith(client.createVolume("../etc", 32 * MiB), 400, "bad_volume");
    await rejectsWith(client.createVolume("js-zero", 0), 400, "bad_volume");
    await rejectsWith(client.create({ volumes: [{ name: "js-never-made", target: "/w" }] }), 404, "volume_not_found");
  });
});
