"""Chat Completions response -> Messages response."""

from __future__ import annotations

import copy
from typing import Any

import orjson
import pytest

from tpx.errors import ProtocolError
from tpx.transport.translate import (
    request_to_openai,
    response_bytes_to_messages,
    response_to_messages,
    tool_use_ids,
)
from tpx.transport.translate.ids import to_caller_id
from tpx.transport.translate.response import stable_message_id
from tpx.transport.translate.signing import PROCESS_SIGNER

from .quirks import ANTHROPIC_ERROR, OPENAI_ERROR, QUIRKS, VLLM_ERROR, completion
from .sdk import validate_messages_response, validate_openai_request, validate_openai_response

NONCE = "0123456789ab"


def _translate(body: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
    """Dict and bytes translations (same fixed nonce) agree; the input is not mutated."""
    before = copy.deepcopy(body)
    result = response_to_messages(body, nonce=NONCE, **kwargs).body
    assert body == before, "the input must not be mutated"
    validate_messages_response(result)
    data = orjson.dumps(body)
    assert orjson.loads(response_bytes_to_messages(data, nonce=NONCE, **kwargs)) == result
    return result


def _answer_all(response: dict[str, Any]) -> list[dict[str, Any]]:
    """The next OpenAI request after the caller answers every tool_use of *response*."""
    request = {
        "model": "claude-x",
        "max_tokens": 100,
        "messages": [
            {"role": "user", "content": "go"},
            {"role": "assistant", "content": response["content"]},
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": caller, "content": f"r{index}"}
                    for index, caller in enumerate(tool_use_ids(response))
                ],
            },
        ],
    }
    body = request_to_openai(request).body
    validate_openai_request(body)
    messages: list[dict[str, Any]] = body["messages"]
    return messages


@pytest.mark.parametrize("name", sorted(QUIRKS))
def test_every_quirk_translates_to_a_valid_message(name: str) -> None:
    result = _translate(QUIRKS[name])
    assert result["type"] == "message"
    assert result["role"] == "assistant"
    assert all(block.get("text", "x") != "" for block in result["content"])


@pytest.mark.parametrize(
    ("name", "wire_ids"),
    [
        ("gemini_empty_ids", ["", ""]),
        ("missing_ids", ["", ""]),
        ("ollama_shared_id", ["call_same"] * 3),
        ("mistral_ids", ["aB3dE6gH9", "Zz0Yy1Xx2"]),
        ("llamacpp_object_arguments", ["call_1"]),
        ("empty_arguments", ["call_now"]),
    ],
)
def test_tool_ids_go_back_exactly_as_the_provider_sent_them(name: str, wire_ids: list[str]) -> None:
    result = _translate(QUIRKS[name])
    callers = tool_use_ids(result)
    assert len(set(callers)) == len(callers) == len(wire_ids)
    assert result["stop_reason"] == "tool_use"
    messages = _answer_all(result)
    assistant, *tools = messages[1:]
    assert [call["id"] for call in assistant["tool_calls"]] == wire_ids
    assert [tool["role"] for tool in tools] == ["tool"] * len(wire_ids)
    assert [tool["tool_call_id"] for tool in tools] == wire_ids
    assert [tool["content"] for tool in tools] == [f"r{i}" for i in range(len(wire_ids))]


def test_gemini_tool_call_with_finish_stop_is_tool_use_and_gets_a_stable_id() -> None:
    body = QUIRKS["gemini_empty_ids"]
    first = _translate(body)
    second = _translate(copy.deepcopy(body))
    assert first["stop_reason"] == "tool_use"
    assert first["id"].startswith("msg_tpx_")
    assert first["id"] == second["id"]
    other = copy.deepcopy(body)
    other["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"] = "{}"
    assert _translate(other)["id"] != first["id"]


