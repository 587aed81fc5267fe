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

from conformance.failover_behaviours import project, realizable
from conformance.failover_gateway import FailoverGateway, metrics, violations
from conformance.failover_replay import FailoverError, FailoverReplayer, Modes
from conformance.pool_upstreams import PoolUpstreams
from tpx.oracle.behaviours import Behaviour, Coverage
from tpx.oracle.model.gateway import Config, Init, Next, State
from tpx.oracle.values import Record

__all__ = ["ONE", "Outcome", "replay", "shortest", "steps_where"]

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


def shortest(config: Config, wanted: Callable[[str, Record], bool]) -> tuple[Behaviour, int]:
    """The shortest behaviour of *config*'s cut view with a step (action, the state before
    it) *wanted*, and that step's number (1-based): the fewest steps from the TPX boot to
    such a step, then the fewest on to an end, walked through the mirror's ``Next`` (no
    graph explored; ties broken in ``Next``'s order, so the choice is deterministic)."""
    succ: dict[State, list[tuple[str, State]]] = {}

    def steps(s: State) -> list[tuple[str, State]]:
        if s not in succ:
            record = s.as_record()
            succ[s] = [
                (label, t)
                for label, t in Next(s, config)
                if realizable(record, t.as_record(), label, config)
            ]
        return succ[s]

    def hits(s: State) -> list[tuple[str, State]]:
        return [(lb, t) for lb, t in steps(s) if lb != "Halted" and wanted(lb, s.as_record())]

    def ends(s: State) -> bool:
        return all(lb == "Halted" for lb, _ in steps(s)) and bool(steps(s))

    boot = [s for s in Init(config) if s.hasToken and not s.hasKey]
    there = _fewest(steps, boot, lambda s: bool(hits(s)))
    there.append(hits(there[-1][1])[0])
    on = _fewest(steps, [there[-1][1]], ends)
    path = [*there, *on[1:]]
    records = [project(s.as_record()) for _, s in path]
    enabled = tuple(frozenset(lb for lb, _ in steps(s)) for _, s in path)
    moves = tuple((lb, r) for (lb, _), r in zip(path[1:], records[1:], strict=True))
    behaviour = Behaviour(records[0], (*moves, ("Halted", records[-1])), (*enabled, enabled[-1]))
    return behaviour, len(there) - 1


def _fewest(
    steps: Callable[[State], list[tuple[str, State]]],
    starts: list[State],
    goal: Callable[[State], bool],
) -> list[tuple[str, State]]:
    """A shortest path from one of *starts* to a *goal* state, none of its steps a
    ``Halted``: (``""``, its start), then its (action, state) steps."""
    back: dict[State, tuple[str, State] | None] = {s: None for s in starts}
    todo = list(starts)
    for s in todo:  # breadth first: *todo* grows as it is read
        if goal(s):
            out: list[tuple[str, State]] = []
            step = back[s]
            while step is not None:
                out.append((step[0], s))
                s = step[1]
                step = back[s]
            return [("", s), *reversed(out)]
        for label, t in steps(s):
            if label != "Halted" and t not in back:
                back[t] = (label, s)
                todo.append(t)
    raise ValueError("no behaviour of the cut view has the step wanted")
