"""Messages request -> Chat Completions request."""

from __future__ import annotations

import copy
from typing import Any

import orjson
import pytest

from tpx.errors import ProtocolError, UnsupportedError
from tpx.transport.translate import (
    Translation,
    request_bytes_to_openai,
    request_to_openai,
    tool_ids_in_request,
    tool_result_ids,
)
from tpx.transport.translate.ids import to_caller_id

from .sdk import validate_messages_request, validate_openai_request

CALL_A = to_caller_id("call_a", 0)
CALL_B = to_caller_id("call_b", 1)


def _request(messages: list[Any], **extra: Any) -> dict[str, Any]:
    return {"model": "claude-x", "max_tokens": 1024, "messages": messages, **extra}


def _translate(request: dict[str, Any], *, sdk: bool = True, **kwargs: Any) -> Translation:
    before = copy.deepcopy(request)
    translation = request_to_openai(request, **kwargs)
    assert request == before, "the input must not be mutated"
    validate_openai_request(translation.body)
    if sdk:
        validate_messages_request(request)
    raw = request_bytes_to_openai(orjson.dumps(request), **kwargs)
    assert orjson.loads(raw) == translation.body
    return translation


def _tool_turn(*results: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        {"role": "user", "content": "do it"},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "calling"},
                {"type": "tool_use", "id": CALL_A, "name": "f", "input": {"x": 1}},
                {"type": "tool_use", "id": CALL_B, "name": "g", "input": {}},
            ],
        },
        {"role": "user", "content": list(results)},
    ]


def test_full_mapping() -> None:
    request = _request(
        [{"role": "user", "content": "hi"}],
        system="be brief",
        temperature=0.5,
        top_p=0.9,
        stop_sequences=["END"],
        metadata={"user_id": "u-1"},
        stream=True,
        tools=[
            {
                "name": "f",
                "description": "does f",
                "input_schema": {"type": "object", "properties": {"x": {"type": "integer"}}},
            }
        ],
        tool_choice={"type": "any", "disable_parallel_tool_use": True},
    )
    body = _translate(request, sdk=False).body  # this anthropic SDK has no temperature/top_p
    assert body == {
        "model": "claude-x",
        "messages": [
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": "hi"},
        ],
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": "f",
                    "description": "does f",
                    "parameters": {"type": "object", "properties": {"x": {"type": "integer"}}},
                },
            }
        ],
        "tool_choice": "required",
        "parallel_tool_calls": False,
        "max_tokens": 1024,
        "temperature": 0.5,
        "top_p": 0.9,
        "stop": ["END"],
        "user": "u-1",
        "stream": True,
        "stream_options": {"include_usage": True},
    }


def test_model_kwarg_overrides_and_max_tokens_is_not_clamped() -> None:
    body = _translate(
        _request([{"role": "user", "content": "x"}], max_tokens=1_000_000), model="tpx-large"
    ).body
    assert body["model"] == "tpx-large"
    assert body["max_tokens"] == 1_000_000


@pytest.mark.parametrize(
    ("choice", "expected"),
    [
        ({"type": "auto"}, "auto"),
        ({"type": "any"}, "required"),
        ({"type": "none"}, "none"),
        ({"type": "tool", "name": "f"}, {"type": "function", "function": {"name": "f"}}),
    ],
)
def test_tool_choice(choice: dict[str, Any], expected: Any) -> None:
    tools = [{"name": "f", "input_schema": {"type": "object"}}]
    body = _translate(
        _request([{"role": "user", "content": "x"}], tools=tools, tool_choice=choice)
    ).body
    assert body["tool_choice"] == expected
    assert "parallel_tool_calls" not in body


def test_system_blocks_and_cache_control_dropped_silently() -> None:
    translation = _translate(
        _request(
            [{"role": "user", "content": "x"}],
            system=[
                {"type": "text", "text": "one"},
                {"type": "text", "text": "two", "cache_control": {"type": "ephemeral"}},
            ],
        )
    )
    assert translation.body["messages"][0] == {
        "role": "system",
        "content": [{"type": "text", "text": "one"}, {"type": "text", "text": "two"}],
    }
    assert translation.warnings == ()  # caching never changes a reply's meaning


def test_images() -> None:
    content = [
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBO"}},
        {"type": "image", "source": {"type": "url", "url": "https://x.test/a.jpg"}},
        {"type": "text", "text": "what is this?"},
    ]
    body = _translate(_request([{"role": "user", "content": content}])).body
    assert body["messages"][0]["content"] == [
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBO"}},
        {"type": "image_url", "image_url": {"url": "https://x.test/a.jpg"}},
        {"type": "text", "text": "what is this?"},
    ]


