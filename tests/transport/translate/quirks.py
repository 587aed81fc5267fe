"""Chat Completions bodies as real OpenAI-compatible servers send them (provider quirks)."""

from __future__ import annotations

from typing import Any

__all__ = ["QUIRKS", "completion"]


def completion(
    message: dict[str, Any],
    finish_reason: str | None = "stop",
    *,
    body_id: str | None = "chatcmpl-1",
    usage: dict[str, Any] | None = None,
    **choice_extra: Any,
) -> dict[str, Any]:
    """A chat completion around *message*."""
    body: dict[str, Any] = {
        "object": "chat.completion",
        "created": 1_700_000_000,
        "model": "tpx-large",
        "choices": [
            {"index": 0, "message": message, "finish_reason": finish_reason, **choice_extra}
        ],
        "usage": usage or {"prompt_tokens": 12, "completion_tokens": 4, "total_tokens": 16},
    }
    if body_id is not None:
        body["id"] = body_id
    return body


def _call(call_id: str | None, name: str, arguments: Any, **extra: Any) -> dict[str, Any]:
    call: dict[str, Any] = {"type": "function", "function": {"name": name, "arguments": arguments}}
    if call_id is not None:
        call["id"] = call_id
    call.update(extra)
    return call


QUIRKS: dict[str, dict[str, Any]] = {
    # Gemini: empty tool-call ids, finish_reason "stop" on a tool call, no top-level id.
    "gemini_empty_ids": completion(
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                _call("", "get_weather", '{"city": "Paris"}'),
                _call("", "get_weather", '{"city": "Rome"}'),
            ],
        },
        "stop",
        body_id=None,
    ),
    # Some servers: no id at all.
    "missing_ids": completion(
        {
            "role": "assistant",
            "tool_calls": [_call(None, "lookup", '{"q": 1}'), _call(None, "lookup", '{"q": 2}')],
        },
        "tool_calls",
    ),
    # Ollama: parallel calls all at index 0; here also sharing one id.
    "ollama_shared_id": completion(
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                _call("call_same", "read", '{"path": "a"}', index=0),
                _call("call_same", "read", '{"path": "b"}', index=0),
                _call("call_same", "read", '{"path": "c"}', index=0),
            ],
        },
        "tool_calls",
    ),
    # llama.cpp: arguments already an object.
    "llamacpp_object_arguments": completion(
        {
            "role": "assistant",
            "tool_calls": [_call("call_1", "add", {"a": 1, "b": [2, 3]})],
        },
        "tool_calls",
    ),
    # A no-parameter tool called with arguments "".
    "empty_arguments": completion(
        {"role": "assistant", "tool_calls": [_call("call_now", "now", "")]}, "tool_calls"
    ),
    # Mistral: exactly 9 alphanumerics.
    "mistral_ids": completion(
        {
            "role": "assistant",
            "tool_calls": [_call("aB3dE6gH9", "f", "{}"), _call("Zz0Yy1Xx2", "g", '{"x":1}')],
        },
        "tool_calls",
    ),
    # DeepSeek thinking mode.
    "deepseek_reasoning": completion(
        {
            "role": "assistant",
            "content": "It is 4.",
            "reasoning_content": "2 + 2 = 4, the user wants a number.",
        },
        "stop",
    ),
    # vLLM: the matched stop string in choices[].stop_reason.
    "vllm_stop_reason": completion(
        {"role": "assistant", "content": "one two"}, "stop", stop_reason="THREE"
    ),
    # SGLang: the matched stop string in choices[].matched_stop.
    "sglang_matched_stop": completion(
        {"role": "assistant", "content": "one two"}, "stop", matched_stop="THREE"
    ),
    # vLLM stopped on a stop token id (an int): a natural end, not a stop sequence.
    "vllm_stop_token": completion(
        {"role": "assistant", "content": "done"}, "stop", stop_reason=128_001
    ),
    # OpenAI with prompt caching.
    "cached_usage": completion(
        {"role": "assistant", "content": "ok"},
        "length",
        usage={
            "prompt_tokens": 2000,
            "completion_tokens": 50,
            "total_tokens": 2050,
            "prompt_tokens_details": {"cached_tokens": 1536},
        },
    ),
    "refusal": completion(
        {"role": "assistant", "content": None, "refusal": "I can't help with that."}, "stop"
    ),
    "content_filter": completion({"role": "assistant", "content": "partial"}, "content_filter"),
}

OPENAI_ERROR = {
    "error": {
        "message": "Rate limit reached for requests",
        "type": "requests",
        "param": None,
        "code": "rate_limit_exceeded",
    }
}
ANTHROPIC_ERROR = {
    "type": "error",
    "error": {"type": "overloaded_error", "message": "Overloaded"},
}
VLLM_ERROR = {
    "object": "error",
    "message": "This model's maximum context length is 4096 tokens.",
    "type": "BadRequestError",
    "param": None,
    "code": 400,
}
