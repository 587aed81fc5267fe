"""The monitor's compact step (:mod:`tpx.oracle.model.gateway.conversation`) agrees with the
reference mirror (:mod:`tpx.oracle.model.gateway.actions` / ``invariants``):

* on every edge of the gateway cfgs' reachable graphs (the four the graph-equality test
  compares with TLC), each conversation's projection: the same successors per action, the
  invariants holding, the other conversations untouched;
* on every state of a small one-conversation domain (valid and ill-typed values): the same
  successors, the same first failing invariant;
* on whole events, the monitor's verdict (:meth:`GatewayMonitor._verdict`) against
  :func:`reference_verdict` on spec steps and their one-field corruptions;
* on event streams: random spec behaviours with corrupted events, and the seeded bugs'
  illegal steps (the scenarios of test_gateway_monitor.py), through :class:`GatewayMonitor`
  and the :class:`ReferenceMonitor` side by side: the same verdict at every event.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from itertools import chain, combinations, product
from pathlib import Path
from typing import Any

import attrs
import pytest

from tpx.oracle.model.gateway import Config, InFlight, Init, State, Steps
from tpx.oracle.model.gateway.actions import ACTIONS as REFERENCE_ACTIONS
from tpx.oracle.model.gateway.actions import ProviderReplyWith
from tpx.oracle.model.gateway.conversation import (
    ACTIONS,
    EXCEPT,
    INVARIANTS,
    LOCAL,
    UPSTREAM_STEPS,
    Context,
    ConvState,
    Ids,
    Outcomes,
    Phases,
    ProviderReply,
    Select,
    SelectionStable,
    Sent,
    Shapes,
    idset,
    step,
)
from tpx.oracle.model.gateway.conversation import Init as InitAt
from tpx.oracle.model.gateway.monitor import GatewayMonitor, _Live, snapshot_of_exchange
from tpx.oracle.model.gateway.state import Verifies
from tpx.oracle.tlc.cfg import load_cfg
from tpx.oracle.values import ModelValue, TLAValue
from tpx.transport.exchange import ExchangeSnapshot, Provider

from . import test_gateway_monitor as scenarios
from .conftest import CFG, REFINEMENT_CFG, mvs
from .reference_monitor import (
    C,
    ReferenceMonitor,
    as_state,
    config,
    reference_verdict,
    state_failure,
    tagged,
    view,
)

NAMES = (
    "CallerSend",
    "CallerAbort",
    "NoProvider",
    "ProviderReply",
    "ProviderFail",
    "Deliver",
    "ClientGone",
    "Retry",
    "PromptTooLong",
)

# the cfgs whose mirror graph test_gateway_graph_equals_tlc.py compares with TLC's
CASES: dict[str, tuple[Path, dict[str, TLAValue]]] = {
    "shipped": (CFG, {}),
    "refinement": (REFINEMENT_CFG, {}),
    "convs3-turns1-named-providers": (
        CFG,
        {
            "Convs": mvs("alice", "bob", "carol"),
            "MaxTurns": 1,
            "ANTHROPIC": ModelValue("anth"),
            "TPX": ModelValue("oai"),
            "NONE": ModelValue("nobody"),
        },
    ),
    "convs1-turns3-ids2": (CFG, {"Convs": mvs("solo"), "MaxTurns": 3, "ToolIds": mvs("a", "b")}),
    "keys2": (CFG, {"MaxKeys": 2}),
    "preflight": (CFG, {"Preflight": True}),
}


def test_the_compact_actions_are_the_specs() -> None:
    assert {*ACTIONS, "ProviderReply"} == set(NAMES)
    assert set(NAMES) | set(UPSTREAM_STEPS) == {n for n, _ in REFERENCE_ACTIONS}
    assert [n for n, _ in INVARIANTS] == [
        "TypeOK",
        "ShapeInv",
        "PairingInv",
        "SelectionInv",
        "BoundedInv",
        "NoCrossPairing",
        "RetryInv",
    ]


# ------------------------------------------------------------ every edge of the graphs


def reachable(cfg: Config) -> list[State]:
    seen = set(Init(cfg))
    frontier = list(seen)
    while frontier:
        s = frontier.pop()
        for _, _, t in Steps(s, cfg):
            if t not in seen:
                seen.add(t)
                frontier.append(t)
    return sorted(seen, key=repr)


def project(s: State, c: ModelValue, cfg: Config) -> ConvState:
    """Conversation *c*'s view of *s* (tool ids ``"<owner>:<t>"``, providers by role)."""
    role = {cfg.ANTHROPIC: "ANTHROPIC", cfg.TPX: "TPX", cfg.NONE: "NONE"}

    def ids(v: frozenset[tuple[ModelValue, ModelValue]]) -> Ids:
        return idset([f"{owner}:{t}" for owner, t in v])

    return ConvState(
        hasKey=s.hasKey,
        hasToken=s.hasToken,
        provider=role[s.provider],
        turn=s.turn[c],
        phase=s.phase[c],
        pending=ids(s.pending[c]),
        reqIds=ids(s.reqIds[c]),
        wireShape=s.wireShape[c],
        wireIds=ids(s.wireIds[c]),
        emitted=ids(s.emitted[c]),
        gotShape=s.gotShape[c],
        lastOutcome=s.lastOutcome[c],
        retryable=s.retryable[c],
    )


