"""The decisions for what real clients send: thinking / effort, structured output,
context management, mid-conversation system messages, unknown fields."""

from __future__ import annotations

from typing import Any

import pytest

from tpx.errors import ProtocolError, UnsupportedError
from tpx.transport.translate import PROFILES, request_to_openai
from tpx.transport.translate.options import BUDGET_LOW, BUDGET_MEDIUM, budget_effort
from tpx.transport.translate.signing import ThinkingSigner

from .sdk import validate_openai_request


def _request(**extra: Any) -> dict[str, Any]:
    return {
        "model": "m",
        "max_tokens": 100,
        "messages": [{"role": "user", "content": "hi"}],
        **extra,
    }


@pytest.mark.parametrize(
    ("budget", "effort"),
    [
        (1024, "low"),
        (BUDGET_LOW - 1, "low"),
        (BUDGET_LOW, "medium"),
        (BUDGET_MEDIUM - 1, "medium"),
        (BUDGET_MEDIUM, "high"),
        (31999, "high"),
    ],
)
def test_budget_thresholds(budget: int, effort: str) -> None:
    assert budget_effort(budget) == effort
    body = request_to_openai(
        _request(thinking={"type": "enabled", "budget_tokens": budget}), profile="openai"
    ).body
    assert body["reasoning_effort"] == effort


def test_output_config_effort_wins_over_the_budget() -> None:
    request = _request(
        thinking={"type": "enabled", "budget_tokens": 2000}, output_config={"effort": "high"}
    )
    assert request_to_openai(request, profile="openai").body["reasoning_effort"] == "high"


def test_adaptive_without_effort_enables_at_the_server_default() -> None:
    request = _request(thinking={"type": "adaptive"})
    assert "reasoning_effort" not in request_to_openai(request, profile="openai").body
    assert request_to_openai(request, profile="openrouter").body["reasoning"] == {"enabled": True}
    assert request_to_openai(request, profile="deepseek").body["thinking"] == {"type": "enabled"}
    kwargs = request_to_openai(request, profile="sglang").body["chat_template_kwargs"]
    assert kwargs == {"enable_thinking": True}


DISABLED: dict[str, dict[str, Any]] = {
    "openai": {},
    "gemini": {"reasoning_effort": "none"},
    "ollama": {"reasoning_effort": "none"},
    "openrouter": {"reasoning": {"effort": "none"}},
    "deepseek": {"thinking": {"type": "disabled"}},
    "vllm": {"chat_template_kwargs": {"enable_thinking": False}},
    "llama.cpp": {"chat_template_kwargs": {"enable_thinking": False}},
    "generic": {},
}


@pytest.mark.parametrize("profile", sorted(DISABLED))
def test_thinking_disabled(profile: str) -> None:
    translation = request_to_openai(_request(thinking={"type": "disabled"}), profile=profile)
    body = translation.body
    keys = ("reasoning_effort", "reasoning", "thinking", "chat_template_kwargs")
    assert {k: body[k] for k in keys if k in body} == DISABLED[profile]
    if not DISABLED[profile]:
        assert translation.warnings  # what a profile cannot say is said as a warning
    validate_openai_request(body)


def test_no_thinking_asked_sends_no_control() -> None:
    for profile in PROFILES:
        body = request_to_openai(_request(), profile=profile).body
        assert not {"reasoning_effort", "reasoning", "thinking", "chat_template_kwargs"} & set(body)


def test_effort_on_a_switch_only_profile_is_a_warning() -> None:
    translation = request_to_openai(_request(output_config={"effort": "low"}), profile="vllm")
    assert translation.body["chat_template_kwargs"] == {"enable_thinking": True}
    assert any("effort 'low' dropped" in w for w in translation.warnings)


@pytest.mark.parametrize(
    "thinking",
    [{"type": "sometimes"}, {"type": "enabled"}, {"type": "enabled", "budget_tokens": 0}, "on"],
)
def test_malformed_thinking_is_a_400(thinking: Any) -> None:
    with pytest.raises(ProtocolError) as info:
        request_to_openai(_request(thinking=thinking))
    assert info.value.status == 400


SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string", "format": "hostname"}},
    "required": ["city"],
    "additionalProperties": False,
}


@pytest.mark.parametrize("key", ["output_config", "output_format"])
def test_structured_output_is_a_json_schema_response_format(key: str) -> None:
    fmt = {"type": "json_schema", "schema": SCHEMA}
    request = _request(**({key: {"format": fmt}} if key == "output_config" else {key: fmt}))
    body = request_to_openai(request, profile="openai").body
    assert body["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "output", "schema": SCHEMA},
    }
    validate_openai_request(body)
    gemini = request_to_openai(request, profile="gemini").body["response_format"]
    assert gemini["json_schema"]["schema"] == {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    }


def test_json_object_profiles_get_the_schema_in_the_system_message() -> None:
    request = _request(
        system="Be brief.", output_config={"format": {"type": "json_schema", "schema": SCHEMA}}
    )
    translation = request_to_openai(request, profile="deepseek")
    body = translation.body
    assert body["response_format"] == {"type": "json_object"}
    system = body["messages"][0]
    assert system["role"] == "system"
    assert system["content"][0] == {"type": "text", "text": "Be brief."}
    assert '"additionalProperties":false' in system["content"][1]["text"]
    assert "JSON" in system["content"][1]["text"]  # DeepSeek wants the word json in the prompt
    assert any("json_object" in w for w in translation.warnings)
    validate_openai_request(body)


