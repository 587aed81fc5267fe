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
  the text, whole too.)
* A text only the credential's holder sees (a log line) goes through :func:`redact`,
  which also removes every 8-character run of a secret and a secret's start cut short.
  Its cost is linear in the text; the gateway cuts each log field first. A text of tpx's
  own making that a client may see (an HTTP client's error) is withheld whole when
  :func:`redact` would change it (:func:`tpx._http.scrubbed`).

See docs/threat-model.md for who sees what and how the rules are checked.
"""

from __future__ import annotations

import base64
import builtins
import collections
import datetime
import email.utils
import functools
import json
import math
import re
import urllib.parse
from collections.abc import Iterable, Mapping
from typing import Any, ClassVar

from tpx import _safe

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

_REDACTED = "[REDACTED]"
#: What stands in place of a provider's text that held a whole secret (see the module docstring).
WITHHELD = _REDACTED
#: Fewest characters of a secret's start that :func:`redact` removes before a cut marker.
_MIN_PARTIAL = 4
#: Fewest consecutive characters of a secret that :func:`redact` removes anywhere.
_MIN_FRAGMENT = 8
_CUT_MARKERS = ("\u2026", "...")
_STEP = 4
_PROBE = _MIN_FRAGMENT - _STEP + 1  # a _MIN_FRAGMENT run holds a _PROBE piece at a _STEP multiple


class _Starts:
    """An Aho-Corasick automaton over the forms (goto, fail, depth): the state it reaches
    on a text is the longest end of that text that begins a form, found in one pass."""

    __slots__ = ("_depth", "_fail", "_goto")

    def __init__(self, forms: tuple[str, ...]) -> None:
        goto: list[dict[str, int]] = [{}]
        depth = [0]
        for form in forms:
            state = 0
            for char in form:
                following = goto[state].get(char)
                if following is None:
                    goto.append({})
                    depth.append(depth[state] + 1)
                    following = goto[state][char] = len(goto) - 1
                state = following
        fail = [0] * len(goto)
        queue = collections.deque(goto[0].values())
        while queue:
            state = queue.popleft()
            for char, following in goto[state].items():
                queue.append(following)
                back = fail[state]
                while back and char not in goto[back]:
                    back = fail[back]
                target = goto[back].get(char, 0)
                fail[following] = target if target != following else 0
        self._goto, self._fail, self._depth = goto, fail, depth

    def depth(self, text: str) -> int:
        """The length of the longest end of *text* that begins a form."""
        goto, fail, state = self._goto, self._fail, 0
        for char in text:
            while state and char not in goto[state]:
                state = fail[state]
            state = goto[state].get(char, 0)
        return self._depth[state]

    def depths(self, text: str, ends: list[int]) -> list[int]:
        """:meth:`depth` of ``text[:end]`` for each of *ends* (ascending), in one pass."""
        goto, fail, depth, state = self._goto, self._fail, self._depth, 0
        out: list[int] = []
        position = 0
        for end in ends:
            for char in text[position:end]:
                while state and char not in goto[state]:
                    state = fail[state]
                state = goto[state].get(char, 0)
            position = end
            out.append(depth[state])
        return out


@functools.lru_cache(maxsize=16)
def _starts(forms: tuple[str, ...]) -> _Starts:
    return _Starts(forms)


class _Patterns:
    """What :func:`redact` looks for, derived once from a tuple of secret forms.

    Every test is a set lookup, so a text costs a constant per character however long the
    secrets are: ``probes`` (the 5-character pieces of the long forms) are looked up at
    every 4th position, and only around a hit are the 8-character ``windows`` looked up
    (an 8-character run starting at ``s`` holds the 5 characters at the first multiple of
    4 from ``s``); ``short`` forms are replaced whole; a cut marker is checked against
    ``tails`` (the last 4 characters of every proper prefix of a form) before the
    automaton of the forms' starts (:class:`_Starts`) measures the start it ends.
    """

    __slots__ = ("forms", "longest", "probes", "short", "tails", "windows")

    def __init__(self, forms: tuple[str, ...]) -> None:
        self.forms = forms
        long = [f for f in forms if len(f) >= _MIN_FRAGMENT]
        self.windows = frozenset(
            f[i : i + _MIN_FRAGMENT] for f in long for i in range(len(f) - _MIN_FRAGMENT + 1)
        )
        self.probes = frozenset(w[i : i + _PROBE] for w in self.windows for i in range(_STEP))
        self.short = tuple(
            sorted({f for f in forms if len(f) < _MIN_FRAGMENT}, key=lambda f: (-len(f), f))
        )
        self.tails = frozenset(
            f[k - _MIN_PARTIAL : k] for f in forms for k in range(_MIN_PARTIAL, len(f))
        )
        self.longest = max((len(f) for f in forms), default=0)

    def may_change(self, text: str) -> bool:
        """False only when :meth:`apply` would return *text* unchanged."""
        for marker in _CUT_MARKERS:
            if marker in text:
                return True
        for form in self.short:
            if form in text:
                return True
        probes = self.probes
        return any(text[i : i + _PROBE] in probes for i in range(0, len(text) - _PROBE + 1, _STEP))

    def apply(self, text: str) -> str:
        text = self._fragments(text)
        for form in self.short:
            if form in text:
                text = text.replace(form, _REDACTED)
        for marker in _CUT_MARKERS:
            if marker in text:
                text = self._cuts(text, marker)
        return text

    def _fragments(self, text: str) -> str:
        probes, windows, size = self.probes, self.windows, len(text)
        hits = [q for q in range(0, size - _PROBE + 1, _STEP) if text[q : q + _PROBE] in probes]
        if not hits:
            return text
        spans: list[tuple[int, int]] = []
        for q in hits:
            for s in range(max(0, q - _STEP + 1), min(q, size - _MIN_FRAGMENT) + 1):
                if text[s : s + _MIN_FRAGMENT] in windows:
                    spans.append((s, s + _MIN_FRAGMENT))
        return _replaced(text, spans)

    def _cuts(self, text: str, marker: str) -> str:
        """A secret's start (at least :data:`_MIN_PARTIAL` characters) right before
        *marker*: the longest one, found by the automaton of the forms' starts."""
        tails = self.tails
        ends: list[int] = []
        position = text.find(marker)
        while position != -1:
            if text[position - _MIN_PARTIAL : position] in tails:
                ends.append(position)
            position = text.find(marker, position + len(marker))
        if not ends:
            return text
        starts = _starts(self.forms)
        spans: list[tuple[int, int]] = []
        if len(ends) * self.longest > len(text):  # dense: one pass over the whole text
            depths = starts.depths(text, ends)
        else:  # sparse: the window before each end (no start is longer than a form)
            depths = [starts.depth(text[max(0, end - self.longest) : end]) for end in ends]
        for end, depth in zip(ends, depths, strict=True):
            size = min(depth, self.longest - 1)
            if size >= _MIN_PARTIAL:
                spans.append((end - size, end))
        return _replaced(text, spans)


def _replaced(text: str, spans: list[tuple[int, int]]) -> str:
    """*text* with the union of *spans* (sorted by start) each replaced by ``[REDACTED]``."""
    if not spans:
        return text
    pieces: list[str] = []
    position = 0
    run_start, run_end = spans[0]
    for start, end in spans[1:]:
        if start <= run_end:
            run_end = max(run_end, end)
            continue
        pieces.append(text[position:run_start])
        pieces.append(_REDACTED)
        position = run_end
        run_start, run_end = start, end
    pieces.append(text[position:run_start])
    pieces.append(_REDACTED)
    pieces.append(text[run_end:])
    return "".join(pieces)


@functools.lru_cache(maxsize=64)
def _patterns(forms: tuple[str, ...]) -> _Patterns:
    return _Patterns(forms)


def redact(text: str, secrets: Iterable[str | None]) -> str:
    """Return *text* with every non-empty secret replaced by ``[REDACTED]``: for logs and
    errors the caller alone sees, never for a text a client's input may have reached.

    Every run of at least :data:`_MIN_FRAGMENT` characters of a secret goes, wherever it
    stands, and a secret cut short (its start, at least :data:`_MIN_PARTIAL` characters,
    right before a cut marker, ``\u2026`` or ``...``) too. Pass :func:`secret_forms` to
    catch escaped and encoded forms. The cost is linear in *text* (a few set lookups per
    4 characters). Which parts are replaced shows which parts match a secret: a text
    that may quote a client goes through :func:`withheld` instead.
    """
    present = tuple(s for s in secrets if s)
    if not present or not text:
        return text
    return _patterns(present).apply(text)


def holds_secret(text: str, forms: Iterable[str | None]) -> bool:
    """Whether a whole form of a secret stands in *text* (no fragments, no cuts)."""
    return any(form and form in text for form in forms)


def withheld(text: str, forms: Iterable[str | None]) -> str:
    """*text* whole, or :data:`WITHHELD` in its place when a whole secret form stands in it.

    For a provider's text a client will see (it may quote the client's own input): only a
    whole form counts, so the reply to a client depends on its input's match with a secret
    only when that input holds the whole secret (see the module docstring).
    """
    return WITHHELD if holds_secret(text, forms) else text


def _base64_forms(raw: bytes) -> set[str]:
    """Base64 (standard and URL-safe) of *raw* at each of the three alignments it may take
    inside a longer encoded text: only the characters that depend on *raw* alone."""
    forms: set[str] = set()
    for offset in range(3):
        padded = b"\0" * offset + raw
        first = -(-8 * offset // 6)  # characters touched by the padding bytes
        last = (len(padded) * 8) // 6  # characters made of whole bits of *raw*
        for encode in (base64.b64encode, base64.urlsafe_b64encode):
            forms.add(encode(padded).decode("ascii")[first:last])
    return forms


def secret_forms(secrets: Iterable[str | None]) -> tuple[str, ...]:
    """Every non-empty secret plus the escaped and encoded forms it takes in a text.

    Exact-string redaction misses a secret shown through ``repr`` of a str (with either
    quote escaped, ``\\'``) or of its bytes (``b'Bearer tok\\nX'``, ``\\xc3\\xa9``),
    ``unicode_escape``, JSON (``\\u00e9``), every character ``\\u``-escaped, base64 (any
    alignment, both alphabets) or URL-encoding; pass the result to :func:`redact` instead
    of the bare secrets. Longest first, so a form is never half-replaced by a shorter one.
    """
    forms: set[str] = set()
    for secret in secrets:
        if not secret:
            continue
        forms.add(secret)
        escaped = secret.encode("unicode_escape").decode("ascii")
        forms.add(escaped)
        forms.add(repr(secret)[1:-1])
        forms.add(escaped.replace("'", "\\'"))
        forms.add(escaped.replace('"', '\\"'))
        forms.add(json.dumps(secret)[1:-1])
        forms.add(json.dumps(secret, ensure_ascii=False)[1:-1])
        for digits in ("04x", "04X"):
            forms.add("".join(f"\\u{ord(c):{digits}}" for c in secret if ord(c) < 0x10000))
        for encoding in ("utf-8", "latin-1"):
            forms.add(repr(secret.encode(encoding, "backslashreplace"))[2:-1])
        raw = secret.encode("utf-8", "surrogatepass")
        forms.update(_base64_forms(raw))
        for quoted in (urllib.parse.quote(secret, safe=""), urllib.parse.quote_plus(secret)):
            forms.add(quoted)
            forms.add(re.sub("%[0-9A-F]{2}", lambda m: m.group().lower(), quoted))
    forms.update([json.dumps(form)[1:-1] for form in forms])  # each form inside JSON text
    return tuple(sorted((f for f in forms if len(f) >= _MIN_PARTIAL), key=lambda f: (-len(f), f)))


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
