"""The HTTP replay's wire readers (:mod:`conformance.gateway_http.abstraction`) on the fake's
own bodies, plain and streamed: what they read back is what the fake planted, and a body
that is not a complete reply reads as none."""

from __future__ import annotations

import asyncio
from typing import cast

import httpx2
import orjson
import pytest

from conformance.gateway_http.abstraction import (
    credential_problem,
    error_problem,
    refusal_problem,
    reply_view,
    request_ids,
    shape_of,
)
from conformance.gateway_http.client import ConvClient, Settled
from conformance.gateway_http.harness import API_KEY, OAUTH_TOKEN
from conformance.gateway_http.upstream import WIRE_ID, FakeUpstreams, Plan, UpstreamExchange
from tpx.values import ModelValue


def _exchange(path: str, body: dict[str, object], headers: dict[str, str]) -> UpstreamExchange:
    loop = asyncio.new_event_loop()
    try:
        return UpstreamExchange(1, path, headers, orjson.dumps(body), loop.create_future())
    finally:
        loop.close()


def _answer(path: str, stream: bool, plan: Plan) -> bytes:
    fake = FakeUpstreams()
    ex = _exchange(path, {"model": "m", "messages": [], "stream": stream}, {})
    status, data = fake._answer(fake.channel("k1"), ex, plan)
    assert status == 200
    return data


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/messages"])
@pytest.mark.parametrize("stream", [False, True])
def test_a_reply_reads_back_as_the_ids_the_fake_planted(path: str, stream: bool) -> None:
    data = _answer(path, stream, Plan("reply", ("t1", "t2")))
    view = reply_view(data)
    assert view is not None
    shape, ids = view
    assert shape == ("openai" if "chat" in path else "messages")
    matches = [WIRE_ID.fullmatch(i) for i in ids]
    assert [m.group(1, 2) for m in matches if m] == [("k1", "t1"), ("k1", "t2")]


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/messages"])
@pytest.mark.parametrize("stream", [False, True])
def test_a_reply_cut_short_is_no_reply(path: str, stream: bool) -> None:
    assert reply_view(_answer(path, stream, Plan("fail", fail="break"))) is None
    assert reply_view(_answer(path, stream, Plan("fail", fail="garbage"))) is None


def test_request_ids_read_the_last_turns_tool_results() -> None:
    openai = _exchange(
        "/v1/chat/completions",
        {
            "messages": [
                {"role": "tool", "tool_call_id": "old"},
                {"role": "assistant", "tool_calls": []},
                {"role": "tool", "tool_call_id": "a"},
                {"role": "tool", "tool_call_id": "b"},
                {"role": "user", "content": "text after the results"},
            ]
        },
        {},
    )
    assert request_ids(openai) == ["a", "b"]
    messages = _exchange(
        "/v1/messages",
        {
            "messages": [
                {"role": "assistant", "content": []},
                {
                    "role": "user",
                    "content": [
                        {"type": "tool_result", "tool_use_id": "a"},
                        {"type": "text", "text": "x"},
                        {"type": "tool_result", "tool_use_id": "a"},
                    ],
                },
            ]
        },
        {},
    )
    assert request_ids(messages) == ["a", "a"]  # a duplicate stays visible


def test_shapes_and_credentials() -> None:
    assert shape_of({"choices": []}) == "openai"
    assert shape_of({"type": "message"}) == "messages"
    assert shape_of({"type": "error"}) == "unparsable"
    bearer = {"authorization": f"Bearer {OAUTH_TOKEN}"}
    assert credential_problem(_exchange("/v1/chat/completions", {}, bearer)) is None
    assert credential_problem(_exchange("/v1/messages", {}, {"x-api-key": API_KEY})) is None
    leaked = credential_problem(_exchange("/v1/messages", {}, {**bearer, "x-api-key": API_KEY}))
    assert leaked is not None
    assert OAUTH_TOKEN not in leaked  # header names only, never values
    assert API_KEY not in leaked


def test_failures_the_client_sees_must_be_messages_shaped() -> None:
    error = {"type": "error", "error": {"type": "overloaded_error", "message": "busy"}}
    assert error_problem(Settled(529, orjson.dumps(error))) is None
    assert error_problem(Settled(502, b"<html>bad gateway</html>")) is not None
    start = b'event: message_start\ndata: {"type":"message_start","message":{}}\n\n'
    failed = start + b"event: error\ndata: " + orjson.dumps(error) + b"\n\n"
    assert error_problem(Settled(200, failed)) is None
    assert error_problem(Settled(200, start)) is not None  # broken off, no error event
    invalid = {"type": "error", "error": {"type": "invalid_request_error", "message": "x"}}
    assert refusal_problem(Settled(400, orjson.dumps(invalid))) is None
    assert refusal_problem(Settled(400, orjson.dumps(error))) is not None
    assert refusal_problem(Settled(200, b"{}")) is not None
    assert refusal_problem(None) is not None


def test_the_client_assembles_a_stream_around_pings() -> None:
    events = _answer("/v1/messages", True, Plan("reply", ("t1",)))
    ping = b'event: ping\ndata: {"type":"ping"}\n\n'
    unused = cast(httpx2.AsyncClient, None)  # settle() does no I/O
    client = ConvClient(ModelValue("c1"), "k1", unused, stream=True)
    client.sent = {"messages": [{"role": "user", "content": "[conv:k1] hi"}], "stream": True}
    first = events.index(b"\n\n") + 2  # after message_start
    client.settle(Settled(200, ping + events[:first] + ping + events[first:]))
    assert client.last_outcome == "ok"
    assert client.pending() == ["toolu_k1_t1_1"]
    assert client.ids == {"toolu_k1_t1_1": ("k1", "t1")}
