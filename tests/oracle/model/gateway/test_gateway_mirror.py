"""The gateway mirror against the spec's text and the semantics the header promises."""

from __future__ import annotations

import re

import attrs
import pytest

from tpx.errors import SpecConfigError
from tpx.oracle.model.gateway import (
    ACTIONS,
    INVARIANTS,
    VARS,
    CallerAbort,
    CallerSend,
    ClientGone,
    Config,
    Deliver,
    Init,
    PairingInv,
    ProviderFail,
    ProviderReply,
    Retry,
    State,
    Steps,
    explore,
)
from tpx.oracle.model.gateway import actions as actions_module
from tpx.oracle.model.gateway import invariants as invariants_module
from tpx.oracle.model.gateway import state as state_module
from tpx.oracle.model.gateway.actions import CallerAbortWith, Rotate
from tpx.oracle.model.gateway.invariants import RefusesOnlyWrong
from tpx.oracle.model.gateway.refinement import refinement_counterexample
from tpx.oracle.values import Function, ModelValue

from .conftest import CFG, REFINEMENT_CFG, SPEC

C1, C2 = ModelValue("c1"), ModelValue("c2")


def spec_text() -> str:
    return SPEC.read_text(encoding="utf-8")


def test_variables_are_the_specs_one_for_one() -> None:
    block = re.search(r"^VARIABLES(.*?)\n\n", spec_text(), re.S | re.M)
    assert block is not None
    names = re.findall(r"^\s*(\w+),?\s*\\\*", block.group(1), re.M)
    assert tuple(names) == VARS
    assert tuple(f.name for f in attrs.fields(State)) == VARS


def test_actions_are_the_specs_next_disjuncts() -> None:
    nxt = re.search(r"^Next ==(.*?)\n\n", spec_text(), re.S | re.M)
    assert nxt is not None
    per_conv = re.findall(r"\\/\s*(\w+)\(c\)", nxt.group(1))
    assert tuple(per_conv) == tuple(n for n, _ in ACTIONS)
    assert re.search(r"\\/\s*Halted\s*$", nxt.group(1))


def test_invariants_are_the_cfgs() -> None:
    inv = re.search(r"INVARIANTS(.*?)\n\n", CFG.read_text(), re.S)
    assert inv is not None
    assert tuple(inv.group(1).split()) == tuple(n for n, _ in INVARIANTS)


def test_gateway_spec_table_names_the_right_lines_and_code() -> None:
    """The spec's header table: each row's line is where that definition starts, and
    the mirror object it names exists."""
    lines = spec_text().splitlines()
    rows = re.findall(r"^\(\*\s+(\d+)  (\S.*?)\s{2,}(\S+\.py)\s+(.*?)\s*\*\)$", spec_text(), re.M)
    assert len(rows) >= 25
    modules = {
        "state.py": state_module,
        "actions.py": actions_module,
        "invariants.py": invariants_module,
    }
    for line, names, module, objects in rows:
        first = names.split(",")[0].strip()
        text = lines[int(line) - 1]
        assert text.startswith(first), (line, names, text)
        if module in modules:
            for obj in objects.split(","):
                path = obj.strip().split(".")
                target: object = modules[module]
                for part in path:
                    assert hasattr(target, part), (names, obj)
                    target = getattr(target, part)


def test_config_reads_the_shipped_cfgs() -> None:
    cfg = Config.from_cfg(CFG)
    assert cfg.Convs == (C1, C2)
    assert cfg.GatewayRetry is True
    assert Config.from_cfg(REFINEMENT_CFG).GatewayRetry is False
    assert cfg.Ids(C1) == frozenset({(C1, ModelValue("t1"))})
    assert cfg.AllIds == cfg.Ids(C1) | cfg.Ids(C2)


@pytest.mark.parametrize(
    ("change", "match"),
    [
        ({"Convs": 2}, "Convs"),
        ({"Convs": frozenset()}, "Convs"),
        ({"MaxInFlight": -1}, "MaxInFlight"),
        ({"GatewayRetry": 1}, "GatewayRetry"),
        ({"ToolIds": frozenset({"t1"})}, "ToolIds"),
        ({"TPX": ModelValue("ANTHROPIC")}, "distinct"),
        ({"MaxKeys": 0}, "MaxKeys"),
        ({"Preflight": 0}, "Preflight"),
        ({"UpstreamSteps": "yes"}, "UpstreamSteps"),
        ({"Upstreams": frozenset()}, "Upstreams"),
        ({"Upstreams": frozenset({"u1"})}, "Upstreams"),
        ({"MaxAttempts": 0}, "MaxAttempts"),
    ],
)
def test_config_refuses_bad_constants(change: dict[str, object], match: str) -> None:
    constants: dict[str, object] = {
        "Convs": frozenset({C1}),
        "ToolIds": frozenset({ModelValue("t1")}),
        "MaxTurns": 1,
        "MaxInFlight": 1,
        "GatewayRetry": True,
        "MaxKeys": 1,
        "Preflight": False,
        "UpstreamSteps": False,
        "Upstreams": frozenset({ModelValue("u1")}),
        "MaxAttempts": 1,
    }
    with pytest.raises(SpecConfigError, match=match):
        Config.from_constants({**constants, **change})


