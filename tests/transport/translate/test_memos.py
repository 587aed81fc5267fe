"""The translator's memos (wire ids, translated tools) change no output and stay bounded."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson
import pytest

from tpx.transport.translate import ids as ids_module
from tpx.transport.translate import request as request_module
from tpx.transport.translate import request_bytes_to_openai, request_to_openai
from tpx.transport.translate import tools as tools_module
from tpx.transport.translate.ids import sign_caller_id, to_caller_id, verify_signed_id, wire_id
from tpx.transport.translate.profiles import get_profile


def _turn(caller_id: str) -> list[dict[str, Any]]:
    return [
        {"role": "user", "content": "go"},
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": caller_id, "name": "t", "input": {"a": 1}}],
        },
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": caller_id, "content": "ok"}],
        },
    ]


def _request(messages: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    return {"model": "m", "max_tokens": 8, "messages": messages, **extra}


@pytest.mark.parametrize(
    "caller_id",
    [
        to_caller_id("call_abc", 0, "0123456789ab"),  # raw-encoded: decoded
        to_caller_id("weird id/é", 2, "0123456789ab"),  # base64-encoded: decoded
        "toolu_01abc",  # not ours: unchanged
        "tpxr0-0123456789ab_" + "x" * 600,  # too long to be remembered
    ],
)
def test_wire_ids_are_the_same_memoized_or_not(caller_id: str) -> None:
    request_module._WIRE_MEMO.clear()
    data = orjson.dumps(_request(_turn(caller_id)))
    first = orjson.loads(request_bytes_to_openai(data))
    second = orjson.loads(request_bytes_to_openai(data))  # from the memo, if kept
    assert first == second
    assert first["messages"][1]["tool_calls"][0]["id"] == wire_id(caller_id)
    assert first["messages"][2]["tool_call_id"] == wire_id(caller_id)
    assert (caller_id in request_module._WIRE_MEMO) is (len(caller_id) <= 256)


def test_wire_memo_is_bounded() -> None:
    request_module._WIRE_MEMO.clear()
    ids = [to_caller_id(f"call_{number}", 0) for number in range(5000)]
    messages: list[dict[str, Any]] = []
    for caller_id in ids:
        messages.extend(_turn(caller_id))
    body = request_to_openai(_request(messages)).body
    calls = [m["tool_calls"][0]["id"] for m in body["messages"] if m["role"] == "assistant"]
    assert calls == [f"call_{number}" for number in range(5000)]
    assert 0 < len(request_module._WIRE_MEMO) <= request_module._WIRE_MEMO_SIZE


def _tool(name: str, schema: dict[str, Any]) -> dict[str, Any]:
    return {"name": name, "description": "d", "input_schema": schema}


def test_recent_tools_are_told_apart_by_content_and_profile() -> None:
    tools_module._RECENT = ()
    schema = {"type": "object", "properties": {"n": {"type": "integer", "minimum": 1}}}
    flagged = {"type": "object", "properties": {"n": {"type": "integer", "minimum": True}}}
    kinds = {"$schema": "http://json-schema.org/draft-07/schema#", **schema}
    seen: dict[tuple[str, str], bytes] = {}
    for _ in range(3):  # the second and third rounds come from the recent entries
        for profile in ("generic", "gemini", "openai"):
            for label, value in (("one", schema), ("true", flagged), ("kinds", kinds)):
                request = _request(_turn("toolu_x"), tools=[_tool("t", value)])
                data = request_bytes_to_openai(orjson.dumps(request), profile=profile)
                got = orjson.dumps(orjson.loads(data)["tools"])  # bytes: 1 and true differ
                walked = tools_module._translate_tools(  # the uncached walk
                    [_tool("t", value)], get_profile(profile), lambda _: None
                )
                assert got == orjson.dumps(walked)
                assert seen.setdefault((profile, label), got) == got
    assert 0 < len(tools_module._RECENT) <= tools_module._RECENT_SIZE
    # 1 and true are different schemas, never served one for the other
    assert seen[("generic", "one")] != seen[("generic", "true")]


def test_verified_ids_are_the_same_memoized_or_not() -> None:
    """A signed id verified once is verified from the memo after: the same unsigned id for
    its key; another key, a forged MAC or an unsigned id are never taken from it."""
    ids_module._VERIFIED.clear()
    key = b"k" * 32
    unsigned = to_caller_id("call_abc", 0, "0123456789ab")
    signed = sign_caller_id(unsigned, key)
    assert verify_signed_id(signed, key) == unsigned
    assert {(signed, key): unsigned} == ids_module._VERIFIED
    assert verify_signed_id(signed, key) == unsigned  # from the memo
    assert verify_signed_id(signed, b"x" * 32) is None
    mac_end = signed.index("_")
    forged = signed[: mac_end - 1] + ("0" if signed[mac_end - 1] != "0" else "1") + signed[mac_end:]
    assert verify_signed_id(forged, key) is None
    assert verify_signed_id(unsigned, key) is None
    assert set(ids_module._VERIFIED) == {(signed, key)}


def test_verified_memo_is_bounded() -> None:
    ids_module._VERIFIED.clear()
    key = b"k" * 32
    for number in range(ids_module._VERIFIED_SIZE + 10):
        unsigned = to_caller_id(f"call_{number}", 0)
        assert verify_signed_id(sign_caller_id(unsigned, key), key) == unsigned
    assert 0 < len(ids_module._VERIFIED) <= ids_module._VERIFIED_SIZE


def _ring_bug(caller_id: str, key: bytes, *, ring: tuple[bytes, ...] | None = None) -> str:
    """Seeded bug: a signed id remembered under any ring, its key among the ring's or not."""
    signed = ids_module.sign_caller_id(caller_id, key)
    if ring is not None:
        ids_module._remember(signed, ring, caller_id)
    return signed


def _signed_ids_verify_as_remembered(sign: Callable[..., str]) -> list[str]:
    """What goes wrong with *sign*'s ``ring``: an id just signed under a ring is taken from
    the memo with no MAC, the same id a verification gives; a ring without the signing
    key (a key retired, another gateway's) never takes it."""
    wrong: list[str] = []
    key, old, other = b"k" * 32, b"o" * 32, b"x" * 32
    unsigned = to_caller_id("call_abc", 0, "0123456789ab")
    ids_module._VERIFIED.clear()
    signed = sign(unsigned, key, ring=(key, old))
    if {(signed, (key, old)): unsigned} != ids_module._VERIFIED:
        wrong.append("not remembered under its ring")
    if verify_signed_id(signed, (key, old)) != unsigned:
        wrong.append("the ring does not verify it")
    ids_module._VERIFIED.clear()
    if verify_signed_id(signed, (key, old)) != unsigned:  # the MAC's own verdict agrees
        wrong.append("the MAC disagrees")
    ids_module._VERIFIED.clear()
    signed = sign(unsigned, key, ring=(other,))
    if verify_signed_id(signed, (other,)) is not None:
        wrong.append("verified under a ring without its key")
    ids_module._VERIFIED.clear()
    return wrong


def test_a_signed_id_is_remembered_under_its_ring_only() -> None:
    assert _signed_ids_verify_as_remembered(sign_caller_id) == []
    assert _signed_ids_verify_as_remembered(_ring_bug) == ["verified under a ring without its key"]