def context(s: State, c: ModelValue, cfg: Config) -> Context:
    local = project(s, c, cfg)
    return Context(
        boot=(local.hasKey, local.hasToken, local.provider),
        GatewayRetry=cfg.GatewayRetry,
        MaxTurns=cfg.MaxTurns,
        MaxInFlight=cfg.MaxInFlight,
        others_in_flight=InFlight(s) - (s.phase[c] != "idle"),
        verifies=Verifies(s, c),
        Preflight=cfg.Preflight,
    )


def subsets(items: list[str]) -> Iterator[Ids]:
    every = chain.from_iterable(combinations(items, r) for r in range(len(items) + 1))
    return (frozenset(ids) for ids in every)


@pytest.mark.parametrize("case", list(CASES))
def test_every_edge_of_the_cfgs_graphs(case: str) -> None:
    base, constants = CASES[case]
    cfg = Config.from_constants({**load_cfg(base).constants, **constants})
    edges = 0
    for s in reachable(cfg):
        spec: dict[tuple[ModelValue, str], set[ConvState]] = {}
        for name, c, t in Steps(s, cfg):
            if c is None:
                continue  # Halted: no conversation's step
            edges += 1
            spec.setdefault((c, name), set()).add(project(t, c, cfg))
            for d in cfg.Convs:  # a conversation's step leaves the others as they were
                assert d == c or project(t, d, cfg) == project(s, d, cfg)
        for c in cfg.Convs:
            local, g = project(s, c, cfg), context(s, c, cfg)
            assert all(inv(local, g) for _, inv in INVARIANTS), (local, g)
            assert SelectionStable(local, g)
            own = sorted(f"{c}:{t}" for t in cfg.ToolIds)
            for name in NAMES:
                if name == "ProviderReply":
                    fast = {ProviderReply(local, g, ids) for ids in subsets(own)}
                else:
                    fast = {step(name, local, g, frozenset())}
                assert fast - {None} == spec.get((c, name), set()), (name, local, g)
    assert edges > 100


# ------------------------------------------------------ a small one-conversation domain

IDS: tuple[Ids, ...] = (frozenset(), frozenset({"a"}))
CREDS = ((False, False), (False, True), (True, False))


def domain() -> Iterator[ConvState]:
    """Well-typed one-conversation states over one tool id, MaxTurns = 2."""
    for (has_key, has_token), turn, phase, ids, wire_shape, outcome, retryable in product(
        CREDS, (0, 2), sorted(Phases), product(IDS, repeat=4), sorted(Shapes), sorted(Outcomes),
        (False, True),
    ):  # fmt: skip
        pending, req_ids, wire_ids, emitted = ids
        yield ConvState(
            has_key,
            has_token,
            Select(has_key, has_token),
            turn,
            phase,
            pending,
            req_ids,
            wire_shape,
            wire_ids,
            emitted,
            "messages",
            outcome,
            retryable,
        )


def contexts(s: ConvState) -> Iterator[Context]:
    boot = (s.hasKey, s.hasToken, s.provider)
    for retry, (others, bound), preflight in product(
        (True, False), ((0, 2), (1, 1)), (False, True)
    ):
        yield Context(boot, retry, 2, bound, others, Preflight=preflight)


def small_config(g: Context) -> Config:
    return Config(
        frozenset({C}),
        frozenset({ModelValue("a#0")}),
        g.MaxTurns,
        max(g.MaxInFlight - g.others_in_flight, 0),
        g.GatewayRetry,
        Preflight=g.Preflight,
    )


