// A sandbox of hutchd and what can be done in it: exec (plain, streamed, background), PTYs,
// shell sessions, file watch, network policy, files, ports (proxy, tokens, raw tunnels, local
// forwards), pause/resume, snapshots, forks and checkpoints. `await using sandbox = await
// client.create()` deletes it at the end of the scope.
import type http from "node:http";
import type net from "node:net";
import { CommandExitError } from "./errors.js";
import { Body, ndjson, readAll, Transport } from "./transport.js";
import { forwardPort, openTunnel, type PortForward } from "./tunnel.js";
import type {
  Checkpoint, DownloadResult, ExecEvent, ExecOptions, ExecResult, FileEntry, GrepMatch, NetworkPolicy,
  NetworkState, OutputChunk, PortToken, ProcessStatus, PtyOptions, ReadLines, SandboxInfo, SnapshotResult,
  UploadResult, WatchEvent, WatchOptions,
} from "./types.js";

type Raw = Record<string, any>;

export function sandboxInfo(raw: Raw): SandboxInfo {
  return {
    id: raw.id,
    state: raw.state,
    createdAt: raw.created_at,
    rootfs: raw.rootfs,
    labels: raw.labels ?? {},
    env: raw.env ?? {},
    network: raw.network,
    hostname: raw.hostname,
    workdir: raw.workdir,
    initPid: raw.init_pid,
    recipe: raw.recipe,
    layers: raw.layers,
    raw,
  };
}

function execResult(raw: Raw, stdout = raw.stdout ?? "", stderr = raw.stderr ?? ""): ExecResult {
  return {
    stdout,
    stderr,
    exitCode: raw.exit_code,
    durationMs: raw.duration_ms,
    timedOut: raw.timed_out ?? false,
    oomKilled: raw.oom_killed ?? false,
    truncated: raw.truncated ?? false,
    ...(raw.start_error !== undefined ? { startError: raw.start_error } : {}),
  };
}

function processStatus(raw: Raw): ProcessStatus {
  return {
    pid: raw.pid,
    state: raw.state,
    argv: raw.argv,
    startedAt: raw.started_at,
    durationMs: raw.duration_ms,
    exitCode: raw.exit_code ?? null,
    termSignal: raw.term_signal ?? null,
  };
}

function fileEntry(raw: Raw): FileEntry {
  return {
    path: raw.path,
    isDir: raw.is_dir,
    size: raw.size,
    modifiedAt: raw.modified_at,
    type: raw.type,
    mode: raw.mode,
    ...(raw.link_target !== undefined ? { linkTarget: raw.link_target } : {}),
  };
}

function snapshotResult(raw: Raw): SnapshotResult {
  return {
    name: raw.name, digest: raw.digest, files: raw.files, bytes: raw.bytes,
    frozenMs: raw.frozen_ms, durationMs: raw.duration_ms, volumesExcluded: raw.volumes_excluded ?? [],
  };
}

/** A command: an argv array runs as is, a string runs with /bin/sh -c. */
export type Command = string | string[];

/** A script for hutchd's HasteKit aliases (/exec/bash, /exec/python) and its arguments. */
interface Script {
  script: string;
  args: string[];
}

function execBody(command: Command | Script, options: ExecOptions): Raw {
  const body: Raw = Array.isArray(command) ? { argv: command }
    : typeof command === "string" ? { command } : { script: command.script, args: command.args };
  if (options.workdir !== undefined) body.workdir = options.workdir;
  if (options.env !== undefined) body.env = options.env;
  if (options.stdin !== undefined) body.stdin = options.stdin;
  if (options.timeoutSeconds !== undefined) body.timeout_seconds = options.timeoutSeconds;
  if (options.maxOutputBytes !== undefined) body.max_output_bytes = options.maxOutputBytes;
  return body;
}

/** A background process: its output can be read from any offset, followed, and fed. */
export class Process {
  constructor(protected readonly transport: Transport, readonly sandboxId: string, readonly pid: number,
              private readonly kind: "processes" | "ptys" = "processes") {}

  protected get base(): string {
    return `/v1/sandboxes/${encodeURIComponent(this.sandboxId)}/${this.kind}/${this.pid}`;
  }

  async status(): Promise<ProcessStatus> {
    return processStatus(await this.transport.json<Raw>("GET", this.base));
  }

