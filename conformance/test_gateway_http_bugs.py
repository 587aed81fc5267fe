"""Bad machines for the HTTP replay: each seeded gateway bug (:mod:`conformance.gateway_bugs`)
patched into a real ``tpx serve`` process (:mod:`tpx.audit.serve`), the
replay run until its first failing behaviour, which must name the bug's property; and
(slow) the same through ``tpx serve --monitor``, which stops the bugs whose steps it sees
and cannot see the others (which call an id or a result is about, a request sent twice, a
refusal or a 500 the spec's variables cannot tell from a correct one)."""

from __future__ import annotations

import pytest

from conformance.gateway_bugs import GATEWAY_BUGS
from conformance.replay import Behaviour
from tpx.audit.behaviours import (
    RETRY,
    SHIPPED,
    SMALL,
    TWO_TOOLS,
    all_behaviours,
    cover_behaviours,
    mirror_graph,
)
from tpx.audit.harness import Harness
from tpx.audit.replay import HttpConformanceError, HttpReplayer
from tpx.oracle.model.gateway import Config

BUG = {bug.name: bug for bug in GATEWAY_BUGS}

#: bug -> (the cfg whose behaviours reach it soonest, edge cover or all, the properties named)
CASES: dict[str, tuple[Config, bool, tuple[str, ...]]] = {
    # two conversations with tool rounds: the shipped cfg's cover
    "ids_leak": (SHIPPED, True, ("NoCrossPairing",)),
    # an id never issued, refused with no obligations (ANTHROPIC: TPX's translator refuses it)
    "unissued_id": (SMALL, False, ("PairingInv",)),
    "selection_drift": (SMALL, False, ("SelectionInv", "SelectionStable")),
    # the exchange refuses its own framing: a correct turn refused (a CallerAbort's state)
    "retry_dup": (RETRY, False, ("Refinement",)),
    # a retry of a turn carrying tool_results needs MaxTurns = 3
    "retry_loses_obligation": (RETRY, False, ("PairingInv",)),
    # parallel calls: one conversation, two tool ids
    "results_reversed": (TWO_TOOLS, False, ("Binding",)),
    "ids_permuted": (TWO_TOOLS, False, ("Binding",)),
    "results_in_order": (TWO_TOOLS, False, ("Refinement",)),
    # a history with two tool rounds needs three turns (the ANTHROPIC boots first)
    "earlier_results_dropped": (RETRY, False, ("Binding",)),
    "resend_on_5xx": (SMALL, False, ("OneRequest",)),
    # two conversations of one session in flight together
    "session_guard": (SMALL, False, ("Refinement",)),
}


def test_every_seeded_gateway_bug_has_a_case() -> None:
    assert set(CASES) == set(BUG)
    for name, (_, _, props) in CASES.items():
        assert BUG[name].replay == props[0]


#: bug -> {property: what may stand for it}: ``session_guard`` frees a session when the
#: gateway's handler returns, which may come after the client has its answer, so the 500
#: may meet the conversation's next request, a CallerAbort's (``Refusal``: 500, not 400)
STANDS_FOR: dict[str, dict[str, frozenset[str]]] = {
    "session_guard": {"Refinement": frozenset({"Refinement", "Refusal"})},
}


def _named(name: str, prop: str, caught: HttpConformanceError) -> bool:
    """*caught* names *prop* (or what may stand for it in *name*'s replay)."""
    accepted = STANDS_FOR.get(name, {}).get(prop, frozenset({prop}))
    return bool(accepted & set(caught.violated))


#: bugs of one provider: its boots' behaviours are replayed first (the first failure sooner)
ANTHROPIC_FIRST = frozenset({"earlier_results_dropped"})


def _behaviours(name: str) -> list[Behaviour]:
    config, cover, _ = CASES[name]
    graph = mirror_graph(config)
    behaviours = cover_behaviours(graph) if cover else all_behaviours(graph)
    if name in ANTHROPIC_FIRST:  # Select: a key boots ANTHROPIC
        behaviours.sort(key=lambda b: not b.init["hasKey"])
    return behaviours


@pytest.mark.parametrize("name", sorted(CASES))
def test_http_replay_catches_the_seeded_bug(http_harness: Harness, name: str) -> None:
    config, _, props = CASES[name]
    behaviours = _behaviours(name)
    replayer = HttpReplayer(http_harness, config, bug=name)

    def until_the_first_failure() -> None:
        for i, behaviour in enumerate(behaviours):
            replayer.replay(behaviour, i)

    try:
        with pytest.raises(HttpConformanceError) as caught:
            until_the_first_failure()
    finally:
        replayer.close()
        http_harness.stop_gateways(name)
    for prop in props:
        assert _named(name, prop, caught.value), str(caught.value)
    assert caught.value.step > 0


def _first_failure(
    harness: Harness, name: str, *, monitor: bool = False, streaming: bool = False
) -> tuple[HttpConformanceError, int, dict[str, int], int]:
    """The replay of *name*'s case until its first failing behaviour: the error, that
    behaviour's index, the monitor's violations by property and the steps it checked
    (``/metrics``)."""
    config = CASES[name][0]
    behaviours = _behaviours(name)
    replayer = HttpReplayer(harness, config, bug=name, monitor=monitor, streaming=streaming)
    try:
        for i, behaviour in enumerate(behaviours):
            try:
                replayer.replay(behaviour, i)
            except HttpConformanceError as caught:
                return caught, i, replayer.monitor_violations(), replayer.monitor_steps()
        raise AssertionError(f"{name}: no behaviour failed")
    finally:
        replayer.close()
        harness.stop_gateways(name)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(CASES))
def test_the_monitor_over_http_stops_what_it_can_see(http_harness: Harness, name: str) -> None:
    """The same replays through ``tpx serve --monitor``. A bug whose steps the monitor sees
    (``property``) is stopped there: the monitor counts a violation and the replay fails
    at that behaviour's step, or sooner, than without the monitor (the client got the
    monitor's 500, not the step's output). The others (which call an id or a result is
    about, a request sent twice, a refusal or a 500 where the spec's variables look
    alike) the monitor cannot see: it counts nothing, and the replay still catches them
    (where first can follow timing: ``session_guard`` frees a session when the gateway's
    handler returns, which may come after the client has its answer)."""
    bug = BUG[name]
    plain, plain_at, _, _ = _first_failure(http_harness, name, monitor=False)
    caught, at, violations, steps = _first_failure(http_harness, name, monitor=True)
    if bug.property:
        # (which property it names first follows the interleaving: the in-process live
        # tests, conformance/test_gateway_bugs_live.py, pin it)
        assert sum(violations.values()) >= 1, str(caught)
        assert (at, caught.step) <= (plain_at, plain.step), (str(caught), str(plain))
    else:
        assert steps > 0  # the monitor ran
        assert violations == {}, violations
        assert _named(name, bug.replay, caught), str(caught)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(CASES))
def test_http_replay_catches_the_seeded_bug_streamed(http_harness: Harness, name: str) -> None:
    """Every request streamed: each bug is caught the same way."""
    caught, _, _, _ = _first_failure(http_harness, name, streaming=True)
    assert _named(name, CASES[name][2][0], caught), str(caught)
