"""httpx2 exceptions -> :class:`~tpx.errors.ModelError` (the only httpx2-aware error code)."""

from __future__ import annotations

import ssl
from collections.abc import Iterable

import httpx2

from tpx.errors import (
    WITHHELD,
    ModelError,
    NetworkError,
    ProtocolError,
    TimeoutError,
    TLSError,
    redact,
)

__all__ = ["error_from_httpx", "scrubbed", "ssl_cause"]

_TIMEOUT_KIND: dict[type[httpx2.TimeoutException], str] = {
    httpx2.ConnectTimeout: "connect",
    httpx2.ReadTimeout: "read",
    httpx2.WriteTimeout: "write",
    httpx2.PoolTimeout: "pool",
}


def ssl_cause(exc: BaseException) -> ssl.SSLError | None:
    """The first :class:`ssl.SSLError` in *exc*'s cause/context chain, if any."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, ssl.SSLError):
            return current
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return None


def scrubbed(text: str, secrets: Iterable[str | None]) -> str:
    """*text* (of an exception raised on this side of the wire) whole, or :data:`WITHHELD`
    when :func:`tpx.errors.redact` would change anything: never partly redacted, so the
    text shows no part of a secret nor which part of it matched."""
    return WITHHELD if redact(text, secrets) != text else text


def error_from_httpx(
    exc: httpx2.HTTPError, *, provider: str, secrets: Iterable[str | None] = ()
) -> ModelError:
    """Map an httpx2 failure to the ModelError the exchange fails with.

    ``TimeoutException`` -> :class:`TimeoutError`; an :class:`ssl.SSLError` anywhere in
    the cause chain -> :class:`TLSError`; ``DecodingError`` (undecodable body) ->
    :class:`ProtocolError`; every other transport failure (connect, read, write,
    remote protocol, proxy, ...) -> :class:`NetworkError`. Messages keep *exc*'s class
    name and their text, withheld whole when it holds any part of a secret (pass
    :func:`tpx.errors.secret_forms` of the credentials). The result is not chained to
    *exc*: raise it outside the ``except`` block that caught *exc* (its message and
    ``.request.headers`` may hold the credential).
    """
    secrets = tuple(secrets)
    name = type(exc).__name__
    detail = scrubbed(str(exc) or name, secrets)
    if isinstance(exc, httpx2.TimeoutException):
        kind = _TIMEOUT_KIND.get(type(exc), "request")
        return TimeoutError(f"{provider}: {kind} timeout ({name}): {detail}", provider=provider)
    tls = ssl_cause(exc)
    if tls is not None:
        reason = scrubbed(str(getattr(tls, "reason", None) or tls), secrets)
        return TLSError(f"{provider}: TLS failure ({name}): {reason}", provider=provider)
    if isinstance(exc, httpx2.DecodingError):
        return ProtocolError(
            f"{provider}: undecodable response body ({name}): {detail}", provider=provider
        )
    return NetworkError(f"{provider}: {name}: {detail}", provider=provider)
