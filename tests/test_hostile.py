"""Regression tests for hostile input to the transports (each reproducer once).

Each case runs through the real transports (sync and async, ``httpx2.MockTransport``)
and checks the contract: only tpx's documented errors escape, the exchange ends in
``idle`` (turn advanced by one when the request reached the wire), a fresh request then
works, and the credential appears nowhere (chained exceptions included).
"""

from __future__ import annotations

import asyncio
import base64
import json
import typing
import urllib.parse
from collections.abc import Callable
from typing import Any

import anthropic.types.shared as anthropic_shared
import httpx2
import orjson
import pytest

import tpx.transport
import tpx.transport.client
from tpx import errors
from tpx.errors import ModelError

#: The Messages API's error types, read from the official SDK (the oracle).
MESSAGES_ERROR_TYPES = frozenset(
    typing.get_args(getattr(anthropic_shared, name).model_fields["type"].annotation)[0]
    for name in dir(anthropic_shared)
    if name.endswith("ErrorObject") and name != "ErrorObject"
)

KEY = "sk-ant-canary'0123456789abcdefghij"
REQ: dict[str, Any] = {
    "model": "m",
    "max_tokens": 8,
    "messages": [{"role": "user", "content": "hi"}],
}
DEEP = b"[" * 1000 + b"]" * 1000
DEEP300 = b"[" * 300 + b"]" * 300
SSE = "text/event-stream"

GOOD_MESSAGE = orjson.dumps(
    {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "m",
        "content": [{"type": "text", "text": "hello"}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": 1, "output_tokens": 1},
    }
)
GOOD_COMPLETION = orjson.dumps(
    {
        "id": "c1",
        "model": "m",
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}
        ],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1},
    }
)


class Script:
    """Provider replies in order; after the scripted ones, a good reply."""

    def __init__(self, provider: str, replies: list[tuple[int, bytes, str]]) -> None:
        self.provider = provider
        self.replies = list(replies)

    def __call__(self, request: httpx2.Request) -> httpx2.Response:
        if self.replies:
            status, body, kind = self.replies.pop(0)
        else:
            status, body, kind = 200, GOOD_MESSAGE if self.provider == "A" else GOOD_COMPLETION, ""
        return httpx2.Response(
            status, content=body, headers={"content-type": kind or "application/json"}
        )


def _boot(provider: str, script: Script) -> tpx.transport.Transport:
    transport = httpx2.MockTransport(script)
    if provider == "A":
        return tpx.transport.boot(api_key=KEY, env={}, transport=transport)
    return tpx.transport.boot(
        oauth_token=KEY, tpx_base_url="https://tpx.test", env={}, transport=transport
    )


def _aboot(provider: str, script: Script) -> tpx.transport.AsyncTransport:
    transport = httpx2.MockTransport(script)
    if provider == "A":
        return tpx.transport.aboot(api_key=KEY, env={}, transport=transport)
    return tpx.transport.aboot(
        oauth_token=KEY, tpx_base_url="https://tpx.test", env={}, transport=transport
    )


def _leaks(text: str) -> bool:
    forms = [
        KEY,
        KEY[:20],
        "0123456789abcdef",
        base64.b64encode(KEY.encode()).decode()[:20],
        urllib.parse.quote(KEY, safe="")[:20],
        json.dumps(KEY)[1:20],
    ]
    return any(form in text for form in forms)


def _chain(exc: BaseException | None) -> list[BaseException]:
    seen: list[BaseException] = []
    while exc is not None and exc not in seen:
        seen.append(exc)
        exc = exc.__cause__ or exc.__context__
    return seen


def _check_error(error: ModelError) -> None:
    assert error.__cause__ is None
    assert error.__context__ is None
    body = error.body()
    assert body["error"]["type"] in MESSAGES_ERROR_TYPES
    for text in (str(error), repr(error), orjson.dumps(body).decode(), error.message):
        assert not _leaks(text), text


