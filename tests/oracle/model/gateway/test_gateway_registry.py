"""The gateway spec is registered: explored and trace-checked only as the mirrored text."""

from __future__ import annotations

from pathlib import Path

import pytest

from tpx.cli import main
from tpx.oracle.model.gateway import GATEWAY, INVARIANTS, PROPERTIES
from tpx.oracle.model.registry import MIRROR_PACKAGES, check_mirrored, lookup, mirrored

ROOT = Path(__file__).parents[4]
SPEC = ROOT / "spec" / "TpxGateway.tla"
CFG = ROOT / "spec" / "TpxGateway.cfg"
REFINEMENT = ROOT / "spec" / "TpxGatewayRefinement.cfg"
MUTANTS = sorted((ROOT / "spec" / "mutants" / "gateway").glob("Mut*.tla"))
TRACE = (
    ROOT / "tests" / "oracle" / "model" / "gateway" / "fixtures" / "serve-trace-dir" / "req1.jsonl"
)


def test_the_gateway_is_registered() -> None:
    assert "tpx.oracle.model.gateway" in MIRROR_PACKAGES
    assert lookup("TpxGateway") is GATEWAY
    assert mirrored() == ("TpxGateway", "TpxGatewayOverlap", "TpxTransport")
    assert GATEWAY.invariants == tuple(n for n, _ in INVARIANTS)
    assert GATEWAY.properties == (
        *(n for n, _ in PROPERTIES),
        "Refinement",
        "RefinementUpToErrors",
    )


def test_the_shipped_gateway_spec_is_the_repositorys() -> None:
    """tpx/oracle/specs/ ships byte-identical copies of spec/ (the spec and its cfgs)."""
    shipped = GATEWAY.spec_path.parent
    names = sorted(p.name for p in (ROOT / "spec").glob("TpxGateway*"))
    assert names == sorted(p.name for p in shipped.glob("TpxGateway*"))
    assert len(names) == 9  # TpxGateway's and TpxGatewayOverlap's
    for name in names:
        assert (shipped / name).read_bytes() == (ROOT / "spec" / name).read_bytes(), name
    assert check_mirrored(SPEC).mirror is GATEWAY
    assert check_mirrored(SPEC, REFINEMENT).properties == (
        "SelectionStable",
        "RefusesOnlyWrong",
        "SendsOnlyCorrect",
        "FailoverBeforeFirstByte",
        "Refinement",
    )


@pytest.mark.parametrize(
    ("cfg", "generated", "distinct", "depth"),
    [(CFG, "6,406", "2,251", 13), (REFINEMENT, "4,910", "1,884", 13)],
    ids=["shipped", "refinement"],
)
def test_explore_runs_the_gateway_mirror(
    cfg: Path, generated: str, distinct: str, depth: int, capsys: pytest.CaptureFixture[str]
) -> None:
    """The same figures as TLC (initial 4)."""
    assert main(["explore", str(SPEC), "--config", str(cfg)]) == 0
    out = capsys.readouterr().out
    assert "verdict    ok" in out
    assert f"generated  {generated}\n" in out
    assert f"distinct   {distinct}\n" in out
    assert f"depth      {depth}\n" in out


def test_explore_checks_only_the_named_invariants(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The cfg's names are checked against the mirror (a typo is refused, as TLC does)
    and only the named ones run."""
    cfg = tmp_path / "typo.cfg"
    cfg.write_text(CFG.read_text().replace("    NoCrossPairing\n", "    NoCrosPairing\n"))
    assert main(["explore", str(SPEC), "--config", str(cfg)]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert "INVARIANT NoCrosPairing is not defined in TpxGateway" in line
    fewer = tmp_path / "fewer.cfg"
    fewer.write_text(CFG.read_text().replace("    RetryInv\n", ""))
    assert "RetryInv" not in check_mirrored(SPEC, fewer).invariants
    assert main(["explore", str(SPEC), "--config", str(fewer)]) == 0


def renamed(mutant: Path, tmp_path: Path) -> Path:
    """The mutant under the gateway's module name (only the body differs)."""
    out = tmp_path / "TpxGateway.tla"
    out.write_text(mutant.read_text().replace(f"MODULE {mutant.stem}", "MODULE TpxGateway"))
    (tmp_path / "TpxGateway.cfg").write_text(mutant.with_suffix(".cfg").read_text())
    return out


@pytest.mark.parametrize("mutant", MUTANTS, ids=lambda p: p.stem)
def test_explore_and_check_trace_refuse_every_gateway_mutant(
    mutant: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert len(MUTANTS) >= 5
    same_name = renamed(mutant, tmp_path)
    for spec in (mutant, same_name):
        assert main(["explore", str(spec)]) == 2
        assert main(["check-trace", str(TRACE), "--exchange", "--spec", str(spec)]) == 2
        err = capsys.readouterr().err.splitlines()
        assert len(err) == 2
        assert all(f"tpx tlc {spec}" in line for line in err)
    assert "differs from the TpxGateway" in err[0]


def test_check_trace_accepts_with_the_shipped_gateway_spec(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["check-trace", str(TRACE), "--exchange", "--spec", str(SPEC)]) == 0
    assert "ACCEPTED" in capsys.readouterr().out


def test_check_trace_refuses_a_gateway_cfg_naming_an_unknown_check(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = tmp_path / "bad.cfg"
    cfg.write_text(CFG.read_text().replace("SPECIFICATION Spec", "SPECIFICATION Spc"))
    args = ["check-trace", str(TRACE), "--exchange", "--spec", str(SPEC), "--config", str(cfg)]
    assert main(args) == 2
    assert "SPECIFICATION Spc is not defined in TpxGateway" in capsys.readouterr().err
