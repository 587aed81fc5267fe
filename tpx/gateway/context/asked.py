"""A request waiting for the upstream's tokenizer count (``[context] tokenizer = true``).

With a tokenizer endpoint (:mod:`.tokenizer`), :meth:`tpx.gateway.core.Gateway.handle` answers
a ``count_tokens`` request, and a ``/v1/messages`` turn its preflight counts, with an
:class:`Asked`: the I/O shell asks the endpoint (:func:`ask` / :func:`ask_sync`: one call,
within ``[context] tokenizer_timeout`` seconds and ``tokenizer_bytes`` of reply), then hands
what came back to :meth:`Asked.resume`, which gives the client's response or the turn. The
count is asked for once a request: :meth:`Asked.resume` runs once, and everything in the
request that needs the count (the preflight, its log line, the wording of an upstream
context error) takes it from there.

The endpoint belongs to the upstream, which tpx does not trust: a reply that is late, too
large, not a 200, not a count, or a count no request of that size can have (below 0, or
above the bytes sent plus :data:`~tpx.gateway.context.preflight.SLACK`) gives no count.
Then the estimate counts (:mod:`.counting`), a warning is logged and
``tpx_gateway_tokenizer_fallbacks{reason}`` goes up: the exchange never waits longer or
fails because of the endpoint.

A call to the endpoint is an upstream request like a turn's: :func:`ask` takes one of the
upstream client's slots (``limits.max_upstream``) for it, and waits for one within the same
``tokenizer_timeout`` (none free by then: reason ``busy``), so a flood of requests never
makes more concurrent upstream calls than turns can. Its latency goes to
``tpx_gateway_tokenizer_latency_seconds``, not ``tpx_gateway_upstream_latency_seconds``.
A client that leaves while the endpoint is asked ends the request there
(:meth:`Asked.abandon`: logged with ``client_gone``; nothing goes upstream).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

import attrs
import httpx2

from tpx import errors
from tpx.errors import ProtocolError
from tpx.gateway.context.preflight import SLACK
from tpx.gateway.context.tokenizer import TokenizerEndpoint
from tpx.gateway.inflate import Decoder, raw_chunks_sync, read_body
from tpx.gateway.metrics import Metrics
from tpx.gateway.wire import Response, UpstreamCall

__all__ = ["Asked", "Count", "Outcome", "ask", "ask_sync", "log_gone"]

logger = logging.getLogger("tpx.gateway")

#: What the endpoint gave: its status and body, or why it gave none (``timeout``,
#: ``too_large``, ``error``).
Outcome = tuple[int, bytes] | str


@attrs.frozen
class Count:
    """A request's input tokens: the endpoint's (*exact*) or the estimate (*fallback*: why)."""

    tokens: int
    exact: bool
    fallback: str | None = None


class Host(Protocol):
    """What an :class:`Asked` needs of the gateway: its request counter and metrics."""

    @property
    def metrics(self) -> Metrics: ...

    def count(self, endpoint: str, status: int) -> None: ...

    def log(self, record: dict[str, Any], *, failed: bool) -> None: ...


class Asked:
    """A request that needs the tokenizer's count first (see the module docstring).

    *proceed* takes the count and gives what the request becomes; *estimate* is worked out
    only when the endpoint gives no count."""

    def __init__(
        self,
        gateway: Host,
        endpoint_label: str,
        tokenizer: TokenizerEndpoint,
        translated: Mapping[str, Any],
        model: str | None,
        estimate: Callable[[], int],
        proceed: Callable[[Count], Any],
        *,
        timeout: float,
        limit: int,
        log: dict[str, Any] | None = None,
    ) -> None:
        self.gateway = gateway
        self.endpoint_label = endpoint_label
        self.tokenizer = tokenizer
        self.translated = translated
        self.estimate = estimate
        self.proceed = proceed
        self.timeout = timeout
        self.limit = limit
        self.log = log
        call = tokenizer.call(translated, model)
        self.call = attrs.evolve(call, timeout=timeout, latency=False)
        self._resumed = False

    def resume(self, outcome: Outcome) -> Any:
        """What the request becomes, given what the endpoint gave (once)."""
        if self._resumed:
            raise RuntimeError("a request's count is asked for once")
        self._resumed = True
        result = self.proceed(self.count(outcome))
        if isinstance(result, Response):
            self.gateway.count(self.endpoint_label, result.status)
        return result

    def abandon(self) -> None:
        """The client left while the endpoint was asked: the request ends (nothing goes
        upstream); a turn's line is logged with ``client_gone``."""
        if self._resumed:
            raise RuntimeError("a request's count is asked for once")
        self._resumed = True
        log_gone(self.gateway, self.log)

    def count(self, outcome: Outcome) -> Count:
        """The count *outcome* gives, else the estimate (logged, counted in the metrics)."""
        tokens: int | None = None
        if isinstance(outcome, str):
            reason = outcome
        else:
            status, body = outcome
            tokens = self.tokenizer.read(status, body, self.translated)
            reason = "status" if status != 200 else "unreadable"
            if tokens is not None and not 0 <= tokens <= len(self.call.body) + SLACK:
                tokens, reason = None, "implausible"
        if tokens is not None:
            return Count(tokens, exact=True)
        logger.warning(
            "tpx gateway: the tokenizer endpoint gave no count (%s); the estimate counts", reason
        )
        self.gateway.metrics.tokenizer_fallbacks.labels(reason).inc()
        return Count(self.estimate(), exact=False, fallback=reason)