def run_sync(
    provider: str, replies: list[tuple[int, bytes, str]], *, stream: bool, request: Any = None
) -> tuple[Any, ModelError | None, tpx.transport.Transport]:
    t = _boot(provider, Script(provider, replies))
    turn = t.exchange.turn
    result: Any = None
    caught: ModelError | None = None
    try:
        result = b"".join(t.stream(request or REQ)) if stream else t.create(request or REQ)
    except ModelError as error:
        caught = error
    assert t.exchange.phase == "idle"
    assert t.exchange.turn in (turn, turn + 1)
    if caught is not None:
        _check_error(caught)
        assert t.exchange.last_error is None or not _leaks(str(t.exchange.last_error))
    if result is not None:
        assert not _leaks(result.decode() if isinstance(result, bytes) else json.dumps(result))
    # a fresh request after any failure works
    assert t.create(REQ)["content"]
    return result, caught, t


def run_async(
    provider: str, replies: list[tuple[int, bytes, str]], *, stream: bool, request: Any = None
) -> tuple[Any, ModelError | None]:
    async def go() -> tuple[Any, ModelError | None]:
        t = _aboot(provider, Script(provider, replies))
        result: Any = None
        caught: ModelError | None = None
        try:
            if stream:
                result = b"".join([chunk async for chunk in t.stream(request or REQ)])
            else:
                result = await t.create(request or REQ)
        except ModelError as error:
            caught = error
        assert t.exchange.phase == "idle"
        if caught is not None:
            _check_error(caught)
        assert (await t.create(REQ))["content"]
        await t.aclose()
        return result, caught

    return asyncio.run(go())


BOTH = pytest.mark.parametrize("runner", [run_sync, run_async], ids=["sync", "async"])
Runner = Callable[..., tuple[Any, ...]]


# -- escapes ------------------------------------------------------------------------


@BOTH
def test_r1_deep_error_body(runner: Runner) -> None:
    out = runner("A", [(500, DEEP, "")], stream=False)
    assert isinstance(out[1], errors.HTTPStatusError)
    out = runner("T", [(500, DEEP, "")], stream=True)
    assert isinstance(out[1], errors.HTTPStatusError)


@BOTH
@pytest.mark.parametrize(
    "body",
    [
        b'{"choices":[{"index":0,"message":{"role":"assistant","content":"x"},'
        b'"finish_reason":"stop"}],"x":' + DEEP + b"}",
        b'{"id":"c","choices":[{"index":0,"message":{"role":"assistant","content":"x"},'
        b'"finish_reason":' + DEEP + b"}]}",
        b'{"id":"c","choices":[{"index":0,"message":{"role":"assistant","content":null,'
        b'"tool_calls":[{"id":' + DEEP + b',"type":"function","function":{"name":"f"}}]},'
        b'"finish_reason":"tool_calls"}]}',
    ],
)
def test_r2_deep_values_never_repr(runner: Runner, body: bytes) -> None:
    out = runner("T", [(200, body, "")], stream=False)
    assert isinstance(out[1], errors.ProtocolError)


@BOTH
def test_r2_deep_anthropic_type(runner: Runner) -> None:
    body = b'{"type":' + DEEP + b',"role":"assistant","content":[]}'
    out = runner("A", [(200, body, "")], stream=False)
    assert isinstance(out[1], errors.ProtocolError)


@BOTH
def test_r3_deep_error_in_stream(runner: Runner) -> None:
    body = b'data: {"error":{"message":' + DEEP300 + b"}}\n\n"
    out = runner("T", [(200, body, SSE)], stream=True)
    assert isinstance(out[1], errors.ProtocolError)
    assert "nested deeper" in out[1].message


@BOTH
def test_r3_deep_tool_arguments(runner: Runner) -> None:
    arguments = '{"a":' * 300 + "1" + "}" * 300
    body = orjson.dumps(
        {
            "id": "c",
            "choices": [
                {
                    "index": 0,
                    "message": {
                        "role": "assistant",
                        "content": None,
                        "tool_calls": [
                            {
                                "id": "a",
                                "type": "function",
                                "function": {"name": "f", "arguments": arguments},
                            }
                        ],
                    },
                    "finish_reason": "tool_calls",
                }
            ],
        }
    )
    out = runner("T", [(200, body, "")], stream=False)
    assert isinstance(out[1], errors.ProtocolError)
    chunk = orjson.dumps(
        {
            "id": "c",
            "choices": [
                {
                    "index": 0,
                    "delta": {
                        "tool_calls": [
                            {
                                "index": 0,
                                "id": "a",
                                "type": "function",
                                "function": {"name": "f", "arguments": arguments},
                            }
                        ]
                    },
                    "finish_reason": "tool_calls",
                }
            ],
        }
    )
    out = runner("T", [(200, b"data: " + chunk + b"\n\ndata: [DONE]\n\n", SSE)], stream=True)
    assert isinstance(out[1], errors.ProtocolError)


