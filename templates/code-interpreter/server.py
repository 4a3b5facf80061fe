#!/usr/bin/env python3
"""Airlock's code interpreter, run inside a sandbox: stateful Jupyter kernels behind an HTTP server.

It speaks the protocol of E2B's code interpreter on port 49999, so that Airlock's API (/v1/.../code),
its SDKs and the unmodified @e2b/code-interpreter SDK all drive the same kernels:

  POST   /execute                {code, context_id?, language?, env_vars?}  -> NDJSON events
  POST   /contexts               {language?, cwd?}                          -> {id, language, cwd}
  GET    /contexts                                                          -> [{id, language, cwd}]
  DELETE /contexts/{id}
  POST   /contexts/{id}/restart
  GET    /health                 200 once the default context is ready

Events, one JSON object per line: number_of_executions {execution_count}, stdout/stderr {text,
timestamp}, result {is_main_result, text, html, markdown, svg, png, jpeg, pdf, latex, json, javascript,
extra}, error {name, value, traceback}, and last end_of_execution. A client that goes away, or a run past
its "timeout" (seconds; Airlock's API sends its own), interrupts the execution, and a kernel that does
not stop within INTERRUPT_GRACE of that is restarted, so the context never stays stuck. Everything here
is the sandbox's own: the host checks what it sends.

POST /execute runs code, so it must carry the sandbox's interpreter key in the X-Airlock-Interpreter-Key
header: the key is in the sandbox's identity file (/etc/airlock/identity, readable by the template's
user only), and Airlock's API adds it for callers that may run code (exec scope) and no one else, so a
token that reaches the sandbox's ports but not exec, a tunnel or a public port cannot run code here.
The context routes take no key (E2B's SDK reaches them with its traffic token), and run nothing of the
caller's: every kernel starts in START_DIR, which only root writes (Python puts the directory a kernel
starts in first on its import path while it starts), and then moves to its context's directory.

Every sandbox of the template is restored from one start snapshot, with this server and its default
kernel already running: before it runs code after a restore, a context whose kernel was started before
the sandbox got its identity (the identity file's epoch changed since) reseeds the kernel's random
generators (random, numpy's global one if loaded, tempfile's names) with fresh entropy. A fork's
contexts do the same. What cannot be reseeded in a running process (its str hash seed) stays shared.

`server.py --ready` exits 0 once a server answers /health (the template's ready check).
"""

import datetime
import hmac
import json
import os
import re
import select
import socket
import sys
import threading
import time
import urllib.request
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

PORT = int(os.environ.get("AIRLOCK_INTERPRETER_PORT", "49999"))
HOME = os.environ.get("HOME") or "/home/user"
MAX_BODY = 16 << 20  # a request's body: code and environment
INTERRUPT_GRACE = 10  # seconds a kernel has to stop after an interrupt before it is restarted
IDENTITY_FILE = os.environ.get("AIRLOCK_IDENTITY_FILE", "/etc/airlock/identity")
START_DIR = "/"  # where kernels start: a directory only root writes
KEY_HEADER = "X-Airlock-Interpreter-Key"

# Jupyter MIME types as the result's keys; others go under "extra".
MIME = {
    "text/plain": "text",
    "text/html": "html",
    "text/markdown": "markdown",
    "image/svg+xml": "svg",
    "image/png": "png",
    "image/jpeg": "jpeg",
    "application/pdf": "pdf",
    "text/latex": "latex",
    "application/json": "json",
    "application/javascript": "javascript",
}

ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


class HTTPError(Exception):
    def __init__(self, status, message):
        super().__init__(message)
        self.status = status
        self.message = message


def normalize_language(lang):
    l = (lang or "python").strip().lower()
    if l in ("python", "python3", "py"):
        return "python"
    raise HTTPError(400, "language %r is not available here: this interpreter runs python" % (lang,))


def now():
    return datetime.datetime.now(datetime.timezone.utc).isoformat()


def result_event(main, data):
    out = {"type": "result", "is_main_result": bool(main)}
    extra = {}
    for mime, value in (data or {}).items():
        key = MIME.get(mime)
        if key is None:
            extra[mime] = value
            continue
        if key == "text" and isinstance(value, str) and len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]  # a string's repr, as E2B's server gives it
        out[key] = value
    if extra:
        out["extra"] = extra
    return out