def test_tool_history_ordering_error_flag_and_text_after() -> None:
    messages = _tool_turn(
        {"type": "text", "text": "first note"},
        {"type": "tool_result", "tool_use_id": CALL_B, "content": "B out", "is_error": True},
        {"type": "text", "text": "second note"},
        {
            "type": "tool_result",
            "tool_use_id": CALL_A,
            "content": [{"type": "text", "text": "A1"}, {"type": "text", "text": "A2"}],
        },
    )
    body = _translate(_request(messages)).body
    assert body["messages"][1:] == [
        {
            "role": "assistant",
            "content": "calling",
            "tool_calls": [
                {
                    "id": "call_a",
                    "type": "function",
                    "function": {"name": "f", "arguments": '{"x":1}'},
                },
                {"id": "call_b", "type": "function", "function": {"name": "g", "arguments": "{}"}},
            ],
        },
        {
            "role": "tool",
            "tool_call_id": "call_a",
            "content": [{"type": "text", "text": "A1"}, {"type": "text", "text": "A2"}],
        },
        {"role": "tool", "tool_call_id": "call_b", "content": "[tool error] B out"},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "first note"},
                {"type": "text", "text": "second note"},
            ],
        },
    ]


def test_empty_error_result_and_missing_content() -> None:
    messages = _tool_turn(
        {"type": "tool_result", "tool_use_id": CALL_A, "is_error": True},
        {"type": "tool_result", "tool_use_id": CALL_B},
    )
    tools = _translate(_request(messages)).body["messages"][2:]
    assert tools == [
        {"role": "tool", "tool_call_id": "call_a", "content": "[tool error]"},
        {"role": "tool", "tool_call_id": "call_b", "content": ""},
    ]


def test_images_in_a_tool_result_move_to_the_following_user_message() -> None:
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AA"}}
    messages = _tool_turn(
        {
            "type": "tool_result",
            "tool_use_id": CALL_A,
            "content": [{"type": "text", "text": "shot"}, image],
        },
        {"type": "tool_result", "tool_use_id": CALL_B, "content": "ok"},
        {"type": "text", "text": "look"},
    )
    out = _translate(_request(messages)).body["messages"]
    assert out[2]["content"][0] == {"type": "text", "text": "shot"}
    assert "1 image(s)" in out[2]["content"][1]["text"]
    assert out[3] == {"role": "tool", "tool_call_id": "call_b", "content": "ok"}
    assert out[4] == {
        "role": "user",
        "content": [
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,AA"}},
            {"type": "text", "text": "look"},
        ],
    }


def test_native_ids_pass_through() -> None:
    messages = [
        {"role": "user", "content": "x"},
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "toolu_01X", "name": "f", "input": {}}],
        },
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "toolu_01X", "content": "y"}],
        },
    ]
    out = _translate(_request(messages)).body["messages"]
    assert out[1]["tool_calls"][0]["id"] == "toolu_01X"
    assert "content" not in out[1]
    assert out[2]["tool_call_id"] == "toolu_01X"


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        ({"top_k": 5}, "top_k"),
        ({"thinking": {"type": "enabled", "budget_tokens": 2000}}, "thinking"),
        ({"metadata": {"user_id": None}}, None),
        ({"service_tier": "auto"}, "service_tier"),
    ],
)
def test_dropped_fields_warn(extra: dict[str, Any], needle: str | None) -> None:
    translation = _translate(_request([{"role": "user", "content": "x"}], **extra), sdk=False)
    if needle is None:
        assert translation.warnings == ()
    else:
        assert any(needle in warning for warning in translation.warnings)
        assert needle not in translation.body


def test_thinking_blocks_of_another_provider_are_dropped_with_a_warning() -> None:
    messages = [
        {"role": "user", "content": "x"},
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "hmm", "signature": "EqQBCgIYAhIM"},
                {"type": "redacted_thinking", "data": "abc"},
                {"type": "text", "text": "answer"},
            ],
        },
        {"role": "user", "content": "y"},
    ]
    translation = _translate(_request(messages))
    assert translation.body["messages"][1] == {"role": "assistant", "content": "answer"}
    assert len(translation.warnings) == 2


def test_empty_text_is_never_sent() -> None:
    messages = [
        {"role": "user", "content": [{"type": "text", "text": ""}, {"type": "text", "text": "x"}]},
        {"role": "assistant", "content": ""},
        {"role": "user", "content": "y"},
    ]
    translation = request_to_openai(_request(messages))
    validate_openai_request(translation.body)
    assert translation.body["messages"] == [
        {"role": "user", "content": "x"},
        {"role": "user", "content": "y"},
    ]
    assert translation.warnings


