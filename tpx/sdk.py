"""The official ``anthropic`` SDK on tpx, in-process: no server to run.

::

    import tpx.sdk

    client = tpx.sdk.anthropic_client(env={"TPX_OAUTH_TOKEN": "...",
                                          "TPX_BASE_URL": "http://127.0.0.1:9000/v1"})
    reply = client.messages.create(model="m", max_tokens=256,
                                   messages=[{"role": "user", "content": "hi"}])

:func:`anthropic_client` / :func:`async_anthropic_client` return an
``anthropic.Anthropic`` / ``AsyncAnthropic`` whose ``http_client`` (an ``httpx2.Client`` /
``AsyncClient``) runs the gateway core (:mod:`tpx.gateway.core`) in the calling process
through a custom httpx2 transport (:class:`GatewayTransport` / :class:`AsyncGatewayTransport`):
the same pairing checks, signed tool ids, retries and errors as ``tpx serve``. The
provider is selected from *env* (default ``os.environ``) exactly as :func:`tpx.transport.boot`
selects it; *upstream* (an httpx2 transport) replaces the network to the upstream.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator, Mapping
from pathlib import Path
from typing import Any

import anthropic
import httpx2

from tpx.errors import ConfigurationError
from tpx.gateway.context.asked import Asked, ask, ask_sync
from tpx.gateway.context.placement import Placement
from tpx.gateway.core import Forward, Gateway, Request, Response, Turn
from tpx.gateway.drive import forward, forward_sync, run_turn, run_turn_sync
from tpx.gateway.pool import UpstreamPool
from tpx.gateway.settings import Settings, load_settings
from tpx.gateway.upstream import AsyncUpstream, SyncUpstream

__all__ = [
    "AsyncGatewayTransport",
    "GatewayTransport",
    "anthropic_client",
    "async_anthropic_client",
]

_BASE_URL = "http://tpx.in-process"


def _request(request: httpx2.Request, body: bytes) -> Request:
    headers = {k.lower(): v for k, v in request.headers.items()}
    return Request(
        request.method, request.url.path, request.url.query.decode("latin-1"), headers, body
    )


def _response(response: Response, method: str = "POST") -> httpx2.Response:
    """As an HTTP server sends it: a HEAD answer has GET's headers and no body."""
    if method.upper() == "HEAD":
        headers = [*response.headers, ("content-length", str(len(response.body)))]
        return httpx2.Response(response.status, headers=headers)
    return httpx2.Response(response.status, headers=list(response.headers), content=response.body)


class _SyncTurnStream(httpx2.SyncByteStream):
    def __init__(self, first: bytes, items: Iterator[Response | bytes], turn: Turn) -> None:
        self._first = first
        self._items = items
        self._turn = turn

    def __iter__(self) -> Iterator[bytes]:
        yield self._first
        for item in self._items:
            if isinstance(item, bytes):
                yield item

    def close(self) -> None:
        close = getattr(self._items, "close", None)
        if close is not None:
            close()
        self._turn.abandon()
        self._turn.close()


class _AsyncTurnStream(httpx2.AsyncByteStream):
    def __init__(self, first: bytes, items: AsyncIterator[Response | bytes], turn: Turn) -> None:
        self._first = first
        self._items = items
        self._turn = turn

    async def __aiter__(self) -> AsyncIterator[bytes]:
        yield self._first
        async for item in self._items:
            if isinstance(item, bytes):
                yield item

    async def aclose(self) -> None:
        aclose = getattr(self._items, "aclose", None)
        if aclose is not None:
            await aclose()
        self._turn.abandon()
        self._turn.close()


class GatewayTransport(httpx2.BaseTransport):
    """An httpx2 transport answering Messages requests with the gateway core, in-process."""

    def __init__(self, gateway: Gateway, upstream: SyncUpstream) -> None:
        self.gateway = gateway
        self.upstream = upstream

    def handle_request(self, request: httpx2.Request) -> httpx2.Response:
        result = self.gateway.handle(_request(request, request.read()))
        if isinstance(result, Asked):  # the upstream's tokenizer counts first (bounded)
            result = result.resume(ask_sync(result, self.upstream))
        assert not isinstance(result, Placement)  # no [[upstreams]] in the sync client
        if isinstance(result, Response):
            return _response(result, request.method)
        if isinstance(result, Forward):
            return _response(forward_sync(result, self.upstream))
        items = run_turn_sync(result, self.upstream)
        first = next(items)
        if isinstance(first, Response):
            close = getattr(items, "close", None)
            if close is not None:
                close()  # the upstream response is closed now, not at garbage collection
            result.close()
            return _response(first)
        return httpx2.Response(
            200, headers=list(result.headers()), stream=_SyncTurnStream(first, items, result)
        )

    def close(self) -> None:
        self.upstream.close()