@BOTH
def test_r3_deep_caller_values_are_a_400(runner: Runner) -> None:
    deep: Any = {}
    for _ in range(300):
        deep = {"a": deep}
    schema = {**REQ, "tools": [{"name": "f", "input_schema": {"type": "object", "x": deep}}]}
    for provider in ("A", "T"):
        out = runner(provider, [], stream=False, request=schema)
        assert isinstance(out[1], errors.ProtocolError)
        assert out[1].status == 400
        assert out[1].error_type == "invalid_request_error"


@BOTH
def test_r4_block_type_that_is_an_object(runner: Runner) -> None:
    bad = orjson.loads(GOOD_MESSAGE)
    bad["content"] = [{"type": {"a": 1}, "text": "x"}]
    out = runner("A", [(200, orjson.dumps(bad), "")], stream=False)
    assert isinstance(out[1], errors.ProtocolError)
    request = {**REQ, "messages": [{"role": "user", "content": [{"type": ["x"]}]}]}
    out = runner("T", [], stream=False, request=request)
    assert isinstance(out[1], errors.ModelError)
    assert out[1].status == 400


@BOTH
@pytest.mark.parametrize("kind", ["", "a\\nb", "a b"])
def test_r5_anthropic_event_type_not_a_name(runner: Runner, kind: str) -> None:
    body = b'data: {"type":"' + kind.encode() + b'"}\n\n'
    out = runner("A", [(200, body, SSE)], stream=True)
    assert isinstance(out[1], errors.ProtocolError)


# -- the wedge ------------------------------------------------------------------------


class Boom(Exception):
    pass


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("provider", ["A", "T"])
@pytest.mark.parametrize(
    "target",
    [
        "tpx.transport.exchange.Exchange.receive",
        "tpx.transport.exchange.Exchange.receive_stream_start",
        "tpx.transport.exchange.Exchange.feed",
        "tpx.transport.exchange.Exchange.flush",
        "tpx.transport.exchange.Exchange.end_stream",
        "tpx.transport.reply.check_message",
        "tpx.transport.reply.check_event",
        "tpx.transport.reply.response_checked",
        "tpx.transport.translate.stream.SSEParser.feed",
        "tpx.transport.translate.stream.serialize_event",
        "tpx.errors.error_for_status",
        "tpx.transport.client._Core._receive",
        "tpx.transport.client._Core._hand_over",
    ],
)
@pytest.mark.parametrize("kind", [Boom, RecursionError, KeyboardInterrupt])
def test_no_wedge_when_any_step_raises(
    monkeypatch: pytest.MonkeyPatch, target: str, provider: str, stream: bool, kind: type
) -> None:
    """An exception injected at any step: a typed error (or the interrupt itself) comes
    out, the exchange is idle again, and the next request works."""
    module, _, attribute = target.rpartition(".")
    owner: Any
    if module.endswith(("Exchange", "SSEParser", "_Core")):
        mod, _, cls = module.rpartition(".")
        owner = getattr(__import__(mod, fromlist=[cls]), cls)
    else:
        owner = __import__(module, fromlist=["x"])
    original = getattr(owner, attribute)
    calls = {"n": 0}

    def broken(*args: Any, **kwargs: Any) -> Any:
        calls["n"] += 1
        if calls["n"] == 1:
            raise kind("injected")
        return original(*args, **kwargs)

    monkeypatch.setattr(owner, attribute, broken)
    replies: list[tuple[int, bytes, str]]
    if stream:
        chunk = b"data: " + orjson.dumps(
            {"id": "c", "model": "m", "choices": [{"index": 0, "delta": {"content": "x"}}]}
        )
        events = (
            b"event: message_start\ndata: "
            + orjson.dumps(
                {"type": "message_start", "message": {**orjson.loads(GOOD_MESSAGE), "content": []}}
            )
            + b'\n\nevent: message_stop\ndata: {"type":"message_stop"}\n\n'
        )
        body = events if provider == "A" else chunk + b"\n\n" + b"data: [DONE]\n\n"
        replies = [(200, body, SSE)]
    else:
        replies = [(200, GOOD_MESSAGE if provider == "A" else GOOD_COMPLETION, "")]
    for aio in (False, True):
        calls["n"] = 0
        script = Script(provider, list(replies))
        escaped: BaseException | None = None

        async def run_async_once(t: tpx.transport.AsyncTransport) -> None:
            if stream:
                [c async for c in t.stream(REQ)]
            else:
                await t.create(REQ)

        if aio:
            at = _aboot(provider, script)
            try:
                asyncio.run(run_async_once(at))
            except BaseException as exc:
                escaped = exc
            ex = at.exchange
        else:
            st = _boot(provider, script)
            try:
                if stream:
                    list(st.stream(REQ))
                else:
                    st.create(REQ)
            except BaseException as exc:
                escaped = exc
            ex = st.exchange
        assert ex.phase == "idle"
        if escaped is not None:
            assert isinstance(escaped, ModelError | KeyboardInterrupt), repr(escaped)
            assert ex.turn == 1
            assert ex.last_outcome == "err"
        calls["n"] = 1  # no more injection
        if aio:
            assert asyncio.run(at.create(REQ))["content"]
        else:
            assert st.create(REQ)["content"]