def log_gone(host: Host, log: dict[str, Any] | None) -> None:
    """A request whose client left while an endpoint was asked: a turn's line (*log*) is
    logged, with ``client_gone`` (``count_tokens`` has none)."""
    if log is not None:
        log["client_gone"] = True
        host.log(log, failed=True)


class _Upstream(Protocol):
    @property
    def slots(self) -> asyncio.Semaphore: ...

    async def open(self, call: UpstreamCall) -> httpx2.Response: ...


class _SyncUpstream(Protocol):
    @property
    def slots(self) -> threading.BoundedSemaphore: ...

    def open(self, call: UpstreamCall) -> httpx2.Response: ...


def _failure(error: BaseException) -> str:
    if isinstance(error, TimeoutError | errors.TimeoutError | httpx2.TimeoutException):
        return "timeout"
    if isinstance(error, ProtocolError) and "tokenizer_bytes" in str(error):
        return "too_large"
    return "error"


async def ask(
    asked: Asked, upstream: _Upstream, holds: Sequence[asyncio.Semaphore] | None = None
) -> Outcome:
    """Ask the endpoint (*upstream*: the gateway's upstream client): its status and body,
    or why there are none. Never raises but for cancellation; never takes longer than
    ``asked.timeout`` seconds (waiting for an upstream slot included), never reads more
    than ``asked.limit`` bytes. *holds*: the slots the call takes (``[[upstreams]]``: the
    pool's and that upstream's ``concurrency``; default: the client's own)."""
    deadline = asyncio.get_running_loop().time() + asked.timeout
    taken: list[asyncio.Semaphore] = []
    try:
        async with asyncio.timeout_at(deadline):
            for slots in (upstream.slots,) if holds is None else holds:
                await slots.acquire()
                taken.append(slots)
    except BaseException as error:  # every slot of one kind taken the whole time: busy
        for held in taken:
            held.release()
        if isinstance(error, TimeoutError):
            return "busy"
        raise
    began = time.perf_counter()
    try:
        async with asyncio.timeout_at(deadline):
            response = await upstream.open(asked.call)
            try:
                body = await read_body(
                    response, asked.limit, "tokenizer", "context.tokenizer_bytes"
                )
            finally:
                await response.aclose()
    except Exception as error:  # the endpoint never fails the request (a timeout included)
        return _failure(error)
    finally:
        for slots in taken:
            slots.release()
        asked.gateway.metrics.tokenizer_latency.observe(time.perf_counter() - began)
    return response.status_code, body


def ask_sync(asked: Asked, upstream: _SyncUpstream) -> Outcome:
    """:func:`ask` over the sync client: it takes one of the client's slots (waiting at most
    ``asked.timeout`` seconds: none free, ``busy``), each read waits at most what is left of
    that (the call's timeout), and no read starts past that deadline."""
    deadline = time.monotonic() + asked.timeout
    if not upstream.slots.acquire(timeout=asked.timeout):  # every slot taken the whole time
        return "busy"
    try:
        return _asked_sync(asked, upstream, deadline)
    finally:
        upstream.slots.release()


def _asked_sync(asked: Asked, upstream: _SyncUpstream, deadline: float) -> Outcome:
    began = time.perf_counter()
    left = max(deadline - time.monotonic(), 0.001)  # the slot's wait came out of the bound
    try:
        response = upstream.open(attrs.evolve(asked.call, timeout=left))
        try:
            decoder = Decoder.of(response, asked.limit, "tokenizer", "context.tokenizer_bytes")
            parts: list[bytes] = []
            for raw in raw_chunks_sync(response):
                if time.monotonic() > deadline:
                    return "timeout"
                piece = decoder.decode(raw)
                while piece:
                    parts.append(piece)
                    piece = decoder.more()
            parts.append(decoder.flush())
        finally:
            response.close()
    except Exception as error:  # the endpoint never fails the request
        return _failure(error)
    finally:
        asked.gateway.metrics.tokenizer_latency.observe(time.perf_counter() - began)
    return response.status_code, b"".join(parts)
