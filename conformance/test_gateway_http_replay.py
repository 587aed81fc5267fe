"""The gateway spec's behaviours replayed through real ``tpx serve`` processes over HTTP
(:mod:`tpx.audit`): every behaviour of two small cfgs, every second one
streamed (part of ``make test``); the same all plain and all streamed, a minimum edge
cover of the shipped cfg plain and streamed, and one of a larger cfg (``slow``: ``make
conformance``). Each must cover 100% of its graph's states and edges, every step's
observed state equal to the spec's, every id, call and result on both wires about the call it
should be (every round), and the bodies (Claude Code's shape, above the tail cache's threshold)
through the gateway's tail cache."""

from __future__ import annotations

import pytest

from conformance.replay import COVERAGE_REPORTS, Behaviour, Coverage
from tpx.audit.behaviours import (
    RETRY,
    SHIPPED,
    SMALL,
    TWO_TOOLS,
    all_behaviours,
    count_complete_behaviours,
    cover_behaviours,
    edge_cover_certificate,
    mirror_graph,
)
from tpx.audit.harness import Harness
from tpx.audit.replay import HttpReplayer
from tpx.oracle.model.gateway import Config
from tpx.oracle.tlc import StateGraph

LARGER = Config.of(2, 2, 2, 2)


MODES = {"plain": False, "streamed": True}


def _replay_all(
    harness: Harness,
    name: str,
    config: Config,
    graph: StateGraph,
    behaviours: list[Behaviour],
    streaming: bool | None = None,
) -> HttpReplayer:
    mode = {None: "every second streamed", False: "plain", True: "streamed"}[streaming]
    coverage = Coverage(
        f"{name} ({mode})", len(graph.states), len(graph.edges), count_complete_behaviours(graph)
    )
    replayer = HttpReplayer(harness, config, streaming=streaming)
    strays = len(harness.upstreams.strays)
    try:
        replayer.replay_all(behaviours, coverage)
        hits = replayer.tail_hits()
    finally:
        replayer.close()
    summary = coverage.summary()
    summary["name"] += f" (tail cache: {hits} of {replayer.requests} bodies)"
    COVERAGE_REPORTS.append(summary)
    # every body but the first two of each tail (plain, streamed) per process went through
    # the tail cache's reuse path
    assert hits >= replayer.requests - 4 * len(replayer.gateways) > 0
    assert len(harness.upstreams.strays) == strays  # every upstream request was a conversation's
    assert len(coverage.states) == len(graph.states)
    assert len(coverage.edges) == len(graph.edges)
    assert coverage.behaviours == len(behaviours)
    return replayer


def test_small_cfg_every_behaviour_over_http(http_harness: Harness) -> None:
    """Convs = {c1, c2}, ToolIds = {t1}, MaxTurns = 1, MaxInFlight = 2: all 644 behaviours
    (196 states, 437 edges), both conversations in flight together wherever the spec allows."""
    graph = mirror_graph(SMALL)
    behaviours = all_behaviours(graph)
    assert len(behaviours) == count_complete_behaviours(graph) == 644
    replayer = _replay_all(http_harness, "gateway HTTP, small cfg, all", SMALL, graph, behaviours)
    assert replayer.overlaps > 0  # a request sent while the other conversation is in flight


def test_retry_cfg_every_behaviour_over_http(http_harness: Harness) -> None:
    """One conversation, ToolIds = {t1}, MaxTurns = 3: all 766 behaviours, retries of turns
    that carry tool_results among them (210 states, 397 edges; a refusal is one edge per
    way the request is wrong)."""
    graph = mirror_graph(RETRY)
    behaviours = all_behaviours(graph)
    assert len(behaviours) == 766
    with_results = [
        b
        for b in behaviours
        if any(a == "Retry" and s["reqIds"][RETRY.Convs[0]] for a, s in b.steps)
    ]
    assert with_results
    _replay_all(http_harness, "gateway HTTP, retry cfg, all", RETRY, graph, behaviours)


def test_two_tools_cfg_every_behaviour_over_http(http_harness: Harness) -> None:
    """One conversation, ToolIds = {t1, t2}, MaxTurns = 2: all 202 behaviours, replies with
    two parallel calls answered in either order (the binding of each result to its call)."""
    graph = mirror_graph(TWO_TOOLS)
    behaviours = all_behaviours(graph)
    assert len(behaviours) == 202
    _replay_all(http_harness, "gateway HTTP, two tools cfg, all", TWO_TOOLS, graph, behaviours)


