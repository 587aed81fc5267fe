"""Hostile reply shapes the fakes' generator does not draw, each through the real transport
(``create`` and ``stream``) and the exchange, with what the caller must then hold: the
exchange's spec outcome (Deliver with the reply's content, or ProviderFail with the error
kind the failure means) and, for a delivery, the message's model, text and thinking.

Found by ``make mutate``: each case kills a mutant of the stream translator, the Messages
stream reader or the exchange that the seed edge cover survives."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import httpx2
import orjson
import pytest

from conformance.abstraction import assemble_messages, sse_events
from conformance.fakes import KEY, TOKEN
from tpx import errors
from tpx.transport import Transport, boot
from tpx.transport.exchange import Exchange, Provider
from tpx.transport.translate.signing import ThinkingSigner

URL = "https://edge.fake.test/v1"
SECRET = "conformance-thinking-secret"
REQUEST: dict[str, Any] = {
    "model": "claude-edge",
    "max_tokens": 64,
    "messages": [{"role": "user", "content": "hi"}],
}


def _sse(event: str | None, body: Any) -> bytes:
    data = body if isinstance(body, str) else orjson.dumps(body).decode()
    return (f"event: {event}\n" if event else "").encode() + f"data: {data}\n\n".encode()


def _chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> bytes:
    choice = {"index": 0, "delta": delta, "finish_reason": finish}
    return _sse(None, {"id": "chatcmpl-edge", "choices": [choice], **extra})


def _transport(provider: Provider, serve: Callable[[bytes], httpx2.Response]) -> Transport:
    def handle(request: httpx2.Request) -> httpx2.Response:
        return serve(request.read())

    client = httpx2.Client(transport=httpx2.MockTransport(handle))
    if provider is Provider.TPX:
        return boot(
            oauth_token=TOKEN, tpx_base_url=URL, env={}, client=client, thinking_secret=SECRET
        )
    return boot(api_key=KEY, anthropic_base_url=URL, env={}, client=client)


def _streamed(provider: Provider, body: bytes) -> tuple[bytes, Exception | None, Transport]:
    headers = {"content-type": "text/event-stream"}
    t = _transport(provider, lambda _: httpx2.Response(200, headers=headers, content=body))
    data = bytearray()
    error: Exception | None = None
    try:
        for piece in t.stream({**REQUEST, "stream": True}):
            data += piece
    except Exception as exc:
        error = exc
    return bytes(data), error, t


def _delivered(provider: Provider, body: bytes) -> dict[str, Any]:
    data, error, t = _streamed(provider, body)
    assert error is None, error
    assert t.exchange.last_outcome == "ok"
    message = assemble_messages(data)
    assert message is not None
    return message


# -- Chat Completions streams -------------------------------------------------------------


def test_a_chunk_without_a_model_reports_the_requested_one() -> None:
    body = _chunk({"content": "hello"}) + _chunk({}, "stop") + b"data: [DONE]\n\n"
    message = _delivered(Provider.TPX, body)
    assert message["model"] == "claude-edge"
    assert message["content"] == [{"type": "text", "text": "hello"}]


def test_content_as_a_list_of_text_parts() -> None:
    parts = [{"type": "text", "text": "one "}, {"type": "text", "text": "two"}]
    body = (
        _chunk({"content": parts}, model="m")
        + _chunk({"content": [{"type": "text", "text": ""}]}, model="m")
        + _chunk({}, "stop", model="m")
        + b"data: [DONE]\n\n"
    )
    message = _delivered(Provider.TPX, body)
    assert "".join(b["text"] for b in message["content"] if b["type"] == "text") == "one two"


def test_each_thinking_block_is_signed_for_its_own_text() -> None:
    """Thinking, text, thinking again: two thinking blocks, each signature covering only
    its own block's text (a signature over both would not verify when the caller sends the
    second block back)."""
    body = (
        _chunk({"reasoning_content": "first"}, model="m")
        + _chunk({"content": "between"}, model="m")
        + _chunk({"reasoning_content": "second"}, model="m")
        + _chunk({"content": "after"}, "stop", model="m")
        + b"data: [DONE]\n\n"
    )
    message = _delivered(Provider.TPX, body)
    thinking = [b for b in message["content"] if b["type"] == "thinking"]
    assert [b["thinking"] for b in thinking] == ["first", "second"]
    signer = ThinkingSigner(SECRET)
    for block in thinking:
        assert signer.verify(block["thinking"], block["signature"]), block


def test_a_tool_call_whose_id_and_name_come_after_its_first_fragment() -> None:
    """A first fragment with neither id nor name, then the id and name at the same index:
    one call, under the late id (not a nameless call plus another)."""
    late = {"index": 0, "id": "call_late", "function": {"name": "probe", "arguments": ""}}
    body = (
        _chunk({"tool_calls": [{"index": 0, "function": {"arguments": ""}}]}, model="m")
        + _chunk({"tool_calls": [late]}, model="m")
        + _chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"probe": "x"}'}}]})
        + _chunk({}, "tool_calls", model="m")
        + b"data: [DONE]\n\n"
    )
    message = _delivered(Provider.TPX, body)
    calls = [b for b in message["content"] if b["type"] == "tool_use"]
    assert [(b["name"], b["input"]) for b in calls] == [("probe", {"probe": "x"})]
    assert message["stop_reason"] == "tool_use"


def test_an_error_event_of_a_type_tpx_does_not_know() -> None:
    """An in-stream error of an unknown type is the provider's error (ProviderFail with an
    HTTPStatusError, 500 ``api_error``, naming the provider's type), not a malformed
    stream (a ProtocolError, 502); the caller's stream ends with that error event."""
    body = _chunk({"content": "partial"}, model="m") + _sse(
        "error", {"error": {"type": "quota_exhausted_error", "message": "out of quota"}}
    )
    data, error, t = _streamed(Provider.TPX, body)
    assert isinstance(error, errors.HTTPStatusError)
    assert error.status == 500
    assert "quota_exhausted_error: out of quota" in error.message
    assert t.exchange.last_outcome == "err"
    name, payload = sse_events(data)[-1]
    assert name == "error"
    assert orjson.loads(payload)["error"]["type"] == "api_error"


