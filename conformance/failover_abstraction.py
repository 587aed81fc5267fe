"""The abstraction of the HTTP failover replay (:mod:`conformance.failover_replay`): the
observed variables computed from what the clients and the scripted upstreams
(:mod:`conformance.pool_upstreams`) saw -- never from the gateway -- and the judgement of
each step against its behaviour.

After each step the observed variables must equal the behaviour's
(:data:`~conformance.failover_behaviours.OBSERVED`); ``OneGeneration`` (generations started
per client request), ``NoDuplicateDelivery`` and ``FailoverBeforeFirstByte`` are named when
the observed values break them, ``Refinement`` when they differ from the spec's.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator
from typing import Any

import attrs
import httpx2

from conformance.failover_behaviours import OBSERVED, project
from conformance.pool_upstreams import Arrival, PoolUpstreams
from tpx.oracle.model.gateway import Config
from tpx.oracle.values import Function, ModelValue, Record

__all__ = ["Abstraction", "Conv", "FailoverError"]

NONE = ModelValue("NONE")


class FailoverError(AssertionError):
    """A step of the replay failed: *violated* names the properties (first: the one to
    report), *step* and *action* the step (0: filled in by the replayer)."""

    def __init__(self, message: str, *, violated: list[str], step: int, action: str) -> None:
        super().__init__(message)
        self.violated = tuple(dict.fromkeys(violated))
        self.step = step
        self.action = action


@attrs.define(eq=False)
class Conv:
    """One conversation as its client saw it (its request, its answer so far)."""

    c: ModelValue
    key: str
    stream: bool
    request: str = "none"
    turn: int = 0
    outcome: str = "none"
    task: asyncio.Future[httpx2.Response] | None = None
    response: httpx2.Response | None = None
    chunks: AsyncIterator[bytes] | None = None
    body: bytes = b""
    first: bool = False
    gone: bool = False


class Abstraction:
    """The observed variables of a replay over *upstreams* for *config*."""

    def __init__(self, upstreams: PoolUpstreams, config: Config) -> None:
        self.upstreams = upstreams
        self.config = config
        #: upstream -> the arrival seq of its last healthy probe answer
        self.probed_at: dict[str, int] = {}

    def health(self, convs: dict[ModelValue, Conv]) -> dict[ModelValue, bool]:
        """An upstream is unhealthy once a request moved from it to another upstream, until
        it answers a recovery probe healthy."""
        moved: dict[str, int] = {}
        for cv in convs.values():
            arrivals = self.upstreams.arrivals.get(cv.key, [])
            for a, b in itertools.pairwise(arrivals):
                if a.upstream != b.upstream:
                    moved[a.upstream] = max(moved.get(a.upstream, 0), b.seq)
        return {
            u: moved.get(u.name, 0) <= self.probed_at.get(u.name, -1) or u.name not in moved
            for u in self.config.Upstreams
        }

    def observe(self, convs: dict[ModelValue, Conv]) -> Record:
        """The observed variables now (:data:`~conformance.failover_behaviours.OBSERVED`)."""
        per: dict[str, dict[ModelValue, Any]] = {
            n: {} for n in OBSERVED if n not in ("provider", "health")
        }
        for c, cv in convs.items():
            arrivals = self.upstreams.arrivals.get(cv.key, [])
            last = arrivals[-1] if arrivals else None

            def timed_out(a: Arrival, cv: Conv = cv, last: Arrival | None = last) -> bool:
                return a.closed and a.status is None and not (cv.gone and a is last)

            per["turn"][c] = cv.turn
            per["request"][c] = cv.request
            per["lastOutcome"][c] = cv.outcome
            if cv.task is None:
                per["phase"][c] = "idle"
            elif last is not None and last.complete:
                per["phase"][c] = "resp"
            else:
                per["phase"][c] = "req"
            per["up"][c] = ModelValue(last.upstream) if last else NONE
            per["attempts"][c] = len(arrivals)
            per["reached"][c] = bool(last and (last.taken or timed_out(last)))
            per["gens"][c] = sum(1 for a in arrivals if a.taken or timed_out(a))
            per["fwd"][c] = 1 if cv.first else 0
        record: dict[str, Any] = {
            "provider": self.config.TPX,
            "health": Function(self.health(convs)),
        }
        record.update({n: Function(v) for n, v in per.items()})
        return Record({n: record[n] for n in OBSERVED})

    def judge(
        self,
        convs: dict[ModelValue, Conv],
        before: Record | None,
        expected: Record,
        n: int,
        label: str,
        bug: str | None = None,
    ) -> None:
        """The observed variables after step *n* (*label*) must be the behaviour's
        (*expected*); *bug*: the gateway's seeded bug, named in the error."""
        observed = self.observe(convs)
        spec = project(expected)
        problems: list[tuple[str, str]] = []
        if any(g > 1 for g in observed["gens"].values()):
            problems.append(("OneGeneration", "two generations of one client request"))
        if any(f > 1 for f in observed["fwd"].values()):
            problems.append(("NoDuplicateDelivery", "a reply's first byte twice"))
        if before is not None:
            prior = project(before)
            for c in self.config.Convs:
                if prior["fwd"][c] and observed["up"][c] != prior["up"][c]:
                    problems.append(("FailoverBeforeFirstByte", f"{c} moved after its first byte"))
        for name in OBSERVED:
            if observed[name] != spec[name]:
                problems.append(
                    ("Refinement", f"{name}: observed {observed[name]}, spec {spec[name]}")
                )
        if problems:
            raise FailoverError(
                f"step {n} {label} (bug {bug}):\n  "
                + "\n  ".join(f"{p}: {m}" for p, m in problems),
                violated=[p for p, _ in problems],
                step=n,
                action=label,
            )
