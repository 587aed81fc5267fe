"""Properties of the tool-id codec: round trip, injectivity, validity, pass-through."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tpx.transport.translate.ids import (
    DecodedId,
    decode_caller_id,
    encode_caller_id,
    is_caller_id_valid,
    new_nonce,
    sign_caller_id,
    to_caller_id,
    to_foreign_id,
    verify_signed_id,
    wire_id,
)
from tpx.transport.translate.signing import ThinkingSigner, signer_for, split_secret

from .strategies import unicode_ids

_VALID = re.compile(r"^[a-zA-Z0-9_-]+$")
ids_or_missing = st.one_of(st.none(), unicode_ids)


nonces = st.from_regex(r"[0-9a-f]{12}", fullmatch=True)


@settings(deadline=None)
@given(foreign=ids_or_missing, position=st.integers(0, 10_000), nonce=nonces)
def test_round_trip_is_identity(foreign: str | None, position: int, nonce: str) -> None:
    caller = to_caller_id(foreign, position, nonce)
    assert _VALID.match(caller)
    assert is_caller_id_valid(caller)
    decoded = decode_caller_id(caller)
    assert decoded is not None
    assert decoded.foreign == foreign
    assert decoded.position == position
    assert decoded.nonce == nonce
    expected_wire = "" if foreign is None else foreign
    assert to_foreign_id(caller) == expected_wire
    assert wire_id(caller) == expected_wire


@settings(deadline=None)
@given(ids=st.lists(ids_or_missing, max_size=8), nonce=nonces)
def test_ids_of_a_response_are_valid_and_unique(ids: list[str | None], nonce: str) -> None:
    callers = [to_caller_id(foreign, position, nonce) for position, foreign in enumerate(ids)]
    assert len(set(callers)) == len(callers)
    assert all(_VALID.match(caller) for caller in callers)
    assert [wire_id(caller) for caller in callers] == ["" if f is None else f for f in ids]


@settings(deadline=None)
@given(
    a=ids_or_missing,
    b=ids_or_missing,
    pa=st.integers(0, 50),
    pb=st.integers(0, 50),
    na=st.sampled_from(["000000000000", "00000000000a"]) | st.none(),
    nb=st.sampled_from(["000000000000", "00000000000a"]) | st.none(),
)
def test_encoding_is_injective(
    a: str | None, b: str | None, pa: int, pb: int, na: str | None, nb: str | None
) -> None:
    """Injective over (foreign, position, nonce), legacy (nonce None) forms included."""
    if (a, pa, na) != (b, pb, nb):
        assert encode_caller_id(a, pa, na) != encode_caller_id(b, pb, nb)


@settings(deadline=None)
@given(text=st.text())
def test_foreign_ids_never_collide_with_pass_through_ids(text: str) -> None:
    """Over the union (ours + pass-through), a caller id has exactly one meaning."""
    decoded = decode_caller_id(text)
    if decoded is None:
        assert wire_id(text) == text  # not ours: unchanged
    else:
        # canonical only
        assert encode_caller_id(decoded.foreign, decoded.position, decoded.nonce) == text


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
        "tpxr0-0123456789ab",  # no "_" before the payload
        "tpxr0-0123456789a_abc",  # nonce too short
        "tpxr0-0123456789AB_abc",  # nonce not lowercase hex
        "tpxr0-0123456789abc_abc",  # nonce too long
        "tpxn0-0123456789ab_x",
        "tpxb0-0123456789ab_YWJj",
        "tpxr00-0123456789ab_abc",
    ],
)
def test_ids_not_in_our_encoding_pass_through(caller: str) -> None:
    assert decode_caller_id(caller) is None
    assert to_foreign_id(caller) is None
    assert wire_id(caller) == caller


@pytest.mark.parametrize(
    ("foreign", "caller"),
    [
        ("call_abc", "tpxr0-00ff00ff00ff_call_abc"),
        ("aB3dE6gH9", "tpxr2-00ff00ff00ff_aB3dE6gH9"),  # Mistral: 9 alphanumerics, raw
        ("", "tpxb0-00ff00ff00ff_"),
        (None, "tpxn1-00ff00ff00ff_"),
        ("a.b", "tpxb0-00ff00ff00ff_YS5i"),
        ("é", "tpxb0-00ff00ff00ff_w6k"),
    ],
)
def test_known_encodings(foreign: str | None, caller: str) -> None:
    position = int(caller[4])
    assert to_caller_id(foreign, position, "00ff00ff00ff") == caller
    decoded = decode_caller_id(caller)
    assert decoded == DecodedId(foreign, position, "00ff00ff00ff")


@pytest.mark.parametrize(
    ("caller", "foreign"),
    [
        ("tpxr0_call_abc", "call_abc"),
        ("tpxr2_aB3dE6gH9", "aB3dE6gH9"),
        ("tpxb0_", ""),
        ("tpxn1_", None),
        ("tpxb0_YS5i", "a.b"),
    ],
)
def test_legacy_ids_without_a_nonce_still_decode(caller: str, foreign: str | None) -> None:
    decoded = decode_caller_id(caller)
    assert decoded == DecodedId(foreign, int(caller[4]), None)
    assert wire_id(caller) == ("" if foreign is None else foreign)
    assert encode_caller_id(foreign, int(caller[4]), None) == caller


@pytest.mark.parametrize("nonce", ["", "0123456789a", "0123456789abc", "0123456789AB", "g" * 12])
def test_bad_nonces_are_refused(nonce: str) -> None:
    with pytest.raises(ValueError, match="nonce"):
        to_caller_id("call_a", 0, nonce)


def test_fresh_nonces_make_ids_unique_across_responses() -> None:
    """Gemini sends "" at position 0 every turn: the caller ids must still differ."""
    callers = [to_caller_id("", 0) for _ in range(2_000)]
    assert len(set(callers)) == len(callers)
    assert {wire_id(caller) for caller in callers} == {""}
    nonces = {new_nonce() for _ in range(2_000)}
    assert len(nonces) == 2_000
    assert all(re.fullmatch(r"[0-9a-f]{12}", nonce) for nonce in nonces)


def test_seeding_the_global_random_module_does_not_repeat_nonces() -> None:
    import random

    state = random.getstate()
    try:
        random.seed(0)
        first = new_nonce()
        random.seed(0)
        second = new_nonce()
    finally:
        random.setstate(state)
    assert first != second


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


# -- key rings (rotation) ----------------------------------------------------------------------


def test_an_id_verifies_under_any_key_of_a_ring_and_not_once_its_key_is_gone() -> None:
    unsigned = to_caller_id("call_1", 0)
    old = sign_caller_id(unsigned, b"k1")
    new = sign_caller_id(unsigned, b"k2")
    assert verify_signed_id(old, (b"k2", b"k1")) == unsigned
    assert verify_signed_id(new, (b"k2", b"k1")) == unsigned
    assert verify_signed_id(old, (b"k2",)) is None
    assert verify_signed_id(old, (b"k2", b"k3")) is None
    assert verify_signed_id(old, ()) is None
    # the verified-ids cache is per ring: a ring that verified it does not vouch for another
    assert verify_signed_id(old, (b"k1",)) == unsigned
    assert verify_signed_id(old, (b"k3", b"k2")) is None


def test_a_thinking_signer_signs_with_its_first_key_and_verifies_with_all() -> None:
    text = "a thought"
    by_old = ThinkingSigner("t1").sign(text)
    ring = ThinkingSigner("t2", "t1")
    assert ring.sign(text) == ThinkingSigner("t2").sign(text) != by_old
    assert ring.verify(text, by_old)
    assert ring.verify(text, ring.sign(text))
    assert not ring.verify(text + "!", by_old)
    assert not ThinkingSigner("t2").verify(text, by_old)  # t1 retired: not trusted
    assert "t1" not in repr(ring)
    assert "t2" not in repr(ring)


@pytest.mark.parametrize("listed", ["t2,t1", " t2 , t1 ", "t2\tt1", "t2\n t1,"])
def test_a_secret_lists_keys_separated_by_commas_or_whitespace(listed: str) -> None:
    assert split_secret(listed) == ("t2", "t1")
    signer = signer_for(listed)
    assert signer.sign("x") == ThinkingSigner("t2").sign("x")
    assert signer.verify("x", ThinkingSigner("t1").sign("x"))
