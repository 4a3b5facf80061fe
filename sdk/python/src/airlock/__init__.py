"""Airlock's Python SDK: secure sandboxes and sessions for AI agents.

Client is synchronous, AsyncClient the same on asyncio; both take url and api_key (default: the
environment's AIRLOCK_URL and AIRLOCK_API_KEY).
"""

from ._client import DEFAULT_MAX_READ_BYTES, DEFAULT_URL, AsyncClient, AsyncProcess, Client, Process
from ._errors import (AirlockError, AuthenticationError, ConflictError, InvalidArgumentError, NotFoundError,
                      PermissionDeniedError, RateLimitError, TooLargeError)
from ._types import (AccessToken, CodeContext, CodeError, CodeResult, ExecResult, Execution, ExitStatus, FileInfo, Flow,
                     Sandbox, Session, Snapshot, SnapshotDiff, Timeline)

__all__ = [
    "DEFAULT_URL", "DEFAULT_MAX_READ_BYTES", "Client", "AsyncClient", "Process", "AsyncProcess",
    "AirlockError", "AuthenticationError", "ConflictError", "InvalidArgumentError", "NotFoundError",
    "PermissionDeniedError", "RateLimitError", "TooLargeError",
    "AccessToken", "CodeContext", "CodeError", "CodeResult", "Execution", "ExecResult", "ExitStatus", "FileInfo", "Flow", "Sandbox", "Session", "Snapshot", "SnapshotDiff",
    "Timeline",
]
