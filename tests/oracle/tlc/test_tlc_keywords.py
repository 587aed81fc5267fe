"""`tpx tlc` passes every cfg keyword TLC 2.15 knows through: CONSTRAINT(S),
ACTION_CONSTRAINT(S), SYMMETRY, VIEW and `<-` substitutions (the gateway spec wants SYMMETRY)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tpx.cli import main
from tpx.oracle.tlc import run_tlc

SPEC = """---- MODULE KW ----
EXTENDS Naturals, TLC
CONSTANTS Procs, N
VARIABLES x, owner
vars == <<x, owner>>
Init == x = 0 /\\ owner = CHOOSE p \\in Procs : TRUE
Next == \\E p \\in Procs : x' = x + 1 /\\ owner' = p
Spec == Init /\\ [][Next]_vars
Small == x <= 3
NotTooFast == x' <= x + 1
Sym == Permutations(Procs)
View == <<x>>
Two == 2
Inv == x <= N
====
"""
BASE = (
    "SPECIFICATION Spec\nCONSTANTS\n    Procs = {p1, p2}\n    N <- Two\n"
    "CONSTRAINT Small\nACTION_CONSTRAINT NotTooFast\nCHECK_DEADLOCK FALSE\n"
)


def write(tmp_path: Path, extra: str) -> tuple[Path, Path]:
    spec = tmp_path / "KW.tla"
    spec.write_text(SPEC)
    cfg = tmp_path / "KW.cfg"
    cfg.write_text(BASE + extra)
    return spec, cfg


@pytest.mark.tlc
@pytest.mark.parametrize(
    ("extra", "distinct"),
    [
        ("", 7),  # x = 0 (one owner), x = 1..3 with either owner; x = 4 breaks CONSTRAINT
        ("SYMMETRY Sym\n", 4),  # p1 and p2 are interchangeable
        ("VIEW View\n", 4),  # states told apart by x alone
    ],
)
def test_keywords_reach_tlc(extra: str, distinct: int, tmp_path: Path) -> None:
    result = run_tlc(*write(tmp_path, extra))
    assert result.ok, result.verdict
    assert result.distinct == distinct


@pytest.mark.tlc
def test_substitution_reaches_tlc(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """N <- Two: the invariant x <= N fails at x = 3."""
    spec, _ = write(tmp_path, "INVARIANT Inv\n")
    assert main(["tlc", str(spec)]) == 12
    out = capsys.readouterr().out
    assert "invariant Inv violated" in out
    assert "/\\ x = 3" in out


def test_the_mirror_refuses_tlc_only_keywords(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = Path(__file__).parents[3]
    cfg = tmp_path / "sym.cfg"
    cfg.write_text((root / "spec" / "TpxTransport.cfg").read_text() + "SYMMETRY Perms\n")
    assert main(["explore", "--config", str(cfg)]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(f"tpx: error: {cfg}: uses SYMMETRY, which only TLC applies")
