"""The sans-I/O exchange machine, step by step, against spec/TpxTransport.tla."""

from __future__ import annotations

import copy
import pickle
from collections.abc import Callable
from contextlib import nullcontext
from typing import Any

import attrs
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tpx import errors
from tpx.transport.exchange import (
    ANTHROPIC_VERSION,
    Exchange,
    ExchangeSnapshot,
    Provider,
    native_shape,
    select_provider,
)

SECRET = "sk-ant-api03-SECRET-value"

# -- bodies -----------------------------------------------------------------------


def user(*blocks: dict[str, Any] | str) -> dict[str, Any]:
    content: Any = blocks[0] if len(blocks) == 1 and isinstance(blocks[0], str) else list(blocks)
    return {"role": "user", "content": content}


def tool_result(tool_id: str, text: str = "42") -> dict[str, Any]:
    return {"type": "tool_result", "tool_use_id": tool_id, "content": text}


def tool_use(tool_id: str, name: str = "calc") -> dict[str, Any]:
    return {"type": "tool_use", "id": tool_id, "name": name, "input": {"x": 1}}


def request(*messages: dict[str, Any]) -> dict[str, Any]:
    return {
        "model": "claude-test",
        "max_tokens": 64,
        "messages": list(messages) or [user("hi")],
    }


def answer(uses: list[str], results: list[str]) -> dict[str, Any]:
    """A follow-up request: the assistant turn with *uses*, then tool_results for *results*."""
    return request(
        user("hi"),
        {"role": "assistant", "content": [tool_use(i) for i in uses]},
        user(*[tool_result(i) for i in results]) if results else user("go on"),
    )


def messages_reply(*tool_ids: str, text: str = "ok") -> bytes:
    content: list[dict[str, Any]] = [{"type": "text", "text": text}]
    content += [tool_use(i) for i in tool_ids]
    return orjson.dumps(
        {
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "model": "claude-test",
            "content": content,
            "stop_reason": "tool_use" if tool_ids else "end_turn",
            "stop_sequence": None,
            "usage": {"input_tokens": 5, "output_tokens": 2},
        }
    )


def openai_reply(*call_ids: str | None, text: str | None = "ok") -> bytes:
    message: dict[str, Any] = {"role": "assistant", "content": text}
    if call_ids:
        message["tool_calls"] = [
            {
                "id": cid,
                "type": "function",
                "function": {"name": "calc", "arguments": '{"x": 1}'},
            }
            for cid in call_ids
        ]
    return orjson.dumps(
        {
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "model": "tpx-model",
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "finish_reason": "tool_calls" if call_ids else "stop",
                }
            ],
            "usage": {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7},
        }
    )


def turn_with_tools(ex: Exchange, *tool_ids: str) -> dict[str, Any]:
    ex.send(request())
    ex.receive(200, {}, messages_reply(*tool_ids))
    return ex.deliver()


# -- pure helpers -----------------------------------------------------------------


def test_select_is_the_spec_function() -> None:
    assert select_provider(True, True) is Provider.ANTHROPIC
    assert select_provider(True, False) is Provider.ANTHROPIC
    assert select_provider(False, True) is Provider.TPX
    assert select_provider(False, False) is Provider.NONE


def test_native_shape() -> None:
    assert native_shape(Provider.TPX) == "openai"
    assert native_shape(Provider.ANTHROPIC) == "messages"
    assert native_shape(Provider.NONE) == "messages"


def test_init_state_is_the_spec_init() -> None:
    snap = Exchange(Provider.ANTHROPIC).snapshot()
    assert snap == ExchangeSnapshot(
        provider=Provider.ANTHROPIC,
        turn=0,
        phase="idle",
        pending=frozenset(),
        last_outcome="none",
        max_turns=None,
        req_ids=frozenset(),
        wire_shape="messages",
        wire_ids=frozenset(),
        emitted=frozenset(),
        got_shape="messages",
    )


def test_snapshot_is_frozen() -> None:
    snap = Exchange(Provider.TPX).snapshot()
    with pytest.raises(AttributeError):
        snap.turn = 3  # type: ignore[misc]


def test_provider_is_read_only() -> None:
    ex = Exchange(Provider.ANTHROPIC)
    with pytest.raises(AttributeError):
        ex.provider = Provider.TPX  # type: ignore[misc]
    with pytest.raises(AttributeError):
        ex.anything = 1  # type: ignore[attr-defined]


def test_constructor_validation() -> None:
    with pytest.raises(TypeError):
        Exchange("ANTHROPIC")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="max_turns"):
        Exchange(Provider.TPX, max_turns=-1)


# -- CallerSend / ProviderReply / Deliver (ANTHROPIC) -------------------------------


def test_send_frames_natively_without_credentials() -> None:
    ex = Exchange(Provider.ANTHROPIC, secrets=[SECRET])
    body = request()
    out = ex.send(body)
    assert (out.method, out.path) == ("POST", "/v1/messages")
    headers = out.header_dict()
    assert headers["anthropic-version"] == ANTHROPIC_VERSION
    assert headers["content-type"] == "application/json"
    assert not {"x-api-key", "authorization"} & {k.lower() for k in headers}
    assert orjson.loads(out.body) == body
    assert SECRET.encode() not in out.body
    snap = ex.snapshot()
    assert (snap.phase, snap.turn, snap.wire_shape, snap.req_ids) == (
        "req",
        0,
        "messages",
        frozenset(),
    )
    assert ex.enabled_actions() == {"ProviderReply", "ProviderFail"}


