"""uvicorn's httptools protocol with a header read timeout (a slow client cannot hold a worker).

uvicorn times out idle keep-alive connections but not a client that is slow to send its
request line and headers. :class:`HeaderTimeoutProtocol` arms a timer when the connection is
made and when each request begins, disarms it once the headers are complete, and answers
``408`` and closes the connection when it fires. The body read timeout is the ASGI app's
(:mod:`tpx.gateway.asgi`).

It also writes a response in one piece: uvicorn writes the status line and headers as soon as
the app starts a response and the body as a second write, so a client waits for (and the
kernel carries) two segments per reply. :class:`CoalescingTransport` gathers the writes made
in one event-loop iteration and hands them to the socket as one write at the end of it (a
streamed event still goes out in the iteration it was written in).
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

__all__ = ["CoalescingTransport", "HeaderTimeoutProtocol"]

_BODY = (
    b'{"type":"error","error":{"type":"timeout_error",'
    b'"message":"Timed out reading the request headers"}}'
)
_408 = (
    b"HTTP/1.1 408 Request Timeout\r\ncontent-type: application/json\r\nconnection: close\r\n"
    b"content-length: " + str(len(_BODY)).encode() + b"\r\n\r\n" + _BODY
)


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
    """``header_timeout`` seconds (a class attribute, set by the server at start)."""

    header_timeout: float = 30.0
    _header_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: Any) -> None:
        coalescing: Any = CoalescingTransport(transport, self.loop)
        super().connection_made(coalescing)
        self._arm()

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._arm()

    def on_headers_complete(self) -> None:
        self._disarm()
        super().on_headers_complete()

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
