"""The synchronous client: `Client` -> `Sandbox` -> exec, processes, files, layers."""

from __future__ import annotations

import base64
import json
import os
import socket
import time
import urllib.parse
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import IO, Any, Self, Union

from hutch._transport import Response, Transport
from hutch._tunnel import PortForward, open_tunnel
from hutch.errors import CommandError, FileNotFound, HutchError, ProtocolError
from hutch.models import (BakeResult, Checkpoint, ExecResult, FileEntry, FileResult, GrepMatch,
                          GrepResult, Health, NetworkState, OutputChunk, OutputEvent, Pool,
                          PortToken, ProcessStatus, Recipe, SandboxInfo, SecretInfo, SnapshotResult,
                          TextWindow, Volume, WatchEvent)

Command = Union[str, Sequence[str]]
PathLike = Union[str, "os.PathLike[str]"]
_SERVER_WAIT_MAX = 600


def _q(value: str) -> str:
    return urllib.parse.quote(value, safe="")


def _command_fields(command: Command) -> dict[str, Any]:
    if isinstance(command, str):
        return {"command": command}
    return {"argv": list(command)}


def _argv_of(command: Command) -> list[str]:
    return ["/bin/sh", "-c", command] if isinstance(command, str) else list(command)


def _stdin_fields(stdin: str | bytes | None) -> dict[str, Any]:
    if stdin is None:
        return {}
    if isinstance(stdin, bytes):
        try:
            return {"stdin": stdin.decode("utf-8")}
        except UnicodeDecodeError as e:
            raise ValueError("exec stdin must be UTF-8 (JSON strings); for binary input "
                             "write a file or use a background process's write_stdin") from e
    return {"stdin": stdin}


