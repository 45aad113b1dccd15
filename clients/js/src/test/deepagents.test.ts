// HutchSandbox, the Deep Agents backend: each operation of the protocol against a real hutchd (the
// checks of @langchain/sandbox-standard-tests, re-expressed: it is not on the registry reachable
// here), then a real createDeepAgent with a scripted model running a skill in a sandbox.
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { AIMessage, ToolMessage } from "@langchain/core/messages";
import { fakeModel } from "@langchain/core/testing";
import { createDeepAgent, isSandboxBackend } from "deepagents";
import { HutchClient, HutchError } from "../index.js";
import { HutchSandbox } from "../deepagents.js";
import { hutchdForSuite, skipReason } from "./hutchd.js";

const skip = skipReason();
const encoder = new TextEncoder();

// A message's content as text: a string, or the text of its content blocks.
function text(content: unknown): string {
  if (typeof content === "string") return content;
  if (Array.isArray(content)) return content.map((block) => (typeof block === "string" ? block : (block as { text?: string }).text ?? JSON.stringify(block))).join("");
  return JSON.stringify(content);
}

describe("HutchSandbox", { skip }, () => {
  let client: HutchClient;
  let backend: HutchSandbox;
  hutchdForSuite({
    started: async (started) => {
      client = started;
      backend = await HutchSandbox.create({ client });
    },
    stopping: async () => void (await backend?.close().catch(() => undefined)),
  });

  test("lifecycle: no I/O in the constructor, a non-empty id, a sandbox backend", async () => {
    const lazy = new HutchSandbox({ client });
    assert.equal(lazy.isInitialized, false);
    assert.throws(() => lazy.id, /not initialized/);
    assert.match(backend.id, /^sb-/);
    assert.equal(isSandboxBackend(backend), true);
    const attached = await HutchSandbox.fromId(backend.id, { client });
    assert.equal(attached.id, backend.id);
    await attached.close();
    // fromId does not own the sandbox: closing it leaves it running.
    assert.equal((await client.get(backend.id)).info.state, "running");
  });

  test("execute: the real exit code, raw output of both streams, null on timeout", async () => {
    const ok = await backend.execute("echo out; echo err >&2");
    assert.deepEqual(ok, { output: "out\nerr\n", exitCode: 0, truncated: false });
    assert.equal((await backend.execute("exit 3")).exitCode, 3);
    assert.equal((await backend.execute("/no/such/command")).exitCode, 127);
    const slow = await backend.execute("sleep 30", { timeout: 0.3 });
    assert.equal(slow.exitCode, null);
  });

  test("uploadFiles and downloadFiles: partial success, one result per input, exact bytes", async () => {
    const bytes = new Uint8Array(Array.from({ length: 256 }, (_, i) => i));
    const uploaded = await backend.uploadFiles([["/up/deep/a.bin", bytes], ["not/absolute", bytes], ["/up/b.txt", encoder.encode("b")]]);
    assert.deepEqual(uploaded, [
      { path: "/up/deep/a.bin", error: null },
      { path: "not/absolute", error: "invalid_path" },
      { path: "/up/b.txt", error: null },
    ]);
    const downloaded = await backend.downloadFiles(["/up/deep/a.bin", "/up/missing", "/up"]);
    assert.deepEqual(downloaded[0], { path: "/up/deep/a.bin", content: bytes, error: null });
    assert.equal(downloaded[1].error, "file_not_found");
    assert.equal(downloaded[1].content, null);
    assert.equal(downloaded[2].error, "is_directory");
  });

  test("ls, read with pagination, readRaw, binary reads exact", async () => {
    await backend.write("/ws/lines.txt", "one\ntwo\nthree\nfour\n");
    const listed = await backend.ls("/ws");
    assert.deepEqual(listed.files?.map((file) => [file.path, file.is_dir]), [["/ws/lines.txt", false]]);
    await backend.execute("mkdir -p /ws/sub");
    assert.ok((await backend.ls("/ws")).files?.some((file) => file.path === "/ws/sub/" && file.is_dir));
    const page = await backend.read("/ws/lines.txt", 1, 2);
    assert.equal(page.content, "two\nthree\n");
    assert.equal(page.startLine, 2);
    assert.equal(page.endLine, 3);
    assert.equal(page.nextOffset, 3);
    assert.equal(page.totalLines, 4);
    const last = await backend.read("/ws/lines.txt", 3, 10);
    assert.equal(last.nextOffset, undefined);
    assert.match((await backend.read("/ws/none.txt")).error ?? "", /not found/);
    const png = new Uint8Array([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0x00, 0xff, 0xfe]);
    await backend.uploadFiles([["/ws/pixel.png", png]]);
    const image = await backend.read("/ws/pixel.png");
    assert.equal(image.mimeType, "image/png");
    assert.deepEqual(image.content, png);
    const raw = await backend.readRaw("/ws/pixel.png");
    assert.deepEqual((raw.data as { content: Uint8Array }).content, png);
    assert.equal((await backend.readRaw("/ws/lines.txt")).data?.content, "one\ntwo\nthree\nfour\n");
  });

  test("write text and binary, edit with the protocol's error words, grep literal, glob, delete", async () => {
    assert.deepEqual(await backend.write("/ws/code.py", "a = 1\n# x.*y\na = 1\n"), { path: "/ws/code.py", filesUpdate: null });
    await backend.write("/ws/blob.pdf", Buffer.from([1, 2, 3]).toString("base64"));
    assert.deepEqual((await backend.downloadFiles(["/ws/blob.pdf"]))[0].content, new Uint8Array([1, 2, 3]));
    assert.match((await backend.edit("/ws/code.py", "a = 1", "b")).error ?? "", /Multiple/);
    assert.match((await backend.edit("/ws/code.py", "zzz", "b")).error ?? "", /not found/);
    assert.match((await backend.edit("/ws/absent.py", "a", "b")).error ?? "", /not found/);
    assert.equal((await backend.edit("/ws/code.py", "a = 1", "b = 2", true)).occurrences, 2);
    await backend.write("/ws/empty.txt", "");
    assert.equal((await backend.edit("/ws/empty.txt", "", "filled")).occurrences, 1);
    // Literal: the regex metacharacters match themselves only.
    const grep = await backend.grep("x.*y", "/ws");
    assert.deepEqual(grep.matches, [{ path: "/ws/code.py", line: 2, text: "# x.*y" }]);
    assert.deepEqual((await backend.grep("b = 2", "/ws", "*.py")).matches?.map((match) => match.line), [1, 3]);
    assert.deepEqual((await backend.grep("nothing-like-this", "/ws")).matches, []);
    const globbed = await backend.glob("**/*.py", "/ws");
    assert.deepEqual(globbed.files?.map((file) => file.path), ["/ws/code.py"]);
    assert.deepEqual(await backend.delete("/ws/sub"), { path: "/ws/sub", filesUpdate: null });
    assert.match((await backend.delete("/ws/sub")).error ?? "", /not found/);
    assert.equal((await backend.execute("test -e /ws/sub")).exitCode, 1);
  });
});

