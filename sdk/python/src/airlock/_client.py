"""The clients: Client (synchronous) and AsyncClient (asyncio), with the same methods.

Each API call is described once (an _Ops method returns a _Call: the request and how to read its
answer); the clients only differ in how they send it.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import json
import os
import socket
import threading
import urllib.parse
from typing import (Any, AsyncIterator, Callable, Concatenate, Dict, Generic, Iterator, List, Mapping,
                    Optional, ParamSpec, Sequence, Tuple, TypeVar, Union)

import httpx
import websockets

from ._errors import AirlockError, TooLargeError, error_from
from ._types import (AccessToken, CodeContext, CodeError, CodeResult, ExecResult, Execution, ExitStatus, FileInfo,
                     Flow, Sandbox, Session, Snapshot, SnapshotDiff, Timeline, _from)

DEFAULT_URL = "http://127.0.0.1:7070"
# The most read_file holds of a file unless max_bytes says otherwise: what a sandbox wrote can be any size,
# and grow while it is read, so the bound holds while reading, not from a size announced first.
DEFAULT_MAX_READ_BYTES = 256 << 20
_TIMEOUT = httpx.Timeout(300.0, connect=10.0)

R = TypeVar("R")
P = ParamSpec("P")


class _Call(Generic[R]):
    """One request, and what makes the answer's JSON (or bytes, if raw) the result."""

    def __init__(self, method: str, path: str, *, params: Optional[Mapping[str, Any]] = None,
                 json_body: Any = None, content: Optional[bytes] = None,
                 parse: Callable[[Any], R] = lambda v: v, raw: bool = False) -> None:
        self.method, self.path, self.params, self.json_body = method, path, params, json_body
        self.content, self.parse, self.raw = content, parse, raw

    def request(self) -> Dict[str, Any]:
        kw: Dict[str, Any] = {"params": {k: v for k, v in (self.params or {}).items() if v not in (None, "")}}
        if self.json_body is not None:
            kw["json"] = self.json_body
        if self.content is not None:
            kw["content"] = self.content
            kw["headers"] = {"Content-Type": "application/octet-stream"}
        return kw

    def result(self, resp: httpx.Response) -> R:
        if resp.status_code >= 400:
            try:
                body: Any = resp.json()
            except ValueError:
                body = resp.text
            raise error_from(resp.status_code, body)
        if self.raw:
            return self.parse(resp.content)
        if resp.status_code == 204 or not resp.content:
            return self.parse(None)
        return self.parse(resp.json())


def _work(id: str, *rest: str) -> str:
    """The path of work on a sandbox, or a session (se_…: its current sandbox)."""
    kind = "sessions" if id.startswith("se_") else "sandboxes"
    return "/".join([f"/v1/{kind}", urllib.parse.quote(id, safe="")] + list(rest))


def _obj(kind: str, id: str, *rest: str) -> str:
    return "/".join([f"/v1/{kind}", urllib.parse.quote(id, safe="")] + list(rest))


def _drop_none(d: Dict[str, Any]) -> Dict[str, Any]:
    return {k: v for k, v in d.items() if v is not None}


class _Bounded:
    """A file's contents as they are read, failing past max_bytes (default DEFAULT_MAX_READ_BYTES)."""

    def __init__(self, path: str, max_bytes: Optional[int]) -> None:
        if max_bytes is None:
            max_bytes = DEFAULT_MAX_READ_BYTES
        if max_bytes <= 0:
            raise ValueError(f"max_bytes must be positive, not {max_bytes}")
        self.path, self.max, self.buf = path, max_bytes, bytearray()

    def add(self, chunk: bytes) -> None:
        if len(self.buf) + len(chunk) > self.max:
            raise TooLargeError(413, "too_large", f"{self.path} is larger than {self.max} bytes (read_file's max_bytes)")
        self.buf += chunk


def _network(allow_hosts: Optional[Sequence[str]], network: Optional[Dict[str, Any]]) -> Optional[Dict[str, Any]]:
    if network is not None:
        return network
    if allow_hosts:
        return {"default": "deny", "rules": [{"action": "allow", "host": h} for h in allow_hosts]}
    return None


