"""The upstream's HTTP/1.1: an ``httpx2`` transport on asyncio protocols and ``httptools``.

The gateway talks to its upstream through one pooled ``httpx2.AsyncClient`` (redirect,
header, timeout and error handling: httpx2's; response decoding: tpx.gateway.inflate's,
bounded). Underneath, httpx2's
stock transport runs httpcore2 and h11, pure-Python HTTP/1.1 machinery that costs ~0.5 ms of
CPU per request on loopback: more than everything tpx itself does to a request
(``benchmarks/gateway_latency.py`` measures both side by side). :class:`H1Transport` is the
same contract (``httpx2.AsyncBaseTransport``) in one asyncio protocol per connection: the
response is parsed by ``httptools`` (llhttp, in C; the parser uvicorn serves with), the
request leaves in one write, reads wait on one future whose timeout is a loop timer.

What it does: ``http`` and ``https`` origins (TLS: asyncio's, with httpx2's
``create_ssl_context``), keep-alive connections pooled per origin (most recently used
first; one idle longer than ``keepalive_expiry``, closed by the server or with unasked-for
bytes to read is not reused),
at most ``max_connections`` at once (waiting for one counts against the ``pool`` timeout),
``connect`` / ``read`` / ``write`` / ``pool`` timeouts from the request, request bodies by
``content-length`` or chunked, responses by ``content-length``, chunked or to the end of the
connection, streamed as they arrive (reading pauses past 1 MiB unread). A connection goes
back to the pool only when its response was read to the end and the server keeps it alive.
A request is never sent twice: a pooled connection is asked, just before the request is
written on it, whether the server closed it meanwhile (the event loop may not have read the
FIN yet), and replaced by another when it did; any failure once a byte of the request was
written is the caller's, as the upstream may have received the request (docs/upstream.md).
What it does not: HTTP/2, proxies (the upstream runs on httpx2's stock transport when a
proxy is configured: :func:`fast_transport_allowed`), ``Expect: 100-continue``, upgrades.
Errors are httpx2's (``ConnectError``, ``ConnectTimeout``, ``ReadTimeout``,
``WriteTimeout``, ``PoolTimeout``, ``ReadError``, ``RemoteProtocolError``), raised with the
request attached, never chained to the socket's own exception.
"""

from __future__ import annotations

import asyncio
import collections
import os
import ssl
import time
from collections.abc import AsyncIterator
from typing import Any

import httptools
import httpx2

from tpx.gateway.netio import FlowControl, PeerWatch

__all__ = ["H1Transport", "fast_transport_allowed"]

#: Reading pauses while this much of a response arrived unread (a fast upstream, slow client).
_READ_HIGH = 1 << 20
#: A request body longer than this is written after its head, not joined to it (a copy).
_JOINED = 1 << 20
_PROXY_VARS = ("http_proxy", "https_proxy", "all_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY")


def fast_transport_allowed(env: Any = None) -> bool:
    """No proxy is configured in the environment (httpx2 honours ``*_PROXY``; this transport
    does not speak to proxies, so the stock transport must carry the upstream then)."""
    environ = os.environ if env is None else env
    return not any(environ.get(name) for name in _PROXY_VARS)


