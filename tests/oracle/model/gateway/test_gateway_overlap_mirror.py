"""The mirror of spec/TpxGatewayOverlap.tla (:mod:`tpx.oracle.model.gateway.overlap`): its
header table, its registration, its figures and graph against TLC's, and each spec mutant
in spec/mutants/gateway/overlap rejected by the mirror and by TLC for the property it
names, TLC's counterexample a behaviour of the mirror's mutant."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from itertools import pairwise
from pathlib import Path

import attrs
import pytest

from tpx.cli import main
from tpx.errors import SpecConfigError
from tpx.oracle.model.common import subsets
from tpx.oracle.model.gateway import actions as gw
from tpx.oracle.model.gateway import overlap as O
from tpx.oracle.model.gateway.overlap import (
    OVERLAP,
    OverlapConfig,
    OverlapInit,
    OverlapState,
    explore,
)
from tpx.oracle.model.gateway.state import EXCEPT
from tpx.oracle.model.registry import check_mirrored, lookup
from tpx.oracle.tlc import dump_graph, load_cfg, run_tlc
from tpx.oracle.values import ModelValue, TLAValue

from .conftest import MUTANTS, ROOT, assert_one_change, mvs, write_cfg

SPEC = ROOT / "spec" / "TpxGatewayOverlap.tla"
CFG = SPEC.with_suffix(".cfg")
DEEP_CFG = ROOT / "spec" / "TpxGatewayOverlapDeep.cfg"
OVERLAP_MUTANTS = MUTANTS / "overlap"

ForkAction = Callable[[OverlapState, ModelValue, OverlapConfig], Iterator[OverlapState]]


def test_the_spec_table_names_the_right_lines_and_code() -> None:
    text = SPEC.read_text()
    lines = text.splitlines()
    rows = re.findall(r"^\(\*\s+(\d+)  (\S.*?)\s{2,}(overlap\.py)\s+(.*?)\s*\*\)$", text, re.M)
    assert len(rows) == 16
    for line, name, _, objects in rows:
        assert lines[int(line) - 1].startswith(name), (line, name)
        for obj in objects.split(","):
            assert hasattr(O, obj.strip()), obj


def test_the_overlap_spec_is_registered_and_shipped() -> None:
    assert lookup("TpxGatewayOverlap") is OVERLAP
    assert OVERLAP.invariants == tuple(n for n, _ in O.INVARIANTS)
    shipped = OVERLAP.spec_path.parent
    for name in ("TpxGatewayOverlap.tla", "TpxGatewayOverlap.cfg", "TpxGatewayOverlapDeep.cfg"):
        assert (shipped / name).read_bytes() == (ROOT / "spec" / name).read_bytes(), name
    checked = check_mirrored(SPEC)
    assert checked.mirror is OVERLAP
    assert checked.invariants[-4:] == (
        "ForkTypeOK",
        "OwnReplies",
        "ForkPairingInv",
        "ForkNoCrossPairing",
    )
    assert checked.properties[-1] == "RefinementUpToErrors"


def test_the_mirror_reaches_tlcs_figures_on_the_small_cfg() -> None:
    """TLC's figures (test_gateway_overlap_tlc.py checks TLC reaches them)."""
    result = explore(OverlapConfig.from_cfg(CFG))
    assert result.ok
    figures = (result.initial, result.generated, result.distinct, result.depth)
    assert figures == (4, 21789, 5812, 13)


def test_tpx_explore_runs_the_overlap_mirror(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["explore", str(SPEC)]) == 0
    out = capsys.readouterr().out
    assert "verdict    ok" in out
    assert "distinct   5,812\n" in out
    assert main(["check-trace", "--spec", str(SPEC), str(SPEC)]) == 2
    assert "tpx explore" in capsys.readouterr().err