class _Ops:
    """Every API call, once."""

    # --- sandboxes ---

    def create_sandbox(self, *, template: Optional[str] = None, cpu: Optional[int] = None, memory_mb: Optional[int] = None,
                       disk_mb: Optional[int] = None, timeout_seconds: Optional[int] = None,
                       env: Optional[Mapping[str, str]] = None, metadata: Optional[Mapping[str, str]] = None,
                       allow_hosts: Optional[Sequence[str]] = None, network: Optional[Dict[str, Any]] = None,
                       runtime: Optional[str] = None) -> _Call[Sandbox]:
        """Creates a sandbox and boots it (timeout_seconds: its lifetime, default 300). allow_hosts opens
        egress to those hosts only; network is a whole egress policy; neither: no network."""
        body = _drop_none({"template": template, "cpu": cpu, "memory_mb": memory_mb, "disk_mb": disk_mb,
                           "timeout_seconds": timeout_seconds, "env": env, "metadata": metadata,
                           "network": _network(allow_hosts, network), "runtime": runtime})
        return _Call("POST", "/v1/sandboxes", json_body=body, parse=lambda v: _from(Sandbox, v))

    def get_sandbox(self, id: str) -> _Call[Sandbox]:
        return _Call("GET", _obj("sandboxes", id), parse=lambda v: _from(Sandbox, v))

    def list_sandboxes(self, *, state: Optional[str] = None, metadata: Optional[Mapping[str, str]] = None,
                       limit: Optional[int] = None) -> _Call[List[Sandbox]]:
        """The first page (limit, default the server's) of the sandboxes, newest first."""
        params: Dict[str, Any] = {"state": state, "limit": limit}
        params.update({f"metadata.{k}": v for k, v in (metadata or {}).items()})
        return _Call("GET", "/v1/sandboxes", params=params, parse=lambda v: [_from(Sandbox, x) for x in v["sandboxes"]])

    def delete_sandbox(self, id: str) -> _Call[None]:
        return _Call("DELETE", _obj("sandboxes", id), parse=lambda v: None)

    def set_timeout(self, id: str, seconds: int) -> _Call[Sandbox]:
        """Makes the sandbox end seconds from now."""
        return _Call("POST", _obj("sandboxes", id, "timeout"), json_body={"timeout_seconds": seconds},
                     parse=lambda v: _from(Sandbox, v))

    def egress(self, sandbox_id: str, *, decision: Optional[str] = None, host: Optional[str] = None,
               limit: Optional[int] = None) -> _Call[List[Flow]]:
        """The sandbox's egress log: each connection and plain-HTTP request, and the gateway's decision."""
        return _Call("GET", _obj("sandboxes", sandbox_id, "egress"), params={"decision": decision, "host": host, "limit": limit},
                     parse=lambda v: [_from(Flow, x) for x in v["flows"]])

    # --- exec and files (a sandbox's or a session's) ---

    def exec(self, id: str, cmd: Sequence[str], *, env: Optional[Mapping[str, str]] = None, cwd: Optional[str] = None,
             user: Optional[str] = None, stdin: Optional[str] = None, timeout_seconds: Optional[int] = None) -> _Call[ExecResult]:
        """Runs cmd (an argv) to completion; a non-zero exit is the result's exit_code, not an error."""
        body = _drop_none({"cmd": list(cmd), "env": env, "cwd": cwd, "user": user, "stdin": stdin,
                           "timeout_seconds": timeout_seconds})
        return _Call("POST", _work(id, "exec"), json_body=body, parse=lambda v: _from(ExecResult, v))

    def write_file(self, id: str, path: str, data: Union[bytes, str], *, mode: Optional[int] = None) -> _Call[FileInfo]:
        """Writes data (str: as UTF-8) to path, replacing it; mode is its permission bits (default 0644)."""
        content = data.encode() if isinstance(data, str) else bytes(data)
        params = {"path": path, "mode": None if mode is None else format(mode, "04o")}
        return _Call("PUT", _work(id, "files"), params=params, content=content, parse=lambda v: _from(FileInfo, v))

    def stat(self, id: str, path: str) -> _Call[FileInfo]:
        return _Call("GET", _work(id, "files", "stat"), params={"path": path}, parse=lambda v: _from(FileInfo, v))

    def list_files(self, id: str, path: str) -> _Call[List[FileInfo]]:
        return _Call("GET", _work(id, "files", "list"), params={"path": path},
                     parse=lambda v: [_from(FileInfo, x) for x in v["entries"]])

    def mkdir(self, id: str, path: str) -> _Call[FileInfo]:
        """Makes the directory and its missing parents."""
        return _Call("POST", _work(id, "files", "mkdir"), json_body={"path": path}, parse=lambda v: _from(FileInfo, v))

    def move(self, id: str, src: str, dst: str) -> _Call[FileInfo]:
        return _Call("POST", _work(id, "files", "move"), json_body={"from": src, "to": dst}, parse=lambda v: _from(FileInfo, v))

    def remove(self, id: str, path: str, *, recursive: bool = False) -> _Call[None]:
        return _Call("DELETE", _work(id, "files"), params={"path": path, "recursive": "true" if recursive else None},
                     parse=lambda v: None)

    # --- sessions ---

    def create_session(self, *, template: Optional[str] = None, cpu: Optional[int] = None, memory_mb: Optional[int] = None,
                       disk_mb: Optional[int] = None, env: Optional[Mapping[str, str]] = None,
                       metadata: Optional[Mapping[str, str]] = None, allow_hosts: Optional[Sequence[str]] = None,
                       network: Optional[Dict[str, Any]] = None, idle_timeout_seconds: Optional[int] = None,
                       auto_resume: Optional[bool] = None, rolling_interval_seconds: Optional[int] = None,
                       timeout_seconds: Optional[int] = None, on_timeout: Optional[str] = None,
                       runtime: Optional[str] = None) -> _Call[Session]:
        """Creates a session and boots its first sandbox. timeout_seconds bounds each run (none by
        default), then on_timeout ("delete" or "pause") applies."""
        body = _drop_none({"template": template, "cpu": cpu, "memory_mb": memory_mb, "disk_mb": disk_mb, "env": env,
                           "metadata": metadata, "network": _network(allow_hosts, network),
                           "idle_timeout_seconds": idle_timeout_seconds, "auto_resume": auto_resume,
                           "rolling_interval_seconds": rolling_interval_seconds, "timeout_seconds": timeout_seconds,
                           "on_timeout": on_timeout, "runtime": runtime})
        return _Call("POST", "/v1/sessions", json_body=body, parse=lambda v: _from(Session, v))

    def get_session(self, id: str) -> _Call[Session]:
        return _Call("GET", _obj("sessions", id), parse=lambda v: _from(Session, v))

    def list_sessions(self, *, state: Optional[str] = None, metadata: Optional[Mapping[str, str]] = None,
                      limit: Optional[int] = None) -> _Call[List[Session]]:
        params: Dict[str, Any] = {"state": state, "limit": limit}
        params.update({f"metadata.{k}": v for k, v in (metadata or {}).items()})
        return _Call("GET", "/v1/sessions", params=params, parse=lambda v: [_from(Session, x) for x in v["sessions"]])

    def delete_session(self, id: str) -> _Call[None]:
        return _Call("DELETE", _obj("sessions", id), parse=lambda v: None)

    def pause_session(self, id: str) -> _Call[Session]:
        """Snapshots the session's memory, processes and files and frees its sandbox."""
        return _Call("POST", _obj("sessions", id, "pause"), parse=lambda v: _from(Session, v))

    def resume_session(self, id: str) -> _Call[Session]:
        """Restores the paused session into a new sandbox; its processes continue."""
        return _Call("POST", _obj("sessions", id, "resume"), parse=lambda v: _from(Session, v))

    def set_session_timeout(self, id: str, seconds: int) -> _Call[Session]:
        """Bounds each run to seconds (a running session: from now); 0 for no bound."""
        return _Call("POST", _obj("sessions", id, "timeout"), json_body={"timeout_seconds": seconds},
                     parse=lambda v: _from(Session, v))

    def fork_session(self, id: str, count: int = 1, *, snapshot_id: Optional[str] = None) -> _Call[List[Session]]:
        """Makes count new sessions from a snapshot taken now (or snapshot_id)."""
        return _Call("POST", _obj("sessions", id, "fork"), json_body=_drop_none({"count": count, "snapshot_id": snapshot_id}),
                     parse=lambda v: [_from(Session, x) for x in v["sessions"]])

    def snapshot_session(self, id: str, name: Optional[str] = None) -> _Call[Snapshot]:
        """Snapshots the running session; it keeps running."""
        return _Call("POST", _obj("sessions", id, "snapshots"), json_body=_drop_none({"name": name}),
                     parse=lambda v: _from(Snapshot, v))

    def timeline(self, id: str) -> _Call[Timeline]:
        return _Call("GET", _obj("sessions", id, "timeline"), parse=lambda v: _from(Timeline, v))

    def restore_session(self, id: str, *, snapshot_id: Optional[str] = None, at: Optional[str] = None) -> _Call[Session]:
        """Moves the session to one of its snapshots (by id, or the latest at or before the RFC 3339 time at)."""
        return _Call("POST", _obj("sessions", id, "restore"), json_body=_drop_none({"snapshot_id": snapshot_id, "at": at}),
                     parse=lambda v: _from(Session, v))

    def diff(self, id: str, from_snapshot: str, to_snapshot: str, path: Optional[str] = None) -> _Call[SnapshotDiff]:
        """What changed in the session's files between two snapshots; with path, that file's unified diff."""
        return _Call("GET", _obj("sessions", id, "diff"), params={"from": from_snapshot, "to": to_snapshot, "path": path},
                     parse=lambda v: _from(SnapshotDiff, v))

    # --- access tokens ---

    def create_token(self, *, sandbox_id: Optional[str] = None, session_id: Optional[str] = None,
                     scopes: Sequence[str] = ("exec", "files"), ttl_seconds: Optional[int] = None,
                     name: Optional[str] = None, port: Optional[int] = None) -> _Call[AccessToken]:
        """An access token for one sandbox or session (its .token is the secret, shown this once)."""
        body = _drop_none({"sandbox_id": sandbox_id, "session_id": session_id, "scopes": list(scopes),
                           "ttl_seconds": ttl_seconds, "name": name, "port": port})
        return _Call("POST", "/v1/tokens", json_body=body, parse=lambda v: _from(AccessToken, v))

    def list_tokens(self, *, sandbox_id: Optional[str] = None, session_id: Optional[str] = None) -> _Call[List[AccessToken]]:
        return _Call("GET", "/v1/tokens", params={"sandbox_id": sandbox_id, "session_id": session_id},
                     parse=lambda v: [_from(AccessToken, x) for x in v["tokens"]])

    def revoke_token(self, id: str) -> _Call[None]:
        return _Call("DELETE", _obj("tokens", id), parse=lambda v: None)

    # --- the code interpreter (a sandbox or session of a code-interpreter template) ---

    def create_code_context(self, id: str, *, language: Optional[str] = None, cwd: Optional[str] = None) -> _Call[CodeContext]:
        """Starts a code context (a kernel of its own) in the sandbox or session id."""
        return _Call("POST", _work(id, "code", "contexts"), json_body=_drop_none({"language": language, "cwd": cwd}),
                     parse=lambda v: _from(CodeContext, v))

    def list_code_contexts(self, id: str) -> _Call[List[CodeContext]]:
        return _Call("GET", _work(id, "code", "contexts"), parse=lambda v: [_from(CodeContext, x) for x in v["contexts"]])

    def restart_code_context(self, id: str, context_id: str) -> _Call[None]:
        """Restarts a context's kernel: its state is lost."""
        return _Call("POST", _work(id, "code", "contexts", urllib.parse.quote(context_id, safe=""), "restart"),
                     parse=lambda v: None)

    def delete_code_context(self, id: str, context_id: str) -> _Call[None]:
        return _Call("DELETE", _work(id, "code", "contexts", urllib.parse.quote(context_id, safe="")), parse=lambda v: None)