def test_reply_then_deliver() -> None:
    ex = Exchange(Provider.ANTHROPIC)
    ex.send(request())
    ex.receive(200, {"content-type": "application/json"}, messages_reply("toolu_a", "toolu_b"))
    snap = ex.snapshot()
    assert snap.phase == "resp"
    assert snap.emitted == snap.wire_ids == {"toolu_a", "toolu_b"}
    assert snap.pending == frozenset()
    assert ex.enabled_actions() == {"Deliver"}
    body = ex.deliver()
    assert body["type"] == "message"
    assert [b["id"] for b in body["content"] if b["type"] == "tool_use"] == ["toolu_a", "toolu_b"]
    snap = ex.snapshot()
    assert (snap.phase, snap.turn, snap.last_outcome, snap.got_shape) == (
        "idle",
        1,
        "ok",
        "messages",
    )
    assert snap.pending == snap.emitted == {"toolu_a", "toolu_b"}
    assert ex.enabled_actions() == {"CallerSend", "CallerAbort"}


def test_answering_every_pending_tool_use_is_sent() -> None:
    ex = Exchange(Provider.ANTHROPIC)
    turn_with_tools(ex, "toolu_a", "toolu_b")
    out = ex.send(answer(["toolu_a", "toolu_b"], ["toolu_b", "toolu_a"]))
    assert out.path == "/v1/messages"
    snap = ex.snapshot()
    assert snap.phase == "req"
    assert snap.req_ids == snap.wire_ids == snap.pending == {"toolu_a", "toolu_b"}


def test_deliver_bytes_and_send_bytes() -> None:
    ex = Exchange(Provider.ANTHROPIC)
    out = ex.send_bytes(orjson.dumps(request()))
    assert orjson.loads(out.body) == request()
    ex.receive(201, {}, messages_reply())
    assert orjson.loads(ex.deliver_bytes())["content"][0]["text"] == "ok"
    assert ex.turn == 1


@pytest.mark.parametrize("raw", [b"{nope", b"[1]"])
def test_send_bytes_rejects_non_objects_without_change(raw: bytes) -> None:
    ex = Exchange(Provider.ANTHROPIC)
    with pytest.raises(errors.UnsupportedError):
        ex.send_bytes(raw)
    assert ex.snapshot() == Exchange(Provider.ANTHROPIC).snapshot()


# -- pairing ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("results", "needle"),
    [
        (["toolu_a"], "no tool_result for tool_use ids ['toolu_b']"),  # missing
        ([], "no tool_result for tool_use ids ['toolu_a', 'toolu_b']"),  # none at all
        (["toolu_a", "toolu_b", "toolu_b"], "duplicated tool_result ids ['toolu_b']"),
        (["toolu_a", "toolu_x"], "['toolu_x'] answer no pending tool_use"),  # unknown
        (["toolu_a", "toolu_b", "toolu_c"], "['toolu_c'] answer no pending tool_use"),  # extra
    ],
)
def test_pairing_violation_aborts_and_sends_nothing(results: list[str], needle: str) -> None:
    ex = Exchange(Provider.ANTHROPIC)
    turn_with_tools(ex, "toolu_a", "toolu_b")
    with pytest.raises(errors.PairingError, match="aborted") as info:
        ex.send(answer(["toolu_a", "toolu_b"], results))
    assert needle in info.value.message
    assert info.value.body()["error"]["type"] == "invalid_request_error"
    snap = ex.snapshot()
    # CallerAbort: turn+1, err, pending cleared, phase unchanged (nothing sent).
    assert (snap.phase, snap.turn, snap.last_outcome, snap.pending) == (
        "idle",
        2,
        "err",
        frozenset(),
    )
    # The next request, answering nothing, goes out.
    assert ex.send(request()).path == "/v1/messages"


def test_tool_result_with_nothing_pending_changes_nothing() -> None:
    ex = Exchange(Provider.ANTHROPIC)
    before = ex.snapshot()
    with pytest.raises(errors.PairingError, match="nothing was sent") as info:
        ex.send(answer(["toolu_a"], ["toolu_a"]))
    assert "aborted" not in info.value.message
    assert ex.snapshot() == before  # the spec enables no CallerAbort with pending = {}


def test_only_the_last_user_message_counts() -> None:
    ex = Exchange(Provider.ANTHROPIC)
    turn_with_tools(ex, "toolu_c")
    body = answer(["toolu_a"], ["toolu_a"])  # an old, answered pair in the history
    body["messages"] += [
        {"role": "assistant", "content": [tool_use("toolu_c")]},
        user(tool_result("toolu_c")),
    ]
    ex.send(body)
    assert ex.snapshot().req_ids == {"toolu_c"}


def test_explicit_abort() -> None:
    ex = Exchange(Provider.ANTHROPIC)
    with pytest.raises(errors.ExchangeStateError, match="CallerAbort"):
        ex.abort()  # nothing pending: not enabled
    turn_with_tools(ex, "toolu_a")
    error = ex.abort()
    assert isinstance(error, errors.PairingError)
    assert "toolu_a" in error.message
    snap = ex.snapshot()
    assert (snap.turn, snap.last_outcome, snap.pending, snap.phase) == (
        2,
        "err",
        frozenset(),
        "idle",
    )


def test_streaming_request_is_framed_and_needs_the_stream_steps() -> None:
    ex = Exchange(Provider.ANTHROPIC)
    out = ex.send({**request(), "stream": True})
    assert orjson.loads(out.body)["stream"] is True
    assert out.header_dict()["accept"] == "text/event-stream"
    assert ex.streaming
    before = ex.snapshot()
    with pytest.raises(errors.ExchangeStateError):
        ex.receive(200, {}, messages_reply())  # a streamed reply is fed, not received whole
    with pytest.raises(errors.ExchangeStateError):
        ex.feed(b"data: {}\n\n")  # no receive_stream_start yet
    assert ex.snapshot() == before


def test_stream_steps_refused_for_a_non_streaming_request() -> None:
    ex = Exchange(Provider.TPX)
    ex.send(request())
    assert not ex.streaming
    with pytest.raises(errors.ExchangeStateError):
        ex.receive_stream_start(200, {})
    with pytest.raises(errors.ExchangeStateError):
        ex.end_stream()
    assert ex.phase == "req"


