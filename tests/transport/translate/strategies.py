"""Hypothesis strategies for the translator's property tests."""

from __future__ import annotations

from typing import Any

import orjson
from hypothesis import strategies as st

from tpx.transport.translate.ids import to_caller_id

__all__ = [
    "json_foreign_ids",
    "json_values",
    "messages_history",
    "nonces",
    "openai_tool_response",
    "unicode_ids",
]

_ALNUM = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
_SURROGATE = st.integers(0xD800, 0xDFFF).map(chr)


def _long_ids() -> st.SearchStrategy[str]:
    return st.builds(
        lambda unit, count: unit * count,
        st.sampled_from(["a", "-", "é", "𝄞", "a b"]),
        st.integers(8_000, 10_500),
    )


#: Any Python string, surrogates included (not every one of them can go into JSON).
unicode_ids: st.SearchStrategy[str] = st.one_of(
    st.text(),
    st.text(st.one_of(st.characters(), _SURROGATE)),
    st.text(alphabet="tpxrbn0123456789_-=A", max_size=24),  # look-alikes of our encoding
    st.from_regex(r"[A-Za-z0-9_-]{1,40}", fullmatch=True),
    st.text(alphabet=_ALNUM, min_size=9, max_size=9),  # Mistral
    st.just(""),
    _long_ids(),
)

#: Foreign ids a JSON body can carry: no surrogates; ``None`` = the id is missing.
json_foreign_ids: st.SearchStrategy[str | None] = st.one_of(
    st.none(),
    st.just(""),
    st.text(max_size=30),
    st.from_regex(r"call_[A-Za-z0-9]{1,24}", fullmatch=True),
    st.text(alphabet=_ALNUM, min_size=9, max_size=9),
    st.text(alphabet="tpxrb0_-", max_size=10),
)

#: Per-response tool-id nonces (12 lowercase hex digits).
nonces: st.SearchStrategy[str] = st.from_regex(r"[0-9a-f]{12}", fullmatch=True)

json_values: st.SearchStrategy[Any] = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=8,
)
_inputs = st.dictionaries(st.text(max_size=8), json_values, max_size=4)
_text = st.text(min_size=1, max_size=40)


@st.composite
def _call_ids(draw: st.DrawFn) -> list[str | None]:
    """A multiset of foreign ids for one turn: duplicates drawn on purpose."""
    ids = draw(st.lists(json_foreign_ids, min_size=1, max_size=4))
    if len(ids) > 1 and draw(st.booleans()):
        ids[-1] = ids[0]  # Ollama: parallel calls sharing an id
    return ids


@st.composite
def messages_history(draw: st.DrawFn) -> tuple[dict[str, Any], list[list[str | None]]]:
    """A Messages request with a tool history, and per turn the foreign ids behind it.

    Turns use caller ids made by the codec (foreign ids) or, in some turns, native
    ``toolu_`` ids that must pass through unchanged (recorded as themselves).
    """
    turns = draw(st.integers(1, 4))
    messages: list[dict[str, Any]] = [{"role": "user", "content": draw(_text)}]
    expected: list[list[str | None]] = []
    for turn in range(turns):
        if draw(st.booleans()):
            foreign = draw(_call_ids())
            nonce = draw(nonces)
            callers = [to_caller_id(fid, pos, nonce) for pos, fid in enumerate(foreign)]
            wires: list[str | None] = ["" if fid is None else fid for fid in foreign]
        else:
            count = draw(st.integers(1, 3))
            callers = [f"toolu_{turn}_{index}" for index in range(count)]
            wires = list(callers)
        assistant: list[dict[str, Any]] = []
        if draw(st.booleans()):
            assistant.append({"type": "text", "text": draw(_text)})
        for caller in callers:
            assistant.append(
                {
                    "type": "tool_use",
                    "id": caller,
                    "name": draw(st.sampled_from(["a", "b_c"])),
                    "input": draw(_inputs),
                }
            )
        messages.append({"role": "assistant", "content": assistant})
        results: list[dict[str, Any]] = []
        for caller in draw(st.permutations(callers)):
            result: dict[str, Any] = {"type": "tool_result", "tool_use_id": caller}
            shape = draw(st.sampled_from(["str", "blocks", "none"]))
            if shape == "str":
                result["content"] = draw(st.text(max_size=30))
            elif shape == "blocks":
                result["content"] = [
                    {"type": "text", "text": text}
                    for text in draw(st.lists(_text, min_size=1, max_size=2))
                ]
            if draw(st.booleans()):
                result["is_error"] = draw(st.booleans())
            results.append(result)
        extra = draw(st.lists(_text, max_size=2))
        blocks: list[dict[str, Any]] = results + [{"type": "text", "text": t} for t in extra]
        if draw(st.booleans()):
            blocks = results[:1] + [{"type": "text", "text": t} for t in extra] + results[1:]
        messages.append({"role": "user", "content": blocks})
        expected.append(wires)
    request = {"model": "claude-x", "max_tokens": 256, "messages": messages}
    return request, expected


@st.composite
def openai_tool_response(draw: st.DrawFn) -> dict[str, Any]:
    """A Chat Completions response with 0-4 tool calls and provider quirks."""
    foreign = draw(_call_ids()) if draw(st.integers(0, 4)) else []
    calls: list[dict[str, Any]] = []
    for index, fid in enumerate(foreign):
        arguments = draw(_inputs)
        form = draw(st.sampled_from(["json", "object", "empty"]))
        call: dict[str, Any] = {
            "type": "function",
            "function": {
                "name": draw(st.sampled_from(["a", "b_c"])),
                "arguments": (
                    "" if form == "empty" else arguments if form == "object" else _dumps(arguments)
                ),
            },
        }
        if fid is not None:
            call["id"] = fid
        if draw(st.booleans()):
            call["index"] = 0 if draw(st.booleans()) else index
        calls.append(call)
    message: dict[str, Any] = {
        "role": "assistant",
        "content": draw(st.none() | st.text(max_size=30)),
    }
    if calls:
        message["tool_calls"] = calls
    finish = draw(st.sampled_from(["stop", "tool_calls", "length"]))
    body: dict[str, Any] = {
        "object": "chat.completion",
        "created": 1,
        "model": "m",
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8},
    }
    if draw(st.booleans()):
        body["id"] = "chatcmpl-1"
    return body


def _dumps(value: Any) -> str:
    return orjson.dumps(value).decode()
