"""uvicorn's httptools protocol with a header read timeout (a slow client cannot hold a worker).

uvicorn times out idle keep-alive connections but not a client that is slow to send its
request line and headers. :class:`HeaderTimeoutProtocol` arms a timer when the connection is
made and when each request begins, disarms it once the headers are complete, and answers
``408`` and closes the connection when it fires. The body read timeout is the ASGI app's
(:mod:`tpx.gateway.asgi`).
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

__all__ = ["HeaderTimeoutProtocol"]

_BODY = (
    b'{"type":"error","error":{"type":"timeout_error",'
    b'"message":"Timed out reading the request headers"}}'
)
_408 = (
    b"HTTP/1.1 408 Request Timeout\r\ncontent-type: application/json\r\nconnection: close\r\n"
    b"content-length: " + str(len(_BODY)).encode() + b"\r\n\r\n" + _BODY
)


class HeaderTimeoutProtocol(HttpToolsProtocol):
    """``header_timeout`` seconds (a class attribute, set by the server at start)."""

    header_timeout: float = 30.0
    _header_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: Any) -> None:
        super().connection_made(transport)
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