def test_request_without_messages_is_refused_without_change() -> None:
    ex = Exchange(Provider.ANTHROPIC)
    with pytest.raises(errors.ProtocolError):
        ex.send({"model": "m"})
    with pytest.raises(TypeError):
        ex.send([])  # type: ignore[arg-type]
    assert ex.phase == "idle"
    assert ex.turn == 0


# -- NoProvider -----------------------------------------------------------------------


def test_no_provider_step() -> None:
    ex = Exchange(Provider.NONE)
    assert ex.enabled_actions() == {"NoProvider"}
    with pytest.raises(errors.ExchangeStateError, match="CallerSend"):
        ex.send(request())
    error = ex.no_provider()
    assert isinstance(error, errors.UnauthorizedError)
    assert error.status == 401
    assert error.body()["error"]["type"] == "authentication_error"
    snap = ex.snapshot()
    assert (snap.turn, snap.last_outcome, snap.phase) == (1, "err", "idle")


def test_no_provider_refused_with_a_provider() -> None:
    ex = Exchange(Provider.TPX)
    with pytest.raises(errors.ExchangeStateError, match="NoProvider"):
        ex.no_provider()
    assert ex.turn == 0


# -- ProviderFail -----------------------------------------------------------------------


def _in_req(pending: tuple[str, ...] = ()) -> Exchange:
    ex = Exchange(Provider.ANTHROPIC, secrets=[SECRET])
    if pending:
        turn_with_tools(ex, *pending)
        ex.send(answer(list(pending), list(pending)))
    else:
        ex.send(request())
    return ex


def _assert_failed(ex: Exchange, turn: int) -> None:
    snap = ex.snapshot()
    assert (snap.phase, snap.turn, snap.last_outcome, snap.pending) == (
        "idle",
        turn,
        "err",
        frozenset(),
    )


@pytest.mark.parametrize(
    ("status", "cls"),
    [
        (401, errors.UnauthorizedError),
        (403, errors.UnauthorizedError),
        (429, errors.RateLimitedError),
        (503, errors.OverloadedError),
        (529, errors.OverloadedError),
        (500, errors.HTTPStatusError),
        (400, errors.HTTPStatusError),
        (302, errors.HTTPStatusError),
    ],
)
def test_non_2xx_is_provider_fail(status: int, cls: type[errors.ModelError]) -> None:
    ex = _in_req(("toolu_a",))
    body = orjson.dumps({"type": "error", "error": {"type": "api_error", "message": "nope"}})
    with pytest.raises(cls) as info:
        ex.receive(status, {"retry-after": "3"}, body)
    assert info.value.status == status
    assert info.value.provider == "ANTHROPIC"
    assert info.value.message.endswith("nope")
    _assert_failed(ex, 2)


def test_retry_after_kept_through_receive() -> None:
    ex = _in_req()
    with pytest.raises(errors.RateLimitedError) as info:
        ex.receive(429, {"Retry-After": "30"}, b"{}")
    assert info.value.retry_after == 30.0


def test_error_body_echoing_the_key_is_redacted() -> None:
    ex = _in_req()
    body = orjson.dumps({"error": {"message": f"bad key {SECRET}", "type": "x", "code": 1}})
    with pytest.raises(errors.UnauthorizedError) as info:
        ex.receive(401, {}, body)
    assert SECRET not in str(info.value)
    assert SECRET not in repr(info.value)
    assert SECRET not in orjson.dumps(info.value.body()).decode()
    assert SECRET not in repr(ex)


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        (b"<html>oops</html>", "not JSON"),
        (b"[]", "not a JSON object"),
        (b'{"type": "error", "error": {"type": "api_error", "message": "m"}}', "type is 'error'"),
        (b'{"type": "message", "role": "user", "content": []}', "role is 'user'"),
        (b'{"type": "message", "role": "assistant", "content": "text"}', "not a list"),
        (b'{"type": "message", "role": "assistant", "content": [{"text": "x"}]}', "without a type"),
        (messages_reply("bad id!"), "invalid id"),
        (messages_reply("toolu_a", "toolu_a"), "duplicated tool_use ids"),
        (
            b'{"type": "message", "role": "assistant", "content": '
            b'[{"type": "tool_use", "id": "t1", "name": "f", "input": []}]}',
            "input must be an object",
        ),
        # An OpenAI body from the Anthropic provider is not its native shape.
        (openai_reply(), "type is None"),
    ],
)
def test_bad_2xx_body_is_protocol_fail(body: bytes, needle: str) -> None:
    ex = _in_req(("toolu_z",))
    with pytest.raises(errors.ProtocolError) as info:
        ex.receive(200, {}, body)
    assert needle in info.value.message
    assert info.value.code == "MODEL_PROTOCOL"
    _assert_failed(ex, 2)


@pytest.mark.parametrize(
    "error",
    [
        errors.TimeoutError("read timeout"),
        errors.NetworkError("reset"),
        errors.TLSError("bad cert"),
    ],
)
def test_fail_step(error: errors.ModelError) -> None:
    ex = _in_req(("toolu_a",))
    assert ex.fail(error) is error
    assert error.provider == "ANTHROPIC"
    _assert_failed(ex, 2)


def test_fail_redacts_and_checks_type() -> None:
    ex = _in_req()
    with pytest.raises(TypeError):
        ex.fail(ValueError("x"))  # type: ignore[arg-type]
    assert ex.phase == "req"
    error = ex.fail(errors.NetworkError(f"peer said {SECRET}"))
    assert SECRET not in str(error)
    assert SECRET not in error.message


def test_fail_and_receive_redact_escaped_forms_of_the_secret() -> None:
    secret = "tok\nSECRET-é"
    for render in (repr(secret), repr(secret.encode()), orjson.dumps(secret).decode()):
        ex = Exchange(Provider.TPX, secrets=[secret])
        ex.send(request(user("hi")))
        error = ex.fail(errors.NetworkError(f"peer said {render}"))
        assert "SECRET" not in error.message
        assert "[REDACTED]" in error.message
    ex = Exchange(Provider.ANTHROPIC, secrets=[secret])
    ex.send(request(user("hi")))
    echo = orjson.dumps({"type": "error", "error": {"type": "api_error", "message": repr(secret)}})
    with pytest.raises(errors.HTTPStatusError) as info:
        ex.receive(500, {}, echo)
    assert "SECRET" not in info.value.message


