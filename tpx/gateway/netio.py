"""The upstream's sockets: an httpcore2 network backend on plain asyncio (uvloop) transports.

httpx2's transport talks to the network through httpcore2, whose default backend on asyncio
is anyio's: a cancel scope and a deadline per read and write, a task group per connect. And
h11 writes a request's head and body as two writes, so the upstream wakes up twice per
request. Per request on loopback, measured with ``benchmarks.gateway_latency``'s 75 KB body:
anyio adds ~0.15 ms of CPU and the second wake-up ~0.1 ms of latency.

:class:`AsyncioBackend` is the same contract (:class:`httpcore2.AsyncNetworkBackend`) on an
:class:`asyncio.Protocol`: reads wait on one future (its timeout a loop timer), and the
writes of a request are held until the connection is next read, then go out as one write
(an HTTP/1.1 client reads after every request; a held request larger than
:data:`HOLD_BYTES` goes out at once). TLS is asyncio's own (``loop.start_tls``). Errors are
httpcore2's (``ConnectError``, ``ReadTimeout``, ...), which httpx2 maps to its own.

:func:`install` puts it under an ``httpx2.AsyncHTTPTransport`` (whose constructor does not
take a backend: the pool's ``_network_backend`` is set, the one private name used; without it
the transport keeps httpcore2's default backend and works as before).
"""

from __future__ import annotations

import asyncio
import select
import ssl
from collections.abc import Iterable
from typing import Any

import httpcore2
import httpx2

__all__ = ["HOLD_BYTES", "AsyncioBackend", "FlowControl", "PeerWatch", "install", "peer_spoke"]

#: A request held for one write is sent at once past this size.
HOLD_BYTES = 1 << 20
#: Reading pauses while this much arrived unread (a fast upstream, a slow client).
_READ_HIGH = 4 << 20


def peer_spoke(transport: Any) -> bool:
    """Whether an idle connection's socket has something to read right now (the peer closed
    it, or sent bytes no request asked for): asked of a pooled connection before a request is
    written on it, as the event loop may not have run since the peer's FIN arrived. One
    ``poll`` system call (~1 us); ``False`` when the socket cannot be asked."""
    return PeerWatch(transport).spoke()


class PeerWatch:
    """:func:`peer_spoke` for one connection, asked each time it is taken from a pool: its
    ``poll`` object is made (and the socket registered) once. Only for an open transport:
    its socket's descriptor is not reused while the transport is open."""

    __slots__ = ("_poller",)

    def __init__(self, transport: Any) -> None:
        sock = transport.get_extra_info("socket")
        fileno = -1 if sock is None else sock.fileno()
        self._poller: Any = None
        if fileno >= 0:
            self._poller = select.poll()
            self._poller.register(fileno, select.POLLIN | select.POLLPRI)

    def spoke(self) -> bool:
        """Whether the socket has something to read now (``False``: it cannot be asked)."""
        poller = self._poller
        if poller is None:
            return False
        try:
            return bool(poller.poll(0))
        except OSError:
            return True


class FlowControl(asyncio.Protocol):
    """What a client protocol on an asyncio transport needs to wait for: the next read event
    (:meth:`wait`, woken by :meth:`_wake`) and the write buffer draining (:meth:`drain`,
    after ``pause_writing``); each wait's timeout is one loop timer. Shared by this backend's
    protocol and :mod:`tpx.gateway.h1`'s connections."""

    __slots__ = ("_drained", "_paused", "_waiter")

    def __init__(self) -> None:
        self._waiter: asyncio.Future[None] | None = None
        self._drained: asyncio.Future[None] | None = None
        self._paused = False  # writing

    def pause_writing(self) -> None:
        self._paused = True

    def resume_writing(self) -> None:
        self._paused = False
        drained, self._drained = self._drained, None
        if drained is not None and not drained.done():
            drained.set_result(None)

    def _wake(self) -> None:
        waiter, self._waiter = self._waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def wait(self, timeout: float | None) -> None:
        """Until the next read event (data, EOF, an error): ``TimeoutError`` after *timeout*."""
        loop = asyncio.get_running_loop()
        waiter = self._waiter = loop.create_future()
        timer = None if timeout is None else loop.call_later(timeout, _expire, waiter)
        try:
            await waiter
        finally:
            if timer is not None:
                timer.cancel()
            if self._waiter is waiter:
                self._waiter = None

    async def drain(self, timeout: float | None) -> None:
        """Until the transport's write buffer is below its high-water mark."""
        if not self._paused:
            return
        loop = asyncio.get_running_loop()
        drained = self._drained = loop.create_future()
        timer = None if timeout is None else loop.call_later(timeout, _expire, drained)
        try:
            await drained
        finally:
            if timer is not None:
                timer.cancel()


