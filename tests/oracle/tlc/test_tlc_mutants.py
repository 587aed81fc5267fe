"""Each mutant in spec/mutants breaks exactly the property it names, and TLC's counterexample
is a real behaviour of that mutant (Init and TypeOK checked in Python, the whole trace
re-checked by check_traces)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tpx.oracle.model.state import VARS
from tpx.oracle.tlc import check_traces, load_cfg, run_tlc
from tpx.oracle.values import ModelValue, Record

from .conftest import MUTANTS, SEED_CFG

ANTHROPIC, TPX, NONE = ModelValue("ANTHROPIC"), ModelValue("TPX"), ModelValue("NONE")
TOOL_IDS = frozenset({ModelValue("t1"), ModelValue("t2")})
MAX_TURNS = 3


def select(k: bool, t: bool) -> ModelValue:
    return ANTHROPIC if k else TPX if t else NONE


def satisfies_init(s: Record, *, swapped: bool = False) -> bool:
    k, t = s["hasKey"], s["hasToken"]
    return (
        isinstance(k, bool)
        and isinstance(t, bool)
        and s["provider"] == (select(t, k) if swapped else select(k, t))
        and s["turn"] == 0
        and s["phase"] == "idle"
        and s["pending"] == s["reqIds"] == s["wireIds"] == s["emitted"] == frozenset()
        and s["wireShape"] == s["gotShape"] == "messages"
        and s["lastOutcome"] == "none"
    )


def satisfies_type_ok(s: Record) -> bool:
    return (
        set(s) == set(VARS)
        and isinstance(s["hasKey"], bool)
        and isinstance(s["hasToken"], bool)
        and s["provider"] in {ANTHROPIC, TPX, NONE}
        and type(s["turn"]) is int
        and 0 <= s["turn"] <= MAX_TURNS
        and s["phase"] in {"idle", "req", "resp"}
        and all(
            isinstance(s[v], frozenset) and s[v] <= TOOL_IDS
            for v in ("pending", "reqIds", "wireIds", "emitted")
        )
        and s["wireShape"] in {"messages", "openai"}
        and s["gotShape"] in {"messages", "openai"}
        and s["lastOutcome"] in {"none", "ok", "err"}
    )


CASES = [
    ("MutShapeInv", "invariant", "ShapeInv"),
    ("MutPairingOut", "invariant", "PairingInv"),
    ("MutPairingBack", "invariant", "PairingInv"),
    ("MutSelectionInv", "invariant", "SelectionInv"),
    ("MutSelectionStable", "action_property", "SelectionStable"),
    ("MutDeadlock", "deadlock", None),
]


def test_every_mutant_is_one_documented_change_with_the_seed_cfg() -> None:
    names = sorted(p.stem for p in MUTANTS.glob("*.tla"))
    assert names == sorted(name for name, _, _ in CASES)
    for name in names:
        text = (MUTANTS / f"{name}.tla").read_text()
        assert text.startswith("\\* MUTANT of TpxTransport. One change: ")
        assert f"MODULE {name} " in text.splitlines()[1]
        assert load_cfg(MUTANTS / f"{name}.cfg") == load_cfg(SEED_CFG)


@pytest.mark.tlc
@pytest.mark.parametrize(("name", "kind", "prop"), CASES)
def test_mutant_counterexample(name: str, kind: str, prop: str | None) -> None:
    spec: Path = MUTANTS / f"{name}.tla"
    cfg = MUTANTS / f"{name}.cfg"
    result = run_tlc(spec, cfg, workers=1)
    assert result.verdict.kind == kind
    assert result.verdict.property == prop
    assert result.exit_code == {"invariant": 12, "action_property": 13, "deadlock": 11}[kind]
    trace = [step.state for step in result.trace]
    assert trace
    assert result.trace[0].action == "Init"
    assert satisfies_init(trace[0], swapped=name == "MutSelectionInv")
    assert all(satisfies_type_ok(s) for s in trace)
    assert [s["turn"] for s in trace] == sorted(s["turn"] for s in trace)
    seed_actions = {
        "CallerSend",
        "CallerAbort",
        "NoProvider",
        "ProviderReply",
        "ProviderFail",
        "Deliver",
        "Halted",
    }
    assert {step.action for step in result.trace[1:]} <= seed_actions
    (verdict,) = check_traces(spec, cfg, [trace])
    assert verdict.accepted, verdict
