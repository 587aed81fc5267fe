"""uvicorn's httptools protocol with bounded request heads (a client cannot hold a worker
or its memory before the gateway has even seen the request).

uvicorn times out idle keep-alive connections but not a client that is slow to send its
request line and headers, and it keeps every header a client sends. :class:`HeaderTimeoutProtocol`
arms a timer when the connection is made and when each request begins, disarms it once the
headers are complete, and answers ``408`` and closes the connection when it fires. It also
counts the bytes of a request head: past ``max_header_bytes`` (the request line and the
headers) it answers ``431`` and closes the connection, whether the head is still coming (the
bytes received so far are counted, so at most one socket read more than the bound is held) or
is complete (the request line and the headers as parsed are measured); the application never
sees such a request. The body's limits (size, deadline) are the ASGI app's
(:mod:`tpx.gateway.asgi`).

It also writes a response in one piece: uvicorn writes the status line and headers as soon as
the app starts a response and the body as a second write, so a client waits for (and the
kernel carries) two segments per reply. :class:`CoalescingTransport` gathers the writes made
in one event-loop iteration and hands them to the socket as one write at the end of it (a
streamed event still goes out in the iteration it was written in).
"""

from __future__ import annotations

import asyncio
from itertools import chain
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

__all__ = ["CoalescingTransport", "HeaderTimeoutProtocol"]

_BODY = (
    b'{"type":"error","error":{"type":"timeout_error",'
    b'"message":"Timed out reading the request headers"}}'
)


def _close_response(status: bytes, body: bytes) -> bytes:
    return (
        b"HTTP/1.1 " + status + b"\r\ncontent-type: application/json\r\nconnection: close\r\n"
        b"content-length: " + str(len(body)).encode() + b"\r\n\r\n" + body
    )


_408 = _close_response(b"408 Request Timeout", _BODY)


def _431(limit: int) -> bytes:
    body = (
        b'{"type":"error","error":{"type":"request_too_large",'
        b'"message":"Request headers exceed the maximum size of '
        + str(limit).encode()
        + b' bytes"}}'
    )
    return _close_response(b"431 Request Header Fields Too Large", body)


class CoalescingTransport:
    """A transport whose writes of one loop iteration reach the socket as one write."""

    __slots__ = ("_loop", "_pending", "_transport")

    def __init__(self, transport: Any, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._pending: list[bytes] = []

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if not data:
            return
        if not self._pending:
            self._loop.call_soon(self.flush)
        self._pending.append(bytes(data))

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        pending = self._pending
        if not pending:
            return
        self._pending = []
        if not self._transport.is_closing():
            self._transport.write(pending[0] if len(pending) == 1 else b"".join(pending))

    def get_write_buffer_size(self) -> int:
        return int(self._transport.get_write_buffer_size()) + sum(map(len, self._pending))

    def write_eof(self) -> None:
        self.flush()
        self._transport.write_eof()

    def close(self) -> None:
        self.flush()
        self._transport.close()

    def abort(self) -> None:
        self._pending = []
        self._transport.abort()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


class HeaderTimeoutProtocol(HttpToolsProtocol):
    """``header_timeout`` seconds and ``max_header_bytes`` (class attributes, set by the
    server at start)."""

    header_timeout: float = 30.0
    max_header_bytes: int = 64 * 1024
    _header_timer: asyncio.TimerHandle | None = None
    _in_head = True  # between a request's first byte (or the connection's) and its headers' end
    _head_bytes = 0  # bytes received while in a head
    _refused = False  # answered 431: nothing more of this connection is parsed

    def connection_made(self, transport: Any) -> None:
        coalescing: Any = CoalescingTransport(transport, self.loop)
        super().connection_made(coalescing)
        self._arm()

    def data_received(self, data: bytes) -> None:
        if self._refused:
            return
        if not self._in_head:
            super().data_received(data)
            return
        self._head_bytes += len(data)
        super().data_received(data)
        if self._in_head and self._head_bytes > self.max_header_bytes:
            self._refuse()

    def on_message_begin(self) -> None:
        if self._refused:
            return
        self._in_head = True
        super().on_message_begin()
        self._arm()

    def on_headers_complete(self) -> None:
        if self._refused:
            return
        self._disarm()
        self._in_head = False
        self._head_bytes = 0
        headers = self.headers
        size = len(self.url) + 4 * len(headers) + sum(map(len, chain.from_iterable(headers)))
        if size > self.max_header_bytes:
            self._refuse()
            return
        super().on_headers_complete()

    def on_body(self, body: bytes) -> None:
        if not self._refused:
            super().on_body(body)

    def on_message_complete(self) -> None:
        if not self._refused:
            super().on_message_complete()

    def _refuse(self) -> None:
        """431 and close: the head is too large (the app never sees the request)."""
        self._refused = True
        self._disarm()
        self.headers = []
        self.url = b""
        if not self.transport.is_closing():
            self.transport.write(_431(self.max_header_bytes))
            self.transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _arm(self) -> None:
        if self._header_timer is None:
            self._header_timer = self.loop.call_later(self.header_timeout, self._timed_out)

    def _disarm(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _timed_out(self) -> None:
        self._header_timer = None
        if not self.transport.is_closing():
            self.transport.write(_408)
            self.transport.close()
