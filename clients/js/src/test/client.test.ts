// The client against a real hutchd: every method, the error family, hostile inputs, and large
// streamed files.
import assert from "node:assert/strict";
import { createHash, randomBytes } from "node:crypto";
import { existsSync, readFileSync } from "node:fs";
import { Readable } from "node:stream";
import { describe, test } from "node:test";
import { CommandExitError, HutchClient, HutchError, type Sandbox } from "../index.js";
import { hutchdForSuite, skipReason } from "./hutchd.js";

const skip = skipReason();

describe("HutchClient", { skip }, () => {
  let client: HutchClient;
  let sandbox: Sandbox;
  const daemon = hutchdForSuite({
    tcp: true,
    started: async (started) => {
      client = started;
      sandbox = await client.create({ labels: { suite: "js" }, env: { GREETING: "hi" } });
    },
    stopping: async () => void (await sandbox?.delete().catch(() => undefined)),
  });

  test("health and metrics", async () => {
    const health = await client.health();
    assert.equal(health.status, "ok");
    assert.match(await client.metrics(), /hutch_requests_total \d+/);
  });

  test("create, get and list by labels; the sandbox is a real pid namespace", async () => {
    assert.match(sandbox.id, /^sb-[0-9a-f]+$/);
    assert.equal(sandbox.info.state, "running");
    const again = await client.get(sandbox.id);
    assert.equal(again.info.initPid, sandbox.info.initPid);
    // The kernel's view: init's pid namespace differs from ours.
    const initNs = (await import("node:fs")).readlinkSync(`/proc/${sandbox.info.initPid}/ns/pid`);
    assert.notEqual(initNs, (await import("node:fs")).readlinkSync("/proc/self/ns/pid"));
    const listed = await client.list({ suite: "js" });
    assert.deepEqual(listed.map((item) => item.id), [sandbox.id]);
    assert.equal((await client.list({ suite: "nope" })).length, 0);
  });

  test("getOrCreate returns the labelled sandbox, else creates one", async () => {
    const found = await client.getOrCreate({ suite: "js" });
    assert.equal(found.id, sandbox.id);
    const made = await client.getOrCreate({ suite: "other" });
    try {
      assert.notEqual(made.id, sandbox.id);
      assert.equal(made.info.labels.suite, "other");
    } finally {
      await made.delete({ wait: true });
    }
    await assert.rejects(client.get(made.id), (error: HutchError) => error.code === "sandbox_not_found");
  });

  test("exec: a result for every exit code, check throws, env and stdin", async () => {
    const ok = await sandbox.exec(["/bin/sh", "-c", 'echo "$GREETING $0"; echo err >&2', "x"]);
    assert.equal(ok.stdout, "hi x\n");
    assert.equal(ok.stderr, "err\n");
    assert.equal(ok.exitCode, 0);
    const failed = await sandbox.exec("exit 7");
    assert.equal(failed.exitCode, 7);
    await assert.rejects(sandbox.exec("echo boom >&2; exit 3", { check: true }), (error: CommandExitError) =>
      error instanceof CommandExitError && error.result.exitCode === 3 && error.result.stderr === "boom\n");
    assert.equal((await sandbox.exec("cat", { stdin: "abc\0def" })).stdout, "abc\0def");
    assert.equal((await sandbox.exec("echo $X", { env: { X: "42" } })).stdout, "42\n");
    assert.equal((await sandbox.execBash('echo "$0:$1:$2"', ["a", "b c"])).stdout, "bash:a:b c\n");
    assert.equal((await sandbox.execPython("import sys; print(sys.argv[1:])", ["a", "b"])).stdout, "['a', 'b']\n");
    const streamedAlias: string[] = [];
    const alias = await sandbox.execBash("echo out; exit 5", [], { onStdout: (text) => streamedAlias.push(text) });
    assert.deepEqual([alias.exitCode, streamedAlias.join("")], [5, "out\n"]);
    const missing = await sandbox.exec(["/no/such/binary"]);
    assert.equal(missing.exitCode, 127);
    const timedOut = await sandbox.exec("sleep 30", { timeoutSeconds: 0.3 });
    assert.equal(timedOut.timedOut, true);
    assert.equal(timedOut.exitCode, 124);
  });

  test("exec streaming: callbacks and events arrive in order", async () => {
    const seen: string[] = [];
    const result = await sandbox.exec("for i in 1 2 3; do echo $i; sleep 0.05; done; echo e >&2", {
      onStdout: (text) => seen.push(`out:${text}`),
      onStderr: (text) => seen.push(`err:${text}`),
    });
    assert.equal(result.exitCode, 0);
    assert.equal(result.stdout, "1\n2\n3\n");
    assert.deepEqual(seen.join(""), "out:1\nout:2\nout:3\nerr:e\n");
    const events = [];
    for await (const event of sandbox.execStream(["/bin/echo", "streamed"])) events.push(event);
    assert.deepEqual(events[0], { type: "stdout", data: "streamed\n" });
    assert.equal(events.at(-1)?.type, "exit");
  });

  test("background process: output from offsets, follow, stdin, wait, signal, reconnect by pid", async () => {
    const cat = await sandbox.spawn("cat");
    assert.equal(await cat.writeStdin("line one\n"), 9);
    await cat.writeStdin(new Uint8Array([0x61, 0x0a]), { eof: true });
    const status = await cat.wait(10);
    assert.equal(status.state, "exited");
    assert.equal(status.exitCode, 0);
    const all = await cat.output();
    assert.equal(all.data, "line one\na\n");
    assert.equal(all.eof, true);
    const tail = await sandbox.process(cat.pid).output({ offset: 5 });
    assert.equal(tail.data, "one\na\n");
    let followed = "";
    for await (const chunk of cat.follow()) followed += chunk;
    assert.equal(followed, "line one\na\n");

    const ticker = await sandbox.spawn("for i in 1 2 3; do echo t$i; sleep 0.1; done");
    let live = "";
    for await (const chunk of sandbox.process(ticker.pid).follow({ pollMs: 20 })) live += chunk;
    assert.equal(live, "t1\nt2\nt3\n");

    const sleeper = await sandbox.spawn(["sleep", "100"]);
    assert.ok((await sandbox.processes()).some((item) => item.pid === sleeper.pid && item.state === "running"));
    await sleeper.signal("TERM");
    const ended = await sleeper.wait(10);
    assert.equal(ended.termSignal, 15);
    await assert.rejects(sandbox.process(999999).status(), (error: HutchError) => error.code === "process_not_found" && error.status === 404);
  });

  test("files: text, bytes, ranges, and the Deep Agents operations", async () => {
    await sandbox.mkdir("/work/src");
    assert.equal(await sandbox.write("/work/src/a.py", "x = 1\n# TODO one\ny = 2\n"), 23);
    assert.equal(await sandbox.readText("/work/src/a.py"), "x = 1\n# TODO one\ny = 2\n");
    const binary = Buffer.from(Array.from({ length: 256 }, (_, i) => i));
    await sandbox.writeFile("/work/bin.dat", binary, { mode: 0o600 });
    assert.deepEqual(await sandbox.readBytes("/work/bin.dat"), binary);
    assert.equal((await sandbox.stat("/work/bin.dat")).mode & 0o777, 0o600);
    const ranged = await sandbox.readStream("/work/bin.dat", { range: [10, 19] });
    assert.equal(ranged.statusCode, 206);
    const { readAll } = await import("../transport.js");
    assert.deepEqual(await readAll(ranged), binary.subarray(10, 20));

    const entries = await sandbox.ls("/work");
    assert.deepEqual(entries.map((entry) => [entry.path, entry.isDir]), [["/work/bin.dat", false], ["/work/src", true]]);
    const lines = await sandbox.readLines("/work/src/a.py", 1, 1);
    assert.equal(lines.content, "# TODO one\n");
    assert.equal(lines.totalLines, 3);
    assert.equal(lines.nextOffset, 2);
    assert.deepEqual(await sandbox.glob("**/*.py", "/work"), ["/work/src/a.py"]);
    const grep = await sandbox.grep("TODO", { path: "/work", glob: "*.py" });
    assert.deepEqual(grep.matches, [{ path: "/work/src/a.py", line: 2, text: "# TODO one" }]);
    assert.equal(await sandbox.edit("/work/src/a.py", "y = 2", "y = 3"), 1);
    await assert.rejects(sandbox.edit("/work/src/a.py", "absent", "z"), (error: HutchError) => error.code === "no_match" && error.status === 422);
    await sandbox.write("/work/dup.txt", "a a");
    await assert.rejects(sandbox.edit("/work/dup.txt", "a", "b"), (error: HutchError) => error.code === "not_unique");
    assert.equal(await sandbox.edit("/work/dup.txt", "a", "b", { replaceAll: true }), 2);
    await sandbox.move("/work/dup.txt", "/work/moved/dup.txt");
    assert.equal(await sandbox.exists("/work/dup.txt"), false);
    assert.equal(await sandbox.readText("/work/moved/dup.txt"), "b b");
    // What the API wrote, the sandbox sees.
    assert.equal((await sandbox.exec("cat /work/src/a.py")).stdout, "x = 1\n# TODO one\ny = 3\n");

    const uploaded = await sandbox.upload([["/work/up/1.bin", new Uint8Array([0, 1, 2])], ["relative", "x"]]);
    assert.deepEqual(uploaded[0], { path: "/work/up/1.bin", size: 3 });
    assert.equal(uploaded[1].error, "invalid_path");
    const downloaded = await sandbox.download(["/work/up/1.bin", "/work/missing"]);
    assert.deepEqual(downloaded[0].content, new Uint8Array([0, 1, 2]));
    assert.equal(downloaded[1].error, "file_not_found");

    await sandbox.remove("/work/moved", { recursive: true });
    assert.equal(await sandbox.exists("/work/moved"), false);
    await sandbox.deletePath("/work/up");
    assert.equal(await sandbox.exists("/work/up"), false);
  });

  test("a large file streams both ways with its bytes intact, in bounded client memory", async () => {
    // Live buffer memory is sampled after a forced gc every 8 MiB: garbage does not count, a client
    // that buffered the file would hold all 256 MiB. Node's socket reads keep some MiB of buffers
    // alive across a gc (about 16 MiB seen for a 64 MiB file), hence the bound of a quarter.
    const gc = (globalThis as { gc?: () => void }).gc;
    assert.ok(gc, "run the tests with node --expose-gc (npm test does)");
    const size = 256 << 20;
    const chunk = randomBytes(1 << 20);
    const sent = createHash("sha256");
    let peak = 0;
    const sample = () => {
      gc();
      peak = Math.max(peak, process.memoryUsage().arrayBuffers);
    };
    sample();
    const baseline = peak;
    async function* body() {
      for (let i = 0; i < size / chunk.length; i++) {
        sent.update(chunk);
        if (i % 8 === 0) sample();
        yield chunk;
      }
    }
    const written = await sandbox.writeFile("/big.bin", Readable.from(body()));
    assert.equal(written.size, size);
    const received = createHash("sha256");
    let bytes = 0;
    let sinceSample = 0;
    for await (const part of await sandbox.readStream("/big.bin")) {
      received.update(part as Buffer);
      bytes += (part as Buffer).length;
      sinceSample += (part as Buffer).length;
      if (sinceSample >= 8 << 20) {
        sinceSample = 0;
        sample();
      }
    }
    assert.equal(bytes, size);
    assert.equal(received.digest("hex"), sent.digest("hex"));
    assert.ok(peak - baseline < size / 4, `client buffers grew by ${peak - baseline} bytes for a ${size}-byte file`);
    await sandbox.remove("/big.bin");
  });

  test("errors carry hutchd's code, status and request id; hostile paths stay inside", async () => {
    const error = await client.get("sb-000000000000").catch((caught) => caught);
    assert.ok(error instanceof HutchError);
    assert.equal(error.code, "sandbox_not_found");
    assert.equal(error.status, 404);
    assert.match(error.requestId ?? "", /.+/);
    await assert.rejects(sandbox.readText("etc/passwd"), (caught: HutchError) => caught.code === "invalid_path" && caught.status === 400);
    await assert.rejects(sandbox.exec(""), (caught: HutchError) => caught.code === "bad_request");
    await assert.rejects(client.create({ env: { "BAD-KEY": "x" } }), (caught: HutchError) => caught.code === "bad_request");
    // `..` and an absolute symlink resolve inside the sandbox's root, never the host's.
    const hostHostname = readFileSync("/etc/hostname", "utf8");
    await sandbox.exec("ln -sfn /etc /work-etc");
    await sandbox.write("/work-etc/../../../../etc/hutch-js-probe", "inside");
    assert.equal(existsSync("/etc/hutch-js-probe"), false);
    assert.equal((await sandbox.exec("cat /etc/hutch-js-probe")).stdout, "inside");
    await sandbox.writeFile("/work-etc/hostname", "sandboxed\n");
    assert.equal(readFileSync("/etc/hostname", "utf8"), hostHostname);
  });

  test("pause and resume: exec on a paused sandbox is 409 sandbox_paused", async () => {
    assert.equal((await sandbox.pause()).state, "paused");
    await assert.rejects(sandbox.exec("true"), (error: HutchError) => error.code === "sandbox_paused" && error.status === 409);
    assert.equal((await sandbox.resume()).state, "running");
    assert.equal((await sandbox.exec("echo back")).stdout, "back\n");
  });

  test("logs, snapshot, recipe sandboxes, fork, checkpoints, gc", async () => {
    const events = await sandbox.logs();
    assert.equal(events[0].event, "created");
    await sandbox.write("/layer.txt", "from snapshot");
    const snap = await sandbox.snapshot("js-snap");
    assert.equal(snap.name, "js-snap");
    assert.match(snap.digest, /^sha256:/);
    assert.ok((await client.recipes()).some((recipe) => recipe.name === "js-snap"));
    const child = await client.create({ recipe: "js-snap" });
    try {
      assert.equal(await child.readText("/layer.txt"), "from snapshot");
      const forks = await child.fork({ count: 2, labels: { forked: "yes" } });
      assert.equal(forks.sandboxes.length, 2);
      await forks.sandboxes[0].write("/layer.txt", "changed in fork 0");
      assert.equal(await forks.sandboxes[1].readText("/layer.txt"), "from snapshot");
      for (const fork of forks.sandboxes) await fork.delete({ wait: true });

      await child.checkpoint("before");
      assert.deepEqual((await child.checkpoints()).map((item) => item.name), ["before"]);
      await child.write("/layer.txt", "after checkpoint");
      await child.rollback("before");
      assert.equal(await child.readText("/layer.txt"), "from snapshot");
      await assert.rejects(child.rollback("absent"), (error: HutchError) => error.code === "checkpoint_not_found");
    } finally {
      await child.delete({ wait: true });
    }
    await client.deleteRecipe("js-snap");
    assert.ok(!(await client.recipes()).some((recipe) => recipe.name === "js-snap"));
    const removed = await client.gc(0);
    assert.ok(removed.includes(snap.digest), `gc removed ${removed.join(",")}, not ${snap.digest}`);
  });

  test("await using deletes the sandbox at the end of the scope", async () => {
    let id: string;
    {
      await using scoped = await client.create();
      id = scoped.id;
      assert.equal((await scoped.exec("echo scoped")).stdout, "scoped\n");
    }
    await assert.rejects(client.get(id), (error: HutchError) => error.code === "sandbox_not_found");
  });

  test("TCP needs the bearer token", async () => {
    const tcp = new HutchClient({ url: `http://127.0.0.1:${daemon.port}`, token: daemon.token });
    try {
      assert.equal((await tcp.health()).status, "ok");
      assert.ok((await tcp.list()).some((item) => item.id === sandbox.id));
    } finally {
      tcp.close();
    }
    const wrong = new HutchClient({ url: `http://127.0.0.1:${daemon.port}`, token: "not-the-token-at-all" });
    try {
      await assert.rejects(wrong.health(), (error: HutchError) => error.code === "unauthorized" && error.status === 401);
    } finally {
      wrong.close();
    }
  });
});
