"""The I/O of many upstreams: one :class:`~tpx.gateway.upstream.AsyncUpstream` per
``[[upstreams]]`` entry, the attempts of a turn over its route, the recovery probes.

Every decision is :mod:`tpx.gateway.dispatch`'s; this module only sends, times and closes.
An attempt that fails over is closed before the next is sent (one generation in flight per
client request), and only while nothing has gone to the client (``Turn.started``). With
``--monitor`` every attempt, acceptance, resend, failover and recovery is reported to the
live monitor before its I/O (:mod:`tpx.gateway.reports`); a step it stops ends the turn
with the monitor's error, as every stopped step does.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import math
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar

import attrs
import httpx2

from tpx.errors import ModelError
from tpx.errors import TimeoutError as UpstreamTimeout
from tpx.gateway.context.asked import Outcome, ask
from tpx.gateway.context.placement import Placement
from tpx.gateway.dispatch import (
    Attempt,
    Dispatcher,
    Failure,
    GiveUp,
    Plan,
    first,
    pass_over,
    preference,
    retarget,
    retry_after,
    retryable_status,
)
from tpx.gateway.metrics import Metrics
from tpx.gateway.reports import Reports
from tpx.gateway.routing import Routing
from tpx.gateway.settings import Settings
from tpx.gateway.turn import Turn
from tpx.gateway.upstream import AsyncUpstream, unsent
from tpx.gateway.wire import UpstreamCall

__all__ = ["UpstreamPool"]

logger = logging.getLogger("tpx.gateway")

_T = TypeVar("_T")

#: How a retry-after is waited for (a test replaces it to see the wait).
_sleep = asyncio.sleep

#: What a recovery probe asks: the model list (no generation, nothing billed).
PROBE = UpstreamCall("GET", "/v1/models", (("accept", "application/json"),), b"", False)


class _Bound:
    """One attempt bounded by :func:`_within`: its task, its deadline (loop time), whether
    the deadline cancelled it."""

    __slots__ = ("expired", "task", "when")

    def __init__(self, task: asyncio.Task[Any], when: float) -> None:
        self.task = task
        self.when = when
        self.expired = False


class _Deadlines:
    """The deadlines of one event loop's bounded attempts (:func:`_within`) on ONE loop timer,
    armed for the earliest: an attempt adds and removes its entry and takes no timer of its
    own (``asyncio.timeout`` makes and cancels one per attempt: a good part of what routing
    added to a streamed request). When the timer fires, every attempt past its deadline is
    cancelled as ``asyncio.timeout`` cancels it, and the timer is armed for the next."""

    __slots__ = ("_armed", "_at", "_loop", "waiting")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self.waiting: set[_Bound] = set()  #: the attempts bounded now
        self._armed: asyncio.TimerHandle | None = None
        self._at = math.inf  #: when the armed timer fires

    def add(self, task: asyncio.Task[Any], timeout: float) -> _Bound:
        bound = _Bound(task, self._loop.time() + timeout)
        self.waiting.add(bound)
        if bound.when < self._at:
            self._arm(bound.when)
        return bound

    def _arm(self, when: float) -> None:
        if self._armed is not None:
            self._armed.cancel()
        self._at = when
        self._armed = self._loop.call_at(when, self._fire)

    def _fire(self) -> None:
        self._armed, self._at = None, math.inf
        now = self._loop.time()
        following = math.inf
        for bound in list(self.waiting):
            if bound.when <= now:
                if not bound.expired:
                    bound.expired = True
                    bound.task.cancel()
            elif bound.when < following:
                following = bound.when
        if following < math.inf:
            self._arm(following)


#: each event loop's deadlines (a process serves on one loop; tests run several)
_DEADLINES: dict[asyncio.AbstractEventLoop, _Deadlines] = {}


def _deadlines(loop: asyncio.AbstractEventLoop) -> _Deadlines:
    deadlines = _DEADLINES.get(loop)
    if deadlines is None:
        for old in list(_DEADLINES):
            if old.is_closed():
                _DEADLINES.pop(old, None)
        deadlines = _DEADLINES[loop] = _Deadlines(loop)
    return deadlines


async def _within(opening: Awaitable[_T], timeout: float | None) -> _T:
    """*opening*'s response, or TimeoutError past *timeout* seconds -- with *opening* cancelled
    then (its connection closed: the upstream stops generating before another is asked).
    ``asyncio.timeout``'s semantics (a cancellation of the task from elsewhere is passed on),
    on the loop's one timer (:class:`_Deadlines`)."""
    if timeout is None:
        return await opening
    task = asyncio.current_task()
    assert task is not None
    deadlines = _deadlines(task.get_loop())
    cancelling = task.cancelling()
    bound = deadlines.add(task, timeout)
    try:
        return await opening
    except asyncio.CancelledError as cancelled:
        if bound.expired and task.uncancel() <= cancelling:  # the deadline's cancellation
            raise TimeoutError from cancelled
        raise
    finally:
        deadlines.waiting.discard(bound)