def test_arguments_forms() -> None:
    parsed = _translate(QUIRKS["llamacpp_object_arguments"])["content"][0]
    assert parsed["input"] == {"a": 1, "b": [2, 3]}
    empty = _translate(QUIRKS["empty_arguments"])["content"][0]
    assert empty == {
        "type": "tool_use",
        "id": f"tpxr0-{NONCE}_call_now",
        "name": "now",
        "input": {},
    }
    text = _translate(QUIRKS["gemini_empty_ids"])["content"]
    assert [block["input"] for block in text] == [{"city": "Paris"}, {"city": "Rome"}]


@pytest.mark.parametrize("arguments", ["{", "not json", "[1, 2]", "42", '"s"', "null", 7, ["x"]])
def test_bad_arguments_are_a_protocol_error(arguments: Any) -> None:
    body = completion(
        {
            "role": "assistant",
            "tool_calls": [
                {"id": "c", "type": "function", "function": {"name": "f", "arguments": arguments}}
            ],
        },
        "tool_calls",
    )
    with pytest.raises(ProtocolError, match="arguments"):
        response_to_messages(body)
    with pytest.raises(ProtocolError, match="arguments"):
        response_bytes_to_messages(orjson.dumps(body))


def test_deepseek_reasoning_becomes_a_thinking_block_that_goes_back() -> None:
    result = _translate(QUIRKS["deepseek_reasoning"])
    assert result["content"] == [
        {
            "type": "thinking",
            "thinking": "2 + 2 = 4, the user wants a number.",
            "signature": PROCESS_SIGNER.sign("2 + 2 = 4, the user wants a number."),
        },
        {"type": "text", "text": "It is 4."},
    ]
    request = {
        "model": "m",
        "max_tokens": 10,
        "messages": [
            {"role": "user", "content": "2+2?"},
            {"role": "assistant", "content": result["content"]},
            {"role": "user", "content": "thanks"},
        ],
    }
    body = request_to_openai(request, profile="deepseek").body
    validate_openai_request(body)
    assert body["messages"][1] == {
        "role": "assistant",
        "content": "It is 4.",
        "reasoning_content": "2 + 2 = 4, the user wants a number.",
    }


@pytest.mark.parametrize(
    ("name", "reason", "sequence"),
    [
        ("vllm_stop_reason", "stop_sequence", "THREE"),
        ("sglang_matched_stop", "stop_sequence", "THREE"),
        ("vllm_stop_token", "end_turn", None),
        ("cached_usage", "max_tokens", None),
        ("refusal", "refusal", None),
        ("content_filter", "refusal", None),
        ("deepseek_reasoning", "end_turn", None),
        ("ollama_shared_id", "tool_use", None),
    ],
)
def test_stop_reasons(name: str, reason: str, sequence: str | None) -> None:
    result = _translate(QUIRKS[name])
    assert result["stop_reason"] == reason
    assert result["stop_sequence"] == sequence


def test_refusal_text_is_kept() -> None:
    result = _translate(QUIRKS["refusal"])
    assert result["content"] == [{"type": "text", "text": "I can't help with that."}]


def test_usage_subtracts_cached_tokens() -> None:
    usage = _translate(QUIRKS["cached_usage"])["usage"]
    assert usage["input_tokens"] == 2000 - 1536
    assert usage["cache_read_input_tokens"] == 1536
    assert usage["output_tokens"] == 50


def test_missing_usage_and_model_are_zeros_and_unknown_with_warnings() -> None:
    body = completion({"role": "assistant", "content": "hi"})
    del body["usage"]
    del body["model"]
    translation = response_to_messages(body)
    validate_messages_response(translation.body)
    assert translation.body["usage"]["input_tokens"] == 0
    assert translation.body["model"] == "unknown"
    assert len(translation.warnings) == 2


def test_model_kwarg_overrides() -> None:
    assert _translate(QUIRKS["refusal"], model="claude-alias")["model"] == "claude-alias"


