"""The gateway mirror's reachable graph equals TLC's dump, state for state and edge for
edge, and its figures equal TLC's; TLC's refinement check passes exactly when the
gateway's differences are switched off."""

from __future__ import annotations

from pathlib import Path

import pytest

from tpx.oracle.model.gateway import Config, explore
from tpx.oracle.tlc import dump_graph, run_tlc
from tpx.oracle.values import ModelValue, TLAValue

from .conftest import (
    CFG,
    DEEP_CFG,
    FAILOVER_CFG,
    REFINEMENT_CFG,
    REFINEMENT_DEEP_CFG,
    SPEC,
    mvs,
    write_cfg,
)

CASES: dict[str, tuple[Path, dict[str, TLAValue]]] = {
    "shipped": (CFG, {}),
    "refinement": (REFINEMENT_CFG, {}),
    "convs3-turns1-named-providers": (
        CFG,
        {
            "Convs": mvs("alice", "bob", "carol"),
            "MaxTurns": 1,
            "ANTHROPIC": ModelValue("anth"),
            "TPX": ModelValue("oai"),
            "NONE": ModelValue("nobody"),
        },
    ),
    "convs1-turns3-ids2": (CFG, {"Convs": mvs("solo"), "MaxTurns": 3, "ToolIds": mvs("a", "b")}),
    "keys2": (CFG, {"MaxKeys": 2}),  # Rotate, retired keys: 5,372 states
    # attempts, failover, first byte, preflight: one conversation, a retried turn
    "failover-convs1-turns3": (FAILOVER_CFG, {"Convs": mvs("solo"), "MaxTurns": 3}),
    "preflight": (CFG, {"Preflight": True}),
}

SLOW_CASES: dict[str, tuple[Path, dict[str, TLAValue]]] = {
    "ids2-inflight1": (CFG, {"ToolIds": mvs("read", "grep"), "MaxInFlight": 1}),
    "convs3": (CFG, {"Convs": mvs("c1", "c2", "c3")}),  # 43,669 states
    "failover": (FAILOVER_CFG, {}),  # the shipped failover cfg: 19,183 states
}


def _compare(base: Path, constants: dict[str, TLAValue], tmp_path: Path) -> None:
    cfg_path = write_cfg(tmp_path / "TpxGateway.cfg", base, **constants) if constants else base
    config = Config.from_cfg(cfg_path)
    tlc = dump_graph(SPEC, cfg_path)
    mirror = explore(config, keep_graph=True)
    assert mirror.ok
    assert mirror.graph is not None
    assert tlc.state_set() == mirror.graph.states
    assert frozenset(tlc.states[fp] for fp in tlc.initial) == mirror.graph.initial
    assert tlc.labelled_edges() == mirror.graph.edges
    # every successor TLC generates is one edge (no action yields a duplicate successor)
    assert len(mirror.graph.edges) == mirror.generated - mirror.initial


@pytest.mark.tlc
@pytest.mark.parametrize("case", list(CASES))
def test_gateway_mirror_graph_equals_tlc_dump(case: str, tmp_path: Path) -> None:
    base, constants = CASES[case]
    _compare(base, constants, tmp_path)


@pytest.mark.tlc
@pytest.mark.slow
@pytest.mark.parametrize("case", list(SLOW_CASES))
def test_gateway_mirror_graph_equals_tlc_dump_slow(case: str, tmp_path: Path) -> None:
    base, constants = SLOW_CASES[case]
    _compare(base, constants, tmp_path)


@pytest.mark.tlc
@pytest.mark.parametrize(
    "cfg", [CFG, REFINEMENT_CFG, FAILOVER_CFG], ids=["shipped", "refinement", "failover"]
)
def test_tlc_figures_equal_the_mirrors(cfg: Path) -> None:
    tlc = run_tlc(SPEC, cfg, workers=1)
    assert tlc.ok, tlc.verdict
    mirror = explore(Config.from_cfg(cfg))
    assert (tlc.initial, tlc.generated, tlc.distinct, tlc.depth) == (
        mirror.initial,
        mirror.generated,
        mirror.distinct,
        mirror.depth,
    )


@pytest.mark.tlc
@pytest.mark.slow
@pytest.mark.parametrize("cfg", [DEEP_CFG, REFINEMENT_DEEP_CFG], ids=["deep", "refinement-deep"])
def test_tlc_figures_equal_the_mirrors_on_the_deep_cfgs(cfg: Path) -> None:
    """`make tlc`'s cfgs (912,933 and 224,713 states): the mirror reaches the same
    figures, every property holding (the graphs are too large to dump and compare)."""
    tlc = run_tlc(SPEC, cfg, workers=1)
    assert tlc.ok, tlc.verdict
    mirror = explore(Config.from_cfg(cfg))
    assert mirror.ok
    assert (tlc.initial, tlc.generated, tlc.distinct, tlc.depth) == (
        mirror.initial,
        mirror.generated,
        mirror.distinct,
        mirror.depth,
    )


@pytest.mark.tlc
def test_tlc_refinement_fails_with_the_gateway_differences_on(tmp_path: Path) -> None:
    """Refinement is not vacuous: with GatewayRetry = TRUE, TLC finds a step that is no
    seed step (an action-property violation, exit 13)."""
    cfg = write_cfg(tmp_path / "TpxGateway.cfg", REFINEMENT_CFG, GatewayRetry=True)
    result = run_tlc(SPEC, cfg, workers=1)
    assert result.exit_code == 13
    assert not result.ok
    assert [step.action for step in result.trace] == ["Init", "CallerAbort"]
    # TLC names the conjunct of Refinement by its location in the spec
    line = next(
        i
        for i, text in enumerate(SPEC.read_text().splitlines(), 1)
        if "[][\\A c \\in Convs : [Seed(c)!Next]" in text
    )
    assert f"line {line}" in str(result.verdict)
