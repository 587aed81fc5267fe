"""Streaming through the exchange machine and the httpx2 transports (MockTransport)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import anyio
import httpx2
import orjson
import pytest

from tests.transport.translate.test_stream import NATIVE, native, sse, stream_of, validate_event
from tpx import errors
from tpx.transport import aboot, boot
from tpx.transport.exchange import Exchange, ExchangeSnapshot, Provider
from tpx.transport.translate.stream import MessageAccumulator, SSEParser

KEY = "sk-ant-api03-KEY-SECRET-abcdef"
TOKEN = "oauth-TOKEN-SECRET-123456"
TPX_URL = "https://tpx.example.test"
SSE_HEADERS = {"content-type": "text/event-stream"}
REQUEST: dict[str, Any] = {
    "model": "claude-test",
    "max_tokens": 32,
    "messages": [{"role": "user", "content": "hi"}],
}


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def tool_chat(*ids: str, style: str = "ollama") -> bytes:
    """A streamed Chat Completions reply calling ``calc`` once per id."""
    body = {
        "id": "chatcmpl-s",
        "object": "chat.completion",
        "model": "tpx-model",
        "choices": [
            {
                "index": 0,
                "finish_reason": "tool_calls",
                "message": {
                    "role": "assistant",
                    "content": "calling",
                    "tool_calls": [
                        {
                            "id": i,
                            "type": "function",
                            "function": {"name": "calc", "arguments": '{"n": 1}'},
                        }
                        for i in ids
                    ],
                },
            }
        ],
        "usage": {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8},
    }
    return sse(stream_of(body, style, piece=3))


def text_chat(text: str = "hello", done: bool = True) -> bytes:
    body = {
        "id": "chatcmpl-t",
        "object": "chat.completion",
        "model": "tpx-model",
        "choices": [
            {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": text}}
        ],
        "usage": {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6},
    }
    return sse(stream_of(body, piece=2), done=done)


def events_of(data: bytes) -> list[dict[str, Any]]:
    parser = SSEParser()
    out = []
    for event in [*parser.feed(data), *parser.close()]:
        body = orjson.loads(event.data)
        assert event.event == body["type"]
        out.append(body)
    return out


def follow_up(uses: list[str]) -> dict[str, Any]:
    return {
        **REQUEST,
        "messages": [
            *REQUEST["messages"],
            {
                "role": "assistant",
                "content": [
                    {"type": "tool_use", "id": i, "name": "calc", "input": {"n": 1}} for i in uses
                ],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": i, "content": "1"} for i in uses
                ],
            },
        ],
    }


class Chunks(httpx2.SyncByteStream, httpx2.AsyncByteStream):
    """A response body delivered in pieces, optionally failing after them; records close()."""

    def __init__(self, data: bytes, size: int = 7, error: Exception | None = None) -> None:
        self.pieces = [data[i : i + size] for i in range(0, len(data), size)]
        self.error = error
        self.closed = False
        self.served = 0

    def __iter__(self) -> Iterator[bytes]:
        for piece in self.pieces:
            self.served += 1
            yield piece
        if self.error is not None:
            raise self.error

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for piece in self:
            yield piece

    def close(self) -> None:
        self.closed = True

    async def aclose(self) -> None:
        self.closed = True


class Provider_:
    """MockTransport handler: canned replies in order, requests recorded."""

    def __init__(self, *replies: httpx2.Response) -> None:
        self.replies = list(replies)
        self.seen: list[httpx2.Request] = []

    def __call__(self, request: httpx2.Request) -> httpx2.Response:
        request.read()
        self.seen.append(request)
        return self.replies.pop(0)

    async def handle_async(self, request: httpx2.Request) -> httpx2.Response:
        await request.aread()
        self.seen.append(request)
        return self.replies.pop(0)


def streamed(data: bytes, **kw: Any) -> tuple[httpx2.Response, Chunks]:
    body = Chunks(data, **kw)
    return httpx2.Response(200, headers=SSE_HEADERS, stream=body), body


def json_reply(body: dict[str, Any], status: int = 200) -> httpx2.Response:
    return httpx2.Response(status, json=body)


def tpx_boot(provider: Provider_) -> Any:
    return boot(
        oauth_token=TOKEN, tpx_base_url=TPX_URL, env={}, transport=httpx2.MockTransport(provider)
    )


async def drain(stream: AsyncIterator[bytes], into: list[bytes]) -> None:
    async for data in stream:
        into.append(data)


def assert_failed(ex: Exchange, turn: int = 1) -> None:
    assert (ex.phase, ex.turn, ex.last_outcome, ex.pending) == ("idle", turn, "err", frozenset())


# -- the sans-I/O machine ---------------------------------------------------------------


def test_exchange_tpx_stream_steps() -> None:
    ex = Exchange(Provider.TPX)
    out = ex.send({**REQUEST, "stream": True})
    wire = orjson.loads(out.body)
    assert wire["stream"] is True
    assert wire["stream_options"] == {"include_usage": True}
    ex.receive_stream_start(200, SSE_HEADERS)
    data = tool_chat("call_a", "call_b")
    events = []
    for i in range(0, len(data), 5):
        events += ex.feed(data[i : i + 5])
        assert ex.phase == "req"
    assert ex.stream_complete
    with pytest.raises(errors.ExchangeStateError):
        ex.deliver()  # ProviderReply first
    assert ex.end_stream() == []
    assert ex.phase == "resp"
    assert ex.snapshot().emitted == {"call_a", "call_b"}
    body = ex.deliver()
    for event in events:
        validate_event(event)
    assert body == MessageAccumulator().add_all(events).message()
    ids = [
        e["content_block"]["id"]
        for e in events
        if e["type"] == "content_block_start" and e["content_block"]["type"] == "tool_use"
    ]
    assert len(ids) == 2
    assert ex.pending == set(ids)
    assert (ex.turn, ex.last_outcome) == (1, "ok")


def test_exchange_anthropic_stream_steps() -> None:
    ex = Exchange(Provider.ANTHROPIC)
    ex.send({**REQUEST, "stream": True})
    ex.receive_stream_start(200, SSE_HEADERS)
    assert ex.feed(native(NATIVE)) == NATIVE
    ex.end_stream()
    assert ex.deliver()["content"][1]["input"] == {"p": "."}
    assert ex.pending == {"toolu_01"}


@pytest.mark.parametrize(
    ("data", "error", "code"),
    [
        (text_chat(done=False), errors.ProtocolError, "MODEL_PROTOCOL"),  # no [DONE]
        (b'data: {"error": {"message": "boom"}}\n\n', errors.ProtocolError, "MODEL_PROTOCOL"),
        (b"data: {not json\n\n", errors.ProtocolError, "MODEL_PROTOCOL"),
        (
            sse(
                [
                    {
                        "choices": [
                            {
                                "index": 0,
                                "delta": {
                                    "tool_calls": [
                                        {
                                            "index": 0,
                                            "id": "c",
                                            "function": {"name": "f", "arguments": "{"},
                                        }
                                    ]
                                },
                                "finish_reason": "tool_calls",
                            }
                        ]
                    }
                ]
            ),
            errors.ProtocolError,
            "MODEL_PROTOCOL",
        ),
        (
            b'event: error\ndata: {"error": {"type": "overloaded_error", "message": "x"}}\n\n',
            errors.OverloadedError,
            "MODEL_OVERLOADED",
        ),
    ],
)
def test_exchange_stream_failures_end_in_provider_fail(
    data: bytes, error: type[errors.ModelError], code: str
) -> None:
    ex = Exchange(Provider.TPX)
    ex.send({**REQUEST, "stream": True})
    ex.receive_stream_start(200, SSE_HEADERS)
    events = ex.feed(data)
    if ex.phase == "req":
        events += ex.end_stream()
    assert_failed(ex)
    assert isinstance(ex.last_error, error)
    assert events[-1] == ex.last_error.body()
    assert events[-1]["error"]["message"].startswith(code)
    validate_event(events[-1])
    with pytest.raises(errors.ExchangeStateError):
        ex.feed(b"data: [DONE]\n\n")
    with pytest.raises(errors.ExchangeStateError):
        ex.end_stream()


def test_exchange_stream_non_2xx_and_json_replies_fail() -> None:
    ex = Exchange(Provider.ANTHROPIC)
    ex.send({**REQUEST, "stream": True})
    with pytest.raises(errors.RateLimitedError):
        ex.receive_stream_start(429, {"retry-after": "2"}, b'{"error": {"message": "slow"}}')
    assert_failed(ex)
    ex.send({**REQUEST, "stream": True})
    with pytest.raises(errors.ProtocolError, match="text/event-stream"):
        ex.receive_stream_start(200, {"Content-Type": "application/json"})
    assert_failed(ex, 2)


# -- Transport.stream -------------------------------------------------------------------


def test_tpx_stream_end_to_end_then_the_foreign_ids_go_back() -> None:
    reply, body = streamed(tool_chat("call_x", "call_y"))  # Ollama: both at index 0
    provider = Provider_(
        reply,
        json_reply(
            {
                "id": "c2",
                "object": "chat.completion",
                "model": "m",
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": "done"},
                        "finish_reason": "stop",
                    }
                ],
            }
        ),
    )
    with tpx_boot(provider) as t:
        data = b"".join(t.stream(REQUEST))
        events = events_of(data)
        for event in events:
            validate_event(event)
        assert events[0]["type"] == "message_start"
        assert events[-1] == {"type": "message_stop"}
        got = MessageAccumulator().add_all(events).message()
        uses = [b["id"] for b in got["content"] if b["type"] == "tool_use"]
        assert len(uses) == 2
        assert (t.exchange.turn, t.exchange.last_outcome, t.exchange.pending) == (
            1,
            "ok",
            set(uses),
        )
        assert body.closed
        sent = orjson.loads(provider.seen[0].content)
        assert (sent["stream"], sent["stream_options"]) == (True, {"include_usage": True})
        assert provider.seen[0].headers["authorization"] == f"Bearer {TOKEN}"
        assert "x-api-key" not in provider.seen[0].headers
        t.create(follow_up(uses))  # non-streamed
    tools = [m for m in orjson.loads(provider.seen[1].content)["messages"] if m["role"] == "tool"]
    assert [m["tool_call_id"] for m in tools] == ["call_x", "call_y"]


def test_anthropic_stream_end_to_end_then_the_ids_go_back() -> None:
    reply, _ = streamed(native(NATIVE), size=11)
    provider = Provider_(
        reply,
        json_reply(
            {
                "id": "m2",
                "type": "message",
                "role": "assistant",
                "model": "c",
                "content": [],
                "stop_reason": "end_turn",
                "stop_sequence": None,
                "usage": {"input_tokens": 1, "output_tokens": 1},
            }
        ),
    )
    with boot(api_key=KEY, env={}, transport=httpx2.MockTransport(provider)) as t:
        events = events_of(b"".join(t.stream({**REQUEST, "stream": True})))
        assert events == NATIVE
        assert t.exchange.pending == {"toolu_01"}
        t.create(follow_up(["toolu_01"]))
    assert provider.seen[0].headers["x-api-key"] == KEY
    assert "authorization" not in provider.seen[0].headers
    assert provider.seen[0].headers["accept"] == "text/event-stream"
    last = orjson.loads(provider.seen[1].content)["messages"][-1]
    assert [b["tool_use_id"] for b in last["content"]] == ["toolu_01"]


def test_create_with_stream_true_returns_the_accumulated_message() -> None:
    reply = httpx2.Response(200, headers=SSE_HEADERS, content=text_chat("hey there"))
    with tpx_boot(Provider_(reply)) as t:
        body = t.create({**REQUEST, "stream": True})
    assert body["content"] == [{"type": "text", "text": "hey there"}]
    assert body["usage"]["input_tokens"] == 5


def test_mid_stream_disconnect_yields_an_error_event_then_raises() -> None:
    reply, body = streamed(
        text_chat("a long answer")[:400], error=httpx2.ReadError("connection reset")
    )
    with tpx_boot(Provider_(reply)) as t:
        got: list[bytes] = []
        with pytest.raises(errors.NetworkError):
            got.extend(t.stream(REQUEST))
        events = events_of(b"".join(got))
        assert events[0]["type"] == "message_start"
        assert events[-1]["type"] == "error"
        assert events[-1]["error"]["message"].startswith("MODEL_NETWORK")
        validate_event(events[-1])
        assert_failed(t.exchange)
        assert body.closed


def test_failure_before_any_byte_is_raised_not_streamed() -> None:
    reply, _ = streamed(b"", error=httpx2.ReadError("reset"))
    overloaded = httpx2.Response(
        529, json={"type": "error", "error": {"type": "overloaded_error", "message": "busy"}}
    )
    with tpx_boot(Provider_(reply, overloaded)) as t:
        stream = t.stream(REQUEST)
        with pytest.raises(errors.NetworkError):
            next(stream)
        assert_failed(t.exchange)
        with pytest.raises(errors.OverloadedError):
            next(t.stream(REQUEST))
        assert_failed(t.exchange, 2)


def test_missing_done_through_the_transport() -> None:
    reply, _ = streamed(text_chat(done=False))
    with tpx_boot(Provider_(reply)) as t:
        got: list[bytes] = []
        with pytest.raises(errors.ProtocolError, match=r"\[DONE\]"):
            got.extend(t.stream(REQUEST))
        assert events_of(b"".join(got))[-1]["type"] == "error"
        assert_failed(t.exchange)


def test_error_event_echoing_the_token_is_redacted() -> None:
    error = {"error": {"type": "api_error", "message": f"bad {TOKEN}"}}
    data = text_chat(done=False) + b"event: error\ndata: " + orjson.dumps(error) + b"\n\n"
    reply, _ = streamed(data)
    with tpx_boot(Provider_(reply)) as t:
        got: list[bytes] = []
        with pytest.raises(errors.HTTPStatusError) as info:
            got.extend(t.stream(REQUEST))
    assert TOKEN not in str(info.value)
    assert TOKEN.encode() not in b"".join(got)
    assert b"[REDACTED]" in got[-1]


def test_closing_early_is_provider_fail_and_closes_the_response() -> None:
    reply, body = streamed(text_chat("many words here"), size=4)
    with tpx_boot(Provider_(reply)) as t:
        stream = t.stream(REQUEST)
        next(stream)
        next(stream)
        assert t.exchange.phase == "req"
        stream.close()
        assert_failed(t.exchange)
        assert isinstance(t.exchange.last_error, errors.NetworkError)
        assert body.closed
        assert body.served < len(body.pieces)


def test_stopping_after_message_stop_keeps_the_obligations() -> None:
    reply, _ = streamed(native(NATIVE) + b": trailing bytes never read\n\n")
    with boot(api_key=KEY, env={}, transport=httpx2.MockTransport(Provider_(reply))) as t:
        for data in t.stream(REQUEST):
            if data.startswith(b"event: message_stop"):
                break
        assert (t.exchange.last_outcome, t.exchange.pending) == ("ok", frozenset({"toolu_01"}))


def test_stream_steps_out_of_order_and_no_provider() -> None:
    with boot(env={}, transport=httpx2.MockTransport(Provider_())) as t:
        with pytest.raises(errors.UnauthorizedError):
            next(t.stream(REQUEST))
        assert (t.exchange.turn, t.exchange.last_outcome) == (1, "err")
    reply, _ = streamed(native(NATIVE))
    with boot(api_key=KEY, env={}, transport=httpx2.MockTransport(Provider_(reply))) as t:
        list(t.stream(REQUEST))
        with pytest.raises(errors.PairingError):
            next(t.stream(REQUEST))  # toolu_01 unanswered: CallerAbort, nothing sent
        assert_failed(t.exchange, 2)


# -- AsyncTransport.stream --------------------------------------------------------------


@pytest.mark.anyio
async def test_async_tpx_stream_and_follow_up() -> None:
    reply, body = streamed(tool_chat("", "", style="gemini"))
    provider = Provider_(
        reply,
        json_reply(
            {
                "id": "c2",
                "object": "chat.completion",
                "model": "m",
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": "ok"},
                        "finish_reason": "stop",
                    }
                ],
            }
        ),
    )
    async with aboot(
        oauth_token=TOKEN,
        tpx_base_url=TPX_URL,
        env={},
        transport=httpx2.MockTransport(provider.handle_async),
    ) as t:
        got = [data async for data in t.stream(REQUEST)]
        events = events_of(b"".join(got))
        for event in events:
            validate_event(event)
        message = MessageAccumulator().add_all(events).message()
        uses = [b["id"] for b in message["content"] if b["type"] == "tool_use"]
        assert message["stop_reason"] == "tool_use"
        assert t.exchange.pending == set(uses)
        assert len(uses) == 2
        assert body.closed
        await t.create(follow_up(uses))
    tools = [m for m in orjson.loads(provider.seen[1].content)["messages"] if m["role"] == "tool"]
    assert [m["tool_call_id"] for m in tools] == ["", ""]


@pytest.mark.anyio
async def test_async_disconnect_and_early_close() -> None:
    broken, _ = streamed(text_chat("words")[:120], error=httpx2.RemoteProtocolError("peer closed"))
    long, body = streamed(text_chat("many many words"), size=3)
    provider = Provider_(broken, long)
    async with aboot(
        api_key=KEY, env={}, transport=httpx2.MockTransport(provider.handle_async)
    ) as t:
        got: list[bytes] = []
        with pytest.raises(errors.NetworkError):
            await drain(t.stream(REQUEST), got)
        assert_failed(t.exchange)
        stream = t.stream(REQUEST)
        assert isinstance(stream, AsyncIterator)
        with pytest.raises(errors.ProtocolError):  # an OpenAI stream is not the native shape
            await stream.__anext__()
        assert_failed(t.exchange, 2)
        assert body.closed


@pytest.mark.anyio
async def test_async_early_close_and_cancellation_return_to_idle() -> None:
    first, body = streamed(text_chat("many many words"), size=3)
    provider = Provider_(first)
    async with aboot(
        oauth_token=TOKEN,
        tpx_base_url=TPX_URL,
        env={},
        transport=httpx2.MockTransport(provider.handle_async),
    ) as t:
        stream = t.stream(REQUEST)
        await stream.__anext__()
        assert t.exchange.phase == "req"
        await stream.aclose()  # type: ignore[attr-defined]
        assert_failed(t.exchange)
        assert body.closed

    started = anyio.Event()

    async def hang(request: httpx2.Request) -> httpx2.Response:
        started.set()
        await anyio.sleep_forever()
        raise AssertionError("unreachable")

    async def consume(t: Any) -> None:
        async for _ in t.stream(REQUEST):
            pass

    async with aboot(api_key=KEY, env={}, transport=httpx2.MockTransport(hang)) as t:
        async with anyio.create_task_group() as tg:
            tg.start_soon(consume, t)
            await started.wait()
            assert t.exchange.phase == "req"
            tg.cancel_scope.cancel()
        assert_failed(t.exchange)


# -- the observer: the spec's actions inside one stream() call ---------------------------


class Seen:
    """An observer recording each action with how many bytes the caller had received."""

    def __init__(self, got: list[bytes] | None = None, raise_at: str | None = None) -> None:
        self.got: list[bytes] = [] if got is None else got
        self.raise_at = raise_at
        self.calls: list[tuple[str, ExchangeSnapshot, bytes]] = []

    def __call__(self, action: str, snapshot: ExchangeSnapshot) -> None:
        self.calls.append((action, snapshot, b"".join(self.got)))
        if action == self.raise_at:
            raise Boom(action)

    @property
    def actions(self) -> list[str]:
        return [action for action, _, _ in self.calls]


class Boom(Exception):
    pass


def observed_boot(provider: str, *replies: httpx2.Response, seen: Seen) -> Any:
    handler = Provider_(*replies)
    if provider == "anthropic":
        return boot(api_key=KEY, env={}, transport=httpx2.MockTransport(handler), observer=seen)
    return boot(
        oauth_token=TOKEN,
        tpx_base_url=TPX_URL,
        env={},
        transport=httpx2.MockTransport(handler),
        observer=seen,
    )


def good_stream(provider: str) -> bytes:
    return native(NATIVE) if provider == "anthropic" else tool_chat("call_a")


@pytest.mark.parametrize("provider", ["anthropic", "tpx"])
def test_stream_is_observed_as_caller_send_provider_reply_deliver(provider: str) -> None:
    seen = Seen()
    reply, _ = streamed(good_stream(provider), size=5)
    with observed_boot(provider, reply, seen=seen) as t:
        for data in t.stream(REQUEST):
            seen.got.append(data)
    assert seen.actions == ["CallerSend", "ProviderReply", "Deliver"]
    (_, sent, before_send), (_, replied, _), (_, delivered, at_deliver) = seen.calls
    assert before_send == b""
    assert (sent.phase, replied.phase, delivered.phase) == ("req", "resp", "idle")
    # ProviderReply and Deliver are taken before the terminal event reaches the caller
    assert b"message_stop" not in at_deliver
    assert b"message_stop" in b"".join(seen.got)
    assert delivered == t.exchange.snapshot()
    assert len(delivered.pending) == 1


@pytest.mark.anyio
@pytest.mark.parametrize("provider", ["anthropic", "tpx"])
async def test_async_stream_is_observed(provider: str) -> None:
    seen = Seen()
    reply, _ = streamed(good_stream(provider), size=9)
    failing, _ = streamed(b"", error=httpx2.ReadError("reset"))
    handler = Provider_(reply, failing)
    creds: dict[str, Any] = {"api_key": KEY} if provider == "anthropic" else {"oauth_token": TOKEN}
    async with aboot(
        **creds,
        tpx_base_url=TPX_URL,
        env={},
        transport=httpx2.MockTransport(handler),
        observer=seen,
    ) as t:
        await drain(t.stream(REQUEST), seen.got)
        assert seen.actions == ["CallerSend", "ProviderReply", "Deliver"]
        assert b"message_stop" not in seen.calls[-1][2]
        with pytest.raises(errors.PairingError):
            await drain(t.stream(REQUEST), seen.got)  # the tool_use is unanswered
    assert seen.actions[3:] == ["CallerAbort"]


@pytest.mark.parametrize(
    ("make", "error"),
    [
        (
            lambda: streamed(text_chat("a long answer")[:400], error=httpx2.ReadError("reset"))[0],
            errors.NetworkError,
        ),
        (lambda: streamed(text_chat(done=False))[0], errors.ProtocolError),
        (lambda: streamed(b"data: {not json\n\n")[0], errors.ProtocolError),
        (lambda: streamed(b"", error=httpx2.ReadError("reset"))[0], errors.NetworkError),
        (lambda: httpx2.Response(529, json={"error": {"message": "busy"}}), errors.ModelError),
        (lambda: httpx2.Response(200, json={"id": "x"}), errors.ProtocolError),
    ],
)
def test_failed_stream_is_observed_as_caller_send_provider_fail(
    make: Any, error: type[errors.ModelError]
) -> None:
    seen = Seen()
    with observed_boot("tpx", make(), seen=seen) as t:
        with pytest.raises(error):
            seen.got.extend(t.stream(REQUEST))
        assert seen.actions == ["CallerSend", "ProviderFail"]
        assert seen.calls[-1][1] == t.exchange.snapshot()


def test_closing_a_stream_early_is_observed_as_provider_fail() -> None:
    seen = Seen()
    reply, _ = streamed(text_chat("many words here"), size=4)
    with observed_boot("tpx", reply, seen=seen) as t:
        stream = t.stream(REQUEST)
        next(stream)
        assert seen.actions == ["CallerSend"]
        stream.close()
        assert seen.actions == ["CallerSend", "ProviderFail"]


def test_no_provider_stream_is_observed_without_network() -> None:
    seen = Seen()
    with boot(env={}, transport=httpx2.MockTransport(Provider_()), observer=seen) as t:
        with pytest.raises(errors.UnauthorizedError):
            next(t.stream(REQUEST))
        with pytest.raises(errors.UnauthorizedError):
            next(t.stream(REQUEST))
    assert seen.actions == ["NoProvider", "NoProvider"]


def test_sans_io_stream_steps_are_observed_only_when_they_are_actions() -> None:
    seen = Seen()
    ex = Exchange(Provider.TPX, observer=seen)
    ex.send({**REQUEST, "stream": True})
    ex.receive_stream_start(200, SSE_HEADERS)
    data = text_chat()
    for i in range(0, len(data), 5):
        ex.feed(data[i : i + 5])
    assert seen.actions == ["CallerSend"]  # starting and feeding a stream take no action
    with pytest.raises(errors.ExchangeStateError):
        ex.deliver()  # refused: not observed
    ex.end_stream()
    ex.deliver()
    with pytest.raises(errors.ExchangeStateError):
        ex.end_stream()
    assert seen.actions == ["CallerSend", "ProviderReply", "Deliver"]
    ex.send({**REQUEST, "stream": True})
    ex.receive_stream_start(200, SSE_HEADERS)
    ex.feed(b'event: error\ndata: {"error": {"type": "overloaded_error", "message": "x"}}\n\n')
    assert seen.actions[3:] == ["CallerSend", "ProviderFail"]


def test_observer_raising_at_provider_reply_mid_stream_keeps_the_reply() -> None:
    seen = Seen(raise_at="ProviderReply")
    reply, body = streamed(native(NATIVE), size=11)
    with observed_boot("anthropic", reply, seen=seen) as t:
        with pytest.raises(Boom):
            seen.got.extend(t.stream(REQUEST))
        assert body.closed
        assert t.exchange.phase == "resp"  # the reply waits for Deliver
        message = t.finish()
        assert [b["id"] for b in message["content"] if b["type"] == "tool_use"] == ["toolu_01"]
        assert seen.actions == ["CallerSend", "ProviderReply", "Deliver"]
        assert t.exchange.pending == {"toolu_01"}


def test_observer_exception_at_a_mid_stream_failure_is_not_chained_to_the_httpx_error() -> None:
    seen = Seen(raise_at="ProviderFail")
    reply, _ = streamed(text_chat("answer")[:300], error=httpx2.ReadError(f"reset {TOKEN}"))
    with observed_boot("tpx", reply, seen=seen) as t:
        with pytest.raises(Boom) as info:
            seen.got.extend(t.stream(REQUEST))
        assert (info.value.__context__, info.value.__cause__) == (None, None)
        assert seen.actions == ["CallerSend", "ProviderFail"]
        assert_failed(t.exchange)


def test_observer_raising_at_caller_send_of_a_stream_sends_nothing() -> None:
    seen = Seen(raise_at="CallerSend")
    handler = Provider_()
    with boot(api_key=KEY, env={}, transport=httpx2.MockTransport(handler), observer=seen) as t:
        with pytest.raises(Boom):
            next(t.stream(REQUEST))
        assert handler.seen == []
        assert seen.actions == ["CallerSend", "ProviderFail"]
        assert_failed(t.exchange)


def test_a_model_error_raised_by_the_observer_is_not_a_provider_fail() -> None:
    calls: list[str] = []

    def observer(action: str, snapshot: ExchangeSnapshot) -> None:
        calls.append(action)
        if action == "ProviderReply":
            raise errors.ProtocolError("the observer's own error")

    ex = Exchange(Provider.ANTHROPIC, observer=observer)
    ex.send({**REQUEST, "stream": True})
    ex.receive_stream_start(200, SSE_HEADERS)
    ex.feed(native(NATIVE))
    with pytest.raises(errors.ProtocolError, match="observer's own"):
        ex.end_stream()
    assert (ex.phase, calls) == ("resp", ["CallerSend", "ProviderReply"])
    assert ex.last_error is None
    assert ex.deliver()["content"][1]["id"] == "toolu_01"
    assert calls == ["CallerSend", "ProviderReply", "Deliver"]


# -- closing early: ProviderReply / Deliver only when the caller asks for message_stop ---


def one_chunk_boot(provider: str, data: bytes, seen: Seen) -> tuple[Any, Chunks]:
    """A transport whose provider returns the whole stream *data* in ONE chunk."""
    reply, body = streamed(data, size=len(data))
    return observed_boot(provider, reply, seen=seen), body


def kinds(received: list[bytes]) -> list[str]:
    """The event type of each item (TPX tool ids differ per stream: fresh nonces)."""
    return [event["type"] for data in received for event in events_of(data)]


def tool_ids_in(received: list[bytes]) -> frozenset[str]:
    return frozenset(
        event["content_block"]["id"]
        for event in events_of(b"".join(received))
        if event["type"] == "content_block_start" and event["content_block"]["type"] == "tool_use"
    )


@pytest.mark.parametrize("provider", ["anthropic", "tpx"])
def test_closing_a_one_chunk_stream_before_message_stop_fails_the_exchange(
    provider: str,
) -> None:
    data = good_stream(provider)
    t, _ = one_chunk_boot(provider, data, Seen())
    with t:
        everything = list(t.stream(REQUEST))
    count = len(everything)
    assert count > 3
    assert everything[-1].startswith(b"event: message_stop")
    for taken in range(1, count):  # the caller never asked for message_stop
        seen = Seen()
        t, body = one_chunk_boot(provider, data, seen)
        with t:
            stream = t.stream(REQUEST)
            got = [next(stream) for _ in range(taken)]
            assert t.exchange.phase == "req"  # nothing taken before message_stop is asked for
            stream.close()
            assert_failed(t.exchange)
            assert isinstance(t.exchange.last_error, errors.NetworkError)
            assert seen.actions == ["CallerSend", "ProviderFail"]
            assert body.closed
            assert kinds(got) == kinds(everything[:taken])
    seen = Seen()
    t, _ = one_chunk_boot(provider, data, seen)
    with t:
        stream = t.stream(REQUEST)
        got = [next(stream) for _ in range(count)]  # message_stop received: kept
        stream.close()
        assert seen.actions == ["CallerSend", "ProviderReply", "Deliver"]
        assert (t.exchange.last_outcome, t.exchange.pending) == ("ok", tool_ids_in(got))
        assert len(t.exchange.pending) == 1


@pytest.mark.anyio
@pytest.mark.parametrize("provider", ["anthropic", "tpx"])
async def test_async_closing_a_one_chunk_stream_before_message_stop_fails_the_exchange(
    provider: str,
) -> None:
    data = good_stream(provider)
    creds: dict[str, Any] = {"api_key": KEY} if provider == "anthropic" else {"oauth_token": TOKEN}

    def aboot_one_chunk(seen: Seen) -> tuple[Any, Chunks]:
        reply, body = streamed(data, size=len(data))
        transport = httpx2.MockTransport(Provider_(reply))
        return aboot(
            **creds, tpx_base_url=TPX_URL, env={}, transport=transport, observer=seen
        ), body

    t, _ = aboot_one_chunk(Seen())
    everything: list[bytes] = []
    async with t:
        await drain(t.stream(REQUEST), everything)
    count = len(everything)
    assert count > 3
    for taken in range(1, count + 1):
        seen = Seen()
        t, body = aboot_one_chunk(seen)
        async with t:
            stream = t.stream(REQUEST)
            got = [await stream.__anext__() for _ in range(taken)]
            await stream.aclose()
            assert body.closed
            assert kinds(got) == kinds(everything[:taken])
            if taken < count:
                assert_failed(t.exchange)
                assert seen.actions == ["CallerSend", "ProviderFail"]
            else:
                assert seen.actions == ["CallerSend", "ProviderReply", "Deliver"]
                assert t.exchange.last_outcome == "ok"
                assert t.exchange.pending == tool_ids_in(got)


@pytest.mark.parametrize("provider", ["anthropic", "tpx"])
def test_a_stream_ending_without_its_last_blank_line_still_waits_for_the_caller(
    provider: str,
) -> None:
    data = good_stream(provider)
    assert data.endswith(b"\n\n")
    data = data[:-1]  # the terminal event's closing blank line never comes
    t, _ = one_chunk_boot(provider, data, Seen())
    with t:
        everything = list(t.stream(REQUEST))
        assert (t.exchange.last_outcome, len(t.exchange.pending)) == ("ok", 1)
    for taken in range(1, len(everything)):
        t, _ = one_chunk_boot(provider, data, Seen())
        with t:
            stream = t.stream(REQUEST)
            for _ in range(taken):
                next(stream)
            stream.close()
            assert_failed(t.exchange)


def test_exchange_flush_returns_the_unterminated_last_event_and_takes_no_action() -> None:
    seen = Seen()
    ex = Exchange(Provider.ANTHROPIC, observer=seen)
    ex.send({**REQUEST, "stream": True})
    ex.receive_stream_start(200, SSE_HEADERS)
    data = native(NATIVE)
    events = ex.feed(data[:-1])
    assert not ex.stream_complete
    last = ex.flush()
    assert [e["type"] for e in last] == ["message_stop"]
    assert "message_stop" not in [e["type"] for e in events]
    assert ex.stream_complete
    assert ex.phase == "req"
    assert seen.actions == ["CallerSend"]
    assert ex.flush() == []
    assert ex.end_stream() == []
    assert seen.actions == ["CallerSend", "ProviderReply"]
    assert ex.deliver()["content"][1]["id"] == "toolu_01"
    # a malformed unterminated last event: ProviderFail, the error event last
    ex = Exchange(Provider.TPX, observer=seen)
    ex.send({**REQUEST, "stream": True})
    ex.receive_stream_start(200, SSE_HEADERS)
    ex.feed(b"data: {not json\n")
    failed = ex.flush()
    assert failed[-1]["type"] == "error"
    assert isinstance(ex.last_error, errors.ProtocolError)
    assert_failed(ex)
    with pytest.raises(errors.ExchangeStateError):
        ex.flush()