class _Connection(FlowControl):
    """One connection: its socket, its parser, the response being read."""

    def __init__(self, origin: tuple[bytes, str, int]) -> None:
        super().__init__()
        self.origin = origin
        self.transport: Any = None
        self.parser = httptools.HttpResponseParser(self)
        self.closed = False
        self.error: BaseException | None = None
        self.idle_since = 0.0
        self._read_paused = False
        self._watch: PeerWatch | None = None  # made when first taken from the pool
        self._reset()

    def _reset(self) -> None:
        self.headers: list[tuple[bytes, bytes]] = []
        self.head_done = False
        self.complete = False
        self.chunks: collections.deque[bytes] = collections.deque()
        self.buffered = 0
        self.bad: str | None = None
        self.until_eof = False
        self.released = False
        self.keep_alive = False
        self.reason = b""

    # -- asyncio
    def connection_made(self, transport: Any) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self.bad = "the upstream upgraded the connection"
        except httptools.HttpParserError as exc:
            self.bad = f"the upstream's response is not HTTP/1.1 ({type(exc).__name__})"
        if self.bad is not None:
            self.closed = True
            self.transport.close()
        elif self.buffered > _READ_HIGH and not self._read_paused:
            self._read_paused = True
            self.transport.pause_reading()
        self._wake()

    def eof_received(self) -> bool | None:
        self._ended()
        return None

    def _ended(self) -> None:
        if self.head_done and not self.complete and self.until_eof:
            self.complete = True  # a body delimited by the end of the connection ends here
        self.closed = True
        self._wake()

    def connection_lost(self, exc: Exception | None) -> None:
        if exc is not None:
            self.error = exc
        else:
            self._ended()
        self.closed = True
        self._wake()
        self.resume_writing()

    # -- httptools
    def on_status(self, reason: bytes) -> None:
        self.reason = reason

    def on_header(self, name: bytes, value: bytes | None) -> None:
        self.headers.append((name, value or b""))

    def on_headers_complete(self) -> None:
        self.head_done = True
        framed = False
        for name, value in self.headers:
            lowered = name.lower()
            if lowered == b"content-length" or (
                lowered == b"transfer-encoding" and b"chunked" in value.lower()
            ):
                framed = True
        self.until_eof = not framed

    def on_body(self, body: bytes) -> None:
        self.chunks.append(body)
        self.buffered += len(body)

    def on_message_complete(self) -> None:
        self.complete = True
        # asked here: once the message is over the parser answers for the next one
        self.keep_alive = self.parser.should_keep_alive()

    # -- for the transport
    def take(self) -> bytes:
        chunks = self.chunks
        data = chunks.popleft() if len(chunks) == 1 else b"".join(chunks)
        chunks.clear()
        self.buffered = 0
        if self._read_paused:
            self._read_paused = False
            self.transport.resume_reading()
        return data

    def drop(self) -> None:
        """Forget what arrived of a response nobody reads further; reading resumes (a
        connection paused with its last bytes in would wait forever for the next response)."""
        self.chunks.clear()
        self.buffered = 0
        if self._read_paused:
            self._read_paused = False
            self.transport.resume_reading()

    def peer_spoke(self) -> bool:
        """:func:`tpx.gateway.netio.peer_spoke` of this (open) connection's socket."""
        watch = self._watch
        if watch is None:
            watch = self._watch = PeerWatch(self.transport)
        return watch.spoke()

    @property
    def reusable(self) -> bool:
        return (
            not self.closed
            and self.bad is None
            and not self.transport.is_closing()
            and self.keep_alive
        )

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()