# -- ShapeInv on the native path -----------------------------------------------------


@pytest.mark.parametrize("stream", [False, True])
def test_tool_use_id_with_newline_refused_by_both_paths(stream: bool) -> None:
    message = orjson.loads(GOOD_MESSAGE)
    block = {"type": "tool_use", "id": "toolu_1\n", "name": "f", "input": {}}
    if stream:
        start = {**message, "content": []}
        body = b"".join(
            b"data: " + orjson.dumps(e) + b"\n\n"
            for e in [
                {"type": "message_start", "message": start},
                {"type": "content_block_start", "index": 0, "content_block": block},
                {"type": "content_block_stop", "index": 0},
                {"type": "message_stop"},
            ]
        )
        out = run_sync("A", [(200, body, SSE)], stream=True)
    else:
        out = run_sync(
            "A", [(200, orjson.dumps({**message, "content": [block]}), "")], stream=False
        )
    assert isinstance(out[1], errors.ProtocolError)
    assert "invalid id" in out[1].message


@pytest.mark.parametrize(
    "change",
    [
        {"stop_reason": "weird"},
        {"id": 5},
        {"stop_sequence": 3},
        {"usage": {"input_tokens": 1.5, "output_tokens": 1}},
        {"model": None},
        {"content": [{"type": "server_tool_result_of_the_future"}]},
    ],
)
def test_native_bodies_are_validated(change: dict[str, Any]) -> None:
    body = {**orjson.loads(GOOD_MESSAGE), **change}
    out = run_sync("A", [(200, orjson.dumps(body), "")], stream=False)
    assert isinstance(out[1], errors.ProtocolError)


# -- credential leaks -------------------------------------------------------------------


def test_f1_no_unredacted_context() -> None:
    body = orjson.dumps(
        {
            "id": "c",
            "choices": [
                {
                    "index": 0,
                    "message": {
                        "role": "assistant",
                        "content": None,
                        "tool_calls": [
                            {
                                "id": "a",
                                "type": "function",
                                "function": {"name": "f", "arguments": "{" + KEY},
                            }
                        ],
                    },
                    "finish_reason": "tool_calls",
                }
            ],
        }
    )
    _, error, _ = run_sync("T", [(200, body, "")], stream=False)
    assert error is not None
    assert _chain(error) == [error]


@pytest.mark.parametrize(
    "echo",
    [
        json.dumps({"error": {"type": "invalid_request_error", "message": repr(KEY)}}).encode(),
        json.dumps({"error": {"message": repr({"k": KEY + '"'})}}).encode(),
        b"bad key " + base64.b64encode(KEY.encode()),
        b"bad key " + base64.b64encode(b"x:" + KEY.encode()),
        b"bad key " + urllib.parse.quote(KEY).encode(),
        b"bad key " + urllib.parse.quote_plus(KEY).encode(),
        b"bad key " + "".join(f"\\u{ord(c):04x}" for c in KEY).encode(),
    ],
)
def test_f2_f3_escaped_and_encoded_echoes(echo: bytes) -> None:
    for provider in ("A", "T"):
        _, error, _t = run_sync(provider, [(400, echo, "")], stream=False)
        assert error is not None
        assert "[REDACTED]" in error.message


