// PTYs, shell sessions, file watch, network policy, secrets and mounts against a real hutchd.
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { type HutchClient, HutchError, type Sandbox } from "../index.js";
import { hutchdForSuite, rejectsWith, skipReason } from "./hutchd.js";

const skip = skipReason();

async function until<T>(what: string, probe: () => Promise<T | undefined>, seconds = 20): Promise<T> {
  const deadline = Date.now() + seconds * 1000;
  while (Date.now() < deadline) {
    const value = await probe();
    if (value !== undefined) return value;
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
  throw new Error(`timed out waiting for ${what}`);
}

describe("interactive features", { skip }, () => {
  let client: HutchClient;
  let sandbox: Sandbox;
  hutchdForSuite({
    started: async (started) => {
      client = started;
      sandbox = await client.create({ labels: { suite: "js-interactive" } });
    },
    stopping: async () => void (await sandbox?.delete().catch(() => undefined)),
  });

  test("a PTY echoes keystrokes, is resized and is listed", async () => {
    const pty = await sandbox.pty("/bin/sh", { cols: 90, rows: 30 });
    assert.ok((await sandbox.ptys()).some((status) => status.pid === pty.pid));
    await pty.write("stty size; echo hi-$((40+2))\r");
    const seen = await until("the PTY's answer", async () => {
      const text = (await pty.output()).data;
      return /30 90/.test(text) && /hi-42/.test(text) ? text : undefined;
    });
    assert.match(seen, /hi-42/);
    await pty.resize(120, 40);
    await pty.write("stty size\r");
    await until("the new size", async () => (/40 120/.test((await pty.output()).data) ? true : undefined));
    const final = await pty.close();
    assert.notEqual(final.state, "running");
  });

  test("a session keeps cd and export, refuses a second command, and is deleted", async () => {
    const session = await sandbox.session("js", { env: { BASE: "b" } });
    await session.exec("mkdir -p /tmp/js && cd /tmp/js && export A=1", { check: true });
    const result = await session.exec('pwd; echo "$A $BASE"', { check: true });
    assert.equal(result.stdout, "/tmp/js\n1 b\n");
    const streamed: string[] = [];
    for await (const event of session.execStream("echo streamed")) if (event.type === "stdout") streamed.push(event.data);
    assert.equal(streamed.join(""), "streamed\n");

    const running = session.exec("touch /tmp/js-busy; sleep 2; echo done");
    await until("the first command", async () => ((await sandbox.exists("/tmp/js-busy")) ? true : undefined));
    await rejectsWith(session.exec("true"), 409, "session_busy");
    assert.equal((await running).stdout, "done\n");

    assert.deepEqual((await sandbox.sessions()).map((s) => s.name), ["js"]);
    await session.delete();
    await rejectsWith(session.exec("true"), 404, "session_not_found");
    await rejectsWith(sandbox.session("../x"), 400, "invalid_session_name");
  });

  test("watch sees writes from inside the sandbox and resumes by seq", async () => {
    await sandbox.mkdir("/tmp/jw");
    const events = sandbox.watch("/tmp/jw", { recursive: true });
    const writer = sandbox.exec("sleep 0.2; echo a > /tmp/jw/a.txt; mkdir /tmp/jw/sub; touch /tmp/jw/sub/b", { check: true });
    const seen = [];
    for await (const event of events) {
      seen.push(event);
      if (event.event === "create" && event.path === "/tmp/jw/sub/b") break;
    }
    await writer;
    assert.ok(seen.some((e) => e.event === "create" && e.path === "/tmp/jw/a.txt" && !e.isDir));
    assert.ok(seen.some((e) => e.event === "create" && e.path === "/tmp/jw/sub" && e.isDir));
    const last = seen[seen.length - 1].seq;

    await sandbox.exec("mv /tmp/jw/a.txt /tmp/jw/c.txt", { check: true });
    for await (const event of sandbox.watch("/tmp/jw", { recursive: true, since: last })) {
      assert.ok(event.seq > last);
      if (event.event !== "move") continue;
      assert.deepEqual([event.from, event.path], ["/tmp/jw/a.txt", "/tmp/jw/c.txt"]);
      break;
    }
    await rejectsWith(sandbox.watch("/proc").next(), 403, "permission_denied");
  });

  test("network policy, its log, and a mode that cannot change", async () => {
    await using filtered = await client.create({ network: { mode: "filtered", allow: ["allowed.test"] } });
    const state = await filtered.network();
    assert.deepEqual([state.mode, state.allow, state.error], ["filtered", ["allowed.test"], null]);
    assert.match(state.caPem ?? "", /BEGIN CERTIFICATE/);
    const lookup = await filtered.exec(["python3", "-c",
      "import socket\ntry:\n socket.getaddrinfo('denied.test', 80)\n print('resolved')\nexcept OSError:\n print('refused')"]);
    assert.equal(lookup.stdout, "refused\n");
    const lines = [];
    for await (const line of filtered.networkLog()) lines.push(line);
    const denied = lines.find((line) => line.name === "denied.test");
    assert.ok(denied, JSON.stringify(lines));
    assert.equal(denied.allowed, false);
    const changed = await filtered.setNetwork({ mode: "open", deny: ["denied.test"] });
    assert.deepEqual([changed.mode, changed.deny], ["open", ["denied.test"]]);
    await rejectsWith(filtered.setNetwork("loopback"), 409, "network_mode_fixed");
    assert.equal((await sandbox.network()).stats, null);
  });

  test("secrets are write-only", async () => {
    await client.setSecret("JS_SUITE_TOKEN", "js-s3cret");
    try {
      const listed = await client.secrets();
      const entry = listed.find((s) => s.name === "JS_SUITE_TOKEN");
      assert.equal(entry?.source, "api");
      assert.ok(!JSON.stringify(listed).includes("js-s3cret"));
    } finally {
      await client.deleteSecret("JS_SUITE_TOKEN");
    }
    await rejectsWith(client.deleteSecret("JS_SUITE_TOKEN"), 404, "secret_not_found");
    await rejectsWith(client.setSecret("bad name", "x"), 400, "bad_secret");
  });

  test("the port proxy and port tokens", async () => {
    await sandbox.writeFile("/tmp/site/index.html", "served from inside");
    await sandbox.spawn(["python3", "-m", "http.server", "8001", "--bind", "127.0.0.1"], { workdir: "/tmp/site" });
    const answer = await until("the server inside", async () => {
      try {
        return await sandbox.portRequest(8001, "/index.html");
      } catch (error) {
        assert.ok(error instanceof HutchError && error.code === "port_unreachable", String(error));
        return undefined;
      }
    });
    assert.deepEqual([answer.status, answer.body.toString()], [200, "served from inside"]);
    const token = await sandbox.portToken(8001, { ttlSeconds: 60 });
    assert.match(token.token ?? "", /^hpt_/);
    const listed = await sandbox.portTokens(8001);
    assert.deepEqual(listed.map((t) => [t.id, t.token]), [[token.id, undefined]]);
    await sandbox.revokePortToken(8001, token.id);
    assert.deepEqual(await sandbox.portTokens(8001), []);
    await rejectsWith(sandbox.revokePortToken(8001, token.id), 404, "token_not_found");
  });

  test("create's mounts reach hutchd (refused: this hutchd has no --mount-root)", async () => {
    await rejectsWith(client.create({ mounts: [{ source: "/tmp", target: "/skills" }] }), 400, "mount_source_refused");
  });
});