# -- steps out of order -----------------------------------------------------------------

Step = Callable[[Exchange], object]
STEPS: dict[str, Step] = {
    "send": lambda ex: ex.send(answer(sorted(ex.pending), sorted(ex.pending))),
    "abort": lambda ex: ex.abort(),
    "no_provider": lambda ex: ex.no_provider(),
    "receive": lambda ex: ex.receive(200, {}, messages_reply()),
    "fail": lambda ex: ex.fail(errors.NetworkError("x")),
    "deliver": lambda ex: ex.deliver(),
}


def _at(phase: str, observer: Callable[[str, ExchangeSnapshot], None] | None = None) -> Exchange:
    ex = Exchange(Provider.ANTHROPIC, observer=observer)
    turn_with_tools(ex, "toolu_a")  # idle with something pending: send and abort enabled
    if phase in ("req", "resp"):
        ex.send(answer(["toolu_a"], ["toolu_a"]))
    if phase == "resp":
        ex.receive(200, {}, messages_reply())
    return ex


ALLOWED = {
    "idle": {"send", "abort"},
    "req": {"receive", "fail"},
    "resp": {"deliver"},
}


@pytest.mark.parametrize("phase", ["idle", "req", "resp"])
@pytest.mark.parametrize("step", sorted(STEPS))
def test_out_of_order_steps_are_refused_and_change_nothing(phase: str, step: str) -> None:
    ex = _at(phase)
    before = ex.snapshot()
    if step in ALLOWED[phase]:
        STEPS[step](ex)
        assert ex.snapshot() != before
    else:
        with pytest.raises(errors.ExchangeStateError, match="is not enabled"):
            STEPS[step](ex)
        assert ex.snapshot() == before


def test_max_turns_bound_and_halted() -> None:
    ex = Exchange(Provider.ANTHROPIC, max_turns=2)
    turn_with_tools(ex, "toolu_a")
    ex.abort()
    assert ex.turn == 2
    assert ex.halted
    assert ex.enabled_actions() == {"Halted"}
    before = ex.snapshot()
    for step in ("send", "abort"):
        with pytest.raises(errors.ExchangeStateError):
            STEPS[step](ex)
    assert ex.snapshot() == before


def test_max_turns_zero_and_no_provider_bound() -> None:
    ex = Exchange(Provider.NONE, max_turns=1)
    ex.no_provider()
    with pytest.raises(errors.ExchangeStateError):
        ex.no_provider()
    assert Exchange(Provider.ANTHROPIC, max_turns=0).halted
    assert not Exchange(Provider.ANTHROPIC).halted


# -- TPX ----------------------------------------------------------------------------------


def test_tpx_send_translates_without_credentials() -> None:
    ex = Exchange(Provider.TPX, model="tpx-model", secrets=["tok-SECRET"])
    out = ex.send({**request(), "system": "be brief"})
    assert out.path == "/v1/chat/completions"
    headers = out.header_dict()
    assert "anthropic-version" not in headers
    assert not {"x-api-key", "authorization"} & set(headers)
    body = orjson.loads(out.body)
    assert body["model"] == "tpx-model"
    assert body["messages"][0] == {"role": "system", "content": "be brief"}
    assert ex.snapshot().wire_shape == "openai"


def test_tpx_tool_ids_round_trip_to_the_providers_ids() -> None:
    ex = Exchange(Provider.TPX)
    ex.send(request())
    ex.receive(200, {}, openai_reply("call_1", "", "call 2/x", text=None))
    snap = ex.snapshot()
    assert snap.emitted == snap.wire_ids == {"call_1", "", "call 2/x"}
    body = ex.deliver()
    assert body["type"] == "message"
    assert body["stop_reason"] == "tool_use"
    caller_ids = [b["id"] for b in body["content"] if b["type"] == "tool_use"]
    assert len(set(caller_ids)) == 3
    assert ex.pending == set(caller_ids)
    follow_up = request(
        user("hi"),
        {"role": "assistant", "content": [b for b in body["content"] if b["type"] == "tool_use"]},
        user(*[tool_result(i) for i in reversed(caller_ids)]),
    )
    out = ex.send(follow_up)
    wire = orjson.loads(out.body)["messages"]
    assert [c["id"] for c in wire[-4]["tool_calls"]] == ["call_1", "", "call 2/x"]
    assert sorted(m["tool_call_id"] for m in wire[-3:]) == ["", "call 2/x", "call_1"]
    snap = ex.snapshot()
    assert snap.req_ids == snap.pending == set(caller_ids)
    assert snap.wire_ids == {"call_1", "", "call 2/x"}


def test_tpx_tool_results_before_a_prefill_are_carried() -> None:
    """A request answering the tool_uses and ending with a prefill (a trailing assistant
    text) is sent: the results answer the assistant turn before the prefill."""
    ex = Exchange(Provider.TPX)
    ex.send(request())
    ex.receive(200, {}, openai_reply("call_1", text=None))
    (use,) = [b for b in ex.deliver()["content"] if b["type"] == "tool_use"]
    result = {"type": "tool_result", "tool_use_id": use["id"], "content": "ok"}
    follow_up = request(
        user("hi"),
        {"role": "assistant", "content": [use]},
        {"role": "user", "content": [result]},
        {"role": "assistant", "content": "Sure,"},
    )
    ex.send(follow_up)
    assert ex.snapshot().wire_ids == {"call_1"}