class Client:
    """A connection to hutchd.

    `Client()` reads `HUTCH_URL` (TCP, e.g. `http://127.0.0.1:8080`) or `HUTCH_SOCKET` (default
    `/run/hutch/hutchd.sock`) and `HUTCH_TOKEN` (the bearer token TCP needs). Thread-safe.
    """

    def __init__(self, socket: str | None = None, *, url: str | None = None,
                 token: str | None = None, timeout: float | None = 660.0) -> None:
        self.transport = Transport(socket, url, token, timeout)
        self.recipes = Recipes(self)

    def close(self) -> None:
        self.transport.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- sandboxes ----

    def create(self, *, rootfs: str | None = None, recipe: str | None = None,
               limits: dict[str, Any] | None = None, env: dict[str, str] | None = None,
               labels: dict[str, str] | None = None, idle_ttl_seconds: float | None = None,
               max_lifetime_seconds: float | None = None,
               default_timeout_seconds: float | None = None,
               network: str | dict[str, Any] | None = None, hostname: str | None = None,
               workdir: str | None = None,
               mounts: list[dict[str, Any]] | None = None,
               volumes: list[dict[str, Any]] | None = None) -> Sandbox:
        """Creates a sandbox (`POST /v1/sandboxes`); every argument is optional. `mounts`:
        `[{"source": host dir under hutchd's --mount-root, "target": path, "readonly": bool}]`.
        `volumes`: `[{"name": a volume (create_volume), "target": path, "readonly": bool,
        "shared": bool}]`; VolumeBusy when another sandbox has one read-write."""
        fields = {"rootfs": rootfs, "recipe": recipe, "limits": limits, "env": env,
                  "labels": labels, "idle_ttl_seconds": idle_ttl_seconds,
                  "max_lifetime_seconds": max_lifetime_seconds,
                  "default_timeout_seconds": default_timeout_seconds, "network": network,
                  "hostname": hostname, "workdir": workdir, "mounts": mounts,
                  "volumes": volumes}
        body = {k: v for k, v in fields.items() if v is not None}
        return Sandbox(self, SandboxInfo.from_json(
            self.transport.call("POST", "/v1/sandboxes", json_body=body)))

    def get(self, sandbox_id: str) -> Sandbox:
        """The sandbox `sandbox_id` (reconnect to one created earlier); SandboxNotFound if gone."""
        return Sandbox(self, SandboxInfo.from_json(
            self.transport.call("GET", f"/v1/sandboxes/{_q(sandbox_id)}")))

    def list(self, labels: dict[str, str] | None = None) -> list[Sandbox]:
        """Sandboxes whose labels include every one of `labels`."""
        query = {"label": [f"{k}={v}" for k, v in (labels or {}).items()]}
        data = self.transport.call("GET", "/v1/sandboxes", query=query)
        return [Sandbox(self, SandboxInfo.from_json(s)) for s in data["sandboxes"]]

    def get_or_create(self, labels: dict[str, str], **create: Any) -> Sandbox:
        """The oldest sandbox carrying `labels`, or a new one with them and `create`'s fields.

        Done by the client (hutchd has no such route): two clients racing may create two.
        """
        found = sorted(self.list(labels), key=lambda s: s.info.created_at)
        if found:
            return found[0]
        return self.create(labels=labels, **create)

    # ---- daemon ----

    def health(self) -> Health:
        data = self.transport.call("GET", "/v1/health")
        return Health(status=data.get("status", ""), sandboxes=int(data.get("sandboxes", 0)),
                      recovered=dict(data.get("recovered") or {}))

    def metrics(self) -> str:
        """The Prometheus text of `GET /metrics`."""
        return self.transport.text("GET", "/metrics")

    def metric_values(self) -> dict[str, float]:
        """`metrics()` parsed, by series: `{'hutch_requests_total': 12.0,
        'hutch_sandboxes{state="running"}': 1.0, ...}`."""
        values: dict[str, float] = {}
        for line in self.metrics().splitlines():
            if not line or line.startswith("#"):
                continue
            name, _, value = line.rpartition(" ")
            try:
                values[name] = float(value)
            except ValueError:
                continue
        return values

    def pools(self) -> list[Pool]:
        data = self.transport.call("GET", "/v1/pools")
        return [Pool(rootfs=p["rootfs"], size=int(p["size"]), idle=int(p["idle"]))
                for p in data["pools"]]

    def set_secret(self, name: str, value: str | bytes) -> None:
        """Stores a secret for inject rules (write-only: no route gives a value back)."""
        body = value.encode() if isinstance(value, str) else bytes(value)
        self.transport.call("PUT", "/v1/secrets/" + _q(name), body=body)

    def secrets(self) -> list[SecretInfo]:
        data = self.transport.call("GET", "/v1/secrets")
        return [SecretInfo.from_json(s) for s in data["secrets"]]

    def delete_secret(self, name: str) -> None:
        self.transport.call("DELETE", "/v1/secrets/" + _q(name))

    # ---- volumes ----

    def create_volume(self, name: str, size_bytes: int) -> Volume:
        """A persistent volume of `size_bytes` (its quota: a multiple of 4096, 16 MiB..1 TiB)
        that outlives the sandboxes it is mounted in (create's `volumes`); VolumeExists if taken."""
        return Volume.from_json(self.transport.call(
            "POST", "/v1/volumes", json_body={"name": name, "size_bytes": size_bytes}))

    def volumes(self) -> list[Volume]:
        return [Volume.from_json(v) for v in self.transport.call("GET", "/v1/volumes")["volumes"]]

    def volume(self, name: str) -> Volume:
        """The volume `name` with its usage and attachments; VolumeNotFound if there is none."""
        return Volume.from_json(self.transport.call("GET", "/v1/volumes/" + _q(name)))

    def delete_volume(self, name: str) -> None:
        """Deletes the volume and its files; VolumeBusy while a sandbox has it attached."""
        self.transport.call("DELETE", "/v1/volumes/" + _q(name))

    def gc_layers(self, grace_seconds: float | None = None) -> list[str]:
        """Removes unused layers older than `grace_seconds` (hutchd's default 600)."""
        body = {} if grace_seconds is None else {"grace_seconds": grace_seconds}
        return list(self.transport.call("POST", "/v1/layers/gc", json_body=body)["removed"])


class Recipes:
    """`client.recipes`: bake, list, delete."""

    def __init__(self, client: Client) -> None:
        self._client = client

    def bake(self, directory: str, *, name: str | None = None, base: str | None = None,
             env: dict[str, str] | None = None,
             timeout_seconds: float | None = None) -> BakeResult:
        """Runs the recipe's setup.sh (a host directory); raises BakeFailed (with `.log`)."""
        fields = {"dir": directory, "name": name, "base": base, "env": env,
                  "timeout_seconds": timeout_seconds}
        body = {k: v for k, v in fields.items() if v is not None}
        timeout = None if timeout_seconds is None else timeout_seconds + 60
        data = self._client.transport.call("POST", "/v1/recipes", json_body=body,
                                           timeout=timeout)
        return BakeResult(name=data["name"], digest=data["digest"],
                          cached=bool(data.get("cached")), log=data.get("log", ""))

    def list(self) -> list[Recipe]:
        data = self._client.transport.call("GET", "/v1/recipes")
        return [Recipe.from_json(r) for r in data["recipes"]]

    def delete(self, name: str) -> None:
        self._client.transport.call("DELETE", f"/v1/recipes/{_q(name)}")