# -- Messages streams --------------------------------------------------------------------


def _messages_stream(*middle: bytes) -> bytes:
    start = {
        "type": "message_start",
        "message": {
            "id": "msg_edge",
            "type": "message",
            "role": "assistant",
            "model": "m",
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {"input_tokens": 1, "output_tokens": 0},
        },
    }
    delta = {
        "type": "message_delta",
        "delta": {"stop_reason": "end_turn"},
        "usage": {"output_tokens": 1},
    }
    return (
        _sse("message_start", start)
        + b"".join(middle)
        + _sse("message_delta", delta)
        + _sse("message_stop", {"type": "message_stop"})
    )


def _block(index: int, text: str) -> list[bytes]:
    return [
        _sse(
            "content_block_start",
            {
                "type": "content_block_start",
                "index": index,
                "content_block": {"type": "text", "text": ""},
            },
        ),
        _sse(
            "content_block_delta",
            {
                "type": "content_block_delta",
                "index": index,
                "delta": {"type": "text_delta", "text": text},
            },
        ),
    ]


def test_a_delta_for_a_block_that_is_not_open_fails_the_exchange() -> None:
    start, _ = _block(0, "a")
    stray = _sse(
        "content_block_delta",
        {"type": "content_block_delta", "index": 1, "delta": {"type": "text_delta", "text": "x"}},
    )
    stop = _sse("content_block_stop", {"type": "content_block_stop", "index": 0})
    good = _messages_stream(*_block(0, "a"), stop)
    assert _delivered(Provider.ANTHROPIC, good)["content"] == [{"type": "text", "text": "a"}]
    for bad in (_messages_stream(start, stray, stop), _messages_stream(*_block(0, "a"), stray)):
        data, error, t = _streamed(Provider.ANTHROPIC, bad)
        assert isinstance(error, errors.ProtocolError), error
        assert t.exchange.last_outcome == "err"
        assert sse_events(data)[-1][0] == "error"


@pytest.mark.parametrize("provider", [Provider.ANTHROPIC, Provider.TPX], ids=lambda p: p.name)
def test_a_provider_echoing_the_credential_in_its_stream(provider: Provider) -> None:
    """Secrets never reach the caller: a stream quoting the credential (the key / token the
    provider was sent) reaches the caller with it redacted."""
    secret = KEY if provider is Provider.ANTHROPIC else TOKEN
    said = f"you sent {secret}, and again {secret}"
    if provider is Provider.TPX:
        body = _chunk({"content": said}, model="m") + _chunk({}, "stop") + b"data: [DONE]\n\n"
    else:
        start, delta = _block(0, said)
        stop = _sse("content_block_stop", {"type": "content_block_stop", "index": 0})
        body = _messages_stream(start, delta, stop)
    data, error, _ = _streamed(provider, body)
    assert error is None, error
    assert secret.encode() not in data
    message = assemble_messages(data)
    assert message is not None
    text = "".join(b["text"] for b in message["content"] if b["type"] == "text")
    assert secret not in text
    assert text.startswith("you sent [REDACTED]")


