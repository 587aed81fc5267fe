"""An upstream reply's body as the gateway reads it: decoded in bounded pieces, size-capped.

The gateway asks its upstream for ``accept-encoding: identity`` (LLM replies are small or
streamed; compressing them buys nothing on the networks a gateway runs on), and reads the
body undecoded from httpx2 (``aiter_raw``): httpx2's own decoders inflate a whole received
chunk at once, and a few megabytes of gzip inflate to gigabytes. An upstream that compresses
anyway is decoded here, ``gzip`` / ``x-gzip`` / ``deflate`` (zlib or raw), never more than
:data:`PIECE` bytes of output per step; any other ``content-encoding`` is refused.

Every body has a ceiling on its decoded size (``limits.max_upstream_body`` for a body read
whole, ``limits.max_upstream_stream`` for a stream, which is translated as it arrives):
past it, or on a coding refused or corrupt, a :class:`~tpx.errors.ProtocolError` (a 502 to
the client, Messages-shaped) is raised and the connection is dropped by the caller's
``aclose``.
"""

from __future__ import annotations

import zlib
from collections.abc import AsyncIterator, Iterable, Mapping

import httpx2

from tpx.errors import ProtocolError

__all__ = ["PIECE", "Decoder", "raw_chunks", "raw_chunks_sync", "read_body", "read_body_sync"]

#: The most one decoding step returns (a compressed chunk's output is taken in such pieces).
PIECE = 256 * 1024

_GZIP = ("gzip", "x-gzip")


def _zlib_header(raw: bytes) -> bool:
    """*raw* starts with a zlib header (``deflate`` is zlib-wrapped or, from some servers, raw)."""
    return len(raw) >= 2 and raw[0] & 0x0F == 8 and (raw[0] << 8 | raw[1]) % 31 == 0


class Decoder:
    """One body's decoding: :meth:`decode` a received chunk, then :meth:`more` until it
    gives ``b""``; :meth:`flush` at the end. Raises :class:`ProtocolError` past *limit*
    decoded bytes, for a coding it does not decode, or for a corrupt compressed body."""

    __slots__ = ("_coding", "_first", "_inflate", "_limit", "_provider", "_size", "_what")

    @classmethod
    def of(cls, response: httpx2.Response, limit: int, provider: str, what: str) -> Decoder:
        """The decoder of *response*'s body (an in-memory response, made already read, was
        decoded by httpx2: only bounded here)."""
        headers: Mapping[str, str] = {} if response.is_stream_consumed else response.headers
        return cls(headers, limit, provider, what)

    def __init__(self, headers: Mapping[str, str], limit: int, provider: str, what: str) -> None:
        self._limit = limit
        self._provider = provider
        self._what = what  # the setting that holds the limit (named in the error)
        self._size = 0
        self._first = True
        coding = (headers.get("content-encoding") or "").strip().lower()
        self._coding = coding
        self._inflate: zlib._Decompress | None = None
        if coding in _GZIP:
            self._inflate = zlib.decompressobj(16 + zlib.MAX_WBITS)
        elif coding == "deflate":
            self._inflate = zlib.decompressobj()
        elif coding not in ("", "identity"):
            raise ProtocolError(
                f"{provider}: the upstream's reply has content-encoding {coding[:40]!r}, "
                "which the gateway does not decode (it asks for identity)",
                provider=provider,
            )

    def _count(self, data: bytes) -> bytes:
        self._size += len(data)
        if self._size > self._limit:
            raise _too_large(self._provider, self._limit, self._what)
        return data

    def decode(self, raw: bytes) -> bytes:
        """The first decoded piece of *raw* (``b""``: none yet)."""
        inflate = self._inflate
        if inflate is None:  # as received: only counted (what _count does, without a call)
            self._size += len(raw)
            if self._size > self._limit:
                raise _too_large(self._provider, self._limit, self._what)
            return raw
        if self._first and raw:
            self._first = False
            if self._coding == "deflate" and not _zlib_header(raw):
                inflate = self._inflate = zlib.decompressobj(-zlib.MAX_WBITS)  # raw deflate
        return self._step(inflate, raw)

    def more(self) -> bytes:
        """The next decoded piece of the chunk :meth:`decode` took (``b""``: it is done)."""
        inflate = self._inflate
        if inflate is None or not inflate.unconsumed_tail:
            return b""
        return self._step(inflate, inflate.unconsumed_tail)

    def flush(self) -> bytes:
        """What is left once the body ended."""
        inflate = self._inflate
        if inflate is None:
            return b""
        tail = b""
        while True:  # the input is consumed: only what zlib holds back (< one window) is left
            piece = self.more()
            if not piece:
                break
            tail += piece
        corrupt = False
        try:
            tail += inflate.flush()
        except zlib.error:
            corrupt = True
        if corrupt or not (inflate.eof or self._first):  # cut short: does not decode either
            raise self._corrupt()
        return self._count(tail)

    def _step(self, inflate: zlib._Decompress, data: bytes) -> bytes:
        corrupt = False
        try:
            out = inflate.decompress(data, PIECE)
        except zlib.error:
            corrupt = True
        if corrupt:
            raise self._corrupt()  # not in the handler: nothing chained
        return self._count(out)

    def _corrupt(self) -> ProtocolError:
        return ProtocolError(
            f"{self._provider}: the upstream's {self._coding} reply does not decode",
            provider=self._provider,
        )