  /** One chunk of stdout or stderr from a byte offset (the server caps limit at 8 MiB). */
  async output(options: { stream?: "stdout" | "stderr"; offset?: number; limit?: number; base64?: boolean } = {}): Promise<OutputChunk> {
    const raw = await this.transport.json<Raw>("GET", `${this.base}/output`, {
      query: {
        stream: options.stream ?? "stdout",
        offset: options.offset ?? 0,
        limit: options.limit,
        encoding: options.base64 ? "base64" : undefined,
      },
    });
    return { data: raw.data, offset: raw.offset, nextOffset: raw.next_offset, eof: raw.eof, truncated: raw.truncated };
  }

  /** The output from `offset` on, as it is written, until the process exited and all was read. */
  async *follow(options: { stream?: "stdout" | "stderr"; offset?: number; pollMs?: number; signal?: AbortSignal } = {}): AsyncGenerator<string> {
    let offset = options.offset ?? 0;
    const pollMs = options.pollMs ?? 50;
    while (true) {
      options.signal?.throwIfAborted();
      const chunk = await this.output({ stream: options.stream, offset });
      if (chunk.data.length > 0) yield chunk.data;
      offset = chunk.nextOffset;
      if (chunk.eof) return;
      if (chunk.data.length === 0) await new Promise((resolve) => setTimeout(resolve, pollMs));
    }
  }

  /** Writes to the process's stdin; `eof` closes it after. Returns the bytes written. */
  async writeStdin(data: string | Uint8Array, options: { eof?: boolean } = {}): Promise<number> {
    const body: Raw = typeof data === "string" ? { data } : { data_base64: Buffer.from(data).toString("base64") };
    if (options.eof) body.eof = true;
    const raw = await this.transport.json<Raw>("POST", `${this.base}/stdin`, { json: body });
    return raw.written;
  }

  async closeStdin(): Promise<void> {
    await this.transport.json<Raw>("POST", `${this.base}/stdin`, { json: { data: "", eof: true } });
  }

  /** A signal name (TERM, SIGINT), a number, or KILL_TREE (the process and all its descendants). */
  async signal(signal: string | number): Promise<ProcessStatus> {
    return processStatus(await this.transport.json<Raw>("POST", `${this.base}/signal`, { json: { signal } }));
  }

  /** The status once the process exited, or still running when timeoutSeconds (max 600) ran out. */
  async wait(timeoutSeconds = 30): Promise<ProcessStatus> {
    return processStatus(await this.transport.json<Raw>("POST", `${this.base}/wait`, {
      query: { timeout_seconds: timeoutSeconds },
    }));
  }
}

/** A process on a pseudo-terminal: its output is the "stdout" stream; it takes keystrokes and resizes. */
export class Pty extends Process {
  constructor(transport: Transport, sandboxId: string, pid: number) {
    super(transport, sandboxId, pid, "ptys");
  }

  /** Keystrokes (e.g. "ls\r"); returns the bytes written. */
  async write(data: string | Uint8Array): Promise<number> {
    const body: Raw = typeof data === "string" ? { data } : { data_base64: Buffer.from(data).toString("base64") };
    return (await this.transport.json<Raw>("POST", `${this.base}/input`, { json: body })).written;
  }

  /** The terminal's new size; the process gets SIGWINCH. */
  async resize(cols: number, rows: number): Promise<ProcessStatus> {
    return processStatus(await this.transport.json<Raw>("POST", `${this.base}/resize`, { json: { cols, rows } }));
  }

  /** Kills the process and all its descendants; answers its final status. */
  async close(): Promise<ProcessStatus> {
    return processStatus(await this.transport.json<Raw>("DELETE", this.base));
  }
}

/** A named shell session: each command sees the working directory and exports the last one left. */
export class Session {
  constructor(private readonly sandbox: Sandbox, readonly name: string) {}

  private get route(): string {
    return `/sessions/${encodeURIComponent(this.name)}`;
  }

  /** As Sandbox.exec; a second command while one runs is a HutchError session_busy (409). */
  exec(command: Command, options: ExecOptions = {}): Promise<ExecResult> {
    return this.sandbox.execAt(`${this.route}/exec`, command, options);
  }

  execStream(command: Command, options: ExecOptions = {}): AsyncGenerator<ExecEvent> {
    return this.sandbox.execStreamAt(`${this.route}/exec`, command, options);
  }

  async delete(): Promise<void> {
    await this.sandbox.call("DELETE", this.route);
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.delete();
  }
}