# -- the exchange's own contract ------------------------------------------------------------


@pytest.mark.parametrize("provider", [Provider.ANTHROPIC, Provider.TPX], ids=lambda p: p.name)
def test_receive_takes_no_headers_and_refuses_a_bad_status(provider: Provider) -> None:
    """``Exchange.receive``: headers ``None`` means none (a 429 without them is still a
    RateLimitedError, with no retry-after); a status that is no int raises TypeError and
    changes nothing (the exchange stays in ``req``)."""
    ex = Exchange(provider)
    ex.send(REQUEST)
    before = ex.snapshot()
    for status, headers in (("200", {}), (True, {}), (200, ["not", "a", "mapping"])):
        with pytest.raises(TypeError):
            ex.receive(status, headers, b"{}")  # type: ignore[arg-type]
        assert ex.snapshot() == before
    with pytest.raises(errors.RateLimitedError) as raised:
        ex.receive(429, None, b'{"error": {"message": "slow down"}}')
    assert raised.value.retry_after is None
    assert ex.phase == "idle"
    assert ex.last_outcome == "err"


def _answer(status: int, headers: dict[str, str], body: bytes, _: bytes) -> httpx2.Response:
    return httpx2.Response(status, headers=headers, content=body)


def _reply_body(provider: Provider, *, tool: bool = False) -> bytes:
    """A well-formed native reply (one ``probe`` tool call when *tool*, else text)."""
    if provider is Provider.ANTHROPIC:
        block: dict[str, Any] = (
            {"type": "tool_use", "id": "toolu_edge", "name": "probe", "input": {}}
            if tool
            else {"type": "text", "text": "hello"}
        )
        return orjson.dumps(
            {
                "id": "msg_edge",
                "type": "message",
                "role": "assistant",
                "model": "m",
                "content": [block],
                "stop_reason": "tool_use" if tool else "end_turn",
                "stop_sequence": None,
                "usage": {"input_tokens": 1, "output_tokens": 1},
            }
        )
    message: dict[str, Any] = {"role": "assistant", "content": None if tool else "hello"}
    if tool:
        call = {"id": "call_edge", "type": "function"}
        message["tool_calls"] = [{**call, "function": {"name": "probe", "arguments": "{}"}}]
    choice = {"index": 0, "message": message, "finish_reason": "tool_calls" if tool else "stop"}
    return orjson.dumps(
        {"id": "chatcmpl-edge", "object": "chat.completion", "model": "m", "choices": [choice]}
    )


@pytest.mark.parametrize("provider", [Provider.ANTHROPIC, Provider.TPX], ids=lambda p: p.name)
def test_a_3xx_reply_is_a_provider_failure(provider: Provider) -> None:
    """Only a 2xx is ProviderReply: a 300 carrying a well-formed reply is ProviderFail with
    the error contract's HTTPStatusError, its status kept (redirects are not followed)."""
    body = _reply_body(provider)
    headers = {"content-type": "application/json", "location": f"{URL}/elsewhere"}
    for status in (200, 300):
        t = _transport(provider, functools.partial(_answer, status, headers, body))
        if status == 200:  # the same body as a 2xx is delivered
            assert t.create(REQUEST)["content"] == [{"type": "text", "text": "hello"}]
            assert t.exchange.last_outcome == "ok"
            continue
        with pytest.raises(errors.HTTPStatusError) as raised:
            t.create(REQUEST)
        assert raised.value.status == 300
        assert (t.exchange.phase, t.exchange.turn, t.exchange.last_outcome) == ("idle", 1, "err")


@pytest.mark.parametrize("provider", [Provider.ANTHROPIC, Provider.TPX], ids=lambda p: p.name)
def test_abort_only_with_tool_uses_pending(provider: Provider) -> None:
    """``CallerAbort``'s guard: idle, below the bound, a provider and a non-empty
    ``pending``. Out of it, ``abort()`` raises ExchangeStateError and changes nothing; in
    it, the turn ends ``err`` with ``pending`` cleared and a PairingError returned."""
    ex = Exchange(provider)
    for step in ("fresh", "in flight", "delivered without tool_uses"):
        before = ex.snapshot()
        with pytest.raises(errors.ExchangeStateError):
            ex.abort()
        assert ex.snapshot() == before, step
        if step == "fresh":
            ex.send(REQUEST)
        elif step == "in flight":
            ex.receive(200, None, _reply_body(provider))
            ex.deliver()
    assert (ex.phase, ex.pending) == ("idle", frozenset())
    ex.send(REQUEST)
    ex.receive(200, None, _reply_body(provider, tool=True))
    ex.deliver()
    assert (ex.turn, len(ex.pending)) == (2, 1)
    error = ex.abort()
    assert isinstance(error, errors.PairingError)
    assert (ex.phase, ex.turn, ex.pending, ex.last_outcome) == ("idle", 3, frozenset(), "err")


