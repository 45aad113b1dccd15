// The entry point: `new HutchClient()` talks to hutchd on $HUTCH_SOCKET (or $HUTCH_URL with
// $HUTCH_TOKEN) and makes, finds and lists sandboxes; recipes, secrets, layer gc, health and metrics.
import { HutchError } from "./errors.js";
import { Sandbox, sandboxInfo } from "./sandbox.js";
import { ClientOptions, readAll, Transport } from "./transport.js";
import type { BakeResult, CreateOptions, RecipeInfo, SecretInfo, VolumeInfo } from "./types.js";

type Raw = Record<string, any>;

function createBody(options: CreateOptions): Raw {
  const body: Raw = {};
  if (options.rootfs !== undefined) body.rootfs = options.rootfs;
  if (options.recipe !== undefined) body.recipe = options.recipe;
  if (options.limits !== undefined) body.limits = options.limits;
  if (options.env !== undefined) body.env = options.env;
  if (options.labels !== undefined) body.labels = options.labels;
  if (options.idleTtlSeconds !== undefined) body.idle_ttl_seconds = options.idleTtlSeconds;
  if (options.maxLifetimeSeconds !== undefined) body.max_lifetime_seconds = options.maxLifetimeSeconds;
  if (options.defaultTimeoutSeconds !== undefined) body.default_timeout_seconds = options.defaultTimeoutSeconds;
  if (options.network !== undefined) body.network = options.network;
  if (options.hostname !== undefined) body.hostname = options.hostname;
  if (options.workdir !== undefined) body.workdir = options.workdir;
  if (options.mounts !== undefined) body.mounts = options.mounts;
  if (options.volumes !== undefined) body.volumes = options.volumes;
  return body;
}

function volumeInfo(raw: Raw): VolumeInfo {
  return {
    name: raw.name, sizeBytes: raw.size_bytes, created: raw.created,
    usedBytes: raw.used_bytes ?? null, availableBytes: raw.available_bytes ?? null,
    attached: (raw.attached as Raw[] ?? []).map((a) => ({
      sandbox: a.sandbox, target: a.target, readonly: Boolean(a.readonly), shared: Boolean(a.shared), ending: Boolean(a.ending),
    })),
  };
}

function labelQuery(labels: Record<string, string> | undefined): string[] | undefined {
  if (labels === undefined) return undefined;
  return Object.entries(labels).map(([key, value]) => `${key}=${value}`);
}

export class HutchClient {
  readonly transport: Transport;

  constructor(options: ClientOptions = {}) {
    this.transport = new Transport(options);
  }

  /** Closes idle connections (the client stays usable). */
  close(): void {
    this.transport.close();
  }

  [Symbol.dispose](): void {
    this.close();
  }

  async create(options: CreateOptions = {}): Promise<Sandbox> {
    const raw = await this.transport.json<Raw>("POST", "/v1/sandboxes", { json: createBody(options), signal: options.signal });
    return new Sandbox(this.transport, sandboxInfo(raw));
  }

  /** Stores a secret for inject rules (write-only: no route gives a value back). */
  async setSecret(name: string, value: string): Promise<void> {
    await this.transport.json("PUT", `/v1/secrets/${encodeURIComponent(name)}`, { body: value });
  }

  async secrets(): Promise<SecretInfo[]> {
    return (await this.transport.json<Raw>("GET", "/v1/secrets")).secrets as SecretInfo[];
  }

  async deleteSecret(name: string): Promise<void> {
    await this.transport.json("DELETE", `/v1/secrets/${encodeURIComponent(name)}`);
  }

  /**
   * A persistent volume of `sizeBytes` (its quota: a multiple of 4096, 16 MiB..1 TiB) that
   * outlives the sandboxes it is mounted in (create's `volumes`). HutchError volume_exists if taken.
   */
  async createVolume(name: string, sizeBytes: number): Promise<VolumeInfo> {
    return volumeInfo(await this.transport.json<Raw>("POST", "/v1/volumes", { json: { name, size_bytes: sizeBytes } }));
  }

  async volumes(): Promise<VolumeInfo[]> {
    return ((await this.transport.json<Raw>("GET", "/v1/volumes")).volumes as Raw[]).map(volumeInfo);
  }

  /** The volume with its usage and attachments; HutchError volume_not_found if there is none. */
  async volume(name: string): Promise<VolumeInfo> {
    return volumeInfo(await this.transport.json<Raw>("GET", `/v1/volumes/${encodeURIComponent(name)}`));
  }

  /** Deletes the volume and its files; HutchError volume_busy while a sandbox has it attached. */
  async deleteVolume(name: string): Promise<void> {
    await this.transport.json("DELETE", `/v1/volumes/${encodeURIComponent(name)}`);
  }

  /** An existing sandbox; HutchError sandbox_not_found if there is none. */
  async get(id: string): Promise<Sandbox> {
    const raw = await this.transport.json<Raw>("GET", `/v1/sandboxes/${encodeURIComponent(id)}`);
    return new Sandbox(this.transport, sandboxInfo(raw));
  }

  /** Sandboxes whose labels include every given label. */
  async list(labels?: Record<string, string>): Promise<Sandbox[]> {
    const raw = await this.transport.json<Raw>("GET", "/v1/sandboxes", { query: { label: labelQuery(labels) } });
    return (raw.sandboxes as Raw[]).map((item) => new Sandbox(this.transport, sandboxInfo(item)));
  }

  /** The first sandbox with these labels, else a new one created with them. */
  async getOrCreate(labels: Record<string, string>, options: CreateOptions = {}): Promise<Sandbox> {
    const found = await this.list(labels);
    if (found.length > 0) return found[0];
    return this.create({ ...options, labels: { ...options.labels, ...labels } });
  }

  async health(): Promise<Raw> {
    return this.transport.json<Raw>("GET", "/v1/health");
  }

  async metrics(): Promise<string> {
    return (await readAll(await this.transport.request("GET", "/metrics"))).toString("utf8");
  }

  async pools(): Promise<Array<{ rootfs: string; size: number; idle: number }>> {
    return (await this.transport.json<Raw>("GET", "/v1/pools")).pools;
  }

  /**
   * Bakes a recipe directory (setup.sh, optionally recipe.json) on the host into a layer tagged
   * `name`. A failed bake throws HutchError bake_failed with the bake's log in `details.log`.
   */
  async bake(options: { dir: string; name?: string; base?: string; env?: Record<string, string>; timeoutSeconds?: number }): Promise<BakeResult> {
    const body: Raw = { dir: options.dir };
    if (options.name !== undefined) body.name = options.name;
    if (options.base !== undefined) body.base = options.base;
    if (options.env !== undefined) body.env = options.env;
    if (options.timeoutSeconds !== undefined) body.timeout_seconds = options.timeoutSeconds;
    return this.transport.json<BakeResult>("POST", "/v1/recipes", { json: body });
  }

  async recipes(): Promise<RecipeInfo[]> {
    return (await this.transport.json<Raw>("GET", "/v1/recipes")).recipes;
  }

  async deleteRecipe(name: string): Promise<void> {
    await readAll(await this.transport.request("DELETE", `/v1/recipes/${encodeURIComponent(name)}`));
  }

  /** Removes unused layers older than graceSeconds (default 600); returns their ids. */
  async gc(graceSeconds?: number): Promise<string[]> {
    const body = graceSeconds === undefined ? {} : { grace_seconds: graceSeconds };
    return (await this.transport.json<Raw>("POST", "/v1/layers/gc", { json: body })).removed;
  }
}

export { HutchError };
