"""A Claude Code-shaped conversation (as recorded in real-clients.md) through the TPX gateway."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from tpx.gateway.compat import relax_for_chat_completions
from tpx.gateway.core import Gateway, Request, Response, Turn
from tpx.gateway.upstream import SyncUpstream, run_turn_sync
from tpx.translate.stream import MessageAccumulator, SSEParser

from .conftest import make_settings
from .fakes import FakeUpstream

HEADERS = {"anthropic-beta": "claude-code-20250219,context-1m-2025-08-07", "x-app": "cli"}
TOOL = {
    "name": "Bash",
    "description": "run a command",
    "input_schema": {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "additionalProperties": False,
        "properties": {"command": {"type": "string", "maxLength": 1000}},
        "required": ["command"],
    },
}


def claude_code_body(messages: list[Any]) -> dict[str, Any]:
    return {
        "model": "claude-sonnet-5",
        "messages": messages,
        "system": [
            {"type": "text", "text": "x-billing-header"},
            {
                "type": "text",
                "text": "You are Claude Code.",
                "cache_control": {"type": "ephemeral"},
            },
        ],
        "tools": [TOOL],
        "metadata": {"user_id": "u-1"},
        "max_tokens": 64000,
        "thinking": {"type": "adaptive"},
        "context_management": {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]},
        "output_config": {"effort": "high"},
        "stream": True,
    }


def _run(gateway: Gateway, upstream: SyncUpstream, body: dict[str, Any]) -> dict[str, Any]:
    result = gateway.handle(
        Request("POST", "/v1/messages", "beta=true", HEADERS, orjson.dumps(body))
    )
    assert isinstance(result, Turn), result
    data = b"".join(i for i in run_turn_sync(result, upstream) if isinstance(i, bytes))
    result.close()
    message = MessageAccumulator()
    for event in SSEParser().feed(data):
        message.add(orjson.loads(event.data))
    return message.message()


def test_a_claude_code_tool_loop_through_tpx() -> None:
    settings = make_settings("TPX")
    fake = FakeUpstream("TPX", calls=1)
    gateway, upstream = Gateway(settings), SyncUpstream(settings, transport=fake.transport())
    context = {"role": "system", "content": "<system-reminder>context</system-reminder>"}
    history: list[Any] = [
        {"role": "user", "content": [{"type": "text", "text": "cc-session"}]},
        context,
        {"role": "user", "content": [{"type": "text", "text": "run ls"}]},
    ]
    first = _run(gateway, upstream, claude_code_body(history))
    assert first["stop_reason"] == "tool_use"
    (tool,) = [b for b in first["content"] if b["type"] == "tool_use"]
    history += [
        {"role": "assistant", "content": first["content"]},
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": tool["id"],
                    "content": "file.txt",
                    "is_error": False,
                    "cache_control": {"type": "ephemeral"},
                }
            ],
        },
    ]
    final = _run(gateway, upstream, claude_code_body(history))
    assert final["stop_reason"] == "end_turn"
    sent = fake.seen[-1]
    assert sent["messages"][0]["role"] == "system"
    assert "<system-reminder>" in orjson.dumps(sent["messages"][0]).decode()
    assert [m["role"] for m in sent["messages"]].count("system") == 1
    assert sent["messages"][-1]["role"] == "tool"


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("context_management", {"edits": [{"type": "clear_tool_uses_20250919"}]}),
        (
            "context_management",
            {"edits": [{"type": "clear_thinking_20251015", "keep": {"type": "thinking_turns"}}]},
        ),
        ("output_config", {"format": {"type": "json_schema", "schema": {}}}),
    ],
)
def test_fields_that_change_the_exchange_are_still_refused(field: str, value: Any) -> None:
    settings = make_settings("TPX")
    fake = FakeUpstream("TPX")
    body = claude_code_body([{"role": "user", "content": "hi"}])
    body[field] = value
    result = Gateway(settings).handle(Request("POST", "/v1/messages", "", {}, orjson.dumps(body)))
    assert isinstance(result, Response)
    assert result.status == 400
    assert field in orjson.loads(result.body)["error"]["message"]
    assert fake.seen == []


def test_relaxing_reports_what_it_removed() -> None:
    body = claude_code_body([{"role": "user", "content": "a"}, {"role": "system", "content": "b"}])
    body["output_config"] = {"effort": "high", "format": {"type": "json_schema"}}
    removed = relax_for_chat_completions(body)
    assert removed == ["context_management", "output_config.effort", "messages.1(system)"]
    assert body["output_config"] == {"format": {"type": "json_schema"}}
    assert body["system"][-1] == {"type": "text", "text": "b"}
    assert [m["role"] for m in body["messages"]] == ["user"]
