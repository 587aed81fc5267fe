"""Per profile: what the translated Claude Code turn looks like (token field, reasoning
control, schema sanitizing, system placement, user, files) -- each server's own rules."""

from __future__ import annotations

from typing import Any

import attrs
import orjson
import pytest

from tpx.errors import ConfigurationError
from tpx.transport.translate import (
    DEFAULT_PROFILE,
    PROFILES,
    Profile,
    get_profile,
    request_to_openai,
)
from tpx.transport.translate.profiles import EFFORT_LADDER, profile_from_env

from .clients import claude_code_requests

# The tour's last turn: opus, adaptive thinking + effort high, a mid-conversation system
# message, 24 tools with $schema / additionalProperties / format / propertyNames ...,
# a PNG inside a tool_result and a PDF document beside it.
TOUR = claude_code_requests()["claude-code/2.1.197/tour/005-post-v1-messages"]
HAIKU = claude_code_requests()[
    "claude-code/2.1.197/bash-claude-haiku-4-5-20251001/003-post-v1-messages"
]


def _schema_keys(value: Any, found: set[str]) -> set[str]:
    """Every JSON-Schema keyword used anywhere (property names excluded)."""
    if isinstance(value, dict):
        for key, item in value.items():
            if key == "properties" and isinstance(item, dict):
                for sub in item.values():
                    _schema_keys(sub, found)
                found.add(key)
                continue
            found.add(key)
            _schema_keys(item, found)
    elif isinstance(value, list):
        for item in value:
            _schema_keys(item, found)
    return found


def _translate(request: dict[str, Any], profile: str) -> dict[str, Any]:
    body: dict[str, Any] = request_to_openai(request, profile=profile).body
    return body


def test_the_tour_request_uses_what_the_profiles_must_handle() -> None:
    keys = _schema_keys([t["input_schema"] for t in TOUR["tools"]], set())
    assert {"$schema", "additionalProperties", "format", "propertyNames", "const"} <= keys
    assert TOUR["thinking"] == {"type": "adaptive"}
    assert TOUR["output_config"] == {"effort": "high"}
    assert HAIKU["thinking"] == {"type": "enabled", "budget_tokens": 31999}


EXPECTED_TOP: dict[str, dict[str, Any]] = {
    "openai": {"max_completion_tokens": 64000, "reasoning_effort": "high"},
    "vllm": {"max_tokens": 64000, "chat_template_kwargs": {"enable_thinking": True}},
    "sglang": {"max_tokens": 64000, "chat_template_kwargs": {"enable_thinking": True}},
    "llama.cpp": {"max_tokens": 64000, "chat_template_kwargs": {"enable_thinking": True}},
    "ollama": {"max_tokens": 64000, "reasoning_effort": "high"},
    "deepseek": {"max_tokens": 64000, "thinking": {"type": "enabled"}, "reasoning_effort": "high"},
    "gemini": {"max_tokens": 64000, "reasoning_effort": "high"},
    "openrouter": {"max_tokens": 64000, "reasoning": {"effort": "high"}},
    "generic": {"max_tokens": 64000},
}
_CONTROL_KEYS = (
    "max_tokens",
    "max_completion_tokens",
    "reasoning_effort",
    "reasoning",
    "thinking",
    "chat_template_kwargs",
)


def test_every_profile_is_tested() -> None:
    assert set(EXPECTED_TOP) == set(PROFILES)


@pytest.mark.parametrize("profile", sorted(EXPECTED_TOP))
def test_token_field_and_reasoning_control(profile: str) -> None:
    body = _translate(TOUR, profile)
    assert {k: body[k] for k in _CONTROL_KEYS if k in body} == EXPECTED_TOP[profile]


EXPECTED_HAIKU: dict[str, dict[str, Any]] = {  # budget 31,999 -> effort high
    "openai": {"reasoning_effort": "high"},
    "vllm": {"chat_template_kwargs": {"enable_thinking": True}},
    "deepseek": {"thinking": {"type": "enabled"}, "reasoning_effort": "high"},
    "openrouter": {"reasoning": {"effort": "high"}},
    "generic": {},
}


@pytest.mark.parametrize("profile", sorted(EXPECTED_HAIKU))
def test_thinking_budget_becomes_the_profile_effort(profile: str) -> None:
    body = _translate(HAIKU, profile)
    got = {k: body[k] for k in _CONTROL_KEYS if k in body and "tokens" not in k}
    assert got == EXPECTED_HAIKU[profile]


@pytest.mark.parametrize("profile", sorted(PROFILES))
def test_tool_schemas_are_sanitized_for_the_profile(profile: str) -> None:
    body = _translate(TOUR, profile)
    sent = [tool["function"]["parameters"] for tool in body["tools"]]
    keys = _schema_keys(sent, set())
    original = [tool["input_schema"] for tool in TOUR["tools"]]
    rules = PROFILES[profile]
    if rules.schema_keep is None and not rules.schema_drop:
        assert sent == original  # same schemas, untouched
    if rules.schema_keep is not None:
        assert keys <= rules.schema_keep
    assert not keys & rules.schema_drop
    assert [t["function"]["name"] for t in body["tools"]] == [t["name"] for t in TOUR["tools"]]


