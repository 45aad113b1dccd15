// Raw TCP tunnels to a sandbox's port (POST /v1/sandboxes/{id}/tunnel/{port}, docs/api.md) and a
// local port forward made of them, as `hutch port-forward` does. After hutchd's 200 head the
// connection carries the port's bytes both ways, so a tunnel is the socket itself. node:http has
// no way to hand over a connection after a 200 (only after a 101 or a CONNECT), so the request
// head is written by hand; the bytes read past the answer's head (a server that speaks first,
// such as ssh) are put back with unshift() before the socket is handed out.
import net from "node:net";
import tls from "node:tls";
import { HutchError } from "./errors.js";
import type { Transport } from "./transport.js";

const maxHead = 64 * 1024;

function connect(transport: Transport): net.Socket {
  // allowHalfOpen: the port's EOF is passed on without ending our side; the caller ends it.
  if (transport.socketPath !== undefined) return net.connect({ path: transport.socketPath, allowHalfOpen: true });
  const url = transport.url as URL;
  const port = Number(url.port || (url.protocol === "https:" ? 443 : 80));
  const socket = net.connect({ host: url.hostname, port, allowHalfOpen: true });
  return url.protocol === "https:" ? tls.connect({ socket, servername: url.hostname }) : socket;
}

/** Resolves once `socket` has bytes to read (true) or ended (false); rejects on its error. */
function readable(socket: net.Socket): Promise<boolean> {
  return new Promise((resolve, reject) => {
    const done = (result: boolean | Error) => {
      socket.off("readable", onReadable);
      socket.off("end", onEnd);
      socket.off("error", onError);
      if (result instanceof Error) reject(result);
      else resolve(result);
    };
    const onReadable = () => done(true);
    const onEnd = () => done(false);
    const onError = (error: Error) => done(error);
    socket.on("readable", onReadable);
    socket.on("end", onEnd);
    socket.on("error", onError);
  });
}

function connectionError(what: string, error: unknown): HutchError {
  if (error instanceof HutchError) return error;
  return new HutchError("connection_error", 0, `${what}: ${error instanceof Error ? error.message : String(error)}`);
}

/**
 * The connection to hutchd once it answered 200 to `POST path`; a HutchError with hutchd's code
 * otherwise (port_unreachable, sandbox_not_found, invalid_port, ...).
 */
export async function openTunnel(transport: Transport, path: string, options: { signal?: AbortSignal } = {}): Promise<net.Socket> {
  const what = `POST ${path}`;
  const socket = connect(transport);
  const abort = () => socket.destroy(connectionError(what, options.signal?.reason ?? new Error("aborted")));
  options.signal?.throwIfAborted();
  options.signal?.addEventListener("abort", abort, { once: true });
  try {
    const head = [`${what} HTTP/1.1`, "Host: hutch", "Content-Length: 0"];
    if (transport.token) head.push(`Authorization: Bearer ${transport.token}`);
    socket.write(head.join("\r\n") + "\r\n\r\n");
    let buffered = Buffer.alloc(0);
    let end = -1;
    while (end < 0) {
      const chunk = socket.read() as Buffer | null;
      if (chunk === null) {
        if (!(await readable(socket))) throw new HutchError("connection_error", 0, `${what}: hutchd closed the connection inside its answer's head`);
        continue;
      }
      buffered = Buffer.concat([buffered, chunk]);
      end = buffered.indexOf("\r\n\r\n");
      if (end < 0 && buffered.length > maxHead) throw new HutchError("protocol_error", 0, `${what}: hutchd's answer has no end to its head`);
    }
    const lines = buffered.subarray(0, end).toString("latin1").split("\r\n");
    const status = Number(lines[0].split(" ")[1]);
    const headers = new Map(lines.slice(1).map((line) => {
      const colon = line.indexOf(":");
      return [line.slice(0, colon).trim().toLowerCase(), line.slice(colon + 1).trim()] as const;
    }));
    let rest = buffered.subarray(end + 4);
    if (status === 200) {
      // Synchronously after read(): an EOF already received cannot have emitted "end" yet.
      if (rest.length > 0) socket.unshift(rest);
      return socket;
    }
    const length = Number(headers.get("content-length") ?? Number.POSITIVE_INFINITY);
    while (rest.length < length) {
      const chunk = socket.read() as Buffer | null;
      if (chunk !== null) rest = Buffer.concat([rest, chunk]);
      else if (!(await readable(socket))) break;
    }
    throw HutchError.fromResponse(status, rest.toString("utf8"), headers.get("x-request-id"));
  } catch (error) {
    socket.destroy();
    throw connectionError(what, error);
  } finally {
    options.signal?.removeEventListener("abort", abort);
  }
}

/** A local listener whose every connection is tunnelled to a sandbox's port. */
export interface PortForward extends AsyncDisposable {
  /** The local port it listens on (127.0.0.1). */
  readonly port: number;
  /** Connections being forwarded now. */
  readonly connections: number;
  /** The error of the last connection whose tunnel could not be opened (that connection was closed). */
  readonly lastError?: HutchError;
  /** Stops listening and ends every forwarded connection. */
  close(): Promise<void>;
}

/**
 * Listens on 127.0.0.1:`localPort` (0: any free port) and tunnels each connection to `path`. A
 * first tunnel is opened before listening, so a wrong sandbox or a closed port rejects at once.
 */
export async function forwardPort(transport: Transport, path: string, localPort: number): Promise<PortForward> {
  (await openTunnel(transport, path)).destroy();
  const clients = new Set<net.Socket>();
  const tunnels = new Set<net.Socket>();
  const opening = new Set<Promise<void>>();
  let lastError: HutchError | undefined;
  let closing = false;
  const track = (set: Set<net.Socket>, socket: net.Socket) => {
    set.add(socket);
    socket.on("close", () => set.delete(socket));
    socket.on("error", () => socket.destroy());
  };
  const server = net.createServer({ allowHalfOpen: true, pauseOnConnect: true }, (client) => {
    track(clients, client);
    const opened = openTunnel(transport, path).then((tunnel) => {
      if (closing || client.destroyed) {
        tunnel.destroy();
        client.destroy();
        return;
      }
      track(tunnels, tunnel);
      // Either side closing (both directions done, or an error) closes the other.
      tunnel.on("close", () => client.destroy());
      client.on("close", () => tunnel.destroy());
      // pipe() passes each side's EOF on as end(): a half-close; with allowHalfOpen a socket
      // closes once both of its directions ended.
      client.pipe(tunnel);
      tunnel.pipe(client);
      client.resume();
    }, (error: HutchError) => {
      lastError = error;
      client.destroy();
    }).finally(() => opening.delete(opened));
    opening.add(opened);
  });
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(localPort, "127.0.0.1", () => {
      server.off("error", reject);
      resolve();
    });
  });
  const close = async () => {
    if (closing) return;
    closing = true;
    const closed = new Promise<void>((resolve) => server.close(() => resolve()));
    for (const socket of [...clients, ...tunnels]) socket.destroy();
    // A tunnel still being opened is destroyed as soon as it is: wait for that too.
    await Promise.allSettled([...opening]);
    await closed;
  };
  return {
    port: (server.address() as net.AddressInfo).port,
    get connections() {
      return clients.size;
    },
    get lastError() {
      return lastError;
    },
    close,
    [Symbol.asyncDispose]: close,
  };
}
