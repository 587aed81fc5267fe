"""Shared paths and cfg helpers for the gateway mirror's tests."""

from __future__ import annotations

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


def write_cfg(path: Path, base: Path = CFG, **constants: TLAValue) -> Path:
    """A copy of *base* with *constants* changed, written to *path*."""
    path.write_text(render_cfg(with_constants(load_cfg(base), **constants)), encoding="utf-8")
    return path
