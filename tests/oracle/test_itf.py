"""tpx.oracle.itf: ITF traces written and read back, and malformed documents rejected."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tpx.errors import TpxError
from tpx.oracle.itf import (
    TraceFormatError,
    decode_value,
    dump_itf,
    encode_value,
    from_itf,
    load_itf,
    to_itf,
)
from tpx.oracle.model import VARS, Config, explore
from tpx.oracle.model.explore import Graph
from tpx.oracle.values import Function, ModelValue, Record

from .tlc.strategies import tla_values

C = Config.of(2, 2)


def same(a: Any, b: Any) -> bool:
    """Equality that also tells bool from int and str from ModelValue, all the way down."""
    if type(a) is not type(b):
        return False
    if isinstance(a, frozenset):
        return len(a) == len(b) and all(any(same(x, y) for y in b) for x in a)
    if isinstance(a, tuple):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, Record | Function):
        if len(a) != len(b):
            return False
        for k, v in a.items():
            match = [k2 for k2 in b if same(k, k2)]
            if len(match) != 1 or not same(v, b[match[0]]):
                return False
        return True
    return bool(a == b)


def graph() -> Graph:
    g = explore(C, keep_graph=True).graph
    assert g is not None
    return g


def random_walk(g: Graph, rng: random.Random, length: int) -> list[tuple[str, Record]]:
    out: dict[Record, list[tuple[Record, str]]] = {}
    for s, t, a in g.edges:
        out.setdefault(s, []).append((t, a))
    state = rng.choice(sorted(g.initial, key=repr))
    trace = [("Init", state)]
    for _ in range(length):
        nxt = sorted(out.get(state, []), key=repr)
        if not nxt:
            break
        state, action = rng.choice(nxt)
        trace.append((action, state))
    return trace


@pytest.mark.parametrize(
    ("value", "encoded"),
    [
        (True, True),
        (0, {"#bigint": "0"}),
        (-(2**70), {"#bigint": str(-(2**70))}),
        ("TPX", "TPX"),
        (ModelValue("TPX"), {"#unserializable": "TPX"}),
        (
            frozenset({ModelValue("t2"), ModelValue("t1")}),
            {"#set": [{"#unserializable": "t1"}, {"#unserializable": "t2"}]},
        ),
        ((1, "a"), {"#tup": [{"#bigint": "1"}, "a"]}),
        (Record(b=False, a="x"), {"a": "x", "b": False}),
        (Function({2: "q", 1: "p"}), {"#map": [[{"#bigint": "1"}, "p"], [{"#bigint": "2"}, "q"]]}),
        (Function({}), {"#map": []}),
    ],
)
def test_encode_value(value: Any, encoded: Any) -> None:
    assert encode_value(value) == encoded
    assert same(decode_value(encoded), value)


def test_model_value_and_string_stay_apart() -> None:
    assert decode_value({"#unserializable": "NONE"}) == ModelValue("NONE")
    assert decode_value("NONE") == "NONE"
    assert decode_value({"#unserializable": "NONE"}) != decode_value("NONE")


def test_plain_json_numbers_and_sequences_are_read() -> None:
    assert same(decode_value(7), 7)
    assert same(decode_value([1, [True]]), (1, (True,)))


@given(tla_values)
@settings(max_examples=300, deadline=None)
def test_any_value_round_trips(value: Any) -> None:
    encoded = encode_value(value)
    text = json.dumps(encoded)
    assert same(decode_value(json.loads(text)), value)


@given(st.randoms(use_true_random=False), st.integers(0, 12))
@settings(max_examples=40, deadline=None)
def test_explorer_walks_round_trip(rng: random.Random, length: int) -> None:
    trace = random_walk(GRAPH, rng, length)
    doc = json.loads(json.dumps(to_itf(trace)))
    assert doc["vars"] == list(VARS)
    assert [s["#meta"] for s in doc["states"]] == [
        {"index": i, "action": a} for i, (a, _) in enumerate(trace)
    ]
    back = from_itf(doc)
    assert len(back) == len(trace)
    for (a1, s1), (a2, s2) in zip(back, trace, strict=True):
        assert a1 == a2
        assert same(s1, s2)


GRAPH = graph()


def test_meta_records_the_model_value_convention() -> None:
    doc = to_itf([("Init", next(iter(GRAPH.initial)))], source="spec/TpxTransport.tla")
    assert doc["#meta"]["format"] == "ITF"
    assert "#unserializable" in doc["#meta"]["model-values"]
    assert doc["#meta"]["source"] == "spec/TpxTransport.tla"


def test_bare_states_and_action_override() -> None:
    states = sorted(GRAPH.initial, key=repr)[:2]
    doc = to_itf(states)
    assert [a for a, _ in from_itf(doc)] == [None, None]
    doc = to_itf(states, actions=["Init", "X"])
    assert [a for a, _ in from_itf(doc)] == ["Init", "X"]
    with pytest.raises(ValueError, match="1 action names for 2 states"):
        to_itf(states, actions=["Init"])


def test_file_round_trip(tmp_path: Path) -> None:
    trace = random_walk(GRAPH, random.Random(3), 8)
    path = tmp_path / "t.itf.json"
    dump_itf(path, trace)
    assert load_itf(path) == [(a, s) for a, s in trace]


def good_doc() -> dict[str, Any]:
    return to_itf(random_walk(GRAPH, random.Random(1), 4))


def break_state(doc: dict[str, Any], i: int, **changes: Any) -> dict[str, Any]:
    doc["states"][i].update(changes)
    return doc


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda d: [], "JSON object"),
        (lambda d: {**d, "vars": "x"}, '"vars"'),
        (lambda d: {**d, "states": []}, "no states"),
        (lambda d: {**d, "states": {}}, '"states"'),
        (lambda d: break_state(d, 2, turn=1.5), "state 2, variable turn"),
        (lambda d: break_state(d, 3, turn=None), "state 3, variable turn: null"),
        (lambda d: break_state(d, 1, extra=1), r"state 1: .*unknown \['extra'\]"),
        (lambda d: break_state(d, 2, pending={"#set": [{"#set": []}, 0.5]}), r"state 2.*#set\[1\]"),
        (lambda d: break_state(d, 1, turn={"#bigint": "x1"}), "state 1, variable turn: #bigint"),
        (lambda d: break_state(d, 1, turn={"#bigint": 1}), "#bigint needs a string"),
        (lambda d: break_state(d, 1, phase={"#frob": 1}), "unknown ITF tag '#frob'"),
        (lambda d: break_state(d, 1, phase={"#tup": [], "a": 1}), "exactly one key"),
        (lambda d: break_state(d, 2, phase={"#map": [[1]]}), "state 2.*#map entry 0"),
        (lambda d: break_state(d, 2, provider={"#unserializable": ""}), "needs a name"),
        (lambda d: break_state(d, 2, **{"#meta": {"action": 3}}), "state 2: #meta.action"),
        (lambda d: break_state(d, 0, **{"#meta": []}), "state 0: #meta"),
    ],
)
def test_bad_documents_name_the_state(mutate: Any, message: str) -> None:
    with pytest.raises(TraceFormatError, match=message) as info:
        from_itf(mutate(good_doc()))
    assert isinstance(info.value, TpxError)


def test_load_itf_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "bad.json"
    path.write_text("{not json")
    with pytest.raises(TraceFormatError, match=r"bad\.json: not JSON"):
        load_itf(path)
    path.write_text(json.dumps(break_state(good_doc(), 2, turn=None)))
    with pytest.raises(TraceFormatError, match=r"bad\.json: state 2"):
        load_itf(path)


def test_unwritable_values_raise_type_error() -> None:
    with pytest.raises(TypeError):
        encode_value(1.5)
    with pytest.raises(TypeError):
        encode_value(Record({"#x": 1}))


def test_load_itf_refuses_unreadable_files(tmp_path: Path) -> None:
    """Not UTF-8, nested past what Python can recurse into, a directory: a TraceFormatError
    naming the file, never a UnicodeDecodeError / RecursionError / OSError."""
    latin = tmp_path / "latin.itf.json"
    latin.write_bytes(json.dumps(good_doc()).replace("idle", "idl\u00e9").encode("latin-1"))
    with pytest.raises(TraceFormatError, match=r"latin\.itf\.json: not UTF-8 text"):
        load_itf(latin)
    deep = tmp_path / "deep.itf.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(TraceFormatError, match=r"deep\.itf\.json: JSON nested too deeply"):
        load_itf(deep)
    with pytest.raises(TraceFormatError, match="cannot read"):
        load_itf(tmp_path)


def test_a_value_nested_past_the_recursion_limit_is_a_format_error() -> None:
    """A document nested just under what json reads must not crash the decoder."""
    doc = good_doc()
    value: Any = {"#bigint": "1"}
    for _ in range(900):
        value = {"#tup": [value]}
    doc["states"][0]["turn"] = value
    with pytest.raises(TraceFormatError, match="state 0: a value nested too deeply"):
        from_itf(doc)