def test_empty_reply_has_no_empty_text_block() -> None:
    result = _translate(completion({"role": "assistant", "content": ""}))
    assert result["content"] == []
    assert result["stop_reason"] == "end_turn"


def test_text_parts_content_is_accepted() -> None:
    body = completion({"role": "assistant", "content": [{"type": "text", "text": "a"}]})
    assert _translate(body)["content"] == [{"type": "text", "text": "a"}]


def test_unknown_finish_reason_warns() -> None:
    translation = response_to_messages(completion({"role": "assistant", "content": "x"}, "eos"))
    assert translation.body["stop_reason"] == "end_turn"
    assert any("eos" in warning for warning in translation.warnings)


def test_finish_tool_calls_without_calls_warns() -> None:
    translation = response_to_messages(
        completion({"role": "assistant", "content": "x"}, "tool_calls")
    )
    assert translation.body["stop_reason"] == "end_turn"
    assert translation.warnings


def test_extra_choices_are_dropped_with_a_warning() -> None:
    body = completion({"role": "assistant", "content": "a"})
    body["choices"].append({"index": 1, "message": {"role": "assistant", "content": "b"}})
    translation = response_to_messages(body)
    assert translation.body["content"] == [{"type": "text", "text": "a"}]
    assert translation.warnings


def test_legacy_function_call() -> None:
    body = completion(
        {"role": "assistant", "function_call": {"name": "f", "arguments": '{"a": 1}'}},
        "function_call",
    )
    result = _translate(body)
    assert result["content"] == [
        {"type": "tool_use", "id": to_caller_id(None, 0, NONCE), "name": "f", "input": {"a": 1}}
    ]
    assert result["stop_reason"] == "tool_use"


@pytest.mark.parametrize(
    "body",
    [
        [],
        "text",
        {},
        {"choices": []},
        {"choices": {}},
        {"choices": [1]},
        {"choices": [{"message": "hi"}]},
        {"choices": [{"delta": {"content": "x"}}], "object": "chat.completion.chunk"},
        {"choices": [{"message": {"content": 5}}]},
        {"choices": [{"message": {"tool_calls": {}}}]},
        {"choices": [{"message": {"tool_calls": [{"function": {"arguments": "{}"}}]}}]},
        {"choices": [{"message": {"tool_calls": [{"id": 5, "function": {"name": "f"}}]}}]},
        {"choices": [{"message": {"tool_calls": [{"type": "custom", "custom": {}}]}}]},
        {"choices": [{"message": {"content": "x"}}], "usage": {"prompt_tokens": "1"}},
    ],
)
def test_not_a_chat_completion_is_a_protocol_error(body: Any) -> None:
    with pytest.raises(ProtocolError):
        response_to_messages(body)


def test_not_json_is_a_protocol_error() -> None:
    with pytest.raises(ProtocolError, match="not JSON"):
        response_bytes_to_messages(b"<html>502 Bad Gateway</html>")


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        (OPENAI_ERROR, "Rate limit reached for requests"),
        (ANTHROPIC_ERROR, "Overloaded"),
        (VLLM_ERROR, "maximum context length"),
        ({"error": "model not loaded"}, "model not loaded"),
    ],
)
def test_error_bodies_are_protocol_errors_with_the_provider_message(
    body: dict[str, Any], needle: str
) -> None:
    with pytest.raises(ProtocolError) as info:
        response_to_messages(body)
    assert needle in info.value.message
    assert needle in info.value.body()["error"]["message"]


def test_standard_fixture_is_a_real_chat_completion() -> None:
    """The fixtures' skeleton is what the OpenAI SDK parses (so quirks are the only oddity)."""
    validate_openai_response(QUIRKS["cached_usage"])
    validate_openai_response(QUIRKS["mistral_ids"])


# -- usage: counts must be non-negative integers ------------------------------------------


