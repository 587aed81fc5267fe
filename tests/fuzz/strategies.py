"""Hypothesis strategies for hostile provider replies and caller requests (one place).

Every strategy starts from a well-formed value and mutates it (or produces raw junk), so
cases exercise both the happy path and every way out of it: wrong types, missing and
unknown fields, deep nesting (beyond the depth rule), echoes of the canary credential in
its raw, escaped and encoded forms, SSE streams split at arbitrary byte boundaries.
"""

from __future__ import annotations

import base64
import json
import re
import urllib.parse
from typing import Any

import orjson
from hypothesis import strategies as st

__all__ = [
    "CANARY",
    "anthropic_body",
    "anthropic_stream",
    "caller_request",
    "canary_forms",
    "json_member_runs",
    "openai_body",
    "openai_stream",
    "reply",
    "split",
]

#: The credential every fuzz transport is booted with; it must never come back out.
CANARY = "sk-canary'Q7fZ9xY2wV4uT6sR8pO1"


def canary_forms() -> list[str]:
    """Forms whose presence anywhere in tpx's output is a leak (prefixes included)."""
    return [
        CANARY,
        CANARY[:12],
        CANARY[-12:],
        json.dumps(CANARY)[1:13],
        repr(CANARY)[1:13],
        base64.b64encode(CANARY.encode()).decode()[:16],
        urllib.parse.quote(CANARY, safe="")[:16],
        "Q7fZ9xY2",
    ]


_ECHOES = [
    CANARY,
    repr(CANARY),
    json.dumps(CANARY),
    repr({"k": CANARY + '"'}),
    base64.b64encode(CANARY.encode()).decode(),
    base64.b64encode(b"u:" + CANARY.encode()).decode(),
    urllib.parse.quote(CANARY),
    urllib.parse.quote_plus(CANARY),
    "".join(f"\\u{ord(c):04x}" for c in CANARY),
    "x" * 50 + CANARY,
]


_BOOL = st.booleans()
_U16 = st.integers(0, 2**16 - 1)
_KEY = st.text(max_size=8)
_JUNK_BYTES = st.binary(max_size=40)
_STATUSES = (200,) * 8 + (400, 401, 413, 429, 500, 529)


def _int(draw: st.DrawFn, low: int, high: int) -> int:
    """An integer in [low, high] from one static strategy (cheaper than a fresh
    ``st.integers(low, high)`` per draw)."""
    return low + draw(_U16) % (high - low + 1)


def deep(depth: int) -> Any:
    value: Any = 1
    for level in range(depth):
        value = [value] if level % 2 else {"a": value}
    return value


leaf = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**63), 2**63 - 1),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=12),
    st.sampled_from(_ECHOES),
    st.sampled_from(["", "\n", "a\nb", "text", "tool_use", "message", "error", "0", "stop"]),
)
json_value = st.recursive(
    leaf,
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=6), children, max_size=3)
    ),
    max_leaves=8,
)
hostile = st.one_of(json_value, st.integers(100, 400).map(deep))
#: In bodies, deep values are a placeholder :func:`dumps` expands (orjson cannot write them).
hostile_in_body = st.one_of(json_value, st.integers(100, 1100).map(lambda n: f"\x00DEEP{n}\x00"))
_DEEP = re.compile(rb'"\\u0000DEEP(\d+)\\u0000"')


def dumps(value: Any) -> bytes:
    """``orjson.dumps``, with each deep placeholder expanded to that many nested arrays."""
    return _DEEP.sub(lambda m: b"[" * int(m[1]) + b"]" * int(m[1]), orjson.dumps(value))


def _mutate(draw: st.DrawFn, value: Any, junk: st.SearchStrategy[Any] = hostile_in_body) -> Any:
    """One random mutation somewhere inside *value* (a JSON tree), or none."""
    if not draw(_BOOL):
        return value
    path: list[Any] = []
    node = value
    while isinstance(node, dict | list) and node and draw(_BOOL):
        keys = sorted(node) if isinstance(node, dict) else list(range(len(node)))
        key = keys[_int(draw, 0, len(keys) - 1)]
        path.append(key)
        node = node[key]
    action = ("replace", "drop", "add")[_int(draw, 0, 2)]
    if not path:
        return draw(junk) if action == "replace" else value
    parent = value
    for key in path[:-1]:
        parent = parent[key]
    last = path[-1]
    if action == "replace":
        parent[last] = draw(junk)
    elif action == "drop":
        del parent[last]
    elif isinstance(parent, dict):
        parent[draw(_KEY)] = draw(junk)
    else:
        parent.append(draw(junk))
    return value


