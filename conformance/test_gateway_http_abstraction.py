"""The HTTP replay's wire readers (:mod:`tpx.audit.abstraction`) on the fake's
own bodies, plain and streamed: what they read back is what the fake planted, and a body
that is not a complete reply reads as none; the binding's readers and judge
(:mod:`tpx.audit.binding`) on hand-made histories of both wires."""

from __future__ import annotations

import asyncio
from typing import Any, cast

import httpx2
import orjson
import pytest

from tpx.audit.abstraction import (
    Observer,
    binding_problems,
    client_call,
    credential_problem,
    error_problem,
    refusal_problem,
    reply_view,
    request_ids,
    shape_of,
)
from tpx.audit.binding import (
    output_for,
    reply_problems,
    request_kind,
    request_problems,
    request_view,
    round_problems,
)
from tpx.audit.binding import reply_view as binding_reply_view
from tpx.audit.client import ConvClient, Settled
from tpx.audit.harness import API_KEY, GATEWAY_SECRET, OAUTH_TOKEN
from tpx.audit.upstream import WIRE_ID, FakeUpstreams, Plan, UpstreamExchange
from tpx.oracle.values import ModelValue
from tpx.transport.translate.ids import sign_caller_id, to_caller_id


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


# -- the binding: which call each id, call and result is about ---------------------------


def _use(call: str) -> dict[str, object]:
    return {"type": "tool_use", "id": f"toolu_{call}", "name": "lookup", "input": {"call": call}}


def _result(answers: str, call: str) -> dict[str, object]:
    return {"type": "tool_result", "tool_use_id": f"toolu_{answers}", "content": output_for(call)}


def _messages(*rounds: tuple[list[str], list[tuple[str, str]]]) -> dict[str, object]:
    """A Messages request: per round, its calls and its results (id's call, output's call)."""
    messages: list[dict[str, object]] = [{"role": "user", "content": "[conv:k1] hi"}]
    for calls, results in rounds:
        messages.append({"role": "assistant", "content": [_use(c) for c in calls]})
        content = [_result(i, o) for i, o in results] + [{"type": "text", "text": "go on"}]
        messages.append({"role": "user", "content": content})
    return {"model": "m", "messages": messages}


def test_a_faithful_history_binds_every_result_to_its_call() -> None:
    body = _messages(
        (["k1_t1_1", "k1_t2_2"], [("k1_t2_2", "k1_t2_2"), ("k1_t1_1", "k1_t1_1")]),
        (["k1_t1_3"], [("k1_t1_3", "k1_t1_3")]),
    )
    view = request_view(body, openai=False)
    assert [len(r.uses) for r in view.rounds] == [2, 1]
    assert round_problems(view, "w") == []
    emitted = [("k1_t1_1", "k1_t2_2"), ("k1_t1_3",)]
    assert request_problems(view, view, emitted, "w") == []
    c1 = ModelValue("c1")
    calls, results = view.spec({"k1": c1})[1]
    assert calls == results == frozenset({((c1, "t1"), (c1, "t1"))})


def test_a_result_under_another_calls_id_is_caught() -> None:
    swapped = _messages((["k1_t1_1", "k1_t2_2"], [("k1_t1_1", "k1_t2_2"), ("k1_t2_2", "k1_t1_1")]))
    found = round_problems(request_view(swapped, openai=False), "w")
    assert len(found) == 2
    assert "toolu_k1_t1_1 (call k1_t1_1) carries the output of k1_t2_2" in found[0]