def test_prefill_warns() -> None:
    messages = [{"role": "user", "content": "x"}, {"role": "assistant", "content": "The answer:"}]
    translation = _translate(_request(messages))
    assert translation.body["messages"][-1] == {"role": "assistant", "content": "The answer:"}
    assert any("prefill" in warning for warning in translation.warnings)


@pytest.mark.parametrize(
    "mutate",
    [
        lambda r: r.update(tools=[{"type": "web_search_20250305", "name": "web_search"}]),
        lambda r: r.update(mcp_servers=[]),
        lambda r: r.update(brand_new_field=1),
        lambda r: r["messages"][0].update(
            content=[
                {
                    "type": "document",
                    "source": {"type": "url", "url": "https://example.test/a.pdf"},
                }
            ]
        ),
        lambda r: r["messages"][0].update(content=[{"type": "hologram"}]),
        lambda r: r["messages"][0].update(
            content=[{"type": "image", "source": {"type": "file", "file_id": "f"}}]
        ),
    ],
)
def test_refused_features(mutate: Any) -> None:
    request = _request([{"role": "user", "content": "x"}])
    mutate(request)
    with pytest.raises(UnsupportedError):
        request_to_openai(request)


@pytest.mark.parametrize(
    "request_body",
    [
        [],
        "x",
        {"model": "m", "max_tokens": 5},
        {"model": "m", "messages": {}},
        {"model": "m", "messages": [{"role": "system", "content": "x"}]},
        {"model": "m", "messages": [{"role": "user"}]},
        {"model": "m", "messages": ["hi"]},
        {"model": "", "messages": []},
        {"model": "m", "max_tokens": "5", "messages": []},
        {"model": "m", "max_tokens": True, "messages": []},
        {"model": "m", "messages": [], "stop_sequences": "END"},
        {
            "model": "m",
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {"type": "tool_result", "tool_use_id": "toolu_nope", "content": "x"}
                    ],
                }
            ],
        },
        {
            "model": "m",
            "messages": _tool_turn({"type": "tool_result", "tool_use_id": CALL_A, "content": "x"}),
        },
        {
            "model": "m",
            "messages": _tool_turn(
                {"type": "tool_result", "tool_use_id": CALL_A, "content": "x"},
                {"type": "tool_result", "tool_use_id": CALL_A, "content": "x"},
                {"type": "tool_result", "tool_use_id": CALL_B, "content": "x"},
            ),
        },
        {"model": "m", "messages": [*_tool_turn()[:2], {"role": "user", "content": "no"}]},
        {"model": "m", "messages": _tool_turn()[:2]},
        {
            "model": "m",
            "messages": [
                {"role": "user", "content": "x"},
                {
                    "role": "assistant",
                    "content": [
                        {"type": "tool_use", "id": "a", "name": "f", "input": {}},
                        {"type": "tool_use", "id": "a", "name": "f", "input": {}},
                    ],
                },
            ],
        },
        {
            "model": "m",
            "messages": [
                {"role": "user", "content": "x"},
                {
                    "role": "assistant",
                    "content": [{"type": "tool_use", "id": "", "name": "f", "input": {}}],
                },
            ],
        },
        {
            "model": "m",
            "messages": [
                {"role": "user", "content": "x"},
                {
                    "role": "assistant",
                    "content": [{"type": "tool_use", "id": "a", "name": "f", "input": "{}"}],
                },
            ],
        },
    ],
)
def test_malformed_requests_are_protocol_errors(request_body: Any) -> None:
    with pytest.raises(ProtocolError) as info:
        request_to_openai(request_body)
    assert info.value.status == 400
    assert info.value.body()["error"]["type"] == "invalid_request_error"


def test_not_json_request() -> None:
    with pytest.raises(ProtocolError, match="not JSON"):
        request_bytes_to_openai(b"{nope")


def test_pairing_helpers() -> None:
    messages = _tool_turn(
        {"type": "tool_result", "tool_use_id": CALL_B, "content": "x"},
        {"type": "tool_result", "tool_use_id": CALL_B, "content": "x"},
    )
    request = _request(messages)
    assert tool_result_ids(request) == [CALL_B, CALL_B]
    assert tool_ids_in_request(request) == ([CALL_A, CALL_B], [CALL_B, CALL_B])
    assert tool_result_ids(_request([{"role": "user", "content": "x"}])) == []


# -- is_error and stop_sequences: only what the Messages API itself accepts -----------------


