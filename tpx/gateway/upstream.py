"""The gateway's I/O: the upstream over httpx2 and the drivers that run a :class:`Turn`.

:class:`AsyncUpstream` holds the one pooled ``httpx2.AsyncClient`` of a process, adds the
credential (``x-api-key`` for ANTHROPIC, ``Authorization: Bearer`` for TPX; a
command-made token is refreshed before expiry and once on a 401, single-flight and with a
backoff: :meth:`tpx.gateway.settings.Credential.refresh_after`), bounds the number of
concurrent upstream requests and records the upstream latency. Reply bodies are read
undecoded and decoded by :mod:`tpx.gateway.inflate` (bounded: ``limits.max_upstream_body``
for a body read whole, ``limits.max_upstream_stream`` for a stream). :func:`run_turn` drives a
turn: it yields a whole :class:`~tpx.gateway.core.Response`, or SSE byte chunks
(``event: ping`` during upstream silences longer than the ping interval). The sync twin
(:class:`SyncUpstream`, :func:`run_turn_sync`) serves the in-process sync SDK client.

No httpx2 exception leaves here: failures become :class:`~tpx.errors.ModelError` (mapped
by :func:`tpx.transport._http.error_from_httpx`, redacted, raised outside the handler so nothing is
chained to the httpx2 exception, whose request headers hold the credential).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable, Generator, Iterator
from typing import Any, Generic, TypeVar

import httpx2

from tpx.errors import ModelError
from tpx.gateway.core import PING, Forward, Response, Turn, UpstreamCall
from tpx.gateway.h1 import H1Transport, fast_transport_allowed
from tpx.gateway.inflate import Decoder, raw_chunks, raw_chunks_sync, read_body, read_body_sync
from tpx.gateway.netio import install
from tpx.gateway.redaction import prepared
from tpx.gateway.settings import Settings
from tpx.transport._http import error_from_httpx
from tpx.transport.exchange import Provider

__all__ = [
    "AsyncUpstream",
    "SyncUpstream",
    "forward",
    "forward_sync",
    "run_turn",
    "run_turn_sync",
]


#: Sets of request headers :meth:`_Base._request` keeps normalized at most.
_PREPARED = 32
#: The owned client's own default headers: no compressed replies (tpx.gateway.inflate).
_DEFAULT_HEADERS = {"accept-encoding": "identity"}


class _Masked(str):
    """A header value in the keys of the kept header sets: compared and hashed as the
    text, shown as ``'[masked]'`` (a credential is among them)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "'[masked]'"


def _timeout(settings: Settings) -> httpx2.Timeout:
    limits = settings.limits
    return httpx2.Timeout(limits.read_timeout, connect=limits.connect_timeout)


_Client = TypeVar("_Client", bound=httpx2.Client | httpx2.AsyncClient)
_Transport = TypeVar("_Transport", bound=httpx2.BaseTransport | httpx2.AsyncBaseTransport)


