"""Reports the fuzz cases run and their rate (``make fuzz``), xdist workers included."""

from __future__ import annotations

import time

import pytest
from _pytest.terminal import TerminalReporter

_RUN = {"start": 0.0, "cases": 0}


def pytest_sessionstart(session: pytest.Session) -> None:
    _RUN["start"] = time.perf_counter()


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.when == "call":
        for name, value in report.user_properties:
            if name == "fuzz_cases" and isinstance(value, int):
                _RUN["cases"] += value


def pytest_terminal_summary(terminalreporter: TerminalReporter) -> None:
    cases = _RUN["cases"]
    if cases:
        elapsed = time.perf_counter() - _RUN["start"]
        terminalreporter.write_line(
            f"fuzz: {cases} cases in {elapsed:.1f} s ({cases / elapsed:.0f} cases/s)"
        )
