"""Seeded bugs of the pool's failover (:mod:`tpx.gateway.pool`, :mod:`tpx.gateway.dispatch`),
each a step ``spec/TpxGateway.tla`` does not allow among a request's upstream attempts, so
``tpx serve --monitor`` must stop it at that step, before it reaches an upstream:

* ``failover_after_the_first_byte`` -- the failover point forgets that a byte reached the
  client: a stream that breaks after its first event is sent to another upstream
  (``Failover`` is not enabled once ``fwd`` is 1: ``Next``);
* ``resent_after_sending`` -- a connection lost after the request was written fails over
  (every failure taken as one another upstream may answer better): the upstream it leaves
  may be generating (OneGeneration, at the ``Failover``);
* ``timeout_fails_over`` -- a timeout fails over although ``failover_on_timeout`` is off
  (OneGeneration, at the ``Failover``);
* ``resent_to_the_same`` -- a connection lost after the request was written is sent to the
  same upstream again (``Resend`` is enabled only while the request reached nothing:
  ``Next``);
* ``lost_cooldown`` -- the cooldown is computed but never kept: the upstream that just failed
  is chosen for the next request at once, while its cooldown runs (``NewRequest`` to an
  upstream that is not healthy: ``Next``).

And one the monitor cannot see (:data:`UNSEEN_POOL_BUGS`): ``hedged_attempt`` -- an attempt
past ``first_byte_timeout`` is left running (not cancelled): the pool's reports say the
attempt ended, so only its upstream, still holding the request, shows it.

``replay`` names the property the HTTP replay of the failover cfg
(:mod:`conformance.failover_replay`, without ``--monitor``) reports first, from what the
clients and the upstreams saw; through ``--monitor`` it reports the monitor's ``property``
at the step the monitor stopped. ``failover_after_the_first_byte`` has none: the gateway
never moves a stream that began, so the bug changes no byte on the wire and only the
monitor, shown the ``Failover`` the failover point chose, sees it
(``conformance/test_failover_http_bugs.py``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Any

import attrs
import pytest

from tpx.gateway import dispatch
from tpx.gateway import pool as pool_module

__all__ = ["POOL_BUGS", "UNSEEN_POOL_BUGS", "PoolBug"]

Patch = Callable[[pytest.MonkeyPatch], None]


@attrs.frozen
class PoolBug:
    name: str
    property: str
    """the property ``tpx serve --monitor`` names"""
    action: str
    """the step it stops"""
    patch: Patch
    replay: str = ""
    """the property the HTTP replay without ``--monitor`` names first ("": it passes)"""

    @contextmanager
    def active(self) -> Iterator[None]:
        with pytest.MonkeyPatch.context() as mp:
            self.patch(mp)
            yield


def _failover_after_the_first_byte(mp: pytest.MonkeyPatch) -> None:
    def retarget(*args: Any, started: bool, now: float) -> Any:
        return dispatch.retarget(*args, started=False, now=now)

    mp.setattr(pool_module, "retarget", retarget)


def _resent_after_sending(mp: pytest.MonkeyPatch) -> None:
    mp.setattr(dispatch.Failure, "retryable", property(lambda self: True))


def _timeout_fails_over(mp: pytest.MonkeyPatch) -> None:
    def retarget(d: dispatch.Dispatcher, *args: Any, **kwargs: Any) -> Any:
        d.options = attrs.evolve(d.options, failover_on_timeout=True)
        return dispatch.retarget(d, *args, **kwargs)

    mp.setattr(pool_module, "retarget", retarget)


def _resent_to_the_same(mp: pytest.MonkeyPatch) -> None:
    def retarget(
        d: dispatch.Dispatcher, plan: dispatch.Plan, failure: dispatch.Failure, **kwargs: Any
    ) -> Any:
        if failure.kind == "network" and plan.current is not None:  # "a transient drop"
            plan.tried.append(plan.current)
            return dispatch.Attempt(plan.current)
        return dispatch.retarget(d, plan, failure, **kwargs)

    mp.setattr(pool_module, "retarget", retarget)


def _lost_cooldown(mp: pytest.MonkeyPatch) -> None:
    failed = dispatch.Dispatcher.failed

    def forgetting(self: dispatch.Dispatcher, name: str, failure: Any, now: float) -> float:
        seconds = failed(self, name, failure, now)
        self.health[name].cooling_until = 0.0
        return seconds

    mp.setattr(dispatch.Dispatcher, "failed", forgetting)


def _hedged_attempt(mp: pytest.MonkeyPatch) -> None:
    async def within(opening: Awaitable[Any], timeout: float | None) -> Any:
        task = asyncio.ensure_future(opening)
        done, _ = await asyncio.wait({task}, timeout=timeout)
        if not done:
            raise TimeoutError
        return task.result()

    mp.setattr(pool_module, "_within", within)


POOL_BUGS: tuple[PoolBug, ...] = (
    PoolBug("failover_after_the_first_byte", "Next", "Failover", _failover_after_the_first_byte),
    PoolBug(
        "resent_after_sending", "OneGeneration", "Failover", _resent_after_sending, "Refinement"
    ),
    PoolBug("timeout_fails_over", "OneGeneration", "Failover", _timeout_fails_over, "Refinement"),
    PoolBug("resent_to_the_same", "Next", "Resend", _resent_to_the_same, "Refinement"),
    PoolBug("lost_cooldown", "Next", "NewRequest", _lost_cooldown, "Refinement"),
)

UNSEEN_POOL_BUGS: tuple[PoolBug, ...] = (
    PoolBug("hedged_attempt", "", "", _hedged_attempt, "OneGeneration"),
)
