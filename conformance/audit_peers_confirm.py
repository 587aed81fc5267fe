"""Each peer's report confirmed from its files, as a reader would: every failure's
counterexample trace run through the real ``tpx check-trace`` CLI (rejected, for the
property the audit says it breaks), and the HTML report read the way a browser shows it
(:mod:`conformance.audit_peers_browser`): the table of checks and the first failure's trace
there.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import attrs

from conformance.audit_peers_browser import dom
from tpx.audit.findings import CHECKS, Failure, Result
from tpx.audit.report_dom import problems

__all__ = ["Confirmed", "check_traces", "html_problems"]

ROOT = Path(__file__).parents[1]
SPEC = ROOT / "spec" / "TpxGateway.tla"
_VERDICT = re.compile(r"REJECTED at step [0-9]+ \((\w+)\)")


@attrs.frozen
class Confirmed:
    """One failure's counterexample, confirmed or not."""

    check: str
    #: ``REJECTED at step N (Property)`` as check-trace printed it; or why there is no trace
    verdict: str
    ok: bool


def _cli() -> list[str]:
    """The ``tpx`` console script beside this Python, as a user runs it."""
    script = Path(sys.executable).with_name("tpx")
    if script.exists():
        return [str(script)]
    return [sys.executable, "-c", "import sys; from tpx.cli import main; sys.exit(main())"]


def _confirm(check: str, failure: Failure, folder: Path) -> Confirmed:
    if not failure.property:  # no exchange of the spec: the requests and answers are the case
        n = len(failure.exchanges) + len(failure.upstream)
        return Confirmed(check, f"no spec trace: {n} requests and answers", bool(n))
    path = folder / f"{check}.itf.json"
    if failure.trace is None or not path.exists():
        return Confirmed(check, f"no trace file {path.name}", False)
    done = subprocess.run(
        [*_cli(), "check-trace", "--spec", str(SPEC), str(path)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    found = _VERDICT.search(done.stdout)
    if found is None:
        said = (done.stdout + done.stderr).strip().splitlines() or [f"exit {done.returncode}"]
        return Confirmed(check, said[-1][:200], False)
    ok = done.returncode == 1 and found.group(1) == failure.property
    return Confirmed(check, found.group(0), ok)


def check_traces(result: Result, folder: Path) -> list[Confirmed]:
    """Each failure of *result* (in the checks' order), its trace in *folder*
    (``<check>.itf.json``, as :func:`tpx.audit.report.write` put it) run through ``tpx
    check-trace``: confirmed when rejected for the failure's property."""
    return [
        _confirm(c.name, result.failures[c.name], folder)
        for c in CHECKS
        if c.name in result.failures
    ]


def html_problems(path: Path, result: Result) -> tuple[list[str], str]:
    """What the HTML report at *path*, as a browser shows it offline, lacks of *result*
    (:func:`tpx.audit.report_dom.problems`), and how it was read."""
    rendered = dom(path)
    return problems(rendered.document, result), rendered.by or "the file as written (no browser)"
