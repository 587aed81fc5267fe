"""Properties of the tool-id codec: round trip, injectivity, validity, pass-through."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tpx.translate.ids import (
    decode_caller_id,
    is_caller_id_valid,
    to_caller_id,
    to_foreign_id,
    wire_id,
)

from .strategies import unicode_ids

_VALID = re.compile(r"^[a-zA-Z0-9_-]+$")
ids_or_missing = st.one_of(st.none(), unicode_ids)


@settings(deadline=None)
@given(foreign=ids_or_missing, position=st.integers(0, 10_000))
def test_round_trip_is_identity(foreign: str | None, position: int) -> None:
    caller = to_caller_id(foreign, position)
    assert _VALID.match(caller)
    assert is_caller_id_valid(caller)
    decoded = decode_caller_id(caller)
    assert decoded is not None
    assert decoded.foreign == foreign
    assert decoded.position == position
    expected_wire = "" if foreign is None else foreign
    assert to_foreign_id(caller) == expected_wire
    assert wire_id(caller) == expected_wire


@settings(deadline=None)
@given(ids=st.lists(ids_or_missing, max_size=8))
def test_ids_of_a_response_are_valid_and_unique(ids: list[str | None]) -> None:
    callers = [to_caller_id(foreign, position) for position, foreign in enumerate(ids)]
    assert len(set(callers)) == len(callers)
    assert all(_VALID.match(caller) for caller in callers)
    assert [wire_id(caller) for caller in callers] == ["" if f is None else f for f in ids]


@settings(deadline=None)
@given(a=ids_or_missing, b=ids_or_missing, pa=st.integers(0, 50), pb=st.integers(0, 50))
def test_encoding_is_injective(a: str | None, b: str | None, pa: int, pb: int) -> None:
    if (a, pa) != (b, pb):
        assert to_caller_id(a, pa) != to_caller_id(b, pb)


@settings(deadline=None)
@given(text=st.text())
def test_foreign_ids_never_collide_with_pass_through_ids(text: str) -> None:
    """Over the union (ours + pass-through), a caller id has exactly one meaning."""
    decoded = decode_caller_id(text)
    if decoded is None:
        assert wire_id(text) == text  # not ours: unchanged
    else:
        assert to_caller_id(decoded.foreign, decoded.position) == text  # canonical only


@pytest.mark.parametrize(
    "caller",
    [
        "toolu_01A09q90qw90lq917835lq9",
        "srvtoolu_abc",
        "call_123",
        "tpx",
        "tpxr",
        "tpxr0",
        "tpxr0_",  # raw needs a non-empty payload
        "tpxr01_abc",  # leading zero: not canonical
        "tpxb0_YWJj",  # "abc" is raw-able: base64 form is not canonical
        "tpxb0_Y",  # impossible base64 length
        "tpxb0_YR",  # stray bits
        "tpxn0_x",  # missing id carries no payload
        "tpxq0_abc",
        "tpxr0_a.b",
    ],
)
def test_ids_not_in_our_encoding_pass_through(caller: str) -> None:
    assert decode_caller_id(caller) is None
    assert to_foreign_id(caller) is None
    assert wire_id(caller) == caller


@pytest.mark.parametrize(
    ("foreign", "caller"),
    [
        ("call_abc", "tpxr0_call_abc"),
        ("aB3dE6gH9", "tpxr2_aB3dE6gH9"),  # Mistral: 9 alphanumerics, raw
        ("", "tpxb0_"),
        (None, "tpxn1_"),
        ("a.b", "tpxb0_YS5i"),
        ("é", "tpxb0_w6k"),
    ],
)
def test_known_encodings(foreign: str | None, caller: str) -> None:
    position = int(caller[4])
    assert to_caller_id(foreign, position) == caller


def test_missing_and_empty_ids_stay_distinct() -> None:
    missing = decode_caller_id(to_caller_id(None, 0))
    empty = decode_caller_id(to_caller_id("", 0))
    assert missing is not None
    assert empty is not None
    assert missing.foreign is None
    assert empty.foreign == ""
    assert to_caller_id(None, 0) != to_caller_id("", 0)


def test_ten_kilobyte_id_round_trips() -> None:
    foreign = "x." * 5_000
    caller = to_caller_id(foreign, 3)
    assert _VALID.match(caller)
    assert to_foreign_id(caller) == foreign
