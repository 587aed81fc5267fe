"""Every behaviour TLC can reach, replayed through the real transport, checked step by step."""

from __future__ import annotations

from collections import Counter, defaultdict
from pathlib import Path

import httpx2
import pytest

from conformance.fakes import (
    FAILURE_KINDS,
    ID_STYLES,
    LOOPBACK_FAILURE_KINDS,
    MID_STREAM_FAILURE_KINDS,
    OPENAI,
    STREAM_FAILURE_KINDS,
    STREAM_LAYOUTS,
    FakeProvider,
    LoopbackServer,
)
from conformance.replay import (
    COVERAGE_REPORTS,
    SEED_CFG,
    SPEC,
    Behaviour,
    Coverage,
    Replayer,
    behaviour_from_trace,
    cfg_with,
    count_complete_behaviours,
    edge_cover,
    edge_cover_certificate,
    edge_cover_lower_bound,
    tlc_graph,
)
from conformance.shapes import MESSAGES_FLAGS, OPENAI_FLAGS, OPENAI_STREAM_SHAPES
from tpx.oracle.model import Config
from tpx.oracle.tlc import StateGraph, simulate
from tpx.oracle.values import ModelValue

SEED = Config.of(2, 3)


def _is_antichain(graph: StateGraph, chosen: frozenset[tuple[int, int, str]]) -> bool:
    """No behaviour takes two of *chosen*: no chosen edge's head reaches a chosen tail."""
    succ: dict[int, list[int]] = defaultdict(list)
    for a, b, label in graph.edges:
        if label != "Halted":
            succ[a].append(b)
    tails = {a for a, _, _ in chosen}
    memo: dict[int, bool] = {}

    def reaches_tail(v: int) -> bool:
        if v not in memo:
            memo[v] = v in tails or any(reaches_tail(w) for w in succ[v])
        return memo[v]

    return not any(reaches_tail(b) for _, b, _ in chosen)


@pytest.mark.tlc
def test_seed_has_466_complete_behaviours(
    seed_graph: StateGraph, seed_behaviours: list[Behaviour]
) -> None:
    assert len(seed_graph.states) == 361
    assert len(seed_behaviours) == count_complete_behaviours(seed_graph) == 466
    assert len(set(seed_behaviours)) == 466
    for b in seed_behaviours:
        last = b.steps[-1]
        assert last[0] == "Halted"
        assert (last[1]["phase"], last[1]["turn"]) == ("idle", 3)
        assert b.enabled[-1] == {"Halted"}


@pytest.mark.tlc
def test_replay_every_seed_behaviour(
    seed_graph: StateGraph, seed_behaviours: list[Behaviour]
) -> None:
    coverage = Coverage("seed ToolIds={t1,t2} MaxTurns=3 (all behaviours)", 361, 574, 466)
    replayer = Replayer(SEED, coverage=coverage)
    assert replayer.replay_all(seed_behaviours) == 466
    replayer.close()
    COVERAGE_REPORTS.append(coverage.summary())
    assert coverage.states == seed_graph.state_set()
    assert coverage.edges == seed_graph.labelled_edges()
    assert len(seed_graph.edges) == 574
    # every failure kind, abort style, provider and foreign-id style was exercised
    kinds = {k for k in replayer.used if k.startswith("fail:")}
    assert kinds == {f"fail:{k}" for k in FAILURE_KINDS}
    assert {k for k in replayer.used if k.startswith("abort:")} == {
        "abort:silent",
        "abort:partial",
        "abort:unknown",
        "abort:duplicate",
    }
    assert {k for k in replayer.used if k.startswith("provider:")} == {
        "provider:ANTHROPIC",
        "provider:TPX",
        "provider:NONE",
    }
    used = replayer.used
    assert {k.removeprefix("ids:") for k in used if k.startswith("ids:")} == set(ID_STYLES[OPENAI])
    # every foreign-id style met replies with tool calls; every shape flag was drawn (the
    # streamed ones through create(stream=true)'s path)
    assert {k.removeprefix("tpx:ids:") for k in used if k.startswith("tpx:ids:")} == set(
        ID_STYLES[OPENAI]
    )
    assert {k.removeprefix("tpx:flag:") for k in used if k.startswith("tpx:flag:")} == set(
        OPENAI_FLAGS
    )
    assert {
        k.removeprefix("anthropic:flag:") for k in used if k.startswith("anthropic:flag:")
    } == set(MESSAGES_FLAGS)
    # the exchange methods the transports never call were driven too
    for drive in (
        "CallerSend:send_bytes",
        "CallerAbort:send_bytes",
        "CallerAbort:abort",
        "Deliver:deliver_bytes",
        "CallerSend:begin",
        "CallerAbort:begin",
        "Deliver:finish",
    ):
        assert used[f"drive:{drive}"] > 0, drive
    assert used["plain:stream"] > 0  # create(stream=true)'s path: a stream read whole
    # requests the exchange cannot take were refused without a step
    assert {k for k in used if k.startswith("malformed:")} == {
        "malformed:id",
        "malformed:messages",
        "malformed:json",
    }