OnText = Optional[Callable[[str], Any]]


def _code_request(code: str, context_id: Optional[str], language: Optional[str], env: Optional[Mapping[str, str]],
                  timeout: Optional[int]) -> Dict[str, Any]:
    return _drop_none({"code": code, "context_id": context_id, "language": language,
                       "env": dict(env) if env else None, "timeout_seconds": timeout})


class _CodeRun:
    """Gathers a run's events into an Execution, calling the callbacks as they come."""

    def __init__(self, on_stdout: OnText, on_stderr: OnText, on_result: Optional[Callable[[CodeResult], Any]],
                 on_error: Optional[Callable[[CodeError], Any]]) -> None:
        self.execution = Execution()
        self.on_stdout, self.on_stderr, self.on_result, self.on_error = on_stdout, on_stderr, on_result, on_error
        self.ended = False

    def feed(self, data: bytes) -> bytes:
        """Handles the whole lines of data (split at newlines only: JSON text may hold U+0085 or
        U+2028, which str.splitlines would split at) and returns what is left of it."""
        *lines, rest = data.split(b"\n")
        for ln in lines:
            self.line(ln.decode())
        return rest

    def line(self, line: str) -> None:
        if not line.strip():
            return
        ev = json.loads(line)
        kind, ex = ev.get("type"), self.execution
        if kind == "stdout":
            ex.stdout.append(ev.get("text", ""))
            if self.on_stdout:
                self.on_stdout(ev.get("text", ""))
        elif kind == "stderr":
            ex.stderr.append(ev.get("text", ""))
            if self.on_stderr:
                self.on_stderr(ev.get("text", ""))
        elif kind == "result":
            r = _from(CodeResult, ev)
            ex.results.append(r)
            if self.on_result:
                self.on_result(r)
        elif kind == "error":
            ex.error = _from(CodeError, ev)
            if self.on_error:
                self.on_error(ex.error)
        elif kind == "number_of_executions":
            ex.execution_count = int(ev.get("execution_count", 0))
        elif kind == "end_of_execution":
            self.ended = True

    def result(self) -> Execution:
        if not self.ended:
            raise AirlockError(0, "unavailable", "the run's output ended before its end")
        return self.execution