class Identity:
    """The sandbox's identity file, read again whenever it changed (the daemon replaces it whole)."""

    def __init__(self, path):
        self.path = path
        self.lock = threading.Lock()
        self.stamp = None
        self.value = None

    def current(self):
        """The identity: a dict with epoch, seed and interpreter_key (hex), or None without one."""
        try:
            st = os.stat(self.path)
        except OSError:
            return None
        stamp = (st.st_ino, st.st_mtime_ns, st.st_size)
        with self.lock:
            if stamp != self.stamp:
                try:
                    with open(self.path, "rb") as f:
                        v = json.loads(f.read(4096))
                    if not all(isinstance(v.get(k), str) and v.get(k) for k in ("epoch", "seed", "interpreter_key")):
                        v = None
                except (OSError, ValueError, AttributeError):
                    v = None
                self.stamp, self.value = stamp, v
            return self.value

    def epoch(self):
        v = self.current()
        return v["epoch"] if v else None


IDENTITY = Identity(IDENTITY_FILE)

# Run silently in a kernel started before the sandbox's identity changed: its random generators were
# seeded before the snapshot every sandbox of the template (or every fork) is restored from.
RESEED = """def _al_reseed(seed):
    import os, random, sys
    random.seed(bytes.fromhex(seed) + os.urandom(32))
    if "tempfile" in sys.modules:
        sys.modules["tempfile"]._name_sequence = None
    if "numpy" in sys.modules:
        try:
            sys.modules["numpy"].random.seed()
        except Exception:
            pass
_al_reseed(%r)
del _al_reseed
"""


class Gone(Exception):
    """The client went away in the middle of an execution."""


def peer_closed(sock):
    """Reports whether the client closed its side of sock (readable, and nothing to read)."""
    try:
        r, _, _ = select.select([sock], [], [], 0)
        if not r:
            return False
        return sock.recv(1, socket.MSG_PEEK) == b""
    except OSError:
        return True


class Context:
    """One kernel, its client and the lock that runs one execution at a time in it."""

    def __init__(self, language, cwd):
        from jupyter_client.manager import KernelManager

        self.id = str(uuid.uuid4())
        self.language = language
        self.cwd = cwd
        self.lock = threading.Lock()
        self.generation = 0  # counts restarts: a run whose kernel was restarted under it ends
        self.epoch = IDENTITY.epoch()  # the identity the kernel's generators were seeded under
        self.km = KernelManager(kernel_name="python3")
        self.km.start_kernel(cwd=START_DIR)
        try:
            self.kc = self.km.client()
            self.kc.start_channels()
            self._started()
        except BaseException:
            self.km.shutdown_kernel(now=True)  # no kernel left behind that nothing tracks
            raise

    def info(self):
        return {"id": self.id, "language": self.language, "cwd": self.cwd}

    def shutdown(self):
        try:
            self.kc.stop_channels()
        finally:
            self.km.shutdown_kernel(now=True)

    def _started(self):
        """Waits for a kernel just (re)started in START_DIR and moves it to the context's directory."""
        self.kc.wait_for_ready(timeout=300)
        self.epoch = IDENTITY.epoch()  # a new kernel process seeds itself
        if self.cwd != START_DIR:
            self._run("import os as _al_os\n_al_os.chdir(%r)\ndel _al_os" % self.cwd, lambda ev: None, silent=True)

    def restart(self):
        # Not under the lock: a run that holds it is ended by the restart (its kernel goes away).
        self.generation += 1
        self.km.restart_kernel(now=True)
        with self.lock:
            self._started()

    def _run(self, code, emit, silent=False, deadline=None, gone_check=None):
        """Runs code and passes each of its output messages to emit (which may raise Gone). Past
        deadline (a time.monotonic()), or once gone_check() says the client left, the kernel is
        interrupted, and restarted if it has not stopped INTERRUPT_GRACE seconds later."""
        msg_id = self.kc.execute(code, silent=silent, store_history=not silent, allow_stdin=False, stop_on_error=False)
        generation = self.generation
        gone = False
        interrupted = None  # when the kernel was interrupted
        timed_out = False
        while True:
            now_ = time.monotonic()
            if self.generation != generation:
                if not gone:
                    try:
                        emit({"type": "error", "name": "KernelRestarted", "traceback": "",
                              "value": "the context was restarted during the run; its state is lost"})
                    except Gone:
                        pass
                return
            if interrupted is None and (deadline is not None and now_ > deadline or gone_check is not None and not gone and gone_check()):
                timed_out = deadline is not None and now_ > deadline
                gone = gone or not timed_out
                interrupted = now_
                self.km.interrupt_kernel()
            if interrupted is not None and now_ - interrupted > INTERRUPT_GRACE:
                # It did not stop (a busy loop in C, or code that catches KeyboardInterrupt).
                self.km.restart_kernel(now=True)
                self._started()
                if not gone:
                    try:
                        emit({"type": "error", "name": "KernelRestarted", "traceback": "",
                              "value": "the run did not stop when interrupted; the kernel was restarted and its state is lost"})
                    except Gone:
                        pass
                return
            try:
                msg = self.kc.get_iopub_msg(timeout=0.5)
            except Exception:  # queue.Empty: the kernel may have died
                if not self.km.is_alive():
                    if not gone:
                        try:
                            emit({"type": "error", "name": "KernelDied", "value": "the kernel died and was restarted; its state is lost", "traceback": ""})
                        except Gone:
                            pass
                    self.km.restart_kernel(now=True)
                    self._started()
                    return
                continue
            if msg.get("parent_header", {}).get("msg_id") != msg_id:
                continue
            kind, c = msg["msg_type"], msg["content"]
            if kind == "status" and c.get("execution_state") == "idle":
                break
            if timed_out and kind == "error" and c.get("ename") == "KeyboardInterrupt":
                c = {"ename": "TimeoutError", "evalue": "the run passed its timeout and was interrupted", "traceback": c.get("traceback", [])}
            ev = None
            if kind == "execute_input":
                ev = {"type": "number_of_executions", "execution_count": c.get("execution_count")}
            elif kind == "stream":
                ev = {"type": "stderr" if c.get("name") == "stderr" else "stdout", "text": c.get("text", ""), "timestamp": now()}
            elif kind == "execute_result":
                ev = result_event(True, c.get("data"))
            elif kind == "display_data":
                ev = result_event(False, c.get("data"))
            elif kind == "error":
                ev = {"type": "error", "name": c.get("ename", ""), "value": c.get("evalue", ""),
                      "traceback": ANSI.sub("", "\n".join(c.get("traceback", [])))}
            if ev is None or gone:
                continue
            try:
                emit(ev)
            except Gone:
                gone = True
                self.km.interrupt_kernel()
        # The shell's reply to this execution: taken so that none pile up.
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                reply = self.kc.get_shell_msg(timeout=1)
            except Exception:
                continue
            if reply.get("parent_header", {}).get("msg_id") == msg_id:
                break

    def reseed_if_new_identity(self):
        """Reseeds the kernel's random generators if the sandbox got a new identity since they were
        seeded (a restore of the start snapshot, a fork). Called with the lock held."""
        ident = IDENTITY.current()
        if ident is None or ident["epoch"] == self.epoch:
            return
        self._run(RESEED % ident["seed"], lambda ev: None, silent=True)
        self.epoch = ident["epoch"]

    def execute(self, code, env, emit, deadline=None, gone_check=None):
        with self.lock:
            self.reseed_if_new_identity()
            if env:
                # The variables hold for this execution only, as E2B's env_vars.
                self._run("import os as _al_os\n_al_saved = {k: _al_os.environ.get(k) for k in %r}\n_al_os.environ.update(%r)" % (list(env), env),
                          lambda ev: None, silent=True)
            try:
                self._run(code, emit, deadline=deadline, gone_check=gone_check)
            finally:
                if env:
                    self._run("for _al_k, _al_v in _al_saved.items():\n"
                              "    _al_os.environ.pop(_al_k, None) if _al_v is None else _al_os.environ.__setitem__(_al_k, _al_v)\n"
                              "del _al_os, _al_saved", lambda ev: None, silent=True)


