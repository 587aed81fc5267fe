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

from conformance.failover_gateway import FailoverGateway, metrics
from conformance.failover_replay import FailoverError, FailoverReplayer, Modes
from conformance.pool_upstreams import PoolUpstreams
from tpx.oracle.behaviours import Behaviour, Coverage
from tpx.oracle.model.gateway import Config
from tpx.oracle.values import Record

__all__ = ["ONE", "Outcome", "replay", "steps_where"]

ONE = Config.of(1, 1, 1, upstreams=2, max_attempts=2, preflight=True)
_VIOLATIONS = "tpx_gateway_monitor_violations_total"


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
        violations: dict[str, int] = {}
        for (name, labels), value in samples.items():
            if name == _VIOLATIONS and value:
                prop = labels.split('"')[1]
                violations[prop] = violations.get(prop, 0) + int(value)
        monitor_steps = int(samples.get(("tpx_gateway_monitor_steps_total", ""), 0))
    finally:
        await replayer.aclose()
        await asyncio.to_thread(gw.stop)
        await upstreams.close()
    return Outcome(error, at, violations, monitor_steps, replayer.steps, seconds, gw.output())


def steps_where(
    behaviours: Sequence[Behaviour], wanted: Callable[[str, Record], bool]
) -> list[Behaviour]:
    """*behaviours* with those having a step (action, the state before it) *wanted* first."""

    def has(b: Behaviour) -> bool:
        states = b.states()
        return any(wanted(a, states[i]) for i, (a, _) in enumerate(b.steps))

    return sorted(behaviours, key=lambda b: not has(b))