@pytest.mark.slow
@pytest.mark.parametrize("mode", sorted(MODES))
def test_small_cfgs_every_behaviour_in_each_mode(http_harness: Harness, mode: str) -> None:
    cfgs = (("small cfg, all", SMALL), ("retry cfg, all", RETRY), ("two tools cfg, all", TWO_TOOLS))
    for name, config in cfgs:
        graph = mirror_graph(config)
        _replay_all(
            http_harness, f"gateway HTTP, {name}", config, graph, all_behaviours(graph), MODES[mode]
        )


@pytest.mark.slow
@pytest.mark.parametrize("mode", sorted(MODES))
def test_shipped_cfg_edge_cover_over_http(http_harness: Harness, mode: str) -> None:
    """spec/TpxGateway.cfg: a minimum edge cover (2,084 behaviours: proven minimum by its
    min-flow certificate) of 2,251 states and 6,402 edges."""
    graph = mirror_graph(SHIPPED)
    behaviours = cover_behaviours(graph)
    assert len(behaviours) == len(edge_cover_certificate(graph))
    replayer = _replay_all(
        http_harness,
        "gateway HTTP, TpxGateway.cfg, edge cover",
        SHIPPED,
        graph,
        behaviours,
        MODES[mode],
    )
    assert replayer.overlaps > 0


@pytest.mark.slow
def test_larger_cfg_edge_cover_over_http(http_harness: Harness) -> None:
    """Convs = {c1, c2}, ToolIds = {t1, t2}, MaxTurns = 2, MaxInFlight = 2: a minimum edge
    cover (12,928 behaviours) of 13,611 states and 35,498 edges (parallel tool calls,
    answered in either order), every second behaviour streamed."""
    graph = mirror_graph(LARGER)
    behaviours = cover_behaviours(graph)
    assert len(behaviours) == len(edge_cover_certificate(graph))
    _replay_all(
        http_harness,
        "gateway HTTP, 2 tool ids, edge cover",
        LARGER,
        graph,
        behaviours,
    )


@pytest.mark.slow
def test_small_cfgs_streamed_with_pings(http_harness: Harness) -> None:
    """The small cfgs, streamed, through gateways pinging after 5 ms of upstream silence:
    ``ping`` events (before ``message_start`` too, and before a failure's ``error`` event)
    change nothing the spec sees."""
    for name, config in (("small cfg, all", SMALL), ("retry cfg, all", RETRY)):
        graph = mirror_graph(config)
        behaviours = all_behaviours(graph)
        replayer = HttpReplayer(http_harness, config, streaming=True, ping_interval=0.005)
        coverage = Coverage(name, len(graph.states), len(graph.edges), len(behaviours))
        try:
            replayer.replay_all(behaviours, coverage)
        finally:
            replayer.close()
        summary = coverage.summary()  # how many answers carry pings follows timing: reported
        summary["name"] = (
            f"gateway HTTP, {name} (streamed, pings every 5 ms: {replayer.pinged} answers pinged)"
        )
        COVERAGE_REPORTS.append(summary)
        assert len(coverage.states) == len(graph.states)
        assert len(coverage.edges) == len(graph.edges)


@pytest.mark.slow
def test_small_cfgs_through_the_monitor(http_harness: Harness) -> None:
    """The small cfgs through ``tpx serve --monitor``: the monitor passes every exchange
    (no violation counted), and the replay's checks all hold."""
    cfgs = (("small cfg, all", SMALL), ("retry cfg, all", RETRY), ("two tools cfg, all", TWO_TOOLS))
    for name, config in cfgs:
        graph = mirror_graph(config)
        behaviours = all_behaviours(graph)
        replayer = HttpReplayer(http_harness, config, streaming=None, monitor=True)
        coverage = Coverage(name, len(graph.states), len(graph.edges), len(behaviours))
        try:
            replayer.replay_all(behaviours, coverage)
            violations = replayer.monitor_violations()
            steps = replayer.monitor_steps()
        finally:
            replayer.close()
        summary = coverage.summary()
        summary["name"] = f"gateway HTTP, {name} (every second streamed, --monitor)"
        COVERAGE_REPORTS.append(summary)
        assert steps > 0  # the monitor checked the exchanges' steps
        assert violations == {}
        assert len(coverage.states) == len(graph.states)
        assert len(coverage.edges) == len(graph.edges)