class _Protocol(FlowControl):
    __slots__ = (
        "_data",
        "_eof",
        "_error",
        "_reading_paused",
        "transport",
    )

    def __init__(self) -> None:
        super().__init__()
        self._data = bytearray()
        self._eof = False
        self._error: BaseException | None = None
        self._reading_paused = False
        self.transport: Any = None

    # -- asyncio callbacks
    def connection_made(self, transport: Any) -> None:  # uvloop's is no asyncio.Transport
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self._data += data
        if len(self._data) > _READ_HIGH and self.transport is not None:
            self._reading_paused = True
            self.transport.pause_reading()
        self._wake()

    def eof_received(self) -> bool | None:
        self._eof = True
        self._wake()
        return None  # the transport closes itself

    def connection_lost(self, exc: Exception | None) -> None:
        self._eof = True
        self._error = exc
        self._wake()
        self.resume_writing()

    # -- for the stream
    @property
    def readable(self) -> bool:
        return bool(self._data) or self._eof

    def take(self, max_bytes: int) -> bytes:
        data = self._data
        if len(data) <= max_bytes:
            chunk = bytes(data)
            data.clear()
        else:
            chunk = bytes(data[:max_bytes])
            del data[:max_bytes]
        if self._reading_paused and len(data) <= _READ_HIGH // 2 and self.transport is not None:
            self._reading_paused = False
            self.transport.resume_reading()
        return chunk


def _expire(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_exception(TimeoutError())


class _Stream(httpcore2.AsyncNetworkStream):
    __slots__ = ("_held", "_held_size", "_protocol", "_timeout", "_transport")

    def __init__(self, transport: Any, protocol: _Protocol) -> None:
        self._transport = transport
        self._protocol = protocol
        self._held: list[bytes] = []
        self._held_size = 0
        self._timeout: float | None = None

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        if self._held:
            await self._flush()
        protocol = self._protocol
        if not protocol.readable:
            try:
                await protocol.wait(timeout)
            except TimeoutError:
                raise httpcore2.ReadTimeout("timed out reading the upstream") from None
        if protocol._data:
            return protocol.take(max_bytes)
        if protocol._error is not None:
            raise httpcore2.ReadError(f"upstream connection lost: {protocol._error}")
        return b""  # EOF

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        if not buffer:
            return
        self._held.append(bytes(buffer))
        self._held_size += len(buffer)
        self._timeout = timeout
        if self._held_size > HOLD_BYTES:
            await self._flush()

    async def _flush(self) -> None:
        held = self._held
        data = held[0] if len(held) == 1 else b"".join(held)
        self._held = []
        self._held_size = 0
        protocol = self._protocol
        if self._transport.is_closing() or protocol._error is not None:
            raise httpcore2.WriteError("the upstream connection is closed")
        self._transport.write(data)
        try:
            await protocol.drain(self._timeout)
        except TimeoutError:
            raise httpcore2.WriteTimeout("timed out writing to the upstream") from None

    async def aclose(self) -> None:
        self._held = []
        self._transport.close()

    async def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore2.AsyncNetworkStream:
        if self._held:
            await self._flush()
        loop = asyncio.get_running_loop()
        failure: str | None = None
        try:
            async with asyncio.timeout(timeout):
                transport = await loop.start_tls(
                    self._transport,
                    self._protocol,
                    ssl_context,
                    server_hostname=server_hostname,
                )
        except TimeoutError:
            self._transport.abort()
            raise httpcore2.ConnectTimeout("timed out in the TLS handshake") from None
        except (OSError, ssl.SSLError) as exc:
            failure = f"TLS handshake failed: {exc}"
        if failure is not None:
            self._transport.abort()
            raise httpcore2.ConnectError(failure)
        if transport is None:  # the connection closed during the handshake
            raise httpcore2.ConnectError("the upstream closed the connection in the TLS handshake")
        return _Stream(transport, self._protocol)

    def get_extra_info(self, info: str) -> Any:
        if info == "is_readable":  # an idle pooled connection the upstream closed
            return self._protocol.readable or peer_spoke(self._transport)
        if info == "client_addr":
            return self._transport.get_extra_info("sockname")
        if info == "server_addr":
            return self._transport.get_extra_info("peername")
        if info in ("ssl_object", "socket"):
            return self._transport.get_extra_info(info)
        return None


class AsyncioBackend(httpcore2.AsyncNetworkBackend):
    """httpcore2's network backend on asyncio transports (see the module docstring)."""

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore2.AsyncNetworkStream:
        loop = asyncio.get_running_loop()
        local = None if local_address is None else (local_address, 0)
        return await self._connect(
            loop.create_connection(_Protocol, host, port, local_addr=local),
            timeout,
            socket_options,
        )

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore2.AsyncNetworkStream:
        loop = asyncio.get_running_loop()
        return await self._connect(
            loop.create_unix_connection(_Protocol, path), timeout, socket_options
        )

    async def _connect(
        self, opening: Any, timeout: float | None, socket_options: Iterable[Any] | None
    ) -> _Stream:
        failure: str | None = None
        try:
            async with asyncio.timeout(timeout):
                transport, protocol = await opening
        except TimeoutError:
            raise httpcore2.ConnectTimeout("timed out connecting to the upstream") from None
        except OSError as exc:
            failure = f"cannot connect to the upstream: {exc}"
        if failure is not None:
            raise httpcore2.ConnectError(failure)
        sock = transport.get_extra_info("socket")
        for option in socket_options or ():
            sock.setsockopt(*option)
        return _Stream(transport, protocol)

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


def install(transport: httpx2.AsyncHTTPTransport) -> bool:
    """Run *transport*'s connections on :class:`AsyncioBackend` (``False``: httpx2 changed
    its insides; the transport keeps its default backend)."""
    pool = getattr(transport, "_pool", None)
    if not isinstance(pool, httpcore2.AsyncConnectionPool) or not hasattr(pool, "_network_backend"):
        return False
    pool._network_backend = AsyncioBackend()
    return True
