// Raw TCP tunnels (sandbox.tunnel) and local port forwards (sandbox.portForward) against a real
// hutchd, to a TCP echo server running inside the sandbox.
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import net from "node:net";
import { after, before, describe, test } from "node:test";
import { HutchClient, HutchError, Sandbox, type PortForward } from "../index.js";
import { Hutchd, skipReason } from "./hutchd.js";

const skip = skipReason();
const echoPort = 7000;
const bannerPort = 7001;
const closedPort = 7999;

// Echoes every connection's bytes; at the client's EOF it answers "<eof>" and half-closes in turn,
// so a test sees that its half-close went through and that it can still read afterwards. With a
// banner it speaks first, as ssh does.
const echoServer = String.raw`
import socket, sys, threading
port = int(sys.argv[1])
banner = sys.argv[2].encode() if len(sys.argv) > 2 else b""
def serve(conn):
    try:
        with conn:
            if banner:
                conn.sendall(banner)
            while data := conn.recv(65536):
                conn.sendall(data)
            conn.sendall(b"<eof>")
            conn.shutdown(socket.SHUT_WR)
    except OSError:
        pass
listener = socket.create_server(("127.0.0.1", port))
while True:
    conn, _ = listener.accept()
    threading.Thread(target=serve, args=(conn,), daemon=True).start()
`;

/** Writes `payload`, half-closes, and collects everything until the other side's EOF. */
async function echo(socket: net.Socket, payload: Buffer | string): Promise<Buffer> {
  const chunks: Buffer[] = [];
  const ended = new Promise<void>((resolve, reject) => {
    socket.on("data", (chunk: Buffer) => chunks.push(chunk));
    socket.once("end", resolve);
    socket.once("error", reject);
  });
  socket.end(payload);
  await ended;
  return Buffer.concat(chunks);
}

function connectLocal(port: number): Promise<net.Socket> {
  return new Promise((resolve, reject) => {
    const socket = net.connect({ host: "127.0.0.1", port, allowHalfOpen: true }, () => resolve(socket));
    socket.once("error", reject);
  });
}

/** Handles of the kinds a tunnel or a forward holds (TCPSocketWrap, TCPServerWrap, PipeWrap). */
function socketHandles(): number {
  return process.getActiveResourcesInfo().filter((kind) => /^(TCP|Pipe)/.test(kind)).length;
}

