"""Failover and balancing among a route's upstreams: every decision, without I/O.

One :class:`Dispatcher` per process holds each upstream's health (requests in flight, the
consecutive failures, the cooldown); one :class:`Plan` per client request holds that
request's attempts. The I/O shell (:mod:`tpx.gateway.pool`) asks :func:`first` for the
upstream of the first attempt and, when an attempt fails, :func:`retarget` -- THE failover
point -- for what to do next. Attempts are sequential: the shell closes an attempt before it
asks, so a client request never has more than one generation in flight.

The rules:

* **Balancing**: least in flight (relative to the weight) among the route's upstreams that
  are not cooling down and below their concurrency limit; ties go to the route's order.
  When every upstream is cooling down, the one whose cooldown ends first is tried anyway
  (a request is never refused without an attempt).
* **What fails over**: a connect error, a 429, a 529, a 5xx, and a timeout before the
  response when ``failover_on_timeout`` is set (the timed-out request may have been written:
  its upstream may be generating, so a failover may start a second generation; by default
  the exchange ends instead) -- and only while no byte has reached the client (``started``).
  After that the exchange fails as with one upstream and the client retries; a stream that
  breaks after its first byte (``broken``) is asked about too, and never moves.
* **Cooldown** (circuit breaker): every such failure puts its upstream into cooldown:
  ``retry-after`` when the upstream sent one (capped by ``cooldown_max``), else
  ``cooldown * 2**(n-1)`` for its n-th consecutive failure, capped. A success closes it.
* **retry-after honoured**: a 429/529 whose ``retry-after`` is at most ``retry_after_max``
  seconds is waited for and sent to the same upstream once before failing over.
* **Bounded**: at most ``max_attempts`` attempts per client request.
* **Recovery probes**: an upstream in cooldown is probed (a cheap request) every
  ``probe_interval`` seconds, one probe at a time (:meth:`Dispatcher.due_probes`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import attrs

from tpx.gateway.routing import Options, Routing

__all__ = [
    "Attempt",
    "Dispatcher",
    "Failure",
    "GiveUp",
    "Health",
    "Plan",
    "first",
    "pass_over",
    "preference",
    "retarget",
    "retryable_status",
]


def retryable_status(status: int) -> bool:
    """An upstream status another upstream may answer better: 429, 529, 5xx."""
    return status == 429 or status >= 500


def retry_after(value: str | None) -> float | None:
    """The seconds of a ``retry-after`` header (delta-seconds only; a date: ``None``)."""
    if not value:
        return None
    try:
        seconds = float(value.strip())
    except ValueError:
        return None
    return seconds if math.isfinite(seconds) and seconds >= 0 else None


@attrs.define
class Health:
    """One upstream's state in this process."""

    in_flight: int = 0
    failures: int = 0  #: consecutive failures
    cooling_until: float = 0.0  #: monotonic seconds; no cooldown when in the past
    probing: bool = False
    next_probe: float = 0.0

    def cooling(self, now: float) -> bool:
        return now < self.cooling_until


@attrs.frozen
class Failure:
    """What an attempt ended with: a status (429/529/5xx) or a transport error."""

    #: "status", "connect", "timeout" (before the response), "network" (after the request was
    #: written), "broken" (a stream that broke after its first byte reached the client)
    kind: str
    status: int | None = None
    retry_after: float | None = None

    @property
    def retryable(self) -> bool:
        if self.kind == "status":
            return self.status is not None and retryable_status(self.status)
        return self.kind in ("connect", "timeout", "broken")


@attrs.frozen
class Attempt:
    """Send the request to *upstream* after *wait* seconds."""

    upstream: str
    wait: float = 0.0


@attrs.frozen
class GiveUp:
    """No further attempt: the last outcome goes to the client. *reason* is for the log."""

    reason: str


@attrs.define
class Plan:
    """One client request's attempts over its route's upstreams."""

    candidates: tuple[str, ...]
    tried: list[str] = attrs.Factory(list)
    waited: bool = False  #: a retry-after was waited for once already
    #: the cooldowns its failures set: upstream -> when the cooldown ends (monotonic seconds)
    cooled: dict[str, float] = attrs.Factory(dict)
    #: upstreams whose window the request does not fit (never sent there: :func:`pass_over`)
    unfit: set[str] = attrs.Factory(set)

    @property
    def attempts(self) -> int:
        return len(self.tried)

    @property
    def current(self) -> str | None:
        return self.tried[-1] if self.tried else None


