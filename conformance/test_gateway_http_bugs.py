"""Bad machines for the HTTP replay: each seeded gateway bug (:mod:`conformance.gateway_bugs`)
patched into a real ``tpx serve`` process (:mod:`conformance.gateway_http.serve`), the
replay run until its first failing behaviour, which must name the bug's property."""

from __future__ import annotations

import pytest

from conformance.gateway_bugs import GATEWAY_BUGS
from conformance.gateway_http.behaviours import (
    RETRY,
    SHIPPED,
    SMALL,
    TWO_TOOLS,
    all_behaviours,
    cover_behaviours,
    mirror_graph,
)
from conformance.gateway_http.harness import Harness
from conformance.gateway_http.replay import HttpConformanceError, HttpReplayer
from tpx.model.gateway import Config

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
    # a history with two tool rounds needs three turns
    "earlier_results_dropped": (RETRY, False, ("Binding",)),
    "resend_on_5xx": (SMALL, False, ("OneRequest",)),
    # two conversations of one session in flight together
    "session_guard": (SMALL, False, ("Refinement",)),
}


def test_every_seeded_gateway_bug_has_a_case() -> None:
    assert set(CASES) == set(BUG)
    for name, (_, _, props) in CASES.items():
        assert BUG[name].replay == props[0]


@pytest.mark.parametrize("name", sorted(CASES))
def test_http_replay_catches_the_seeded_bug(http_harness: Harness, name: str) -> None:
    config, cover, props = CASES[name]
    graph = mirror_graph(config)
    behaviours = cover_behaviours(graph) if cover else all_behaviours(graph)
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
        assert prop in caught.value.violated, str(caught.value)
    assert caught.value.step > 0