def test_lost_duplicated_and_invented_results_are_caught() -> None:
    calls = ["k1_t1_1", "k1_t2_2"]
    lost = _messages((calls, [("k1_t1_1", "k1_t1_1")]))
    twice = _messages((calls, [("k1_t1_1", "k1_t1_1"), ("k1_t1_1", "k1_t1_1"), ("k1_t2_2",) * 2]))
    invented = _messages((calls, [("k1_t1_1",) * 2, ("k1_t2_2",) * 2, ("k1_t1_9",) * 2]))
    for body, word in ((lost, "lost ['k1_t2_2']"), (twice, "invented ['k1_t1_1']")):
        (problem,) = round_problems(request_view(body, openai=False), "w")
        assert word in problem
    (problem,) = round_problems(request_view(invented, openai=False), "w")
    assert "invented ['k1_t1_9']" in problem
    stray = {"messages": [{"role": "user", "content": [_result("k1_t1_1", "k1_t1_1")]}]}
    (problem,) = round_problems(request_view(stray, openai=False), "w")
    assert "follows no call" in problem


def test_the_upstream_request_carries_the_clients_rounds_once_each() -> None:
    one = (["k1_t1_1"], [("k1_t1_1", "k1_t1_1")])
    two = (["k1_t1_2"], [("k1_t1_2", "k1_t1_2")])
    client = request_view(_messages(one, two), openai=False)
    emitted = [("k1_t1_1",), ("k1_t1_2",)]
    dropped = request_view(_messages(two), openai=False)
    assert any("1 tool rounds" in p for p in request_problems(dropped, client, emitted, "w"))
    repeated = request_view(_messages(one, one), openai=False)
    found = request_problems(
        repeated, request_view(_messages(one, one), openai=False), emitted, "w"
    )
    assert any("carried twice" in p for p in found)
    made_up = request_view(_messages((["k1_t2_7"], [("k1_t2_7", "k1_t2_7")])), openai=False)
    assert any("no reply's" in p for p in request_problems(made_up, made_up, emitted, "w"))


def test_a_chat_completions_request_reads_as_its_rounds() -> None:
    def call(c: str) -> dict[str, object]:
        args = orjson.dumps({"call": c}).decode()
        return {"id": f"call_{c}", "type": "function", "function": {"name": "f", "arguments": args}}

    body = {
        "messages": [
            {"role": "user", "content": "[conv:k1] hi"},
            {"role": "assistant", "tool_calls": [call("k1_t1_1"), call("k1_t2_2")]},
            {"role": "tool", "tool_call_id": "call_k1_t1_1", "content": output_for("k1_t2_2")},
            {"role": "tool", "tool_call_id": "call_k1_t2_2", "content": output_for("k1_t1_1")},
            {"role": "user", "content": "go on"},
        ]
    }
    view = request_view(body, openai=True)
    (r,) = view.rounds
    assert [u.named for u in r.uses] == [u.made for u in r.uses] == ["k1_t1_1", "k1_t2_2"]
    assert [(a.named, a.answers) for a in r.answers] == [
        ("k1_t1_1", "k1_t2_2"),
        ("k1_t2_2", "k1_t1_1"),
    ]
    assert len(round_problems(view, "w")) == 2


def test_ids_handed_to_the_client_must_name_the_calls_they_sit_on() -> None:
    """A signed id names the call of the wire id it was signed for; ids rotated among a
    reply's calls are caught, and so is an id whose MAC is not the gateway's."""
    signed = [
        sign_caller_id(to_caller_id(f"call_k1_{c}", n), GATEWAY_SECRET)
        for n, c in enumerate(("t1_1", "t2_2"))
    ]
    assert [client_call(i) for i in signed] == ["k1_t1_1", "k1_t2_2"]
    forged = signed[0].replace(signed[0].split("-")[2][:20], "0" * 20)
    assert client_call(forged) is None
    blocks = [
        {"type": "tool_use", "id": i, "name": "lookup", "input": {"call": c}}
        for i, c in zip(signed, ("k1_t1_1", "k1_t2_2"), strict=True)
    ]
    made = binding_reply_view({"content": [_use("k1_t1_1"), _use("k1_t2_2")]})
    good = binding_reply_view({"content": blocks}, client_call)
    assert reply_problems(good, made, "w") == []
    rotated = [{**b, "id": i} for b, i in zip(blocks, signed[::-1], strict=True)]
    found = reply_problems(binding_reply_view({"content": rotated}, client_call), made, "w")
    assert len(found) == 3


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/messages"])
def test_the_fake_names_each_call_in_its_input(path: str) -> None:
    fake = FakeUpstreams()
    ex = _exchange(path, {"model": "m", "messages": [], "stream": False}, {})
    status, data = fake._answer(fake.channel("k1"), ex, Plan("reply", ("t1", "t2")))
    assert status == 200
    view = binding_reply_view(orjson.loads(data))
    assert [(u.named, u.made) for u in view.uses] == [("k1_t1_1",) * 2, ("k1_t2_2",) * 2]
    assert fake.channels["k1"].rounds == [("k1_t1_1", "k1_t2_2")]
    fake._answer(fake.channel("k1"), ex, Plan("fail", fail="break"))  # never a whole reply
    assert fake.channels["k1"].rounds == [("k1_t1_1", "k1_t2_2")]