def test_tpx_legacy_function_call_reply_is_one_tool_use() -> None:
    """A non-streamed reply with the legacy ``message.function_call`` (no tool_calls) is
    one call without an id: a ProviderReply, not a translation mismatch."""
    ex = Exchange(Provider.TPX)
    ex.send(request())
    call = {"name": "probe", "arguments": '{"a": 1}'}
    message = {"role": "assistant", "content": None, "function_call": call}
    reply = {"id": "c", "model": "m", "choices": [{"index": 0, "message": message}]}
    ex.receive(200, {}, orjson.dumps(reply))
    assert ex.snapshot().wire_ids == {""}
    body = ex.deliver()
    (use,) = [b for b in body["content"] if b["type"] == "tool_use"]
    assert use["input"] == {"a": 1}
    assert ex.pending == {use["id"]}


def test_tpx_repeated_provider_ids_stay_distinct_for_the_caller() -> None:
    ex = Exchange(Provider.TPX)
    ex.send(request())
    ex.receive(200, {}, openai_reply("dup", "dup"))
    body = ex.deliver()
    ids = [b["id"] for b in body["content"] if b["type"] == "tool_use"]
    assert len(set(ids)) == 2
    out = ex.send(answer(ids, ids))
    wire = orjson.loads(out.body)["messages"]
    assert [m["tool_call_id"] for m in wire if m["role"] == "tool"] == ["dup", "dup"]


def test_tpx_missing_model_reports_the_model_sent() -> None:
    ex = Exchange(Provider.TPX, model="wire-model")
    ex.send(request())
    reply = orjson.loads(openai_reply())
    del reply["model"]
    ex.receive(200, {}, orjson.dumps(reply))
    assert ex.deliver()["model"] == "wire-model"


@pytest.mark.parametrize(
    "body",
    [
        messages_reply(),  # the Anthropic shape from the TPX provider
        b'{"choices": []}',
        b'{"error": {"message": "overloaded", "type": "server_error"}}',
        orjson.dumps(
            {
                "choices": [
                    {
                        "index": 0,
                        "message": {
                            "role": "assistant",
                            "content": None,
                            "tool_calls": [
                                {
                                    "id": "c1",
                                    "type": "function",
                                    "function": {"name": "f", "arguments": "{not json"},
                                }
                            ],
                        },
                        "finish_reason": "tool_calls",
                    }
                ]
            }
        ),
    ],
)
def test_tpx_bad_bodies_are_protocol_fail(body: bytes) -> None:
    ex = Exchange(Provider.TPX)
    ex.send(request())
    with pytest.raises(errors.ProtocolError) as info:
        ex.receive(200, {}, body)
    assert info.value.provider == "TPX"
    _assert_failed(ex, 1)


def test_tpx_error_status_reads_openai_error_body() -> None:
    ex = Exchange(Provider.TPX)
    ex.send(request())
    body = orjson.dumps({"error": {"message": "slow down", "type": "rate_limit", "code": "429"}})
    with pytest.raises(errors.RateLimitedError) as info:
        ex.receive(429, {"retry-after-ms": "250"}, body)
    assert info.value.message == "TPX returned HTTP 429: slow down"
    assert info.value.retry_after == 0.25
    _assert_failed(ex, 1)


def test_tpx_unsupported_request_changes_nothing() -> None:
    ex = Exchange(Provider.TPX)
    url_pdf = {"type": "document", "source": {"type": "url", "url": "https://x.test/a.pdf"}}
    bad = request(user(url_pdf))
    with pytest.raises((errors.UnsupportedError, errors.ProtocolError)):
        ex.send(bad)
    assert ex.snapshot() == Exchange(Provider.TPX).snapshot()