function portToken(raw: Raw): PortToken {
  return {
    id: raw.id, port: raw.port, expiresAt: raw.expires_at,
    ...(raw.token !== undefined ? { token: raw.token, url: raw.url } : {}),
  };
}

function networkState(raw: Raw): NetworkState {
  return {
    mode: raw.mode, allow: raw.allow ?? [], deny: raw.deny ?? [], stats: raw.stats ?? null,
    error: raw.error ?? null, caPem: raw.ca_pem ?? null, placeholders: raw.placeholders ?? {}, raw,
  };
}

export class Sandbox {
  info: SandboxInfo;

  constructor(private readonly transport: Transport, info: SandboxInfo) {
    this.info = info;
  }

  get id(): string {
    return this.info.id;
  }

  private get base(): string {
    return `/v1/sandboxes/${encodeURIComponent(this.id)}`;
  }

  async refresh(): Promise<SandboxInfo> {
    this.info = sandboxInfo(await this.transport.json<Raw>("GET", this.base));
    return this.info;
  }

  /** Kills every process and removes the sandbox; `wait` also waits for the host-side teardown. */
  async delete(options: { wait?: boolean } = {}): Promise<void> {
    await this.transport.request("DELETE", this.base, { query: { wait: options.wait ? "true" : undefined } })
      .then((response) => readAll(response));
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.delete();
  }

  async pause(): Promise<SandboxInfo> {
    this.info = sandboxInfo(await this.transport.json<Raw>("POST", `${this.base}/pause`));
    return this.info;
  }

  async resume(): Promise<SandboxInfo> {
    this.info = sandboxInfo(await this.transport.json<Raw>("POST", `${this.base}/resume`));
    return this.info;
  }

  /** The sandbox's event log. */
  async logs(): Promise<Raw[]> {
    const response = await this.transport.request("GET", `${this.base}/logs`);
    const events: Raw[] = [];
    for await (const event of ndjson<Raw>(response)) events.push(event);
    return events;
  }

  /**
   * Runs a command and answers when it exits: a result for every exit code (check: true throws
   * CommandExitError instead). With onStdout/onStderr the output arrives as it happens.
   */
  exec(command: Command, options: ExecOptions = {}): Promise<ExecResult> {
    return this.execAt("/exec", command, options);
  }

  /** `bash -c script bash args...` (hutchd's HasteKit alias), with exec's options and result. */
  execBash(script: string, args: string[] = [], options: ExecOptions = {}): Promise<ExecResult> {
    return this.execAt("/exec/bash", { script, args }, options);
  }

  /** `python3 -c script args...` (needs python3 in the sandbox), with exec's options and result. */
  execPython(script: string, args: string[] = [], options: ExecOptions = {}): Promise<ExecResult> {
    return this.execAt("/exec/python", { script, args }, options);
  }

  /** exec at another route of this sandbox with the same body and result (a session's exec). */
  async execAt(route: string, command: Command | Script, options: ExecOptions): Promise<ExecResult> {
    let result: ExecResult;
    if (options.onStdout || options.onStderr) {
      let stdout = "";
      let stderr = "";
      let final: ExecResult | undefined;
      for await (const event of this.execStreamAt(route, command, options)) {
        if (event.type === "stdout") {
          stdout += event.data;
          options.onStdout?.(event.data);
        } else if (event.type === "stderr") {
          stderr += event.data;
          options.onStderr?.(event.data);
        } else {
          final = { ...event.result, stdout, stderr };
        }
      }
      if (final === undefined) throw new Error("hutchd's exec stream ended without an exit status");
      result = final;
    } else {
      result = execResult(await this.transport.json<Raw>("POST", `${this.base}${route}`, {
        json: execBody(command, options), signal: options.signal,
      }));
    }
    if (options.check && result.exitCode !== 0) throw new CommandExitError(result);
    return result;
  }

  /** The exec's output as events while it runs, then its exit. Aborting kills the command's tree. */
  execStream(command: Command, options: ExecOptions = {}): AsyncGenerator<ExecEvent> {
    return this.execStreamAt("/exec", command, options);
  }