@pytest.mark.tlc
def test_replay_every_seed_behaviour_streamed(
    seed_graph: StateGraph, seed_behaviours: list[Behaviour]
) -> None:
    """The same 466 behaviours, every exchange through ``Transport.stream``."""
    coverage = Coverage("seed ToolIds={t1,t2} MaxTurns=3 (all behaviours, streamed)", 361, 574, 466)
    replayer = Replayer(SEED, coverage=coverage, streaming=True)
    assert replayer.failure_kinds == STREAM_FAILURE_KINDS
    assert replayer.replay_all(seed_behaviours) == 466
    replayer.close()
    COVERAGE_REPORTS.append(coverage.summary())
    assert coverage.states == seed_graph.state_set()
    assert coverage.edges == seed_graph.labelled_edges()
    used = replayer.used
    # every exchange went through stream(): one per CallerSend / CallerAbort / NoProvider /
    # Halted step, and every ProviderReply's wire body was an event stream
    steps = Counter(a for b in seed_behaviours for a, _ in b.steps)
    for action in ("CallerSend", "CallerAbort", "NoProvider", "Halted"):
        assert used[f"streamed:{action}"] == steps[action]
    assert used["reply:streamed"] == steps["ProviderReply"] > 0
    kinds = {k.removeprefix("fail:") for k in used if k.startswith("fail:")}
    assert kinds == set(STREAM_FAILURE_KINDS)
    assert {k.removeprefix("layout:") for k in used if k.startswith("layout:")} == set(
        STREAM_LAYOUTS
    )
    assert {k.removeprefix("ids:") for k in used if k.startswith("ids:")} == set(ID_STYLES[OPENAI])
    # every stream shape and flag met the replay
    assert {k.removeprefix("tpx:shape:") for k in used if k.startswith("tpx:shape:")} >= set(
        OPENAI_STREAM_SHAPES
    )
    assert {k.removeprefix("tpx:flag:") for k in used if k.startswith("tpx:flag:")} == set(
        OPENAI_FLAGS
    )
    assert {
        k.removeprefix("anthropic:flag:") for k in used if k.startswith("anthropic:flag:")
    } == set(MESSAGES_FLAGS)
    assert used["caller_close:first"]
    assert used["caller_close:late"]


@pytest.mark.tlc
def test_streamed_loopback_subset_over_real_sockets(seed_behaviours: list[Behaviour]) -> None:
    """20 behaviours streamed over real HTTP on 127.0.0.1: chunked bodies, one flushed chunk
    per piece; a dropped connection is a cut-off chunked body."""
    picked = seed_behaviours[5::23][:20]
    anthropic, tpx = FakeProvider("messages"), FakeProvider("openai", "spaces")
    with (
        LoopbackServer.serving(anthropic) as a_srv,
        LoopbackServer.serving(tpx) as t_srv,
        httpx2.Client(timeout=10.0) as client,
    ):
        replayer = Replayer(
            SEED,
            anthropic=anthropic,
            tpx=tpx,
            client=client,
            anthropic_url=a_srv.url,
            tpx_url=t_srv.url + "/v1",
            failure_kinds=LOOPBACK_FAILURE_KINDS + MID_STREAM_FAILURE_KINDS,
            streaming=True,
        )
        for i, b in enumerate(picked):
            replayer.replay(b, i * 23 + 5)
    used = replayer.used
    assert used["provider:ANTHROPIC"]
    assert used["provider:TPX"]
    assert used["reply:streamed"] >= 20
    assert {k.removeprefix("fail:") for k in used if k.startswith("fail:")} & set(
        MID_STREAM_FAILURE_KINDS
    )


@pytest.mark.tlc
def test_seed_edge_cover_is_minimum(seed_graph: StateGraph) -> None:
    cover = edge_cover(seed_graph)
    certificate = edge_cover_certificate(seed_graph)
    assert len(cover) == len(certificate) == 157
    assert _is_antichain(seed_graph, certificate)  # so no cover has fewer than 157
    assert edge_cover_lower_bound(seed_graph) <= len(cover)
    edges = {e for b in cover for e in b.edges()}
    assert edges == seed_graph.labelled_edges()
    coverage = Coverage("seed edge cover", 361, 574, 157)
    replayer = Replayer(SEED, coverage=coverage)
    replayer.replay_all(cover)
    replayer.close()
    assert coverage.edges == seed_graph.labelled_edges()


