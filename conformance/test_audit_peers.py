"""``make audit-peers``' confirmation of each report from its files: every failure's trace
rejected by ``tpx check-trace`` for its property, and the HTML report showing the table of
checks and the first failure's trace, read as written and (slow) as headless Chromium shows
it with no network. Each confirmation is also shown to catch a report that is wrong."""

from __future__ import annotations

import json
from pathlib import Path

import attrs
import pytest

from conformance import audit_peers
from conformance.audit_peers_browser import browser, dom
from conformance.audit_peers_confirm import check_traces
from tpx.audit import report
from tpx.audit.findings import CHECKS, Result
from tpx.audit.harness import GATEWAY_KEY, Harness
from tpx.audit.report_dom import problems
from tpx.audit.run import audit_gateway

#: a seeded bug the audit finds at once, with a trace (PairingInv)
BUG, CHECK = "results_reversed", "PairingInv"


@pytest.fixture(scope="module")
def audited(http_harness: Harness, tmp_path_factory: pytest.TempPathFactory) -> tuple[Result, Path]:
    """An audit of the seeded bug (stopped at its check's first failure) and its HTML report,
    the traces beside it."""
    gw = http_harness.gateway(False, True, bug=BUG)
    try:
        result = audit_gateway(http_harness, gw.url, GATEWAY_KEY, stop_on=CHECK, scenarios=False)
    finally:
        http_harness.stop_gateways(BUG)
    assert CHECK in result.failures, report.summary(result)
    path = tmp_path_factory.mktemp("report") / "bug.html"
    report.write(result, path)
    return result, path


def test_each_failure_s_trace_is_rejected_by_check_trace_for_its_property(
    audited: tuple[Result, Path],
) -> None:
    result, path = audited
    confirmed = check_traces(result, path.with_name("bug.traces"))
    assert [c.check for c in confirmed] == [c.name for c in CHECKS if c.name in result.failures]
    assert all(c.ok for c in confirmed), confirmed
    mine = next(c for c in confirmed if c.check == CHECK)
    assert mine.verdict.startswith("REJECTED at step ")
    assert mine.verdict.endswith(f"({result.failures[CHECK].property})")


def test_a_trace_rejected_for_another_property_or_accepted_is_not_confirmed(
    audited: tuple[Result, Path], tmp_path: Path
) -> None:
    result, _ = audited
    failure = result.failures[CHECK]
    assert failure.trace is not None
    only, other = Result(result.url, result.mode), Result(result.url, result.mode)
    only.add(failure)
    other.add(attrs.evolve(failure, property="ShapeInv"))
    folder = tmp_path / "t"
    report.write_traces(only, folder)
    (right,) = check_traces(only, folder)
    assert right.ok
    (wrong,) = check_traces(other, folder)
    assert not wrong.ok
    assert wrong.verdict.endswith(f"({failure.property})")
    # the first state alone: Init holds, nothing to reject
    first = {**failure.trace, "states": failure.trace["states"][:1]}
    (folder / f"{CHECK}.itf.json").write_text(json.dumps(first), encoding="utf-8")
    (accepted,) = check_traces(only, folder)
    assert not accepted.ok
    assert "ACCEPTED" in accepted.verdict


def test_the_report_as_written_shows_the_table_and_the_first_trace(
    audited: tuple[Result, Path],
) -> None:
    result, path = audited
    assert problems(path.read_text(encoding="utf-8"), result) == []


@pytest.mark.parametrize(
    ("change", "said"),
    [
        ("<details open>", "not shown open"),
        ('<table class="states">', "states are not shown as rows"),
        ('<td class="fail">', "the table of checks shows"),
    ],
)
def test_a_report_that_hides_the_table_or_the_trace_is_caught(
    audited: tuple[Result, Path], change: str, said: str
) -> None:
    result, path = audited
    text = path.read_text(encoding="utf-8")
    assert change in text
    broken = {
        "<details open>": "<details>",
        '<table class="states">': '<table class="steps">',
        '<td class="fail">': '<td class="pass">pass</td><td class="x">',
    }[change]
    found = problems(text.replace(change, broken, 1), result)
    assert any(said in p for p in found), found


def test_the_table_says_what_was_confirmed(audited: tuple[Result, Path]) -> None:
    result, path = audited
    confirmed = audit_peers.Confirmation(
        check_traces(result, path.with_name("bug.traces")), [], "x"
    )
    text = audit_peers.table({"litellm": result}, {"litellm": confirmed})
    n = len(confirmed.traces)
    assert f"| traces `tpx check-trace` rejects for their property | {n} of {n} |" in text
    assert "| HTML report, offline | table and first trace shown |" in text
    assert "(`tpx check-trace`: REJECTED at step " in audit_peers.findings(
        {"litellm": result}, {"litellm": confirmed}
    )


@pytest.mark.slow
def test_headless_chromium_offline_shows_the_table_and_the_first_trace(
    audited: tuple[Result, Path],
) -> None:
    result, path = audited
    assert browser() is not None, "no Chromium: apt-get install chromium"
    rendered = dom(path)
    assert rendered.by.startswith("headless chromium")
    assert "<tbody>" in rendered.document  # built by the browser, not the file as written
    assert problems(rendered.document, result) == []