class AsyncGatewayTransport(httpx2.AsyncBaseTransport):
    """:class:`GatewayTransport` for ``httpx2.AsyncClient``."""

    def __init__(self, gateway: Gateway, upstream: AsyncUpstream | UpstreamPool) -> None:
        self.gateway = gateway
        self.upstream = upstream

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        result = self.gateway.handle(_request(request, await request.aread()))
        if isinstance(result, Asked):  # the upstream's tokenizer counts first (bounded)
            assert isinstance(self.upstream, AsyncUpstream)  # [[upstreams]]: a Placement
            result = result.resume(await ask(result, self.upstream))
        if isinstance(result, Placement):  # [[upstreams]] near a window: where it fits
            assert isinstance(self.upstream, UpstreamPool)
            result = result.resume(await self.upstream.place(result))
        if isinstance(result, Response):
            return _response(result, request.method)
        if isinstance(result, Forward):  # ANTHROPIC: one upstream
            assert isinstance(self.upstream, AsyncUpstream)
            return _response(await forward(result, self.upstream))
        items = run_turn(result, self.upstream)
        first = await items.__anext__()
        if isinstance(first, Response):
            await items.aclose()  # type: ignore[attr-defined]
            result.close()
            return _response(first)
        return httpx2.Response(
            200, headers=list(result.headers()), stream=_AsyncTurnStream(first, items, result)
        )

    async def aclose(self) -> None:
        await self.upstream.aclose()


def _settings(env: Mapping[str, str] | None, config_file: Path | None) -> Settings:
    return load_settings(env=os.environ if env is None else env, config_file=config_file)


def anthropic_client(
    *,
    env: Mapping[str, str] | None = None,
    config_file: Path | None = None,
    settings: Settings | None = None,
    upstream: httpx2.BaseTransport | None = None,
    **kwargs: Any,
) -> anthropic.Anthropic:
    """An ``anthropic.Anthropic`` running the gateway in-process (*kwargs* go to it)."""
    settings = settings or _settings(env, config_file)
    if settings.routing is not None:
        raise ConfigurationError(
            "[[upstreams]] need the async client (async_anthropic_client) or tpx serve"
        )
    gateway = Gateway(settings)
    transport = GatewayTransport(gateway, SyncUpstream(settings, transport=upstream))
    return anthropic.Anthropic(
        api_key=settings.gateway_key or "tpx-in-process",
        base_url=_BASE_URL,
        http_client=httpx2.Client(transport=transport, timeout=settings.limits.read_timeout),
        **kwargs,
    )


def async_anthropic_client(
    *,
    env: Mapping[str, str] | None = None,
    config_file: Path | None = None,
    settings: Settings | None = None,
    upstream: httpx2.AsyncBaseTransport | Mapping[str, httpx2.AsyncBaseTransport] | None = None,
    **kwargs: Any,
) -> anthropic.AsyncAnthropic:
    """An ``anthropic.AsyncAnthropic`` running the gateway in-process (with ``[[upstreams]]``,
    *upstream* may map their names to transports)."""
    settings = settings or _settings(env, config_file)
    gateway = Gateway(settings)
    client: AsyncUpstream | UpstreamPool = (
        AsyncUpstream(settings, transport=upstream)  # type: ignore[arg-type]
        if settings.routing is None
        else UpstreamPool(settings, metrics=gateway.metrics, transport=upstream)
    )
    transport = AsyncGatewayTransport(gateway, client)
    return anthropic.AsyncAnthropic(
        api_key=settings.gateway_key or "tpx-in-process",
        base_url=_BASE_URL,
        http_client=httpx2.AsyncClient(transport=transport, timeout=settings.limits.read_timeout),
        **kwargs,
    )
