"""tpx.shape: what the runtime check accepts, the official SDK's types accept too."""

from __future__ import annotations

from typing import Any

import orjson
import pydantic
import pytest
from anthropic.types import Message, RawMessageStreamEvent
from hypothesis import HealthCheck, given, settings

from tests.fuzz import strategies as fz
from tpx import _safe
from tpx.errors import ProtocolError
from tpx.shape import check_event, check_message

_EVENT: pydantic.TypeAdapter[Any] = pydantic.TypeAdapter(RawMessageStreamEvent)
SETTINGS = settings(
    max_examples=300, derandomize=True, deadline=None, suppress_health_check=list(HealthCheck)
)

BASE: dict[str, Any] = {
    "id": "msg_1",
    "type": "message",
    "role": "assistant",
    "model": "m",
    "content": [{"type": "text", "text": "x"}],
    "stop_reason": "end_turn",
    "stop_sequence": None,
    "usage": {"input_tokens": 1, "output_tokens": 1},
}


def _sdk_accepts(body: Any) -> bool:
    try:
        Message.model_validate_json(orjson.dumps(body), strict=True)
    except pydantic.ValidationError:
        return False
    return True


@SETTINGS
@given(fz.anthropic_body())
def test_accepted_bodies_validate_in_the_sdk(data: bytes) -> None:
    try:
        body = _safe.loads(data)  # the depth rule applies where bodies enter
    except ValueError:
        return
    try:
        check_message(body)
    except ProtocolError:
        return
    assert _sdk_accepts(body), body


@SETTINGS
@given(fz.anthropic_stream())
def test_accepted_events_validate_in_the_sdk(data: bytes) -> None:
    for block in data.split(b"\n\n"):
        line = next((x for x in block.split(b"\n") if x.startswith(b"data: ")), None)
        if line is None:
            continue
        try:
            event = _safe.loads(line[6:])
        except ValueError:
            continue
        try:
            known = check_event(event)
        except ProtocolError:
            continue
        if known and event["type"] != "ping":
            _EVENT.validate_json(orjson.dumps(event), strict=True)


@pytest.mark.parametrize(
    "change",
    [
        {"container": {"id": "c", "expires_at": "2025-01-01T00:00:00+00:00"}},
        {"stop_details": {"type": "refusal", "category": None}},
        {"future_field": {"anything": [1, 2]}},
        {"content": [{"type": "text", "text": "x", "citations": None, "extra": 1}]},
        {"content": [{"type": "redacted_thinking", "data": "d"}]},
        {
            "content": [
                {"type": "server_tool_use", "id": "srv_1", "name": "web_search", "input": {}}
            ]
        },
        {"usage": {"input_tokens": 1, "output_tokens": 1, "service_tier": "standard"}},
        {"stop_reason": None},
    ],
)
def test_valid_shapes_pass(change: dict[str, Any]) -> None:
    body = {**BASE, **change}
    assert _sdk_accepts(body)
    check_message(body)


@pytest.mark.parametrize(
    "change",
    [
        {"stop_reason": "weird"},
        {"stop_reason": ["end_turn"]},
        {"id": None},
        {"model": 1},
        {"stop_sequence": 1},
        {"usage": {"input_tokens": 1.0, "output_tokens": 1}},
        {"usage": {"input_tokens": True, "output_tokens": 1}},
        {"usage": {"output_tokens": 1}},
        {"usage": {"input_tokens": 1, "output_tokens": 1, "service_tier": "gold"}},
        {"container": {"id": "c", "expires_at": "never"}},
        {"container": 5},
        {"diagnostics": {"cache_miss_reason": None}},
        {"content": [{"type": "web_fetch_tool_result", "tool_use_id": "x", "content": {}}]},
        {"content": [{"type": ["text"], "text": "x"}]},
        {"content": [{"type": "text", "text": "x", "citations": [{"type": "nope"}]}]},
        {"content": [{"type": "tool_use", "id": "a\n", "name": "f", "input": {}}]},
        {"content": [{"type": "tool_use", "id": "a", "name": "f", "input": []}]},
        {
            "content": [
                {"type": "tool_use", "id": "a", "name": "f", "input": {}},
                {"type": "tool_use", "id": "a", "name": "g", "input": {}},
            ]
        },
    ],
)
def test_invalid_shapes_are_refused(change: dict[str, Any]) -> None:
    with pytest.raises(ProtocolError):
        check_message({**BASE, **change})


@pytest.mark.parametrize(
    ("event", "known"),
    [
        ({"type": "ping"}, True),
        ({"type": "message_stop"}, True),
        ({"type": "some_future_event", "x": 1}, False),
        ({"type": "content_block_stop", "index": 0}, True),
    ],
)
def test_event_rule(event: dict[str, Any], known: bool) -> None:
    assert check_event(event) is known


@pytest.mark.parametrize(
    "event",
    [
        {"type": ""},
        {"type": "a\nb"},
        {"type": {"a": 1}},
        {"type": "content_block_stop", "index": "0"},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta"}},
        {"type": "message_delta", "delta": {"stop_reason": "x"}, "usage": {"output_tokens": 1}},
        {"type": "message_delta", "delta": {}},
    ],
)
def test_malformed_events_are_refused(event: dict[str, Any]) -> None:
    with pytest.raises(ProtocolError):
        check_event(event)