class Sandbox:
    """A sandbox of hutchd. As a context manager it deletes the sandbox on exit."""

    def __init__(self, client: Client, info: SandboxInfo) -> None:
        self.client = client
        self.info = info
        self.files = Files(self)

    @property
    def id(self) -> str:
        return self.info.id

    @property
    def path(self) -> str:
        return f"/v1/sandboxes/{_q(self.id)}"

    def __repr__(self) -> str:
        return f"Sandbox({self.id!r}, state={self.info.state!r})"

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.delete()

    def _call(self, method: str, suffix: str, **kwargs: Any) -> Any:
        return self.client.transport.call(method, self.path + suffix, **kwargs)

    def _update(self, data: dict[str, Any]) -> Sandbox:
        self.info = SandboxInfo.from_json(data)
        return self

    # ---- lifecycle ----

    def refresh(self) -> Sandbox:
        return self._update(self._call("GET", ""))

    def delete(self, *, wait: bool = False) -> None:
        """Destroys the sandbox (idempotent); `wait` also waits for the host-side teardown."""
        self._call("DELETE", "", query={"wait": True} if wait else None)

    def pause(self) -> Sandbox:
        return self._update(self._call("POST", "/pause"))

    def resume(self) -> Sandbox:
        return self._update(self._call("POST", "/resume"))

    def logs(self) -> list[dict[str, Any]]:
        """The sandbox's event log (created, exec_started, process_exited, paused, ...)."""
        text = self.client.transport.text("GET", self.path + "/logs")
        return [json.loads(line) for line in text.splitlines() if line.strip()]

    # ---- exec ----

    def _exec_body(self, command: Command, workdir: str | None, env: dict[str, str] | None,
                   stdin: str | bytes | None, timeout: float | None,
                   max_output_bytes: int | None) -> dict[str, Any]:
        body = _command_fields(command)
        body.update(_stdin_fields(stdin))
        for key, value in (("workdir", workdir), ("env", env), ("timeout_seconds", timeout),
                           ("max_output_bytes", max_output_bytes)):
            if value is not None:
                body[key] = value
        return body

    def _http_timeout(self, timeout: float | None) -> float | None:
        """How long to wait for hutchd's answer: the command's own timeout and a margin."""
        limit = timeout or self.info.default_timeout_seconds
        return None if not limit else float(limit) + 60.0

    def exec(self, command: Command, *, workdir: str | None = None,
             env: dict[str, str] | None = None, stdin: str | bytes | None = None,
             timeout: float | None = None, max_output_bytes: int | None = None,
             check: bool = False,
             on_stdout: Callable[[str], None] | None = None,
             on_stderr: Callable[[str], None] | None = None) -> ExecResult:
        """Runs `command` (a string for `/bin/sh -c`, or an argv list) and returns its result.

        A non-zero exit is a result, not an exception, unless `check=True` (CommandError).
        With `on_stdout`/`on_stderr` the output is streamed to them as it happens (and the
        result's stdout/stderr are left empty: the callbacks had it).
        """
        return self._run("/exec", command, workdir=workdir, env=env, stdin=stdin,
                         timeout=timeout, max_output_bytes=max_output_bytes, check=check,
                         on_stdout=on_stdout, on_stderr=on_stderr)

    def _run(self, route: str, command: Command, *, workdir: str | None,
             env: dict[str, str] | None, stdin: str | bytes | None, timeout: float | None,
             max_output_bytes: int | None, check: bool,
             on_stdout: Callable[[str], None] | None,
             on_stderr: Callable[[str], None] | None) -> ExecResult:
        """exec and a session's exec: the same body, result and stream at another route."""
        if on_stdout is not None or on_stderr is not None:
            with self._stream(route, command, workdir=workdir, env=env, stdin=stdin,
                              timeout=timeout, max_output_bytes=max_output_bytes) as events:
                for event in events:
                    callback = on_stdout if event.stream == "stdout" else on_stderr
                    if callback is not None:
                        callback(event.data)
                result = events.result
        else:
            body = self._exec_body(command, workdir, env, stdin, timeout, max_output_bytes)
            result = ExecResult.from_json(
                self._call("POST", route, json_body=body, timeout=self._http_timeout(timeout)))
        if check and not result.ok:
            raise CommandError(result, _argv_of(command))
        return result

    def exec_bash(self, script: str, args: Sequence[str] = (), **options: Any) -> ExecResult:
        """`bash -c script bash args...` (hutchd's HasteKit alias)."""
        return self._exec_alias("/exec/bash", script, args, **options)

    def exec_python(self, script: str, args: Sequence[str] = (), **options: Any) -> ExecResult:
        """`python3 -c script args...` (needs python3 in the sandbox's rootfs)."""
        return self._exec_alias("/exec/python", script, args, **options)

    def _exec_alias(self, route: str, script: str, args: Sequence[str], *,
                    workdir: str | None = None, env: dict[str, str] | None = None,
                    stdin: str | bytes | None = None, timeout: float | None = None,
                    check: bool = False) -> ExecResult:
        body: dict[str, Any] = {"script": script, "args": list(args)}
        body.update(_stdin_fields(stdin))
        for key, value in (("workdir", workdir), ("env", env), ("timeout_seconds", timeout)):
            if value is not None:
                body[key] = value
        result = ExecResult.from_json(
            self._call("POST", route, json_body=body, timeout=self._http_timeout(timeout)))
        if check and not result.ok:
            raise CommandError(result, [route.rsplit("/", 1)[1], "-c", script, *args])
        return result

    def stream(self, command: Command, *, workdir: str | None = None,
               env: dict[str, str] | None = None, stdin: str | bytes | None = None,
               timeout: float | None = None,
               max_output_bytes: int | None = None) -> ExecStream:
        """Starts `command` with streamed output: iterate the `ExecStream` for `OutputEvent`s,
        then read its `result`. Closing the stream early kills the command's whole tree."""
        return self._stream("/exec", command, workdir=workdir, env=env, stdin=stdin,
                            timeout=timeout, max_output_bytes=max_output_bytes)

    def _stream(self, route: str, command: Command, *, workdir: str | None,
                env: dict[str, str] | None, stdin: str | bytes | None, timeout: float | None,
                max_output_bytes: int | None) -> ExecStream:
        body = self._exec_body(command, workdir, env, stdin, timeout, max_output_bytes)
        body["stream"] = True
        response = self.client.transport.request("POST", self.path + route, json_body=body,
                                                 timeout=self._http_timeout(timeout))
        return ExecStream(response)

    def spawn(self, command: Command, *, workdir: str | None = None,
              env: dict[str, str] | None = None, stdin: str | bytes | None = None) -> Process:
        """Starts a background process that outlives this client; returns its handle."""
        body = self._exec_body(command, workdir, env, stdin, None, None)
        body["background"] = True
        status = ProcessStatus.from_json(self._call("POST", "/exec", json_body=body))
        return Process(self, status.pid, status)

    def processes(self) -> list[Process]:
        data = self._call("GET", "/processes")
        return [Process(self, int(p["pid"]), ProcessStatus.from_json(p))
                for p in data["processes"]]

    def pty(self, command: Command | None = None, *, cols: int = 80, rows: int = 24,
            workdir: str | None = None, env: dict[str, str] | None = None) -> Pty:
        """Starts `command` (default /bin/sh) on a pseudo-terminal of the sandbox (POST .../ptys)."""
        body: dict[str, Any] = {"cols": cols, "rows": rows}
        if command is not None:
            body.update({"command": command} if isinstance(command, str) else {"argv": list(command)})
        if workdir is not None:
            body["workdir"] = workdir
        if env:
            body["env"] = env
        status = ProcessStatus.from_json(self._call("POST", "/ptys", json_body=body))
        return Pty(self, status.pid, status)

    def ptys(self) -> list[Pty]:
        """The sandbox's PTYs (GET .../ptys), each with its last status."""
        return [Pty(self, int(p["pid"]), ProcessStatus.from_json(p))
                for p in self._call("GET", "/ptys")["ptys"]]

    # ---- sessions, watch, network ----

    def session(self, name: str | None = None, *, workdir: str | None = None,
                env: dict[str, str] | None = None) -> Session:
        """Opens a shell session whose cwd and exported env persist between its commands."""
        body: dict[str, Any] = {}
        for key, value in (("name", name), ("workdir", workdir), ("env", env)):
            if value is not None:
                body[key] = value
        data = self._call("POST", "/sessions", json_body=body)
        return Session(self, str(data["name"]))

    def sessions(self) -> list[Session]:
        return [Session(self, str(s["name"])) for s in self._call("GET", "/sessions")["sessions"]]

    def watch(self, path: str, *, recursive: bool = False,
              since: int | None = None) -> WatchStream:
        """Streams inotify events of directory `path`; resume with `since=stream.last_seq`."""
        query: dict[str, Any] = {"path": path, "recursive": recursive, "since": since}
        response = self.client.transport.request("GET", self.path + "/watch", query=query)
        return WatchStream(response)

    def network(self) -> NetworkState:
        """The sandbox's network mode, policy, counters, CA and placeholders."""
        return NetworkState.from_json(self._call("GET", "/network"))

    def set_network(self, policy: str | dict[str, Any]) -> NetworkState:
        """Replaces the policy (a mode name or a policy object, as create's `network`)."""
        return NetworkState.from_json(self._call("PUT", "/network", json_body=policy))

    def network_log(self, *, follow: bool = False) -> Iterator[dict[str, Any]]:
        """The engine's decisions for this sandbox, oldest first; `follow` waits for more."""
        with self.client.transport.request("GET", self.path + "/network/log",
                                           query={"follow": 1} if follow else None) as response:
            for line in response.iter_lines():
                if line.strip():
                    yield _json_line(line, "network log", response)

    # ---- ports ----

    def port_request(self, port: int, path: str = "/", *, method: str = "GET",
                     body: bytes | None = None,
                     headers: dict[str, str] | None = None) -> tuple[int, bytes]:
        """One HTTP request to the sandbox's TCP `port` through hutchd's proxy; its status and
        body (a status >= 400 from the sandbox's server raises as any hutchd answer does)."""
        target = f"/ports/{int(port)}/" + path.lstrip("/")
        with self.client.transport.request(method, self.path + target, body=body,
                                           headers=headers) as response:
            return response.status, response.read()

    def port_token(self, port: int, *, ttl_seconds: int | None = None) -> PortToken:
        """A revocable, expiring token that opens `port`'s proxy paths (its value shown once)."""
        body = {} if ttl_seconds is None else {"ttl_seconds": ttl_seconds}
        return PortToken.from_json(self._call("POST", f"/port-tokens/{int(port)}", json_body=body))

    def port_tokens(self, port: int) -> list[PortToken]:
        data = self._call("GET", f"/port-tokens/{int(port)}")
        return [PortToken.from_json(t) for t in data["tokens"]]

    def revoke_port_token(self, port: int, token_id: str) -> None:
        self._call("DELETE", f"/port-tokens/{int(port)}/{_q(token_id)}")

    def tunnel(self, port: int, *, timeout: float | None = 30.0) -> socket.socket:
        """A raw TCP connection to the sandbox's `port` through hutchd (databases, ssh): a
        connected socket in blocking mode whose bytes are the port's, both ways; `shutdown(SHUT_WR)`
        is passed on as a half-close. `timeout` bounds connecting and hutchd's answer only.
        PortUnreachable when nothing listens there; close it (or use `with`) when done."""
        return open_tunnel(self.client.transport, f"{self.path}/tunnel/{int(port)}", timeout)

    def port_forward(self, port: int, local_port: int = 0, *,
                     timeout: float | None = 30.0) -> PortForward:
        """Listens on 127.0.0.1:`local_port` (0: any free port, see `.port`) and tunnels each
        connection to the sandbox's `port`, as `hutch port-forward` does; a first tunnel is
        opened at once, so a wrong sandbox or a closed port raises here. Close it (or use
        `with`) to stop listening and end the connections in flight."""
        return PortForward(self.client.transport, f"{self.path}/tunnel/{int(port)}",
                           f"{self.id}:{int(port)}", local_port, timeout)

    def process(self, pid: int) -> Process:
        """Reconnects to background process `pid` (ProcessNotFound if hutchd has no record)."""
        process = Process(self, pid)
        process.status()
        return process

    # ---- layers ----

    def snapshot(self, name: str) -> SnapshotResult:
        """Tags what the sandbox changed as `name`: create sandboxes from it with recipe=name."""
        return SnapshotResult.from_json(self._call("POST", "/snapshot", json_body={"name": name}))

    def fork(self, count: int = 1,
             labels: dict[str, str] | None = None) -> tuple[SnapshotResult, list[Sandbox]]:
        body: dict[str, Any] = {"count": count}
        if labels is not None:
            body["labels"] = labels
        data = self._call("POST", "/fork", json_body=body)
        return (SnapshotResult.from_json(data["snapshot"]),
                [Sandbox(self.client, SandboxInfo.from_json(s)) for s in data["sandboxes"]])

    def checkpoint(self, name: str) -> SnapshotResult:
        return SnapshotResult.from_json(
            self._call("POST", "/checkpoints", json_body={"name": name}))

    def checkpoints(self) -> list[Checkpoint]:
        data = self._call("GET", "/checkpoints")
        return [Checkpoint(name=c["name"], digest=c.get("digest", ""),
                           created=c.get("created", "")) for c in data["checkpoints"]]

    def rollback(self, name: str) -> Sandbox:
        """Returns the filesystem to checkpoint `name`; every process of the sandbox is killed."""
        return self._update(self._call("POST", f"/checkpoints/{_q(name)}/rollback"))