def tpx_init(cfg: Config) -> State:
    (s,) = [s for s in Init(cfg) if s.provider == cfg.TPX]
    return s


def one(states: object) -> State:
    got = list(states)  # type: ignore[call-overload]
    assert len(got) == 1
    result = got[0]
    assert isinstance(result, State)
    return result


def tool_turn(cfg: Config) -> State:
    """c1 has been handed a reply with one tool call."""
    s = one(CallerSend(tpx_init(cfg), C1, cfg))
    s = next(t for t in ProviderReply(s, C1, cfg) if t.emitted[C1])
    return one(Deliver(s, C1, cfg))


def test_provider_fail_keeps_the_historys_obligations_and_retry_resends_them() -> None:
    cfg = Config.of(2, 1, 3)
    s = tool_turn(cfg)
    sent = one(CallerSend(s, C1, cfg))
    assert sent.reqIds[C1] == s.pending[C1] != frozenset()
    for fail in (ProviderFail, ClientGone):
        failed = one(fail(sent, C1, cfg))
        assert failed.pending[C1] == s.pending[C1]
        assert failed.retryable[C1]
        assert failed.lastOutcome[C1] == "err"
        retried = one(Retry(failed, C1, cfg))
        assert retried.wireIds[C1] == retried.reqIds[C1] == s.pending[C1]
        # the stateless gateway cannot tell a retry from a fresh send: same state
        assert retried == one(CallerSend(failed, C1, cfg))


def test_seed_semantics_when_gateway_retry_is_off() -> None:
    cfg = Config.of(2, 1, 3, retry=False)
    s = tool_turn(cfg)
    failed = one(ProviderFail(one(CallerSend(s, C1, cfg)), C1, cfg))
    assert failed.pending[C1] == frozenset()
    assert not failed.retryable[C1]
    assert list(Retry(failed, C1, cfg)) == []
    refusals = list(CallerAbort(s, C1, cfg))  # one per wrong request
    assert {t.request[C1] for t in refusals} == {"missing", "unknown", "duplicated"}
    assert all(t.pending[C1] == t.calls[C1] == frozenset() for t in refusals)
    assert list(CallerAbort(tpx_init(cfg), C1, cfg)) == []  # the seed's guard: pending # {}


def test_a_refused_request_changes_no_obligation_and_the_client_may_answer_after() -> None:
    cfg = Config.of(2, 1, 3)
    s = tool_turn(cfg)
    refused = one(CallerAbortWith(s, C1, cfg, "missing"))
    assert refused.request[C1] == "missing"
    assert refused.pending == s.pending
    assert refused.calls == s.calls
    assert refused.wireIds == s.wireIds
    assert refused.lastOutcome[C1] == "err"
    assert refused.turn[C1] == s.turn[C1] + 1
    assert list(Retry(refused, C1, cfg)) == []  # a refusal is not retried, it is answered
    answered = one(CallerSend(refused, C1, cfg))
    assert answered.reqIds[C1] == s.pending[C1]
    # an unknown id is refused even without obligations
    assert one(CallerAbort(tpx_init(cfg), C1, cfg)).pending[C1] == frozenset()


def test_in_flight_bound_blocks_new_sends_only() -> None:
    cfg = Config.of(2, 1, 2, max_in_flight=1)
    s = one(CallerSend(tpx_init(cfg), C1, cfg))
    assert list(CallerSend(s, C2, cfg)) == []
    assert {name for name, c, _ in Steps(s, cfg) if c == C1} == {
        "ProviderReply",
        "ProviderFail",
        "ClientGone",
    }
    assert "CallerAbort" in {name for name, c, _ in Steps(s, cfg) if c == C2}


def test_tool_ids_are_per_conversation() -> None:
    cfg = Config.of(2, 2, 1)
    s = one(CallerSend(tpx_init(cfg), C2, cfg))
    for t in ProviderReply(s, C2, cfg):
        assert all(owner == C2 for owner, _ in t.emitted[C2])


