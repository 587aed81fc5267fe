"""tpx.transport.shape: what the runtime check accepts, the official SDK's types accept too."""

from __future__ import annotations

from typing import Any

import orjson
import pydantic
import pytest
from anthropic.types import Message, RawMessageStreamEvent
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.fuzz import strategies as fz
from tpx import _safe
from tpx.errors import ProtocolError
from tpx.transport import shape
from tpx.transport.shape import check_event, check_message

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


@settings(max_examples=500, deadline=None)
@given(st.text(alphabet=st.sampled_from("aZ09_-\n é٣ｱ.$"), max_size=8) | st.text(max_size=8))
def test_the_cheap_tool_id_test_is_the_regular_expression(text: str) -> None:
    assert shape._is_tool_id(text) is (shape.valid_tool_id(text) is not None)


_GOOD_IDS = ["toolu_01A09q90qw90lq917835lq9", "tpxr0-3eb9d25725ad_call_x", "0abc", "-", "_"]
_BAD_IDS = ["a\n", "a b", "é", "", "a.b", "٣", 5, None]
_BLOCKS = st.sampled_from(
    [
        {"type": "text", "text": "x"},
        {"type": "text", "text": 1},
        {"type": "text", "text": "x", "extra": 1},
        {"type": "text"},
        {"type": "thinking", "thinking": "t", "signature": "s"},
        {"type": "image", "source": {}},
        {"type": None, "text": "x"},
        "text",
        *(
            {"type": "tool_use", "id": tool_id, "name": "f", "input": {}}
            for tool_id in _GOOD_IDS + _BAD_IDS
        ),
        {"type": "tool_use", "id": "a", "name": 1, "input": {}},
        {"type": "tool_use", "id": "a", "name": "f", "input": []},
        {"type": "tool_use", "id": "a", "name": "f"},
        {"type": "tool_use", "id": "a", "name": "f", "input": {}, "caller": {"type": "direct"}},
    ]
)
_USAGES = st.sampled_from(
    [
        {"input_tokens": 1, "output_tokens": 2},
        {"input_tokens": 1, "output_tokens": 2, "cache_read_input_tokens": 0,
         "cache_creation_input_tokens": 3},
        {"input_tokens": 1, "output_tokens": 2, "cache_read_input_tokens": None,
         "cache_creation_input_tokens": 3},
        {"input_tokens": 1, "output_tokens": 2, "cache_read_input_tokens": 1.0,
         "cache_creation_input_tokens": 3},
        {"input_tokens": 1, "output_tokens": 2, "service_tier": "standard", "speed": "fast"},
        {"input_tokens": 1, "output_tokens": 2, "cache_read_input_tokens": 0, "x": 1},
        {"input_tokens": True, "output_tokens": 2},
        {"output_tokens": 2, "x": 1},
        [],
    ]
)  # fmt: skip


@settings(max_examples=1500, deadline=None)
@given(
    content=st.lists(_BLOCKS, max_size=4),
    usage=_USAGES,
    stop=st.sampled_from(["end_turn", "tool_use", None, "weird", 1]),
    sequence=st.sampled_from([None, "x", 2]),
    top=st.sampled_from(
        [{}, {"id": None}, {"model": 3}, {"type": "msg"}, {"role": "user"}, {"x": 1}]
    ),
    drop=st.sampled_from([None, "id", "usage", "content"]),
)
def test_the_fast_path_gives_the_full_checks_verdict(
    content: list[Any],
    usage: Any,
    stop: Any,
    sequence: Any,
    top: dict[str, Any],
    drop: str | None,
) -> None:
    """Eight-field bodies (the fast path's) and their near misses: check_message accepts
    exactly what the full check accepts, with the same ids."""
    body = {**BASE, "content": content, "usage": usage, "stop_reason": stop}
    body["stop_sequence"] = sequence
    body.update(top)
    if drop is not None:
        del body[drop]
    outcomes: list[Any] = []
    for check in (check_message, shape._check_message):
        try:
            outcomes.append(check(body))
        except ProtocolError:
            outcomes.append("refused")
    assert outcomes[0] == outcomes[1], body
    if outcomes[0] != "refused":
        assert _sdk_accepts(body), body
