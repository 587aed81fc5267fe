"""Proof the checks bite: each seeded bug in the real code makes the replay fail, and the
failure names the property the bug breaks."""

from __future__ import annotations

from collections import Counter

import pytest

from conformance.bugs import BUGS, STREAM_BUGS, PerObject
from conformance.replay import CONCRETE_PROPERTIES as CONCRETE
from conformance.replay import Behaviour, ConformanceError, Replayer
from tpx.oracle.model import Config

SEED = Config.of(2, 3)


#: The plain-path bugs that also bite a streamed exchange (the others patch what only the
#: plain shell uses: the body ``finish()`` returns, ``Transport.finish``, ``receive``).
STREAMED_TOO = ("drop_id", "swap_ids", "token_over_key", "pairing_unchecked")


def _run(
    behaviours: list[Behaviour], *, streaming: bool = False
) -> tuple[int, Counter[str], ConformanceError | None]:
    replayer = Replayer(SEED, streaming=streaming)
    failures, named, first = 0, Counter[str](), None
    for i, b in enumerate(behaviours):
        try:
            replayer.replay(b, i)
        except ConformanceError as exc:
            failures += 1
            named.update(exc.violated)
            first = first or exc
    replayer.close()
    return failures, named, first


@pytest.mark.tlc
def test_without_bugs_nothing_fails(seed_behaviours: list[Behaviour]) -> None:
    assert _run(seed_behaviours)[0] == 0


@pytest.mark.tlc
@pytest.mark.parametrize("name", sorted(BUGS))
def test_seeded_bug_is_caught_and_named(name: str, seed_behaviours: list[Behaviour]) -> None:
    bug = BUGS[name]
    with bug.active():
        failures, named, first = _run(seed_behaviours)
    assert failures > 0, f"{name}: no behaviour failed"
    assert first is not None
    assert named[bug.property] > 0, f"{name}: failures named {dict(named)}"
    # of the spec's properties, the one the bug breaks is named most often
    spec_properties = [p for p in named if p not in ("Refinement", "Enabled", *CONCRETE)]
    top = max(spec_properties, key=lambda p: (named[p], p == bug.property))
    assert top == bug.property, dict(named)
    # the message carries a readable trace of (action, observed state)
    assert " Init " in str(first)
    assert "trace (observed)" in str(first)


@pytest.mark.tlc
def test_bug_injection_is_undone(seed_behaviours: list[Behaviour]) -> None:
    for bug in BUGS.values():
        with bug.active():
            pass
    assert _run(seed_behaviours[:50])[0] == 0


@pytest.mark.tlc
@pytest.mark.parametrize("name", [*sorted(STREAM_BUGS), *STREAMED_TOO])
def test_seeded_bug_is_caught_in_streamed_replay(
    name: str, seed_behaviours: list[Behaviour]
) -> None:
    bug = {**BUGS, **STREAM_BUGS}[name]
    with bug.active():
        failures, named, first = _run(seed_behaviours, streaming=True)
    assert failures > 0, f"{name}: no streamed behaviour failed"
    assert first is not None
    spec_properties = [p for p in named if p not in ("Refinement", "Enabled", *CONCRETE)]
    top = max(spec_properties, key=lambda p: (named[p], p == bug.property))
    assert top == bug.property, dict(named)
    assert "trace (observed)" in str(first)


@pytest.mark.tlc
def test_transport_stream_bugs_are_invisible_to_the_plain_replay(
    seed_behaviours: list[Behaviour],
) -> None:
    """A bug in ``Transport.stream`` only: the plain replay passes under it. (A bug in the
    exchange's streaming steps also shows in the plain replay, whose requests sometimes
    ask for a stream and read it whole, ``create(stream=true)``'s path.)"""
    with STREAM_BUGS["stream_openai_to_caller"].active():
        assert _run(seed_behaviours)[0] == 0
    with STREAM_BUGS["stream_drop_id"].active():
        assert _run(seed_behaviours)[0] > 0


class _Slotted:
    __slots__ = ("n",)

    def __init__(self, n: int) -> None:
        self.n = n


def test_a_bugs_memory_is_never_inherited_by_a_later_object() -> None:
    """A collected object's address is reused at once by CPython; a bug's per-exchange
    memory must not answer for the newcomer (it made seeded bugs depend on the allocator)."""
    memory: PerObject[_Slotted, str] = PerObject()
    first = _Slotted(0)
    memory.set(first, "kept")
    address = id(first)
    del first
    later = [_Slotted(i) for i in range(1, 200)]
    assert all(memory.get(obj) is None for obj in later)
    assert all(id(obj) != address for obj in later)  # the kept entry holds its object
    assert memory.pop(later[0]) is None
