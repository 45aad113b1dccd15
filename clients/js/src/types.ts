// The shapes hutchd answers (docs/api.md), in the client's camelCase. Raw server objects are kept
// in `raw` where a caller may want fields this version does not name.

export interface Limits {
  memory_bytes?: number;
  pids?: number;
  cpus?: number;
  cpu_weight?: number;
  disk_bytes?: number;
}

export interface CreateOptions {
  rootfs?: string;
  recipe?: string;
  limits?: Limits;
  env?: Record<string, string>;
  labels?: Record<string, string>;
  idleTtlSeconds?: number;
  maxLifetimeSeconds?: number;
  defaultTimeoutSeconds?: number;
  network?: NetworkPolicy;
  hostname?: string;
  workdir?: string;
  /** Host directories under hutchd's --mount-root, read-only unless readonly: false. */
  mounts?: { source: string; target: string; readonly?: boolean }[];
  /** Persistent volumes (createVolume) to mount; `shared`: read-write beside other shared writers. */
  volumes?: { name: string; target: string; readonly?: boolean; shared?: boolean }[];
  signal?: AbortSignal;
}

export type NetworkMode = "none" | "loopback" | "filtered" | "open";

/** A mode, or a policy: `{ mode, allow, deny, inject }` (docs/network.md). */
export type NetworkPolicy = NetworkMode | { mode: NetworkMode; allow?: string[]; deny?: string[]; inject?: unknown[] };

export interface NetworkState {
  mode: NetworkMode;
  allow: string[];
  deny: string[];
  stats: Record<string, number> | null;
  error: { code: string; message: string } | null;
  caPem: string | null;
  placeholders: Record<string, string>;
  raw: Record<string, any>;
}

export interface PtyOptions {
  cols?: number;
  rows?: number;
  workdir?: string;
  env?: Record<string, string>;
}

export interface WatchOptions {
  recursive?: boolean;
  since?: number;
  signal?: AbortSignal;
}

/** One watch event: create, modify, delete, move (with `from`), attrib, or overflow/reset/limit. */
export interface WatchEvent {
  seq: number;
  event: string;
  path: string;
  isDir: boolean;
  from?: string;
}

export interface SecretInfo {
  name: string;
  source: "file" | "environment" | "api";
  updated: string;
}

export interface SandboxInfo {
  id: string;
  state: "running" | "paused";
  createdAt: string;
  rootfs: string;
  labels: Record<string, string>;
  env: Record<string, string>;
  network: string;
  hostname: string;
  workdir: string;
  initPid?: number;
  recipe?: string;
  layers?: string[];
  raw: Record<string, unknown>;
}

export interface ExecOptions {
  workdir?: string;
  env?: Record<string, string>;
  /** Written to stdin, then EOF; without it stdin is /dev/null. */
  stdin?: string;
  timeoutSeconds?: number;
  maxOutputBytes?: number;
  /** Throw CommandExitError when the command does not exit 0. */
  check?: boolean;
  /** Streamed output as it happens (the exec then runs with `stream: true`). */
  onStdout?: (text: string) => void;
  onStderr?: (text: string) => void;
  signal?: AbortSignal;
}

export interface ExecResult {
  stdout: string;
  stderr: string;
  exitCode: number;
  durationMs: number;
  timedOut: boolean;
  oomKilled: boolean;
  truncated: boolean;
  startError?: string;
}

export type ExecEvent =
  | { type: "stdout"; data: string }
  | { type: "stderr"; data: string }
  | { type: "exit"; result: ExecResult };

export interface ProcessStatus {
  pid: number;
  state: "running" | "exited";
  argv: string[];
  startedAt: string;
  durationMs: number;
  exitCode: number | null;
  termSignal: number | null;
}

export interface OutputChunk {
  data: string;
  offset: number;
  nextOffset: number;
  eof: boolean;
  truncated: boolean;
}

export interface FileEntry {
  path: string;
  isDir: boolean;
  size: number;
  modifiedAt: string;
  type: string;
  mode: number;
  linkTarget?: string;
}

export interface ReadLines {
  content: string;
  totalLines: number;
  startLine: number;
  endLine: number;
  nextOffset: number | null;
}

export interface GrepMatch {
  path: string;
  line: number;
  text: string;
}

export interface UploadResult {
  path: string;
  size?: number;
  error?: string;
  message?: string;
}

export interface DownloadResult {
  path: string;
  content?: Uint8Array;
  error?: string;
  message?: string;
}

export interface SnapshotResult {
  name: string;
  digest: string;
  files: number;
  bytes: number;
  frozenMs: number;
  durationMs: number;
  /** The sandbox's volumes, which the snapshot does not include (mounts, not layers). */
  volumesExcluded: string[];
}

export interface VolumeAttachment {
  sandbox: string;
  target: string;
  readonly: boolean;
  shared: boolean;
  /** The sandbox is being torn down. */
  ending: boolean;
}

/** A persistent volume: sizeBytes is its quota; usedBytes/availableBytes null when unknown. */
export interface VolumeInfo {
  name: string;
  sizeBytes: number;
  created: string;
  usedBytes: number | null;
  availableBytes: number | null;
  attached: VolumeAttachment[];
}

export interface RecipeInfo {
  name: string;
  digest: string;
  created: string;
  size: number;
  base: string;
}

export interface BakeResult {
  name: string;
  digest: string;
  cached: boolean;
  log: string;
}

export interface Checkpoint {
  name: string;
  digest: string;
  created: string;
}

/** A port token; `token` (and `url`, a browser link) only in the answer that made it. */
export interface PortToken {
  id: string;
  port: number;
  expiresAt: string;
  token?: string;
  url?: string;
}
