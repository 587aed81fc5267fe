"""The explorer catches seeded bugs in the actions (a bad_machines-style test)."""

from __future__ import annotations

from collections.abc import Iterator
from itertools import pairwise

import attrs
import pytest

from tpx.oracle.model import Config, Next, State, explore
from tpx.oracle.model import actions as A
from tpx.oracle.model.invariants import INVARIANTS, TypeOK
from tpx.oracle.model.state import Config as Cfg

C = Config.of(2, 2)


def next_replacing(name: str, fn: A.Action) -> object:
    def nxt(s: State, c: Cfg) -> Iterator[tuple[str, State]]:
        for action_name, action in A.ACTIONS:
            for t in (fn if action_name == name else action)(s, c):
                yield action_name, t

    return nxt


def deliver_openai(s: State, c: Cfg) -> Iterator[State]:
    for t in A.Deliver(s, c):
        yield attrs.evolve(t, gotShape=s.wireShape)


def send_drops_an_id(s: State, c: Cfg) -> Iterator[State]:
    for t in A.CallerSend(s, c):
        yield attrs.evolve(t, wireIds=frozenset(sorted(t.wireIds)[1:]))


def deliver_drops_an_id(s: State, c: Cfg) -> Iterator[State]:
    for t in A.Deliver(s, c):
        yield attrs.evolve(t, pending=frozenset(sorted(t.pending)[1:]))


def fail_switches_provider(s: State, c: Cfg) -> Iterator[State]:
    for t in A.ProviderFail(s, c):
        yield attrs.evolve(t, provider=c.TPX if s.provider == c.ANTHROPIC else c.ANTHROPIC)


def fail_forgets_key(s: State, c: Cfg) -> Iterator[State]:
    for t in A.ProviderFail(s, c):
        yield attrs.evolve(t, hasKey=False, provider=c.Select(False, t.hasToken))


def never_halts(s: State, c: Cfg) -> Iterator[State]:
    return iter(())


def turn_overflows(s: State, c: Cfg) -> Iterator[State]:
    if s.phase == "idle" and s.turn == c.MaxTurns:
        yield attrs.evolve(s, turn=s.turn + 1)
    yield from A.Halted(s, c)


@pytest.mark.parametrize(
    ("action", "bug", "kind", "prop"),
    [
        ("Deliver", deliver_openai, "invariant", "ShapeInv"),
        ("CallerSend", send_drops_an_id, "invariant", "PairingInv"),
        ("Deliver", deliver_drops_an_id, "invariant", "PairingInv"),
        ("ProviderFail", fail_switches_provider, "invariant", "SelectionInv"),
        ("ProviderFail", fail_forgets_key, "action_property", "SelectionStable"),
        ("Halted", never_halts, "deadlock", None),
        ("Halted", turn_overflows, "invariant", "TypeOK"),
    ],
)
def test_seeded_bug_is_caught_with_a_shortest_counterexample(
    action: str, bug: A.Action, kind: str, prop: str | None
) -> None:
    r = explore(C, next=next_replacing(action, bug))  # type: ignore[arg-type]
    assert r.verdict.kind == kind
    assert r.verdict.property == prop
    assert r.exit_code != 0
    trace = r.trace
    assert trace[0][0] == "Init"
    states = [State.from_record(rec) for _, rec in trace]
    assert states[0] in set(A.Init(C))
    # every step is a step of the buggy machine
    buggy = next_replacing(action, bug)
    for (_, s), (a, t) in pairwise(trace):
        succ = set(buggy(State.from_record(s), C))  # type: ignore[operator]
        assert (a, State.from_record(t)) in succ
    # and the last step is where it goes wrong (no shorter prefix violates)
    if kind == "invariant":
        name_to_inv = dict(INVARIANTS)
        assert not name_to_inv[prop](states[-1], C)  # type: ignore[index]
        assert all(name_to_inv[prop](s, C) for s in states[:-1])  # type: ignore[index]
    # a correct machine finds none of these
    assert explore(C, next=Next).ok


def test_type_ok_rejects_out_of_range_values() -> None:
    s = next(iter(A.Init(C)))
    assert TypeOK(s, C)
    assert not TypeOK(attrs.evolve(s, phase="sent"), C)
    assert not TypeOK(attrs.evolve(s, turn=C.MaxTurns + 1), C)
