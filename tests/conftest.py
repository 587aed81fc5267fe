"""What a plain ``pytest`` leaves out, and the command that runs it.

``pyproject.toml`` makes the default selection ``-m "not slow and not e2e"`` (what
``make test`` runs). Deselected tests are named at the end of the run with the targets that
run them, so leaving them out is never silent.
"""

from __future__ import annotations

import pytest

#: A marker left out by the default selection -> the make targets that run its tests.
TARGETS = {
    "e2e": "make e2e (the Claude Code CLI), make load",
    "slow": "make conformance, make conformance-deep, make fuzz, make redteam",
}

_deselected: dict[str, int] = {}


def pytest_deselected(items: list[pytest.Item]) -> None:
    for item in items:
        for marker in TARGETS:
            if item.get_closest_marker(marker) is not None:
                _deselected[marker] = _deselected.get(marker, 0) + 1


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    for marker, count in sorted(_deselected.items()):
        terminalreporter.write_line(
            f"{count} tests marked {marker} not run here: {TARGETS[marker]}"
        )
