"""The API's objects, as dataclasses built from its JSON (unknown fields are ignored)."""

from __future__ import annotations

import dataclasses
import datetime as _dt
import sys
import typing
from typing import Any, Dict, List, Optional, Type, TypeVar

T = TypeVar("T")


def _parse_time(v: Any) -> Optional[_dt.datetime]:
    if v is None or isinstance(v, _dt.datetime):
        return v
    s = str(v)
    if s.endswith("Z"):
        s = s[:-1] + "+00:00"
    # Python before 3.11 takes at most 6 fractional digits.
    if "." in s:
        head, _, rest = s.partition(".")
        frac = "".join(ch for ch in rest if ch.isdigit())
        tz = rest[len(frac):]
        s = head + "." + frac[:6].ljust(6, "0") + tz
    return _dt.datetime.fromisoformat(s)


def _from(cls: Type[T], d: Dict[str, Any]) -> T:
    """Builds the dataclass cls from the JSON object d."""
    hints = typing.get_type_hints(cls, vars(sys.modules[cls.__module__]))
    kw: Dict[str, Any] = {}
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        key = f.name[:-1] if f.name.endswith("_") else f.name  # from_ is JSON's "from"
        if key not in d:
            continue
        v = d[key]
        h = hints[f.name]
        origin = typing.get_origin(h)
        args = typing.get_args(h)
        if origin is typing.Union and type(None) in args:  # Optional[X]
            h = next(a for a in args if a is not type(None))
            origin, args = typing.get_origin(h), typing.get_args(h)
        if v is None:
            kw[f.name] = None
        elif h is _dt.datetime:
            kw[f.name] = _parse_time(v)
        elif dataclasses.is_dataclass(h):
            kw[f.name] = _from(h, v)  # type: ignore[arg-type]
        elif origin in (list, List) and args and dataclasses.is_dataclass(args[0]):
            kw[f.name] = [_from(args[0], x) for x in v]
        else:
            kw[f.name] = v
    return cls(**kw)


@dataclasses.dataclass
class Sandbox:
    """A sandbox: destroyed with everything in it at its timeout or when deleted."""

    id: str
    state: str
    template: str = ""
    reason: str = ""
    cpu: int = 0
    memory_mb: int = 0
    disk_mb: int = 0
    timeout_seconds: int = 0
    metadata: Dict[str, str] = dataclasses.field(default_factory=dict)
    created_at: Optional[_dt.datetime] = None
    started_at: Optional[_dt.datetime] = None
    ends_at: Optional[_dt.datetime] = None
    stopped_at: Optional[_dt.datetime] = None
    network: Dict[str, Any] = dataclasses.field(default_factory=dict)
    runtime: str = ""
    node: str = ""


@dataclasses.dataclass
class Session:
    """A session: long work in one sandbox at a time, which pauses (memory kept), resumes and forks."""

    id: str
    state: str
    template: str = ""
    reason: str = ""
    cpu: int = 0
    memory_mb: int = 0
    disk_mb: int = 0
    metadata: Dict[str, str] = dataclasses.field(default_factory=dict)
    idle_timeout_seconds: int = 0
    auto_resume: bool = False
    rolling_interval_seconds: int = 0
    timeout_seconds: int = 0
    on_timeout: str = "delete"
    ends_at: Optional[_dt.datetime] = None
    sandbox_id: str = ""
    head_snapshot_id: str = ""
    parent_session_id: str = ""
    forked_from_snapshot_id: str = ""
    created_at: Optional[_dt.datetime] = None
    updated_at: Optional[_dt.datetime] = None
    last_activity_at: Optional[_dt.datetime] = None
    paused_at: Optional[_dt.datetime] = None
    runtime: str = ""
    node: str = ""


@dataclasses.dataclass
class ExecResult:
    """How a command run to completion ended, and its output (decoded as UTF-8, invalid bytes replaced)."""

    exit_code: int
    stdout: str = ""
    stderr: str = ""
    signal: str = ""
    stdout_truncated: bool = False
    stderr_truncated: bool = False
    timed_out: bool = False
    duration_ms: int = 0