def test_states_round_trip_through_records() -> None:
    s = tool_turn(Config.of(2, 1, 2))
    assert State.from_record(s.as_record()) == s
    rec = dict(s.as_record())
    rec["turn"] = 0
    with pytest.raises(ValueError, match="turn"):
        State.from_record(rec)
    assert isinstance(s.as_record()["pending"], Function)


def test_shipped_cfg_figures() -> None:
    r = explore(Config.from_cfg(CFG))
    assert r.ok
    assert (r.initial, r.generated, r.distinct, r.depth) == (4, 6406, 2251, 13)
    r = explore(Config.from_cfg(REFINEMENT_CFG))
    assert (r.initial, r.generated, r.distinct, r.depth) == (4, 4910, 1884, 13)


def test_refinement_holds_without_the_gateway_differences_only() -> None:
    assert refinement_counterexample(Config.from_cfg(REFINEMENT_CFG)) is None
    assert refinement_counterexample(Config.of(3, 1, 1, 2, retry=False)) is None
    found = refinement_counterexample(Config.from_cfg(CFG))
    assert found is not None
    s, action, t = found
    # the first difference BFS meets: a refusal without obligations (seed: pending # {})
    assert action == "CallerAbort"
    assert s.pending == t.pending


def two_rounds(cfg: Config) -> State:
    """c1 answered one tool call, was handed another, and sends its third request."""
    s = tool_turn(cfg)
    s = one(CallerSend(s, C1, cfg))
    s = next(t for t in ProviderReply(s, C1, cfg) if t.emitted[C1])
    return one(CallerSend(one(Deliver(s, C1, cfg)), C1, cfg))


def test_a_request_carries_every_round_each_result_on_its_call() -> None:
    cfg = Config.of(2, 2, 3)
    s = two_rounds(cfg)
    assert PairingInv(s, cfg)
    assert len(s.wireRes[C1]) == 2  # both answered rounds go upstream
    assert all(i == k for r in s.wireRes[C1] for i, k in r)
    (first, *_), last = sorted(s.wireRes[C1][0]), s.wireRes[C1][-1]
    # a translation that keeps only the last round's results
    assert not PairingInv(attrs.evolve(s, wireRes=Function({C1: (last,), C2: ()})), cfg)
    # two results of one round swapped: each id answers the other's call
    calls = sorted(s.calls[C1])
    if len(calls) == 2:
        (a, _), (b, _) = calls
        swapped = frozenset({(a, b), (b, a)})
        bad = attrs.evolve(s, wireRes=Function({C1: (*s.wireRes[C1][:-1], swapped), C2: ()}))
        assert not PairingInv(bad, cfg)
    # ids handed out on each other's calls
    i = first[0]
    other = (C1, ModelValue("t2" if i[1] == ModelValue("t1") else "t1"))
    moved = attrs.evolve(s, calls=Function({C1: frozenset({(i, other)}), C2: frozenset()}))
    assert not PairingInv(moved, cfg)


def test_a_retired_key_makes_every_request_of_its_history_wrong() -> None:
    cfg = Config.of(2, 1, 3, max_keys=2)
    s = tool_turn(cfg)
    assert s.signedBy[C1] == 1
    kept, retired = sorted(Rotate(s, cfg), key=lambda t: t.oldest)
    assert (kept.key, kept.oldest, retired.oldest) == (2, 1, 2)
    assert one(CallerSend(kept, C1, cfg)).request[C1] == "ok"  # the older key still verifies
    assert list(CallerSend(retired, C1, cfg)) == []
    assert [t.request[C1] for t in CallerAbort(retired, C1, cfg)] == ["retired"]
    # new ids are signed with the current key; c2's history holds none
    assert retired.signedBy[C2] == 0
    assert one(CallerSend(retired, C2, cfg)).request[C2] == "ok"


def test_only_a_wrong_request_is_refused() -> None:
    cfg = Config.of(2, 1, 3)
    s = tool_turn(cfg)
    for t in CallerAbort(s, C1, cfg):
        assert RefusesOnlyWrong(s, t)
        assert not RefusesOnlyWrong(s, attrs.evolve(t, request=Function({C1: "ok", C2: "none"})))
    sent = one(CallerSend(s, C1, cfg))
    assert RefusesOnlyWrong(s, sent)
    assert RefusesOnlyWrong(sent, one(ProviderFail(sent, C1, cfg)))
