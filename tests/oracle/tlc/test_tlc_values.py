"""tpx.oracle.tlc.values: the parser and writer of TLA+ values as TLC prints them."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings

from tpx.oracle.tlc.values import TLAValueSyntaxError, format_value, parse_state, parse_value
from tpx.oracle.values import Function, ModelValue, Record

from .strategies import tla_values


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("TRUE", True),
        ("FALSE", False),
        ("0", 0),
        ("42", 42),
        ("-7", -7),
        ('"messages"', "messages"),
        ('"a\\"b\\\\c\\nd\\te"', 'a"b\\c\nd\te'),
        ('""', ""),
        ("TPX", ModelValue("TPX")),
        ("{}", frozenset()),
        ("{t1, t2}", frozenset({ModelValue("t1"), ModelValue("t2")})),
        ("1..3", frozenset({1, 2, 3})),
        ("{{}, 1..3}", frozenset({frozenset(), frozenset({1, 2, 3})})),
        ("<<>>", ()),
        ('<<1, "a", <<TRUE>>>>', (1, "a", (True,))),
        ("[a |-> -3, b |-> <<>>]", Record(a=-3, b=())),
        ('(1 :> "p" @@ 3 :> "q")', Function({1: "p", 3: "q"})),
        (
            "(t1 :> {} @@ t2 :> {t1})",
            Function(
                {ModelValue("t1"): frozenset(), ModelValue("t2"): frozenset({ModelValue("t1")})}
            ),
        ),
    ],
)
def test_parse_value(text: str, expected: Any) -> None:
    value = parse_value(text)
    assert value == expected
    assert type(value) is type(expected)


def test_model_value_is_not_a_string() -> None:
    value: object = parse_value("ANTHROPIC")
    assert isinstance(value, ModelValue)
    assert value.name == "ANTHROPIC"
    assert str(value) == "ANTHROPIC"
    assert parse_value("ANTHROPIC") != "ANTHROPIC"
    assert parse_value('"ANTHROPIC"') == "ANTHROPIC"


def test_value_may_span_lines() -> None:
    assert parse_value("[ a |-> 1,\n  b |-> {1,\n 2} ]") == Record(a=1, b=frozenset({1, 2}))


@pytest.mark.parametrize(
    "text",
    [
        "",
        "{1, 2",
        "<<1 2>>",
        "[a = 1]",
        "(1 :> 2",
        "1 2",
        '"open',
        '"bad \\q"',
        "#",
        "[1 |-> 2]",
        "1..x",
    ],
)
def test_parse_value_rejects_garbage(text: str) -> None:
    with pytest.raises(TLAValueSyntaxError):
        parse_value(text)


def test_format_value_examples() -> None:
    assert format_value(True) == "TRUE"
    assert format_value(-3) == "-3"
    assert format_value('a"b\\\n') == '"a\\"b\\\\\\n"'
    assert format_value(ModelValue("t1")) == "t1"
    assert format_value(frozenset({2, 1})) == "{1, 2}"
    assert format_value((1, "x")) == '<<1, "x">>'
    assert format_value(Record(b=1, a=False)) == "[a |-> FALSE, b |-> 1]"
    assert format_value(Function({"k": 1})) == '("k" :> 1)'
    assert format_value(Function()) == "<<>>"


@pytest.mark.parametrize(
    ("value", "error"),
    [
        (Record(), ValueError),
        (Record({"not a field": 1}), ValueError),
        (ModelValue("has space"), ValueError),
        (ModelValue("TRUE"), ValueError),
        ("bell\a", ValueError),
        (1.5, TypeError),
        (None, TypeError),
    ],
)
def test_format_value_rejects_what_tla_cannot_write(value: object, error: type[Exception]) -> None:
    with pytest.raises(error):
        format_value(value)


@settings(max_examples=300, deadline=None)
@given(tla_values)
def test_round_trip(value: Any) -> None:
    text = format_value(value)
    back = parse_value(text)
    assert back == value
    assert format_value(back) == text


def test_parse_state_keys_by_name_in_any_order() -> None:
    block = (
        '/\\ pending = {}\n/\\ provider = TPX\n/\\ turn = 0\n/\\ wireShape = "openai"\n'
        "/\\ rec = [ a |-> 1,\n     b |-> {t1, t2} ]\n"
    )
    state = parse_state(block)
    assert state == Record(
        pending=frozenset(),
        provider=ModelValue("TPX"),
        turn=0,
        wireShape="openai",
        rec=Record(a=1, b=frozenset({ModelValue("t1"), ModelValue("t2")})),
    )
    shuffled = "\n".join(reversed(block.replace("\n     b", " b").splitlines()))
    assert parse_state(shuffled) == state


def test_parse_state_single_variable_has_no_conjunction() -> None:
    assert parse_state("x = 0\n") == Record(x=0)


@pytest.mark.parametrize("text", ["garbage", "/\\ x = 1\n/\\ x = 2", "/\\ x = {"])
def test_parse_state_rejects_garbage(text: str) -> None:
    with pytest.raises(TLAValueSyntaxError):
        parse_state(text)