@pytest.mark.parametrize("name", ["MutGwForkCrossedReply", "MutGwForkForeignIds"])
def test_explore_refuses_an_overlap_mutant(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The mirror explores only the spec it mirrors, a mutant not even under its name."""
    mutant = OVERLAP_MUTANTS / f"{name}.tla"
    renamed = tmp_path / "TpxGatewayOverlap.tla"
    renamed.write_text(mutant.read_text().replace(f"MODULE {name} ", "MODULE TpxGatewayOverlap "))
    (tmp_path / "TpxGatewayOverlap.cfg").write_text(CFG.read_text())
    for spec in (mutant, renamed):
        assert main(["explore", str(spec)]) == 2
        assert f"tpx tlc {spec}" in capsys.readouterr().err


def test_a_cfg_without_max_forks_is_refused(tmp_path: Path) -> None:
    cfg = tmp_path / "TpxGatewayOverlap.cfg"
    cfg.write_text(CFG.read_text().replace("    MaxForks = 1\n", ""))
    with pytest.raises(SpecConfigError, match="MaxForks"):
        OverlapConfig.from_cfg(cfg)


GRAPH_CASES: dict[str, dict[str, TLAValue]] = {
    "shipped": {},
    "convs1-turns2-forks2": {"Convs": mvs("solo"), "MaxTurns": 2, "MaxForks": 2},
}


@pytest.mark.tlc
@pytest.mark.parametrize("case", list(GRAPH_CASES))
def test_the_mirror_graph_equals_tlcs(case: str, tmp_path: Path) -> None:
    """State for state, edge for edge, label for label (a main step: ``OverlapNext``)."""
    constants = GRAPH_CASES[case]
    cfg = write_cfg(tmp_path / "TpxGatewayOverlap.cfg", CFG, **constants) if constants else CFG
    tlc = dump_graph(SPEC, cfg)
    mirror = explore(OverlapConfig.from_cfg(cfg), keep_graph=True)
    assert mirror.ok
    assert mirror.graph is not None
    assert tlc.state_set() == mirror.graph.states
    assert frozenset(tlc.states[fp] for fp in tlc.initial) == mirror.graph.initial
    assert tlc.labelled_edges() == mirror.graph.edges
    assert {label for _, _, label in mirror.graph.edges} == {
        "OverlapNext",
        "ForkSend",
        "ForkReply",
        "ForkFail",
        "ForkDeliver",
    }


@pytest.mark.tlc
@pytest.mark.slow
def test_the_mirror_reaches_tlcs_figures_on_the_deep_cfg() -> None:
    """`make tlc`'s overlap cfg (136,543 states): the same figures, everything holding."""
    tlc = run_tlc(SPEC, DEEP_CFG, workers=1)
    assert tlc.ok, tlc.verdict
    mirror = explore(OverlapConfig.from_cfg(DEEP_CFG))
    assert mirror.ok
    assert (tlc.initial, tlc.generated, tlc.distinct, tlc.depth) == (
        mirror.initial,
        mirror.generated,
        mirror.distinct,
        mirror.depth,
    )


# ----------------------------------------------------------------- the mirror's mutants


def crossed_deliver(s: OverlapState, c: ModelValue, cfg: OverlapConfig) -> Iterator[OverlapState]:
    if s.fphase[c] == "resp":
        main = s.main.phase[c] == "resp"  # the main exchange's reply is on its wire
        yield attrs.evolve(
            s,
            fgot=EXCEPT(s.fgot, c, s.main.wireIds[c] if main else s.fwire[c]),
            fgotFor=EXCEPT(s.fgotFor, c, "main" if main else "fork"),
            fphase=EXCEPT(s.fphase, c, "idle"),
        )


def foreign_reply(s: OverlapState, c: ModelValue, cfg: OverlapConfig) -> Iterator[OverlapState]:
    if s.fphase[c] == "req":
        for ids in subsets(cfg.AllIds):  # SUBSET AllIds, not SUBSET Ids(c)
            yield attrs.evolve(
                s,
                femitted=EXCEPT(s.femitted, c, ids),
                fwire=EXCEPT(s.fwire, c, ids),
                fphase=EXCEPT(s.fphase, c, "resp"),
            )


def stale_send(s: OverlapState, c: ModelValue, cfg: OverlapConfig) -> Iterator[OverlapState]:
    for t in O.ForkSend(s, c, cfg):  # whatever the cut, it answers the last calls
        yield attrs.evolve(t, fwire=EXCEPT(t.fwire, c, s.main.pending[c]))


CASES: dict[str, tuple[str, ForkAction, str, Path]] = {
    # mutant: (replaced action, the mirror's replacement, invariant, cfg)
    "MutGwForkCrossedReply": ("ForkDeliver", crossed_deliver, "OwnReplies", CFG),
    "MutGwForkForeignIds": ("ForkReply", foreign_reply, "ForkNoCrossPairing", CFG),
    "MutGwForkStaleAnswers": ("ForkSend", stale_send, "ForkPairingInv", DEEP_CFG),
}


def harness(
    replaced: str, action: ForkAction
) -> Callable[[OverlapState, OverlapConfig], Iterator[tuple[str, OverlapState]]]:
    """OverlapNext with the fork action *replaced* replaced by *action*."""
    forks = tuple((n, action if n == replaced else a) for n, a in O.FORK_ACTIONS)

    def steps(s: OverlapState, cfg: OverlapConfig) -> Iterator[tuple[str, OverlapState]]:
        for c in cfg.Convs:
            for _, a in gw.ACTIONS:
                for t in a(s.main, c, cfg):
                    yield O.MAIN_STEP, attrs.evolve(s, main=t)
            for n, fork in forks:
                for u in fork(s, c, cfg):
                    yield n, u
        for shared in (gw.Rotate, gw.Recover, gw.Halted):
            for t in shared(s.main, cfg):
                yield O.MAIN_STEP, attrs.evolve(s, main=t)

    return steps


def mutant_next(
    name: str,
) -> Callable[[OverlapState, OverlapConfig], Iterator[tuple[str, OverlapState]]]:
    """OverlapNext with the mutant's one action replaced."""
    replaced, action, _, _ = CASES[name]
    return harness(replaced, action)


def test_the_harness_with_the_spec_s_own_action_is_overlap_next() -> None:
    cfg = OverlapConfig.from_cfg(CFG)
    spec = explore(cfg, keep_graph=True)
    same = explore(cfg, keep_graph=True, next=harness("ForkSend", O.ForkSend))
    assert spec.graph == same.graph
    assert spec.generated == same.generated


def test_every_overlap_mutant_is_one_documented_change() -> None:
    names = sorted(p.stem for p in OVERLAP_MUTANTS.glob("Mut*.tla"))
    assert names == sorted(CASES)
    spec_lines = SPEC.read_text().splitlines()
    for name in names:
        first, *rest = (OVERLAP_MUTANTS / f"{name}.tla").read_text().splitlines()
        assert first.startswith("\\* MUTANT of TpxGatewayOverlap. One change: ")
        assert CASES[name][2] in first
        assert load_cfg(OVERLAP_MUTANTS / f"{name}.cfg") == load_cfg(CASES[name][3])
        body = [rest[0].replace(name, "TpxGatewayOverlap"), *rest[1:]]
        assert_one_change(spec_lines, body, CASES[name][0], name)
    for module in ("TpxGateway.tla", "TpxTransport.tla"):  # staged beside the mutants
        assert (OVERLAP_MUTANTS / module).read_bytes() == (ROOT / "spec" / module).read_bytes()


@pytest.mark.parametrize("name", list(CASES))
def test_the_mirror_rejects_the_mutant_for_its_property(name: str) -> None:
    _, _, prop, cfg_path = CASES[name]
    result = explore(OverlapConfig.from_cfg(cfg_path), next=mutant_next(name))
    assert result.verdict.kind == "invariant"
    assert result.verdict.property == prop
    assert result.trace[0].action == "Init"


@pytest.mark.tlc
@pytest.mark.parametrize("name", list(CASES))
def test_tlc_rejects_the_mutant_for_its_property(name: str) -> None:
    _, _, prop, cfg_path = CASES[name]
    spec = OVERLAP_MUTANTS / f"{name}.tla"
    result = run_tlc(spec, spec.with_suffix(".cfg"), workers=1)
    assert result.exit_code == 12
    assert result.verdict.kind == "invariant"
    assert result.verdict.property == prop
    # TLC's counterexample is a behaviour of the mirror's mutant, step for step
    cfg = OverlapConfig.from_cfg(cfg_path)
    states = [OverlapState.from_record(step.state) for step in result.trace]
    assert states[0] in set(OverlapInit(cfg))
    nxt = mutant_next(name)
    for (s, t), step in zip(pairwise(states), result.trace[1:], strict=True):
        assert (step.action, t) in set(nxt(s, cfg)), (name, step.action)
    mirror = explore(cfg, next=nxt)
    assert len(mirror.trace) == len(result.trace)  # both BFS: shortest counterexamples