class _Base(Generic[_Client, _Transport]):
    """What both upstreams share: the client (made here unless given: *transport* then
    replaces the network), the upstream requests, the credential, the retry policy."""

    def __init__(
        self,
        settings: Settings,
        *,
        client: _Client | None = None,
        transport: _Transport | None = None,
        observe: Any = None,
    ) -> None:
        self.settings = settings
        self._observe = observe
        self._urls: dict[str, httpx2.URL] = {}  # path -> parsed upstream URL
        self._prepared: dict[tuple[Any, ...], httpx2.Headers] = {}  # see _request
        self._timeouts = _timeout(settings).as_dict()
        self._owns = client is None
        self.client: _Client = self._new_client(transport) if client is None else client
        self._defaults = dict(self.client.headers)  # the owned client's default headers

    def _new_client(self, transport: _Transport | None) -> _Client:
        raise NotImplementedError

    def _request(self, call: UpstreamCall, headers: dict[str, str]) -> httpx2.Request:
        """The upstream request for *call*. With the client made here, built directly (the
        URL parsed once per path, the client's default headers copied once: ~0.1 ms less per
        request than ``build_request``); an injected client's ``build_request`` applies its
        own defaults."""
        if not self._owns:
            return self.client.build_request(
                call.method, self._url(call), headers=headers, content=call.body or None
            )
        url = self._urls.get(call.path)
        if url is None:
            url = httpx2.URL(self._url(call))
            if "?" not in call.path:  # a fixed set of paths (not a client's query strings)
                self._urls[call.path] = url
        if not call.body:
            return httpx2.Request(
                call.method,
                url,
                headers={**self._defaults, **headers},
                extensions={"timeout": self._timeouts},
            )
        # the headers httpx2 would make (Host first, the client's defaults, the call's,
        # Content-Length last), normalized once per set of headers: ~20 us less a request
        key = (url.netloc, *[(k, _Masked(v)) for k, v in headers.items()])
        prepared = self._prepared.get(key)
        if prepared is None:
            if len(self._prepared) >= _PREPARED:
                self._prepared.clear()  # e.g. tokens a command replaced
            merged = {**self._defaults, **headers}
            prepared = self._prepared[key] = httpx2.Headers(
                [("Host", url.netloc.decode("ascii")), *merged.items()]
            )
        request = httpx2.Request(
            call.method,
            url,
            headers=prepared,  # copied by the request
            stream=httpx2.ByteStream(call.body),
            extensions={"timeout": self._timeouts},
        )
        request.headers["Content-Length"] = str(len(call.body))
        request.read()  # as content= would have it (no copy: one bytes object)
        return request

    def _plan(self) -> Generator[bool, httpx2.Response | httpx2.HTTPError, None]:
        """The retry policy of ``open``, without I/O: yields whether the next attempt takes a
        fresh token and is sent that attempt's outcome (the response, or the httpx2 error);
        stops when the response is the one to use, raises the :class:`ModelError` when
        there is none.

        An attempt is sent again only once with a fresh token after a 401 when the token
        comes from a command (the upstream refused it: nothing was generated), unless the
        command's backoff holds the fresh token back (the 401 stands). A transport
        failure is never re-sent: once a byte of the request was written the upstream may
        be generating (and billing) the reply already. The one case where a request
        provably did not leave, a pooled connection the upstream closed meanwhile, is
        handled under the client: the transport does not write on it and takes another
        connection (:mod:`tpx.gateway.h1`; :func:`tpx.gateway.netio.peer_spoke` behind a
        proxy).
        """
        began = time.perf_counter()
        refresh = refreshed = False
        while True:
            outcome = yield refresh
            if isinstance(outcome, httpx2.HTTPError):
                raise self._map(outcome)  # not in a handler: nothing chained
            status = outcome.status_code
            if not refreshed and self._refreshable(status):
                refresh = refreshed = True
                continue
            credential = self.settings.credential
            if credential is not None and status != 401:
                credential.worked()
            if self._observe is not None:
                self._observe(time.perf_counter() - began)
            return

    @staticmethod
    def _decide(
        plan: Generator[bool, httpx2.Response | httpx2.HTTPError, None],
        outcome: httpx2.Response | httpx2.HTTPError,
    ) -> bool | None:
        """Hand *outcome* to *plan*: ``None`` when it is the response to use, else whether
        the next attempt takes a fresh token (the ModelError when there is none)."""
        try:
            return plan.send(outcome)
        except StopIteration:
            return None

    def _secrets(self) -> tuple[str, ...]:
        return prepared(self.settings.secret_values()).forms

    def _fresh_token(self, refused: str) -> str | None:
        """THE one place a fresh upstream token is obtained (after the upstream refused
        *refused* with a 401): the token command's run, single-flight and backed off
        (:meth:`~tpx.gateway.settings.Credential.refresh_after`; ``None``: held back, the
        401 stands). A request's scrubber must hold the token that request carries: today
        it does through :meth:`~tpx.gateway.settings.Settings.secret_values`, which reads
        the credential's current value whenever an error is mapped (:meth:`_secrets`); a
        per-request scrubber registers the token returned here. Blocks: run it in a
        thread from the event loop."""
        credential = self.settings.credential
        assert credential is not None
        return credential.refresh_after(refused)

    def _token(self) -> str | None:
        """The token of a first attempt (the command re-run when it expired: blocks then,
        see ``Credential.stale``)."""
        credential = self.settings.credential
        return None if credential is None else credential.value()

    def _headers(self, call: UpstreamCall, token: str | None = None) -> dict[str, str]:
        headers = dict(call.headers)
        if token is None:
            return headers
        if self.settings.provider is Provider.ANTHROPIC:
            headers["x-api-key"] = token
        else:
            headers["authorization"] = f"Bearer {token}"
        return headers

    def _url(self, call: UpstreamCall) -> str:
        assert self.settings.base_url is not None
        return self.settings.base_url + call.path

    def body_decoder(self, response: httpx2.Response) -> Decoder:
        """The decoder of a streamed reply (``limits.max_upstream_stream``)."""
        limit = self.settings.limits.max_upstream_stream
        return Decoder.of(response, limit, self._provider, "limits.max_upstream_stream")

    @property
    def _provider(self) -> str:
        return self.settings.provider.name

    def _map(self, exc: httpx2.HTTPError) -> ModelError:
        return error_from_httpx(exc, provider=self.settings.provider.name, secrets=self._secrets())

    def _refreshable(self, status: int) -> bool:
        credential = self.settings.credential
        return status == 401 and credential is not None and credential.refreshable


