"""The HTTP replay of ``spec/TpxGatewayFailover.cfg`` (:mod:`conformance.failover_replay`):
behaviours of the mirror's graph, cut to what a correct ``tpx serve`` with ``[[upstreams]]``
can be made to do and seen through the upstream variables
(:mod:`conformance.failover_behaviours`), driven over HTTP through scripted fake upstreams.

``make test`` replays every behaviour of the cfg with one conversation (seconds); the edge
cover of the failover cfg itself, through ``tpx serve --monitor``, is ``slow`` (``make
conformance-http``). Each covers 100% of its cut view's states and edges, and prints its
coverage and time."""

from __future__ import annotations

import pytest

from conformance.failover_behaviours import FAILOVER, Plan, failover_plan, project
from conformance.failover_run import ONE, replay
from conformance.replay import COVERAGE_REPORTS
from tpx.oracle.behaviours import Coverage, complete_behaviours


def _covered(plan: Plan, coverage: Coverage) -> tuple[int, int]:
    """The mirror's TPX-boot realizable states and edges whose observed view was covered."""
    states = sum(1 for i in plan.kept_states if project(plan.full.states[i]) in coverage.states)
    edges = sum(
        1
        for a, b, label in plan.kept_edges
        if (project(plan.full.states[a]), project(plan.full.states[b]), label) in coverage.edges
    )
    return states, edges


def _report(name: str, plan: Plan, coverage: Coverage, seconds: float, steps: int) -> None:
    """Print and keep the figures; every realizable state and edge of the mirror covered."""
    summary = coverage.summary()
    figures = plan.figures()
    states, edges = _covered(plan, coverage)
    summary["name"] = (
        f"{name}: {seconds:.1f} s, {steps} HTTP steps; the mirror's "
        f"{figures['mirror states']} states / {figures['mirror edges']} edges, "
        f"{states} / {edges} of them (every TPX-boot realizable one) covered through the view"
    )
    COVERAGE_REPORTS.append(summary)
    print(summary)
    assert (states, edges) == (len(plan.kept_states), len(plan.kept_edges))


def test_one_conversation_every_behaviour_over_http() -> None:
    """The failover cfg with one conversation: every behaviour of its cut view, every step's
    observed upstream variables equal to the spec's, through ``--monitor`` (no violation)."""
    plan = Plan(ONE)
    behaviours = complete_behaviours(plan.graph)
    assert len(behaviours) > 50
    coverage = Coverage(
        "gateway HTTP failover, one conversation, all",
        len(plan.graph.states),
        len(plan.graph.edges),
        len(behaviours),
    )
    outcome = replay(ONE, behaviours, monitor=True, coverage=coverage)
    assert outcome.error is None, f"{outcome.error}\n{outcome.output}"
    assert outcome.violations == {}
    assert outcome.monitor_steps > 0
    _report(coverage.name, plan, coverage, outcome.seconds, outcome.steps)
    assert len(coverage.states) == len(plan.graph.states)
    assert len(coverage.edges) == len(plan.graph.edges)
    labels = {label for _, _, label in coverage.edges}
    assert {"Failover", "Resend", "FirstByte", "Recover", "UpstreamAccept"} <= labels


@pytest.mark.slow
def test_failover_cfg_edge_cover_over_http_through_the_monitor() -> None:
    """spec/TpxGatewayFailover.cfg (two conversations, two upstreams, two attempts, the
    preflight): a minimum edge cover of its cut view, through ``tpx serve --monitor``."""
    plan = failover_plan()
    assert plan.config == FAILOVER
    behaviours = plan.behaviours()
    coverage = Coverage(
        "gateway HTTP failover, TpxGatewayFailover.cfg, edge cover, --monitor",
        len(plan.graph.states),
        len(plan.graph.edges),
        len(behaviours),
    )
    outcome = replay(FAILOVER, behaviours, monitor=True, coverage=coverage)
    assert outcome.error is None, f"{outcome.error}\n{outcome.output}"
    assert outcome.violations == {}
    _report(coverage.name, plan, coverage, outcome.seconds, outcome.steps)
    assert len(coverage.states) == len(plan.graph.states)
    assert len(coverage.edges) == len(plan.graph.edges)