def test_every_small_step_agrees_with_the_reference_actions() -> None:
    actions = dict(REFERENCE_ACTIONS)
    checked = enabled = 0
    for s in domain():
        before = as_state(s)
        for g in contexts(s):
            cfg = small_config(g)
            for name in NAMES:
                for witness in IDS if name == "ProviderReply" else (frozenset(),):
                    fast = step(name, s, g, witness)
                    if name == "ProviderReply":
                        spec = list(ProviderReplyWith(before, C, cfg, tagged(witness)))
                    else:
                        spec = list(actions[name](before, C, cfg))
                    assert [view(as_state(t)) for t in (fast,) if t is not None] == [
                        view(t) for t in spec[:1]
                    ], (name, s, g)
                    # CallerAbort: one successor per wrong request, all one exchange state
                    assert len({view(t) for t in spec}) == len(spec[:1]), (name, s, g)
                    checked += 1
                    enabled += fast is not None
    assert enabled > 1000
    assert checked > 10000


#: Values a broken gateway could report, per variable (valid ones of other states too).
CORRUPT: dict[str, tuple[Any, ...]] = {
    "hasKey": (True, False, 1, None),
    "hasToken": (True, False, 0, "yes"),
    "provider": ("ANTHROPIC", "TPX", "NONE", "OPENAI", 5),
    "turn": (0, 1, 2, 3, -1, True, "1", 1.5),
    "phase": ("idle", "req", "resp", "bogus", None),
    "pending": tuple(map(frozenset, ((), "a", "b", "ab"))),
    "reqIds": tuple(map(frozenset, ((), "a", "b"))),
    "wireShape": ("messages", "openai", "sse", 0),
    "wireIds": (*map(frozenset, ((), "a", "b")), ("a", "a")),
    "emitted": tuple(map(frozenset, ((), "a", "b", "ab"))),
    "gotShape": ("messages", "openai", None),
    "lastOutcome": ("none", "ok", "err", "fine"),
    "retryable": (False, True, 1, None),
}


def corruptions(t: ConvState) -> Iterator[ConvState]:
    """*t*, and *t* with one variable changed to each value of :data:`CORRUPT`."""
    yield t
    for name, values in CORRUPT.items():
        for v in values:
            if v != getattr(t, name) or type(v) is not type(getattr(t, name)):
                yield t._replace(**{name: v})


def first_failure(t: ConvState, g: Context) -> str | None:
    for name, inv in INVARIANTS:
        if not inv(t, g):
            return name
    return None if SelectionStable(t, g) else "SelectionStable"


def test_every_small_state_fails_the_same_invariant_first() -> None:
    """The first failing invariant (then SelectionStable) is the reference's, on every
    state of the domain and every one-variable corruption of every 25th."""
    failures: set[str | None] = set()
    for n, s in enumerate(domain()):
        boot = (s.hasKey, s.hasToken, s.provider) if n % 3 else (False, True, "TPX")
        for t in corruptions(s) if n % 25 == 0 else (s,):
            for others, bound, foreign in ((0, 2, None), (1, 1, None), (0, 1, ("a", "d"))):
                g = Context(boot, True, 2, bound, others, foreign)
                expected = state_failure(as_state(t), config(g, t), g)
                assert first_failure(t, g) == expected, (t, g)
                failures.add(expected)
    assert failures == {None, *(n for n, _ in INVARIANTS), "SelectionStable"}


def monitor_for(g: Context) -> GatewayMonitor:
    has_key, has_token, provider = g.boot
    return GatewayMonitor(
        provider=provider, has_key=has_key, has_token=has_token, gateway_retry=g.GatewayRetry
    )


def holdable(s: ConvState, max_turns: int = 2) -> bool:
    """*s* can be a live conversation's state: every conversation starts on a state
    satisfying TypeOK, the LOCAL invariants and Sent (idle), and they are inductive."""
    g = Context((s.hasKey, s.hasToken, s.provider), True, max_turns, 2, 0)
    local = [inv for name, inv in INVARIANTS if name in LOCAL or name == "TypeOK"]
    return Sent(s, g) and all(inv(s, g) for inv in local)


