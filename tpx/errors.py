"""One error tree for tpx.

Every exception tpx raises on purpose derives from :class:`TpxError`::

    TpxError
    ├── ModelError                 an exchange failed; ``code`` is a MODEL_* string
    │   ├── UnauthorizedError      MODEL_UNAUTHORIZED  no credentials, 401, 403
    │   ├── RateLimitedError       MODEL_RATE_LIMITED  429
    │   ├── OverloadedError        MODEL_OVERLOADED    529, 503
    │   ├── HTTPStatusError        MODEL_HTTP          any other non-2xx status (kept)
    │   ├── TimeoutError           MODEL_TIMEOUT       connect/read/write/pool timeout
    │   ├── NetworkError           MODEL_NETWORK       connect refused, reset, DNS
    │   ├── TLSError               MODEL_TLS           certificate or handshake failure
    │   ├── ProtocolError          MODEL_PROTOCOL      body not JSON / wrong shape / bad tool call
    │   ├── PairingError           MODEL_PAIRING       tool_results do not answer the pending tool_uses
    │   └── UnsupportedError       MODEL_UNSUPPORTED   a request feature the provider cannot carry
    ├── ExchangeStateError         a step of the exchange machine taken out of order
    ├── SpecConfigError            a TLC cfg file the mirror cannot read
    └── TLCError                   the TLC runner failed (not: the spec was violated)
        ├── JavaNotFoundError      no usable ``java`` (missing or too old)
        ├── JarNotFoundError       no tla2tools.jar
        ├── TLCConfigError         TLC rejected the spec or cfg (parse / semantic error)
        ├── TLCCrashError          TLC exited abnormally
        └── TLCTimeoutError        TLC ran past its timeout and was killed

MODEL_* codes are data on the classes (``ModelError.code``) and every
:class:`ModelError` renders a Messages-API error body (:meth:`ModelError.body`)
so a Messages caller handles it natively::

    {"type": "error", "error": {"type": "authentication_error", "message": "..."}}

Messages never carry credentials: callers building a message from provider
output pass it through :func:`redact` with the secrets they hold.
"""

from __future__ import annotations

import builtins
from collections.abc import Iterable
from typing import Any, ClassVar

__all__ = [
    "ExchangeStateError",
    "HTTPStatusError",
    "JarNotFoundError",
    "JavaNotFoundError",
    "ModelError",
    "NetworkError",
    "OverloadedError",
    "PairingError",
    "ProtocolError",
    "RateLimitedError",
    "SpecConfigError",
    "TLCConfigError",
    "TLCCrashError",
    "TLCError",
    "TLCTimeoutError",
    "TLSError",
    "TimeoutError",
    "TpxError",
    "UnauthorizedError",
    "UnsupportedError",
    "redact",
]

_REDACTED = "[REDACTED]"


def redact(text: str, secrets: Iterable[str | None]) -> str:
    """Return *text* with every non-empty secret replaced by ``[REDACTED]``."""
    for secret in secrets:
        if secret:
            text = text.replace(secret, _REDACTED)
    return text


class TpxError(Exception):
    """Base of every error tpx raises on purpose."""


class ModelError(TpxError):
    """An exchange with the model failed.

    ``code`` is the MODEL_* code, ``error_type`` the Messages API error type
    a Messages caller expects, ``status`` the HTTP status the failure maps to
    (the provider's own status where there was one).
    """

    code: ClassVar[str] = "MODEL_ERROR"
    default_error_type: ClassVar[str] = "api_error"
    default_status: ClassVar[int] = 500

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        error_type: str | None = None,
        provider: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status = self.default_status if status is None else status
        self.error_type = error_type or self.default_error_type
        self.provider = provider

    def body(self) -> dict[str, Any]:
        """The Messages-API error body for this failure."""
        return {
            "type": "error",
            "error": {"type": self.error_type, "message": f"{self.code}: {self.message}"},
        }

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(code={self.code!r}, status={self.status!r}, "
            f"message={self.message!r})"
        )


class UnauthorizedError(ModelError):
    code = "MODEL_UNAUTHORIZED"
    default_error_type = "authentication_error"
    default_status = 401


class RateLimitedError(ModelError):
    code = "MODEL_RATE_LIMITED"
    default_error_type = "rate_limit_error"
    default_status = 429


class OverloadedError(ModelError):
    code = "MODEL_OVERLOADED"
    default_error_type = "overloaded_error"
    default_status = 529


class HTTPStatusError(ModelError):
    code = "MODEL_HTTP"
    default_error_type = "api_error"
    default_status = 500


class TimeoutError(ModelError):  # noqa: A001 - deliberately scoped to tpx.errors
    code = "MODEL_TIMEOUT"
    default_error_type = "timeout_error"
    default_status = 504


class NetworkError(ModelError):
    code = "MODEL_NETWORK"
    default_error_type = "api_error"
    default_status = 502


class TLSError(ModelError):
    code = "MODEL_TLS"
    default_error_type = "api_error"
    default_status = 502


class ProtocolError(ModelError):
    code = "MODEL_PROTOCOL"
    default_error_type = "api_error"
    default_status = 502


class PairingError(ModelError):
    code = "MODEL_PAIRING"
    default_error_type = "invalid_request_error"
    default_status = 400


class UnsupportedError(ModelError):
    code = "MODEL_UNSUPPORTED"
    default_error_type = "invalid_request_error"
    default_status = 400


class ExchangeStateError(TpxError):
    """A step of the exchange state machine was taken when it is not enabled."""


class SpecConfigError(TpxError, ValueError):
    """A TLC model configuration (.cfg) that cannot be read."""


class TLCError(TpxError):
    """The TLC runner failed to produce a verdict."""


class JavaNotFoundError(TLCError):
    """No usable Java runtime."""


class JarNotFoundError(TLCError):
    """No tla2tools.jar could be found."""


class TLCConfigError(TLCError):
    """TLC rejected the spec or its configuration."""


class TLCCrashError(TLCError):
    """TLC terminated abnormally."""


class TLCTimeoutError(TLCError, builtins.TimeoutError):
    """TLC exceeded its time limit and was killed."""
