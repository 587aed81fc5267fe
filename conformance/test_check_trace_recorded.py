"""Recordings of the real transport, validated as spec behaviours: recordings of the real code
are accepted, recordings made under EACH seeded bug rejected, through the mirror, through TLC
(all in one run) and through ``tpx check-trace`` on files.

A recording is JSON lines (:func:`conformance.bugs.record_behaviour`): the four id variables
are lists with one entry per id the abstraction saw, so a duplicated id survives into the
recording and fails ``TypeOK`` (a set-valued recording would hide it; see
:func:`test_a_set_valued_recording_hides_the_duplicate`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs
import pytest

from conformance.abstraction import ID_VARS
from conformance.bugs import BUGS, STREAM_BUGS, Bug, json_lines, record_behaviour
from conformance.replay import SEED_CFG, SPEC, Behaviour, ConformanceError, Replayer
from tpx.cli import main
from tpx.oracle.model import Config
from tpx.oracle.tracecheck import check_trace, check_traces_tlc, coerce_state, load_trace

SEED = Config.of(2, 3)

#: bug -> (property the mirror names, property the TLC path names) for its recording: the
#: same, since the TLC path checks the cfg's invariants and properties in the mirror's order
EXPECTED: dict[str, tuple[str, str]] = {
    "drop_id": ("PairingInv", "PairingInv"),
    "duplicate_id": ("TypeOK", "TypeOK"),  # pending lists an id twice
    "swap_ids": ("PairingInv", "PairingInv"),
    "openai_to_caller": ("TypeOK", "TypeOK"),  # pending holds ids that are no tool ids
    "token_over_key": ("SelectionInv", "SelectionInv"),
    "provider_changes": ("SelectionInv", "SelectionInv"),  # the key is there, the provider TPX
    "pairing_unchecked": ("TypeOK", "TypeOK"),  # reqIds answers an id never emitted
}

#: stream bug -> the property the mirror names for its (streamed) recording
STREAM_EXPECTED: dict[str, str] = {
    "stream_drop_id": "PairingInv",  # pending misses an id the provider emitted
    "stream_openai_to_caller": "TypeOK",  # gotShape openai, pending holds no tool ids
}

#: behaviours recorded from the real transport (every provider, aborts, failures)
REAL = (0, 31, 155, 200, 310, 465)


@attrs.frozen
class BugRecording:
    recording: list[dict[str, Any]]
    caught_at: int
    """1-based index of the state at which the checked replay caught the bug"""


def _record_bug(bug: Bug, behaviours: list[Behaviour], *, streaming: bool = False) -> BugRecording:
    """The recording of the first behaviour whose checked replay catches *bug*."""
    replayer = Replayer(SEED, streaming=streaming)
    caught: tuple[int, int] | None = None
    try:
        with bug.active():
            for i, b in enumerate(behaviours):
                try:
                    replayer.replay(b, i)
                except ConformanceError as exc:
                    caught = (i, exc.step + 1)
                    break
    finally:
        replayer.close()
    assert caught is not None, f"{bug.name} bit no behaviour"
    i, at = caught
    recording = record_behaviour(behaviours[i], SEED, bug=bug, variant=i, streaming=streaming)
    return BugRecording(recording, at)


@pytest.fixture(scope="module")
def bug_recordings(seed_behaviours: list[Behaviour]) -> dict[str, BugRecording]:
    return {name: _record_bug(bug, seed_behaviours) for name, bug in sorted(BUGS.items())}


@pytest.fixture(scope="module")
def real_recordings(seed_behaviours: list[Behaviour]) -> list[list[dict[str, Any]]]:
    return [record_behaviour(seed_behaviours[i], SEED, variant=i) for i in REAL]


def _claims(recording: list[dict[str, Any]]) -> list[str | None]:
    return [line.get("#action") for line in recording]


def test_every_seeded_bug_is_expected() -> None:
    assert set(EXPECTED) == set(BUGS)


@pytest.mark.tlc
def test_real_recordings_are_accepted(seed_behaviours: list[Behaviour]) -> None:
    for i in range(0, len(seed_behaviours), 31):
        behaviour = seed_behaviours[i]
        recording = record_behaviour(behaviour, SEED, variant=i)
        # the set view of the recording is TLC's behaviour, the claimed actions its labels
        states = [coerce_state(line, SEED, n)[0].as_record() for n, line in enumerate(recording)]
        assert states == list(behaviour.states())
        assert _claims(recording) == ["Init", *(a for a, _ in behaviour.steps)]
        # the real transport never observes an id twice
        for line in recording:
            for name in ID_VARS:
                assert len(set(line[name])) == len(line[name]), (i, name, line)
        report = check_trace(recording, SEED, actions=_claims(recording))
        assert report.accepted, str(report)


@pytest.mark.tlc
@pytest.mark.parametrize("name", sorted(BUGS))
def test_bug_recordings_are_rejected(name: str, bug_recordings: dict[str, BugRecording]) -> None:
    bug = bug_recordings[name]
    report = check_trace(bug.recording, SEED)
    assert not report.accepted, name
    assert report.failed_step == bug.caught_at, str(report)
    assert report.failed_property == EXPECTED[name][0], str(report)
    # claiming the actions that were taken changes nothing
    assert check_trace(bug.recording, SEED, actions=_claims(bug.recording)) == report


@pytest.mark.tlc
def test_a_set_valued_recording_hides_the_duplicate(
    bug_recordings: dict[str, BugRecording],
) -> None:
    """Why recordings keep multisets: with the id lists read as sets (duplicates merged),
    the duplicate_id recording is a behaviour of the spec."""
    bug = bug_recordings["duplicate_id"]
    line = bug.recording[bug.caught_at - 1]
    assert line["#action"] == "Deliver"
    assert len(line["pending"]) == len(set(line["pending"])) + 1
    merged = [
        {k: sorted(set(v)) if k in ID_VARS else v for k, v in line.items()}
        for line in bug.recording
    ]
    assert check_trace(merged, SEED).accepted
    assert "lists t1 more than once" in check_trace(bug.recording, SEED).message


@pytest.mark.tlc
def test_tlc_accepts_real_and_rejects_every_bug_recording(
    real_recordings: list[list[dict[str, Any]]], bug_recordings: dict[str, BugRecording]
) -> None:
    names = sorted(bug_recordings)
    bad = [bug_recordings[n].recording for n in names]
    reports = check_traces_tlc([*real_recordings, *bad], SEED, spec=SPEC, cfg=SEED_CFG)
    assert len(reports) == len(REAL) + len(names)
    for report in reports[: len(REAL)]:
        assert report.accepted, str(report)
    for name, report in zip(names, reports[len(REAL) :], strict=True):
        mirror = check_trace(bug_recordings[name].recording, SEED)
        assert not report.accepted, name
        assert report.failed_step == bug_recordings[name].caught_at, (name, str(report))
        assert report.failed_property == EXPECTED[name][1], (name, str(report))
        if report.failed_property == "TypeOK":
            assert report.message == mirror.message


def _write(directory: Path, stem: str, recording: Sequence[Mapping[str, Any]]) -> Path:
    path = directory / f"{stem}.jsonl"
    path.write_text(json_lines(recording), encoding="utf-8")
    return path


@pytest.mark.tlc
def test_cli_checks_recorded_files(
    tmp_path: Path,
    real_recordings: list[list[dict[str, Any]]],
    bug_recordings: dict[str, BugRecording],
    capsys: pytest.CaptureFixture[str],
) -> None:
    real = [_write(tmp_path, f"real{i}", r) for i, r in zip(REAL, real_recordings, strict=True)]
    bad = {n: _write(tmp_path, n, b.recording) for n, b in sorted(bug_recordings.items())}
    # the file round-trips: what the CLI reads is what was recorded
    states, actions = load_trace(bad["duplicate_id"])
    assert states == [
        {k: v for k, v in line.items() if k != "#action"}
        for line in bug_recordings["duplicate_id"].recording
    ]
    assert actions == _claims(bug_recordings["duplicate_id"].recording)
    common = ["check-trace", "--spec", str(SPEC), "--config", str(SEED_CFG)]

    # the mirror: real files pass (exit 0), each buggy file fails (exit 1)
    assert main([*common, *map(str, real)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert [line.split(": ", 1)[1].split(" ", 1)[0] for line in out] == ["ACCEPTED"] * len(real)
    for name, path in bad.items():
        assert main([*common, str(path)]) == 1, name
        (line,) = capsys.readouterr().out.splitlines()
        step = bug_recordings[name].caught_at
        assert line.startswith(f"{path}: REJECTED at step {step} ({EXPECTED[name][0]})"), line

    # TLC, one run per call: real files alone pass, with the buggy ones the call fails
    assert main([*common, "--tlc", *map(str, real)]) == 0
    capsys.readouterr()
    assert main([*common, "--tlc", *map(str, real), *map(str, bad.values())]) == 1
    out = capsys.readouterr().out.splitlines()
    assert len(out) == len(real) + len(bad)
    for path, line in zip(real, out, strict=False):
        assert line.startswith(f"{path}: ACCEPTED (TLC: "), line
    for (name, path), line in zip(bad.items(), out[len(real) :], strict=True):
        step = bug_recordings[name].caught_at
        assert line.startswith(f"{path}: REJECTED at step {step} ({EXPECTED[name][1]})"), line


@pytest.mark.tlc
def test_streamed_recordings_accepted_and_stream_bugs_rejected(
    seed_behaviours: list[Behaviour],
) -> None:
    """Recordings of streamed replays: the real transport's are behaviours of the spec, each
    stream bug's is rejected at the step the checked streamed replay caught it."""
    assert set(STREAM_EXPECTED) == set(STREAM_BUGS)
    for i in REAL:
        behaviour = seed_behaviours[i]
        recording = record_behaviour(behaviour, SEED, variant=i, streaming=True)
        states = [coerce_state(line, SEED, n)[0].as_record() for n, line in enumerate(recording)]
        assert states == list(behaviour.states())
        report = check_trace(recording, SEED, actions=_claims(recording))
        assert report.accepted, str(report)
    for name, bug in sorted(STREAM_BUGS.items()):
        caught = _record_bug(bug, seed_behaviours, streaming=True)
        report = check_trace(caught.recording, SEED)
        assert not report.accepted, name
        assert report.failed_step == caught.caught_at, (name, str(report))
        assert report.failed_property == STREAM_EXPECTED[name], (name, str(report))