  async *execStreamAt(route: string, command: Command | Script, options: ExecOptions): AsyncGenerator<ExecEvent> {
    const response = await this.transport.request("POST", `${this.base}${route}`, {
      json: { ...execBody(command, options), stream: true }, signal: options.signal,
    });
    for await (const line of ndjson<Raw>(response)) {
      if (typeof line.stdout === "string") yield { type: "stdout", data: line.stdout };
      else if (typeof line.stderr === "string") yield { type: "stderr", data: line.stderr };
      else if (line.exit_code !== undefined) yield { type: "exit", result: execResult(line, "", "") };
    }
  }

  /** Starts a background process (it outlives the request); reattach later with process(pid). */
  async spawn(command: Command, options: Omit<ExecOptions, "check" | "onStdout" | "onStderr"> = {}): Promise<Process> {
    const raw = await this.transport.json<Raw>("POST", `${this.base}/exec`, {
      json: { ...execBody(command, options), background: true }, signal: options.signal,
    });
    return new Process(this.transport, this.id, raw.pid);
  }

  /** A JSON request to a route of this sandbox (`suffix` after /v1/sandboxes/{id}). */
  call<T = Raw>(method: string, suffix: string, options: { json?: unknown } = {}): Promise<T> {
    return this.transport.json<T>(method, `${this.base}${suffix}`, options);
  }

  /** Starts a command (default /bin/sh) on a pseudo-terminal of the sandbox's own devpts. */
  async pty(command?: Command, options: PtyOptions = {}): Promise<Pty> {
    const body: Raw = { cols: options.cols ?? 80, rows: options.rows ?? 24 };
    if (command !== undefined) Object.assign(body, Array.isArray(command) ? { argv: command } : { command });
    if (options.workdir !== undefined) body.workdir = options.workdir;
    if (options.env !== undefined) body.env = options.env;
    const raw = await this.call("POST", "/ptys", { json: body });
    return new Pty(this.transport, this.id, raw.pid);
  }

  async ptys(): Promise<ProcessStatus[]> {
    return ((await this.call("GET", "/ptys")).ptys as Raw[]).map(processStatus);
  }

  /** Opens a shell session (name generated when absent). */
  async session(name?: string, options: { workdir?: string; env?: Record<string, string> } = {}): Promise<Session> {
    const body: Raw = { ...options };
    if (name !== undefined) body.name = name;
    return new Session(this, (await this.call("POST", "/sessions", { json: body })).name);
  }

  async sessions(): Promise<Session[]> {
    return ((await this.call("GET", "/sessions")).sessions as Raw[]).map((s) => new Session(this, s.name));
  }

  /** inotify events of a directory as they happen; resume with `since` = the last event's seq. */
  async *watch(path: string, options: WatchOptions = {}): AsyncGenerator<WatchEvent> {
    const response = await this.transport.request("GET", `${this.base}/watch`, {
      query: { path, recursive: options.recursive ? "1" : undefined, since: options.since }, signal: options.signal,
    });
    try {
      for await (const line of ndjson<Raw>(response)) {
        if (line.end !== undefined) return;
        if (line.keepalive) continue;
        yield {
          seq: line.seq, event: line.event, path: line.path, isDir: line.is_dir ?? false,
          ...(line.from !== undefined ? { from: line.from } : {}),
        };
      }
    } finally {
      response.destroy();
    }
  }

  async network(): Promise<NetworkState> {
    return networkState(await this.call("GET", "/network"));
  }

  /** Replaces the policy (a mode or a policy object, as create's `network`). */
  async setNetwork(policy: NetworkPolicy): Promise<NetworkState> {
    return networkState(await this.call("PUT", "/network", { json: policy }));
  }

  /** The engine's decisions for this sandbox, oldest first; `follow` keeps the stream open. */
  async *networkLog(options: { follow?: boolean; signal?: AbortSignal } = {}): AsyncGenerator<Raw> {
    const response = await this.transport.request("GET", `${this.base}/network/log`, {
      query: { follow: options.follow ? "1" : undefined }, signal: options.signal,
    });
    try {
      yield* ndjson<Raw>(response);
    } finally {
      response.destroy();
    }
  }

  /** One HTTP request to the sandbox's TCP `port` through hutchd's proxy: its status and body. */
  async portRequest(port: number, path = "/", options: { method?: string; body?: Body; headers?: Record<string, string> } = {}): Promise<{ status: number; body: Buffer }> {
    const response = await this.transport.request(options.method ?? "GET", `${this.base}/ports/${port}/${path.replace(/^\/+/, "")}`, {
      body: options.body, headers: options.headers,
    });
    return { status: response.statusCode ?? 0, body: await readAll(response) };
  }