def _raise_for(resp: httpx.Response, body: bytes) -> None:
    if resp.status_code >= 400:
        try:
            parsed: Any = json.loads(body)
        except ValueError:
            parsed = body.decode(errors="replace")
        raise error_from(resp.status_code, parsed)


def _sync(op: Callable[Concatenate[_Ops, P], _Call[R]]) -> Callable[Concatenate["Client", P], R]:
    @functools.wraps(op)
    def call(self: "Client", *args: P.args, **kwargs: P.kwargs) -> R:
        return self._send(op(self, *args, **kwargs))
    return call


def _async(op: Callable[Concatenate[_Ops, P], _Call[R]]) -> Callable[Concatenate["AsyncClient", P], Any]:
    @functools.wraps(op)
    async def call(self: "AsyncClient", *args: P.args, **kwargs: P.kwargs) -> R:
        return await self._send(op(self, *args, **kwargs))
    return call


# Requests go out with TCP_NODELAY: httpx writes a request's head and body apart, and with Nagle's
# algorithm the body waits for the server's delayed ACK of the head (40 ms a call on Linux).
_NODELAY = [(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)]


def _transport(asynchronous: bool) -> Any:
    cls: Any = httpx.AsyncHTTPTransport if asynchronous else httpx.HTTPTransport
    if "socket_options" in inspect.signature(cls.__init__).parameters:  # httpx 0.24 and later
        return cls(socket_options=_NODELAY)
    t = cls()
    pool = getattr(t, "_pool", None)
    backend = getattr(pool, "_network_backend", None)
    if backend is not None:  # httpx 0.23 (Debian 12): wrap httpcore's backend
        setattr(pool, "_network_backend", (_AsyncNoDelay if asynchronous else _NoDelay)(backend))
    return t


