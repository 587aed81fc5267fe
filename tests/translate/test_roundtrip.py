"""Round-trip properties: the tool-id bijection survives whole exchanges."""

from __future__ import annotations

from collections import Counter
from typing import Any

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tpx.translate import (
    request_bytes_to_openai,
    request_to_openai,
    response_to_messages,
    tool_use_ids,
)

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