  /** A revocable, expiring token that opens `port`'s proxy paths (`token` shown only here). */
  async portToken(port: number, options: { ttlSeconds?: number } = {}): Promise<PortToken> {
    const body = options.ttlSeconds === undefined ? {} : { ttl_seconds: options.ttlSeconds };
    return portToken(await this.call("POST", `/port-tokens/${port}`, { json: body }));
  }

  async portTokens(port: number): Promise<PortToken[]> {
    return ((await this.call("GET", `/port-tokens/${port}`)).tokens as Raw[]).map(portToken);
  }

  async revokePortToken(port: number, tokenId: string): Promise<void> {
    await this.call("DELETE", `/port-tokens/${port}/${encodeURIComponent(tokenId)}`);
  }

  /**
   * A raw TCP connection to the sandbox's `port` through hutchd (databases, ssh): a connected
   * socket whose bytes are the port's, both ways. It is half-open: `end()` is passed on as a
   * half-close and the port's EOF does not end our side; destroy it when done. Rejects with
   * HutchError port_unreachable when nothing listens there.
   */
  tunnel(port: number, options: { signal?: AbortSignal } = {}): Promise<net.Socket> {
    return openTunnel(this.transport, `${this.base}/tunnel/${port}`, options);
  }

  /**
   * Listens on 127.0.0.1:`localPort` (default 0: any free port, see `.port`) and tunnels each
   * connection to the sandbox's `port`, as `hutch port-forward` does. A first tunnel is opened at
   * once, so a wrong sandbox or a closed port rejects here. `await using` closes it.
   */
  portForward(port: number, options: { localPort?: number } = {}): Promise<PortForward> {
    return forwardPort(this.transport, `${this.base}/tunnel/${port}`, options.localPort ?? 0);
  }

  process(pid: number): Process {
    return new Process(this.transport, this.id, pid);
  }

  async processes(): Promise<ProcessStatus[]> {
    const raw = await this.transport.json<Raw>("GET", `${this.base}/processes`);
    return (raw.processes as Raw[]).map(processStatus);
  }

  // Files: raw bytes streamed both ways, and the operations of the Deep Agents protocol.

  /** The file's bytes, streamed (never buffered whole by hutchd). `range` asks for bytes from-to. */
  async readStream(path: string, options: { range?: [number, number?] } = {}): Promise<http.IncomingMessage> {
    const headers: Record<string, string> = {};
    if (options.range) headers["range"] = `bytes=${options.range[0]}-${options.range[1] ?? ""}`;
    return this.transport.request("GET", `${this.base}/files`, { query: { path }, headers });
  }

  async readBytes(path: string): Promise<Buffer> {
    return readAll(await this.readStream(path));
  }

  async readText(path: string): Promise<string> {
    return (await this.readBytes(path)).toString("utf8");
  }

  /** Writes a file of any size atomically (string, bytes, a Readable or an async iterable). */
  async writeFile(path: string, data: Body, options: { mode?: number } = {}): Promise<{ path: string; size: number }> {
    return this.transport.json("PUT", `${this.base}/files`, {
      query: { path, mode: options.mode !== undefined ? options.mode.toString(8).padStart(4, "0") : undefined },
      body: data,
      headers: { "content-type": "application/octet-stream" },
    });
  }

  /** Removes a file, or a directory with recursive (symlinks are removed, never followed). */
  async remove(path: string, options: { recursive?: boolean } = {}): Promise<void> {
    const response = await this.transport.request("DELETE", `${this.base}/files`, {
      query: { path, recursive: options.recursive ? "true" : undefined },
    });
    await readAll(response);
  }

  private fs<T>(op: string, body: Raw): Promise<T> {
    return this.transport.json<T>("POST", `${this.base}/fs/${op}`, { json: body });
  }

  async ls(path: string): Promise<FileEntry[]> {
    return ((await this.fs<Raw>("ls", { path })).entries as Raw[]).map(fileEntry);
  }

  async stat(path: string): Promise<FileEntry> {
    return fileEntry(await this.fs<Raw>("stat", { path }));
  }

  async exists(path: string): Promise<boolean> {
    try {
      await this.stat(path);
      return true;
    } catch (error) {
      if ((error as { code?: string }).code === "file_not_found") return false;
      throw error;
    }
  }

  async mkdir(path: string, options: { parents?: boolean } = {}): Promise<void> {
    await this.fs("mkdir", { path, parents: options.parents ?? true });
  }