def _too_large(provider: str, limit: int, what: str) -> ProtocolError:
    return ProtocolError(
        f"{provider}: the upstream's reply is larger than {limit} bytes ({what})",
        provider=provider,
    )


def _identity(response: httpx2.Response) -> bool:
    """*response*'s body comes undecoded and needs no decoding (no ``content-encoding``)."""
    if response.is_stream_consumed:
        return False  # an in-memory response: its content, through the decoder
    coding = response.headers.get("content-encoding")
    return coding is None or coding.strip().lower() in ("", "identity")


async def _one(data: bytes) -> AsyncIterator[bytes]:
    yield data


def raw_chunks(response: httpx2.Response) -> AsyncIterator[bytes]:
    """*response*'s body as received (undecoded): ``aiter_raw``, or the content of an
    in-memory response (one made already read, e.g. by an injected transport)."""
    return _one(response.content) if response.is_stream_consumed else response.aiter_raw()


def raw_chunks_sync(response: httpx2.Response) -> Iterable[bytes]:
    """:func:`raw_chunks` for the sync client."""
    return (response.content,) if response.is_stream_consumed else response.iter_raw()


async def read_body(response: httpx2.Response, limit: int, provider: str, what: str) -> bytes:
    """*response*'s whole body, decoded and at most *limit* bytes (see the module)."""
    parts: list[bytes] = []
    try:
        if _identity(response):  # as received: only counted
            size = 0
            async for raw in response.aiter_raw():
                size += len(raw)
                if size > limit:
                    raise _too_large(provider, limit, what)
                parts.append(raw)
        else:
            decoder = Decoder.of(response, limit, provider, what)
            async for raw in raw_chunks(response):
                piece = decoder.decode(raw)
                while piece:
                    parts.append(piece)
                    piece = decoder.more()
            parts.append(decoder.flush())
    except BaseException:
        parts.clear()  # the error's traceback keeps this frame (and the list) alive
        raise
    return parts[0] if len(parts) == 1 else b"".join(parts)


def read_body_sync(response: httpx2.Response, limit: int, provider: str, what: str) -> bytes:
    """:func:`read_body` for the sync client."""
    parts: list[bytes] = []
    try:
        if _identity(response):  # as received: only counted
            size = 0
            for raw in response.iter_raw():
                size += len(raw)
                if size > limit:
                    raise _too_large(provider, limit, what)
                parts.append(raw)
        else:
            decoder = Decoder.of(response, limit, provider, what)
            for raw in raw_chunks_sync(response):
                piece = decoder.decode(raw)
                while piece:
                    parts.append(piece)
                    piece = decoder.more()
            parts.append(decoder.flush())
    except BaseException:
        parts.clear()
        raise
    return parts[0] if len(parts) == 1 else b"".join(parts)
