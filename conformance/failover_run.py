"""One run of the HTTP failover replay: scripted upstreams started, a ``tpx serve`` over
them (a seeded bug, ``--monitor``, a ``first_byte_timeout`` as asked), behaviours replayed
in order until the first that fails; what came of it (:class:`Outcome`).

:data:`ONE` is the failover cfg with one conversation (its cut graph is small: every
behaviour of it is replayed by ``make test``); the failover cfg itself is
:data:`conformance.failover_behaviours.FAILOVER`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence

import attrs

from conformance.failover_gateway import FailoverGateway, metrics, violations
from conformance.failover_replay import FailoverError, FailoverReplayer, Modes
from conformance.pool_upstreams import PoolUpstreams
from tpx.oracle.behaviours import Behaviour, Coverage
from tpx.oracle.model.gateway import Config
from tpx.oracle.tlc import StateGraph
from tpx.oracle.values import Record

__all__ = ["ONE", "Outcome", "replay", "steps_where", "through"]

ONE = Config.of(1, 1, 1, upstreams=2, max_attempts=2, preflight=True)


@attrs.frozen
class Outcome:
    error: FailoverError | None
    at: int  #: the index of the failing behaviour (the number replayed when none failed)
    violations: dict[str, int]
    monitor_steps: int
    steps: int
    seconds: float
    output: str

    @property
    def where(self) -> tuple[int, int]:
        return (self.at, self.error.step if self.error else 0)


def replay(
    config: Config,
    behaviours: Sequence[Behaviour],
    *,
    bug: str | None = None,
    monitor: bool = False,
    modes: Modes | None = None,
    first_byte_timeout: float = 600.0,
    coverage: Coverage | None = None,
    ended_s: float | None = None,
    guard_s: float | None = None,
) -> Outcome:
    """Replay *behaviours* until the first that fails (*ended_s*, *guard_s*: the
    replayer's hang guards, lowered where a bug is expected)."""
    return asyncio.run(
        _replay(
            config,
            behaviours,
            bug,
            monitor,
            modes or Modes(),
            first_byte_timeout,
            coverage,
            ended_s,
            guard_s,
        )
    )


async def _replay(
    config: Config,
    behaviours: Sequence[Behaviour],
    bug: str | None,
    monitor: bool,
    modes: Modes,
    first_byte_timeout: float,
    coverage: Coverage | None,
    ended_s: float | None,
    guard_s: float | None,
) -> Outcome:
    upstreams = PoolUpstreams(tuple(u.name for u in config.Upstreams))
    await upstreams.start()
    urls = {n: u.url for n, u in upstreams.upstreams.items()}
    gw = await asyncio.to_thread(
        FailoverGateway.start,
        urls,
        bug=bug,
        monitor=monitor,
        first_byte_timeout=first_byte_timeout,
    )
    replayer = FailoverReplayer(upstreams, gw, config, modes)
    if ended_s is not None:
        replayer.ended_s = ended_s
    if guard_s is not None:
        replayer.guard_s = guard_s
    began = time.perf_counter()
    error: FailoverError | None = None
    at = len(behaviours)
    try:
        for i, behaviour in enumerate(behaviours):
            try:
                await replayer.replay(behaviour)
            except FailoverError as caught:
                error, at = caught, i
                break
            if coverage is not None:
                coverage.add(behaviour)
        seconds = time.perf_counter() - began
        samples = await metrics(replayer.http, gw)
        counted = violations(samples)
        monitor_steps = int(samples.get(("tpx_gateway_monitor_steps_total", ""), 0))
    finally:
        await replayer.aclose()
        await asyncio.to_thread(gw.stop)
        await upstreams.close()
    return Outcome(error, at, counted, monitor_steps, replayer.steps, seconds, gw.output())


def steps_where(
    behaviours: Sequence[Behaviour], wanted: Callable[[str, Record], bool]
) -> list[Behaviour]:
    """*behaviours* with those having a step (action, the state before it) *wanted* first."""

    def has(b: Behaviour) -> bool:
        states = b.states()
        return any(wanted(a, states[i]) for i, (a, _) in enumerate(b.steps))

    return sorted(behaviours, key=lambda b: not has(b))


def through(graph: StateGraph, wanted: Callable[[str, Record], bool]) -> tuple[Behaviour, int]:
    """The shortest complete behaviour of *graph* with a step (action, the state before it)
    *wanted*, and that step's number (1-based): the shortest way to a state with such a
    step, the step, then the shortest way on to an end (ties broken by the graph's order:
    the choice is deterministic)."""
    succ: dict[int, list[tuple[str, int]]] = {}
    labels: dict[int, set[str]] = {}
    for a, b, label in sorted(graph.edges):
        labels.setdefault(a, set()).add(label)
        if not (label == "Halted" and a == b):
            succ.setdefault(a, []).append((label, b))
    ends = {fp for fp in graph.states if fp not in succ and "Halted" in labels.get(fp, ())}

    def wanted_from(fp: int) -> list[tuple[str, int]]:
        return [(lb, b) for lb, b in succ.get(fp, []) if wanted(lb, graph.states[fp])]

    there = _shortest(succ, sorted(graph.initial), lambda fp: bool(wanted_from(fp)))
    there.append(wanted_from(there[-1][1])[0])
    on = _shortest(succ, [there[-1][1]], lambda fp: fp in ends)
    fps = [*there, *on[1:]]
    steps = [(label, graph.states[fp]) for label, fp in fps[1:]]
    steps.append(("Halted", graph.states[fps[-1][1]]))
    enabled = tuple(frozenset(labels.get(fp, ())) for _, fp in fps)
    behaviour = Behaviour(graph.states[fps[0][1]], tuple(steps), (*enabled, enabled[-1]))
    return behaviour, len(there) - 1


def _shortest(
    succ: dict[int, list[tuple[str, int]]], starts: list[int], goal: Callable[[int], bool]
) -> list[tuple[str, int]]:
    """A shortest path from one of *starts* to a *goal* state: (``""``, its start), then its
    (action, state) steps."""
    back: dict[int, tuple[str, int] | None] = {fp: None for fp in starts}
    todo = list(starts)
    for fp in todo:  # breadth first: *todo* grows as it is read
        if goal(fp):
            out: list[tuple[str, int]] = []
            step = back[fp]
            while step is not None:
                out.append((step[0], fp))
                fp = step[1]
                step = back[fp]
            return [("", fp), *reversed(out)]
        for label, b in succ.get(fp, []):
            if b not in back:
                back[b] = (label, fp)
                todo.append(b)
    raise ValueError("no behaviour of the graph has the step wanted")
