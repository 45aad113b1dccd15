// A real hutchd for the tests: started from the build tree ($HUTCH_BUILD_DIR, default the repo's
// build/) on a socket in a fresh state dir, stopped with SIGTERM (--destroy-on-exit) at the end.
// Without root or a built hutchd the tests cannot run: that is a loud skip, a failure under
// HUTCH_MUST_WORK=1 (CI).
import assert from "node:assert/strict";
import { spawn, type ChildProcess } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import path from "node:path";
import { after, before } from "node:test";
import { fileURLToPath } from "node:url";
import { HutchClient, HutchError } from "../index.js";

const here = path.dirname(fileURLToPath(import.meta.url));
export const buildDir = process.env.HUTCH_BUILD_DIR ?? path.resolve(here, "../../../../build");
const hutchdBinary = path.join(buildDir, "daemon", "hutchd");

/** Why these tests cannot run here, or undefined when they can. */
export function cannotRun(): string | undefined {
  if (process.getuid?.() !== 0) return "hutchd tests need root (they create real sandboxes)";
  if (!existsSync(hutchdBinary)) return `no hutchd at ${hutchdBinary} (build it, or set HUTCH_BUILD_DIR)`;
  return undefined;
}

/** For node:test's { skip }: the reason, loud; under HUTCH_MUST_WORK=1 a skip is an error. */
export function skipReason(): string | false {
  const reason = cannotRun();
  if (reason === undefined) return false;
  if (process.env.HUTCH_MUST_WORK === "1") throw new Error(`HUTCH_MUST_WORK=1 but ${reason}`);
  console.error(`SKIP: ${reason}`);
  return reason;
}

export class Hutchd {
  readonly dir: string;
  readonly socket: string;
  readonly port?: number;
  readonly token?: string;
  private process?: ChildProcess;

  constructor(options: { tcp?: boolean } = {}) {
    // The state dir holds unix sockets (107 bytes at most): a short path under /tmp.
    this.dir = mkdtempSync("/tmp/hutch-js-");
    this.socket = path.join(this.dir, "hutchd.sock");
    if (options.tcp) {
      this.port = 20000 + Math.floor(Math.random() * 40000);
      this.token = "js-client-test-token-" + Math.random().toString(36).slice(2);
      writeFileSync(path.join(this.dir, "token"), this.token + "\n", { mode: 0o600 });
    }
  }

  async start(): Promise<void> {
    const args = ["--socket", this.socket, "--state-dir", path.join(this.dir, "state"), "--destroy-on-exit", "--log-level", "debug"];
    if (this.port !== undefined) args.push("--listen", `127.0.0.1:${this.port}`, "--token-file", path.join(this.dir, "token"));
    const log = path.join(this.dir, "hutchd.log");
    const { openSync } = await import("node:fs");
    const fd = openSync(log, "a");
    this.process = spawn(hutchdBinary, args, { stdio: ["ignore", fd, fd] });
    const deadline = Date.now() + 10_000;
    while (!existsSync(this.socket)) {
      if (this.process.exitCode !== null) throw new Error(`hutchd exited ${this.process.exitCode}: ${this.log()}`);
      if (Date.now() > deadline) throw new Error(`hutchd did not listen within 10 s: ${this.log()}`);
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
  }

  log(): string {
    try {
      return readFileSync(path.join(this.dir, "hutchd.log"), "utf8");
    } catch {
      return "";
    }
  }

  async stop(): Promise<void> {
    const child = this.process;
    this.process = undefined;
    if (child !== undefined && child.exitCode === null) {
      const exited = new Promise((resolve) => child.once("exit", resolve));
      child.kill("SIGTERM");
      await exited;
    }
    rmSync(this.dir, { recursive: true, force: true });
  }
}

/** The hooks of a suite that shares one hutchd and one client of it. */
export interface SuiteHooks {
  /** Listen on TCP with a token too (Hutchd's `tcp`). */
  tcp?: boolean;
  /** In before(), once the client is made: the suite keeps it, and makes what it shares. */
  started: (client: HutchClient) => Promise<void> | void;
  /** In after(), before the client is closed: the suite's own clean-up. */
  stopping?: () => Promise<void>;
}

/**
 * One hutchd and one client for the describe() this is called in: started in its before(),
 * closed and stopped in its after().
 */
export function hutchdForSuite(hooks: SuiteHooks): Hutchd {
  const daemon = new Hutchd({ tcp: hooks.tcp });
  let client: HutchClient | undefined;
  before(async () => {
    await daemon.start();
    client = new HutchClient({ socketPath: daemon.socket });
    await hooks.started(client);
  });
  after(async () => {
    await hooks.stopping?.();
    client?.close();
    await daemon.stop();
  });
  return daemon;
}

/** Asserts that `promise` rejects with hutchd's error of this HTTP status and stable code. */
export async function rejectsWith(promise: Promise<unknown>, status: number, code: string): Promise<void> {
  await assert.rejects(promise, (error: unknown) => {
    assert.ok(error instanceof HutchError, String(error));
    assert.equal(error.status, status);
    assert.equal(error.code, code);
    return true;
  });
}
