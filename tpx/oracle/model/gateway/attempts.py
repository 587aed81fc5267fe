"""The gateway spec's upstream steps read on one conversation: what the live monitor checks
of a request's attempts, upstreams and first byte.

``spec/TpxGateway.tla`` with ``UpstreamSteps = TRUE`` gives each conversation ``c`` the
variables ``up[c]``, ``attempts[c]``, ``reached[c]``, ``gens[c]``, ``fwd[c]`` and shares
``health`` among them. :class:`Attempts` holds the five of one conversation, each action
here returns the one successor the spec's action allows at ``c`` (``None``: not enabled),
and :class:`AttemptMonitor` runs them for every live request, with the shared health. The
other 13 variables do not change on these steps (they are stutters of
:mod:`~tpx.oracle.model.gateway.conversation`, which checks the exchange itself).
``tests/oracle/model/gateway/test_gateway_attempts.py`` checks that these functions are the
mirror's (:mod:`~tpx.oracle.model.gateway.actions`) on every edge of the failover cfg.

==================================  =====================================
spec/TpxGateway.tla                 here
==================================  =====================================
up, attempts, reached, gens, fwd    :class:`Attempts` (at one ``c``)
health                              :attr:`AttemptMonitor.health`
Healthy, Route(c)                   :func:`Healthy`
NewRequest(c)                       :func:`NewRequest`
UpstreamAccept(c)                   :func:`UpstreamAccept`
Resend(c)                           :func:`Resend`
Failover(c)                         :func:`Failover`
FirstByte(c)                        :func:`FirstByte`
Recover                             :meth:`AttemptMonitor.recover`
OneGeneration, NoDuplicateDelivery  :func:`OneGeneration`, :func:`NoDuplicateDelivery`
FailoverBeforeFirstByte             :func:`FailoverBeforeFirstByte`
==================================  =====================================
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Mapping
from typing import NamedTuple

__all__ = [
    "INVARIANTS",
    "AttemptMonitor",
    "Attempts",
    "Failover",
    "FailoverBeforeFirstByte",
    "FirstByte",
    "Healthy",
    "NewRequest",
    "NoDuplicateDelivery",
    "OneGeneration",
    "Resend",
    "UpstreamAccept",
]

#: ``NONE``: no attempt yet (``up[c]`` before the first send).
NONE = "NONE"


class Attempts(NamedTuple):
    """``<<up[c], attempts[c], reached[c], gens[c], fwd[c]>>``."""

    up: Hashable
    attempts: int
    reached: bool
    gens: int
    fwd: int


#: ``Init`` at ``c``.
INIT = Attempts(NONE, 0, False, 0, 0)


def Healthy(health: Mapping[Hashable, bool]) -> frozenset[Hashable]:
    """``Healthy``: the healthy upstreams, all of them when none is."""
    healthy = frozenset(u for u, ok in health.items() if ok)
    return healthy or frozenset(health)


def NewRequest(s: Attempts, u: Hashable, health: Mapping[Hashable, bool]) -> Attempts | None:
    """``NewRequest(c)`` with the witness *u* of ``\\E u \\in Route(c)`` (UpstreamSteps)."""
    ok = health.get(u)
    if not ok and (ok is None or any(health.values())):  # u not in Healthy(health)
        return None
    return Attempts(u, 1, False, 0, 0)


def UpstreamAccept(s: Attempts) -> Attempts | None:
    if s.reached or s.up == NONE:
        return None
    return s._replace(reached=True, gens=s.gens + 1)


def Resend(s: Attempts, max_attempts: int) -> Attempts | None:
    if s.reached or s.up == NONE or s.attempts >= max_attempts:
        return None
    return s._replace(attempts=s.attempts + 1, reached=False)


def Failover(
    s: Attempts, u: Hashable, health: Mapping[Hashable, bool], max_attempts: int
) -> Attempts | None:
    """``Failover(c)`` with the witness *u* (the new upstream); the caller marks ``s.up``
    unhealthy (``health' = [health EXCEPT ![up[c]] = FALSE]``)."""
    if (
        s.up == NONE
        or s.fwd != 0
        or s.attempts >= max_attempts
        or u == s.up
        or not health.get(u, False)
    ):
        return None
    return Attempts(u, s.attempts + 1, False, s.gens - 1 if s.reached else s.gens, s.fwd)


def FirstByte(s: Attempts) -> Attempts | None:
    if not s.reached or s.fwd != 0:
        return None
    return s._replace(fwd=s.fwd + 1)


def OneGeneration(s: Attempts) -> bool:
    return s.gens <= 1


def NoDuplicateDelivery(s: Attempts) -> bool:
    return s.fwd <= 1


def FailoverBeforeFirstByte(s: Attempts, t: Attempts) -> bool:
    """On a step of an exchange in flight s -> t: the upstream changes only while no
    reply's first byte reached the client."""
    return t.up == s.up or s.fwd == 0


#: The invariants of the upstream variables at one conversation, in the cfg's order.
INVARIANTS: tuple[tuple[str, Callable[[Attempts], bool]], ...] = (
    ("OneGeneration", OneGeneration),
    ("NoDuplicateDelivery", NoDuplicateDelivery),
)

#: A failed check: the property and why.
Failure = tuple[str, str]
#: How many legal steps :class:`AttemptMonitor` remembers (few: the states of one
#: request's attempts over a route's upstreams).
_LEGAL = 1024
#: The last step :meth:`AttemptMonitor.answered` took and its failure.
Answered = tuple[str, Failure | None]


class AttemptMonitor:
    """The upstream steps of every live request, checked against the spec (pure; one per
    gateway process, under its monitor's lock).

    Upstreams are named by any hashable; an upstream first seen is healthy. ``max_attempts``
    is MaxAttempts (``None``: unbounded). Each method returns ``None`` for a step the spec
    allows (and takes it) or the first failure ``(property, message)``; the request's
    attempts are then forgotten (:meth:`stop`)."""

    def __init__(self, *, max_attempts: int | None = None) -> None:
        self.max_attempts = 2**62 if max_attempts is None else max_attempts
        self.health: dict[Hashable, bool] = {}
        self._live: dict[Hashable, Attempts] = {}
        self._steps: dict[Hashable, list[tuple[str, Attempts]]] = {}
        #: the steps :meth:`answered` took from a healthy upstream, by upstream
        self._answered: dict[tuple[Hashable, bool], tuple[tuple[str, Attempts], ...]] = {}
        #: the legal steps taken so far that are a function of the state they leave
        #: (UpstreamAccept, FirstByte, Resend: see :meth:`_known`), by action and state
        self._legal: dict[tuple[str, Hashable], Attempts] = {}

    def state(self, key: Hashable) -> Attempts:
        return self._live.get(key, INIT)

    def trace(self, key: Hashable) -> tuple[tuple[str, Attempts], ...]:
        return tuple(self._steps.get(key, ()))

    def close(self, key: Hashable) -> None:
        self._live.pop(key, None)
        self._steps.pop(key, None)

    def stop(self, key: Hashable, action: str, s: Attempts) -> None:
        """A step was stopped: the request's attempts are forgotten, its trace keeps the
        stopped step (read it with :meth:`trace` until :meth:`close` or the next send)."""
        self._live.pop(key, None)
        self._steps.setdefault(key, []).append((action, s))

    def _take(self, key: Hashable, action: str, s: Attempts, t: Attempts | None) -> Failure | None:
        if t is None:
            self.stop(key, action, s)
            return "Next", f"{action} is not enabled in {_show(s)}"
        if not FailoverBeforeFirstByte(s, t):
            self.stop(key, action, t)
            return "FailoverBeforeFirstByte", f"{action} leaves {s.up!r} after a reply's first byte"
        for name, invariant in INVARIANTS:
            if not invariant(t):
                self.stop(key, action, t)
                return name, f"{action} leads to {_show(t)}"
        self._live[key] = t
        self._steps.setdefault(key, []).append((action, t))
        return None

    def send(self, key: Hashable, upstream: Hashable) -> Failure | None:
        """A new client request's first attempt goes to *upstream* (CallerSend, Retry).
        To a healthy upstream the step is ``<<u, 1, FALSE, 0, 0>>`` whatever the others'
        health (:meth:`answered`): taken again as checked the first time."""
        health = self.health
        ok = health.setdefault(upstream, True)
        self._steps.pop(key, None)
        s = INIT
        if ok is True:
            t = self._legal.get(("NewRequest", upstream))
            if t is not None:
                self._live[key] = t
                self._steps[key] = [("NewRequest", t)]
                return None
        failure = self._take(key, "NewRequest", s, NewRequest(s, upstream, health))
        if failure is None and ok is True:
            legal = self._legal
            if len(legal) >= _LEGAL:
                legal.clear()
            legal["NewRequest", upstream] = self._live[key]
        return failure

    def answered(self, key: Hashable, upstream: Hashable, *, first_byte: bool) -> Answered:
        """:meth:`send`, :meth:`accept` and, with *first_byte*, :meth:`first_byte` at once (a
        request whose upstream answered it): the last step taken and its failure, if any.

        With *upstream* healthy the three steps are a function of *upstream* alone (its
        NewRequest is ``<<u, 1, FALSE, 0, 0>>`` whatever the other upstreams' health), so
        the steps checked the first time are remembered and taken again as they are."""
        memo = (upstream, first_byte)
        if self.health.get(upstream) is True:
            steps = self._answered.get(memo)
            if steps is not None:
                self._live[key] = steps[-1][1]
                self._steps[key] = [*steps]
                return steps[-1][0], None
        action, failure = "NewRequest", self.send(key, upstream)
        if failure is None:
            action, failure = "UpstreamAccept", self.accept(key)
        if failure is None and first_byte:
            action, failure = "FirstByte", self.first_byte(key)
        if failure is None and self.health.get(upstream) is True:
            self._answered[memo] = tuple(self._steps[key])
        return action, failure

    def _known(self, key: Hashable, action: str, s: Attempts) -> bool:
        """Take *action* from *s* again when it was taken before: UpstreamAccept, FirstByte
        and Resend are functions of the state they leave (and the constant MaxAttempts),
        and so are their checks (``Next``, FailoverBeforeFirstByte, the invariants), so a
        legal step from *s* is the same legal step again. ``False``: not taken from *s*
        yet (nothing changed)."""
        t = self._legal.get((action, s))
        if t is None:
            return False
        self._live[key] = t
        self._steps.setdefault(key, []).append((action, t))
        return True

    def _learn(self, action: str, s: Attempts, failure: Failure | None, key: Hashable) -> None:
        """Remember the step *action* just took from *s* when it was legal (bounded)."""
        if failure is None:
            legal = self._legal
            if len(legal) >= _LEGAL:
                legal.clear()
            legal[action, s] = self._live[key]

    def accept(self, key: Hashable) -> Failure | None:
        """The request's bytes reached its upstream (UpstreamAccept)."""
        s = self.state(key)
        if self._known(key, "UpstreamAccept", s):
            return None
        failure = self._take(key, "UpstreamAccept", s, UpstreamAccept(s))
        self._learn("UpstreamAccept", s, failure, key)
        return failure

    def resend(self, key: Hashable) -> Failure | None:
        """The request is sent again to the same upstream on a fresh connection (Resend)."""
        s = self.state(key)
        if self._known(key, "Resend", s):
            return None
        failure = self._take(key, "Resend", s, Resend(s, self.max_attempts))
        self._learn("Resend", s, failure, key)
        return failure

    def failover(self, key: Hashable, upstream: Hashable) -> Failure | None:
        """The request moves to *upstream*; the one it leaves cools down (Failover)."""
        self.health.setdefault(upstream, True)
        s = self.state(key)
        t = Failover(s, upstream, self.health, self.max_attempts)
        failure = self._take(key, "Failover", s, t)
        if failure is None:
            self.health[s.up] = False
        return failure

    def first_byte(self, key: Hashable) -> Failure | None:
        """The first byte of the upstream's reply went to the client (FirstByte)."""
        s = self.state(key)
        if self._known(key, "FirstByte", s):
            return None
        failure = self._take(key, "FirstByte", s, FirstByte(s))
        self._learn("FirstByte", s, failure, key)
        return failure

    def recover(self, upstreams: Iterable[Hashable]) -> None:
        """Cooling-down upstreams passed their recovery probe (Recover, once each)."""
        for u in upstreams:
            if self.health.get(u) is False:
                self.health[u] = True


def _show(s: Attempts) -> str:
    return f"[up={s.up}, attempts={s.attempts}, reached={s.reached}, gens={s.gens}, fwd={s.fwd}]"
