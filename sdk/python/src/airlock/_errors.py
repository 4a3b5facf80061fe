"""Errors the API answers with."""

from __future__ import annotations

from typing import Any, Dict, Type


class AirlockError(Exception):
    """An error answer of the API: its HTTP status, its code (not_found, conflict, …) and message."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(f"{status} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message


class InvalidArgumentError(AirlockError):
    """400: the request was wrong; the message says how."""


class AuthenticationError(AirlockError):
    """401: no credential, or one that is invalid, expired or revoked."""


class PermissionDeniedError(AirlockError):
    """403: the credential's scope does not reach this."""


class NotFoundError(AirlockError):
    """404: no such object, or another tenant's."""


class ConflictError(AirlockError):
    """409: the object's state forbids the call (a paused session, a name taken)."""


class TooLargeError(AirlockError):
    """413: too large; also raised by the client when a file it reads is larger than its bound."""


class RateLimitError(AirlockError):
    """429: a quota or rate limit was hit."""


_BY_STATUS: Dict[int, Type[AirlockError]] = {
    400: InvalidArgumentError,
    401: AuthenticationError,
    403: PermissionDeniedError,
    404: NotFoundError,
    409: ConflictError,
    412: ConflictError,
    413: TooLargeError,
    429: RateLimitError,
}


def error_from(status: int, body: Any) -> AirlockError:
    """The error for an answer with status and the decoded JSON body (or its text)."""
    code, message = "error", str(body)[:500]
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        code = str(body["error"].get("code", code))
        message = str(body["error"].get("message", message))
    return _BY_STATUS.get(status, AirlockError)(status, code, message)