class Dispatcher:
    """The health of a process's upstreams and the balancing decisions (no I/O, no clock:
    every method takes ``now``, monotonic seconds)."""

    def __init__(self, routing: Routing) -> None:
        self.routing = routing
        self.options: Options = routing.options
        self.health: dict[str, Health] = {u.name: Health() for u in routing.upstreams}
        self._weight = {u.name: u.weight for u in routing.upstreams}
        self._limit = {u.name: u.concurrency for u in routing.upstreams}

    def available(self, name: str, now: float) -> bool:
        """Not cooling down and below its concurrency limit."""
        health = self.health[name]
        limit = self._limit[name]
        return not health.cooling(now) and (limit is None or health.in_flight < limit)

    def pick(
        self, candidates: Iterable[str], now: float, exclude: Iterable[str] = ()
    ) -> str | None:
        """The least loaded available candidate not in *exclude* (``None``: none)."""
        skip = set(exclude) if exclude else ()
        health, limits, weights = self.health, self._limit, self._weight
        best: str | None = None
        best_load = math.inf
        for name in candidates:  # every routed request: available() inlined
            if name in skip:
                continue
            state = health[name]
            limit = limits[name]
            if now < state.cooling_until or (limit is not None and state.in_flight >= limit):
                continue
            load = state.in_flight / weights[name]
            if load < best_load:
                best, best_load = name, load
        return best

    def soonest(self, candidates: Iterable[str], exclude: Iterable[str] = ()) -> str | None:
        """The candidate (not in *exclude*) whose cooldown ends first."""
        skip = set(exclude)
        rest = [n for n in candidates if n not in skip]
        return min(rest, key=lambda n: self.health[n].cooling_until) if rest else None

    def began(self, name: str) -> None:
        self.health[name].in_flight += 1

    def ended(self, name: str) -> None:
        health = self.health[name]
        health.in_flight = max(0, health.in_flight - 1)

    def succeeded(self, name: str) -> None:
        """A reply that is not a failure: the cooldown is over, the count starts over."""
        health = self.health[name]
        health.failures = 0
        health.cooling_until = 0.0

    def failed(self, name: str, failure: Failure, now: float) -> float:
        """Put *name* into cooldown for *failure*; the cooldown's seconds."""
        health = self.health[name]
        health.failures += 1
        options = self.options
        if failure.retry_after is not None:
            seconds = min(failure.retry_after, options.cooldown_max)
        else:
            seconds = min(options.cooldown * 2 ** (health.failures - 1), options.cooldown_max)
        health.cooling_until = max(health.cooling_until, now + seconds)
        health.next_probe = now + options.probe_interval
        return seconds

    # -- recovery probes ------------------------------------------------------------------

    def due_probes(self, now: float) -> list[str]:
        """The upstreams in cooldown whose probe is due (each then marked as probing)."""
        if self.options.probe_interval <= 0:
            return []
        due = []
        for name, health in self.health.items():
            if health.cooling(now) and not health.probing and now >= health.next_probe:
                health.probing = True
                due.append(name)
        return due

    def probed(self, name: str, ok: bool, now: float) -> None:
        """A probe's answer: a healthy upstream leaves its cooldown at once."""
        health = self.health[name]
        health.probing = False
        health.next_probe = now + self.options.probe_interval
        if ok:
            self.succeeded(name)


def first(dispatcher: Dispatcher, plan: Plan, now: float) -> Attempt:
    """The first attempt of *plan*: the least loaded available candidate, else the one whose
    cooldown ends first."""
    name = dispatcher.pick(plan.candidates, now)
    if name is None:
        name = dispatcher.soonest(plan.candidates)
        assert name is not None, "a route names at least one upstream"
    plan.tried.append(name)
    return Attempt(name)


def retarget(
    dispatcher: Dispatcher, plan: Plan, failure: Failure, *, started: bool, now: float
) -> Attempt | GiveUp:
    """THE failover point: the attempt on ``plan.current`` ended with *failure*; what next.

    The failed upstream goes into cooldown whatever follows (a failure a client sees is
    still one its upstream had). A next attempt only while no byte has reached the client
    (*started* false), for a failure another upstream may answer better, within
    ``max_attempts``: the same upstream after its short ``retry-after`` (once), else the
    least loaded available other candidate, else the one whose cooldown ends first. A
    timeout moves on only with ``failover_on_timeout``. Each cooldown set is kept in
    ``plan.cooled``.
    """
    current = plan.current
    assert current is not None, "retarget follows an attempt"
    if failure.retryable:
        plan.cooled[current] = now + dispatcher.failed(current, failure, now)
    if not failure.retryable:
        return GiveUp("not a failure another upstream can answer")
    options = dispatcher.options
    if failure.kind == "timeout" and not options.failover_on_timeout:
        return GiveUp("a timeout after the request may have been written")
    if started:
        return GiveUp("bytes reached the client")
    if plan.attempts >= options.max_attempts:
        return GiveUp("max_attempts")
    wait = failure.retry_after
    if wait is not None and wait <= options.retry_after_max and not plan.waited:
        plan.waited = True
        plan.tried.append(current)
        return Attempt(current, wait)
    name = dispatcher.pick(plan.candidates, now, exclude=plan.tried)
    if name is None:
        name = dispatcher.soonest(plan.candidates, exclude=plan.tried)
    if name is None:
        return GiveUp("no other upstream in the route")
    plan.tried.append(name)
    return Attempt(name)


def preference(dispatcher: Dispatcher, candidates: Iterable[str], now: float) -> list[str]:
    """*candidates* in the order balancing takes them: the available ones, least loaded
    first, then the rest, the one whose cooldown ends first first (a routed request near a
    window is placed on the first it fits: tpx.gateway.context.placement)."""
    names = list(dict.fromkeys(candidates))
    order: list[str] = []
    while (name := dispatcher.pick(names, now, exclude=order)) is not None:
        order.append(name)
    rest = [n for n in names if n not in order]
    return order + sorted(rest, key=lambda n: dispatcher.health[n].cooling_until)


def pass_over(dispatcher: Dispatcher, plan: Plan, now: float) -> Attempt | GiveUp:
    """The attempt :func:`retarget` chose goes to an upstream whose window the request does
    not fit (counted for that upstream): it is not sent there (not an attempt, no cooldown);
    the next candidate as :func:`retarget` picks it, the upstreams it does not fit left out,
    else none: the last attempt's outcome goes to the client."""
    name = plan.tried.pop()
    plan.unfit.add(name)
    skip = [*plan.tried, *plan.unfit]
    if plan.attempts >= dispatcher.options.max_attempts:
        return GiveUp("max_attempts")
    following = dispatcher.pick(plan.candidates, now, exclude=skip)
    if following is None:
        following = dispatcher.soonest(plan.candidates, exclude=skip)
    if following is None:
        return GiveUp("no other upstream of the route the request fits")
    plan.tried.append(following)
    return Attempt(following)
