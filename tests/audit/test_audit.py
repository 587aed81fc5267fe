"""``tpx audit`` on ``tpx serve``: every check passes; on each seeded bug the right check
fails, with a counterexample whose trace ``tpx check-trace`` rejects for the check's
property."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from conformance.audit_bugs import AUDIT_BUGS
from conformance.gateway_bugs import GATEWAY_BUGS
from tpx.audit import report
from tpx.audit.findings import CHECKS, check_named
from tpx.audit.harness import GATEWAY_KEY, Harness
from tpx.audit.run import audit_gateway
from tpx.cli import main

SPEC = str(Path(__file__).parents[2] / "spec" / "TpxGateway.tla")

#: seeded bug -> the check of the audit that must fail
CASES: dict[str, str] = {
    "ids_leak": "PairingInv",
    "selection_drift": "Credential",
    "retry_dup": "Refinement",
    "retry_loses_obligation": "PairingInv",
    "results_reversed": "PairingInv",
    "ids_permuted": "PairingInv",
    "results_in_order": "Refinement",
    "resend_on_5xx": "OneRequest",
    "session_guard": "Refinement",
    **{bug.name: bug.replay for bug in AUDIT_BUGS},
}
#: check -> the other property its trace may be read for (a refusal answered the wrong way:
#: the answer's shape; forwarded upstream: the pairing)
ALSO = {"Refusal": ("ShapeInv",)}
#: bug -> the property check-trace names where it is not the check's: ``ids_leak`` makes a
#: conversation's correct turn refused (its pairing check sees another conversation's
#: ids); one conversation's trace shows the refusal, a step that is not the spec's
#: ``CallerSend`` (the leak itself is across conversations)
TRACE_PROPERTY = {"ids_leak": "Next"}
#: bugs of the Anthropic pass-through, or hidden behind the translator's own refusal: an
#: endpoint configured to an OpenAI-compatible upstream never runs them
NOT_REACHED = {"unissued_id", "earlier_results_dropped"}
#: the bugs that make test runs (one per finding class; all: make conformance-http)
FAST = {
    "results_reversed",
    "resend_on_5xx",
    "results_in_order",
    "selection_drift",
    *(bug.name for bug in AUDIT_BUGS),
}


def test_every_seeded_bug_has_a_case() -> None:
    names = {b.name for b in (*GATEWAY_BUGS, *AUDIT_BUGS)}
    assert set(CASES) | NOT_REACHED == names
    assert {check_named(c).name for c in CASES.values()} == {c.name for c in CHECKS}


def test_tpx_serve_passes_every_check(harness: Harness, tmp_path: Path) -> None:
    gw = harness.gateway(False, True)
    result = audit_gateway(harness, gw.url, GATEWAY_KEY)
    assert result.failures == {}, report.summary(result)
    assert result.ok
    assert result.behaviours > 500
    assert {c.name for c in CHECKS} == result.ran
    path = tmp_path / "tpx.json"
    assert report.write(result, path) == {}
    assert '"ok": true' in path.read_text(encoding="utf-8")


def _cases() -> list[object]:
    return [
        pytest.param(bug, check, marks=() if bug in FAST else pytest.mark.slow, id=bug)
        for bug, check in CASES.items()
    ]


@pytest.mark.parametrize(("bug", "check"), _cases())
def test_a_seeded_bug_fails_its_check(
    harness: Harness, tmp_path: Path, capsys: pytest.CaptureFixture[str], bug: str, check: str
) -> None:
    gw = harness.gateway(False, True, bug=bug)
    try:
        result = audit_gateway(harness, gw.url, GATEWAY_KEY, stop_on=check)
    finally:
        harness.stop_gateways(bug)
    assert check in result.failures, report.summary(result)
    assert not result.ok
    failure = result.failures[check]
    prop = failure.property
    assert prop in (check_named(check).property, *ALSO.get(check, ()))
    if not prop:  # no exchange of the spec: the requests and answers are the counterexample
        assert failure.trace is None
        assert failure.exchanges
        return
    assert failure.trace is not None
    assert failure.rejected_for == TRACE_PROPERTY.get(bug, prop), failure.verdict
    traces = report.write(result, tmp_path / "report.json")
    capsys.readouterr()
    assert main(["check-trace", "--spec", SPEC, str(traces[check])]) == 1
    out = capsys.readouterr().out
    assert re.search(rf"REJECTED at step [0-9]+ \({failure.rejected_for}\)", out), out
