"""Round-trip properties: the tool-id bijection survives whole exchanges."""

from __future__ import annotations

from collections import Counter
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tpx.transport.translate import (
    request_bytes_to_openai,
    request_to_openai,
    response_bytes_to_messages,
    response_to_messages,
    tool_use_ids,
)
from tpx.transport.translate.ids import decode_caller_id

from .quirks import QUIRKS
from .sdk import validate_messages_request, validate_messages_response, validate_openai_request
from .strategies import messages_history, openai_tool_response

_SETTINGS = settings(deadline=None, max_examples=80, suppress_health_check=[HealthCheck.too_slow])


@_SETTINGS
@given(case=messages_history())
def test_request_keeps_exactly_the_multiset_of_ids(
    case: tuple[dict[str, Any], list[list[str | None]]],
) -> None:
    request, expected = case
    validate_messages_request(request)
    body = request_to_openai(request).body
    validate_openai_request(body)
    assert orjson.loads(request_bytes_to_openai(orjson.dumps(request))) == body
    messages = body["messages"]
    turns = [index for index, message in enumerate(messages) if message.get("tool_calls")]
    assert len(turns) == len(expected)
    all_calls: list[str] = []
    all_results: list[str] = []
    for index, wires in zip(turns, expected, strict=True):
        calls = [call["id"] for call in messages[index]["tool_calls"]]
        assert calls == wires
        tools = messages[index + 1 : index + 1 + len(calls)]
        assert [tool["role"] for tool in tools] == ["tool"] * len(calls)
        assert [tool["tool_call_id"] for tool in tools] == calls
        after = messages[index + 1 + len(calls) :]
        assert not after or after[0]["role"] != "tool"
        all_calls += calls
        all_results += [tool["tool_call_id"] for tool in tools]
    expected_flat = [wire for wires in expected for wire in wires]
    assert Counter(all_calls) == Counter(expected_flat) == Counter(all_results)
    # user text beside the tool results follows them, in order
    for user, original in zip(
        [m for m in request["messages"][2::2]], range(len(expected)), strict=True
    ):
        texts = [b["text"] for b in user["content"] if b["type"] == "text"]
        if texts:
            index = turns[original] + 1 + len(expected[original])
            content = messages[index]["content"]
            sent = [content] if isinstance(content, str) else [p["text"] for p in content]
            assert sent == texts


@_SETTINGS
@given(response=openai_tool_response(), data=st.data())
def test_response_then_next_request_carries_exactly_the_emitted_ids(
    response: dict[str, Any], data: st.DataObject
) -> None:
    message = response_to_messages(response).body
    validate_messages_response(message)
    calls = response["choices"][0]["message"].get("tool_calls", [])
    callers = tool_use_ids(message)
    assert len(callers) == len(calls)
    assert len(set(callers)) == len(callers)
    if not calls:
        assert message["stop_reason"] != "tool_use"
        return
    assert message["stop_reason"] == "tool_use"
    order = data.draw(st.permutations(callers))
    request = {
        "model": "claude-x",
        "max_tokens": 64,
        "messages": [
            {"role": "user", "content": "go"},
            {"role": "assistant", "content": message["content"]},
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": caller, "content": "done"}
                    for caller in order
                ],
            },
        ],
    }
    body = request_to_openai(request).body
    validate_openai_request(body)
    emitted = [call.get("id", "") for call in calls]
    assistant = next(m for m in body["messages"] if m["role"] == "assistant")
    position = body["messages"].index(assistant)
    assert [call["id"] for call in assistant["tool_calls"]] == emitted
    tools = body["messages"][position + 1 :]
    assert [tool["role"] for tool in tools] == ["tool"] * len(calls)
    assert [tool["tool_call_id"] for tool in tools] == emitted
    for sent, original in zip(assistant["tool_calls"], calls, strict=True):
        arguments = original["function"]["arguments"]
        expected = arguments if isinstance(arguments, dict) else orjson.loads(arguments or "{}")
        assert orjson.loads(sent["function"]["arguments"]) == expected


# -- caller ids across a whole conversation --------------------------------------------------

#: A small pool, so that responses reuse foreign ids at the same positions (Gemini's "",
#: servers restarting at call_0 every response, a missing id).
_REUSED_IDS = st.sampled_from([None, "", "call_0", "call_1", "a.b", "é"])


def _response_with_ids(foreign: list[str | None]) -> dict[str, Any]:
    calls: list[dict[str, Any]] = []
    for position, fid in enumerate(foreign):
        call: dict[str, Any] = {
            "type": "function",
            "function": {"name": "f", "arguments": f'{{"n": {position}}}'},
        }
        if fid is not None:
            call["id"] = fid
        calls.append(call)
    return {
        "id": "chatcmpl-same",
        "object": "chat.completion",
        "created": 1,
        "model": "m",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": None, "tool_calls": calls},
                "finish_reason": "tool_calls",
            }
        ],
        "usage": {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8},
    }


@pytest.mark.parametrize("name", ["gemini_empty_ids", "missing_ids", "ollama_shared_id"])
def test_two_translations_of_the_same_response_give_disjoint_caller_ids(name: str) -> None:
    body = QUIRKS[name]
    first = tool_use_ids(response_to_messages(body).body)
    second = tool_use_ids(response_to_messages(body).body)
    third = tool_use_ids(orjson.loads(response_bytes_to_messages(orjson.dumps(body))))
    assert first
    assert set(first).isdisjoint(second)
    assert set(first).isdisjoint(third)
    assert set(second).isdisjoint(third)
    decoded = [decode_caller_id(caller) for caller in first + second + third]
    assert [d.foreign for d in decoded if d is not None] == [
        call.get("id") for call in body["choices"][0]["message"]["tool_calls"]
    ] * 3


@_SETTINGS
@given(turns=st.lists(st.lists(_REUSED_IDS, min_size=1, max_size=3), min_size=2, max_size=6))
def test_caller_ids_are_unique_across_responses_and_go_back_exactly(
    turns: list[list[str | None]],
) -> None:
    messages: list[dict[str, Any]] = [{"role": "user", "content": "go"}]
    seen: list[str] = []
    for index, foreign in enumerate(turns):
        body = _response_with_ids(foreign)
        if index % 2:
            message = orjson.loads(response_bytes_to_messages(orjson.dumps(body)))
        else:
            message = response_to_messages(body).body
        validate_messages_response(message)
        callers = tool_use_ids(message)
        decoded = [decode_caller_id(caller) for caller in callers]
        assert [d.foreign if d is not None else "not ours" for d in decoded] == foreign
        seen += callers
        messages.append({"role": "assistant", "content": message["content"]})
        messages.append(
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": caller, "content": f"r{index}"}
                    for caller in reversed(callers)
                ],
            }
        )
    assert len(set(seen)) == len(seen), "a caller id repeats in the conversation"
    request = {"model": "claude-x", "max_tokens": 64, "messages": messages}
    validate_messages_request(request)
    body = request_to_openai(request).body
    validate_openai_request(body)
    assert orjson.loads(request_bytes_to_openai(orjson.dumps(request))) == body
    sent = [message for message in body["messages"] if message.get("tool_calls")]
    assert [[call["id"] for call in m["tool_calls"]] for m in sent] == [
        ["" if fid is None else fid for fid in foreign] for foreign in turns
    ]
    results = [m["tool_call_id"] for m in body["messages"] if m["role"] == "tool"]
    assert results == ["" if fid is None else fid for foreign in turns for fid in foreign]