class _Children:
    """The labelled children of one per-upstream metric, each resolved on its first use
    (``labels()`` takes a lock and builds its key on every call; a series appears in
    ``/metrics`` when it is first counted, as with ``labels()``)."""

    __slots__ = ("_family", "_kept")

    def __init__(self, family: Any) -> None:
        self._family = family
        self._kept: dict[Any, Any] = {}

    def __getitem__(self, key: str | tuple[str, str]) -> Any:
        child = self._kept.get(key)
        if child is None:
            labels = key if isinstance(key, tuple) else (key,)
            child = self._kept[key] = self._family.labels(*labels)
        return child


def _record(name: str, outcome: str | int, waited: float) -> dict[str, Any]:
    """One attempt in the log line (``waited``: the retry-after honoured before it)."""
    record: dict[str, Any] = {"upstream": name, "outcome": outcome}
    if waited:
        record["waited"] = waited
    return record


class UpstreamPool:
    """The upstreams of ``settings.routing`` for one process (its event loop)."""

    def __init__(
        self,
        settings: Settings,
        *,
        metrics: Metrics | None = None,
        transport: Any = None,
        clock: Any = time.monotonic,
    ) -> None:
        routing = settings.routing
        assert routing is not None
        self.settings = settings
        self.routing: Routing = routing
        self.dispatcher = Dispatcher(routing)
        self.metrics = metrics or Metrics()
        self._clock = clock
        self.clients: dict[str, AsyncUpstream] = {}
        self._limits: dict[str, asyncio.Semaphore] = {}
        metrics = self.metrics
        self._requests = _Children(metrics.upstream_requests)
        self._failovers = _Children(metrics.upstream_failovers)
        self._cooldowns = _Children(metrics.upstream_cooldowns)
        self._in_flight = _Children(metrics.upstream_in_flight)
        self._attempt_seconds = _Children(metrics.upstream_attempt_seconds)
        for upstream in routing.upstreams:
            own = attrs.evolve(
                settings,
                base_url=upstream.base_url,
                credential=upstream.credential,
                profile=upstream.profile,
            )
            given = transport.get(upstream.name) if isinstance(transport, Mapping) else transport
            self.clients[upstream.name] = AsyncUpstream(
                own, transport=given, observe=self.metrics.upstream_latency.observe
            )
            if upstream.concurrency is not None:
                self._limits[upstream.name] = asyncio.Semaphore(upstream.concurrency)
            self.metrics.upstream_cooling.labels(upstream.name).set_function(
                functools.partial(self._cooling, upstream.name)
            )
        self._slots: asyncio.Semaphore | None = None
        self._prober: asyncio.Task[None] | None = None
        self._closed = False
        #: the attempts told to ``tpx serve --monitor`` (made with the first monitored turn)
        self.reports: Reports | None = None

    def _cooling(self, name: str) -> float:
        """1.0 while *name* is in cooldown (the ``tpx_gateway_upstream_cooling`` gauge)."""
        return float(self.dispatcher.health[name].cooling(self._clock()))

    @property
    def slots(self) -> asyncio.Semaphore:
        """Concurrent upstream requests of the process (``limits.max_upstream``)."""
        if self._slots is None:
            self._slots = asyncio.Semaphore(self.settings.limits.max_upstream)
        return self._slots

    # -- one turn ------------------------------------------------------------------------

    async def open(self, turn: Turn) -> tuple[httpx2.Response, AsyncUpstream, str]:
        """The response of the attempt *turn*'s route ends with (its body unread), the client
        that got it and the upstream's name (hand it to :meth:`release` once the response is
        closed). Raises the last attempt's ModelError when there is no response to give."""
        self._start_probes()
        routed = turn.routed
        assert routed is not None
        plan = turn.plan = Plan(routed.rule.upstreams)
        reports = self._reports(turn)
        now = self._clock()
        step: Attempt | GiveUp
        if turn.placement is not None:  # placed on an upstream it fits (self.place)
            plan.tried.append(routed.upstream)
            step = Attempt(routed.upstream)
        else:
            step = first(self.dispatcher, plan, now)
        tried: list[dict[str, Any]] = []
        left: str | None = None  #: the upstream of the attempt before
        accepted = False  #: that attempt's upstream took the request
        while True:
            assert isinstance(step, Attempt)
            if step.wait:  # a short retry-after, honoured
                await _sleep(step.wait)
            name = step.upstream
            if reports is not None:  # before the I/O: a stopped step reaches no upstream
                if left is None:
                    reports.first(turn.request_id, name, now)
                else:
                    reports.next(turn.request_id, left, name, now, generating=accepted)
            placement = turn.placement
            again = placement is not None and placement.apply(name)  # clamped for it
            turn.target(self.routing.upstream(name), again=again)
            client = self.clients[name]
            response, failure, error = await self._attempt(turn, client, name)
            accepted = failure is None or failure.kind in ("timeout", "network")
            if reports is not None and accepted:
                try:
                    reports.accept(turn.request_id)
                except BaseException:
                    await self.end_attempt(response, name)
                    raise
            if failure is None:
                assert response is not None
                if reports is not None:
                    reports.succeeded(name, self._clock())
                self.dispatcher.succeeded(name)
                if tried:
                    turn.annotate("attempts", [*tried, _record(name, "ok", step.wait)])
                return response, client, name
            tried.append(_record(name, failure.status or failure.kind, step.wait))
            now = self._clock()
            step = retarget(self.dispatcher, plan, failure, started=turn.started, now=now)
            if reports is not None:
                reports.cooled(plan)
            left = name
            if failure.retryable:
                self._cooldowns[name].inc()
            # the next upstream's window (its endpoint asked, as a tokenizer call: one more
            # of the pool's slots, within its timeout, while this turn keeps its own)
            while isinstance(step, Attempt) and not await self.fits(turn, step.upstream):
                step = pass_over(self.dispatcher, plan, self._clock())  # never sent there
            moved = isinstance(step, Attempt) and step.upstream != name
            if moved and turn.placement is not None and turn.started:
                step = GiveUp("bytes reached the client")  # a ping went out while counting
            if isinstance(step, GiveUp):
                if len(tried) > 1:
                    turn.annotate("attempts", tried)
                if response is not None:  # the client gets this status (and retry-after)
                    return response, client, name
                self.release(name)
                assert error is not None
                raise error
            self._failovers[name].inc()
            await self.end_attempt(response, name)  # closed before the next attempt: one at a time

    # -- the context window of each upstream ([[upstreams]] near a window) -------------------

    async def place(
        self, placement: Placement, run: Callable[..., Awaitable[Any]] | None = None
    ) -> str | None:
        """Where a routed request near a window goes (:mod:`tpx.gateway.context.placement`):
        its route's upstreams in the order balancing takes them, each counted and checked for
        its window, the first it fits (``None``: none, it is refused); hand the answer to
        :meth:`Placement.resume`. count_tokens: the first, counted for it. *run*: where the
        counting runs (a large body: the thread pool; ``None``: here)."""
        order = preference(self.dispatcher, placement.candidates, self._clock())
        if placement.counting is not None:
            order = order[:1]
        for name in order:
            outcome = await self._count(placement, name)
            fits = (
                placement.check(name, outcome)
                if run is None
                else await run(placement.check, name, outcome)
            )
            if fits:
                return name
        return None

    async def fits(self, turn: Turn, name: str) -> bool:
        """Does *turn* fit the window of *name*, which a failover would send it to? Counted
        for *name* (its endpoint asked once) when not checked yet; a turn no upstream of its
        route could come near the window of fits every one."""
        placement = turn.placement
        if placement is None:
            return True
        known = placement.known(name)
        if known is None:
            known = placement.check(name, await self._count(placement, name))
        return known

    async def _count(self, placement: Placement, name: str) -> Outcome | None:
        """What *name*'s tokenizer endpoint gives for *placement* (``None``: not asked), the
        call holding one of the pool's slots and one of *name*'s ``concurrency``."""
        asked = placement.asked(name)
        if asked is None:
            return None
        holds = [self.slots]
        limit = self._limits.get(name)
        if limit is not None:
            holds.append(limit)
        return await ask(asked, self.clients[name], holds)

    def _reports(self, turn: Turn) -> Reports | None:
        """The reports of a monitored turn (``tpx serve --monitor``), else ``None``."""
        monitor = turn.gateway.monitor
        if monitor is None:
            return None
        if self.reports is None or self.reports.monitor is not monitor:
            self.reports = Reports(monitor, self.dispatcher)
        turn.reported = True
        return self.reports

    async def end_attempt(self, response: httpx2.Response | None, name: str) -> None:
        """End the attempt on *name*: its response closed, its slot released."""
        try:
            if response is not None:
                await response.aclose()
        finally:
            self.release(name)

    def broken(self, turn: Turn, name: str) -> None:
        """The stream of *turn*'s attempt on *name* broke after its status and headers were
        read: a failure of that upstream (its cooldown), handed to THE failover point, which
        never moves a request whose reply has begun: the exchange read this reply's start,
        even when no byte of it reached the client yet, and cannot be framed again for
        another upstream (the caller fails the turn)."""
        plan = turn.plan
        if plan is None:
            return
        reports = self._reports(turn)
        now = self._clock()
        step = retarget(self.dispatcher, plan, Failure("broken"), started=True, now=now)
        self._cooldowns[name].inc()
        if reports is not None:
            reports.cooled(plan)
            if not isinstance(step, GiveUp):
                # a failover point that would move a reply that began: never taken here,
                # but shown to --monitor as the Failover it would be (which stops it)
                reports.next(turn.request_id, name, step.upstream, now, generating=True)

    async def _attempt(
        self, turn: Turn, client: AsyncUpstream, name: str
    ) -> tuple[httpx2.Response | None, Failure | None, ModelError | None]:
        """One attempt: the response (``None`` on a transport failure), the failure another
        upstream may answer better (``None``: none) and the error (a transport failure)."""
        limit = self._limits.get(name)
        if limit is not None:
            await limit.acquire()
        self.dispatcher.began(name)
        self._in_flight[name].inc()
        began = time.perf_counter()
        opening = client.open(turn.call)
        timeout = self.routing.options.first_byte_timeout if turn.streaming else None
        response: httpx2.Response | None = None
        error: ModelError | None = None
        failure: Failure | None = None
        try:
            # bounded for a stream only: a plain turn's attempt takes no timer of its own
            response = await (opening if timeout is None else _within(opening, timeout))
        except TimeoutError:  # asyncio's: no response before first_byte_timeout
            error = UpstreamTimeout(
                f"TPX: no response from upstream {name!r} within {timeout} s", provider="TPX"
            )
            failure = Failure("timeout")
        except ModelError as exc:
            error = exc
            failure = Failure("connect") if unsent(exc) else Failure("network")
        except BaseException:  # cancelled (the client left): the attempt is over
            self.release(name)
            raise
        seconds = time.perf_counter() - began
        self._attempt_seconds[name].observe(seconds)
        if response is not None:
            status = response.status_code
            self._requests[name, str(status)].inc()
            if retryable_status(status):
                failure = Failure(
                    "status", status, retry_after(response.headers.get("retry-after"))
                )
        else:
            assert failure is not None
            self._requests[name, failure.kind].inc()
        return response, failure, error

    def release(self, name: str) -> None:
        """The attempt on *name* is over (its response closed)."""
        self.dispatcher.ended(name)
        self._in_flight[name].dec()
        limit = self._limits.get(name)
        if limit is not None:
            limit.release()

    # -- recovery probes --------------------------------------------------------------------

    def _start_probes(self) -> None:
        if self._prober is None and not self._closed and self.routing.options.probe_interval > 0:
            self._prober = asyncio.ensure_future(self._probe_forever())

    async def _probe_forever(self) -> None:
        interval = self.routing.options.probe_interval
        while True:
            await asyncio.sleep(min(interval, 1.0))
            due = self.dispatcher.due_probes(self._clock())
            if due:
                await asyncio.gather(*(self.probe(name) for name in due))

    async def probe(self, name: str) -> bool:
        """Ask *name* for its model list (bounded by ``limits.connect_timeout``): healthy
        when it answers below 500 and not 429."""
        ok = False
        client = self.clients[name]
        try:
            async with asyncio.timeout(self.settings.limits.connect_timeout):
                response = await client.open(PROBE)
                await response.aclose()
            ok = response.status_code < 500 and response.status_code != 429
        except (ModelError, TimeoutError):
            ok = False
        self.dispatcher.probed(name, ok, self._clock())
        if self.reports is not None:
            self.reports.probed(name, ok)
        self.metrics.upstream_probes.labels(name, "ok" if ok else "failed").inc()
        return ok

    async def aclose(self) -> None:
        self._closed = True
        if self._prober is not None:
            self._prober.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._prober
        for client in self.clients.values():
            await client.aclose()