class AsyncUpstream(_Base[httpx2.AsyncClient, httpx2.AsyncBaseTransport]):
    """The upstream for one process: a pooled ``httpx2.AsyncClient`` (made here unless given)."""

    #: what carries the owned client's requests: ``h1`` (tpx.gateway.h1, the default),
    #: ``httpcore+asyncio`` (httpx2's transport on tpx.gateway.netio's backend, when a proxy
    #: is configured), ``httpcore`` (its default backend), ``injected`` (a given transport)
    io = "injected"
    _slots: asyncio.Semaphore | None = None

    def _new_client(self, transport: httpx2.AsyncBaseTransport | None) -> httpx2.AsyncClient:
        limit = self.settings.limits.max_upstream
        limits = httpx2.Limits(
            max_connections=limit,
            max_keepalive_connections=limit,
            keepalive_expiry=self.settings.limits.keepalive_expiry,
        )
        if transport is None:
            if fast_transport_allowed():
                transport = H1Transport(limits=limits)
                self.io = "h1"
            else:  # a proxy is configured: httpx2's own transport speaks to it
                own = httpx2.AsyncHTTPTransport(limits=limits)
                self.io = "httpcore+asyncio" if install(own) else "httpcore"
                transport = own
        return httpx2.AsyncClient(
            transport=transport,
            timeout=_timeout(self.settings),
            limits=limits,
            headers=_DEFAULT_HEADERS,
        )

    @property
    def slots(self) -> asyncio.Semaphore:
        if self._slots is None:
            self._slots = asyncio.Semaphore(self.settings.limits.max_upstream)
        return self._slots

    async def open(self, call: UpstreamCall) -> httpx2.Response:
        """Send *call*; the response with its body unread (read it with :meth:`read`, or
        through :meth:`body_decoder`). Raises a ModelError (the retry policy:
        :meth:`_Base._plan`). A token command runs in a thread."""
        plan = self._plan()
        next(plan)
        credential = self.settings.credential
        if credential is not None and credential.stale():
            token = await asyncio.to_thread(self._token)
        else:
            token = self._token()
        while True:
            outcome = await self._attempt(self._request(call, self._headers(call, token)))
            if self._decide(plan, outcome) is None:
                return outcome  # type: ignore[return-value]  # _decide: a response
            # a 401 refusing a command-made token: the next attempt takes a fresh one
            assert isinstance(outcome, httpx2.Response)
            assert token is not None
            try:
                fresh = await asyncio.to_thread(self._fresh_token, token)
            except BaseException:
                await outcome.aclose()
                raise
            if fresh is None:  # the backoff holds the command off: the 401 stands
                plan.close()
                return outcome
            token = fresh
            await outcome.aclose()  # refused: the next attempt replaces it

    async def _attempt(self, request: httpx2.Request) -> httpx2.Response | httpx2.HTTPError:
        try:
            return await self.client.send(request, stream=True, follow_redirects=False)
        except httpx2.HTTPError as exc:
            return exc

    async def read(self, response: httpx2.Response) -> bytes:
        """*response*'s whole body, decoded, at most ``limits.max_upstream_body`` bytes.
        Raises a ModelError (a ProtocolError past the limit)."""
        failure: httpx2.HTTPError | None = None
        try:
            return await read_body(
                response,
                self.settings.limits.max_upstream_body,
                self._provider,
                "limits.max_upstream_body",
            )
        except httpx2.HTTPError as exc:
            failure = exc
        raise self._map(failure)  # not in a handler: nothing chained

    async def aclose(self) -> None:
        if self._owns:
            await self.client.aclose()