@pytest.mark.parametrize("is_error", [0, 1, 0.0, "true", "false", "", [], {}])
def test_is_error_must_be_a_real_boolean(is_error: Any) -> None:
    for content in ("out", [{"type": "text", "text": "out"}], None):
        result: dict[str, Any] = {
            "type": "tool_result",
            "tool_use_id": CALL_A,
            "is_error": is_error,
        }
        if content is not None:
            result["content"] = content
        request = _request(
            _tool_turn(result, {"type": "tool_result", "tool_use_id": CALL_B, "content": "b"})
        )
        with pytest.raises(ProtocolError, match="is_error must be a boolean") as info:
            request_to_openai(request)
        assert info.value.status == 400
        with pytest.raises(ProtocolError, match="is_error must be a boolean"):
            request_bytes_to_openai(orjson.dumps(request))


@pytest.mark.parametrize(("is_error", "prefixed"), [(True, True), (False, False), (None, False)])
def test_is_error_booleans_and_null_are_accepted(is_error: bool | None, prefixed: bool) -> None:
    result = {"type": "tool_result", "tool_use_id": CALL_A, "content": "out", "is_error": is_error}
    body = _translate(
        _request(
            _tool_turn(result, {"type": "tool_result", "tool_use_id": CALL_B, "content": "b"})
        ),
        sdk=is_error is not None,
    ).body
    tool = next(m for m in body["messages"] if m.get("tool_call_id") == "call_a")
    assert tool["content"] == ("[tool error] out" if prefixed else "out")


def test_more_than_four_stop_sequences_are_all_sent_with_a_warning() -> None:
    stops = ["A", "B", "C", "D", "E"]
    translation = _translate(_request([{"role": "user", "content": "hi"}], stop_sequences=stops))
    assert translation.body["stop"] == stops
    assert any("at most 4" in w and "5 entries" in w for w in translation.warnings)
    four = _translate(_request([{"role": "user", "content": "hi"}], stop_sequences=stops[:4]))
    assert four.body["stop"] == stops[:4]
    assert four.warnings == ()


@pytest.mark.parametrize("stops", [[""], ["END", ""], ["", "", ""]])
def test_empty_stop_sequences_are_refused(stops: list[str]) -> None:
    with pytest.raises(ProtocolError, match="empty strings") as info:
        request_to_openai(_request([{"role": "user", "content": "hi"}], stop_sequences=stops))
    assert info.value.status == 400
    assert info.value.body()["error"]["type"] == "invalid_request_error"


# -- a user turn over consecutive user messages (the Messages API merges them) -------------


def _result(call: str, content: Any = "out") -> dict[str, Any]:
    return {"type": "tool_result", "tool_use_id": call, "content": content}


@pytest.mark.parametrize(
    ("run", "user_content"),
    [
        (
            [{"role": "user", "content": [_result(CALL_A), _result(CALL_B)]}, "and more"],
            "and more",
        ),
        (
            ["first", {"role": "user", "content": [_result(CALL_B), _result(CALL_A)]}],
            "first",
        ),
        (
            [
                {"role": "user", "content": [{"type": "text", "text": "a"}, _result(CALL_A)]},
                {"role": "user", "content": [_result(CALL_B), {"type": "text", "text": "b"}]},
                "c",
            ],
            [
                {"type": "text", "text": "a"},
                {"type": "text", "text": "b"},
                {"type": "text", "text": "c"},
            ],
        ),
        ([{"role": "user", "content": [_result(CALL_A), _result(CALL_B)]}, ""], None),
    ],
)
def test_tool_results_over_consecutive_user_messages(run: list[Any], user_content: Any) -> None:
    turn = [m if isinstance(m, dict) else {"role": "user", "content": m} for m in run]
    request = _request(
        [
            *_tool_turn()[:2],
            *turn,
            {"role": "assistant", "content": "ok"},
            {"role": "user", "content": "next"},
        ]
    )
    body = _translate(request).body
    assert tool_result_ids({"messages": [*_tool_turn()[:2], *turn]}) in (
        [CALL_A, CALL_B],
        [CALL_B, CALL_A],
    )
    messages = body["messages"]
    assert [c["id"] for c in messages[1]["tool_calls"]] == ["call_a", "call_b"]
    # the tool messages at once after the assistant message, in the calls' order
    assert [(m["role"], m.get("tool_call_id")) for m in messages[2:4]] == [
        ("tool", "call_a"),
        ("tool", "call_b"),
    ]
    rest = [{"role": "user", "content": user_content}] if user_content is not None else []
    assert messages[4:] == [
        *rest,
        {"role": "assistant", "content": "ok"},
        {"role": "user", "content": "next"},
    ]