class _Body(httpx2.AsyncByteStream):
    """A response body as it arrives; the connection goes back to the pool at its end."""

    def __init__(
        self, pool: H1Transport, conn: _Connection, request: httpx2.Request, timeout: float | None
    ) -> None:
        self._pool = pool
        self._conn: _Connection | None = conn
        self._request = request
        self._timeout = timeout

    async def __aiter__(self) -> AsyncIterator[bytes]:
        conn = self._conn
        while conn is not None:
            if conn.chunks:
                yield conn.take()
                continue
            if conn.complete:
                self._release()
                return
            if conn.bad is not None:
                self._fail()
                raise httpx2.RemoteProtocolError(conn.bad, request=self._request)
            if conn.closed:
                self._fail()
                raise httpx2.RemoteProtocolError(
                    "the upstream closed the connection before the response's end",
                    request=self._request,
                )
            try:
                await conn.wait(self._timeout)
            except TimeoutError:
                self._fail()
                raise httpx2.ReadTimeout(
                    "timed out reading the upstream's response", request=self._request
                ) from None

    def _release(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            self._pool._release(conn)

    def _fail(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()
            self._pool._release(conn)

    async def aclose(self) -> None:
        conn = self._conn
        if conn is not None:  # closed before its end: the connection cannot be reused
            if conn.complete:  # unless all of it arrived (the rest is simply dropped)
                conn.drop()
                self._release()
            else:
                self._fail()


class H1Transport(httpx2.AsyncBaseTransport):
    """``httpx2.AsyncHTTPTransport``'s role for HTTP/1.1 upstreams (see the module)."""

    def __init__(
        self,
        *,
        limits: httpx2.Limits | None = None,
        verify: ssl.SSLContext | str | bool = True,
    ) -> None:
        limits = limits or httpx2.Limits()
        self._max = limits.max_connections
        self._keep = limits.max_keepalive_connections
        self._expiry = limits.keepalive_expiry
        self._verify = verify
        self._ssl: ssl.SSLContext | None = None
        self._idle: dict[tuple[bytes, str, int], list[_Connection]] = {}
        self._open = 0
        self._waiters: collections.deque[asyncio.Future[None]] = collections.deque()
        self._closed = False

    # -- the pool
    def _ssl_context(self) -> ssl.SSLContext:
        if self._ssl is None:
            verify = self._verify
            self._ssl = (
                verify if isinstance(verify, ssl.SSLContext) else httpx2.create_ssl_context(verify)
            )
        return self._ssl

    def _take_idle(self, origin: tuple[bytes, str, int]) -> _Connection | None:
        idle = self._idle.get(origin)
        now = time.monotonic()
        while idle:
            conn = idle.pop()
            expired = self._expiry is not None and now - conn.idle_since > self._expiry
            if (
                conn.reusable
                and not expired
                and not conn.chunks
                and not conn.peer_spoke()  # a FIN the loop has not read yet
            ):
                conn._reset()
                return conn
            conn.released = True
            conn.close()
            self._open -= 1
        return None

    def _release(self, conn: _Connection) -> None:
        if conn.released:
            return
        conn.released = True
        if conn.reusable and conn.complete and not self._closed:
            idle = self._idle.setdefault(conn.origin, [])
            if self._keep is None or sum(map(len, self._idle.values())) < self._keep:
                conn.idle_since = time.monotonic()
                idle.append(conn)
                self._notify()
                return
        conn.close()
        self._open -= 1
        self._notify()

    def _notify(self) -> None:
        waiters = self._waiters
        while waiters:
            waiter = waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return

    async def _connection(
        self, origin: tuple[bytes, str, int], request: httpx2.Request, timeouts: dict[str, Any]
    ) -> _Connection:
        pool_timeout = timeouts.get("pool")
        deadline = None if pool_timeout is None else time.monotonic() + pool_timeout
        while True:
            conn = self._take_idle(origin)
            if conn is not None:
                return conn
            if self._max is None or self._open < self._max or self._evict():
                break
            left = None if deadline is None else deadline - time.monotonic()
            waiter = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            try:
                if left is not None and left <= 0:
                    raise TimeoutError
                async with asyncio.timeout(left):
                    await waiter
            except TimeoutError:
                raise httpx2.PoolTimeout(
                    "no upstream connection came free", request=request
                ) from None
            finally:
                if not waiter.done():
                    waiter.cancel()
        self._open += 1
        try:
            return await self._connect(origin, request, timeouts.get("connect"))
        except BaseException:
            self._open -= 1
            self._notify()
            raise

    def _evict(self) -> bool:
        """Close an idle connection to another origin to make room (``False``: none)."""
        for idle in self._idle.values():
            if idle:
                idle.pop(0).close()
                self._open -= 1
                return True
        return False

    async def _connect(
        self, origin: tuple[bytes, str, int], request: httpx2.Request, timeout: float | None
    ) -> _Connection:
        scheme, host, port = origin
        loop = asyncio.get_running_loop()
        tls = self._ssl_context() if scheme == b"https" else None
        conn = _Connection(origin)
        failure: str | None = None
        timed_out = False
        try:
            async with asyncio.timeout(timeout):
                await loop.create_connection(
                    lambda: conn,
                    host,
                    port,
                    ssl=tls,
                    server_hostname=host if tls is not None else None,
                )
        except TimeoutError:
            timed_out = True
        except (OSError, ssl.SSLError) as exc:
            failure = f"cannot connect to the upstream: {type(exc).__name__}: {exc}"
        if timed_out:
            raise httpx2.ConnectTimeout("timed out connecting to the upstream", request=request)
        if failure is not None:
            raise httpx2.ConnectError(failure, request=request)
        return conn

    # -- a request
    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        if self._closed:
            raise RuntimeError("the transport is closed")
        url = request.url
        scheme = url.raw_scheme
        if scheme not in (b"http", b"https"):
            raise httpx2.UnsupportedProtocol(
                f"the upstream URL's scheme must be http or https, not {url.scheme!r}",
                request=request,
            )
        port = url.port or (443 if scheme == b"https" else 80)
        origin = (scheme, url.host, port)
        timeouts: dict[str, Any] = request.extensions.get("timeout", {})
        head, body, chunked = await self._serialize(request)
        conn = await self._connection(origin, request, timeouts)
        try:
            await self._send(conn, request, head, body, chunked, timeouts.get("write"))
            return await self._response(conn, request, timeouts.get("read"))
        except BaseException:
            conn.close()
            self._release(conn)
            raise

    async def _serialize(self, request: httpx2.Request) -> tuple[bytes, Any, bool]:
        url = request.url
        lines = [request.method.encode("ascii"), b" ", url.raw_path, b" HTTP/1.1\r\n"]
        chunked = False
        for name, value in request.headers.raw:
            lines += (name, b": ", value, b"\r\n")
            if name.lower() == b"transfer-encoding" and b"chunked" in value.lower():
                chunked = True
        lines.append(b"\r\n")
        stream = request.stream
        body: Any
        if isinstance(stream, httpx2.ByteStream):
            body = b"".join([part async for part in stream])
        else:
            body = stream  # sent as it is produced
        return b"".join(lines), body, chunked

    async def _send(
        self,
        conn: _Connection,
        request: httpx2.Request,
        head: bytes,
        body: Any,
        chunked: bool,
        timeout: float | None,
    ) -> None:
        transport = conn.transport
        if isinstance(body, bytes):
            if chunked and body:
                body = b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body)
            elif chunked:
                body = b"0\r\n\r\n"
            if len(body) > _JOINED:
                transport.write(head)  # a large body is not copied to go after its head
                transport.write(body)
            else:
                transport.write(head + body)
        else:
            transport.write(head)
            async for part in body:
                if conn.closed:
                    break
                if part:
                    transport.write(b"%x\r\n%s\r\n" % (len(part), part) if chunked else part)
                await self._drained(conn, request, timeout)
            if chunked:
                transport.write(b"0\r\n\r\n")
        await self._drained(conn, request, timeout)

    @staticmethod
    async def _drained(conn: _Connection, request: httpx2.Request, timeout: float | None) -> None:
        try:
            await conn.drain(timeout)
        except TimeoutError:
            raise httpx2.WriteTimeout(
                "timed out writing the request to the upstream", request=request
            ) from None

    async def _response(
        self, conn: _Connection, request: httpx2.Request, timeout: float | None
    ) -> httpx2.Response:
        while not conn.head_done:
            if conn.bad is not None:
                raise httpx2.RemoteProtocolError(conn.bad, request=request)
            if conn.closed:
                kind = httpx2.ReadError if conn.error is not None else httpx2.RemoteProtocolError
                raise kind("the upstream closed the connection without a response", request=request)
            try:
                await conn.wait(timeout)
            except TimeoutError:
                raise httpx2.ReadTimeout(
                    "timed out waiting for the upstream's response", request=request
                ) from None
        status = conn.parser.get_status_code()
        if request.method == "HEAD" or status in (204, 304) or 100 <= status < 200:
            conn.complete = True  # no body follows (and a 1xx is not supported: not reused)
            if status < 200:
                conn.close()
        return httpx2.Response(
            status,
            headers=conn.headers,
            stream=_Body(self, conn, request, timeout),
            extensions={"http_version": b"HTTP/1.1", "reason_phrase": conn.reason},
            request=request,
        )

    async def aclose(self) -> None:
        self._closed = True
        for idle in self._idle.values():
            for conn in idle:
                conn.close()
        self._idle.clear()
        self._open = 0