  async move(from: string, to: string, options: { overwrite?: boolean } = {}): Promise<void> {
    await this.fs("move", { from, to, overwrite: options.overwrite ?? false });
  }

  /** Lines of a text file from a 0-based line offset. */
  async readLines(path: string, offset = 0, limit = 2000): Promise<ReadLines> {
    const raw = await this.fs<Raw>("read", { path, offset, limit });
    return {
      content: raw.content, totalLines: raw.total_lines, startLine: raw.start_line,
      endLine: raw.end_line, nextOffset: raw.next_offset ?? null,
    };
  }

  /** Writes a text file (atomic, parents created); returns its size. */
  async write(path: string, content: string): Promise<number> {
    return (await this.fs<Raw>("write", { path, content })).size;
  }

  /** Replaces old by new: once (422 not_unique when it occurs more than once) or all. */
  async edit(path: string, oldText: string, newText: string, options: { replaceAll?: boolean } = {}): Promise<number> {
    const raw = await this.fs<Raw>("edit", { path, old: oldText, new: newText, replace_all: options.replaceAll ?? false });
    return raw.occurrences;
  }

  async glob(pattern: string, path = "/"): Promise<string[]> {
    return (await this.fs<Raw>("glob", { pattern, path })).paths;
  }

  /** Literal substring search (not a regex), 1-based lines. */
  async grep(pattern: string, options: { path?: string; glob?: string; maxCount?: number } = {}): Promise<{ matches: GrepMatch[]; truncated: boolean }> {
    const body: Raw = { pattern, path: options.path ?? "/" };
    if (options.glob !== undefined) body.glob = options.glob;
    if (options.maxCount !== undefined) body.max_count = options.maxCount;
    const raw = await this.fs<Raw>("grep", body);
    return { matches: raw.matches, truncated: raw.truncated };
  }

  /** Recursive delete through the file API. */
  async deletePath(path: string): Promise<void> {
    await this.fs("delete", { path });
  }

  /** Many files at once; one result per input in order, failures reported not thrown. */
  async upload(files: Array<[string, Uint8Array | string]>): Promise<UploadResult[]> {
    const raw = await this.fs<Raw>("upload", {
      files: files.map(([path, content]) => ({ path, content_base64: Buffer.from(content).toString("base64") })),
    });
    return raw.files as UploadResult[];
  }

  async download(paths: string[]): Promise<DownloadResult[]> {
    const raw = await this.fs<Raw>("download", { paths });
    return (raw.files as Raw[]).map((file) => ({
      path: file.path,
      ...(file.content_base64 !== undefined ? { content: new Uint8Array(Buffer.from(file.content_base64, "base64")) } : {}),
      ...(file.error !== undefined ? { error: file.error, message: file.message } : {}),
    }));
  }

  // Layers: snapshots, forks and checkpoints.

  async snapshot(name: string): Promise<SnapshotResult> {
    return snapshotResult(await this.transport.json<Raw>("POST", `${this.base}/snapshot`, { json: { name } }));
  }

  /** N sandboxes from a snapshot of this one (all or none). */
  async fork(options: { count?: number; labels?: Record<string, string> } = {}): Promise<{ snapshot: SnapshotResult; sandboxes: Sandbox[] }> {
    const body: Raw = { count: options.count ?? 1 };
    if (options.labels !== undefined) body.labels = options.labels;
    const raw = await this.transport.json<Raw>("POST", `${this.base}/fork`, { json: body });
    return {
      snapshot: snapshotResult(raw.snapshot),
      sandboxes: (raw.sandboxes as Raw[]).map((item) => new Sandbox(this.transport, sandboxInfo(item))),
    };
  }

  async checkpoint(name: string): Promise<SnapshotResult> {
    return snapshotResult(await this.transport.json<Raw>("POST", `${this.base}/checkpoints`, { json: { name } }));
  }

  async checkpoints(): Promise<Checkpoint[]> {
    return (await this.transport.json<Raw>("GET", `${this.base}/checkpoints`)).checkpoints;
  }

  /** Returns the filesystem to a checkpoint: every process of the sandbox is killed. */
  async rollback(name: string): Promise<SandboxInfo> {
    this.info = sandboxInfo(await this.transport.json<Raw>("POST", `${this.base}/checkpoints/${encodeURIComponent(name)}/rollback`));
    return this.info;
  }
}

