"""Recordings of the real transport's abstract states, validated as spec behaviours:
recordings of the real code are accepted, recordings made under each seeded bug rejected
(through the mirror, and through TLC for a few in one run)."""

from __future__ import annotations

import pytest

from conformance.bugs import BUGS, Bug, record_behaviour
from conformance.replay import SEED_CFG, SPEC, Behaviour, ConformanceError, Replayer
from tpx.model import Config
from tpx.tlc import check_traces
from tpx.tracecheck import check_trace
from tpx.values import Record

SEED = Config.of(2, 3)


def _first_caught(bug: Bug, behaviours: list[Behaviour]) -> int:
    replayer = Replayer(SEED)
    with bug.active():
        for i, b in enumerate(behaviours):
            try:
                replayer.replay(b, i)
            except ConformanceError:
                return i
    raise AssertionError(f"{bug.name} bit no behaviour")


def _bug_recording(name: str, behaviours: list[Behaviour]) -> list[Record]:
    index = _first_caught(BUGS[name], behaviours)
    return record_behaviour(behaviours[index], SEED, bug=BUGS[name], variant=index)


@pytest.mark.tlc
def test_real_recordings_are_accepted(seed_behaviours: list[Behaviour]) -> None:
    for i in range(0, len(seed_behaviours), 31):
        recording = record_behaviour(seed_behaviours[i], SEED, variant=i)
        assert recording == list(seed_behaviours[i].states())
        report = check_trace(recording, SEED)
        assert report.accepted, str(report)


@pytest.mark.tlc
@pytest.mark.parametrize("name", sorted(set(BUGS) - {"duplicate_id"}))
def test_bug_recordings_are_rejected(name: str, seed_behaviours: list[Behaviour]) -> None:
    report = check_trace(_bug_recording(name, seed_behaviours), SEED)
    assert not report.accepted
    assert report.failed_step is not None


@pytest.mark.tlc
def test_duplicates_are_invisible_to_set_valued_traces(seed_behaviours: list[Behaviour]) -> None:
    """Why the replay also checks multisets: a duplicated tool_use leaves every set-valued
    spec variable as the spec has it, so a recording of abstract states is accepted."""
    recording = _bug_recording("duplicate_id", seed_behaviours)
    assert check_trace(recording, SEED).accepted


@pytest.mark.tlc
def test_tlc_accepts_real_and_rejects_bug_recordings(seed_behaviours: list[Behaviour]) -> None:
    real = [record_behaviour(seed_behaviours[i], SEED, variant=i) for i in (0, 200, 465)]
    bad = [_bug_recording(n, seed_behaviours) for n in ("drop_id", "swap_ids", "token_over_key")]
    verdicts = check_traces(SPEC, SEED_CFG, [*real, *bad])
    assert [v.accepted for v in verdicts] == [True, True, True, False, False, False]