class _StreamedAnswer:
    """An answer read as it comes; closing it (or leaving `with`) drops the connection."""

    _response: Response

    def close(self) -> None:
        self._response.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class ExecStream(_StreamedAnswer):
    """The events of a streamed exec; `result` is set once the iteration ended."""

    def __init__(self, response: Response) -> None:
        self._response = response
        self.result: ExecResult | None = None

    def __iter__(self) -> Iterator[OutputEvent]:
        try:
            for line in self._response.iter_lines():
                if not line.strip():
                    continue
                try:
                    event = json.loads(line)
                except ValueError as e:
                    raise ProtocolError(f"exec stream line is not JSON: {line[:200]!r}",
                                        request_id=self._response.request_id) from e
                if "exit_code" in event:
                    self.result = ExecResult.from_json(event, stdout="", stderr="")
                    continue
                for name in ("stdout", "stderr"):
                    if name in event:
                        yield OutputEvent(name, event[name])
        finally:
            self.close()
        if self.result is None:
            raise ProtocolError("the exec stream ended without its final line",
                                request_id=self._response.request_id)


class Session:
    """A named shell session of a sandbox: each command sees the cwd and env the last one left."""

    def __init__(self, sandbox: Sandbox, name: str) -> None:
        self.sandbox = sandbox
        self.name = name

    @property
    def _route(self) -> str:
        return "/sessions/" + _q(self.name) + "/exec"

    def exec(self, command: Command, *, workdir: str | None = None,
             env: dict[str, str] | None = None, stdin: str | bytes | None = None,
             timeout: float | None = None, max_output_bytes: int | None = None,
             check: bool = False,
             on_stdout: Callable[[str], None] | None = None,
             on_stderr: Callable[[str], None] | None = None) -> ExecResult:
        """As Sandbox.exec; a second command while one runs raises Conflict (session_busy)."""
        return self.sandbox._run(self._route, command, workdir=workdir, env=env, stdin=stdin,
                                 timeout=timeout, max_output_bytes=max_output_bytes,
                                 check=check, on_stdout=on_stdout, on_stderr=on_stderr)

    def stream(self, command: Command, *, workdir: str | None = None,
               env: dict[str, str] | None = None, stdin: str | bytes | None = None,
               timeout: float | None = None,
               max_output_bytes: int | None = None) -> ExecStream:
        return self.sandbox._stream(self._route, command, workdir=workdir, env=env, stdin=stdin,
                                    timeout=timeout, max_output_bytes=max_output_bytes)

    def delete(self) -> None:
        self.sandbox._call("DELETE", "/sessions/" + _q(self.name))

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.delete()


