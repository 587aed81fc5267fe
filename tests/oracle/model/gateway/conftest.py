"""Shared paths, cfg helpers and the mutants' one-change check for the gateway mirror's
tests."""

from __future__ import annotations

import difflib
from pathlib import Path

from tpx.oracle.tlc.cfg import load_cfg, render_cfg, with_constants
from tpx.oracle.values import ModelValue, TLAValue

ROOT = Path(__file__).resolve().parents[4]
SPEC = ROOT / "spec" / "TpxGateway.tla"
CFG = ROOT / "spec" / "TpxGateway.cfg"
REFINEMENT_CFG = ROOT / "spec" / "TpxGatewayRefinement.cfg"
DEEP_CFG = ROOT / "spec" / "TpxGatewayDeep.cfg"
FAILOVER_CFG = ROOT / "spec" / "TpxGatewayFailover.cfg"
REFINEMENT_DEEP_CFG = ROOT / "spec" / "TpxGatewayRefinementDeep.cfg"
MUTANTS = ROOT / "spec" / "mutants" / "gateway"


def mvs(*names: str) -> frozenset[ModelValue]:
    return frozenset(ModelValue(n) for n in names)


def assert_one_change(spec_lines: list[str], body: list[str], action: str, name: str) -> None:
    """Mutant *name*'s *body* (its module renamed back to the spec's) differs from
    *spec_lines*, and only inside the definition of *action* (from its ``action(c) ==`` line
    to the blank line after it)."""
    hunks = [
        op for op in difflib.SequenceMatcher(a=spec_lines, b=body).get_opcodes() if op[0] != "equal"
    ]
    assert hunks, name
    start = next(i for i, line in enumerate(spec_lines) if line.startswith(f"{action}(c) =="))
    end = next(i for i in range(start + 1, len(spec_lines)) if spec_lines[i] == "")
    assert all(start <= i1 <= i2 <= end for _, i1, i2, _, _ in hunks), (name, hunks)


def write_cfg(path: Path, base: Path = CFG, **constants: TLAValue) -> Path:
    """A copy of *base* with *constants* changed, written to *path*."""
    path.write_text(render_cfg(with_constants(load_cfg(base), **constants)), encoding="utf-8")
    return path
