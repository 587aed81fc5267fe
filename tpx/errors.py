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
    │   ├── PairingError           MODEL_PAIRING       tool_results do not answer pending tool_uses
    │   └── UnsupportedError       MODEL_UNSUPPORTED   a request feature the provider cannot carry
    ├── ExchangeStateError         a step of the exchange machine taken out of order
    ├── ConfigurationError         the transport cannot boot as configured
    ├── SpecConfigError            a TLC cfg file the mirror cannot read
    └── TLCError                   the TLC runner failed (not: the spec was violated)
        ├── JavaNotFoundError      no usable ``java`` (missing or too old)
        ├── JarNotFoundError       no tla2tools.jar
        ├── TLCConfigError         TLC rejected the spec or cfg (parse / semantic error)
        ├── TLCCrashError          TLC exited abnormally
        ├── TLCTimeoutError        TLC ran past its timeout and was killed
        └── TLCCancelledError      the run was cancelled and the JVM killed

MODEL_* codes are data on the classes (``ModelError.code``) and every
:class:`ModelError` renders a Messages-API error body (:meth:`ModelError.body`)
so a Messages caller handles it natively::

    {"type": "error", "error": {"type": "authentication_error", "message": "..."}}

Messages never carry credentials, and never tell a client which part of its input
matches one. Two rules, by who reads the text:

* A provider's text a client may see (an error message, a pass-through body) is shown
  whole or withheld whole (:func:`withheld`, :data:`WITHHELD`), and only a whole form of
  a secret (:func:`secret_forms`) withholds it. Such a text may quote the client's input
  (a 404 naming the model it asked for, a 400 quoting its message): a guess that is not
  the whole secret comes back exactly as any other guess would. (A 401, refused before
  the request was read, quotes none of it: there a fragment of the credential withholds
  the text, whole too.) tpx's own refusal of a request that quotes it (a role, a tool id)
  follows the same rule.