@dataclasses.dataclass
class ExitStatus:
    """How a streamed process ended: its exit code, or -1 and the signal that killed it."""

    exit_code: int
    signal: str = ""


@dataclasses.dataclass
class FileInfo:
    name: str
    path: str
    type: str  # file, dir, symlink or other
    size: int = 0
    mode: str = ""
    mod_time: Optional[_dt.datetime] = None
    target: str = ""


@dataclasses.dataclass
class Snapshot:
    id: str
    session_id: str = ""
    parent_id: str = ""
    name: str = ""
    trigger: str = ""
    state: str = ""
    reason: str = ""
    pinned: bool = False
    logical_bytes: int = 0
    stored_bytes: int = 0
    kind: str = ""
    created_at: Optional[_dt.datetime] = None
    completed_at: Optional[_dt.datetime] = None


@dataclasses.dataclass
class Timeline:
    """A session's snapshots, oldest first (a tree by parent_id), and the one it runs from."""

    snapshots: List[Snapshot]
    head_snapshot_id: str = ""


@dataclasses.dataclass
class FileChange:
    path: str
    change: str = ""
    type: str = ""
    size: int = 0


@dataclasses.dataclass
class SnapshotDiff:
    """What changed between two snapshots; with a path, that file's unified diff."""

    from_: str = ""
    to: str = ""
    changes: List[Dict[str, Any]] = dataclasses.field(default_factory=list)
    truncated: bool = False
    path: str = ""
    unified: str = ""
    binary: bool = False


@dataclasses.dataclass
class Flow:
    """One connection or plain-HTTP request a sandbox made, and what the gateway decided."""

    decision: str
    protocol: str = ""
    host: str = ""
    dst_ip: str = ""
    dst_port: int = 0
    rule: str = ""
    reason: str = ""
    sandbox_id: str = ""
    sent: int = 0
    received: int = 0
    start: Optional[_dt.datetime] = None
    end: Optional[_dt.datetime] = None


@dataclasses.dataclass
class AccessToken:
    """An access token: one sandbox's or session's exec, files or ports, for an agent to hold."""

    id: str
    scopes: List[str]
    name: str = ""
    sandbox_id: str = ""
    session_id: str = ""
    port: int = 0
    prefix: str = ""
    token: str = ""  # the secret, in the answer to its creation only
    created_at: Optional[_dt.datetime] = None
    expires_at: Optional[_dt.datetime] = None
    revoked_at: Optional[_dt.datetime] = None


@dataclasses.dataclass
class CodeContext:
    """A code context of a sandbox: a kernel of its own, with its state."""

    id: str
    language: str = "python"
    cwd: str = ""


@dataclasses.dataclass
class CodeResult:
    """A value the code produced: the last expression's (is_main_result) or one it displayed, in each
    representation it has. png and jpeg are base64; json is the decoded value; extra holds other MIME
    types."""

    is_main_result: bool = False
    text: Optional[str] = None
    html: Optional[str] = None
    markdown: Optional[str] = None
    svg: Optional[str] = None
    png: Optional[str] = None
    jpeg: Optional[str] = None
    pdf: Optional[str] = None
    latex: Optional[str] = None
    json: Any = None
    javascript: Optional[str] = None
    extra: Optional[Dict[str, Any]] = None


@dataclasses.dataclass
class CodeError:
    """An exception the code raised (or TimeoutError, InterpreterError), with its traceback."""

    name: str = ""
    value: str = ""
    traceback: str = ""


@dataclasses.dataclass
class Execution:
    """A run's output: its results, stdout and stderr as they came, its error, the execution count."""

    results: List[CodeResult] = dataclasses.field(default_factory=list)
    stdout: List[str] = dataclasses.field(default_factory=list)
    stderr: List[str] = dataclasses.field(default_factory=list)
    error: Optional[CodeError] = None
    execution_count: int = 0

    @property
    def text(self) -> Optional[str]:
        """The main result's text (the last expression's value), None if none."""
        for r in self.results:
            if r.is_main_result:
                return r.text
        return None
