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
from tpx.audit.behaviours import CREDENTIALS
from tpx.audit.findings import CHECKS, check_named
from tpx.audit.harness import GATEWAY_KEY, Gateway, Harness
from tpx.audit.run import JOBS, MODE_OF, PROVIDER_OF, audit_gateway
from tpx.cli import main

SPEC = str(Path(__file__).parents[2] / "spec" / "TpxGateway.tla")

#: seeded bug -> the check of the audit that must fail
CASES: dict[str, str] = {
    "ids_leak": "PairingInv",
    "unissued_id": "Refusal",
    "selection_drift": "Credential",
    "retry_dup": "Refinement",
    "retry_loses_obligation": "PairingInv",
    "results_reversed": "PairingInv",
    "ids_permuted": "PairingInv",
    "earlier_results_dropped": "PairingInv",
    "results_in_order": "Refinement",
    "resend_on_5xx": "OneRequest",
    "session_guard": "Refinement",
    **{bug.name: bug.replay for bug in AUDIT_BUGS},
}
#: check -> the other property its trace may be read for (a refusal answered the wrong way:
#: the answer's shape, forwarded: the pairing; ids of another conversation: across the
#: conversations)
ALSO = {"Refusal": ("ShapeInv",), "PairingInv": ("NoCrossPairing",)}
#: bug -> the property its counterexample's trace is rejected for, where the check has two
PROPERTY = {"ids_leak": "NoCrossPairing", "unissued_id": "PairingInv"}
#: bugs of the Messages pass-through (the translator refuses ``unissued_id``'s id by itself):
#: audited with the scripted upstream speaking the Messages API (``--messages-upstream``)
PASS_THROUGH = {"unissued_id", "earlier_results_dropped"}
#: bugs of the code both modes share, audited in pass-through mode too (the Messages
#: upstream's usage, tool ids and errors read from its own bodies and event streams)
BOTH_MODES = {"usage_zeroed", "ids_permuted", "retry_after_dropped", "ids_leak"}
#: bugs whose answers depend on the other conversations' requests (a process-wide cache, a
#: counter): audited one behaviour at a time, so the counterexample is the same in every
#: run (with several behaviours in flight the check fails too: tests/audit/test_audit_lanes.py)
ORDERED = {"ids_leak", "selection_drift"}
#: the bugs that make test runs (one per finding class, the pass-through's and the
#: leak across conversations; all: make conformance-http)
FAST = {
    "results_reversed",
    "resend_on_5xx",
    "results_in_order",
    "selection_drift",
    "ids_leak",
    "unissued_id",
    *(bug.name for bug in AUDIT_BUGS),
}


def test_every_seeded_bug_has_a_case() -> None:
    names = {b.name for b in (*GATEWAY_BUGS, *AUDIT_BUGS)}
    assert set(CASES) == names
    assert {check_named(c).name for c in CASES.values()} == {c.name for c in CHECKS}


def _gateway(harness: Harness, upstream: str, bug: str | None = None) -> Gateway:
    """The ``tpx serve`` process whose upstream speaks *upstream* (its credential only)."""
    has_key, has_token = CREDENTIALS[PROVIDER_OF[upstream]]
    return harness.gateway(has_key, has_token, bug=bug)


@pytest.mark.parametrize("upstream", ["openai", "messages"])
def test_tpx_serve_passes_every_check(harness: Harness, tmp_path: Path, upstream: str) -> None:
    gw = _gateway(harness, upstream)
    result = audit_gateway(harness, gw.url, GATEWAY_KEY, upstream=upstream)
    assert result.failures == {}, report.summary(result)
    assert result.ok
    assert result.mode == MODE_OF[upstream]
    assert result.behaviours > 500
    assert {c.name for c in CHECKS} == result.ran
    path = tmp_path / "tpx.json"
    assert report.write(result, path) == {}
    assert '"ok": true' in path.read_text(encoding="utf-8")


def _cases() -> list[object]:
    cases: list[object] = [
        pytest.param(
            bug,
            check,
            "messages" if bug in PASS_THROUGH else "openai",
            marks=() if bug in FAST else pytest.mark.slow,
            id=bug,
        )
        for bug, check in CASES.items()
    ]
    cases += [
        pytest.param(bug, CASES[bug], "messages", marks=pytest.mark.slow, id=f"{bug}-pass-through")
        for bug in sorted(BOTH_MODES)
    ]
    return cases


@pytest.mark.parametrize(("bug", "check", "upstream"), _cases())
def test_a_seeded_bug_fails_its_check(
    harness: Harness,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    bug: str,
    check: str,
    upstream: str,
) -> None:
    gw = _gateway(harness, upstream, bug)
    try:
        result = audit_gateway(
            harness,
            gw.url,
            GATEWAY_KEY,
            stop_on=check,
            upstream=upstream,
            jobs=1 if bug in ORDERED else JOBS,
        )
    finally:
        harness.stop_gateways(bug)
    assert check in result.failures, report.summary(result)
    assert not result.ok
    failure = result.failures[check]
    prop = failure.property
    assert prop in (check_named(check).property, *ALSO.get(check, ()))
    assert prop == PROPERTY.get(bug, prop)
    if not prop:  # no exchange of the spec: the requests and answers are the counterexample
        assert failure.trace is None
        assert failure.exchanges
        return
    assert failure.trace is not None
    assert failure.rejected_for == prop, failure.verdict
    traces = report.write(result, tmp_path / "report.json")
    capsys.readouterr()
    assert main(["check-trace", "--spec", SPEC, str(traces[check])]) == 1
    out = capsys.readouterr().out
    assert re.search(rf"REJECTED at step [0-9]+ \({failure.rejected_for}\)", out), out