_BLOCKS: list[dict[str, Any]] = [
    {"type": "text", "text": "hello"},
    {"type": "tool_use", "id": "toolu_1", "name": "f", "input": {"a": 1}},
    {"type": "tool_use", "id": "toolu_2", "name": "g", "input": {}},
    {"type": "thinking", "thinking": "hm", "signature": "sig"},
]
_CALLS: list[dict[str, Any]] = [
    {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{}"}},
    {"id": "c 2", "type": "function", "function": {"name": "g", "arguments": '{"x":1}'}},
    {"id": "", "type": "function", "function": {"name": "h", "arguments": ""}},
]


def _subset(draw: st.DrawFn, items: list[dict[str, Any]], most: int) -> list[dict[str, Any]]:
    """Up to *most* distinct items, in a drawn order, as fresh copies."""
    pool = list(range(len(items)))
    chosen = [pool.pop(_int(draw, 0, len(pool) - 1)) for _ in range(_int(draw, 0, most))]
    return [orjson.loads(orjson.dumps(items[i])) for i in chosen]


def _message(draw: st.DrawFn) -> dict[str, Any]:
    blocks = _subset(draw, _BLOCKS, 3)
    return {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude",
        "content": blocks,
        "stop_reason": "tool_use" if any(b["type"] == "tool_use" for b in blocks) else "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": 3, "output_tokens": 2},
    }


@st.composite
def anthropic_body(draw: st.DrawFn) -> bytes:
    if _int(draw, 0, 9) == 0:
        return draw(_JUNK_BYTES)
    return dumps(_mutate(draw, _message(draw)))


def _completion(draw: st.DrawFn) -> dict[str, Any]:
    calls = _subset(draw, _CALLS, 2)
    message: dict[str, Any] = {
        "role": "assistant",
        "content": ("hi", None, "")[_int(draw, 0, 2)],
    }
    if calls:
        message["tool_calls"] = calls
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "model": "gpt",
        "choices": [
            {"index": 0, "message": message, "finish_reason": "tool_calls" if calls else "stop"}
        ],
        "usage": {"prompt_tokens": 3, "completion_tokens": 2},
    }


@st.composite
def openai_body(draw: st.DrawFn) -> bytes:
    if _int(draw, 0, 9) == 0:
        return draw(_JUNK_BYTES)
    return dumps(_mutate(draw, _completion(draw)))


def _sse(event: dict[str, Any] | bytes, named: bool) -> bytes:
    if isinstance(event, bytes):
        return event
    data = dumps(event)
    kind = event.get("type") if isinstance(event, dict) else None
    head = (
        b"event: " + kind.encode() + b"\n"
        if named and isinstance(kind, str) and "\n" not in kind
        else b""
    )
    return head + b"data: " + data + b"\n\n"


@st.composite
def anthropic_stream(draw: st.DrawFn) -> bytes:
    message = _message(draw)
    content = message["content"]
    events: list[Any] = [
        {"type": "message_start", "message": {**message, "content": [], "stop_reason": None}}
    ]
    for index, block in enumerate(content):
        start = {**block}
        if block["type"] == "tool_use":
            start["input"] = {}
        if block["type"] == "text":
            start["text"] = ""
        events.append({"type": "content_block_start", "index": index, "content_block": start})
        if block["type"] == "tool_use":
            events.append(
                {
                    "type": "content_block_delta",
                    "index": index,
                    "delta": {
                        "type": "input_json_delta",
                        "partial_json": orjson.dumps(block["input"]).decode(),
                    },
                }
            )
        elif block["type"] == "text":
            events.append(
                {
                    "type": "content_block_delta",
                    "index": index,
                    "delta": {"type": "text_delta", "text": block["text"]},
                }
            )
        events.append({"type": "content_block_stop", "index": index})
    events.append(
        {
            "type": "message_delta",
            "delta": {"stop_reason": message["stop_reason"], "stop_sequence": None},
            "usage": {"output_tokens": 2},
        }
    )
    events.append({"type": "message_stop"})
    if draw(_BOOL):
        events.insert(_int(draw, 1, len(events) - 1), {"type": "ping"})
    events = _mutate_events(draw, events)
    named = draw(_BOOL)
    return b"".join(_sse(e, named) for e in events)