def test_tpx_translation_dropping_a_tool_result_is_caught(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from tpx.transport.translate import Translation
    from tpx.transport.translate import request_to_openai as real

    def lossy(req: Any, *, model: str | None = None, **options: Any) -> Translation:
        body = real(req, model=model, **options).body
        body["messages"] = [m for m in body["messages"] if m.get("role") != "tool"]
        return Translation(body, ())

    ex = Exchange(Provider.TPX)
    ex.send(request())
    ex.receive(200, {}, openai_reply("c1"))
    ids = [b["id"] for b in ex.deliver()["content"] if b["type"] == "tool_use"]
    monkeypatch.setattr("tpx.transport.exchange.translate_checked", lossy)
    before = ex.snapshot()
    with pytest.raises(errors.ProtocolError, match="carries 0 tool results on the wire for 1"):
        ex.send(answer(ids, ids))
    assert ex.snapshot() == before


# -- a random walk checks the spec's invariants on the concrete machine ---------------

ACTIONS = st.lists(
    st.tuples(
        st.sampled_from(["send_ok", "send_bad", "abort", "reply", "fail", "http_err", "deliver"]),
        st.frozensets(st.sampled_from(["t1", "t2"])),
    ),
    max_size=30,
)


@settings(max_examples=150, deadline=None)
@given(
    provider=st.sampled_from([Provider.ANTHROPIC, Provider.NONE]),
    max_turns=st.one_of(st.none(), st.integers(0, 5)),
    walk=ACTIONS,
)
def test_random_walk_keeps_the_invariants(
    provider: Provider, max_turns: int | None, walk: list[tuple[str, frozenset[str]]]
) -> None:
    ex = Exchange(provider, max_turns=max_turns)
    for action, ids in walk:
        before = ex.snapshot()
        try:
            if action == "send_ok":
                if provider is Provider.NONE:
                    ex.no_provider()
                else:
                    ex.send(answer(sorted(ex.pending), sorted(ex.pending)))
            elif action == "send_bad":
                ex.send(answer(sorted(ids), sorted(ids)))
            elif action == "abort":
                ex.abort()
            elif action == "reply":
                ex.receive(200, {}, messages_reply(*sorted(ids)))
            elif action == "fail":
                ex.fail(errors.TimeoutError("t"))
            elif action == "http_err":
                ex.receive(500, {}, b"")
            else:
                ex.deliver()
        except errors.ExchangeStateError:
            assert ex.snapshot() == before
        except errors.PairingError:
            # CallerAbort when something was pending, otherwise no spec action: no change.
            assert ex.snapshot() == before if not before.pending else ex.last_outcome == "err"
        except errors.ModelError:
            assert ex.last_outcome == "err"
        snap = ex.snapshot()
        assert snap.turn - before.turn in (0, 1)
        if max_turns is not None:
            assert snap.turn <= max_turns  # BoundedInv
        assert snap.got_shape == "messages"  # ShapeInv
        if snap.phase == "req":  # PairingInv
            assert snap.wire_ids == snap.req_ids == snap.pending
        if snap.phase == "resp":
            assert snap.wire_ids == snap.emitted
        if snap.phase == "idle" and snap.last_outcome == "ok":
            assert snap.pending == snap.emitted
        if provider is Provider.NONE:
            assert snap.phase == "idle"


# -- lockstep with the Python mirror of the spec (tpx.oracle.model) --------------------------------


def _project(ex: Exchange) -> dict[str, Any]:
    """The exchange's state in the spec's terms (caller ids decoded to provider ids)."""
    from tpx.transport.translate.ids import wire_id

    def names(ids: frozenset[str], decode: bool) -> frozenset[str | None]:
        return frozenset(wire_id(i) if decode else i for i in ids)

    snap = ex.snapshot()
    return {
        "provider": snap.provider.name,
        "turn": snap.turn,
        "phase": snap.phase,
        "pending": names(snap.pending, True),
        "reqIds": names(snap.req_ids, True),
        "wireShape": snap.wire_shape,
        "wireIds": names(snap.wire_ids, False),
        "emitted": names(snap.emitted, False),
        "gotShape": snap.got_shape,
        "lastOutcome": snap.last_outcome,
    }


def _spec_view(state: Any) -> dict[str, Any]:
    def names(ids: frozenset[Any]) -> frozenset[str | None]:
        return frozenset(str(i) for i in ids)

    return {
        "provider": str(state.provider),
        "turn": state.turn,
        "phase": state.phase,
        "pending": names(state.pending),
        "reqIds": names(state.reqIds),
        "wireShape": state.wireShape,
        "wireIds": names(state.wireIds),
        "emitted": names(state.emitted),
        "gotShape": state.gotShape,
        "lastOutcome": state.lastOutcome,
    }


def _step(ex: Exchange, action: str, successor: Any) -> None:
    if action == "CallerSend":
        pending = sorted(ex.pending)
        ex.send(answer(pending, pending))
    elif action == "CallerAbort":
        ex.abort()
    elif action == "NoProvider":
        ex.no_provider()
    elif action == "ProviderReply":
        ids = sorted(str(i) for i in successor.emitted)
        if ex.provider is Provider.TPX:
            ex.receive(200, {}, openai_reply(*ids))
        else:
            ex.receive(200, {}, messages_reply(*ids))
    elif action == "ProviderFail":
        ex.fail(errors.NetworkError("down"))
    elif action == "Deliver":
        ex.deliver()
    else:
        assert action == "Halted"
        assert ex.halted


def test_every_spec_behaviour_is_an_exchange_behaviour() -> None:
    """BFS over the spec's state space (ToolIds={t1,t2}, MaxTurns=3); replay each path."""
    from tpx.oracle.model.actions import Init, Next
    from tpx.oracle.model.state import Config

    config = Config.of(2, 3)
    frontier: list[tuple[Any, tuple[tuple[str, Any], ...]]] = [(s, ()) for s in Init(config)]
    reached = {s for s, _ in frontier}
    checked = 0
    while frontier:
        state, path = frontier.pop()
        seen = Seen()
        ex = Exchange(
            select_provider(state.hasKey, state.hasToken),
            max_turns=config.MaxTurns,
            observer=seen,
        )
        for action, successor in path:
            _step(ex, action, successor)
        assert _project(ex) == _spec_view(state), path
        assert seen.actions == [action for action, _ in path]  # the observer names each step
        moves = list(Next(state, config))
        assert ex.enabled_actions() == {name for name, _ in moves}
        checked += 1
        for action, successor in moves:
            if successor not in reached:
                reached.add(successor)
                frontier.append((successor, (*path, (action, successor))))
    assert checked == len(reached) > 100


# -- the observer ------------------------------------------------------------------------


class Seen:
    """An observer recording every (action, snapshot) it is shown."""

    def __init__(self, ex: Exchange | None = None) -> None:
        self.calls: list[tuple[str, ExchangeSnapshot]] = []
        self.ex = ex

    def __call__(self, action: str, snapshot: ExchangeSnapshot) -> None:
        if self.ex is not None:  # the step is complete when the observer runs
            assert snapshot == self.ex.snapshot()
        self.calls.append((action, snapshot))

    @property
    def actions(self) -> list[str]:
        return [action for action, _ in self.calls]


def observed(provider: Provider, **kw: Any) -> tuple[Exchange, Seen]:
    seen = Seen()
    ex = Exchange(provider, observer=seen, **kw)
    seen.ex = ex
    return ex, seen


@pytest.mark.parametrize("provider", [Provider.ANTHROPIC, Provider.TPX])
def test_observer_sees_each_action_of_a_turn_with_the_state_after_it(provider: Provider) -> None:
    ex, seen = observed(provider)
    ex.send(request())
    assert seen.actions == ["CallerSend"]
    assert (seen.calls[-1][1].phase, seen.calls[-1][1].wire_shape) == (
        "req",
        native_shape(provider),
    )
    reply = messages_reply("toolu_a") if provider is Provider.ANTHROPIC else openai_reply("c_a")
    ex.receive(200, {}, reply)
    assert seen.actions == ["CallerSend", "ProviderReply"]
    assert seen.calls[-1][1].phase == "resp"
    assert len(seen.calls[-1][1].emitted) == 1
    body = ex.deliver()
    assert seen.actions == ["CallerSend", "ProviderReply", "Deliver"]
    last = seen.calls[-1][1]
    assert (last.phase, last.turn, last.last_outcome) == ("idle", 1, "ok")
    assert last.pending == {b["id"] for b in body["content"] if b["type"] == "tool_use"}
    assert ex.snapshot() == last


@pytest.mark.parametrize(
    ("name", "fail"),
    [
        ("http 500", lambda ex: ex.receive(500, {}, b'{"error": {"message": "x"}}')),
        ("bad body", lambda ex: ex.receive(200, {}, b'{"type": "nope"}')),
        ("fail()", lambda ex: ex.fail(errors.TimeoutError("slow"))),
    ],
)
def test_observer_sees_provider_fail(name: str, fail: Step) -> None:
    ex, seen = observed(Provider.ANTHROPIC)
    ex.send(request())
    with pytest.raises(errors.ModelError) if name != "fail()" else nullcontext():
        fail(ex)
    assert seen.actions == ["CallerSend", "ProviderFail"], name
    last = seen.calls[-1][1]
    assert (last.phase, last.turn, last.last_outcome, last.pending) == (
        "idle",
        1,
        "err",
        frozenset(),
    )


def test_observer_sees_no_provider_and_caller_abort() -> None:
    ex, seen = observed(Provider.NONE)
    ex.no_provider()
    assert seen.actions == ["NoProvider"]
    ex, seen = observed(Provider.ANTHROPIC)
    turn_with_tools(ex, "toolu_a")
    ex.abort()
    assert seen.actions == ["CallerSend", "ProviderReply", "Deliver", "CallerAbort"]
    turn_with_tools(ex, "toolu_b")
    with pytest.raises(errors.PairingError):
        ex.send(answer(["toolu_b"], []))  # leaves toolu_b unanswered: the send aborts
    assert seen.actions[-2:] == ["Deliver", "CallerAbort"]
    assert seen.calls[-1][1] == ex.snapshot()
    assert (ex.turn, ex.last_outcome, ex.pending) == (4, "err", frozenset())


def test_observer_is_not_called_when_nothing_changes() -> None:
    ex, seen = observed(Provider.TPX)
    with pytest.raises(errors.PairingError):
        ex.send(answer(["toolu_x"], ["toolu_x"]))  # nothing pending: no abort either
    with pytest.raises(TypeError):
        ex.send([])  # type: ignore[arg-type]
    with pytest.raises(errors.UnsupportedError):
        ex.send_bytes(b"{nope")
    url_pdf = {"type": "document", "source": {"type": "url", "url": "https://x.test/a.pdf"}}
    with pytest.raises((errors.UnsupportedError, errors.ProtocolError)):
        ex.send(request(user(url_pdf)))
    assert seen.calls == []
    ex.send({**request(), "stream": True})
    ex.receive_stream_start(200, {"content-type": "text/event-stream"})  # no action
    assert ex.feed(b'data: {"id": "c", "object": "chat.completion.chunk", "choices": [') == []
    assert seen.actions == ["CallerSend"]


@pytest.mark.parametrize("phase", ["idle", "req", "resp"])
@pytest.mark.parametrize("step", sorted(STEPS))
def test_observer_is_called_once_per_step_and_never_for_a_refused_one(
    phase: str, step: str
) -> None:
    seen = Seen()
    ex = _at(phase, seen)
    seen.ex, seen.calls = ex, []  # observed from here on
    names = {
        "send": "CallerSend",
        "abort": "CallerAbort",
        "receive": "ProviderReply",
        "fail": "ProviderFail",
        "deliver": "Deliver",
    }
    if step in ALLOWED[phase]:
        STEPS[step](ex)
        assert seen.actions == [names[step]]
    else:
        with pytest.raises(errors.ExchangeStateError):
            STEPS[step](ex)
        assert seen.calls == []


class Boom(Exception):
    pass


def raising_at(action: str, calls: list[str]) -> Callable[[str, ExchangeSnapshot], None]:
    def observer(name: str, snapshot: ExchangeSnapshot) -> None:
        calls.append(name)
        if name == action:
            raise Boom(name)

    return observer


#: (action the observer raises at, the steps up to it, the state after it, the next step)
RAISING: dict[str, tuple[list[str], tuple[str, int, str], str]] = {
    "CallerSend": (["send"], ("req", 0, "none"), "receive"),
    "ProviderReply": (["send", "receive"], ("resp", 0, "none"), "deliver"),
    "Deliver": (["send", "receive", "deliver"], ("idle", 1, "ok"), "abort"),
    "ProviderFail": (["send", "receive 503"], ("idle", 1, "err"), "send"),
    "CallerAbort": (["send", "receive", "deliver", "send"], ("idle", 2, "err"), "send"),
}
TAKE: dict[str, Step] = {
    "send": lambda ex: ex.send(request()),
    "receive": lambda ex: ex.receive(200, {}, messages_reply("toolu_a")),
    "receive 503": lambda ex: ex.receive(503, {}, b"{}"),
    "deliver": lambda ex: ex.deliver(),
    "abort": lambda ex: ex.abort(),
}


@pytest.mark.parametrize("action", sorted(RAISING))
def test_an_observer_exception_propagates_after_the_step_is_complete(action: str) -> None:
    calls: list[str] = []
    ex = Exchange(Provider.ANTHROPIC, observer=raising_at(action, calls))
    steps, after, following = RAISING[action]
    for take in steps[:-1]:
        TAKE[take](ex)
    with pytest.raises(Boom):  # in place of the step's result or of the error it raises
        TAKE[steps[-1]](ex)
    assert calls[-1] == action
    assert len(calls) == len(steps)  # one call per step taken
    assert (ex.phase, ex.turn, ex.last_outcome) == after  # the step is complete
    if action == "ProviderFail":
        assert isinstance(ex.last_error, errors.OverloadedError)
    if action == "CallerAbort":
        assert ex.pending == frozenset()
    TAKE[following](ex)  # and the exchange takes the next step as usual
    assert len(calls) == len(steps) + 1
    assert calls[-1] != action


def test_no_provider_observer_exception_keeps_the_step() -> None:
    calls: list[str] = []
    ex = Exchange(Provider.NONE, max_turns=2, observer=raising_at("NoProvider", calls))
    with pytest.raises(Boom):
        ex.no_provider()
    assert (ex.turn, ex.last_outcome, calls) == (1, "err", ["NoProvider"])


def test_the_observer_cannot_take_steps() -> None:
    refused: list[Exception] = []

    def observer(action: str, snapshot: ExchangeSnapshot) -> None:
        assert ex.enabled_actions()  # reading is fine
        if action == "ProviderReply":
            try:
                ex.deliver()
            except errors.ExchangeStateError as exc:
                refused.append(exc)

    ex = Exchange(Provider.ANTHROPIC, observer=observer)
    ex.send(request())
    ex.receive(200, {}, messages_reply())
    assert len(refused) == 1
    assert "observer" in str(refused[0])
    assert ex.phase == "resp"
    ex.deliver()  # outside the observer: as usual
    assert (ex.phase, ex.turn) == ("idle", 1)


def test_observer_must_be_callable() -> None:
    with pytest.raises(TypeError, match="observer"):
        Exchange(Provider.TPX, observer="print")  # type: ignore[arg-type]


@pytest.mark.parametrize("provider", [Provider.ANTHROPIC, Provider.TPX])
def test_the_observer_gets_no_credentials(provider: Provider) -> None:
    ex, seen = observed(provider, secrets=[SECRET])
    for _ in range(2):
        ex.send(request())
        ex.receive(200, {}, messages_reply() if provider is Provider.ANTHROPIC else openai_reply())
        ex.deliver()
    ex.send(request())
    with pytest.raises(errors.ModelError):
        ex.receive(401, {}, orjson.dumps({"error": {"message": f"bad key {SECRET}"}}))
    assert seen.actions[-2:] == ["CallerSend", "ProviderFail"]
    for action, snapshot in seen.calls:
        rendered = repr(snapshot) + repr(attrs.asdict(snapshot, recurse=True)) + action
        assert SECRET not in rendered
        assert set(attrs.fields_dict(ExchangeSnapshot)) == {
            "provider",
            "turn",
            "phase",
            "pending",
            "last_outcome",
            "max_turns",
            "req_ids",
            "wire_shape",
            "wire_ids",
            "emitted",
            "got_shape",
            "wire_list",
            "emitted_list",
        }


def test_outbound_is_the_request_in_flight() -> None:
    framed: list[bytes] = []

    def observer(action: str, snapshot: ExchangeSnapshot) -> None:
        framed.append(ex.outbound.body if ex.outbound is not None else b"")

    ex = Exchange(Provider.ANTHROPIC, secrets=[SECRET], observer=observer)
    assert ex.outbound is None
    out = ex.send(request())
    assert ex.outbound == out
    assert framed == [out.body]  # readable from the observer at CallerSend
    assert not {"x-api-key", "authorization"} & {k for k, _ in out.headers}
    ex.receive(200, {}, messages_reply())
    assert ex.outbound == out
    ex.deliver()
    assert ex.outbound is None
    assert framed == [out.body, out.body, b""]


# -- review fixes: consecutive user messages, the choice by index, pickling, headers ------


@pytest.mark.parametrize("provider", [Provider.ANTHROPIC, Provider.TPX])
def test_a_user_turn_over_consecutive_user_messages_answers_the_pending_tool_uses(
    provider: Provider,
) -> None:
    ex = Exchange(provider)
    ex.send(request())
    if provider is Provider.ANTHROPIC:
        ex.receive(200, {}, messages_reply("toolu_a", "toolu_b"))
    else:
        ex.receive(200, {}, openai_reply("call_a", "call_b"))
    uses = [b for b in ex.deliver()["content"] if b["type"] == "tool_use"]
    ids = [b["id"] for b in uses]
    body = request(
        user("hi"),
        {"role": "assistant", "content": uses},
        user(tool_result(ids[0]), tool_result(ids[1])),
        user("and more"),
    )
    out = ex.send(body)
    assert (ex.phase, ex.snapshot().req_ids) == ("req", frozenset(ids))
    wire = orjson.loads(out.body)["messages"]
    if provider is Provider.TPX:
        assert [m["role"] for m in wire] == ["user", "assistant", "tool", "tool", "user"]
        assert wire[-1] == {"role": "user", "content": "and more"}
        assert ex.snapshot().wire_ids == {"call_a", "call_b"}
    else:
        assert wire == body["messages"]


def test_the_choice_with_index_0_gives_the_tool_ids_whatever_its_position() -> None:
    reply = orjson.loads(openai_reply("call_mine"))
    other = orjson.loads(openai_reply("call_x", "call_y"))["choices"][0]
    reply["choices"] = [{**other, "index": 1}, *reply["choices"]]
    ex = Exchange(Provider.TPX)
    ex.send(request())
    ex.receive(200, {}, orjson.dumps(reply))
    assert ex.snapshot().emitted == {"call_mine"}
    (tool_id,) = [b["id"] for b in ex.deliver()["content"] if b["type"] == "tool_use"]
    assert tool_id.endswith("_call_mine")
    assert ex.pending == {tool_id}


def test_an_exchange_refuses_pickle_and_copy() -> None:
    ex = Exchange(Provider.ANTHROPIC, secrets=[SECRET])
    for serialise in (pickle.dumps, copy.copy, copy.deepcopy):
        with pytest.raises(TypeError, match="cannot be pickled or copied") as info:
            serialise(ex)
        assert SECRET not in str(info.value)
    assert pickle.loads(pickle.dumps(ex.snapshot())) == ex.snapshot()


def test_receive_with_no_headers() -> None:
    ex = Exchange(Provider.TPX)
    ex.send(request())
    with pytest.raises(errors.RateLimitedError):
        ex.receive(429, None, b"{}")
    ex.send(request())
    ex.receive(200, None, openai_reply())
    assert ex.deliver()["content"] == [{"type": "text", "text": "ok"}]