def test_gemini_schemas_keep_property_names_that_look_like_keywords() -> None:
    request = {
        "model": "m",
        "max_tokens": 5,
        "messages": [{"role": "user", "content": "x"}],
        "tools": [
            {
                "name": "f",
                "input_schema": {
                    "$schema": "https://json-schema.org/draft/2020-12/schema",
                    "type": "object",
                    "properties": {
                        "format": {"type": "string", "format": "uri"},
                        "mode": {"anyOf": [{"const": "a"}, {"const": "b"}]},
                    },
                    "additionalProperties": False,
                },
            }
        ],
    }
    parameters = _translate(request, "gemini")["tools"][0]["function"]["parameters"]
    assert parameters == {
        "type": "object",
        "properties": {
            "format": {"type": "string"},
            "mode": {"anyOf": [{"enum": ["a"]}, {"enum": ["b"]}]},
        },
    }


@pytest.mark.parametrize(
    ("profile", "where"),
    [
        ("openai", "anywhere"),
        ("gemini", "first"),
        ("deepseek", "first"),
        ("vllm", "user"),
        ("ollama", "user"),
        ("generic", "user"),
    ],
)
def test_mid_conversation_system_message_placement(profile: str, where: str) -> None:
    mid = next(m["content"] for m in TOUR["messages"] if m["role"] == "system")
    messages = _translate(TOUR, profile)["messages"]
    roles = [m["role"] for m in messages]
    assert PROFILES[profile].system == where
    if where == "anywhere":
        assert messages[2] == {"role": "system", "content": mid}
        assert roles[:3] == ["system", "user", "system"]
    elif where == "first":
        assert roles.count("system") == 1
        assert messages[0]["content"][-1] == {"type": "text", "text": mid}
    else:
        assert roles.count("system") == 1
        assert roles[:3] == ["system", "user", "assistant"]  # one user turn, merged
        assert messages[1]["content"][-1] == {
            "type": "text",
            "text": f"<system-message>{mid}</system-message>",
        }


@pytest.mark.parametrize("profile", sorted(PROFILES))
def test_pdf_is_a_file_part_or_its_text(profile: str) -> None:
    body = _translate(TOUR, profile)
    last_user = [m for m in body["messages"] if m["role"] == "user"][-1]
    kinds = [part["type"] for part in last_user["content"]]
    if PROFILES[profile].file_parts:
        assert kinds == ["image_url", "file"]
        assert last_user["content"][1]["file"]["file_data"].startswith(
            "data:application/pdf;base64,JVBER"
        )
    else:
        assert kinds == ["image_url", "text"]
        assert "tpx fixture" in last_user["content"][1]["text"]


@pytest.mark.parametrize("profile", sorted(PROFILES))
def test_user_id_is_hashed_to_fit(profile: str) -> None:
    body = _translate(TOUR, profile)
    user_id = TOUR["metadata"]["user_id"]
    assert len(user_id) > 64
    if PROFILES[profile].user_field:
        assert body["user"].startswith("tpx-")
        assert len(body["user"]) == PROFILES[profile].user_max
        assert _translate(TOUR, profile)["user"] == body["user"]  # stable
    else:
        assert "user" not in body


def test_short_user_id_goes_as_is() -> None:
    request = {**TOUR, "metadata": {"user_id": "u-1"}}
    assert _translate(request, "openai")["user"] == "u-1"


def test_no_cache_control_and_no_anthropic_only_field_reaches_any_upstream() -> None:
    for profile in PROFILES:
        dumped = orjson.dumps(_translate(TOUR, profile))
        for word in (b"cache_control", b"context_management", b"output_config", b"signature"):
            assert word not in dumped, (profile, word)


def test_get_profile() -> None:
    assert get_profile(None) is DEFAULT_PROFILE
    assert DEFAULT_PROFILE.name == "generic"
    assert get_profile(" OpenAI ") is PROFILES["openai"]
    custom = attrs.evolve(PROFILES["vllm"], name="mine")
    assert get_profile(custom) is custom
    with pytest.raises(ConfigurationError, match="unknown upstream profile 'nope'"):
        get_profile("nope")
    with pytest.raises(ConfigurationError):
        get_profile(3)  # type: ignore[arg-type]


def test_profile_from_env() -> None:
    assert profile_from_env(None, {}) is DEFAULT_PROFILE
    assert profile_from_env(None, {"TPX_PROFILE": "deepseek"}) is PROFILES["deepseek"]
    assert profile_from_env("vllm", {"TPX_PROFILE": "deepseek"}) is PROFILES["vllm"]
    assert profile_from_env(None, {"TPX_PROFILE": " "}) is DEFAULT_PROFILE
    with pytest.raises(ConfigurationError):
        profile_from_env(None, {"TPX_PROFILE": "bogus"})


@pytest.mark.parametrize(
    ("efforts", "wanted", "got"),
    [
        (("low", "high", "max"), "medium", "low"),
        (("low", "high", "max"), "xhigh", "high"),
        (("low", "high", "max"), "max", "max"),
        (("low", "medium", "high"), "max", "high"),
        (("low", "medium", "high"), "minimal", "low"),
        ((), "high", None),
    ],
)
def test_effort_maps_to_the_highest_level_not_above(
    efforts: tuple[str, ...], wanted: str, got: str | None
) -> None:
    assert set(efforts) <= set(EFFORT_LADDER)
    assert Profile("p", efforts=efforts).effort(wanted) == got


def test_a_max_tokens_ceiling_clamps_with_a_warning() -> None:
    profile = attrs.evolve(PROFILES["deepseek"], name="capped", max_tokens_ceiling=8192)
    translation = request_to_openai(TOUR, profile=profile)
    assert translation.body["max_tokens"] == 8192
    assert any("clamped to 8192" in w for w in translation.warnings)
    assert _translate(TOUR, "deepseek")["max_tokens"] == 64000  # never clamped by default
