"""The ASGI shell around the sans-I/O :class:`~tpx.gateway.core.Gateway` (run by uvicorn).

Asks the core whether the request is refused before its body is read (route, method, key:
:meth:`~tpx.gateway.core.Gateway.preflight`), reads the body (size limit, one deadline for
all of it), hands the request to the core (off the event loop when the body is large:
:mod:`tpx.gateway.offload`), sends what comes back. A turn runs in the request's own task
while a second task watches for the client going away: then the turn is cancelled (the
upstream response is closed) and the exchange fails as the spec says (``ProviderFail``).
A call to the upstream's tokenizer endpoint first (``[context] tokenizer``) is watched the
same way: the client leaving cancels it, and the request ends with nothing sent upstream.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any, TypeVar

from tpx.gateway.context.asked import Asked, ask
from tpx.gateway.context.discover import start_discovery
from tpx.gateway.context.placement import Placement
from tpx.gateway.core import Forward, Gateway, Request, Response, Turn, error_body, new_request_id
from tpx.gateway.drive import forward, run_turn
from tpx.gateway.offload import Offload
from tpx.gateway.pool import UpstreamPool
from tpx.gateway.settings import Settings
from tpx.gateway.upstream import AsyncUpstream
from tpx.transport.exchange import Provider

__all__ = ["GatewayApp", "create_app"]

logger = logging.getLogger("tpx.gateway")

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
_T = TypeVar("_T")


class _BodyError(Exception):
    def __init__(self, status: int, error_type: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.error_type = error_type
        self.message = message


class GatewayApp:
    """A plain ASGI 3 application: ``GatewayApp(gateway, upstream)``."""

    def __init__(
        self, gateway: Gateway, upstream: AsyncUpstream | UpstreamPool, *, freeze: bool = False
    ) -> None:
        self.gateway = gateway
        self.upstream = upstream
        self.settings: Settings = gateway.settings
        self.offload = Offload(gateway)
        self._discovery: list[asyncio.Task[None]] = []  # context windows (TPX)
        #: ``gc.freeze()`` once started (``tpx serve``, a process of its own): see _lifespan
        self.freeze = freeze

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind == "lifespan":
            await self._lifespan(receive, send)
            return
        if kind != "http":
            return
        headers: dict[str, str] = {}
        for raw_name, raw_value in scope.get("headers", ()):
            headers[raw_name.decode("latin-1").lower()] = raw_value.decode("latin-1")
        method: str = scope["method"]
        # the route, the method and the key first: a refused request's body is never read
        # (nor asked for with 100 Continue)
        refused = self.gateway.preflight(method, scope["path"], headers)
        if refused is not None:
            if method not in ("GET", "HEAD"):  # its body (if any) is not read
                refused = Response(
                    refused.status, (*refused.headers, ("connection", "close")), refused.body
                )
            await _send(send, refused, head=method == "HEAD")
            return
        body = b""
        if method.upper() == "POST":  # the only routes that take a body
            try:
                body = await self._body(scope, receive)
            except _BodyError as problem:
                request_id = new_request_id()
                data = error_body(problem.error_type, problem.message, request_id)
                await _send(
                    send,
                    Response(
                        problem.status,
                        (
                            ("content-type", "application/json"),
                            ("request-id", request_id),
                            ("connection", "close"),  # the rest of the body is not read
                        ),
                        data,
                    ),
                )
                return
        request = Request(
            method,
            scope["path"],
            scope.get("query_string", b"").decode("latin-1"),
            headers,
            body,
        )
        started = False

        async def tracked(message: Message) -> None:
            nonlocal started
            started = True
            await send(message)

        try:
            large = len(body) > self.settings.limits.offload_bytes
            if large:
                result = await self.offload.handle(request)
            else:  # the request preflight let through above
                result = self.gateway.handle(request, admitted=True)
            if isinstance(result, Asked):  # the upstream's tokenizer counts first (bounded)
                assert isinstance(self.upstream, AsyncUpstream)
                outcome = await _unless_gone(ask(result, self.upstream), receive)
                if outcome is None:  # the client left meanwhile: nothing goes upstream
                    result.abandon()
                    return
                result = (
                    await self.offload.resume(result, outcome) if large else result.resume(outcome)
                )
            if isinstance(result, Placement):  # [[upstreams]] near a window: where it fits
                assert isinstance(self.upstream, UpstreamPool)
                placed = await _unless_gone(self._place(result, large), receive)
                if placed is None:  # the client left meanwhile: nothing goes upstream
                    result.abandon()
                    return
                resume = result.resume
                turn: Response | Turn = (
                    await self.offload.call(resume, *placed) if large else resume(*placed)
                )
                result = turn
            if isinstance(result, Response):
                await _send(tracked, result, head=scope["method"] == "HEAD")
            elif isinstance(result, Forward):  # ANTHROPIC: one upstream
                assert isinstance(self.upstream, AsyncUpstream)
                await _send(tracked, await forward(result, self.upstream))
            else:
                await self._turn(result, receive, tracked)
        except Exception as exc:  # a bug: never a traceback or a credential to the client
            logger.error("tpx gateway internal error: %s", type(exc).__name__)
            if started:
                raise
            request_id = new_request_id()
            data = error_body("api_error", "internal gateway error", request_id)
            await _send(
                send,
                Response(
                    500, (("content-type", "application/json"), ("request-id", request_id)), data
                ),
            )

    async def _place(self, placement: Placement, large: bool) -> tuple[str | None]:
        """Where the pool places *placement* (a large body counted on the thread pool, as
        the core counts it)."""
        assert isinstance(self.upstream, UpstreamPool)
        return (await self.upstream.place(placement, self.offload.call if large else None),)

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                if self.settings.provider is Provider.TPX:
                    from tpx.gateway.tokens import encoding

                    await asyncio.to_thread(encoding)  # load the tokenizer before serving
                await self.offload.start()  # after: its workers inherit the tokenizer
                self._discovery = self._start_discovery()
                if self.freeze:
                    # What the process holds once started (its modules, settings, tables:
                    # ~45,000 objects) lives as long as the process: kept out of the garbage
                    # collector's full collections, which otherwise walk all of it (~25 ms
                    # every few thousand requests) to find what requests left behind.
                    gc.freeze()
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                for task in self._discovery:
                    task.cancel()
                await self.offload.aclose()
                await self.upstream.aclose()
                await send({"type": "lifespan.shutdown.complete"})
                return

    def _start_discovery(self) -> list[asyncio.Task[None]]:
        """The context windows' discovery: of the one upstream, or of each of ``[[upstreams]]``
        with its own profile and models."""
        gate = self.gateway.context
        if not isinstance(self.upstream, UpstreamPool):
            tasks = [start_discovery(gate, self.upstream)]
        else:
            tasks = [
                start_discovery(
                    gate, self.upstream.clients[u.name], profile=u.profile.name, served=u.models
                )
                for u in self.upstream.routing.upstreams
            ]
        return [task for task in tasks if task is not None]

    async def _body(self, scope: Scope, receive: Receive) -> bytes:
        limit = self.settings.limits.max_body_bytes
        for name, value in scope.get("headers", ()):
            if name.lower() == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    raise _BodyError(400, "invalid_request_error", "bad content-length") from None
                if declared > limit:
                    raise _BodyError(
                        413,
                        "request_too_large",
                        f"Request exceeds the maximum size of {limit} bytes",
                    )
        parts: list[bytes] = []
        size = 0
        more = True
        try:
            # one deadline for the whole body (a body trickled a byte at a time ends there);
            # asyncio.timeout: one timer, no task as wait_for makes
            async with asyncio.timeout(self.settings.limits.body_timeout):
                while more:
                    message = await receive()
                    if message["type"] == "http.disconnect":
                        raise _BodyError(400, "invalid_request_error", "the client disconnected")
                    chunk = message.get("body", b"")
                    size += len(chunk)
                    if size > limit:
                        raise _BodyError(
                            413,
                            "request_too_large",
                            f"Request exceeds the maximum size of {limit} bytes",
                        )
                    parts.append(chunk)
                    more = bool(message.get("more_body", False))
        except TimeoutError:
            raise _BodyError(408, "timeout_error", "Timed out reading the request body") from None
        return b"".join(parts)

    async def _turn(self, turn: Turn, receive: Receive, send: Send) -> None:
        metrics = self.gateway.metrics

        answered = False  # the client has the whole response (a disconnect is then normal)

        async def pump() -> None:
            nonlocal answered
            started = ended = False
            items = run_turn(turn, self.upstream)
            try:
                async for item in items:
                    if isinstance(item, Response):
                        await _send(send, item)
                        answered = True
                        return
                    if not started:
                        started = True
                        metrics.open_streams.inc()
                        await send(
                            {
                                "type": "http.response.start",
                                "status": 200,
                                "headers": _raw(turn.headers()),
                            }
                        )
                    # the exchange is over: this is the stream's last byte, the client is
                    # done now (the driver may still drain the upstream connection)
                    ended = turn.over
                    await send({"type": "http.response.body", "body": item, "more_body": not ended})
                    if ended:
                        answered = True
                        metrics.open_streams.dec()
                if started and not ended:
                    await send({"type": "http.response.body", "body": b"", "more_body": False})
                    answered = True
            finally:
                if started and not ended:
                    metrics.open_streams.dec()
                await items.aclose()  # type: ignore[attr-defined]

        this = asyncio.current_task()
        assert this is not None
        running = True  # the turn runs in this task; the watcher stops it if the client goes
        left = False  # the client went away before it had the whole response

        async def gone() -> None:
            nonlocal left
            await _disconnected(receive)
            # uvicorn reports a disconnect once the response is complete too: the driver
            # is only closing (or draining, bounded) the upstream response then, which lets
            # the connection go back to the pool; stopping it would close the connection
            if running and not answered:
                left = True
                this.cancel()

        watcher = asyncio.ensure_future(gone())
        try:
            try:
                await pump()
            except asyncio.CancelledError:
                turn.abandon()
                if not left:  # cancelled from outside (the server stopping): passed on
                    raise
                this.uncancel()
            except OSError:  # the client went away while we wrote
                turn.abandon()
            except Exception:
                turn.abandon()  # never leave the exchange in flight
                raise
            finally:
                running = False
        finally:
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await watcher
            turn.close()


async def _disconnected(receive: Receive) -> None:
    """Returns when the client has gone away (the request body was read already)."""
    while (await receive())["type"] != "http.disconnect":
        pass


async def _unless_gone(work: Awaitable[_T], receive: Receive) -> _T | None:
    """*work*'s result, or ``None`` when the client goes away first: as a turn is, *work* runs
    in the request's own task, which a watcher cancels then."""
    this = asyncio.current_task()
    assert this is not None
    running = True  # until *work* ends: a cancel then reaches *work* (this task's only await)
    left = False

    async def gone() -> None:
        nonlocal left
        await _disconnected(receive)
        if running:
            left = True
            this.cancel()

    watcher = asyncio.ensure_future(gone())
    result: _T | None = None
    try:
        result = await work
    except asyncio.CancelledError:
        if not left:  # cancelled from outside (the server stopping): passed on
            raise
    finally:
        running = False
        watcher.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watcher
    if left:
        this.uncancel()
        return None
    return result


