"""TpxGatewayOverlap.tla (overlapping exchanges of one conversation) passes TLC on its
small cfg, and its mutant MutGwForkCrossedReply is rejected for OwnReplies."""

from __future__ import annotations

import pytest

from tpx.oracle.tlc import run_tlc

from .conftest import MUTANTS, ROOT

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


@pytest.mark.tlc
def test_tlc_rejects_a_crossed_reply_for_own_replies() -> None:
    spec = MUTANTS / "overlap" / "MutGwForkCrossedReply.tla"
    result = run_tlc(spec, spec.with_suffix(".cfg"), workers=1)
    assert result.exit_code == 12
    assert result.verdict.kind == "invariant"
    assert result.verdict.property == "OwnReplies"
    assert [step.action for step in result.trace][-3:] == ["ForkSend", "ForkReply", "ForkDeliver"]
