"""The audit's tests share one scripted upstream and its ``tpx serve`` processes."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from conformance.serve import LAUNCHER
from tpx.audit.harness import Harness


@pytest.fixture(scope="module")
def harness() -> Iterator[Harness]:
    h = Harness(bug_launcher=LAUNCHER)
    try:
        yield h
    finally:
        h.close()
