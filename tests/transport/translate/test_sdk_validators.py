"""The SDK validators used by the other tests really reject wrong bodies."""

from __future__ import annotations

from typing import Any

import pytest

from .sdk import (
    SDKMismatch,
    validate_messages_request,
    validate_messages_response,
    validate_openai_request,
    validate_openai_response,
)

GOOD_OPENAI_REQUEST: dict[str, Any] = {
    "model": "m",
    "messages": [
        {"role": "user", "content": "hi"},
        {
            "role": "assistant",
            "tool_calls": [
                {"id": "a", "type": "function", "function": {"name": "f", "arguments": "{}"}}
            ],
        },
        {"role": "tool", "tool_call_id": "a", "content": "x"},
    ],
}
GOOD_MESSAGE: dict[str, Any] = {
    "id": "msg_1",
    "type": "message",
    "role": "assistant",
    "model": "m",
    "content": [
        {"type": "text", "text": "hi"},
        {"type": "tool_use", "id": "t", "name": "f", "input": {}},
    ],
    "stop_reason": "tool_use",
    "stop_sequence": None,
    "usage": {"input_tokens": 1, "output_tokens": 1},
}


def test_good_bodies_pass() -> None:
    validate_openai_request(GOOD_OPENAI_REQUEST)
    validate_openai_request(
        {**GOOD_OPENAI_REQUEST, "stream": True, "stream_options": {"include_usage": True}}
    )
    validate_messages_response(GOOD_MESSAGE)
    validate_messages_request(
        {"model": "m", "max_tokens": 1, "messages": [{"role": "user", "content": "x"}]}
    )
    validate_openai_response(
        {
            "id": "c",
            "object": "chat.completion",
            "created": 1,
            "model": "m",
            "choices": [
                {
                    "index": 0,
                    "finish_reason": "stop",
                    "message": {"role": "assistant", "content": "x"},
                }
            ],
        }
    )


@pytest.mark.parametrize(
    "bad",
    [
        {**GOOD_OPENAI_REQUEST, "bogus": 1},
        {**GOOD_OPENAI_REQUEST, "max_tokens": "5"},
        {**GOOD_OPENAI_REQUEST, "tool_choice": "any"},
        {**GOOD_OPENAI_REQUEST, "messages": [{"role": "user", "contents": "x"}]},
        {**GOOD_OPENAI_REQUEST, "messages": [{"role": "tool", "content": "x"}]},
        {
            **GOOD_OPENAI_REQUEST,
            "messages": [
                {
                    "role": "assistant",
                    "tool_calls": [
                        {"id": "a", "type": "function", "function": {"name": "f", "arguments": {}}}
                    ],
                }
            ],
        },
        {
            **GOOD_OPENAI_REQUEST,
            "messages": [{"role": "user", "content": [{"type": "image", "source": {}}]}],
        },
    ],
)
def test_wrong_openai_requests_fail(bad: dict[str, Any]) -> None:
    with pytest.raises(SDKMismatch):
        validate_openai_request(bad)


@pytest.mark.parametrize(
    "bad",
    [
        {**GOOD_MESSAGE, "stop_reason": "stop"},
        {**GOOD_MESSAGE, "role": "user"},
        {**GOOD_MESSAGE, "surprise": True},
        {**GOOD_MESSAGE, "content": [{"type": "tool_use", "id": "t", "name": "f", "input": "{}"}]},
        {**GOOD_MESSAGE, "content": [{"type": "text", "text": "x", "extra": 1}]},
        {**GOOD_MESSAGE, "usage": {"input_tokens": 1}},
    ],
)
def test_wrong_messages_fail(bad: dict[str, Any]) -> None:
    with pytest.raises(SDKMismatch):
        validate_messages_response(bad)