describe("createDeepAgent on a hutch sandbox", { skip }, () => {
  let client: HutchClient;
  hutchdForSuite({ started: (started) => void (client = started) });

  const skillMd = [
    "---",
    "name: csv-report",
    "description: Summarise a CSV file into a JSON report with row count and total",
    "---",
    "# CSV report",
    "Run `python3 /skills/csv-report/report.py INPUT.csv > OUTPUT.json`, then validate the JSON.",
    "",
  ].join("\n");
  const reportPy = [
    "import csv, json, sys",
    "rows = list(csv.DictReader(open(sys.argv[1])))",
    "total = sum(int(row['amount']) for row in rows)",
    "print(json.dumps({'rows': len(rows), 'total': total, 'status': 'draft'}, indent=1))",
    "",
  ].join("\n");

  test("the skill flow: upload, SKILL.md read, script run, artifact validated, grepped, globbed, edited, downloaded", async () => {
    const backend = await HutchSandbox.create({ client });
    const id = backend.id;
    try {
      const uploaded = await backend.uploadFiles([
        ["/skills/csv-report/SKILL.md", encoder.encode(skillMd)],
        ["/skills/csv-report/report.py", encoder.encode(reportPy)],
        ["/work/input.csv", encoder.encode("name,amount\na,3\nb,4\nc,5\n")],
      ]);
      assert.ok(uploaded.every((result) => result.error === null));
      const model = fakeModel()
        .respondWithTools([{ name: "read_file", args: { file_path: "/skills/csv-report/SKILL.md" }, id: "c1" }])
        .respondWithTools([{ name: "execute", args: { command: "python3 /skills/csv-report/report.py /work/input.csv > /work/out/report.json" }, id: "c2" }])
        .respondWithTools([{ name: "execute", args: { command: "mkdir -p /work/out && python3 /skills/csv-report/report.py /work/input.csv > /work/out/report.json && python3 -c \"import json; d = json.load(open('/work/out/report.json')); assert d['rows'] == 3 and d['total'] == 12; print('valid')\"" }, id: "c3" }])
        .respondWithTools([{ name: "grep", args: { pattern: "\"total\": 12", path: "/work" }, id: "c4" }])
        .respondWithTools([{ name: "glob", args: { pattern: "**/*.json", path: "/work" }, id: "c5" }])
        .respondWithTools([{ name: "edit_file", args: { file_path: "/work/out/report.json", old_string: "\"status\": \"draft\"", new_string: "\"status\": \"final\"" }, id: "c6" }])
        .respond(new AIMessage("The report is at /work/out/report.json."));
      const agent = createDeepAgent({ model, backend, skills: ["/skills/"] });
      const state = await agent.invoke({ messages: [{ role: "user", content: "Summarise /work/input.csv with the csv-report skill" }] });

      // The skills middleware listed the backend's /skills/ and put the skill's name and
      // description in the prompt the model saw.
      const firstPrompt = JSON.stringify(model.calls[0].messages);
      assert.match(firstPrompt, /csv-report/);
      assert.match(firstPrompt, /Summarise a CSV file into a JSON report/);

      const tools = new Map<string, string>();
      for (const message of state.messages) {
        if (message instanceof ToolMessage) tools.set(message.tool_call_id, text(message.content));
      }
      assert.match(tools.get("c1") ?? "", /python3 \/skills\/csv-report\/report\.py/);
      // The first run fails for real (no /work/out yet): the agent sees the shell's error and code.
      assert.match(tools.get("c2") ?? "", /Directory nonexistent\n[\s\S]*\[Command failed with exit code 2\]/);
      assert.match(tools.get("c3") ?? "", /valid\n[\s\S]*\[Command succeeded with exit code 0\]/);
      assert.match(tools.get("c4") ?? "", /\/work\/out\/report\.json/);
      assert.match(tools.get("c5") ?? "", /\/work\/out\/report\.json/);
      assert.doesNotMatch(tools.get("c6") ?? "", /rror/);
      assert.equal(text(state.messages.at(-1)?.content), "The report is at /work/out/report.json.");

      const [artifact] = await backend.downloadFiles(["/work/out/report.json"]);
      assert.equal(artifact.error, null);
      assert.deepEqual(JSON.parse(new TextDecoder().decode(artifact.content ?? new Uint8Array())), { rows: 3, total: 12, status: "final" });
    } finally {
      await backend.close();
    }
    await assert.rejects(client.get(id), (error: HutchError) => error.code === "sandbox_not_found");
  });

  test("the sandbox is deleted in finally when the model call throws", async () => {
    const backend = await HutchSandbox.create({ client });
    const id = backend.id;
    const model = fakeModel().respond(new Error("model endpoint down"));
    try {
      const agent = createDeepAgent({ model, backend });
      await assert.rejects(agent.invoke({ messages: [{ role: "user", content: "hi" }] }), /model endpoint down/);
    } finally {
      await backend.close();
    }
    await assert.rejects(client.get(id), (error: HutchError) => error.code === "sandbox_not_found");
    assert.equal((await client.list()).length, 0);
  });
});