def _nodelay(stream: Any) -> Any:
    sock = stream.get_extra_info("socket")
    if sock is not None:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return stream


class _NoDelay:
    def __init__(self, backend: Any) -> None:
        self._backend = backend

    def connect_tcp(self, *args: Any, **kwargs: Any) -> Any:
        return _nodelay(self._backend.connect_tcp(*args, **kwargs))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._backend, name)


class _AsyncNoDelay(_NoDelay):
    async def connect_tcp(self, *args: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        return _nodelay(await self._backend.connect_tcp(*args, **kwargs))


def _config(url: Optional[str], api_key: Optional[str]) -> Tuple[str, Dict[str, str]]:
    url = (url or os.environ.get("AIRLOCK_URL") or DEFAULT_URL).rstrip("/")
    key = api_key or os.environ.get("AIRLOCK_API_KEY") or ""
    headers = {"User-Agent": "airlock-python/0.1"}
    if key:
        headers["Authorization"] = "Bearer " + key
    return url, headers


# --- streamed processes ---


class AsyncProcess:
    """A process started with exec_stream: iterate it for (stream, bytes) output ("stdout" or
    "stderr"; a PTY's is all "stdout"), send it input, resize its terminal, signal it, wait for its end.
    Closing (or leaving the `async with`) leaves the process running."""

    def __init__(self, ws: Any, process_id: str) -> None:
        self._ws = ws
        self.process_id = process_id
        self._queue: "asyncio.Queue[Optional[Tuple[str, bytes]]]" = asyncio.Queue()
        self.exit: Optional[ExitStatus] = None
        self.dropped: Dict[str, int] = {}
        self._error: Optional[BaseException] = None
        self._reader = asyncio.ensure_future(self._read())

    async def _read(self) -> None:
        try:
            async for msg in self._ws:
                if isinstance(msg, bytes):
                    if msg:
                        await self._queue.put(("stderr" if msg[0] == 2 else "stdout", msg[1:]))
                    continue
                m = json.loads(msg)
                if m.get("type") == "exit":
                    self.exit = ExitStatus(exit_code=m.get("exit_code", -1), signal=m.get("signal", ""))
                elif m.get("type") == "dropped":
                    self.dropped[m.get("stream", "")] = self.dropped.get(m.get("stream", ""), 0) + int(m.get("bytes", 0))
                elif m.get("type") == "error":
                    e = m.get("error") or {}
                    self._error = AirlockError(0, str(e.get("code", "error")), str(e.get("message", "")))
        except websockets.ConnectionClosed:
            pass
        except BaseException as e:  # noqa: BLE001 - handed to the reader of the output
            self._error = e
        finally:
            await self._queue.put(None)

    def __aiter__(self) -> AsyncIterator[Tuple[str, bytes]]:
        return self._iter()

    async def _iter(self) -> AsyncIterator[Tuple[str, bytes]]:
        while True:
            item = await self._queue.get()
            if item is None:
                await self._queue.put(None)  # later iterations end too
                return
            yield item

    async def wait(self) -> ExitStatus:
        """Waits for the end (the output not yet read is discarded) and returns the exit status."""
        await self._reader
        if self.exit is None:
            raise self._error or AirlockError(0, "unavailable", "the stream ended before the process did")
        return self.exit

    async def send_stdin(self, data: Union[bytes, str]) -> None:
        await self._ws.send(b"\x00" + (data.encode() if isinstance(data, str) else bytes(data)))

    async def close_stdin(self) -> None:
        await self._ws.send(json.dumps({"type": "close_stdin"}))

    async def resize(self, rows: int, cols: int) -> None:
        await self._ws.send(json.dumps({"type": "resize", "rows": rows, "cols": cols}))

    async def signal(self, sig: str) -> None:
        """Sends a signal ("TERM", "KILL", "INT", …)."""
        await self._ws.send(json.dumps({"type": "signal", "signal": sig}))

    async def close(self) -> None:
        """Stops following the process; it keeps running."""
        await self._ws.close()
        await asyncio.gather(self._reader, return_exceptions=True)

    async def __aenter__(self) -> "AsyncProcess":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()


async def _open_stream(url: str, headers: Dict[str, str], id: str, cmd: Sequence[str], env: Optional[Mapping[str, str]],
                       cwd: Optional[str], user: Optional[str], pty: Optional[Tuple[int, int]]) -> AsyncProcess:
    ws_url = "ws" + url[len("http"):] + _work(id, "exec", "stream")
    hdrs = {k: v for k, v in headers.items() if k != "User-Agent"}
    major = int(websockets.__version__.split(".")[0])
    kw = {"additional_headers": hdrs} if major >= 14 else {"extra_headers": hdrs}
    try:
        ws = await websockets.connect(ws_url, max_size=None, **kw)  # type: ignore[arg-type]
    except websockets.InvalidStatusCode as e:  # type: ignore[attr-defined]
        raise error_from(e.status_code, {"error": {"code": "error", "message": f"exec stream refused ({e.status_code})"}}) from None
    req = _drop_none({"cmd": list(cmd), "env": env, "cwd": cwd, "user": user,
                      "pty": None if pty is None else {"rows": pty[0], "cols": pty[1]}})
    await ws.send(json.dumps(req))
    first = json.loads(await ws.recv())
    if first.get("type") != "started":
        await ws.close()
        e = first.get("error") or {}
        raise error_from(400 if e.get("code") == "invalid_argument" else 404 if e.get("code") == "not_found" else 500,
                         {"error": e})
    return AsyncProcess(ws, first.get("process_id", ""))


class _Loop:
    """An event loop on a thread of its own, for the synchronous client's streams."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="airlock-streams", daemon=True)
        self.thread.start()

    def run(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=5)
        if not self.thread.is_alive():
            self.loop.close()


class Process:
    """The synchronous AsyncProcess: iterate it for (stream, bytes), and the same methods."""

    def __init__(self, loop: _Loop, p: AsyncProcess) -> None:
        self._loop, self._p = loop, p
        self.process_id = p.process_id

    def __iter__(self) -> Iterator[Tuple[str, bytes]]:
        it = self._p.__aiter__()
        while True:
            try:
                yield self._loop.run(it.__anext__())
            except StopAsyncIteration:
                return

    @property
    def exit(self) -> Optional[ExitStatus]:
        return self._p.exit

    def wait(self) -> ExitStatus:
        return self._loop.run(self._p.wait())

    def send_stdin(self, data: Union[bytes, str]) -> None:
        self._loop.run(self._p.send_stdin(data))

    def close_stdin(self) -> None:
        self._loop.run(self._p.close_stdin())

    def resize(self, rows: int, cols: int) -> None:
        self._loop.run(self._p.resize(rows, cols))

    def signal(self, sig: str) -> None:
        self._loop.run(self._p.signal(sig))

    def close(self) -> None:
        self._loop.run(self._p.close())

    def __enter__(self) -> "Process":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class Client(_Ops):
    """The synchronous client. url and api_key default to AIRLOCK_URL and AIRLOCK_API_KEY (an API key
    or an access token)."""

    def __init__(self, url: Optional[str] = None, api_key: Optional[str] = None, *, timeout: Any = _TIMEOUT) -> None:
        self.url, self._headers = _config(url, api_key)
        self._http = httpx.Client(base_url=self.url, headers=self._headers, timeout=timeout, transport=_transport(False))
        self._loop: Optional[_Loop] = None
        self._lock = threading.Lock()

    def _send(self, call: _Call[R]) -> R:
        return call.result(self._http.request(call.method, call.path, **call.request()))

    def exec_stream(self, id: str, cmd: Sequence[str], *, env: Optional[Mapping[str, str]] = None,
                    cwd: Optional[str] = None, user: Optional[str] = None,
                    pty: Optional[Tuple[int, int]] = None) -> Process:
        """Starts cmd and streams it (pty: (rows, cols) runs it on a terminal)."""
        with self._lock:
            if self._loop is None:
                self._loop = _Loop()
        loop = self._loop
        return Process(loop, loop.run(_open_stream(self.url, self._headers, id, cmd, env, cwd, user, pty)))

    def read_file(self, id: str, path: str, *, max_bytes: Optional[int] = None) -> bytes:
        """The file's contents, read as a stream holding at most max_bytes (default
        DEFAULT_MAX_READ_BYTES): a larger file, or one the sandbox grows while it is read, raises
        TooLargeError having read no more than that."""
        bound = _Bounded(path, max_bytes)
        with self._http.stream("GET", _work(id, "files"), params={"path": path}) as resp:
            if resp.status_code >= 400:
                _raise_for(resp, resp.read())
            for chunk in resp.iter_bytes():
                bound.add(chunk)
        return bytes(bound.buf)

    def run_code(self, id: str, code: str, *, context_id: Optional[str] = None, language: Optional[str] = None,
                 env: Optional[Mapping[str, str]] = None, timeout: Optional[int] = None, on_stdout: OnText = None,
                 on_stderr: OnText = None, on_result: Optional[Callable[[CodeResult], Any]] = None,
                 on_error: Optional[Callable[[CodeError], Any]] = None) -> Execution:
        """Runs code in a code context of the sandbox or session id (its default one unless context_id
        or language names another) and returns its output; the callbacks get it as it comes. An exception
        in the code is Execution.error, not raised. timeout (seconds, default 300) interrupts the run."""
        run = _CodeRun(on_stdout, on_stderr, on_result, on_error)
        with self._http.stream("POST", _work(id, "code", "run"), json=_code_request(code, context_id, language, env, timeout),
                               timeout=httpx.Timeout(None, connect=10.0)) as resp:
            if resp.status_code >= 400:
                _raise_for(resp, resp.read())
            rest = b""
            for chunk in resp.iter_bytes():
                rest = run.feed(rest + chunk)
            run.line(rest.decode())
        return run.result()

    def close(self) -> None:
        self._http.close()
        if self._loop is not None:
            self._loop.stop()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    create_sandbox = _sync(_Ops.create_sandbox)
    get_sandbox = _sync(_Ops.get_sandbox)
    list_sandboxes = _sync(_Ops.list_sandboxes)
    delete_sandbox = _sync(_Ops.delete_sandbox)
    set_timeout = _sync(_Ops.set_timeout)
    egress = _sync(_Ops.egress)
    exec = _sync(_Ops.exec)
    write_file = _sync(_Ops.write_file)
    stat = _sync(_Ops.stat)
    list_files = _sync(_Ops.list_files)
    mkdir = _sync(_Ops.mkdir)
    move = _sync(_Ops.move)
    remove = _sync(_Ops.remove)
    create_session = _sync(_Ops.create_session)
    get_session = _sync(_Ops.get_session)
    list_sessions = _sync(_Ops.list_sessions)
    delete_session = _sync(_Ops.delete_session)
    pause_session = _sync(_Ops.pause_session)
    resume_session = _sync(_Ops.resume_session)
    set_session_timeout = _sync(_Ops.set_session_timeout)
    fork_session = _sync(_Ops.fork_session)
    snapshot_session = _sync(_Ops.snapshot_session)
    timeline = _sync(_Ops.timeline)
    restore_session = _sync(_Ops.restore_session)
    diff = _sync(_Ops.diff)
    create_token = _sync(_Ops.create_token)
    list_tokens = _sync(_Ops.list_tokens)
    revoke_token = _sync(_Ops.revoke_token)
    create_code_context = _sync(_Ops.create_code_context)
    list_code_contexts = _sync(_Ops.list_code_contexts)
    restart_code_context = _sync(_Ops.restart_code_context)
    delete_code_context = _sync(_Ops.delete_code_context)


class AsyncClient(_Ops):
    """The asyncio client: the same methods as Client, as coroutines."""

    def __init__(self, url: Optional[str] = None, api_key: Optional[str] = None, *, timeout: Any = _TIMEOUT) -> None:
        self.url, self._headers = _config(url, api_key)
        self._http = httpx.AsyncClient(base_url=self.url, headers=self._headers, timeout=timeout, transport=_transport(True))

    async def _send(self, call: _Call[R]) -> R:
        return call.result(await self._http.request(call.method, call.path, **call.request()))

    async def exec_stream(self, id: str, cmd: Sequence[str], *, env: Optional[Mapping[str, str]] = None,
                          cwd: Optional[str] = None, user: Optional[str] = None,
                          pty: Optional[Tuple[int, int]] = None) -> AsyncProcess:
        """Starts cmd and streams it (pty: (rows, cols) runs it on a terminal)."""
        return await _open_stream(self.url, self._headers, id, cmd, env, cwd, user, pty)

    async def read_file(self, id: str, path: str, *, max_bytes: Optional[int] = None) -> bytes:
        """Client.read_file on asyncio."""
        bound = _Bounded(path, max_bytes)
        async with self._http.stream("GET", _work(id, "files"), params={"path": path}) as resp:
            if resp.status_code >= 400:
                _raise_for(resp, await resp.aread())
            async for chunk in resp.aiter_bytes():
                bound.add(chunk)
        return bytes(bound.buf)

    async def run_code(self, id: str, code: str, *, context_id: Optional[str] = None, language: Optional[str] = None,
                       env: Optional[Mapping[str, str]] = None, timeout: Optional[int] = None, on_stdout: OnText = None,
                       on_stderr: OnText = None, on_result: Optional[Callable[[CodeResult], Any]] = None,
                       on_error: Optional[Callable[[CodeError], Any]] = None) -> Execution:
        """Client.run_code on asyncio (the callbacks are plain functions)."""
        run = _CodeRun(on_stdout, on_stderr, on_result, on_error)
        async with self._http.stream("POST", _work(id, "code", "run"), json=_code_request(code, context_id, language, env, timeout),
                                     timeout=httpx.Timeout(None, connect=10.0)) as resp:
            if resp.status_code >= 400:
                _raise_for(resp, await resp.aread())
            rest = b""
            async for chunk in resp.aiter_bytes():
                rest = run.feed(rest + chunk)
            run.line(rest.decode())
        return run.result()

    async def close(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    create_sandbox = _async(_Ops.create_sandbox)
    get_sandbox = _async(_Ops.get_sandbox)
    list_sandboxes = _async(_Ops.list_sandboxes)
    delete_sandbox = _async(_Ops.delete_sandbox)
    set_timeout = _async(_Ops.set_timeout)
    egress = _async(_Ops.egress)
    exec = _async(_Ops.exec)
    write_file = _async(_Ops.write_file)
    stat = _async(_Ops.stat)
    list_files = _async(_Ops.list_files)
    mkdir = _async(_Ops.mkdir)
    move = _async(_Ops.move)
    remove = _async(_Ops.remove)
    create_session = _async(_Ops.create_session)
    get_session = _async(_Ops.get_session)
    list_sessions = _async(_Ops.list_sessions)
    delete_session = _async(_Ops.delete_session)
    pause_session = _async(_Ops.pause_session)
    resume_session = _async(_Ops.resume_session)
    set_session_timeout = _async(_Ops.set_session_timeout)
    fork_session = _async(_Ops.fork_session)
    snapshot_session = _async(_Ops.snapshot_session)
    timeline = _async(_Ops.timeline)
    restore_session = _async(_Ops.restore_session)
    diff = _async(_Ops.diff)
    create_token = _async(_Ops.create_token)
    list_tokens = _async(_Ops.list_tokens)
    revoke_token = _async(_Ops.revoke_token)
    create_code_context = _async(_Ops.create_code_context)
    list_code_contexts = _async(_Ops.list_code_contexts)
    restart_code_context = _async(_Ops.restart_code_context)
    delete_code_context = _async(_Ops.delete_code_context)
