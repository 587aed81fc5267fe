"""The Messages API's rules (tpx.audit.checks) on hand-made bodies and streams: each rule
passes a correct one and names the check for a broken one."""

from __future__ import annotations

from typing import Any

import orjson

from tpx.audit import checks


def _message(**changes: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "id": "msg_01abc",
        "type": "message",
        "role": "assistant",
        "model": "m",
        "content": [
            {"type": "text", "text": "hi"},
            {"type": "tool_use", "id": "toolu_1", "name": "ls", "input": {"a": 1}},
        ],
        "stop_reason": "tool_use",
        "stop_sequence": None,
        "usage": {"input_tokens": 10, "output_tokens": 5},
    }
    body.update(changes)
    return body


def _event(data: dict[str, Any]) -> bytes:
    return f"event: {data['type']}\ndata: ".encode() + orjson.dumps(data) + b"\n\n"


def _stream(*, drop: int | None = None, index_of_tool: int = 1, start_id: str = "msg_1") -> bytes:
    events: list[dict[str, Any]] = [
        {
            "type": "message_start",
            "message": {**_message(id=start_id), "content": [], "stop_reason": None},
        },
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "hi"}},
        {"type": "content_block_stop", "index": 0},
        {
            "type": "content_block_start",
            "index": index_of_tool,
            "content_block": {"type": "tool_use", "id": "toolu_1", "name": "ls", "input": {}},
        },
        {
            "type": "content_block_delta",
            "index": index_of_tool,
            "delta": {"type": "input_json_delta", "partial_json": '{"a":'},
        },
        {
            "type": "content_block_delta",
            "index": index_of_tool,
            "delta": {"type": "input_json_delta", "partial_json": " 1}"},
        },
        {"type": "content_block_stop", "index": index_of_tool},
        {
            "type": "message_delta",
            "delta": {"stop_reason": "tool_use", "stop_sequence": None},
            "usage": {"output_tokens": 5},
        },
        {"type": "message_stop"},
    ]
    if drop is not None:
        del events[drop]
    return b'event: ping\ndata: {"type": "ping"}\n\n' + b"".join(_event(e) for e in events)


def _checks(problems: list[checks.Problem]) -> set[str]:
    return {c for c, _ in problems}


def test_a_correct_message_passes() -> None:
    assert checks.message_problems(_message()) == []


def test_a_message_id_not_of_the_msg_form_fails_message_id() -> None:
    assert _checks(checks.message_problems(_message(id="chatcmpl-1"))) == {"MessageId"}


def test_usage_not_a_count_fails_usage() -> None:
    body = _message(usage={"input_tokens": -1, "output_tokens": 5})
    assert _checks(checks.message_problems(body)) == {"Usage"}


def test_a_block_of_no_known_type_fails_shape() -> None:
    body = _message(content=[{"type": "picture"}], stop_reason="end_turn")
    assert _checks(checks.message_problems(body)) == {"ShapeInv"}


def test_a_tool_use_id_twice_fails_pairing() -> None:
    use = {"type": "tool_use", "id": "toolu_1", "name": "ls", "input": {}}
    assert "PairingInv" in _checks(checks.message_problems(_message(content=[use, use])))


def test_a_correct_stream_passes_and_assembles_the_message() -> None:
    problems, message = checks.stream_problems(_stream())
    assert problems == []
    assert message is not None
    assert message["content"][1]["input"] == {"a": 1}
    assert message["usage"] == {"input_tokens": 10, "output_tokens": 5}


def test_an_index_gap_fails_shape() -> None:
    problems, message = checks.stream_problems(_stream(index_of_tool=2))
    assert _checks(problems) == {"ShapeInv"}
    assert message is None


def test_a_missing_message_stop_fails_shape() -> None:
    problems, message = checks.stream_problems(_stream(drop=9))
    assert _checks(problems) == {"ShapeInv"}
    assert message is None


def test_a_block_left_open_fails_shape() -> None:
    problems, _ = checks.stream_problems(_stream(drop=3))
    assert "ShapeInv" in _checks(problems)


def test_input_json_delta_fragments_are_the_tool_input() -> None:
    problems, message = checks.stream_problems(_stream(drop=6))
    assert _checks(problems) == {"ShapeInv"}  # '{"a":' alone is no JSON object
    assert message is None


def test_a_stream_message_id_not_of_the_msg_form_fails() -> None:
    problems, _ = checks.stream_problems(_stream(start_id="chatcmpl-9"))
    assert _checks(problems) == {"MessageId"}


def test_usage_must_add_up_to_the_upstreams() -> None:
    assert checks.usage_problems(_message(), 10, 5, "r") == []
    assert _checks(checks.usage_problems(_message(), 12, 5, "r")) == {"Usage"}


def test_error_shapes_and_types() -> None:
    good = orjson.dumps({"type": "error", "error": {"type": "rate_limit_error", "message": "x"}})
    assert checks.error_problems(429, good, "a") == []
    assert _checks(checks.error_problems(500, good, "a")) == {"ErrorShape"}
    openai = orjson.dumps({"error": {"message": "x", "type": "server"}})
    assert _checks(checks.error_problems(500, openai, "a")) == {"ErrorShape"}


def test_count_tokens_and_models() -> None:
    assert checks.count_tokens_problems(200, b'{"input_tokens": 3}') == []
    assert _checks(checks.count_tokens_problems(200, b'{"tokens": 3}')) == {"CountTokens"}
    model = {"type": "model", "id": "m", "display_name": "m", "created_at": "1970-01-01T00:00:00Z"}
    page = {"data": [model], "has_more": False, "first_id": "m", "last_id": "m"}
    assert checks.models_problems(200, orjson.dumps(page)) == []
    assert _checks(checks.models_problems(200, b'{"models": ["m"]}')) == {"Models"}
