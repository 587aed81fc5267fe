"""Reports the fuzz cases run and their rate (``make fuzz``)."""

from __future__ import annotations

import time

import pytest
from _pytest.terminal import TerminalReporter

_START = {"t": 0.0}


def pytest_sessionstart(session: pytest.Session) -> None:
    _START["t"] = time.perf_counter()


def pytest_terminal_summary(terminalreporter: TerminalReporter) -> None:
    from tests.fuzz.test_fuzz import CASES

    if CASES["n"]:
        elapsed = time.perf_counter() - _START["t"]
        terminalreporter.write_line(
            f"fuzz: {CASES['n']} cases in {elapsed:.1f} s ({CASES['n'] / elapsed:.0f} cases/s)"
        )
