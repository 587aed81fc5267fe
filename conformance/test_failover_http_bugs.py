"""The seeded pool bugs (:mod:`conformance.pool_bugs`) against the HTTP replay of
``spec/TpxGatewayFailover.cfg`` (:mod:`conformance.failover_replay`): each bug, patched into
a real ``tpx serve`` with ``[[upstreams]]``, is replayed over the shortest behaviour that
reaches it (:func:`conformance.failover_run.shortest`), without and with ``--monitor``.

* Without the monitor the replay fails at the bug's first wrong step or sooner, naming
  ``PoolBug.replay`` from what the clients and the upstreams saw (a bug with no ``replay``
  changes no byte on the wire: the replay passes, and only the monitor sees it).
* With ``--monitor`` the monitor stops the step: the replay fails there, naming
  ``PoolBug.property``, and the monitor's violation counter names it too (a bug the monitor
  cannot see: the replay names ``PoolBug.replay``, the counter nothing).
* The unpatched gateway passes every one of these behaviours, with no violation.

Every wait is for an event of the scripted upstreams or the client, except where a timeout
is the subject: ``first_byte_timeout`` (the gateway's own, with the upstream holding the
request) and, for a request the gateway leaves running (``hedged_attempt``), the replay's
bound on an ended request's close."""

from __future__ import annotations

from collections.abc import Callable
from functools import cache

import attrs
import pytest

from conformance.failover_replay import Modes
from conformance.failover_run import ONE, Outcome, replay, shortest
from conformance.pool_bugs import POOL_BUGS, UNSEEN_POOL_BUGS, PoolBug
from tpx.oracle.behaviours import Behaviour
from tpx.oracle.model.gateway import Config
from tpx.oracle.values import ModelValue, Record

C1 = ModelValue("c1")
#: the failover cfg with two conversations, one request in flight at a time: a second
#: request can start while the first one's upstream cools down
ONE_AT_A_TIME = Config.of(2, 1, 1, 1, upstreams=2, max_attempts=2, preflight=True)
#: the gateway's ``first_byte_timeout`` where an attempt is to time out (the upstream holds
#: it): long beside the replay's own steps before it
FIRST_BYTE_TIMEOUT = 1.5
#: how long a request may take to close after the gateway's timeout ended its attempt
ENDED_S = 2.0


@attrs.frozen
class Reach:
    """The behaviour that reaches a bug: the first step *wanted* (action, the state before
    it) of *config*'s cut view, replayed in *modes*."""

    config: Config
    wanted: Callable[[str, Record], bool]
    modes: Modes = attrs.field(factory=Modes)
    first_byte_timeout: float = 600.0
    ended_s: float | None = None


def _after_first_byte(action: str, s: Record) -> bool:
    return action == "ProviderFail" and s["fwd"][C1] == 1


def _after_accept(action: str, s: Record) -> bool:
    return action == "ProviderFail" and bool(s["reached"][C1]) and s["fwd"][C1] == 0


def _one_healthy(action: str, s: Record) -> bool:
    return action == "CallerSend" and sum(s["health"].values()) == 1


REACH: dict[str, Reach] = {
    "broken after the first byte": Reach(ONE, _after_first_byte, Modes(broken="break")),
    "dropped once taken": Reach(ONE, _after_accept, Modes(accept="drop")),
    "timed out once sent": Reach(
        ONE,
        _after_accept,
        Modes(accept="timeout", stream_all=True),
        FIRST_BYTE_TIMEOUT,
        ENDED_S,
    ),
    "sent while one upstream cools": Reach(ONE_AT_A_TIME, _one_healthy),
}

BUGS: dict[str, tuple[PoolBug, str]] = {
    bug.name: (bug, reach)
    for bug, reach in zip(
        (*POOL_BUGS, *UNSEEN_POOL_BUGS),
        (
            "broken after the first byte",
            "dropped once taken",
            "timed out once sent",
            "dropped once taken",
            "sent while one upstream cools",
            "timed out once sent",
        ),
        strict=True,
    )
}


@cache
def _behaviour(reach: str) -> tuple[Behaviour, int]:
    """The reach's behaviour and the number of its wanted step."""
    r = REACH[reach]
    return shortest(r.config, r.wanted)


def _run(reach: str, bug: str | None, monitor: bool) -> tuple[Outcome, int]:
    r = REACH[reach]
    behaviour, at = _behaviour(reach)
    outcome = replay(
        r.config,
        [behaviour],
        bug=bug,
        monitor=monitor,
        modes=r.modes,
        first_byte_timeout=r.first_byte_timeout,
        ended_s=r.ended_s,
    )
    return outcome, at


def test_every_pool_bug_has_its_behaviour() -> None:
    assert [b.name for b in (*POOL_BUGS, *UNSEEN_POOL_BUGS)] == list(BUGS)
    assert BUGS["resent_to_the_same"][0].action == "Resend"
    for bug, _ in BUGS.values():
        assert bug.replay or bug.property, bug.name  # something names it


@pytest.mark.parametrize("reach", sorted(REACH))
def test_unpatched_gateway_passes(reach: str) -> None:
    """The same behaviours through the unpatched gateway and ``--monitor``: every step as
    the spec's, no violation."""
    outcome, _ = _run(reach, None, monitor=True)
    assert outcome.error is None, f"{outcome.error}\n{outcome.output}"
    assert outcome.violations == {}
    assert outcome.steps == len(_behaviour(reach)[0].steps)


@pytest.mark.parametrize("monitor", [False, True], ids=["replay", "monitor"])
@pytest.mark.parametrize("name", list(BUGS))
def test_pool_bug_caught_at_its_step(name: str, monitor: bool) -> None:
    bug, reach = BUGS[name]
    outcome, at = _run(reach, name, monitor)
    expected = (bug.property or bug.replay) if monitor else bug.replay
    if not expected:  # nothing on the wire shows it
        assert outcome.error is None, f"{outcome.error}\n{outcome.output}"
        assert outcome.violations == {}
        return
    error = outcome.error
    assert error is not None, f"{name} not caught\n{outcome.output}"
    assert outcome.at == 0
    assert 1 <= error.step <= at, str(error)
    assert error.violated[0] == expected, str(error)
    if monitor:
        assert set(outcome.violations) == ({bug.property} if bug.property else set())
    else:
        assert outcome.violations == {}
