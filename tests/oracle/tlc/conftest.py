"""Shared paths for the TLC runner tests."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
SEED = ROOT / "spec" / "TpxTransport.tla"
SEED_CFG = ROOT / "spec" / "TpxTransport.cfg"
MUTANTS = ROOT / "spec" / "mutants"


@pytest.fixture
def real_java() -> str:
    """The real java, resolved before a test fiddles with PATH; fails (never skips) without it."""
    from tpx.oracle.tlc.runner import find_java

    return find_java()