def test_request_kinds() -> None:
    assert request_kind(["a", "b"], ["b", "a"]) == "ok"
    assert request_kind([], []) == "ok"
    assert request_kind(["a", "a", "b"], ["a", "b"]) == "duplicated"
    assert request_kind(["a", "x"], ["a"]) == "unknown"
    assert request_kind(["a"], ["a", "b"]) == "missing"


def test_the_observer_reads_the_bound_variables_from_the_bytes() -> None:
    """``calls``, ``hist``, ``wireRes`` (the spec's ids bound to calls and results): what the
    client holds on each call of its last assistant turn, and the rounds of results its
    requests carried upstream, each ``<<id, call>>``."""
    fake = FakeUpstreams()
    ch = fake.channel("k1")
    first: dict[str, Any] = {
        "model": "m",
        "messages": [{"role": "user", "content": "[conv:k1] hi"}],
    }
    ex0 = _exchange("/v1/messages", first, {})
    ex0.status, ex0.response = fake._answer(ch, ex0, Plan("reply", ("t1", "t2")))
    unused = cast(httpx2.AsyncClient, None)  # settle() does no I/O
    c1 = ModelValue("c1")
    client = ConvClient(c1, "k1", unused)
    client.sent, client.arrived = first, ex0
    client.settle(Settled(200, ex0.response))
    ex1 = _exchange("/v1/messages", orjson.loads(client.fresh_body()), {})
    ch.exchanges[:] = [ex0, ex1]
    obs = Observer(True, False, "ANTHROPIC", {c1: client}, {c1: ch})
    bound = obs.bound(client, ch)
    t1, t2 = (c1, ModelValue("t1")), (c1, ModelValue("t2"))
    assert bound["calls"] == frozenset({(t1, t1), (t2, t2)})
    assert bound["wireRes"] == (frozenset({(t1, t1), (t2, t2)}),)
    assert bound["hist"] == ()  # the reply it was handed answered a request without rounds
    assert bound["signedBy"] == 0  # ANTHROPIC ids are the provider's own
    assert [p for p, _ in binding_problems(obs)] == ["OneRequest", "OneRequest"]  # unclaimed
    client.forwarded[:] = [(ex0, orjson.dumps(first)), (ex1, ex1.body)]
    assert binding_problems(Observer(True, False, "ANTHROPIC", {c1: client}, {c1: ch})) == []
    swapped = ex1.body.replace(b"output of k1_t1_1", b"output of k1_tX").replace(
        b"output of k1_t2_2", b"output of k1_t1_1"
    )
    ex1.body = swapped.replace(b"output of k1_tX", b"output of k1_t2_2")
    found = binding_problems(Observer(True, False, "ANTHROPIC", {c1: client}, {c1: ch}))
    assert {p for p, _ in found} == {"Binding"}
    assert obs.rounds(ex1) == (frozenset({(t1, t2), (t2, t1)}),)
