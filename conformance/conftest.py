"""Shared fixtures, Hypothesis profiles and the coverage summary of the conformance suite.

Hypothesis profiles (applied to the conformance state machine only, so other suites keep
their own settings): ``ci`` (derandomized, modest; the default) and ``deep`` (many
examples; ``TPX_HYPOTHESIS_PROFILE=deep``, used by ``make conformance-deep``).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

from conformance.replay import COVERAGE_REPORTS, Behaviour, complete_behaviours, tlc_graph
from conformance.serve import LAUNCHER
from tpx.audit.harness import Harness
from tpx.oracle.tlc import StateGraph

settings.register_profile(
    "ci",
    derandomize=True,
    max_examples=60,
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile(
    "deep",
    max_examples=2_000,
    stateful_step_count=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)

#: The Hypothesis profile the conformance state machine runs with.
PROFILE = os.environ.get("TPX_HYPOTHESIS_PROFILE", "ci")


@pytest.fixture(scope="session")
def seed_graph() -> StateGraph:
    """TLC's state graph of spec/TpxTransport.cfg (one TLC run per worker)."""
    return tlc_graph()


@pytest.fixture(scope="session")
def seed_behaviours(seed_graph: StateGraph) -> list[Behaviour]:
    return complete_behaviours(seed_graph)


# -- coverage summary (works under xdist: workers hand their reports to the controller) --

_FROM_WORKERS: list[dict[str, Any]] = []


def pytest_sessionfinish(session: pytest.Session) -> None:
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:
        workeroutput["tpx_conformance_coverage"] = json.dumps(COVERAGE_REPORTS)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: Any) -> None:
    data = getattr(node, "workeroutput", {}).get("tpx_conformance_coverage")
    if data:
        _FROM_WORKERS.extend(json.loads(data))


def pytest_terminal_summary(terminalreporter: Any) -> None:
    reports = COVERAGE_REPORTS + _FROM_WORKERS
    if not reports:
        return
    terminalreporter.section("tpx conformance coverage")
    for r in sorted(reports, key=lambda r: str(r["name"])):
        (s, st), (e, et), (b, bt) = r["states"], r["edges"], r["behaviours"]
        terminalreporter.write_line(
            f"{r['name']}: states {s}/{st} ({100 * s / st:.1f}%), "
            f"edges {e}/{et} ({100 * e / et:.1f}%), behaviours {b}/{bt}"
        )


@pytest.fixture(scope="session")
def http_harness() -> Iterator[Harness]:
    """The HTTP replay's event loop, fake upstreams and ``tpx serve`` processes (one per
    boot selection, started on first use and kept for the session)."""
    harness = Harness(bug_launcher=LAUNCHER)
    try:
        yield harness
    finally:
        harness.close()