@pytest.mark.parametrize("provider", [Provider.ANTHROPIC, Provider.TPX], ids=lambda p: p.name)
def test_stream_steps_before_the_stream_started(provider: Provider) -> None:
    """``feed``, ``flush`` and ``end_stream`` take a body that has begun: sent but before
    ``receive_stream_start`` (and for a plain exchange) they raise ExchangeStateError and
    change nothing (the exchange stays in ``req``)."""
    for streamed in (True, False):
        ex = Exchange(provider)
        ex.send({**REQUEST, "stream": True} if streamed else REQUEST)
        before = ex.snapshot()
        with pytest.raises(errors.ExchangeStateError):
            ex.feed(b"data: [DONE]\n\n")
        for step in (ex.flush, ex.end_stream):
            with pytest.raises(errors.ExchangeStateError):
                step()
        assert ex.snapshot() == before
    ex = Exchange(provider)
    ex.send({**REQUEST, "stream": True})
    ex.receive_stream_start(200, {"content-type": "text/event-stream"})
    assert ex.feed(b": a comment\n\n") == []  # now enabled
    assert ex.phase == "req"


@pytest.mark.parametrize("provider", [Provider.ANTHROPIC, Provider.TPX], ids=lambda p: p.name)
def test_a_stream_ending_before_its_terminal_event_says_so(provider: Provider) -> None:
    """A body that ends before ``[DONE]`` (TPX) / ``message_stop`` (ANTHROPIC) is a
    ProtocolError telling the caller the stream ended before that event (not the message
    of a reply tpx could not read), in the raised error and the caller's error event."""
    if provider is Provider.TPX:
        body = _chunk({"content": "cut"}, model="m") + _chunk({}, "stop")
        marker = "[DONE]"
    else:
        stop = _sse("content_block_stop", {"type": "content_block_stop", "index": 0})
        body = _messages_stream(*_block(0, "cut"), stop).rsplit(b"event: message_stop", 1)[0]
        marker = "message_stop"
    data, error, t = _streamed(provider, body)
    assert isinstance(error, errors.ProtocolError), error
    assert f"the stream ended before {marker}" in error.message
    assert t.exchange.last_outcome == "err"
    name, payload = sse_events(data)[-1]
    assert name == "error"
    assert f"the stream ended before {marker}" in orjson.loads(payload)["error"]["message"]


@pytest.mark.parametrize("provider", [Provider.ANTHROPIC, Provider.TPX], ids=lambda p: p.name)
def test_the_exchange_reports_the_bound_it_keeps(provider: Provider) -> None:
    """``max_turns`` is the spec's ``MaxTurns`` as the exchange keeps it: a bounded one
    reports its bound and refuses ``CallerSend`` once it is reached; an unbounded one
    reports ``None``."""
    assert Exchange(provider).max_turns is None
    ex = Exchange(provider, max_turns=2)
    for _ in range(2):
        ex.send(REQUEST)
        ex.receive(200, None, _reply_body(provider))
        ex.deliver()
    assert ex.max_turns == ex.turn == 2
    with pytest.raises(errors.ExchangeStateError):
        ex.send(REQUEST)


@pytest.mark.parametrize("provider", [Provider.ANTHROPIC, Provider.TPX], ids=lambda p: p.name)
def test_a_fault_inside_the_stream_translation_is_a_provider_failure(
    provider: Provider, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Nothing wedges an exchange: an exception tpx did not foresee while it reads a stream
    is ``ProviderFail`` (the turn ends ``err``, the caller's last event is an ``error``),
    and the next turn works."""
    from tpx.transport.translate import stream

    def broken(self: Any, chunk: bytes) -> Any:
        raise RuntimeError("a fault inside the translation")

    ex = Exchange(provider)
    ex.send({**REQUEST, "stream": True})
    ex.receive_stream_start(200, {"content-type": "text/event-stream"})
    with monkeypatch.context() as patched:
        patched.setattr(stream.SSEParser, "feed", broken)
        events = ex.feed(b"data: {}\n\n")
    assert (ex.phase, ex.turn, ex.last_outcome) == ("idle", 1, "err")
    assert events[-1]["type"] == "error"
    assert isinstance(ex.last_error, errors.ModelError)
    ex.send(REQUEST)
    ex.receive(200, None, _reply_body(provider))
    assert ex.deliver()["content"] == [{"type": "text", "text": "hello"}]