def test_the_local_invariants_are_inductive() -> None:
    """Every successor of a holdable state is holdable, on a domain where the four id
    variables take every pattern of equal and different sets (so by data independence on
    any ids: the actions and invariants only move and compare id sets), and keeps its
    selection (hasKey, hasToken, provider): the monitor's short path checks neither again
    on a state equal to the successor."""
    ids = tuple(map(frozenset, ((), "a", "b", "ab")))
    held = steps = 0
    for (has_key, has_token), turn, phase, (pending, req, wire, emitted), outcome, retry in product(
        CREDS, (0, 1, 2), sorted(Phases), product(ids, repeat=4), sorted(Outcomes), (False, True)
    ):  # fmt: skip
        provider = Select(has_key, has_token)
        for wire_shape in sorted(Shapes):
            s = ConvState(has_key, has_token, provider, turn, phase, pending, req, wire_shape,
                          wire, emitted, "messages", outcome, retry)  # fmt: skip
            if not holdable(s):
                continue
            held += 1
            for gateway_retry, (others, bound) in product((True, False), ((0, 2), (1, 1))):
                g = Context((has_key, has_token, provider), gateway_retry, 2, bound, others)
                for name in NAMES:
                    for witness in ids if name == "ProviderReply" else (frozenset(),):
                        t = step(name, s, g, witness)
                        if t is not None:
                            steps += 1
                            assert holdable(t), (s, name, t)
                            # no action changes the selection: SelectionStable is inductive
                            assert t[:3] == s[:3], (s, name, t)
    assert held > 1000
    assert steps > 10000


def test_init_holds_the_local_invariants_whatever_it_has_pending() -> None:
    """The monitor's short path for a first event (``GatewayMonitor._resumes``) takes Init
    but for ``pending`` without evaluating the LOCAL invariants: they (and Sent) hold there,
    whatever ids are pending, a multiset of them included."""
    checked = 0
    for (has_key, has_token), retry in product(CREDS, (True, False)):
        g = Context((has_key, has_token, Select(has_key, has_token)), retry, 2, 1, 0)
        for pending in (*map(frozenset, ((), "a", "ab")), ("a", "a")):
            assert holdable(EXCEPT(InitAt(g), pending=pending))
            checked += 1
    assert checked == 24


def test_every_small_event_gets_the_reference_verdict() -> None:
    """The monitor's whole check of one event (invariants, SelectionStable, Next; Init for
    a start) against the reference's, on spec steps from a sample of the domain's states a
    monitor can hold (:func:`holdable`) and all their one-variable corruptions, with and
    without the event reporting ``retryable``."""
    rng = random.Random(8)
    states = [s for s in domain() if holdable(s)]
    verdicts: set[str | None] = set()
    checked = 0
    for s in rng.sample(states, 12):
        for g in contexts(s):
            fast = monitor_for(g)
            for name in (*NAMES, "Init", "Resume"):
                start = name in ("Init", "Resume")
                prev = None if start else s
                successor = s if start else step(name, s, g, frozenset("a")) or s
                for t in corruptions(successor):
                    for given in (False, True):
                        got_t, found = fast._verdict(prev, name, t, g, given)
                        ref_t, expected = reference_verdict(prev, name, t, g, given)
                        expected = expected and expected.split()[0]
                        assert (got_t, found and found[0]) == (ref_t, expected), (prev, name, t)
                        verdicts.add(expected)
                        checked += 1
    seen = {None, "Init", "Next", "SelectionStable"}
    assert verdicts == seen | {n for n, _ in INVARIANTS if n != "NoCrossPairing"}
    assert checked > 40000


# -------------------------------------------------------------------- event streams


def snapshot(s: State, c: ModelValue) -> dict[str, Any]:
    return scenarios.snap(s, c)


def corrupt_event(event: dict[str, Any], rng: random.Random, others: list[str]) -> dict[str, Any]:
    """One variable of *event* changed (or dropped), as a broken gateway could report it."""
    name = rng.choice([*CORRUPT, "missing"])
    if name == "missing":
        return {k: v for k, v in event.items() if k != rng.choice(list(event))}
    if name in ("pending", "reqIds", "wireIds", "emitted"):
        pool = [[], event[name][:1], [*event[name], rng.choice(others)], 5, ["x", "x"]]
        return {**event, name: rng.choice(pool)}
    return {**event, name: rng.choice(CORRUPT[name])}


