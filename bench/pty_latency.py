#!/usr/bin/env python3
"""Keystroke -> echo latency of a hutchd PTY over its unix socket (bench/pty.sh runs it).

Starts /bin/cat on a pty in a new sandbox; for each keystroke, POSTs one byte to .../input on a
keep-alive connection and times until the terminal's echo of that byte arrives on the followed
output stream (GET .../output?follow=1, a second connection). Prints p50/p95/p99/max.
Standard library only (http.client over AF_UNIX)."""
import argparse
import base64
import http.client
import json
import socket
import statistics
import time


class UnixConnection(http.client.HTTPConnection):
    def __init__(self, path):
        super().__init__("localhost")
        self.path = path

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(self.path)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 16)


def call(conn, method, path, body=None):
    conn.request(method, path, body=None if body is None else json.dumps(body),
                 headers={"Content-Type": "application/json"})
    reply = conn.getresponse()
    data = reply.read()
    if reply.status >= 300:
        raise SystemExit(f"{method} {path}: {reply.status} {data!r}")
    return json.loads(data) if data else None


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--socket", required=True)
    parser.add_argument("--keystrokes", type=int, default=300)
    args = parser.parse_args()

    control = UnixConnection(args.socket)
    sandbox = call(control, "POST", "/v1/sandboxes", {})["id"]
    try:
        base = f"/v1/sandboxes/{sandbox}/ptys"
        pid = call(control, "POST", base, {"argv": ["/bin/cat"]})["pid"]
        stream = UnixConnection(args.socket)
        stream.request("GET", f"{base}/{pid}/output?follow=1&encoding=base64&offset=0")
        output = stream.getresponse()
        pending = b""

        def next_data():
            nonlocal pending
            while True:
                line, sep, rest = pending.partition(b"\n")
                if sep:
                    pending = rest
                    if line:
                        event = json.loads(line)
                        if "data" in event:
                            return base64.b64decode(event["data"])
                    continue
                chunk = output.read1(65536)
                if not chunk:
                    raise SystemExit("the output stream ended")
                pending += chunk

        samples = []
        for i in range(args.keystrokes + 20):
            key = b"abcdefghijklmnopqrstuvwxyz"[i % 26:i % 26 + 1]
            start = time.perf_counter()
            call(control, "POST", f"{base}/{pid}/input",
                 {"data_base64": base64.b64encode(key).decode()})
            seen = b""
            while key not in seen:
                seen += next_data()
            if i >= 20:  # warm-up: connections, the pump thread, caches
                samples.append((time.perf_counter() - start) * 1000)
        samples.sort()
        q = statistics.quantiles(samples, n=100)
        print(f"pty keystroke->echo over {args.socket} ({len(samples)} keystrokes): "
              f"p50 {q[49]:.3f} ms  p95 {q[94]:.3f} ms  p99 {q[98]:.3f} ms  "
              f"max {samples[-1]:.3f} ms")
        call(control, "DELETE", f"{base}/{pid}")
    finally:
        call(control, "DELETE", f"/v1/sandboxes/{sandbox}")


if __name__ == "__main__":
    main()
