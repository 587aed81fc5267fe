"""Each gap a review found has a conformance case that fails against a hand-written mutant
of it (:mod:`conformance.gap_bugs`): the replay of the seed behaviours under the mutant
fails, naming the property."""

from __future__ import annotations

import pytest

from conformance.gap_bugs import GAP_BUGS, GAPS
from conformance.replay import Behaviour, ConformanceError, Replayer
from tpx.oracle.model import Config

SEED = Config.of(2, 3)


def _first_failure(behaviours: list[Behaviour], *, streaming: bool) -> ConformanceError | None:
    replayer = Replayer(SEED, streaming=streaming)
    try:
        for i, b in enumerate(behaviours):
            try:
                replayer.replay(b, i)
            except ConformanceError as exc:
                return exc
    finally:
        replayer.close()
    return None


def test_every_gap_has_a_mutant() -> None:
    assert set(GAP_BUGS) == {name for names in GAPS.values() for name in names}
    assert len(GAPS) == 14


@pytest.mark.tlc
@pytest.mark.parametrize("name", sorted(GAP_BUGS))
def test_gap_mutant_is_caught(name: str, seed_behaviours: list[Behaviour]) -> None:
    gap = GAP_BUGS[name]
    with gap.bug.active():
        exc = _first_failure(seed_behaviours, streaming=gap.mode == "streamed")
    assert exc is not None, f"{name}: every behaviour conformed"
    assert gap.bug.property in exc.violated, str(exc)
    assert "trace (observed)" in str(exc)
    assert "fakes (seed " in str(exc)  # the shapes drawn are reported


@pytest.mark.tlc
def test_gap_mutants_are_undone(seed_behaviours: list[Behaviour]) -> None:
    for gap in GAP_BUGS.values():
        with gap.bug.active():
            pass
    assert _first_failure(seed_behaviours[:60], streaming=False) is None
    assert _first_failure(seed_behaviours[:60], streaming=True) is None
