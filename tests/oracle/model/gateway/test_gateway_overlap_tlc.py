"""TpxGatewayOverlap.tla (overlapping exchanges of one conversation) passes TLC on its
small cfg with the figures its mirror reaches (test_gateway_overlap_mirror.py: the mirror,
its graph against TLC's, and the spec mutants)."""

from __future__ import annotations

import pytest

from tpx.oracle.tlc import run_tlc

from .conftest import ROOT

OVERLAP = ROOT / "spec" / "TpxGatewayOverlap.tla"


@pytest.mark.tlc
def test_tlc_checks_the_overlap_spec() -> None:
    result = run_tlc(OVERLAP, OVERLAP.with_suffix(".cfg"), workers=1)
    assert result.ok, result.verdict
    assert (result.initial, result.generated, result.distinct, result.depth) == (
        4,
        21789,
        5812,
        13,
    )
