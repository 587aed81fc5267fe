"""Each spec mutant in spec/mutants/gateway breaks exactly the property it names: TLC rejects
it for that property, the mirror with the same one change rejects it for the same property,
and TLC's counterexample is a behaviour of the mirror's mutant, step for step."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from itertools import chain, combinations, pairwise, permutations
from pathlib import Path

import attrs
import pytest

from tpx.oracle.model.gateway import actions as A
from tpx.oracle.model.gateway import explore
from tpx.oracle.model.gateway.actions import Halted, Init, Recover, Rotate
from tpx.oracle.model.gateway.invariants import PROPERTIES
from tpx.oracle.model.gateway.refinement import RefinementUpToErrorsStep
from tpx.oracle.model.gateway.state import EXCEPT, Config, InFlight, State, ToolId, WrongOf
from tpx.oracle.tlc import load_cfg, run_tlc
from tpx.oracle.values import ModelValue

from .conftest import CFG, DEEP_CFG, FAILOVER_CFG, MUTANTS, SPEC, assert_one_change

ConvAction = Callable[[State, ModelValue, Config], Iterator[State]]


def _subsets(
    s: frozenset[tuple[ModelValue, ModelValue]],
) -> Iterator[frozenset[tuple[ModelValue, ModelValue]]]:
    items = sorted(s)
    return (
        frozenset(x)
        for x in chain.from_iterable(combinations(items, r) for r in range(len(items) + 1))
    )


# ----------------------------------------------------------------- the mirror's mutants


def cross_pairing_reply(s: State, c: ModelValue, cfg: Config) -> Iterator[State]:
    if s.phase[c] == "req":
        for ids in _subsets(cfg.AllIds):  # SUBSET AllIds, not SUBSET Ids(c)
            yield attrs.evolve(
                s,
                emitted=EXCEPT(s.emitted, c, ids),
                wireIds=EXCEPT(s.wireIds, c, ids),
                wireShape=EXCEPT(s.wireShape, c, cfg.NativeShape(s.provider)),
                phase=EXCEPT(s.phase, c, "resp"),
            )


def losing_fail(s: State, c: ModelValue, cfg: Config) -> Iterator[State]:
    for t in A.ProviderFail(s, c, cfg):
        yield attrs.evolve(
            t,
            pending=EXCEPT(t.pending, c, frozenset()),
            calls=EXCEPT(t.calls, c, frozenset()),
        )


def drifting_fail(s: State, c: ModelValue, cfg: Config) -> Iterator[State]:
    for t in A.ProviderFail(s, c, cfg):
        for token in (False, True):
            yield attrs.evolve(t, hasToken=token, provider=cfg.Select(t.hasKey, token))


def unissued_send(s: State, c: ModelValue, cfg: Config) -> Iterator[State]:
    for t in A.CallerSend(s, c, cfg):
        for extra in _subsets(cfg.Ids(c)):
            ids = s.pending[c] | extra
            yield attrs.evolve(
                t, reqIds=EXCEPT(t.reqIds, c, ids), wireIds=EXCEPT(t.wireIds, c, ids)
            )


def _permutations(ids: frozenset[ToolId]) -> Iterator[dict[ToolId, ToolId]]:
    items = sorted(ids)
    return (dict(zip(items, perm, strict=True)) for perm in permutations(items))


def permuting_deliver(s: State, c: ModelValue, cfg: Config) -> Iterator[State]:
    for t in A.Deliver(s, c, cfg):
        for perm in _permutations(s.wireIds[c]):
            yield attrs.evolve(t, calls=EXCEPT(t.calls, c, frozenset(perm.items())))


def swapping_send(s: State, c: ModelValue, cfg: Config) -> Iterator[State]:
    for t in A.CallerSend(s, c, cfg):
        for perm in _permutations(s.pending[c]):
            rounds = s.hist[c] if not s.calls[c] else (*s.hist[c], frozenset(perm.items()))
            yield attrs.evolve(t, wireRes=EXCEPT(t.wireRes, c, rounds))


def dropping_send(s: State, c: ModelValue, cfg: Config) -> Iterator[State]:
    for t in A.CallerSend(s, c, cfg):
        rounds = () if not s.calls[c] else (s.calls[c],)
        yield attrs.evolve(t, wireRes=EXCEPT(t.wireRes, c, rounds))


def correct_refusing_abort(s: State, c: ModelValue, cfg: Config) -> Iterator[State]:
    wrong = min(WrongOf(s, c))  # CallerAbort's guard and effect, but for the request
    for r in sorted(WrongOf(s, c) | {"ok"}):
        for t in A.CallerAbortWith(s, c, cfg, wrong):
            yield attrs.evolve(t, request=EXCEPT(t.request, c, r))


def retired_send(s: State, c: ModelValue, cfg: Config) -> Iterator[State]:
    verified = attrs.evolve(s, signedBy=EXCEPT(s.signedBy, c, 0))  # the guard without Verifies
    for t in A.CallerSend(verified, c, cfg):
        yield attrs.evolve(t, signedBy=s.signedBy)


def wire_clearing_abort(s: State, c: ModelValue, cfg: Config) -> Iterator[State]:
    for t in A.CallerAbort(s, c, cfg):
        yield attrs.evolve(t, wireIds=EXCEPT(t.wireIds, c, frozenset()))


def slot_taking_deliver(s: State, c: ModelValue, cfg: Config) -> Iterator[State]:
    if InFlight(s) < cfg.MaxInFlight:
        yield from A.Deliver(s, c, cfg)


def resend_after_reached(s: State, c: ModelValue, cfg: Config) -> Iterator[State]:
    unreached = attrs.evolve(s, reached=EXCEPT(s.reached, c, False))  # the guard without ~reached
    yield from A.Resend(unreached, c, cfg)


def too_long_send(s: State, c: ModelValue, cfg: Config) -> Iterator[State]:
    for t in A.CallerSend(s, c, cfg):
        for r in ("ok", "long"):
            yield attrs.evolve(t, request=EXCEPT(t.request, c, r))


def failover_after_first_byte(s: State, c: ModelValue, cfg: Config) -> Iterator[State]:
    before = attrs.evolve(s, fwd=EXCEPT(s.fwd, c, 0))  # the guard without fwd[c] = 0
    for t in A.Failover(before, c, cfg):
        yield attrs.evolve(t, fwd=s.fwd)


def first_byte_again(s: State, c: ModelValue, cfg: Config) -> Iterator[State]:
    before = attrs.evolve(s, fwd=EXCEPT(s.fwd, c, 0))  # the guard without fwd[c] = 0
    for _ in A.FirstByte(before, c, cfg):
        yield attrs.evolve(s, fwd=EXCEPT(s.fwd, c, s.fwd[c] + 1))


def kind_drifting_failover(s: State, c: ModelValue, cfg: Config) -> Iterator[State]:
    for t in A.Failover(s, c, cfg):
        for token in (False, True):
            yield attrs.evolve(t, hasToken=token, provider=cfg.Select(t.hasKey, token))


CASES: dict[str, tuple[str, str, ConvAction, str | None]] = {
    # mutant: (replaced action, verdict kind, mirror's replacement, property)
    "MutGwCrossPairing": ("ProviderReply", "invariant", cross_pairing_reply, "NoCrossPairing"),
    "MutGwPermutedIds": ("Deliver", "invariant", permuting_deliver, "PairingInv"),
    "MutGwSwappedResults": ("CallerSend", "invariant", swapping_send, "PairingInv"),
    "MutGwDroppedRounds": ("CallerSend", "invariant", dropping_send, "PairingInv"),
    "MutGwRefusesCorrect": (
        "CallerAbort",
        "action_property",
        correct_refusing_abort,
        "RefusesOnlyWrong",
    ),
    "MutGwRetiredAccepted": ("CallerSend", "action_property", retired_send, "SendsOnlyCorrect"),
    "MutGwRefusalOnWire": (
        "CallerAbort",
        "action_property",
        wire_clearing_abort,
        "RefinementUpToErrors",
    ),
    "MutGwRetryLoses": ("ProviderFail", "invariant", losing_fail, "RetryInv"),
    "MutGwSelectionDrift": (
        "ProviderFail",
        "action_property",
        drifting_fail,
        "SelectionStable",
    ),
    "MutGwUnissuedId": ("CallerSend", "invariant", unissued_send, "PairingInv"),
    "MutGwDeadlock": ("Deliver", "deadlock", slot_taking_deliver, None),
    "MutGwResendReached": ("Resend", "invariant", resend_after_reached, "OneGeneration"),
    "MutGwTooLongSent": ("CallerSend", "action_property", too_long_send, "SendsOnlyCorrect"),
    "MutGwFailoverAfterFirstByte": (
        "Failover",
        "action_property",
        failover_after_first_byte,
        "FailoverBeforeFirstByte",
    ),
    "MutGwDoubleDelivery": ("FirstByte", "invariant", first_byte_again, "NoDuplicateDelivery"),
    "MutGwFailoverKindDrift": (
        "Failover",
        "action_property",
        kind_drifting_failover,
        "SelectionStable",
    ),
}
EXIT = {"invariant": 12, "action_property": 13, "deadlock": 11}
#: The mutants whose counterexample needs two tool ids and three turns, or a second key
#: (the deep cfg).
DEEP = frozenset(
    {"MutGwPermutedIds", "MutGwSwappedResults", "MutGwDroppedRounds", "MutGwRetiredAccepted"}
)
#: The mutants of the upstream steps (attempts, failover, first byte): the failover cfg.
FAILOVER = frozenset(
    {
        "MutGwResendReached",
        "MutGwFailoverAfterFirstByte",
        "MutGwDoubleDelivery",
        "MutGwFailoverKindDrift",
    }
)


def cfg_path(name: str) -> Path:
    return DEEP_CFG if name in DEEP else FAILOVER_CFG if name in FAILOVER else CFG


def cfg_of(name: str) -> Config:
    return Config.from_cfg(cfg_path(name))


def properties_of(cfg: Config) -> list[tuple[str, Callable[[State, State], bool]]]:
    """The step properties the shipped cfgs name, RefinementUpToErrors included."""

    def up_to_errors(s: State, t: State) -> bool:
        return RefinementUpToErrorsStep(s, t, cfg)

    return [*PROPERTIES, ("RefinementUpToErrors", up_to_errors)]


def mutant_steps(name: str) -> Callable[[State, Config], Iterator[tuple[str, State]]]:
    replaced, _, action, _ = CASES[name]
    actions = tuple((n, action if n == replaced else a) for n, a in A.ACTIONS)

    def steps(s: State, cfg: Config) -> Iterator[tuple[str, State]]:
        for c in cfg.Convs:
            for n, a in actions:
                for t in a(s, c, cfg):
                    yield n, t
        for t in Rotate(s, cfg):
            yield "Rotate", t
        for t in Recover(s, cfg):
            yield "Recover", t
        for t in Halted(s, cfg):
            yield "Halted", t

    return steps


def test_every_mutant_is_one_documented_change_with_the_shipped_cfg() -> None:
    names = sorted(p.stem for p in MUTANTS.glob("Mut*.tla"))
    assert names == sorted(CASES)
    spec_lines = SPEC.read_text().splitlines()
    for name in names:
        text = (MUTANTS / f"{name}.tla").read_text()
        first, *rest = text.splitlines()
        assert first.startswith("\\* MUTANT of TpxGateway. One change: ")
        assert f"MODULE {name} " in rest[0]
        assert load_cfg(MUTANTS / f"{name}.cfg") == load_cfg(cfg_path(name))
        body = [rest[0].replace(name, "TpxGateway"), *rest[1:]]
        assert_one_change(spec_lines, body, CASES[name][0], name)


@pytest.mark.parametrize("name", list(CASES))
def test_mirror_rejects_the_mutant_for_its_property(name: str) -> None:
    _, kind, _, prop = CASES[name]
    cfg = cfg_of(name)
    result = explore(cfg, next=mutant_steps(name), properties=properties_of(cfg))
    assert result.verdict.kind == kind
    assert result.verdict.property == prop
    assert result.trace[0].action == "Init"


@pytest.mark.tlc
@pytest.mark.parametrize("name", list(CASES))
def test_tlc_rejects_the_mutant_for_its_property(name: str) -> None:
    _, kind, _, prop = CASES[name]
    spec = MUTANTS / f"{name}.tla"
    result = run_tlc(spec, MUTANTS / f"{name}.cfg", workers=1)
    assert result.exit_code == EXIT[kind]
    if prop == "RefinementUpToErrors":  # TLC names its step conjunct by its location
        line = next(
            i
            for i, text in enumerate(spec.read_text().splitlines(), 1)
            if "[Seed(c)!Next]_(Seed(c)!vars) \\/ KeepsObligations(c)" in text
        )
        assert f"line {line}," in str(result.verdict)
    else:
        assert result.verdict.kind == kind
        assert result.verdict.property == prop
    # TLC's counterexample is a behaviour of the mirror's mutant
    cfg = cfg_of(name)
    states = [State.from_record(step.state) for step in result.trace]
    assert states[0] in set(Init(cfg))
    nxt = mutant_steps(name)
    for (s, t), step in zip(pairwise(states), result.trace[1:], strict=True):
        assert (step.action, t) in set(nxt(s, cfg)), (name, step.action)
    mirror = explore(cfg, next=nxt, properties=properties_of(cfg))
    assert len(mirror.trace) == len(result.trace)  # both BFS: shortest counterexamples