def test_f7_cut_before_redaction() -> None:
    body = b"data: {" + b"x" * 50 + KEY.encode() + b"\n\n"
    for provider in ("A", "T"):
        _result, error, _t = run_sync(provider, [(200, body, SSE)], stream=True)
        assert error is not None
        assert "sk-ant" not in error.message


# -- misclassified errors -----------------------------------------------------------


@pytest.mark.parametrize("empty", ["", []])
def test_malformed_history_is_a_caller_error(empty: Any) -> None:
    request = {
        **REQ,
        "messages": [
            {"role": "user", "content": "hi"},
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": "toolu_1", "name": "f", "input": {}}],
            },
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1"}]},
            {"role": "assistant", "content": empty},
            {"role": "user", "content": "hi"},
        ],
    }
    _, error, t = run_sync("T", [], stream=False, request=request)
    assert error is not None
    assert error.status == 400
    assert error.error_type == "invalid_request_error"
    assert t.exchange.turn == 1  # only the fresh request reached the wire


@pytest.mark.parametrize("status", [400, 402, 404, 405, 409, 413, 418, 422, 500, 502, 504, 599])
def test_error_types_are_messages_error_types(status: int) -> None:
    error = errors.error_for_status(status, {}, b'{"error":{"type":"request_too_large"}}')
    assert error.body()["error"]["type"] in MESSAGES_ERROR_TYPES
    stream_error = b'data: {"error":{"type":"server_error","message":"boom"}}\n\n'
    for provider in ("A", "T"):
        _, caught, _ = run_sync(provider, [(200, stream_error, SSE)], stream=True)
        assert caught is not None


@pytest.mark.parametrize("index", ["false", "0.0", "-0.0", '"0"', "true"])
def test_choice_index_must_be_the_integer_0(index: str) -> None:
    body = (
        b'{"id":"c","choices":[{"index":' + index.encode() + b',"message":'
        b'{"role":"assistant","content":"x"},"finish_reason":"stop"}]}'
    )
    _, error, _ = run_sync("T", [(200, body, "")], stream=False)
    assert isinstance(error, errors.ProtocolError)


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("provider", ["A", "T"])
@pytest.mark.parametrize(
    "echo",
    [KEY, "".join(f"\\u{ord(c):04x}" if i % 2 else c for i, c in enumerate(KEY))],
    ids=["raw", "half-escaped"],
)
def test_a_credential_echoed_in_a_good_reply_is_not_delivered(
    provider: str, stream: bool, echo: str
) -> None:
    if provider == "A":
        message = orjson.loads(GOOD_MESSAGE)
        if stream:
            start = {**message, "content": [], "echo": "@"}
            events = [
                {"type": "message_start", "message": start},
                {
                    "type": "content_block_start",
                    "index": 0,
                    "content_block": {"type": "text", "text": ""},
                },
                {
                    "type": "content_block_delta",
                    "index": 0,
                    "delta": {"type": "text_delta", "text": "@"},
                },
                {"type": "content_block_stop", "index": 0},
                {
                    "type": "message_delta",
                    "delta": {"stop_reason": "end_turn"},
                    "usage": {"output_tokens": 1},
                },
                {"type": "message_stop"},
            ]
            body = b"".join(b"data: " + orjson.dumps(e) + b"\n\n" for e in events)
        else:
            body = orjson.dumps(
                {**message, "content": [{"type": "text", "text": "@"}], "echo": "@"}
            )
    else:
        if stream:
            chunk = {
                "id": "c",
                "model": "m",
                "choices": [{"index": 0, "delta": {"content": "@"}, "finish_reason": "stop"}],
            }
            body = b"data: " + orjson.dumps(chunk) + b"\n\ndata: [DONE]\n\n"
        else:
            body = GOOD_COMPLETION.replace(b'"hi"', b'"@"')
    # the echo, spelled as the provider chose (the half-escaped form only exists in JSON text)
    body = body.replace(b"@", json.dumps(KEY)[1:-1].encode() if echo == KEY else echo.encode())
    result, error, _t = run_sync(provider, [(200, body, SSE if stream else "")], stream=stream)
    assert error is None
    text = result.decode() if isinstance(result, bytes) else json.dumps(result)
    assert "[REDACTED]" in text
    assert not _leaks(text)