@pytest.mark.parametrize(
    ("extra", "error"),
    [
        ({"output_config": {"verbosity": "low"}}, UnsupportedError),
        ({"output_config": {"format": {"type": "regex"}}}, UnsupportedError),
        ({"output_config": {"effort": "extreme"}}, ProtocolError),
        ({"output_config": "high"}, ProtocolError),
        ({"context_management": {"edits": [{"type": "compact_2026"}]}}, UnsupportedError),
        ({"context_management": {"edits": [], "mode": "x"}}, UnsupportedError),
        (
            {"context_management": {"edits": [{"type": "clear_thinking_20251015", "keep": 2}]}},
            ProtocolError,
        ),
        ({"brand_new_field": 1}, UnsupportedError),
    ],
)
def test_unknown_or_malformed_options_are_refused(extra: dict[str, Any], error: type) -> None:
    with pytest.raises(error):
        request_to_openai(_request(**extra))


SIGNER = ThinkingSigner("options-test")


def _thinking_turn(text: str, call: str) -> list[dict[str, Any]]:
    return [
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": text, "signature": SIGNER.sign(text)},
                {"type": "tool_use", "id": call, "name": "f", "input": {}},
            ],
        },
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": call, "content": "ok"}],
        },
    ]


def _history(edit: dict[str, Any] | None) -> dict[str, Any]:
    messages: list[dict[str, Any]] = [{"role": "user", "content": "go"}]
    for n in range(3):
        messages += _thinking_turn(f"thought {n}", f"toolu_{n}")
    request = _request(messages=messages, tools=[{"name": "f", "input_schema": {"type": "object"}}])
    if edit is not None:
        request["context_management"] = {"edits": [edit]}
    return request


def _reasoning_sent(request: dict[str, Any]) -> list[str | None]:
    body = request_to_openai(request, profile="deepseek", secret=SIGNER).body
    return [m.get("reasoning_content") for m in body["messages"] if m["role"] == "assistant"]


@pytest.mark.parametrize(
    ("edit", "sent"),
    [
        (None, ["thought 0", "thought 1", "thought 2"]),
        (
            {"type": "clear_thinking_20251015", "keep": "all"},
            ["thought 0", "thought 1", "thought 2"],
        ),
        ({"type": "clear_thinking_20251015"}, [None, None, "thought 2"]),
        (
            {"type": "clear_thinking_20251015", "keep": {"type": "thinking_turns", "value": 2}},
            [None, "thought 1", "thought 2"],
        ),
        (
            {"type": "clear_thinking_20251015", "keep": {"type": "thinking_turns", "value": 0}},
            [None, None, None],
        ),
    ],
)
def test_clear_thinking_is_applied_by_tpx(
    edit: dict[str, Any] | None, sent: list[str | None]
) -> None:
    assert _reasoning_sent(_history(edit)) == sent


def test_clear_tool_uses_is_a_warning_not_applied() -> None:
    request = _history({"type": "clear_tool_uses_20250919"})
    translation = request_to_openai(request, profile="deepseek", secret=SIGNER)
    assert sum(m["role"] == "tool" for m in translation.body["messages"]) == 3
    assert any("clear_tool_uses not applied" in w for w in translation.warnings)


def test_system_message_between_tool_use_and_result_is_a_400() -> None:
    messages = [
        {"role": "user", "content": "go"},
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "toolu_1", "name": "f", "input": {}}],
        },
        {"role": "system", "content": "note"},
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "x"}],
        },
    ]
    with pytest.raises(ProtocolError, match="system message between"):
        request_to_openai(_request(messages=messages))


def test_system_message_as_text_blocks_and_without_a_top_system() -> None:
    messages = [
        {"role": "user", "content": "a"},
        {
            "role": "system",
            "content": [{"type": "text", "text": "s1"}, {"type": "text", "text": "s2"}],
        },
    ]
    first = request_to_openai(_request(messages=messages), profile="gemini").body["messages"]
    assert first == [{"role": "system", "content": "s1\n\ns2"}, {"role": "user", "content": "a"}]
    user = request_to_openai(_request(messages=messages), profile="generic").body["messages"]
    assert user == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "a"},
                {"type": "text", "text": "<system-message>s1\n\ns2</system-message>"},
            ],
        }
    ]


def test_a_conversation_of_system_messages_only_is_a_400() -> None:
    with pytest.raises(ProtocolError, match="no message left"):
        request_to_openai(_request(messages=[{"role": "system", "content": "s"}]), profile="openai")


def test_empty_tools_list_sends_no_tools() -> None:
    body = request_to_openai(_request(tools=[]), profile="openai").body
    assert "tools" not in body
    validate_openai_request(body)


def test_redacted_thinking_is_dropped_with_a_warning() -> None:
    messages = [
        {"role": "user", "content": "a"},
        {
            "role": "assistant",
            "content": [
                {"type": "redacted_thinking", "data": "xyz"},
                {"type": "text", "text": "b"},
            ],
        },
        {"role": "user", "content": "c"},
    ]
    translation = request_to_openai(_request(messages=messages), profile="deepseek")
    assert translation.body["messages"][1] == {"role": "assistant", "content": "b"}
    assert any("redacted_thinking" in w for w in translation.warnings)


@pytest.mark.parametrize(
    ("profile", "control"),
    [
        ("openai", {"reasoning_effort": "high"}),
        ("deepseek", {"thinking": {"type": "enabled"}, "reasoning_effort": "max"}),
        ("openrouter", {"reasoning": {"effort": "xhigh"}}),
        ("gemini", {"reasoning_effort": "high"}),
    ],
)
def test_max_effort_maps_to_the_most_the_profile_names(
    profile: str, control: dict[str, Any]
) -> None:
    body = request_to_openai(_request(output_config={"effort": "max"}), profile=profile).body
    keys = ("reasoning_effort", "reasoning", "thinking")
    assert {k: body[k] for k in keys if k in body} == control
    validate_openai_request(body)