class WatchStream(_StreamedAnswer):
    """The events of a watch; keepalives only advance `last_seq`; `end` is why hutchd ended it."""

    def __init__(self, response: Response) -> None:
        self._response = response
        self.last_seq: int | None = None
        self.end: str | None = None

    def __iter__(self) -> Iterator[WatchEvent]:
        try:
            for line in self._response.iter_lines():
                if not line.strip():
                    continue
                data = _json_line(line, "watch stream", self._response)
                if "end" in data:
                    self.end = str(data["end"])
                    return
                if "seq" in data:
                    self.last_seq = int(data["seq"])
                if not data.get("keepalive"):
                    yield WatchEvent.from_json(data)
        finally:
            self.close()


def _json_line(line: bytes, what: str, response: Response) -> dict[str, Any]:
    try:
        data = json.loads(line)
    except ValueError as e:
        raise ProtocolError(f"{what} line is not JSON: {line[:200]!r}",
                            request_id=response.request_id) from e
    if not isinstance(data, dict):
        raise ProtocolError(f"{what} line is not an object: {line[:200]!r}",
                            request_id=response.request_id)
    return data


class Process:
    """A background process of a sandbox, addressed by its pid inside the sandbox."""

    def __init__(self, sandbox: Sandbox, pid: int, status: ProcessStatus | None = None) -> None:
        self.sandbox = sandbox
        self.pid = pid
        self.last_status = status

    def __repr__(self) -> str:
        return f"Process({self.sandbox.id!r}, pid={self.pid})"

    def _call(self, method: str, suffix: str, **kwargs: Any) -> Any:
        return self.sandbox._call(method, f"/processes/{self.pid}{suffix}", **kwargs)

    def _status(self, data: dict[str, Any]) -> ProcessStatus:
        self.last_status = ProcessStatus.from_json(data)
        return self.last_status

    def status(self) -> ProcessStatus:
        return self._status(self._call("GET", ""))

    def output(self, stream: str = "stdout", offset: int = 0,
               limit: int | None = None) -> OutputChunk:
        """Output of `stream` from byte `offset` (exact bytes: fetched base64)."""
        data = self._call("GET", "/output", query={"stream": stream, "offset": offset,
                                                   "limit": limit, "encoding": "base64"})
        return OutputChunk(data=base64.b64decode(data["data"]), offset=int(data["offset"]),
                           next_offset=int(data["next_offset"]), eof=bool(data["eof"]),
                           truncated=bool(data["truncated"]))

    def follow(self, stream: str = "stdout", offset: int = 0, *,
               poll_interval: float = 0.02, max_interval: float = 0.5) -> Iterator[OutputChunk]:
        """Yields output from `offset` as it comes until the process exited and all was read.

        Resumable: start again from the last chunk's `next_offset` after a disconnect.
        """
        interval = poll_interval
        while True:
            chunk = self.output(stream, offset)
            offset = chunk.next_offset
            if chunk.data:
                interval = poll_interval
                yield chunk
            if chunk.eof:
                return
            if not chunk.data:
                time.sleep(interval)
                interval = min(interval * 2, max_interval)

    def read_all(self, stream: str = "stdout") -> bytes:
        """The whole output of `stream` once the process is done (waits for it)."""
        return b"".join(chunk.data for chunk in self.follow(stream))

    def write_stdin(self, data: str | bytes = b"", *, eof: bool = False) -> int:
        body: dict[str, Any] = {"eof": eof}
        if isinstance(data, bytes):
            body["data_base64"] = base64.b64encode(data).decode()
        else:
            body["data"] = data
        return int(self._call("POST", "/stdin", json_body=body)["written"])

    def close_stdin(self) -> None:
        self.write_stdin(b"", eof=True)

    def signal(self, signal: str | int = "TERM") -> ProcessStatus:
        """Sends a signal (a name with or without SIG, or a number)."""
        return self._status(self._call("POST", "/signal", json_body={"signal": signal}))

    def kill(self) -> ProcessStatus:
        return self.signal("KILL")

    def kill_tree(self) -> ProcessStatus:
        """Kills the process and every descendant of it."""
        return self.signal("KILL_TREE")

    def wait(self, timeout: float | None = None) -> ProcessStatus:
        """Waits until the process exited (or `timeout` seconds passed: then still running)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = _SERVER_WAIT_MAX if deadline is None else deadline - time.monotonic()
            seconds = max(0, min(_SERVER_WAIT_MAX, int(left + 0.999)))
            status = self._status(self._call("POST", "/wait",
                                             query={"timeout_seconds": seconds},
                                             timeout=seconds + 60))
            if not status.running or (deadline is not None and time.monotonic() >= deadline):
                return status


class Pty(Process):
    """A process on a pseudo-terminal: a background process (output, follow, wait, signal as
    Process's; its terminal output is the "stdout" stream) that also takes keystrokes and resizes."""

    def write(self, data: str | bytes) -> int:
        """Sends bytes to the terminal as if typed ("\x03" is ^C)."""
        raw = data.encode() if isinstance(data, str) else data
        body = {"data_base64": base64.b64encode(raw).decode()}
        return int(self.sandbox._call("POST", f"/ptys/{self.pid}/input", json_body=body)["written"])

    def resize(self, cols: int, rows: int) -> ProcessStatus:
        """Changes the terminal's size; its foreground process group gets SIGWINCH."""
        return self._status(self.sandbox._call("POST", f"/ptys/{self.pid}/resize",
                                               json_body={"cols": cols, "rows": rows}))

    def close(self) -> ProcessStatus:
        """Kills the process and all its descendants (DELETE .../ptys/{pid})."""
        return self._status(self.sandbox._call("DELETE", f"/ptys/{self.pid}"))


class Files:
    """`sandbox.files`: every path is absolute inside the sandbox, confined to its root."""

    def __init__(self, sandbox: Sandbox) -> None:
        self.sandbox = sandbox

    def _fs(self, op: str, body: dict[str, Any]) -> Any:
        return self.sandbox._call("POST", f"/fs/{op}", json_body=body)

    # ---- raw bytes, streamed ----

    def open(self, path: str, *, start: int | None = None, end: int | None = None) -> Response:
        """The raw answer of `GET files` (read it with `read1`/`iter_chunks`, then close it).
        `start`/`end` (inclusive) ask for a byte range."""
        headers = {}
        if start is not None or end is not None:
            first = "" if start is None else str(start)
            last = "" if end is None else str(end)
            headers["Range"] = f"bytes={first}-{last}"
        return self.sandbox.client.transport.request(
            "GET", self.sandbox.path + "/files", query={"path": path}, headers=headers)

    def iter_bytes(self, path: str, chunk_size: int = 1 << 20, *, start: int | None = None,
                   end: int | None = None) -> Iterator[bytes]:
        """The file's bytes in chunks, never the whole file in memory."""
        with self.open(path, start=start, end=end) as response:
            yield from response.iter_chunks(chunk_size)

    def read_bytes(self, path: str) -> bytes:
        with self.open(path) as response:
            return response.read()

    def read_text(self, path: str, encoding: str = "utf-8") -> str:
        return self.read_bytes(path).decode(encoding)

    def download(self, path: str, destination: PathLike | IO[bytes]) -> int:
        """Streams the file to a host path or a binary file object; returns the byte count."""
        if isinstance(destination, (str, os.PathLike)):
            with open(destination, "wb") as out:
                return self.download(path, out)
        total = 0
        for block in self.iter_bytes(path):
            destination.write(block)
            total += len(block)
        return total

    def write_bytes(self, path: str, data: bytes, *, mode: int | None = None) -> int:
        """Creates or replaces the file atomically (parents created); returns its size."""
        return self.upload(path, data, mode=mode)

    def write_text(self, path: str, text: str, *, encoding: str = "utf-8",
                   mode: int | None = None) -> int:
        return self.upload(path, text.encode(encoding), mode=mode)

    def upload(self, path: str, source: bytes | PathLike | IO[bytes] | Iterable[bytes], *,
               mode: int | None = None, size: int | None = None) -> int:
        """Streams `source` (bytes, a host path, a binary file object or an iterable of byte
        blocks) to `path` in constant memory; returns the size hutchd wrote.

        A file object with a size (a regular file) is sent with Content-Length, anything else
        chunked; `size` gives the length of an iterable when known.
        """
        query: dict[str, Any] = {"path": path}
        if mode is not None:
            query["mode"] = format(mode, "o")
        if isinstance(source, (str, os.PathLike)):
            with open(source, "rb") as f:
                return self.upload(path, f, mode=mode)
        body: Any = source
        if hasattr(source, "read") and size is None:
            try:
                size = os.fstat(source.fileno()).st_size - source.tell()  # type: ignore[union-attr]
            except (OSError, AttributeError, ValueError):
                size = None
        data = self.sandbox.client.transport.call("PUT", self.sandbox.path + "/files",
                                                  query=query, body=body, length=size)
        return int(data["size"])

    # ---- Deep Agents style operations ----

    def ls(self, path: str) -> list[FileEntry]:
        return [FileEntry.from_json(e) for e in self._fs("ls", {"path": path})["entries"]]

    def stat(self, path: str) -> FileEntry:
        """The entry of `path` (a final symlink is not followed)."""
        return FileEntry.from_json(self._fs("stat", {"path": path}))

    def exists(self, path: str) -> bool:
        try:
            self.stat(path)
        except FileNotFound:
            return False
        return True

    def mkdir(self, path: str, *, parents: bool = True) -> None:
        self._fs("mkdir", {"path": path, "parents": parents})

    def move(self, source: str, destination: str, *, overwrite: bool = False) -> None:
        self._fs("move", {"from": source, "to": destination, "overwrite": overwrite})

    def read(self, path: str, offset: int = 0, limit: int = 2000) -> TextWindow:
        """Lines `offset`.. (0-based) of a text file; invalid UTF-8 comes back as U+FFFD."""
        return TextWindow.from_json(
            self._fs("read", {"path": path, "offset": offset, "limit": limit}))

    def write(self, path: str, content: str) -> int:
        """fs/write: text content (at most hutchd's --max-file-bytes), atomic."""
        return int(self._fs("write", {"path": path, "content": content})["size"])

    def edit(self, path: str, old: str, new: str, *, replace_all: bool = False) -> int:
        """Replaces `old` by `new`; NoMatch / NotUnique when `old` is absent / not unique."""
        return int(self._fs("edit", {"path": path, "old": old, "new": new,
                                     "replace_all": replace_all})["occurrences"])

    def glob(self, pattern: str, path: str = "/") -> list[str]:
        return list(self._fs("glob", {"pattern": pattern, "path": path})["paths"])

    def grep(self, pattern: str, path: str = "/", *, glob: str | None = None,
             max_count: int | None = None) -> GrepResult:
        """Literal substring search (not a regex), 1-based line numbers."""
        body: dict[str, Any] = {"pattern": pattern, "path": path}
        if glob is not None:
            body["glob"] = glob
        if max_count is not None:
            body["max_count"] = max_count
        data = self._fs("grep", body)
        return GrepResult(matches=[GrepMatch(m["path"], int(m["line"]), m["text"])
                                   for m in data["matches"]],
                          truncated=bool(data.get("truncated", False)))

    def delete(self, path: str, *, recursive: bool = False) -> None:
        """Removes a file, symlink or (empty, or with `recursive`) directory."""
        self.sandbox._call("DELETE", "/files", query={"path": path,
                                                      "recursive": True if recursive else None})

    def remove_tree(self, path: str) -> None:
        """fs/delete: recursive, symlinks not followed."""
        self._fs("delete", {"path": path})

    # ---- batches ----

    def upload_many(self, files: Sequence[tuple[str, bytes]]) -> list[FileResult]:
        """One request for several small files (the JSON body is limited to 8 MiB); one result
        per input, in order, partial success reported not raised."""
        body = {"files": [{"path": p, "content_base64": base64.b64encode(c).decode()}
                          for p, c in files]}
        return [FileResult(path=r["path"], size=r.get("size"), error=r.get("error"),
                           message=r.get("message")) for r in self._fs("upload", body)["files"]]

    def download_many(self, paths: Sequence[str]) -> list[FileResult]:
        results = []
        for r in self._fs("download", {"paths": list(paths)})["files"]:
            content = r.get("content_base64")
            results.append(FileResult(
                path=r["path"], content=None if content is None else base64.b64decode(content),
                error=r.get("error"), message=r.get("message")))
        return results


__all__ = ["Client", "Sandbox", "Process", "Files", "Recipes", "ExecStream", "HutchError"]