@pytest.mark.parametrize(
    "cfg",
    [Config.of(2, 1, 2), Config.of(3, 2, 2, 2), Config.of(2, 1, 2, retry=False)],
    ids=["shipped", "convs3-ids2-inflight2", "no-retry"],
)
def test_event_streams_get_the_reference_verdicts(cfg: Config) -> None:
    """Random spec behaviours, each event corrupted with probability 1/5, fed to the
    monitor and the reference monitor side by side: the same verdict every time."""
    rng = random.Random(5)
    names = [f"{c}:{t}" for c in cfg.Convs for t in cfg.ToolIds]
    properties: set[str] = set()
    for _ in range(60):
        s = rng.choice(list(Init(cfg)))
        kw: dict[str, Any] = dict(
            provider=s.provider.name,
            has_key=s.hasKey,
            has_token=s.hasToken,
            max_in_flight=cfg.MaxInFlight,
            gateway_retry=cfg.GatewayRetry,
        )
        monitors = (GatewayMonitor(**kw), ReferenceMonitor(**kw))
        events: list[tuple[str, str, dict[str, Any]]] = [
            (c.name, "Init", snapshot(s, c)) for c in cfg.Convs
        ]
        while True:
            # one option per step the monitor can tell apart (CallerAbort's wrong
            # requests are one exchange step), in Steps' order
            distinct: dict[tuple[str, ModelValue, tuple[object, ...]], Any] = {}
            for n, c, t in Steps(s, cfg):
                if c is not None:
                    distinct.setdefault((n, c, view(t)), (n, c, t))
            options = list(distinct.values())
            if not options:
                break
            name, c, s = rng.choice(options)
            assert c is not None
            events.append((c.name, name, snapshot(s, c)))
        for conversation, action, event in events:
            if rng.random() < 0.2:
                event = corrupt_event(event, rng, names)
                action = rng.choice([action, action, "Deliver", "Resume", "Halted"])
            verdicts = [m.observe(conversation, action, event) for m in monitors]
            fast, ref = ((v.property, v.step, v.action) if v else None for v in verdicts)
            assert fast == ref, (conversation, action, event)
            if verdicts[0] is not None:
                properties.add(verdicts[0].property)
        assert monitors[0].in_flight == monitors[1].in_flight
    assert {"TypeOK", "PairingInv", "Next", "Init", "SelectionStable"} <= properties


SEEDED: list[Callable[[], None]] = [
    scenarios.test_ids_leaking_between_conversations_is_no_cross_pairing,
    scenarios.test_a_retry_that_loses_an_obligation_is_retry_inv,
    scenarios.test_a_retry_that_drops_or_adds_a_tool_result_is_pairing_inv,
    scenarios.test_a_tool_use_id_never_issued_is_pairing_inv,
    scenarios.test_selection_drifting_between_workers_is_selection_stable,
    scenarios.test_in_flight_bound_is_bounded_inv,
    scenarios.test_steps_the_spec_does_not_take,
    scenarios.test_a_refused_request_then_a_correct_answer,
    scenarios.test_to_wire_compares_caller_ids_through_the_bijection,
    scenarios.test_to_wire_counts_a_wire_id_the_provider_repeats,
]