class Contexts:
    def __init__(self):
        self.lock = threading.Lock()  # guards by_id and default; never held while a kernel starts
        self.default_lock = threading.Lock()  # one default context made at a time
        self.by_id = {}
        self.default = None  # the default python context's ID

    def create(self, language, cwd):
        language = normalize_language(language)
        cwd = cwd or HOME
        if not isinstance(cwd, str) or not os.path.isabs(cwd) or not os.path.isdir(cwd):
            raise HTTPError(400, "cwd %r is not a directory" % (cwd,))
        ctx = Context(language, cwd)
        with self.lock:
            self.by_id[ctx.id] = ctx
        return ctx

    def get(self, cid):
        with self.lock:
            ctx = self.by_id.get(cid)
        if ctx is None:
            raise HTTPError(404, "Context %s not found" % (cid,))
        return ctx

    def default_context(self):
        with self.default_lock:
            with self.lock:
                ctx = self.by_id.get(self.default)
            if ctx is not None:
                return ctx
            ctx = Context("python", HOME)
            with self.lock:
                self.by_id[ctx.id] = ctx
                self.default = ctx.id
            return ctx

    def remove(self, cid):
        with self.lock:
            ctx = self.by_id.pop(cid, None)
        if ctx is None:
            raise HTTPError(404, "Context %s not found" % (cid,))
        ctx.shutdown()

    def list(self):
        with self.lock:
            return [c.info() for c in self.by_id.values()]