class SyncUpstream(_Base[httpx2.Client, httpx2.BaseTransport]):
    """The upstream over a sync ``httpx2.Client`` (in-process sync SDK clients)."""

    def _new_client(self, transport: httpx2.BaseTransport | None) -> httpx2.Client:
        return httpx2.Client(
            transport=transport,
            timeout=_timeout(self.settings),
            limits=httpx2.Limits(keepalive_expiry=self.settings.limits.keepalive_expiry),
            headers=_DEFAULT_HEADERS,
        )

    def open(self, call: UpstreamCall) -> httpx2.Response:
        """:meth:`AsyncUpstream.open` over the sync client."""
        plan = self._plan()
        next(plan)
        token = self._token()
        while True:
            try:
                request = self._request(call, self._headers(call, token))
                outcome: httpx2.Response | httpx2.HTTPError = self.client.send(
                    request, stream=True, follow_redirects=False
                )
            except httpx2.HTTPError as exc:
                outcome = exc
            if self._decide(plan, outcome) is None:
                return outcome  # type: ignore[return-value]  # _decide: a response
            assert isinstance(outcome, httpx2.Response)
            assert token is not None
            try:
                fresh = self._fresh_token(token)
            except BaseException:
                outcome.close()
                raise
            if fresh is None:
                plan.close()
                return outcome
            token = fresh
            outcome.close()

    def read(self, response: httpx2.Response) -> bytes:
        """:meth:`AsyncUpstream.read` over the sync client."""
        failure: httpx2.HTTPError | None = None
        try:
            return read_body_sync(
                response,
                self.settings.limits.max_upstream_body,
                self._provider,
                "limits.max_upstream_body",
            )
        except httpx2.HTTPError as exc:
            failure = exc
        raise self._map(failure)

    def close(self) -> None:
        if self._owns:
            self.client.close()


# -- drivers -------------------------------------------------------------------------------


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
    turn: Turn, upstream: AsyncUpstream, *, ping_interval: float | None = None
) -> AsyncIterator[Response | bytes]:
    """Drive *turn*: yields one :class:`Response`, or SSE byte chunks (the first chunk
    means: send the SSE headers). ``ProviderReply`` and ``Deliver`` of a stream happen
    when the consumer asks for the chunk after the last one it took (``message_stop``).
    Cancel the consuming task or ``aclose()`` the iterator when the client left, then
    call :meth:`Turn.abandon`."""
    ping = ping_interval or upstream.settings.limits.ping_interval
    async with upstream.slots:
        # a streaming turn waits in a task of its own (pings while the upstream is silent);
        # a plain one needs no task
        opening: Any = upstream.open(turn.call)
        if turn.streaming:
            opening = asyncio.ensure_future(opening)
        try:
            if turn.streaming:
                while not await _wait(opening, ping):
                    turn.started = True
                    yield PING
            response = await opening
        except ModelError as error:
            if turn.started:
                yield turn.fail(error)
            else:
                yield _failed_before_reply(turn, error)
            return
        finally:
            if turn.streaming and not opening.done():
                opening.cancel()
        try:
            if not turn.streaming:
                body = await _body(turn, upstream, response)
                if isinstance(body, Response):
                    yield body
                else:
                    yield turn.reply(response.status_code, response.headers, body)
                return
            async for item in _stream(turn, upstream, response, ping):
                yield item
        finally:
            await response.aclose()


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
    turn: Turn, upstream: AsyncUpstream, response: httpx2.Response, ping: float
) -> AsyncIterator[Response | bytes]:
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
    """:func:`run_turn` over the sync upstream (no pings: the reader is in-process)."""
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