async function until<T>(what: string, probe: () => Promise<T | undefined>, seconds = 20): Promise<T> {
  const deadline = Date.now() + seconds * 1000;
  while (Date.now() < deadline) {
    const value = await probe();
    if (value !== undefined) return value;
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
  throw new Error(`timed out waiting for ${what}`);
}

async function rejectsWith(promise: Promise<unknown>, status: number, code: string): Promise<HutchError> {
  let caught: HutchError | undefined;
  await assert.rejects(promise, (error: unknown) => {
    assert.ok(error instanceof HutchError, String(error));
    assert.equal(error.status, status);
    assert.equal(error.code, code);
    caught = error;
    return true;
  });
  return caught as HutchError;
}

describe("tunnels and port forwards", { skip }, () => {
  const daemon = new Hutchd({ tcp: true });
  let client: HutchClient;
  let sandbox: Sandbox;

  before(async () => {
    await daemon.start();
    client = new HutchClient({ socketPath: daemon.socket });
    sandbox = await client.create({ labels: { suite: "js-tunnel" } });
    await sandbox.writeFile("/srv/echo.py", echoServer);
    await sandbox.spawn(["python3", "/srv/echo.py", String(echoPort)]);
    await sandbox.spawn(["python3", "/srv/echo.py", String(bannerPort), "hello from inside\n"]);
    for (const port of [echoPort, bannerPort]) {
      const deadline = Date.now() + 20_000;
      while (true) {
        try {
          (await sandbox.tunnel(port)).destroy();
          break;
        } catch (error) {
          assert.ok(error instanceof HutchError && error.code === "port_unreachable" && Date.now() < deadline, String(error));
          await new Promise((resolve) => setTimeout(resolve, 50));
        }
      }
    }
  });

  after(async () => {
    await sandbox?.delete().catch(() => undefined);
    client?.close();
    await daemon.stop();
  });

  test("a tunnel echoes 1 MiB byte-exact and passes the half-close", async () => {
    const payload = randomBytes(1 << 20);
    const socket = await sandbox.tunnel(echoPort);
    assert.deepEqual(await echo(socket, payload), Buffer.concat([payload, Buffer.from("<eof>")]));
    socket.destroy();
  });

  test("what the server sent first is not lost", async () => {
    const socket = await sandbox.tunnel(bannerPort);
    assert.equal((await echo(socket, "ping")).toString(), "hello from inside\nping<eof>");
    socket.destroy();
  });

  test("errors carry hutchd's code", async () => {
    const closed = await rejectsWith(sandbox.tunnel(closedPort), 502, "port_unreachable");
    assert.match(closed.message, new RegExp(String(closedPort)));
    assert.ok(closed.requestId);
    await rejectsWith(sandbox.tunnel(0), 400, "invalid_port");
    await rejectsWith(client.get("sb-000000000000").then((s) => s.tunnel(echoPort)), 404, "sandbox_not_found");
    await rejectsWith(sandbox.portForward(closedPort), 502, "port_unreachable");
    const aborted = new AbortController();
    aborted.abort();
    await assert.rejects(sandbox.tunnel(echoPort, { signal: aborted.signal }));
  });

  test("over TCP with the bearer token, refused without it", async () => {
    const tcp = new HutchClient({ url: `http://127.0.0.1:${daemon.port}`, token: daemon.token });
    const remote = await tcp.get(sandbox.id);
    const socket = await remote.tunnel(echoPort);
    assert.equal((await echo(socket, "over tcp")).toString(), "over tcp<eof>");
    socket.destroy();
    tcp.close();
    const wrong = new HutchClient({ url: `http://127.0.0.1:${daemon.port}`, token: "not-the-token" });
    const stranger = new Sandbox(wrong.transport, sandbox.info);
    await assert.rejects(stranger.tunnel(echoPort), (error: unknown) => error instanceof HutchError && error.status === 401);
    wrong.close();
  });

  test("portForward serves plain sockets and closes everything", async () => {
    client.close();
    await new Promise((resolve) => setTimeout(resolve, 50));
    const handles = socketHandles();
    let port: number;
    let lingeringEnded: Promise<unknown>;
    let lingering: net.Socket;
    {
      await using forward = await sandbox.portForward(echoPort);
      port = forward.port;
      assert.ok(port > 0);
      const payload = randomBytes(1 << 20);
      assert.deepEqual(await echo(await connectLocal(port), payload), Buffer.concat([payload, Buffer.from("<eof>")]));
      const many = await Promise.all(Array.from({ length: 8 }, async (_, i) =>
        (await echo(await connectLocal(port), `client ${i}`.repeat(1000))).toString()));
      assert.deepEqual(many, Array.from({ length: 8 }, (_, i) => `client ${i}`.repeat(1000) + "<eof>"));
      // One left open when the forward closes: closing ends it rather than waiting for it.
      lingering = await connectLocal(port);
      lingeringEnded = new Promise((resolve) => lingering.once("end", resolve));
      lingering.write("still here");
      const first = await new Promise<Buffer>((resolve) => lingering.once("data", resolve));
      assert.equal(first.toString(), "still here");
      assert.equal(forward.connections, 1);
      assert.equal(forward.lastError, undefined);
    }
    await lingeringEnded;
    lingering.destroy();
    await assert.rejects(connectLocal(port), (error: NodeJS.ErrnoException) => error.code === "ECONNREFUSED");
    // A closed socket's handle leaves the list once libuv's close callback ran (a turn or two).
    await until("the sockets' handles to go", async () => (socketHandles() <= handles ? true : undefined), 2);
  });

  test("a forwarded connection whose tunnel fails is closed and reported", async () => {
    const other = await client.create({ labels: { suite: "js-tunnel-gone" } });
    await other.writeFile("/srv/echo.py", echoServer);
    await other.spawn(["python3", "/srv/echo.py", String(echoPort)]);
    const deadline = Date.now() + 20_000;
    let forward: PortForward | undefined;
    while (forward === undefined) {
      try {
        forward = await other.portForward(echoPort);
      } catch (error) {
        assert.ok(error instanceof HutchError && error.code === "port_unreachable" && Date.now() < deadline, String(error));
        await new Promise((resolve) => setTimeout(resolve, 50));
      }
    }
    try {
      await other.delete({ wait: true });
      const socket = await connectLocal(forward.port);
      await new Promise((resolve) => socket.once("end", resolve));
      socket.destroy();
      assert.equal(forward.lastError?.code, "sandbox_not_found");
    } finally {
      await forward.close();
    }
  });
});