def _with_usage(**usage: Any) -> dict[str, Any]:
    body = copy.deepcopy(QUIRKS["cached_usage"])
    body["usage"] = {**body["usage"], **usage}
    return body


@pytest.mark.parametrize(
    "usage",
    [
        {"prompt_tokens": -3},
        {"completion_tokens": -1},
        {"prompt_tokens_details": {"cached_tokens": -5}},
        {"prompt_tokens": 1.5},
        {"completion_tokens": "3"},
        {"completion_tokens": True},
        {"prompt_tokens_details": {"cached_tokens": 2.0}},
    ],
)
def test_negative_or_non_integer_usage_is_a_protocol_error(usage: dict[str, Any]) -> None:
    for body in (_with_usage(**usage), _simple_with_usage(**usage)):
        with pytest.raises(ProtocolError, match="usage token counts"):
            response_to_messages(body)
        with pytest.raises(ProtocolError, match="usage token counts"):
            response_bytes_to_messages(orjson.dumps(body))


def _simple_with_usage(**usage: Any) -> dict[str, Any]:
    """A body the fast path would take, but for its usage."""
    return {
        "id": "c1",
        "object": "chat.completion",
        "model": "m",
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}
        ],
        "usage": {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6, **usage},
    }


def test_zero_usage_is_fine() -> None:
    body = _simple_with_usage(prompt_tokens=0, completion_tokens=0)
    assert _translate(body)["usage"]["input_tokens"] == 0


# -- the choice with index 0, whatever its position ---------------------------------------


def test_the_choice_with_index_0_is_used_whatever_its_position() -> None:
    body = completion({"role": "assistant", "content": "mine"})
    other = {
        "index": 1,
        "message": {"role": "assistant", "content": "other"},
        "finish_reason": "length",
    }
    body["choices"] = [other, *body["choices"]]
    warnings: list[str] = []
    result = response_to_messages(body, nonce=NONCE)
    data = response_bytes_to_messages(orjson.dumps(body), nonce=NONCE, warnings=warnings)
    assert orjson.loads(data) == result.body
    assert [b["text"] for b in result.body["content"]] == ["mine"]
    assert result.body["stop_reason"] == "end_turn"
    assert result.warnings == ("1 extra choice(s) dropped; only choice 0 is used",)
    assert warnings == list(result.warnings)


@pytest.mark.parametrize("index", [None, "missing"])
def test_a_choice_without_an_index_counts_as_index_0(index: str | None) -> None:
    body = completion({"role": "assistant", "content": "mine"})
    if index is None:
        body["choices"][0]["index"] = None
    else:
        del body["choices"][0]["index"]
    assert [b["text"] for b in _translate(body)["content"]] == ["mine"]


@pytest.mark.parametrize("index", [1, "0", True, -1])
def test_no_choice_with_index_0_is_a_protocol_error(index: Any) -> None:
    body = completion({"role": "assistant", "content": "x"})
    body["choices"][0]["index"] = index
    with pytest.raises(ProtocolError, match="no choice with index 0"):
        response_to_messages(body)
    with pytest.raises(ProtocolError, match="no choice with index 0"):
        response_bytes_to_messages(orjson.dumps(body))


@pytest.mark.parametrize(
    ("body_id", "want"),
    [
        ("chatcmpl-1", "msg_chatcmpl-1"),  # the provider's id, of the msg_ form
        ("msg_01abc", "msg_01abc"),  # already of the form: kept
        ("id with spaces", None),  # other characters: the stable hash
        (None, None),
    ],
)
def test_message_ids_are_of_the_msg_form(body_id: str | None, want: str | None) -> None:
    body = completion({"role": "assistant", "content": "hi"}, body_id=body_id)
    got = response_to_messages(body).body["id"]
    assert got == (want or stable_message_id(body))
    assert got.startswith("msg_")
    fast = orjson.loads(response_bytes_to_messages(orjson.dumps(body)))["id"]
    assert fast == got