@pytest.mark.parametrize("scenario", SEEDED, ids=[f.__name__[5:] for f in SEEDED])
def test_the_seeded_bugs_illegal_steps_get_the_reference_verdicts(
    scenario: Callable[[], None], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each seeded-bug scenario, with its expectations (the property, the step), holds with
    the reference monitor too: both stop each bug at the same first illegal step."""
    monkeypatch.setattr(scenarios, "GatewayMonitor", ReferenceMonitor)
    scenario()
    assert scenarios.monitor().__class__ is ReferenceMonitor


# ------------------------------------------- observe_exchange == observe(the mapping)


def exchange_snapshot(s: State, c: ModelValue, rng: random.Random) -> ExchangeSnapshot:
    """Conversation *c* of *s* as the exchange reports it, sometimes with a wire id the
    provider repeated, a non-string id, a drifted provider or an odd phase."""
    event = snapshot(s, c)
    wire = tuple(event["wireIds"])
    fields: dict[str, Any] = dict(
        provider=Provider[event["provider"]],
        turn=event["turn"],
        phase=event["phase"],
        pending=frozenset(event["pending"]),
        last_outcome=event["lastOutcome"],
        max_turns=None,
        req_ids=frozenset(event["reqIds"]),
        wire_shape=event["wireShape"],
        wire_ids=frozenset(wire),
        emitted=frozenset(event["emitted"]),
        got_shape=event["gotShape"],
        wire_list=wire,
        emitted_list=tuple(event["emitted"]),
    )
    odd = rng.random()
    if odd < 0.05:
        fields["wire_list"] = (*wire, *wire[:1])  # a repeated wire id
    elif odd < 0.08:
        fields["pending"] = frozenset({*fields["pending"], 7})
    elif odd < 0.1:
        fields["provider"] = Provider.ANTHROPIC
    elif odd < 0.12:
        fields["phase"] = "bogus"
    return ExchangeSnapshot(**fields)


@pytest.mark.parametrize("to_wire", [None, str.upper], ids=["ids", "to_wire"])
def test_observe_exchange_is_observe_of_the_mapping(to_wire: Callable[[str], str] | None) -> None:
    """The exchange path (the live gateway's) gives the verdicts, the counts and the
    traces of :meth:`GatewayMonitor.observe` on :func:`snapshot_of_exchange`'s mapping."""
    rng = random.Random(13)
    cfg = Config.of(2, 2, 2)
    properties: set[str] = set()
    for _ in range(40):
        s = rng.choice(list(Init(cfg)))
        kw: dict[str, Any] = dict(provider=s.provider.name, max_in_flight=2, to_wire=to_wire)
        typed, mapped = GatewayMonitor(**kw), GatewayMonitor(**kw)
        events = [(c, "Init", s) for c in cfg.Convs]
        while options := [(n, c, t) for n, c, t in Steps(s, cfg) if c is not None]:
            name, c, s = rng.choice(options)
            assert c is not None
            events.append((c, name, s))
        for c, action, state in events:
            snap = exchange_snapshot(state, c, rng)
            held = frozenset(snapshot(state, c)["pending"]) if rng.random() < 0.5 else None
            got = typed.observe_exchange(c.name, action, snap, obligations=held)
            record = snapshot_of_exchange(snap, action=action, obligations=held)
            want = mapped.observe(c.name, action, record)
            assert (got and attrs.astuple(got)) == (want and attrs.astuple(want))
            assert typed.trace(c.name) == mapped.trace(c.name)
            if got is not None:
                properties.add(got.property)
        assert (typed.steps, typed.violations) == (mapped.steps, mapped.violations)
        assert [typed.close(c.name) for c in cfg.Convs] == [mapped.close(c.name) for c in cfg.Convs]
    assert {"TypeOK", "SelectionStable"} <= properties


# ----------------------------------- the monitor's short paths on every edge of the graphs


class Counting(GatewayMonitor):
    """The shipped monitor, counting the events its short paths took."""

    short = 0

    def _resumed(self, *args: Any) -> bool:
        taken = super()._resumed(*args)
        self.short += taken
        return taken

    def _accepts(self, *args: Any) -> bool:
        taken = super()._accepts(*args)
        self.short += taken
        return taken


def holding(s: State, cfg: Config) -> tuple[Counting, ReferenceMonitor]:
    """The shipped monitor and the reference monitor, each holding every conversation of
    *s* live (its projection, its ids its own) with *s*'s exchanges in flight."""
    first = project(s, min(cfg.Convs, key=str), cfg)
    kw: dict[str, Any] = dict(
        provider=first.provider,
        has_key=first.hasKey,
        has_token=first.hasToken,
        max_in_flight=cfg.MaxInFlight,
        gateway_retry=cfg.GatewayRetry,
        preflight=cfg.Preflight,
    )
    fast, ref = Counting(**kw), ReferenceMonitor(**kw)
    for m in (fast, ref):
        for c in cfg.Convs:
            local = project(s, c, cfg)
            owned = {*local.pending, *local.reqIds, *local.wireIds, *local.emitted}
            m._live[c.name] = _Live(local, [], owned)
            m._owner.update(dict.fromkeys(owned, c.name))
        m._in_flight = InFlight(s)
    return fast, ref


def exchange_of(s: State, c: ModelValue, cfg: Config) -> ExchangeSnapshot:
    """Conversation *c* of *s* as an exchange reports it."""
    local = project(s, c, cfg)
    return ExchangeSnapshot(
        provider=Provider[local.provider],
        turn=local.turn,
        phase=local.phase,
        pending=frozenset(local.pending),
        last_outcome=local.lastOutcome,
        max_turns=None,
        req_ids=frozenset(local.reqIds),
        wire_shape=local.wireShape,
        wire_ids=frozenset(local.wireIds),
        emitted=frozenset(local.emitted),
        got_shape=local.gotShape,
        wire_list=tuple(sorted(local.wireIds)),
        emitted_list=tuple(sorted(local.emitted)),
    )


def broken(snap: ExchangeSnapshot, kind: int, other: str) -> ExchangeSnapshot:
    """*snap* with one variable as a broken gateway could report it (*other*: an id of
    another conversation)."""
    wire = (*snap.wire_list, other)
    changes: list[dict[str, Any]] = [
        {"turn": snap.turn + 1},
        {"turn": float(snap.turn)},
        {"phase": {"idle": "req", "req": "resp", "resp": "idle"}[snap.phase]},
        {"pending": snap.pending | {other}},
        {"pending": frozenset(sorted(snap.pending)[1:])},
        {"req_ids": snap.req_ids ^ {other}},
        {"wire_ids": frozenset(wire), "wire_list": wire},
        {"wire_list": (*snap.wire_list, *snap.wire_list[:1]) or ("x", "x")},
        {
            "emitted": snap.emitted ^ {"fresh"},
            "emitted_list": tuple(sorted(snap.emitted ^ {"fresh"})),
        },
        {"wire_shape": "openai" if snap.wire_shape == "messages" else "messages"},
        {"got_shape": "openai"},
        {"last_outcome": "ok" if snap.last_outcome != "ok" else "err"},
        {
            "provider": Provider.ANTHROPIC
            if snap.provider is not Provider.ANTHROPIC
            else Provider.TPX
        },
    ]
    return attrs.evolve(snap, **changes[kind % len(changes)])


def same_verdict(
    fast: Counting, ref: ReferenceMonitor, key: str, action: str, snap: Any
) -> str | None:
    got = fast.observe_exchange(key, action, snap)
    want = ref.observe_exchange(key, action, snap)
    assert (got and got.property) == (want and want.property), (key, action, snap, got, want)
    assert fast.trace(key) == ref.trace(key)
    live, expected = fast._live.get(key), ref._live.get(key)
    assert (live and live.state) == (expected and expected.state), (key, action, snap)
    assert (fast.in_flight, fast._owner) == (ref.in_flight, ref._owner)
    return None if got is None else got.property


@pytest.mark.parametrize("case", list(CASES))
def test_the_short_paths_agree_with_the_reference_on_every_edge(case: str) -> None:
    """On every edge of the cfg's graph, from a monitor holding every conversation of the
    edge's source: the event of the step, and the event with one variable broken, and a
    new conversation resuming with each conversation's pending (its own ids, and another
    live conversation's): the shipped monitor (its short paths first) and the reference
    monitor give the same verdicts and hold the same states, owners and in-flight count;
    the short paths took every legal event."""
    base, constants = CASES[case]
    cfg = Config.from_constants({**load_cfg(base).constants, **constants})
    legal = short = 0
    found: set[str | None] = set()
    first, last = min(cfg.Convs, key=str), max(cfg.Convs, key=str)
    states = reachable(cfg)
    for n, s in enumerate(states):
        init = next(i for i in Init(cfg) if (i.hasKey, i.hasToken) == (s.hasKey, s.hasToken))
        for name, c, t in Steps(s, cfg):
            if c is None:
                continue
            fast, ref = holding(s, cfg)
            assert same_verdict(fast, ref, c.name, name, exchange_of(t, c, cfg)) is None
            legal += 1
            short += fast.short
            fast, ref = holding(s, cfg)
            other = f"{last if c != last else first}:x"
            found.add(
                same_verdict(fast, ref, c.name, name, broken(exchange_of(t, c, cfg), n, other))
            )
        for c in cfg.Convs:
            if s.phase[c] == "idle":
                pending = exchange_of(s, c, cfg).pending  # an exchange resumes at Init's
                resumed = attrs.evolve(exchange_of(init, c, cfg), pending=pending)
                fast, ref = holding(s, cfg)
                found.add(same_verdict(fast, ref, "new", "Resume", resumed))
                fast, ref = holding(s, cfg)
                fast.forget(c.name)
                ref.forget(c.name)
                assert same_verdict(fast, ref, "new", "Resume", resumed) is None
                short += fast.short
                legal += 1
    assert short == legal > 500
    assert {None, "Next", "TypeOK", "NoCrossPairing", "SelectionStable"} <= found
