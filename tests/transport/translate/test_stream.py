"""tpx.transport.translate.stream: SSE parsing, Chat Completions streams -> Messages events,
accumulation.

Also the helpers tests/transport/test_streaming.py reuses: streamed twins of Chat Completions bodies
(:func:`stream_of`, in every provider's fragmenting style), SSE framing (:func:`sse`) and
the SDK stream-event validator (:func:`validate_event`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import orjson
import pydantic
import pytest
from anthropic.types import ErrorResponse, RawMessageStreamEvent

from tests.transport.translate.quirks import QUIRKS, completion
from tests.transport.translate.sdk import SDKMismatch, validate_messages_response
from tpx import errors
from tpx.transport.translate.response import response_to_messages
from tpx.transport.translate.signing import PROCESS_SIGNER
from tpx.transport.translate.stream import (
    AnthropicStreamReader,
    MessageAccumulator,
    OpenAIStreamTranslator,
    SSEEvent,
    SSEParser,
    error_from_event,
    serialize_event,
)

__all__ = ["STYLES", "sse", "stream_of", "validate_event"]

#: How tool calls are fragmented: OpenAI (index, id + name first, argument pieces),
#: interleaved (two calls' fragments alternating), Gemini (no index, whole call per chunk),
#: Ollama (every call at index 0, whole).
STYLES = ("openai", "interleaved", "gemini", "ollama")

_EVENT: pydantic.TypeAdapter[Any] = pydantic.TypeAdapter(RawMessageStreamEvent)
_ERROR: pydantic.TypeAdapter[Any] = pydantic.TypeAdapter(ErrorResponse)


def _pieces(text: str, size: int) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)]


def stream_of(
    body: Mapping[str, Any], style: str = "openai", piece: int = 4, usage_chunk: bool = True
) -> list[dict[str, Any]]:
    """The chunks a server of *style* streams for the non-streamed *body*."""
    head: dict[str, Any] = {"object": "chat.completion.chunk", "created": 0, "model": body["model"]}
    if "id" in body:
        head["id"] = body["id"]
    choice = body["choices"][0]
    message = choice["message"]

    def chunk(delta: dict[str, Any], **extra: Any) -> dict[str, Any]:
        return {**head, "choices": [{"index": 0, "delta": delta, "finish_reason": None, **extra}]}

    chunks = [chunk({"role": "assistant", "content": ""})]
    for field in ("reasoning_content", "content", "refusal"):
        value = message.get(field)
        if isinstance(value, str):
            chunks += [chunk({field: p}) for p in _pieces(value, piece)]
    calls = message.get("tool_calls") or []
    headers: list[dict[str, Any]] = []
    bodies: list[list[dict[str, Any]]] = []
    for index, call in enumerate(calls):
        arguments = call["function"]["arguments"]
        fragment: dict[str, Any] = {
            "type": "function",
            "function": {"name": call["function"]["name"]},
        }
        if "id" in call:
            fragment["id"] = call["id"]
        if style in ("gemini", "ollama") or not isinstance(arguments, str):
            fragment["function"]["arguments"] = arguments
            if style == "ollama":
                fragment["index"] = 0
            elif style != "gemini":
                fragment["index"] = index
            headers.append(fragment)
            bodies.append([])
            continue
        fragment["index"] = index
        fragment["function"]["arguments"] = ""
        headers.append(fragment)
        bodies.append(
            [{"index": index, "function": {"arguments": p}} for p in _pieces(arguments, piece)]
        )
    if style == "interleaved":
        chunks += [chunk({"tool_calls": [h]}) for h in headers]
        longest = max((len(b) for b in bodies), default=0)
        for step in range(longest):
            for fragments in bodies:
                if step < len(fragments):
                    chunks.append(chunk({"tool_calls": [fragments[step]]}))
    else:
        for h, fragments in zip(headers, bodies, strict=True):
            chunks.append(chunk({"tool_calls": [h]}))
            chunks += [chunk({"tool_calls": [f]}) for f in fragments]
    extra = {k: choice[k] for k in ("stop_reason", "matched_stop") if k in choice}
    last = chunk({}, **extra)
    last["choices"][0]["finish_reason"] = choice["finish_reason"]
    chunks.append(last)
    if "usage" in body:
        if usage_chunk:
            chunks.append({**head, "choices": [], "usage": body["usage"]})
        else:
            last["usage"] = body["usage"]
    return chunks


def sse(chunks: Iterable[Mapping[str, Any]], done: bool = True) -> bytes:
    """SSE framing of Chat Completions chunks (``data: [DONE]`` last unless *done* is false)."""
    out = b"".join(b"data: " + orjson.dumps(c) + b"\n\n" for c in chunks)
    return out + (b"data: [DONE]\n\n" if done else b"")


def _walk(value: Any, path: str) -> None:
    if isinstance(value, pydantic.BaseModel):
        if value.model_extra:
            raise SDKMismatch(f"unknown fields at {path}: {sorted(value.model_extra)}")
        for name in type(value).model_fields:
            _walk(getattr(value, name), f"{path}.{name}")
    elif isinstance(value, list):
        for index, item in enumerate(value):
            _walk(item, f"{path}[{index}]")


def validate_event(event: Mapping[str, Any]) -> None:
    """Raise :class:`SDKMismatch` unless *event* is exactly an SDK ``RawMessageStreamEvent``
    (an ``error`` event: exactly an SDK ``ErrorResponse``)."""
    adapter = _ERROR if event.get("type") == "error" else _EVENT
    try:
        model = adapter.validate_python(event, strict=True)
    except pydantic.ValidationError as exc:
        raise SDKMismatch(str(exc)) from exc
    _walk(model, str(event.get("type")))
    dumped = model.model_dump(mode="json", exclude_unset=True)
    if dumped != orjson.loads(orjson.dumps(event)):
        raise SDKMismatch(f"fields ignored or coerced by the SDK type: {dumped!r}")


NONCE = "0123456789ab"


def translate(data: bytes, **kw: Any) -> list[dict[str, Any]]:
    t = OpenAIStreamTranslator(nonce=NONCE, **kw)
    return t.feed(data) + t.close()


def message(events: list[dict[str, Any]]) -> dict[str, Any]:
    for event in events:
        validate_event(event)
    acc = MessageAccumulator().add_all(events)
    assert acc.complete
    return acc.message()


def chunk(delta: dict[str, Any], finish: str | None = None, **top: Any) -> dict[str, Any]:
    return {
        "id": "c1",
        "object": "chat.completion.chunk",
        "model": "m",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        **top,
    }


def call(index: int | None, **fields: Any) -> dict[str, Any]:
    fragment: dict[str, Any] = {k: v for k, v in fields.items() if k != "function"}
    if index is not None:
        fragment["index"] = index
    if "function" in fields:
        fragment["function"] = fields["function"]
    return {"tool_calls": [fragment]}


# -- SSE parser ------------------------------------------------------------------------

RECORDED = (
    b"\xef\xbb\xbf: keep-alive comment\r\n"
    b'event: message_start\r\ndata: {"a":\r\ndata:  1}\r\nid: 7\r\n\r\n'
    b"retry: 100\n"
    b"data: \xc3\xa9t\xc3\xa9\n\n"
    b"event: ping\rdata:x\r\r"
    b"data\n\n"
    b"data: [DONE]\n\n"
)
EXPECTED = [
    SSEEvent('{"a":\n 1}', "message_start", "7"),
    SSEEvent("été", "message", "7"),
    SSEEvent("x", "ping", "7"),
    SSEEvent("", "message", "7"),
    SSEEvent("[DONE]", "message", "7"),
]


def parse(pieces: list[bytes]) -> list[SSEEvent]:
    parser = SSEParser()
    events = [e for p in pieces for e in parser.feed(p)]
    return events + parser.close()


def test_sse_whole() -> None:
    assert parse([RECORDED]) == EXPECTED


def test_sse_one_byte_at_a_time() -> None:
    assert parse([RECORDED[i : i + 1] for i in range(len(RECORDED))]) == EXPECTED


def test_sse_every_split_point() -> None:
    for cut in range(len(RECORDED) + 1):
        assert parse([RECORDED[:cut], RECORDED[cut:]]) == EXPECTED, cut


def test_sse_every_split_point_of_a_translated_stream() -> None:
    data = sse(stream_of(QUIRKS["deepseek_reasoning"], piece=3))
    whole = translate(data)
    for cut in range(len(data) + 1):
        t = OpenAIStreamTranslator(nonce=NONCE)
        assert t.feed(data[:cut]) + t.feed(data[cut:]) + t.close() == whole


def test_sse_close_dispatches_a_terminated_event_and_drops_a_cut_line() -> None:
    parser = SSEParser()
    assert parser.feed(b"data: [DONE]\n") == []
    assert parser.close() == [SSEEvent("[DONE]")]
    parser = SSEParser()
    assert parser.feed(b'data: one\n\ndata: {"cut') == [SSEEvent("one")]
    assert parser.close() == []
    assert parser.truncated


def test_sse_line_limit() -> None:
    parser = SSEParser(max_line=8)
    with pytest.raises(errors.ProtocolError, match="longer than 8"):
        parser.feed(b"data: 0123456789")


def test_serialize_event_round_trips() -> None:
    event = {
        "type": "content_block_delta",
        "index": 0,
        "delta": {"type": "text_delta", "text": "a\nb"},
    }
    data = serialize_event(event)
    assert data.startswith(b"event: content_block_delta\ndata: {")
    assert data.endswith(b"}\n\n")
    (parsed,) = parse([data])
    assert parsed.event == "content_block_delta"
    assert orjson.loads(parsed.data) == event
    with pytest.raises(ValueError, match="type"):
        serialize_event({"type": "a\nb"})


# -- the SDK validator itself ------------------------------------------------------------------


@pytest.mark.parametrize(
    "event",
    [
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta"}},
        {"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {}},
        {"type": "message_stop", "bogus": 1},
        {"type": "error", "error": {"type": "api_error"}},
        {"type": "error", "error": {"type": "no_such_error", "message": "m"}},
        {
            "type": "content_block_start",
            "index": "0",
            "content_block": {"type": "text", "text": ""},
        },
        {
            "type": "content_block_delta",
            "index": 0,
            "delta": {"type": "input_json", "partial_json": ""},
        },
        {
            "type": "message_delta",
            "delta": {"stop_reason": "tool_calls"},
            "usage": {"output_tokens": 1},
        },
    ],
)
def test_validator_rejects_malformed_events(event: dict[str, Any]) -> None:
    with pytest.raises(SDKMismatch):
        validate_event(event)


# -- equivalence with the non-streaming translator ----------------------------------------------


@pytest.mark.parametrize("piece", [1, 5])
@pytest.mark.parametrize("style", STYLES)
@pytest.mark.parametrize("name", sorted(QUIRKS))
def test_stream_equals_non_streamed(name: str, style: str, piece: int) -> None:
    body = QUIRKS[name]
    got = message(translate(sse(stream_of(body, style, piece))))
    want = response_to_messages(body, nonce=NONCE).body
    for key in ("type", "role", "model", "content", "stop_reason", "stop_sequence", "usage"):
        assert got[key] == want[key], key
    if "id" in body:
        assert got["id"] == want["id"]
    validate_messages_response(got)


def test_usage_on_the_finish_chunk_also_counts() -> None:
    body = QUIRKS["cached_usage"]
    got = message(translate(sse(stream_of(body, usage_chunk=False))))
    assert got["usage"] == response_to_messages(body).body["usage"]
    assert got["usage"]["cache_read_input_tokens"] == 1536


# -- quirks, one fixture each ------------------------------------------------------------------


def test_event_order_for_text_then_tool_calls() -> None:
    events = translate(
        sse(
            [
                chunk({"role": "assistant", "content": "Let me"}),
                chunk({"content": " look."}),
                chunk(
                    call(0, id="call_a", type="function", function={"name": "ls", "arguments": ""})
                ),
                chunk(call(0, function={"arguments": '{"p": "."}'})),
                chunk({}, "tool_calls"),
                {
                    "id": "c1",
                    "object": "chat.completion.chunk",
                    "model": "m",
                    "choices": [],
                    "usage": {"prompt_tokens": 9, "completion_tokens": 4, "total_tokens": 13},
                },
            ]
        )
    )
    assert [(e["type"], e.get("index")) for e in events] == [
        ("message_start", None),
        ("content_block_start", 0),
        ("content_block_delta", 0),
        ("content_block_delta", 0),
        ("content_block_stop", 0),
        ("content_block_start", 1),
        ("content_block_delta", 1),
        ("content_block_stop", 1),
        ("message_delta", None),
        ("message_stop", None),
    ]
    assert events[0]["message"]["content"] == []
    assert events[5]["content_block"] == {
        "type": "tool_use",
        "id": f"tpxr0-{NONCE}_call_a",
        "name": "ls",
        "input": {},
    }
    assert events[-2]["delta"] == {"stop_reason": "tool_use", "stop_sequence": None}
    assert events[-2]["usage"]["output_tokens"] == 4
    assert message(events)["content"][1]["input"] == {"p": "."}


def test_interleaved_fragments_are_never_misattributed() -> None:
    events = translate(
        sse(
            [
                chunk(call(0, id="call_a", function={"name": "f", "arguments": '{"x": '})),
                chunk(call(1, id="call_b", function={"name": "g", "arguments": '{"y": '})),
                chunk(call(0, function={"arguments": '"from-a"}'})),
                chunk(call(1, function={"arguments": '"from-b"}'})),
                chunk({}, "tool_calls"),
            ]
        )
    )
    content = message(events)["content"]
    assert [(b["name"], b["input"]) for b in content] == [
        ("f", {"x": "from-a"}),
        ("g", {"y": "from-b"}),
    ]
    # Each tool_use block is emitted whole: start, its deltas, stop, then the next block.
    kinds = [(e["type"], e.get("index")) for e in events if "index" in e]
    assert kinds == [
        ("content_block_start", 0),
        ("content_block_delta", 0),
        ("content_block_delta", 0),
        ("content_block_stop", 0),
        ("content_block_start", 1),
        ("content_block_delta", 1),
        ("content_block_delta", 1),
        ("content_block_stop", 1),
    ]


def test_gemini_no_index_empty_ids_finish_stop_is_tool_use() -> None:
    events = translate(
        sse(
            [
                chunk(call(None, id="", function={"name": "w", "arguments": '{"c": "Paris"}'})),
                chunk(call(None, id="", function={"name": "w", "arguments": '{"c": "Rome"}'})),
                chunk({}, "stop"),
            ]
        )
    )
    got = message(events)
    assert got["stop_reason"] == "tool_use"
    assert [b["input"]["c"] for b in got["content"]] == ["Paris", "Rome"]
    ids = [b["id"] for b in got["content"]]
    assert ids == [f"tpxb0-{NONCE}_", f"tpxb1-{NONCE}_"]


def test_ollama_parallel_calls_at_index_zero_are_separate_blocks() -> None:
    got = message(
        translate(
            sse(
                [
                    chunk(call(0, id="call_x", function={"name": "r", "arguments": '{"p": "a"}'})),
                    chunk(call(0, id="call_y", function={"name": "r", "arguments": '{"p": "b"}'})),
                    chunk({}, "tool_calls"),
                ]
            )
        )
    )
    assert [(b["id"], b["input"]) for b in got["content"]] == [
        (f"tpxr0-{NONCE}_call_x", {"p": "a"}),
        (f"tpxr1-{NONCE}_call_y", {"p": "b"}),
    ]


def test_reasoning_content_is_a_signed_thinking_block() -> None:
    events = translate(
        sse([chunk({"reasoning_content": "hmm"}), chunk({"content": "4"}), chunk({}, "stop")])
    )
    got = message(events)
    assert got["content"] == [
        {"type": "thinking", "thinking": "hmm", "signature": PROCESS_SIGNER.sign("hmm")},
        {"type": "text", "text": "4"},
    ]


@pytest.mark.parametrize("arguments", ['{"a": 1', "[1, 2]", "nope"])
def test_bad_arguments_are_a_protocol_error(arguments: str) -> None:
    t = OpenAIStreamTranslator(nonce=NONCE)
    t.feed(
        sse([chunk(call(0, id="c", function={"name": "f", "arguments": arguments}))], done=False)
    )
    with pytest.raises(errors.ProtocolError) as info:
        t.feed(sse([chunk({}, "tool_calls")]))
    assert info.value.code == "MODEL_PROTOCOL"


@pytest.mark.parametrize("arguments", ["", "  "])
def test_empty_arguments_are_an_empty_object(arguments: str) -> None:
    events = translate(
        sse(
            [
                chunk(call(0, id="c", function={"name": "now", "arguments": arguments})),
                chunk({}, "tool_calls"),
            ]
        )
    )
    assert [e["delta"]["partial_json"] for e in events if e["type"] == "content_block_delta"] == [
        "{}"
    ]
    assert message(events)["content"][0]["input"] == {}


def test_missing_done_is_a_protocol_error() -> None:
    t = OpenAIStreamTranslator(nonce=NONCE)
    t.feed(sse([chunk({"content": "hi"}), chunk({}, "stop")], done=False))
    with pytest.raises(errors.ProtocolError, match=r"\[DONE\]"):
        t.close()
    with pytest.raises(errors.ProtocolError, match="before any chunk"):
        translate(b"data: [DONE]\n\n")


def test_error_chunk_and_error_event_raise() -> None:
    with pytest.raises(errors.ProtocolError, match="rate limit"):
        translate(b'data: {"error": {"message": "rate limit", "type": "x"}}\n\n')
    with pytest.raises(errors.OverloadedError):
        translate(
            b'event: error\ndata: {"error": {"type": "overloaded_error", "message": "busy"}}\n\n'
        )


def test_malformed_chunks_are_protocol_errors() -> None:
    for data in [b"data: {nope\n\n", b"data: [1]\n\n", b'data: {"choices": 3}\n\n']:
        with pytest.raises(errors.ProtocolError):
            translate(data)
    with pytest.raises(errors.ProtocolError, match="after finish_reason"):
        translate(sse([chunk({}, "tool_calls"), chunk(call(0, id="c", function={"name": "f"}))]))


def test_stream_without_usage_reports_zeros_with_a_warning() -> None:
    t = OpenAIStreamTranslator(nonce=NONCE)
    events = t.feed(sse([chunk({"content": "x"}, "length")])) + t.close()
    got = message(events)
    assert got["stop_reason"] == "max_tokens"
    assert got["usage"]["output_tokens"] == 0
    assert any("usage" in w for w in t.warnings)


def test_model_override_and_default() -> None:
    no_model = [{"choices": [{"index": 0, "delta": {"content": "x"}, "finish_reason": "stop"}]}]
    assert message(translate(sse(no_model), default_model="fallback"))["model"] == "fallback"
    assert message(translate(sse(no_model), model="forced"))["model"] == "forced"
    assert (
        message(translate(sse([chunk({"content": "x"}, "stop")]), model="forced"))["model"]
        == "forced"
    )


def test_fresh_nonce_per_stream() -> None:
    data = sse(
        [chunk(call(0, id="call_1", function={"name": "f", "arguments": "{}"})), chunk({}, "stop")]
    )
    ids = set()
    for _ in range(3):
        t = OpenAIStreamTranslator()
        t.feed(data)
        t.close()
        ids.update(t.tool_ids)
    assert len(ids) == 3
    with pytest.raises(ValueError, match="nonce"):
        OpenAIStreamTranslator(nonce="XYZ")


# -- native Messages streams -------------------------------------------------------------------

NATIVE: list[dict[str, Any]] = [
    {
        "type": "message_start",
        "message": {
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "model": "claude-x",
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {"input_tokens": 7, "output_tokens": 1},
        },
    },
    {"type": "ping"},
    {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
    {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "On it"}},
    {"type": "content_block_stop", "index": 0},
    {
        "type": "content_block_start",
        "index": 1,
        "content_block": {"type": "tool_use", "id": "toolu_01", "name": "ls", "input": {}},
    },
    {
        "type": "content_block_delta",
        "index": 1,
        "delta": {"type": "input_json_delta", "partial_json": '{"p"'},
    },
    {
        "type": "content_block_delta",
        "index": 1,
        "delta": {"type": "input_json_delta", "partial_json": ': "."}'},
    },
    {"type": "content_block_stop", "index": 1},
    {
        "type": "message_delta",
        "delta": {"stop_reason": "tool_use", "stop_sequence": None},
        "usage": {"output_tokens": 12},
    },
    {"type": "message_stop"},
]


def native(events: list[dict[str, Any]]) -> bytes:
    return b"".join(serialize_event(e) for e in events)


def test_native_pass_through_learns_tool_ids() -> None:
    reader = AnthropicStreamReader()
    data = native(NATIVE)
    out = [e for i in range(len(data)) for e in reader.feed(data[i : i + 1])] + reader.close()
    assert out == NATIVE
    assert reader.complete
    assert reader.tool_ids == ["toolu_01"]
    got = reader.message()
    assert got["content"][1]["input"] == {"p": "."}
    assert got["usage"] == {"input_tokens": 7, "output_tokens": 12}
    validate_messages_response(got)
    for event in out:
        if event["type"] != "ping":  # ping is not in the SDK's RawMessageStreamEvent union
            validate_event(event)


def test_native_error_event_and_truncation() -> None:
    reader = AnthropicStreamReader()
    with pytest.raises(errors.OverloadedError) as info:
        reader.feed(
            native(
                [
                    NATIVE[0],
                    {
                        "type": "error",
                        "error": {"type": "overloaded_error", "message": "Overloaded"},
                    },
                ]
            )
        )
    assert info.value.body()["error"]["type"] == "overloaded_error"
    reader = AnthropicStreamReader()
    reader.feed(native(NATIVE[:-1]))
    with pytest.raises(errors.ProtocolError, match="message_stop"):
        reader.close()


HEAD = [NATIVE[0], NATIVE[2], NATIVE[4]]  # message_start, then text block 0 opened and closed
BAD_ID = {"type": "tool_use", "id": "bad id", "name": "x", "input": {}}


@pytest.mark.parametrize(
    ("events", "needle"),
    [
        (NATIVE[2:], "no message_start"),
        ([NATIVE[0], NATIVE[0]], "second message_start"),
        ([NATIVE[0], NATIVE[3]], "open block is None"),
        ([*HEAD, NATIVE[5], NATIVE[2]], "is open"),
        ([*HEAD, {**NATIVE[5], "index": 3}], "expected block 1"),
        ([*HEAD, NATIVE[5], NATIVE[8], {**NATIVE[5], "index": 2}], "duplicated tool_use id"),
        ([*HEAD, {**NATIVE[5], "content_block": BAD_ID}], "invalid id"),
        ([*HEAD, NATIVE[5], NATIVE[6], NATIVE[8]], "not valid JSON"),
        ([*HEAD, NATIVE[5], {**NATIVE[3], "index": 1}], "'text_delta' delta for a 'tool_use'"),
        ([NATIVE[0], NATIVE[2], NATIVE[-1]], "while a content block is open"),
        ([*NATIVE, NATIVE[2]], "after message_stop"),
    ],
)
def test_accumulator_rejects_events_out_of_place(events: list[dict[str, Any]], needle: str) -> None:
    with pytest.raises(errors.ProtocolError, match=needle):
        MessageAccumulator().add_all(events)


def test_native_event_name_must_match_its_type() -> None:
    with pytest.raises(errors.ProtocolError, match="differs"):
        AnthropicStreamReader().feed(b'event: message_stop\ndata: {"type": "ping"}\n\n')


def test_error_from_event_mapping() -> None:
    cases = {
        "rate_limit_error": errors.RateLimitedError,
        "authentication_error": errors.UnauthorizedError,
        "timeout_error": errors.TimeoutError,
        "invalid_request_error": errors.HTTPStatusError,
    }
    for kind, cls in cases.items():
        error = error_from_event({"type": "error", "error": {"type": kind, "message": "m"}}, "X")
        assert type(error) is cls
        assert error.body()["error"]["type"] == kind
        assert error.provider == "X"


def test_completion_helper_round_trip_sanity() -> None:
    body = completion({"role": "assistant", "content": "hello"}, "stop")
    assert message(translate(sse(stream_of(body))))["content"] == [
        {"type": "text", "text": "hello"}
    ]


# -- usage in streams: the same rule as the non-streamed path ---------------------------


@pytest.mark.parametrize("usage_chunk", [True, False])
@pytest.mark.parametrize(
    "usage",
    [
        {"prompt_tokens": -3, "completion_tokens": 1},
        {"prompt_tokens": 3, "completion_tokens": -1},
        {
            "prompt_tokens": 3,
            "completion_tokens": 1,
            "prompt_tokens_details": {"cached_tokens": -1},
        },
        {"prompt_tokens": 3.0, "completion_tokens": 1},
    ],
)
def test_stream_negative_or_non_integer_usage_is_a_protocol_error(
    usage: dict[str, Any], usage_chunk: bool
) -> None:
    body = {**QUIRKS["cached_usage"], "usage": usage}
    with pytest.raises(errors.ProtocolError, match="usage token counts"):
        translate(sse(stream_of(body, usage_chunk=usage_chunk)))


# -- the package re-exports the streaming API ----------------------------------------------


def test_streaming_api_is_reexported_from_the_package() -> None:
    import tpx.transport.translate
    import tpx.transport.translate.stream

    names = [
        "SSEParser",
        "SSEEvent",
        "serialize_event",
        "OpenAIStreamTranslator",
        "AnthropicStreamReader",
        "MessageAccumulator",
    ]
    for name in names:
        assert getattr(tpx.transport.translate, name) is getattr(
            tpx.transport.translate.stream, name
        )
        assert name in tpx.transport.translate.__all__
    doc = tpx.transport.translate.__doc__
    assert doc is not None
    assert "Streaming" in doc
    assert all(name in doc for name in names)


# -- choices: only index 0, and null is malformed ---------------------------------------


def test_streamed_choices_other_than_index_0_are_dropped_with_a_warning() -> None:
    def two(first: dict[str, Any], second: dict[str, Any]) -> dict[str, Any]:
        return {
            "id": "c1",
            "object": "chat.completion.chunk",
            "model": "m",
            "choices": [first, second],
        }

    chunks = [
        two(
            {"index": 1, "delta": {"role": "assistant", "content": "other"}},
            {"index": 0, "delta": {"role": "assistant", "content": "mine"}},
        ),
        two(
            {"index": 1, "delta": {}, "finish_reason": "length"},
            {"index": 0, "delta": {}, "finish_reason": "stop"},
        ),
    ]
    t = OpenAIStreamTranslator(nonce=NONCE)
    got = message(t.feed(sse(chunks)) + t.close())
    assert [b["text"] for b in got["content"]] == ["mine"]
    assert got["stop_reason"] == "end_turn"
    assert t.warnings.count("extra choice(s) dropped; only choice 0 is used") == 1
    # a choice without an index (or a null one, or one equal to 0) is choice 0; others are not
    for index in (None, 0.0, "0", True, 2):
        choice: dict[str, Any] = {"delta": {"content": "x"}, "finish_reason": "stop"}
        if index is not None:
            choice["index"] = index
        t = OpenAIStreamTranslator(nonce=NONCE)
        got = message(t.feed(sse([{"id": "c", "model": "m", "choices": [choice]}])) + t.close())
        kept = index is None  # only the integer 0 (or no index) is choice 0
        assert [b["text"] for b in got["content"]] == (["x"] if kept else [])
        assert bool(t.warnings and "extra choice" in t.warnings[0]) is not kept


@pytest.mark.parametrize(
    "body",
    [
        {"id": "c", "model": "m", "choices": None},
        {"id": "c", "model": "m", "choices": [{"index": 0, "delta": None}]},
        {
            "id": "c",
            "model": "m",
            "choices": [{"index": 0, "delta": None, "finish_reason": "stop"}],
        },
    ],
)
def test_null_choices_or_delta_are_protocol_errors(body: dict[str, Any]) -> None:
    with pytest.raises(errors.ProtocolError, match="is null") as info:
        translate(sse([body]))
    assert info.value.code == "MODEL_PROTOCOL"


def test_missing_choices_or_delta_carry_nothing() -> None:
    usage = {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}
    chunks = [
        chunk({"content": "hi"}),
        {"id": "c1", "model": "m", "choices": [{"index": 0, "finish_reason": "stop"}]},
        {"id": "c1", "model": "m", "usage": usage},
    ]
    got = message(translate(sse(chunks)))
    assert [b["text"] for b in got["content"]] == ["hi"]
    assert got["usage"]["output_tokens"] == 1


@pytest.mark.parametrize("kind", ["ping\nevent: message_stop", "a\rb", ""])
def test_anthropic_reader_refuses_an_event_type_it_could_not_write(kind: str) -> None:
    """A provider event whose type is no one-line string is malformed (ProtocolError):
    passed through, it could not be written as ``event: <type>`` for the caller."""
    reader = AnthropicStreamReader()
    with pytest.raises(errors.ProtocolError, match="one-line string type"):
        reader.feed(b"data: " + orjson.dumps({"type": kind}) + b"\n\n")


def test_a_streamed_message_id_is_of_the_msg_form() -> None:
    events = translate(sse([chunk({"role": "assistant", "content": "hi"}), chunk({}, "stop")]))
    assert events[0]["message"]["id"] == "msg_c1"
