"""The drivers: run a :class:`~tpx.gateway.core.Turn` (or a :class:`~tpx.gateway.core.Forward`)
on an upstream client of :mod:`tpx.gateway.upstream`.

:func:`run_turn` drives a turn: it yields a whole :class:`~tpx.gateway.core.Response`, or SSE
byte chunks (``event: ping`` during upstream silences longer than the ping interval). The
sync twin (:func:`run_turn_sync`) serves the in-process sync SDK client. :func:`forward` /
:func:`forward_sync` run an ANTHROPIC pass-through.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Iterator
from typing import Any

import httpx2

from tpx.errors import ModelError
from tpx.gateway.core import PING, Forward, Response, Turn
from tpx.gateway.inflate import Decoder, raw_chunks, raw_chunks_sync
from tpx.gateway.pool import UpstreamPool
from tpx.gateway.upstream import AsyncUpstream, SyncUpstream

__all__ = ["forward", "forward_sync", "run_turn", "run_turn_sync"]


def _failed_before_reply(turn: Turn, error: ModelError) -> Response:
    if turn.exchange.phase == "req":
        try:
            error = turn.exchange.fail(error)
        except ModelError as stop:  # tpx serve --monitor stopped the step
            error = stop
    return turn.error_response(error)


async def forward(fwd: Forward, upstream: AsyncUpstream) -> Response:
    """Run an ANTHROPIC pass-through (its body bounded like a turn's)."""
    try:
        response = await upstream.open(fwd.call)
        try:
            body = await upstream.read(response)
        finally:
            await response.aclose()
    except ModelError as error:
        return fwd.failed(error)
    return fwd.respond(response.status_code, response.headers, body)


def forward_sync(fwd: Forward, upstream: SyncUpstream) -> Response:
    try:
        response = upstream.open(fwd.call)
        try:
            body = upstream.read(response)
        finally:
            response.close()
    except ModelError as error:
        return fwd.failed(error)
    return fwd.respond(response.status_code, response.headers, body)


async def _wait(task: asyncio.Future[Any], timeout: float) -> bool:
    done, _ = await asyncio.wait({task}, timeout=timeout)
    return bool(done)


async def run_turn(
    turn: Turn, upstream: AsyncUpstream | UpstreamPool, *, ping_interval: float | None = None
) -> AsyncIterator[Response | bytes]:
    """Drive *turn*: yields one :class:`Response`, or SSE byte chunks (the first chunk
    means: send the SSE headers). ``ProviderReply`` and ``Deliver`` of a stream happen
    when the consumer asks for the chunk after the last one it took (``message_stop``).
    Cancel the consuming task or ``aclose()`` the iterator when the client left, then
    call :meth:`Turn.abandon`. With an :class:`~tpx.gateway.pool.UpstreamPool` the turn
    goes to its route's upstreams (failover before the first byte: tpx.gateway.dispatch)."""
    ping = ping_interval or upstream.settings.limits.ping_interval
    async with upstream.slots:
        # a streaming turn waits in a task of its own (pings while the upstream is silent);
        # a plain one needs no task
        opening: Any = _open(turn, upstream)
        if turn.streaming:
            opening = asyncio.ensure_future(opening)
        taken = False
        try:
            if turn.streaming:
                while not await _wait(opening, ping):
                    turn.started = True
                    yield PING
            response, client, name = await opening
            taken = True
        except ModelError as error:
            if turn.started:
                yield turn.fail(error)
            else:
                yield _failed_before_reply(turn, error)
            return
        finally:
            if turn.streaming and not taken:
                await _drop(opening, upstream)
        try:
            if not turn.streaming:
                body = await _body(turn, client, response)
                if isinstance(body, Response):
                    yield body
                else:
                    yield turn.reply(response.status_code, response.headers, body)
                return
            pool = upstream if isinstance(upstream, UpstreamPool) else None
            # closed here, before the response: its read-ahead task ends before the upstream
            # connection does, also when the client left while a chunk was being sent
            items = _stream(turn, client, response, ping, pool, name)
            try:
                async for item in items:
                    yield item
            finally:
                await items.aclose()
        finally:
            try:
                await response.aclose()
            finally:
                if name is not None:
                    assert isinstance(upstream, UpstreamPool)
                    upstream.release(name)


async def _drop(opening: asyncio.Future[Any], upstream: AsyncUpstream | UpstreamPool) -> None:
    """The client left while the upstream was being asked: stop asking, or close the response
    that came meanwhile (and end its attempt)."""
    if not opening.done():
        opening.cancel()
        return
    if opening.cancelled() or opening.exception() is not None:
        return
    response, _, name = opening.result()
    try:
        await response.aclose()
    finally:
        if name is not None:
            assert isinstance(upstream, UpstreamPool)
            upstream.release(name)


async def _open(
    turn: Turn, upstream: AsyncUpstream | UpstreamPool
) -> tuple[httpx2.Response, AsyncUpstream, str | None]:
    """The upstream response of *turn*, the client that has it and (a pool) its upstream."""
    if isinstance(upstream, UpstreamPool):
        return await upstream.open(turn)
    return await upstream.open(turn.call), upstream, None


async def _body(turn: Turn, upstream: AsyncUpstream, response: httpx2.Response) -> bytes | Response:
    """*response*'s body, or the turn's error response when it cannot be read (or is
    larger than ``limits.max_upstream_body``)."""
    failure: ModelError | None = None
    try:
        return await upstream.read(response)
    except ModelError as error:
        failure = error
    return _failed_before_reply(turn, failure)


async def _stream(
    turn: Turn,
    upstream: AsyncUpstream,
    response: httpx2.Response,
    ping: float,
    pool: UpstreamPool | None = None,
    name: str | None = None,
) -> AsyncGenerator[Response | bytes, None]:
    """The client's bytes of a streamed turn. With a *pool*, a stream that breaks is a
    failure of its upstream *name*, handed to the pool (:meth:`UpstreamPool.broken`: it
    cools down; a reply that began never moves to another upstream)."""
    body = b""
    if not 200 <= response.status_code < 300:
        read = await _body(turn, upstream, response)
        if isinstance(read, Response):
            yield read
            return
        body = read
    refused = turn.start(response.status_code, response.headers, body)
    if refused is not None:
        if turn.started:  # pings went out already: the error goes as an event
            yield b"event: error\ndata: " + refused.body + b"\n\n"
        else:
            yield refused
        return
    # one reader task per stream feeds a queue (a task and an asyncio.wait per chunk cost
    # ~30 us each); a chunk already there is taken without waiting
    queue: asyncio.Queue[bytes | Exception | None] = _Chunks(
        upstream.settings.limits.stream_buffer_bytes
    )
    reader = asyncio.ensure_future(_read(response, upstream.body_decoder, queue))
    try:
        while True:
            try:
                item = queue.get_nowait()
            except asyncio.QueueEmpty:
                try:
                    async with asyncio.timeout(ping):
                        item = await queue.get()
                except TimeoutError:  # the upstream is silent: keep the client's line alive
                    turn.started = True
                    yield PING
                    continue
            if pool and name and isinstance(item, httpx2.HTTPError):
                try:
                    pool.broken(turn, name)
                except ModelError as stop:  # tpx serve --monitor stopped the step
                    item = stop
            out, over = _step(turn, upstream, item)
            if out is not None:
                yield out
            if over:
                break
        if turn.complete:
            yield turn.finish()
            # the exchange is over once the client took its last byte: its log line, its
            # count and (--monitor) the end of its conversation come now, not after the
            # drain (the client may already be sending its next turn, which carries this
            # exchange's ids)
            turn.close()
            await _drain(queue)
    finally:
        if not reader.done():
            reader.cancel()
            with contextlib.suppress(BaseException):
                await reader


def _step(
    turn: Turn, upstream: AsyncUpstream | SyncUpstream, item: bytes | Exception | None
) -> tuple[bytes | Response | None, bool]:
    """One item of a streamed upstream body (``None``: it ended; an exception: reading it
    failed): what goes to the client (:meth:`Turn.out`) and whether the stream is over."""
    if item is None:
        data = turn.end()
    elif isinstance(item, httpx2.HTTPError):
        data = turn.fail(upstream._map(item))
    elif isinstance(item, ModelError):  # the decoder's (too large, undecodable)
        data = turn.fail(item)
    elif isinstance(item, Exception):
        raise item
    else:
        data = turn.feed(item)
    out = turn.out(data)
    over = item is None or isinstance(item, Exception) or turn.complete or turn.failed
    return out, over or isinstance(out, Response)


def _chunks_sync(
    response: httpx2.Response, upstream: SyncUpstream
) -> Iterator[bytes | Exception | None]:
    """:func:`_read` for the sync client."""
    try:
        decoder = upstream.body_decoder(response)
        for raw in raw_chunks_sync(response):
            piece = decoder.decode(raw)
            while piece:
                yield piece
                piece = decoder.more()
        tail = decoder.flush()
    except (httpx2.HTTPError, ModelError) as exc:
        yield exc
        return
    if tail:
        yield tail
    yield None


#: A chunk larger than this is queued in pieces of this size: each stage after the reader
#: (the queue, the translation, the client's write buffer) then holds a piece, not a whole
#: burst of the upstream (up to the connection's read buffer, 1 MiB).
_PIECE = 64 * 1024


class _Chunks(asyncio.Queue[bytes | Exception | None]):
    """The upstream chunks read ahead of the translation, bounded in BYTES: the reader waits
    while ``limit`` bytes are queued, and while it waits the upstream connection stops being
    read (its buffer fills and the socket is paused), so a client that does not read its
    stream holds about ``limit`` bytes here and one chunk in each stage, not a queue of them."""

    def __init__(self, limit: int) -> None:
        super().__init__()
        self._limit = limit
        self._bytes = 0

    def _put(self, item: bytes | Exception | None) -> None:
        super()._put(item)
        if isinstance(item, bytes):
            self._bytes += len(item)

    def _get(self) -> bytes | Exception | None:
        item = super()._get()
        if isinstance(item, bytes):
            self._bytes -= len(item)
        return item

    def full(self) -> bool:
        return self._bytes >= self._limit


async def _read(
    response: httpx2.Response,
    decoder_for: Callable[[httpx2.Response], Decoder],
    queue: asyncio.Queue[bytes | Exception | None],
) -> None:
    """Put every chunk of *response*'s body on *queue* (decoded by ``decoder_for(response)``,
    in bounded pieces), then ``None`` (or the exception)."""
    first = True
    try:
        decoder = decoder_for(response)
        async for raw in raw_chunks(response):
            chunk = decoder.decode(raw)
            while chunk:
                if first:  # the first event alone first: the client's first byte need not
                    first = False  # wait for the translation of everything that came with it
                    cut = chunk.find(b"\n\n") + 2
                    if 1 < cut < len(chunk):
                        await queue.put(chunk[:cut])
                        await asyncio.sleep(0)
                        chunk = chunk[cut:]
                if len(chunk) > _PIECE:  # a burst read at once (the client was slow): in pieces
                    starts = range(0, len(chunk), _PIECE)
                    for start in starts[:-1]:
                        await queue.put(chunk[start : start + _PIECE])
                        await asyncio.sleep(0)
                    chunk = chunk[starts[-1] :]
                await queue.put(chunk)
                # let the consumer translate and send this chunk before the next is read:
                # the chunks an upstream wrote at once are all buffered, and reading on
                # would hold the client's first byte back until the last of them is read
                # (~0.2 ms)
                await asyncio.sleep(0)
                chunk = decoder.more()
        tail = decoder.flush()
        if tail:
            await queue.put(tail)
    except Exception as exc:  # handed to the consumer, which maps or raises it
        await queue.put(exc)
        return
    await queue.put(None)


#: What :func:`_drain` reads at most after the terminal event, in bytes and seconds.
_DRAIN_BYTES = 64 * 1024
_DRAIN_SECONDS = 1.0


async def _drain(queue: asyncio.Queue[bytes | Exception | None]) -> None:
    """Read the rest of a stream whose terminal event came (``data: [DONE]`` and the chunked
    body's end are usually already on their way), so the connection goes back to the pool
    instead of being closed: the next request need not connect again (~0.3 ms on loopback,
    a TLS handshake over the network). Runs after the client got its last byte. Bounded:
    past :data:`_DRAIN_BYTES` or :data:`_DRAIN_SECONDS` the connection is simply closed."""
    size = 0
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(_DRAIN_SECONDS):
            while True:
                item = await queue.get()
                if not isinstance(item, bytes):
                    return
                size += len(item)
                if size > _DRAIN_BYTES:
                    return


def run_turn_sync(turn: Turn, upstream: SyncUpstream) -> Iterator[Response | bytes]:
    """:func:`run_turn` over the sync upstream (no pings: the reader is in-process), holding
    one of its slots (``limits.max_upstream``) until the turn's iterator is closed."""
    with upstream.slots:
        yield from _turn_sync(turn, upstream)


def _turn_sync(turn: Turn, upstream: SyncUpstream) -> Iterator[Response | bytes]:
    try:
        response = upstream.open(turn.call)
    except ModelError as error:
        yield _failed_before_reply(turn, error)
        return
    failure: ModelError | None = None
    try:
        ok = 200 <= response.status_code < 300
        if not turn.streaming or not ok:
            body = b""
            try:
                body = upstream.read(response)
            except ModelError as error:
                failure = error
            if failure is not None:
                yield _failed_before_reply(turn, failure)
            elif not turn.streaming:
                yield turn.reply(response.status_code, response.headers, body)
            else:
                refused = turn.start(response.status_code, response.headers, body)
                assert refused is not None
                yield refused
            return
        refused = turn.start(response.status_code, response.headers)
        if refused is not None:
            yield refused
            return
        for item in _chunks_sync(response, upstream):
            out, over = _step(turn, upstream, item)
            if out is not None:
                yield out
            if over:
                break
        if turn.complete:
            yield turn.finish()
    finally:
        response.close()
