"""The mirror against the spec's text and TLC's known figures."""

from __future__ import annotations

import re
from pathlib import Path

import attrs
import pytest

from tpx.errors import SpecConfigError
from tpx.oracle.model import (
    ACTIONS,
    INVARIANTS,
    VARS,
    Config,
    Init,
    Next,
    State,
    explore,
)
from tpx.oracle.model.explore import reachable
from tpx.oracle.values import ModelValue

SPEC = Path(__file__).parents[3] / "spec" / "TpxTransport.tla"


def spec_text() -> str:
    return SPEC.read_text()


def test_variables_are_the_specs_one_for_one() -> None:
    block = re.search(r"VARIABLES(.*?)\n\n", spec_text(), re.S)
    assert block is not None
    names = re.findall(r"^\s*(\w+),?\s*\\\*", block.group(1), re.M)
    assert tuple(names) == VARS
    assert tuple(f.name for f in attrs.fields(State)) == VARS


def test_actions_are_the_specs_next_disjuncts() -> None:
    nxt = re.search(r"^Next ==(.*?)\n\n", spec_text(), re.S | re.M)
    assert nxt is not None
    assert tuple(re.findall(r"\\/\s*(\w+)", nxt.group(1))) == tuple(n for n, _ in ACTIONS)


def test_invariants_are_the_cfgs() -> None:
    cfg = (SPEC.parent / "TpxTransport.cfg").read_text()
    inv = re.search(r"INVARIANTS(.*?)\n\n", cfg, re.S)
    assert inv is not None
    assert tuple(inv.group(1).split()) == tuple(n for n, _ in INVARIANTS)


def test_init_selects_key_then_token_then_none() -> None:
    c = Config.of(2, 3)
    got = {(s.hasKey, s.hasToken): s.provider for s in Init(c)}
    assert got == {
        (True, True): c.ANTHROPIC,
        (True, False): c.ANTHROPIC,
        (False, True): c.TPX,
        (False, False): c.NONE,
    }


def test_states_are_immutable_and_hashable() -> None:
    s = next(iter(Init(Config.of(1, 1))))
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        s.turn = 1  # type: ignore[misc]
    assert hash(s) == hash(attrs.evolve(s))
    assert State.from_record(s.as_record()) == s


def test_from_record_names_missing_variables() -> None:
    rec = dict(next(iter(Init(Config.of(1, 1)))).as_record())
    del rec["turn"]
    with pytest.raises(ValueError, match="turn"):
        State.from_record(rec)


def test_provider_reply_ranges_over_every_subset() -> None:
    c = Config.of(3, 2)
    s = next(s for s in Init(c) if s.provider == c.TPX)
    (_, sent), *_ = [(a, t) for a, t in Next(s, c) if a == "CallerSend"]
    replies = [t for a, t in Next(sent, c) if a == "ProviderReply"]
    assert len(replies) == 8
    assert {t.emitted for t in replies} == {t.wireIds for t in replies}
    assert all(t.wireShape == "openai" and t.phase == "resp" for t in replies)


@pytest.mark.parametrize(
    ("tool_ids", "max_turns", "distinct", "generated", "depth"),
    [
        (2, 3, 361, 578, 9),  # the seed cfg: TLC 2.15 -workers 1 prints these
        (4, 6, 11632, 21569, 15),
    ],
)
def test_explorer_reports_tlcs_figures(
    tool_ids: int, max_turns: int, distinct: int, generated: int, depth: int
) -> None:
    r = explore(Config.of(tool_ids, max_turns))
    assert r.ok
    assert (r.initial, r.generated, r.distinct, r.depth) == (4, generated, distinct, depth)


def test_every_reachable_state_satisfies_every_invariant() -> None:
    c = Config.of(3, 3)
    for s in reachable(c):
        for name, inv in INVARIANTS:
            assert inv(s, c), (name, s)


def test_config_rejects_bad_constants() -> None:
    with pytest.raises(SpecConfigError, match="MaxTurns"):
        Config.from_constants({"ToolIds": frozenset(), "MaxTurns": -1})
    with pytest.raises(SpecConfigError, match="model values"):
        Config.from_constants({"ToolIds": frozenset({"t1"}), "MaxTurns": 1})
    with pytest.raises(SpecConfigError, match="ToolIds"):
        Config.from_constants({"MaxTurns": 1})
    # what a cfg can say instead of a set: a number (`ToolIds = 3`), a string, a tuple
    for wrong in (3, "t1", (ModelValue("t1"),)):
        with pytest.raises(SpecConfigError, match=r"ToolIds must be a set of model values such"):
            Config.from_constants({"ToolIds": wrong, "MaxTurns": 1})
    with pytest.raises(SpecConfigError, match="distinct"):
        Config.from_constants(
            {"ToolIds": frozenset(), "MaxTurns": 1, "TPX": ModelValue("ANTHROPIC")}
        )


def test_model_value_names_are_free() -> None:
    c = Config(
        frozenset({ModelValue("a"), ModelValue("b")}),
        2,
        ANTHROPIC=ModelValue("A"),
        TPX=ModelValue("T"),
        NONE=ModelValue("N"),
    )
    r = explore(c, keep_graph=True)
    assert r.ok
    assert r.graph is not None
    assert {rec["provider"] for rec in r.graph.initial} == {ModelValue(x) for x in "ATN"}