* A text only the credential's holder sees (a log line) goes through :func:`redact`,
  which also removes every 8-character run of a secret and a secret's start cut short.
  Its cost is linear in the text; the gateway cuts each log field first. A text of tpx's
  own making that a client may see (an HTTP client's error) is withheld whole when
  :func:`redact` would change it (:func:`tpx.transport._http.scrubbed`).

See docs/threat-model.md for who sees what and how the rules are checked.
"""

from __future__ import annotations

import builtins
import datetime
import email.utils
import math
from collections.abc import Iterable, Mapping
from typing import Any, ClassVar

from tpx import _safe
from tpx._redact import (
    WITHHELD,
    holds_secret,
    redact,
    secret_forms,
    withheld,
)

__all__ = [
    "MESSAGES_ERROR_TYPES",
    "WITHHELD",
    "ConfigurationError",
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
    "TLCCancelledError",
    "TLCConfigError",
    "TLCCrashError",
    "TLCError",
    "TLCTimeoutError",
    "TLSError",
    "TimeoutError",
    "TpxError",
    "UnauthorizedError",
    "UnsupportedError",
    "detached",
    "error_for_status",
    "error_message_from_body",
    "holds_secret",
    "messages_error_type",
    "parse_retry_after",
    "redact",
    "secret_forms",
    "withheld",
]


def detached(error: BaseException) -> BaseException:
    """*error* without ``__cause__`` / ``__context__`` (they may hold unredacted text)."""
    error.__cause__ = None
    error.__context__ = None
    error.__suppress_context__ = True
    return error


class TpxError(Exception):
    """Base of every error tpx raises on purpose."""


class ModelError(TpxError):
    """An exchange with the model failed.

    ``code`` is the MODEL_* code, ``error_type`` the Messages API error type
    a Messages caller expects, ``status`` the HTTP status the failure maps to
    (the provider's own status where there was one), ``retry_after`` the
    provider's ``retry-after`` advice in seconds when it gave one.
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
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status = self.default_status if status is None else status
        self.error_type = messages_error_type(error_type or self.default_error_type, self.status)
        self.provider = provider
        self.retry_after = retry_after

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


class TimeoutError(ModelError):  # deliberately shadows the builtin inside tpx.errors
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


class TLCCancelledError(TLCError):
    """The TLC run was cancelled (its JVM was killed)."""


class TLCTimeoutError(TLCError, builtins.TimeoutError):
    """TLC exceeded its time limit and was killed."""


# --------------------------------------------------------------------------
# Additions: configuration errors and the HTTP-status -> ModelError mapping.
# Pure functions (no httpx2) so the sans-I/O exchange can use them.
# --------------------------------------------------------------------------

_MAX_PROVIDER_MESSAGE = 500

# Messages-API error types by HTTP status (wire-protocols notes).
_ERROR_TYPE_BY_STATUS: dict[int, str] = {
    400: "invalid_request_error",
    401: "authentication_error",
    402: "billing_error",
    403: "permission_error",
    404: "not_found_error",
    429: "rate_limit_error",
    500: "api_error",
    503: "overloaded_error",
    504: "timeout_error",
    529: "overloaded_error",
}
#: The error types of the Messages API (the official SDK's ``ErrorObject`` union).
MESSAGES_ERROR_TYPES = frozenset(
    {
        "invalid_request_error",
        "authentication_error",
        "billing_error",
        "permission_error",
        "not_found_error",
        "rate_limit_error",
        "timeout_error",
        "api_error",
        "overloaded_error",
    }
)
_MESSAGES_ERROR_TYPES = MESSAGES_ERROR_TYPES


def messages_error_type(error_type: object, status: int) -> str:
    """*error_type* if it is a Messages API error type, else the one *status* maps to
    (any other 4xx: ``invalid_request_error``; anything else: ``api_error``)."""
    if isinstance(error_type, str) and error_type in MESSAGES_ERROR_TYPES:
        return error_type
    if isinstance(status, int) and status in _ERROR_TYPE_BY_STATUS:
        return _ERROR_TYPE_BY_STATUS[status]
    if isinstance(status, int) and 400 <= status < 500:
        return "invalid_request_error"
    return "api_error"


class ConfigurationError(TpxError, ValueError):
    """The transport cannot be booted as configured (e.g. a token without a base URL)."""


def parse_retry_after(headers: Mapping[str, str]) -> float | None:
    """Seconds to wait from ``retry-after-ms`` / ``retry-after`` headers (delta or HTTP date).

    Header names are matched case-insensitively; unreadable values give ``None``.
    """
    lowered = {k.lower(): v for k, v in headers.items()}
    raw_ms = lowered.get("retry-after-ms")
    if raw_ms is not None:
        try:
            ms = float(raw_ms)
        except ValueError:
            ms = -1.0
        if ms >= 0 and math.isfinite(ms):
            return ms / 1000.0
    raw = lowered.get("retry-after")
    if raw is None:
        return None
    try:
        seconds = float(raw)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(raw)
        except (TypeError, ValueError, IndexError):
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=datetime.UTC)
        return max(0.0, (when - datetime.datetime.now(datetime.UTC)).total_seconds())
    if not math.isfinite(seconds) or seconds < 0:
        return None
    return seconds


def error_message_from_body(body: bytes | str) -> tuple[str | None, str | None]:
    """``(message, error_type)`` read from a provider error body of either API's shape.

    Anthropic: ``{"type": "error", "error": {"type", "message"}}``; OpenAI-style:
    ``{"error": {"message", "type", "code"}}`` (``error`` may also be a bare string).
    ``error_type`` is only returned when it is a Messages-API error type.
    """
    try:
        data = _safe.loads(body)
    except (ValueError, TypeError):  # not JSON, or nested deeper than the depth rule
        return None, None
    if not isinstance(data, dict):
        return None, None
    err = data.get("error")
    if isinstance(err, str):
        return err, None
    if not isinstance(err, dict):
        message = data.get("message")
        return (message if isinstance(message, str) else None), None
    message = err.get("message")
    err_type = err.get("type")
    return (
        message if isinstance(message, str) else None,
        err_type if isinstance(err_type, str) and err_type in _MESSAGES_ERROR_TYPES else None,
    )


def error_for_status(
    status: int,
    headers: Mapping[str, str],
    body: bytes | str,
    *,
    provider: str | None = None,
    secrets: Iterable[str | None] = (),
) -> ModelError:
    """The :class:`ModelError` for a non-2xx provider reply.

    401/403 -> :class:`UnauthorizedError`, 429 -> :class:`RateLimitedError` (with
    ``retry_after``), 529/503 -> :class:`OverloadedError` (with ``retry_after``), any
    other status -> :class:`HTTPStatusError` with the status kept. The provider's
    message is read from its error body (either API's shape) and shown whole, or withheld
    whole (:data:`WITHHELD`): when a whole form of *secrets* stands in it or, for a 401
    (the credential refused before the request was read, so the text quotes none of it),
    when :func:`redact` would change it. Never partly: an error body may quote the
    client's input, and what is replaced would show which part matched a secret.
    """
    secrets = tuple(secrets)
    message, err_type = error_message_from_body(body)
    if message is None:
        text = body.decode("utf-8", "replace") if isinstance(body, bytes) else body
        message = " ".join(text.split())
    if status == 401:  # refused before the request was read: the fragment rule, whole
        message = WITHHELD if redact(message, secrets) != message else message
    else:  # it may quote the request: only a whole secret counts (before the cut below)
        message = withheld(message, secrets)
    if len(message) > _MAX_PROVIDER_MESSAGE:
        message = message[:_MAX_PROVIDER_MESSAGE] + "..."
    who = provider or "provider"
    text = f"{who} returned HTTP {status}" + (f": {message}" if message else "")
    cls: type[ModelError]
    if status in (401, 403):
        cls = UnauthorizedError
        err_type = "permission_error" if status == 403 else "authentication_error"
    elif status == 429:
        cls = RateLimitedError
        err_type = "rate_limit_error"
    elif status in (503, 529):
        cls = OverloadedError
        err_type = "overloaded_error"
    else:
        cls = HTTPStatusError
        if err_type is None:
            err_type = _ERROR_TYPE_BY_STATUS.get(
                status, "invalid_request_error" if 400 <= status < 500 else "api_error"
            )
    return cls(
        text,
        status=status,
        error_type=err_type,
        provider=provider,
        retry_after=parse_retry_after(headers),
    )