@pytest.mark.tlc
@pytest.mark.parametrize("streaming", [False, True], ids=["plain", "streamed"])
def test_edge_cover_ids3(streaming: bool) -> None:
    """ToolIds={t1,t2,t3}, MaxTurns=3: the minimum edge cover (three parallel calls meet
    every id style and stream shape), plain and streamed, in the fast suite."""
    graph = tlc_graph(3, 3)
    cover = edge_cover(graph)
    assert len(graph.states) == 1189
    assert len(cover) == len(edge_cover_certificate(graph)) == 601
    config = Config(frozenset(ModelValue(f"t{i}") for i in range(1, 4)), 3)
    coverage = Coverage(
        "ToolIds={t1,t2,t3} MaxTurns=3 (minimum edge cover" + (", streamed)" if streaming else ")"),
        len(graph.states),
        len(graph.edges),
        count_complete_behaviours(graph),
    )
    replayer = Replayer(config, coverage=coverage, streaming=streaming)
    assert replayer.replay_all(cover) == 601
    replayer.close()
    COVERAGE_REPORTS.append(coverage.summary())
    assert coverage.states == graph.state_set()
    assert coverage.edges == graph.labelled_edges()
    shapes = {k.removeprefix("tpx:shape:") for k in replayer.used if k.startswith("tpx:shape:")}
    assert shapes >= (set(OPENAI_STREAM_SHAPES) if streaming else {"json"})


@pytest.mark.tlc
def test_simulated_traces_replay() -> None:
    traces = simulate(SPEC, SEED_CFG, num=6, depth=14, seed=20240601)
    assert len(traces) == 6
    replayer = Replayer(SEED)
    behaviours = [behaviour_from_trace(tr, SEED) for tr in traces]
    assert replayer.replay_all(behaviours) == 6
    replayer.close()
    assert replayer.steps_done == sum(len(b.steps) for b in behaviours) >= 6 * 9


@pytest.mark.tlc
def test_loopback_subset_over_real_sockets(seed_behaviours: list[Behaviour]) -> None:
    """20 behaviours through real HTTP on 127.0.0.1 (ephemeral ports, server threads)."""
    picked = seed_behaviours[::23][:20]
    assert len(picked) == 20
    anthropic, tpx = FakeProvider("messages"), FakeProvider("openai", "mistral")
    with (
        LoopbackServer.serving(anthropic) as a_srv,
        LoopbackServer.serving(tpx) as t_srv,
        httpx2.Client(timeout=10.0) as client,
    ):
        replayer = Replayer(
            SEED,
            anthropic=anthropic,
            tpx=tpx,
            client=client,
            anthropic_url=a_srv.url,
            tpx_url=t_srv.url + "/v1",
            failure_kinds=LOOPBACK_FAILURE_KINDS,
        )
        for i, b in enumerate(picked):
            replayer.replay(b, i * 23)
    assert replayer.used["provider:ANTHROPIC"]
    assert replayer.used["provider:TPX"]
    assert sum(n for k, n in replayer.used.items() if k.startswith("fail:")) >= 5
    used_kinds = {k.removeprefix("fail:") for k in replayer.used if k.startswith("fail:")}
    assert used_kinds <= set(LOOPBACK_FAILURE_KINDS)
    assert len(used_kinds) >= 4


@pytest.mark.tlc
@pytest.mark.slow
def test_edge_cover_ids4_turns6_streamed() -> None:
    """The ToolIds={t1..t4}, MaxTurns=6 minimum edge cover, every exchange streamed."""
    graph = tlc_graph(4, 6)
    cover = edge_cover(graph)
    config = Config(frozenset(ModelValue(f"t{i}") for i in range(1, 5)), 6)
    coverage = Coverage(
        "ToolIds={t1..t4} MaxTurns=6 (minimum edge cover, streamed)",
        len(graph.states),
        len(graph.edges),
        count_complete_behaviours(graph),
    )
    replayer = Replayer(config, coverage=coverage, streaming=True)
    assert replayer.replay_all(cover) == len(cover)
    replayer.close()
    COVERAGE_REPORTS.append(coverage.summary())
    assert coverage.states == graph.state_set()
    assert coverage.edges == graph.labelled_edges()
    assert {k.removeprefix("fail:") for k in replayer.used if k.startswith("fail:")} == set(
        STREAM_FAILURE_KINDS
    )


@pytest.mark.tlc
@pytest.mark.slow
def test_edge_cover_ids4_turns6(tmp_path: Path) -> None:
    graph = tlc_graph(4, 6)
    assert len(graph.states) == 11_632
    cover = edge_cover(graph)
    certificate = edge_cover_certificate(graph)
    assert len(cover) == len(certificate)  # minimum
    assert _is_antichain(graph, certificate)
    total = count_complete_behaviours(graph)
    config = Config(frozenset(ModelValue(f"t{i}") for i in range(1, 5)), 6)
    coverage = Coverage(
        "ToolIds={t1..t4} MaxTurns=6 (minimum edge cover)",
        len(graph.states),
        len(graph.edges),
        total,
    )
    replayer = Replayer(config, coverage=coverage)
    replayer.replay_all(cover)
    replayer.close()
    COVERAGE_REPORTS.append(coverage.summary())
    assert coverage.states == graph.state_set()
    assert coverage.edges == graph.labelled_edges()
    assert cfg_with(tmp_path, MaxTurns=6).exists()