_JUNK_EVENTS: list[bytes] = [
    b"data: {" + CANARY.encode() + b"\n\n",
    b"data: "
    + orjson.dumps({"type": "error", "error": {"type": "overloaded_error", "message": CANARY}})
    + b"\n\n",
    b"event: error\ndata: "
    + orjson.dumps({"error": {"type": "server_error", "message": repr(CANARY)}})
    + b"\n\n",
    b"data: " + dumps({"error": {"message": "\x00DEEP300\x00"}}) + b"\n\n",
    b"data: " + orjson.dumps({"type": "future_event", "x": 1}) + b"\n\n",
    b"data: [DONE]\n\n",
    b": comment\n\n",
]


def _mutate_events(draw: st.DrawFn, events: list[Any]) -> list[Any]:
    choice = _int(draw, 0, 5)
    if choice == 0 and events:
        del events[_int(draw, 0, len(events) - 1)]
    elif choice == 1 and events:
        position = _int(draw, 0, len(events) - 1)
        events[position] = _mutate(draw, events[position])
    elif choice == 2:
        junk = _JUNK_EVENTS[_int(draw, 0, len(_JUNK_EVENTS) - 1)]
        events.insert(_int(draw, 0, len(events)), junk)
    elif choice == 3 and len(events) > 1:
        del events[_int(draw, 1, len(events) - 1) :]
    return events


@st.composite
def openai_stream(draw: st.DrawFn) -> bytes:
    completion = _completion(draw)
    message = completion["choices"][0]["message"]
    chunks: list[Any] = []
    base = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "model": "gpt"}
    if message.get("content"):
        chunks.append(
            {
                **base,
                "choices": [
                    {"index": 0, "delta": {"role": "assistant", "content": message["content"]}}
                ],
            }
        )
    for position, call in enumerate(message.get("tool_calls", [])):
        arguments = call["function"]["arguments"]
        cut = _int(draw, 0, len(arguments))
        for part_index, part in enumerate((arguments[:cut], arguments[cut:])):
            fragment: dict[str, Any] = {"index": position, "function": {"arguments": part}}
            if part_index == 0:
                fragment.update(id=call["id"], type="function")
                fragment["function"]["name"] = call["function"]["name"]
            chunks.append({**base, "choices": [{"index": 0, "delta": {"tool_calls": [fragment]}}]})
    finish = completion["choices"][0]["finish_reason"]
    chunks.append({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]})
    chunks.append({**base, "choices": [], "usage": completion["usage"]})
    chunks.append(b"data: [DONE]\n\n")
    chunks = _mutate_events(draw, chunks)
    return b"".join(_sse(c, False) if not isinstance(c, bytes) else c for c in chunks)


def split(draw: st.DrawFn, data: bytes) -> list[bytes]:
    """*data* cut at arbitrary byte boundaries (every boundary is reachable)."""
    if not data:
        return [b""]
    cuts = sorted({_int(draw, 0, len(data)) for _ in range(_int(draw, 0, 6))})
    pieces = [data[a:b] for a, b in zip([0, *cuts], [*cuts, len(data)], strict=True)]
    return [p for p in pieces if p] or [b""]


_ERROR_BODIES = st.one_of(
    st.sampled_from([e.encode() for e in _ECHOES]),
    anthropic_body(),
    st.integers(100, 1200).map(lambda n: b"[" * n + b"]" * n),
)


