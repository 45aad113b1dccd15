// One keep-alive HTTP/1.1 connection pool to hutchd, over its unix socket or TCP with a bearer
// token (HUTCH_SOCKET, HUTCH_URL, HUTCH_TOKEN). node:http only: no runtime dependencies.
import http from "node:http";
import https from "node:https";
import { Readable } from "node:stream";
import { HutchError } from "./errors.js";

export interface ClientOptions {
  /** hutchd's unix socket (default: $HUTCH_SOCKET, else /run/hutch/hutchd.sock unless url is set). */
  socketPath?: string;
  /** http://host:port of a TCP listener (default: $HUTCH_URL). */
  url?: string;
  /** Bearer token for TCP (default: $HUTCH_TOKEN). */
  token?: string;
}

export type Body = string | Uint8Array | Readable | AsyncIterable<Uint8Array>;

export interface RequestOptions {
  query?: Record<string, string | number | boolean | undefined | string[]>;
  json?: unknown;
  body?: Body;
  headers?: Record<string, string>;
  signal?: AbortSignal;
}

export class Transport {
  readonly socketPath?: string;
  readonly url?: URL;
  /** The bearer token sent on TCP (raw connections, such as tunnels, send it themselves). */
  readonly token?: string;
  private readonly agent: http.Agent;

  constructor(options: ClientOptions = {}) {
    const url = options.url ?? process.env.HUTCH_URL;
    const socketPath = options.socketPath ?? process.env.HUTCH_SOCKET;
    if (socketPath !== undefined || url === undefined) {
      this.socketPath = socketPath ?? "/run/hutch/hutchd.sock";
    } else {
      this.url = new URL(url);
    }
    this.token = options.token ?? process.env.HUTCH_TOKEN;
    const secure = this.url?.protocol === "https:";
    this.agent = secure
      ? new https.Agent({ keepAlive: true })
      : new http.Agent({ keepAlive: true });
  }

  /** Closes idle keep-alive connections; the transport stays usable. */
  close(): void {
    this.agent.destroy();
  }

  /** The raw response of a request whose status is 2xx; any other status becomes a HutchError. */
  async request(method: string, path: string, options: RequestOptions = {}): Promise<http.IncomingMessage> {
    const target = path + queryString(options.query);
    const headers: Record<string, string> = { ...options.headers };
    if (this.token) headers["authorization"] = `Bearer ${this.token}`;
    let payload: string | Uint8Array | Readable | AsyncIterable<Uint8Array> | undefined = options.body;
    if (options.json !== undefined) {
      payload = JSON.stringify(options.json);
      headers["content-type"] = "application/json";
    }
    if (payload === undefined) payload = "";
    if (typeof payload === "string" || payload instanceof Uint8Array) {
      headers["content-length"] = String(Buffer.byteLength(payload));
    }
    const requestOptions: http.RequestOptions = {
      method,
      path: target,
      headers,
      agent: this.agent,
      signal: options.signal,
    };
    if (this.socketPath !== undefined) {
      requestOptions.socketPath = this.socketPath;
    } else if (this.url !== undefined) {
      requestOptions.host = this.url.hostname;
      requestOptions.port = this.url.port;
    }
    const module = this.url?.protocol === "https:" ? https : http;
    const response = await new Promise<http.IncomingMessage>((resolve, reject) => {
      const request = module.request(requestOptions, resolve);
      request.on("error", reject);
      if (typeof payload === "string" || payload instanceof Uint8Array) {
        request.end(payload);
      } else {
        const stream = payload instanceof Readable ? payload : Readable.from(payload as AsyncIterable<Uint8Array>);
        stream.on("error", (error) => request.destroy(error));
        stream.pipe(request);
      }
    });
    const status = response.statusCode ?? 0;
    if (status >= 200 && status < 300) return response;
    const text = (await readAll(response)).toString("utf8");
    throw HutchError.fromResponse(status, text, header(response, "x-request-id"));
  }

  async json<T>(method: string, path: string, options: RequestOptions = {}): Promise<T> {
    const response = await this.request(method, path, options);
    const text = (await readAll(response)).toString("utf8");
    return (text.length === 0 ? undefined : JSON.parse(text)) as T;
  }
}

export function header(response: http.IncomingMessage, name: string): string | undefined {
  const value = response.headers[name];
  return Array.isArray(value) ? value[0] : value;
}

export async function readAll(stream: AsyncIterable<Buffer | string>): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const chunk of stream) chunks.push(typeof chunk === "string" ? Buffer.from(chunk) : chunk);
  return Buffer.concat(chunks);
}

/** The lines of an NDJSON response, parsed, as they arrive. */
export async function* ndjson<T>(stream: AsyncIterable<Buffer | string>): AsyncGenerator<T> {
  let pending = "";
  const decoder = new TextDecoder();
  for await (const chunk of stream) {
    pending += typeof chunk === "string" ? chunk : decoder.decode(chunk, { stream: true });
    let newline: number;
    while ((newline = pending.indexOf("\n")) >= 0) {
      const line = pending.slice(0, newline);
      pending = pending.slice(newline + 1);
      if (line.trim().length > 0) yield JSON.parse(line) as T;
    }
  }
  pending += decoder.decode();
  if (pending.trim().length > 0) yield JSON.parse(pending) as T;
}

function queryString(query: RequestOptions["query"]): string {
  if (query === undefined) return "";
  const params = new URLSearchParams();
  for (const [key, value] of Object.entries(query)) {
    if (value === undefined) continue;
    if (Array.isArray(value)) for (const item of value) params.append(key, item);
    else params.append(key, String(value));
  }
  const text = params.toString();
  return text.length === 0 ? "" : `?${text}`;
}