def test_a_split_turn_still_needs_every_result_exactly_once() -> None:
    head = _tool_turn()[:2]
    missing = [
        *head,
        {"role": "user", "content": [_result(CALL_A)]},
        {"role": "user", "content": "x"},
    ]
    twice = [
        *head,
        {"role": "user", "content": [_result(CALL_A), _result(CALL_B)]},
        {"role": "user", "content": [_result(CALL_A)]},
    ]
    for messages, needle in ((missing, "without a tool_result"), (twice, "already answered")):
        with pytest.raises(ProtocolError, match=needle) as info:
            request_to_openai(_request(messages))
        assert info.value.status == 400
    # runs without a tool turn before them are unchanged: one user message each
    plain = _translate(
        _request([{"role": "user", "content": "a"}, {"role": "user", "content": "b"}])
    )
    assert plain.body["messages"] == [
        {"role": "user", "content": "a"},
        {"role": "user", "content": "b"},
    ]


def test_tool_result_ids_reads_the_last_run_of_user_messages() -> None:
    head = _tool_turn()[:2]
    run = [
        {"role": "user", "content": [_result(CALL_A)]},
        {"role": "user", "content": [_result(CALL_B)]},
    ]
    assert tool_result_ids({"messages": [*head, *run]}) == [CALL_A, CALL_B]
    assert tool_result_ids({"messages": [*head, *run, {"role": "user", "content": "x"}]}) == [
        CALL_A,
        CALL_B,
    ]
    # a trailing assistant message (prefill) does not hide the user turn before it
    prefill = {"role": "assistant", "content": "The answer:"}
    assert tool_result_ids({"messages": [*head, *run, prefill]}) == [CALL_A, CALL_B]
    # an assistant message ends the run
    assert tool_result_ids({"messages": [*head, run[0], prefill, run[1]]}) == [CALL_B]
    assert tool_result_ids({"messages": []}) == []


# -- refused with a typed 400 -----------------------------------------------------------


def _refused(request: dict[str, Any], needle: str) -> None:
    with pytest.raises(ProtocolError, match=needle) as info:
        request_to_openai(request)
    assert info.value.status == 400
    assert info.value.body()["error"]["type"] == "invalid_request_error"
    with pytest.raises(ProtocolError, match=needle):
        request_bytes_to_openai(orjson.dumps(request))


@pytest.mark.parametrize(
    "messages",
    [
        [{"role": "user", "content": ""}],
        [{"role": "user", "content": []}],
        [{"role": "user", "content": [{"type": "text", "text": ""}]}],
        [{"role": "user", "content": ""}, {"role": "assistant", "content": ""}],
        [],
    ],
)
def test_nothing_left_to_send_is_refused(messages: list[Any]) -> None:
    _refused(_request(messages), "no message left to send")
    _refused(_request(messages, system="be brief"), "no message left to send")


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
def test_non_finite_numbers_are_refused(bad: float) -> None:
    for tool_input in ({"x": bad}, {"deep": [1, {"y": bad}]}, {"n": None, "x": [bad]}):
        messages = _tool_turn(_result(CALL_A), _result(CALL_B))
        messages[1]["content"][1]["input"] = tool_input
        with pytest.raises(ProtocolError, match="NaN or Infinity") as info:
            request_to_openai(_request(messages))
        assert info.value.status == 400
    for field in ("temperature", "top_p"):
        with pytest.raises(ProtocolError, match="finite") as info:
            request_to_openai(_request([{"role": "user", "content": "x"}], **{field: bad}))
        assert info.value.status == 400
    # a real null is still fine
    messages = _tool_turn(_result(CALL_A), _result(CALL_B))
    messages[1]["content"][1]["input"] = {"x": None}
    body = _translate(_request(messages)).body
    assert body["messages"][1]["tool_calls"][0]["function"]["arguments"] == '{"x":null}'


@pytest.mark.parametrize("tools", [None, [{"name": "f", "input_schema": {"type": "object"}}]])
def test_tool_choice_naming_an_undeclared_tool_is_refused(tools: list[Any] | None) -> None:
    extra: dict[str, Any] = {"tool_choice": {"type": "tool", "name": "nope"}}
    if tools is not None:
        extra["tools"] = tools
    _refused(_request([{"role": "user", "content": "x"}], **extra), "does not declare")


def test_max_tokens_is_required() -> None:
    request = _request([{"role": "user", "content": "x"}])
    del request["max_tokens"]
    _refused(request, "max_tokens is required")
    for bad in (0, -1, None, 1.5, "5", True):
        _refused({**request, "max_tokens": bad}, "max_tokens must be a positive integer")