@st.composite
def reply(draw: st.DrawFn, stream: bool, anthropic: bool) -> tuple[int, list[bytes]]:
    """``(status, body chunks)`` of one provider reply."""
    status = _STATUSES[_int(draw, 0, len(_STATUSES) - 1)]
    if status != 200:
        body = draw(_ERROR_BODIES)
        return status, [body]
    if stream:
        data = draw(anthropic_stream() if anthropic else openai_stream())
    else:
        data = draw(anthropic_body() if anthropic else openai_body())
    return status, split(draw, data)


@st.composite
def caller_request(draw: st.DrawFn) -> dict[str, Any]:
    """A Messages request, sometimes mutated (caller-side junk: must be a 400, never a crash)."""
    request: dict[str, Any] = {
        "model": "m",
        "max_tokens": 16,
        "messages": [{"role": "user", "content": "hi"}],
    }
    if draw(_BOOL):
        request["tools"] = [{"name": "f", "input_schema": {"type": "object"}}]
    if _int(draw, 0, 3) == 0:
        mutated = _mutate(draw, request, hostile)
        if isinstance(mutated, dict):  # a request that is not a mapping is a TypeError
            request = mutated
    return request


# -- request bodies split into a head and a repeated tail (tpx.gateway.bodies) --------------

_LEAF = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(st.sampled_from('ab",:{}[]\\ \u00e9\n'), max_size=12),
)
_VALUE = st.recursive(
    _LEAF,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=8,
)
_TAIL_KEYS = ["system", "tools", "stream", "max_tokens", "metadata"]
_KEY = st.sampled_from(["model", "messages", "x", *_TAIL_KEYS])


def _member(draw: st.DrawFn, key: str, value: Any) -> bytes:
    ascii_only = draw(_BOOL)
    spaced = _int(draw, 0, 4) == 0
    name = json.dumps(key, ensure_ascii=ascii_only)
    text = json.dumps(value, ensure_ascii=ascii_only, separators=(",", ":"))
    return f"{name}{' : ' if spaced else ':'}{text}".encode()


def _hostile_head(draw: st.DrawFn, head: bytes) -> bytes:
    choice = _int(draw, 0, 6)
    at = _int(draw, 0, len(head))
    if choice == 0:
        return head[:at]
    if choice == 1:
        return (
            head[:at]
            + draw(
                st.sampled_from(
                    [b"{", b"}", b"[", b"]", b'"', b",", b":", b" ", b"\\", b"1", b"\xff"]
                )
            )
            + head[at:]
        )
    if choice == 2:
        return head[:at] + head[at + 1 :]
    if choice == 3:
        return draw(
            st.sampled_from([b"", b"{", b"{ ", b"[", b'{"a":1,', b"{}", b'{"a"', b'"x"', b"1"])
        )
    if choice == 4:
        return head + b","
    if choice == 5:
        return head + b" \n"
    return head


@st.composite
def json_member_runs(draw: st.DrawFn) -> tuple[bytes, list[bytes], bytes]:
    """``(first, heads, tail)``: a body ``first`` whose members after ``messages`` are the
    bytes ``tail`` (``,`` members ``}``), and heads to put before the same tail: valid
    ones (other members, keys the tail has too) and hostile ones (cut, bytes inserted or
    removed, not objects)."""

    def head_members() -> list[bytes]:
        members = [_member(draw, "model", draw(st.text(max_size=6)))]
        members.append(_member(draw, "messages", draw(st.lists(_VALUE, max_size=3))))
        for _ in range(_int(draw, 0, 2)):
            members.insert(_int(draw, 0, len(members)), _member(draw, draw(_KEY), draw(_VALUE)))
        return members

    tail_members = [
        _member(draw, key, draw(_VALUE))
        for key in draw(st.lists(st.sampled_from(_TAIL_KEYS), min_size=1, max_size=4))
    ]
    tail_members.append(_member(draw, "system", "s" * 40))  # long enough to be kept
    tail = b"," + b",".join(tail_members) + b"}" + draw(st.sampled_from([b"", b" ", b"\n"]))
    first = b"{" + b",".join(head_members()) + tail
    heads = []
    for _ in range(_int(draw, 1, 4)):
        head = b"{" + b",".join(head_members())
        heads.append(_hostile_head(draw, head) if draw(_BOOL) else head)
    return first, heads, tail