def _raw(headers: tuple[tuple[str, str], ...]) -> list[tuple[bytes, bytes]]:
    return [(k.encode("latin-1"), v.encode("latin-1")) for k, v in headers]


async def _send(send: Send, response: Response, *, head: bool = False) -> None:
    headers = [*response.headers, ("content-length", str(len(response.body)))]
    await send(
        {"type": "http.response.start", "status": response.status, "headers": _raw(tuple(headers))}
    )
    await send({"type": "http.response.body", "body": b"" if head else response.body})


def create_app(
    settings: Settings, *, transport: Any = None, client: Any = None, freeze: bool = False
) -> GatewayApp:
    """The ASGI app for *settings* (*transport* / *client*: inject the upstream's httpx2;
    with ``[[upstreams]]``, *transport* may map upstream names to transports; *freeze*:
    ``gc.freeze()`` once started, for a server process of its own)."""
    gateway = Gateway(settings)
    if settings.routing is not None:
        pool = UpstreamPool(settings, metrics=gateway.metrics, transport=transport)
        return GatewayApp(gateway, pool, freeze=freeze)
    upstream = AsyncUpstream(
        settings,
        transport=transport,
        client=client,
        observe=gateway.metrics.upstream_latency.observe,
    )
    return GatewayApp(gateway, upstream, freeze=freeze)