CONTEXTS = Contexts()
READY = threading.Event()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "airlock-interpreter"

    def log_message(self, fmt, *args):
        pass

    def _json(self, status, obj):
        body = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _text(self, status, text):
        body = text.encode()
        self.send_response(status)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _body(self):
        n = int(self.headers.get("Content-Length") or 0)
        if n > MAX_BODY:
            raise HTTPError(413, "request body over %d bytes" % MAX_BODY)
        raw = self.rfile.read(n) if n else b""
        if not raw:
            return {}
        try:
            v = json.loads(raw)
        except ValueError as e:
            raise HTTPError(400, "invalid JSON: %s" % e)
        if not isinstance(v, dict):
            raise HTTPError(400, "want a JSON object")
        return v

    def _check_key(self):
        """Refuses a request without the sandbox's interpreter key (see the module's doc)."""
        ident = IDENTITY.current()
        got = (self.headers.get(KEY_HEADER) or "").encode("latin-1", "replace")
        if ident is not None and hmac.compare_digest(got, ident["interpreter_key"].encode()):
            return
        self.close_connection = True  # its body, if any, is not read
        if ident is None:
            raise HTTPError(403, "this code interpreter has no key yet (%s is missing): it runs no code" % IDENTITY_FILE)
        raise HTTPError(403, "this code interpreter runs code only for callers that may run code in the sandbox "
                             "(exec scope): Airlock's API adds its key for them")

    def _serve(self, fn):
        try:
            fn()
        except HTTPError as e:
            self._text(e.status, e.message)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        except Exception as e:  # an answer rather than a dropped connection
            self._text(500, "%s: %s" % (type(e).__name__, e))

    def do_GET(self):
        def get():
            if self.path == "/health":
                if not READY.is_set():
                    raise HTTPError(503, "starting")
                self._json(200, {"status": "ok"})
            elif self.path == "/contexts":
                self._json(200, CONTEXTS.list())
            else:
                raise HTTPError(404, "not found")
        self._serve(get)

    def do_DELETE(self):
        def delete():
            m = re.fullmatch(r"/contexts/([A-Za-z0-9-]{1,64})", self.path)
            if not m:
                raise HTTPError(404, "not found")
            CONTEXTS.remove(m.group(1))
            self.send_response(204)
            self.send_header("Content-Length", "0")
            self.end_headers()
        self._serve(delete)

    def do_POST(self):
        def post():
            if self.path == "/execute":
                self._check_key()  # before the body is read: it runs code
            req = self._body()
            if self.path == "/execute":
                self._execute(req)
                return
            if self.path == "/contexts":
                ctx = CONTEXTS.create(req.get("language"), req.get("cwd"))
                self._json(200, ctx.info())
                return
            m = re.fullmatch(r"/contexts/([A-Za-z0-9-]{1,64})/restart", self.path)
            if m:
                CONTEXTS.get(m.group(1)).restart()
                self._json(200, {})
                return
            raise HTTPError(404, "not found")
        self._serve(post)

    def _execute(self, req):
        code = req.get("code")
        if not isinstance(code, str):
            raise HTTPError(400, "code must be a string")
        cid, language = req.get("context_id"), req.get("language")
        if cid and language:
            raise HTTPError(400, "Only one of context_id or language can be provided")
        env = req.get("env_vars") or {}
        if not isinstance(env, dict) or not all(isinstance(k, str) and isinstance(v, str) and "\0" not in k + v for k, v in env.items()):
            raise HTTPError(400, "env_vars must map names to strings (without NUL)")
        timeout = req.get("timeout")
        if timeout is not None and (not isinstance(timeout, (int, float)) or isinstance(timeout, bool) or timeout <= 0):
            raise HTTPError(400, "timeout must be a positive number of seconds")
        deadline = time.monotonic() + timeout if timeout else None
        if cid:
            ctx = CONTEXTS.get(cid)
        else:
            normalize_language(language)
            ctx = CONTEXTS.default_context()
        self.send_response(200)
        self.send_header("Content-Type", "application/x-ndjson")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("Cache-Control", "no-store")
        self.end_headers()

        def emit(ev):
            line = json.dumps(ev).encode() + b"\n"
            try:
                self.wfile.write(b"%x\r\n%s\r\n" % (len(line), line))
                self.wfile.flush()
            except OSError:
                raise Gone()

        try:
            ctx.execute(code, env, emit, deadline=deadline, gone_check=lambda: peer_closed(self.connection))
            emit({"type": "end_of_execution"})
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except (Gone, OSError):
            self.close_connection = True


def ready():
    try:
        with urllib.request.urlopen("http://127.0.0.1:%d/health" % PORT, timeout=2) as r:
            return r.status == 200
    except Exception:
        return False


def main():
    if sys.argv[1:] == ["--ready"]:
        sys.exit(0 if ready() else 1)
    server = ThreadingHTTPServer(("0.0.0.0", PORT), Handler)
    server.daemon_threads = True

    def warm():
        CONTEXTS.default_context()
        READY.set()

    threading.Thread(target=warm, daemon=True).start()
    server.serve_forever()


if __name__ == "__main__":
    main()
