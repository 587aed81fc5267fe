"""What a client of the gateway sees when its upstream answers in ways the conversations of
``test_gateway_upstream_live.py`` do not: over real loopback HTTP (a scripted upstream on a
socket, the gateway's own client, ``tpx serve``'s app under uvicorn or the in-process sync SDK
transport), nothing mocked in between.

* An upstream context error (``maximum context length ...``), in a reply, at a stream's start
  or as an error chunk inside a stream: the client reads the Messages wording ``prompt is too
  long: N tokens > M maximum`` (Claude Code compacts on it), and the exchange's log line says
  so; numbers the error does not carry are the gateway's count and the model's window.
* A streamed request the upstream holds past the ping interval, then refuses: the client,
  which already has the SSE headers and pings, gets the refusal as an ``error`` event.
* The client leaving while the upstream still holds its streamed request: the gateway stops
  asking (the upstream sees its connection closed).
* A redirect from the upstream is not followed (the request reaches the upstream once); a
  refused stream's error quotes the upstream's own words.
* A stream's first events reach the client while the upstream is still writing the rest.
* A pass-through reply that spells a gateway secret in JSON escapes is withheld whole.
* ``log_bodies``: the reply's body is in the exchange's log line.
* ``[[upstreams]]``: a stream broken after its status and headers, before any event, is a
  502 for its client (its reply began: it does not move), and its upstream cools down; under
  ``--monitor`` with the seeded failover of a reply that began, the client gets the monitor's
  stop, and the other upstream nothing.
* Settings without an upstream credential: the upstream is asked without one.
* An upstream transport given to the in-process SDK client reads each request's body as
  ``request.content``.
"""

from __future__ import annotations

import re
import socket
import threading
from typing import Any

import attrs
import httpx2
import orjson
import pytest

from conformance.abstraction import assemble_messages
from conformance.fakes import KEY
from conformance.gateway_core import AUTH, log_records, settings_for
from conformance.pool_bugs import POOL_BUGS
from conformance.test_gateway_upstream_live import (
    WIRINGS,
    Wiring,
    _gateway,
    _header,
    _pooled,
    _said_hello,
    _served,
    _turn,
    status,
)
from tests.gateway.scripted import ScriptedUpstream, Step, answer, until_closed
from tpx.gateway.context.config import ContextConfig
from tpx.gateway.core import Gateway
from tpx.gateway.settings import Limits, Settings
from tpx.gateway.upstream import SyncUpstream
from tpx.sdk import GatewayTransport
from tpx.transport.exchange import Provider
from tpx.transport.translate.overflow import too_long
from tpx.transport.translate.profiles import get_profile

#: a hang guard only: how long a step waits for what the test does next
GUARD_S = 30.0
TOO_LONG = re.compile(r"^prompt is too long: (\d+) tokens > (\d+) maximum$")
#: vLLM's wording, with both numbers
VLLM_TOO_LONG = {
    "error": {
        "message": "This model's maximum context length is 8192 tokens. However, you requested "
        "9000 tokens (8936 in the messages, 64 in the completion). Please reduce the length "
        "of the messages or completion.",
        "type": "BadRequestError",
        "code": 400,
    }
}
#: OpenAI's newer wording: no numbers
OPENAI_TOO_LONG = {
    "error": {
        "message": "Your input exceeds the context window of this model. Please adjust your "
        "input and try again.",
        "type": "invalid_request_error",
        "code": "context_length_exceeded",
    }
}


def _settings(upstream: ScriptedUpstream, **changes: Any) -> Settings:
    return settings_for(Provider.TPX, base_url=upstream.url + "/v1", monitor=False, **changes)


def _chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
    body = {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "model": "m",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    return b"data: " + orjson.dumps(body) + b"\n\n"


def _sse(conn: socket.socket, data: bytes) -> None:
    conn.sendall(
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: %d\r\n\r\n%s"
        % (len(data), data)
    )


def refusal(code: int, error: dict[str, Any]) -> Step:
    """Answer *code* with *error* as the JSON body."""
    body = orjson.dumps(error)

    def step(conn: socket.socket, head: bytes, request: bytes) -> bool:
        conn.sendall(
            b"HTTP/1.1 %d Bad Request\r\ncontent-type: application/json\r\n"
            b"content-length: %d\r\n\r\n%s" % (code, len(body), body)
        )
        return True

    return step


def error_chunk(error: dict[str, Any]) -> Step:
    """A stream that begins, then carries *error* as a chunk (as vLLM does for an error met
    after the headers went out)."""

    def step(conn: socket.socket, head: bytes, request: bytes) -> bool:
        data = b"data: " + orjson.dumps(error) + b"\n\n"
        _sse(conn, _chunk({"role": "assistant", "content": ""}) + data)
        return True

    return step


def _events(data: bytes) -> list[dict[str, Any]]:
    return [orjson.loads(line[5:]) for line in data.splitlines() if line.startswith(b"data:")]


# -- context errors --------------------------------------------------------------------------


@pytest.mark.parametrize("where", ["reply", "stream start"])
@pytest.mark.parametrize("wiring", WIRINGS)
def test_an_upstream_context_error_reaches_the_client_in_the_messages_wording(
    wiring: Wiring, where: str
) -> None:
    """A 400 saying the request exceeds the context window (a reply, or a stream refused at
    its start): the client gets a 400 ``invalid_request_error`` in the Messages wording with
    the upstream's numbers, and the log line marks the context error."""
    stream = where == "stream start"
    with ScriptedUpstream(refusal(400, VLLM_TOO_LONG)) as upstream:
        settings = _settings(upstream, profile=get_profile("vllm"))
        with log_records() as lines, _gateway(wiring, settings) as client:
            reply = client.post("/v1/messages", json=_turn(stream), headers=AUTH)
        seen = len(upstream.requests)
    assert reply.status_code == 400, reply.text
    assert reply.json()["error"] == {
        "type": "invalid_request_error",
        "message": too_long(9000, 8192),
    }
    assert seen == 1
    assert [line.get("context_error") for line in lines] == [True]


@pytest.mark.parametrize("wiring", WIRINGS)
def test_a_context_error_inside_a_stream_becomes_an_error_event_in_the_messages_wording(
    wiring: Wiring,
) -> None:
    with ScriptedUpstream(error_chunk(VLLM_TOO_LONG)) as upstream:
        settings = _settings(upstream, profile=get_profile("vllm"))
        with log_records() as lines, _gateway(wiring, settings) as client:
            reply = client.post("/v1/messages", json=_turn(True), headers=AUTH)
    assert reply.status_code == 200, reply.text
    errors = [e for e in _events(reply.content) if e["type"] == "error"]
    assert errors == [
        {
            "type": "error",
            "error": {"type": "invalid_request_error", "message": too_long(9000, 8192)},
        }
    ]
    assert [line.get("context_error") for line in lines] == [True]


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
def test_a_context_error_without_numbers_is_worded_with_the_count_and_the_window(
    stream: bool,
) -> None:
    """The upstream says the input does not fit, without numbers; the gateway counted the
    request against the model's configured window (4096): M is that window, N above it."""
    window = 4096
    body = {**_turn(stream), "messages": [{"role": "user", "content": "word " * 600}]}
    with ScriptedUpstream(refusal(400, OPENAI_TOO_LONG)) as upstream:
        settings = _settings(
            upstream,
            model="up-model",
            profile=get_profile("openai"),
            context=ContextConfig(window=window),
        )
        with log_records() as lines, _gateway("sdk", settings) as client:
            reply = client.post("/v1/messages", json=body, headers=AUTH)
    assert reply.status_code == 400, reply.text
    error = reply.json()["error"]
    assert error["type"] == "invalid_request_error"
    found = TOO_LONG.match(error["message"])
    assert found is not None, error
    assert int(found[2]) == window < int(found[1])
    assert lines[0]["context"]["window"] == window  # the request was counted


# -- pings, then the upstream's answer ---------------------------------------------------------


def _pinged_stream(
    url: str, pinged: threading.Event, leave: bool = False
) -> tuple[httpx2.Response, bytes]:
    """Post a streamed turn; set *pinged* once a ping arrived (*leave*: then hang up)."""
    data = b""
    with (
        httpx2.Client(base_url=url, timeout=60) as client,
        client.stream("POST", "/v1/messages", json=_turn(True), headers=AUTH) as reply,
    ):
        for piece in reply.iter_bytes():
            data += piece
            if b"event: ping" in data and not pinged.is_set():
                pinged.set()
                if leave:
                    break
    return reply, data


def after(event: threading.Event, then: Step) -> Step:
    """Run *then* once *event* is set."""

    def step(conn: socket.socket, head: bytes, request: bytes) -> bool:
        assert event.wait(GUARD_S)
        return then(conn, head, request)

    return step


def _fast_pings() -> Limits:
    return attrs.evolve(Limits(), ping_interval=0.02)


@pytest.mark.parametrize("code", [500, 529])
def test_a_stream_refused_after_pings_ends_with_an_error_event(code: int) -> None:
    """The upstream holds a streamed request past the ping interval (the client has the SSE
    headers and pings), then refuses it: the refusal reaches the client as an ``error``
    event, the stream's last, the same error a refusal before any byte is as a response."""
    pinged = threading.Event()
    with ScriptedUpstream(after(pinged, status(code))) as upstream:
        with _served(_settings(upstream, limits=_fast_pings())) as url:
            reply, data = _pinged_stream(url, pinged)
        with _served(_settings(upstream)) as url, httpx2.Client(base_url=url) as client:
            unpinged = client.post("/v1/messages", json=_turn(True), headers=AUTH)
    assert reply.status_code == 200
    assert data.rstrip().split(b"\n\n")[-1].startswith(b"event: error\ndata: ")
    assert unpinged.status_code == code
    event, refused = _events(data)[-1], unpinged.json()
    assert event["request_id"] == reply.headers["request-id"]
    assert {**event, "request_id": ""} == {**refused, "request_id": ""}
    assert len(upstream.requests) == 2


def test_a_client_leaving_during_pings_stops_the_upstream_request() -> None:
    """The client hangs up while the upstream still holds its streamed request: the gateway
    closes the upstream connection (it stops asking), and serves the next request."""
    pinged, closed = threading.Event(), threading.Event()
    with (
        log_records() as lines,
        ScriptedUpstream(until_closed(closed), answer) as upstream,
        _served(_settings(upstream, limits=_fast_pings())) as url,
    ):
        _pinged_stream(url, pinged, leave=True)
        stopped = closed.wait(GUARD_S)
        with httpx2.Client(base_url=url, timeout=60) as client:
            again = client.post("/v1/messages", json=_turn(False), headers=AUTH)
    assert stopped
    assert again.status_code == 200, again.text
    assert len(upstream.requests) == 2
    left = [line for line in lines if line.get("stream")]
    assert len(left) == 1
    assert left[0]["client_gone"] is True


# -- what the gateway's client does with the upstream's answer ---------------------------------


def redirect(conn: socket.socket, head: bytes, request: bytes) -> bool:
    """A 307 to the same path on the same upstream."""
    path = head.split(b" ", 2)[1]
    conn.sendall(
        b"HTTP/1.1 307 Temporary Redirect\r\nlocation: %s\r\ncontent-length: 0\r\n\r\n" % path
    )
    return True


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
@pytest.mark.parametrize("wiring", WIRINGS)
def test_a_redirect_from_the_upstream_is_not_followed(wiring: Wiring, stream: bool) -> None:
    """A 3xx is not a reply: the client gets an error, and the request (which the upstream
    may be generating) is not sent anywhere again."""
    with ScriptedUpstream(redirect, answer) as upstream:
        with _gateway(wiring, _settings(upstream)) as client:
            reply = client.post("/v1/messages", json=_turn(stream), headers=AUTH)
        seen = len(upstream.requests)
    assert reply.status_code >= 400, reply.text
    assert reply.json()["type"] == "error"
    assert seen == 1


def in_two_parts(first_seen: threading.Event) -> Step:
    """A stream whose first events are written at once and the rest only once the client
    has read the first text (chunked, so the client cannot wait for a length)."""

    def piece(data: bytes) -> bytes:
        return b"%x\r\n%s\r\n" % (len(data), data)

    def step(conn: socket.socket, head: bytes, request: bytes) -> bool:
        conn.sendall(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
            b"transfer-encoding: chunked\r\n\r\n"
            + piece(_chunk({"role": "assistant", "content": "hel"}))
        )
        if not first_seen.wait(GUARD_S):
            return False  # the client never saw it: the stream breaks off
        rest = _chunk({"content": "lo"}) + _chunk({}, "stop") + b"data: [DONE]\n\n"
        conn.sendall(piece(rest) + b"0\r\n\r\n")
        return True

    return step


@pytest.mark.parametrize("wiring", WIRINGS)
def test_a_streams_first_events_reach_the_client_before_the_upstream_ends_it(
    wiring: Wiring,
) -> None:
    first_seen = threading.Event()
    data = b""
    with (
        ScriptedUpstream(in_two_parts(first_seen)) as upstream,
        _gateway(wiring, _settings(upstream)) as client,
        client.stream("POST", "/v1/messages", json=_turn(True), headers=AUTH) as reply,
    ):
        for piece in reply.iter_bytes():
            data += piece
            if b'"text":"hel"' in data.replace(b" ", b""):
                first_seen.set()
    assert first_seen.is_set()
    assert reply.status_code == 200
    message = assemble_messages(data)
    assert message is not None
    assert message["content"] == [{"type": "text", "text": "hello"}]


def _escaped(text: str) -> str:
    """*text* with every other character as a JSON escape (no fixed form of it)."""
    return "".join(f"\\u{ord(c):04x}" if i % 2 else c for i, c in enumerate(text))


@pytest.mark.parametrize("wiring", WIRINGS)
def test_a_pass_through_reply_spelling_a_secret_in_escapes_is_withheld(wiring: Wiring) -> None:
    """ANTHROPIC ``count_tokens``: a reply that spells the gateway's upstream key in JSON
    escapes (the client would decode it) is replaced whole by a 502; one without passes, and
    so does one that is no JSON (a backslash in it, nothing to decode)."""
    leak = b'{"input_tokens": 3, "echo": "%s"}' % _escaped(KEY).encode()
    clean = b'{"input_tokens": 3, "echo": "\\u0068i"}'
    odd = b"upstream says: no \\ json"

    def replying(data: bytes) -> Step:
        def step(conn: socket.socket, head: bytes, request: bytes) -> bool:
            conn.sendall(
                b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d"
                b"\r\n\r\n%s" % (len(data), data)
            )
            return True

        return step

    body = {"model": "claude-x", "messages": [{"role": "user", "content": "hi"}]}
    with ScriptedUpstream(replying(leak), replying(clean), replying(odd)) as upstream:
        settings = settings_for(Provider.ANTHROPIC, base_url=upstream.url, monitor=False)
        with _gateway(wiring, settings) as client:
            withheld = client.post("/v1/messages/count_tokens", json=body, headers=AUTH)
            passed = client.post("/v1/messages/count_tokens", json=body, headers=AUTH)
            unparsed = client.post("/v1/messages/count_tokens", json=body, headers=AUTH)
    assert withheld.status_code == 502, withheld.text
    assert withheld.json()["error"]["type"] == "api_error"
    assert KEY not in withheld.content.decode("unicode_escape")
    assert passed.status_code == 200
    assert passed.json() == {"input_tokens": 3, "echo": "hi"}
    assert unparsed.status_code == 200
    assert unparsed.content == odd


def test_log_bodies_puts_the_reply_in_the_log_line() -> None:
    """``log_bodies``: the exchange's log line holds the reply the client got."""
    with ScriptedUpstream(answer) as upstream:
        settings = _settings(upstream, log_bodies=True)
        with log_records() as lines, _gateway("sdk", settings) as client:
            reply = client.post("/v1/messages", json=_turn(False), headers=AUTH)
    assert reply.status_code == 200
    assert len(lines) == 1
    logged = orjson.loads(lines[0]["response_body"])
    assert logged == reply.json()
    assert logged["content"] == [{"type": "text", "text": "hello"}]


# -- [[upstreams]]: a stream that breaks before its first event reached the client --------------


def headers_then_drop(conn: socket.socket, head: bytes, request: bytes) -> bool:
    """Answer a stream's status and headers, then close the connection before any event."""
    conn.sendall(
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
    )
    return False


def _in_flight(metrics: str) -> dict[str, float]:
    found = re.findall(r'^tpx_gateway_upstream_in_flight\{upstream="(\w+)"\} (\S+)$', metrics, re.M)
    return {name: float(value) for name, value in found}


def test_a_stream_broken_before_its_first_byte_fails_and_cools_its_upstream() -> None:
    """``[[upstreams]]``: the first upstream begins a stream (status and headers) and breaks
    it before any event. Its reply began, so the request does not move (it may be
    generating): the client gets a 502 ``api_error``, never an internal error. The upstream
    cools down: the next request goes to the other one. No attempt stays in flight."""
    with (
        ScriptedUpstream(headers_then_drop) as first,
        ScriptedUpstream(answer) as second,
        _served(_pooled(first.url, second.url)) as url,
        httpx2.Client(base_url=url, timeout=60) as client,
    ):
        broken = client.post("/v1/messages", json=_turn(True), headers=AUTH)
        seen = (len(first.requests), len(second.requests))
        after = client.post("/v1/messages", json=_turn(True), headers=AUTH)
        metrics = client.get("/metrics").text
        then = (len(first.requests), len(second.requests))
    error = broken.json()
    assert broken.status_code == 502, broken.text
    assert error["error"]["type"] == "api_error"
    assert seen == (1, 0)
    assert after.status_code == 200, after.text
    message = assemble_messages(after.content)
    assert message is not None
    assert message["content"] == [{"type": "text", "text": "hello"}]
    assert then == (1, 1)
    assert _in_flight(metrics) == {"u0": 0.0, "u1": 0.0}


def test_a_monitored_failover_of_a_broken_stream_is_stopped() -> None:
    """``tpx serve --monitor``, ``[[upstreams]]``, and the seeded bug whose failover point
    forgets that a reply began: the first upstream's stream breaks after its headers, the
    failover point would move it (``Failover`` once the reply began: not allowed), and the
    monitor stops that step. The client gets the monitor's error naming the property and
    the step, not the network failure; the other upstream receives nothing."""
    (bug,) = [b for b in POOL_BUGS if b.name == "failover_after_the_first_byte"]
    with (
        bug.active(),
        ScriptedUpstream(headers_then_drop) as first,
        ScriptedUpstream(answer) as second,
        _served(attrs.evolve(_pooled(first.url, second.url), monitor=True)) as url,
        httpx2.Client(base_url=url, timeout=60) as client,
    ):
        stopped = client.post("/v1/messages", json=_turn(True), headers=AUTH)
        seen = (len(first.requests), len(second.requests))
    assert stopped.status_code == 500, stopped.text
    message = stopped.json()["error"]["message"]
    assert f"({bug.property}, {bug.action})" in message, message
    assert "MODEL_NETWORK" not in message
    assert seen == (1, 0)


@pytest.mark.parametrize("code", [300, 418])
@pytest.mark.parametrize("wiring", WIRINGS)
def test_a_refused_stream_carries_the_upstreams_own_words(wiring: Wiring, code: int) -> None:
    """A streamed request answered with a non-2xx status (a 3xx included) and an error body:
    the client's error response quotes what the upstream said."""
    with (
        ScriptedUpstream(status(code)) as upstream,
        _gateway(wiring, _settings(upstream)) as client,
    ):
        reply = client.post("/v1/messages", json=_turn(True), headers=AUTH)
    assert reply.status_code >= 400, reply.text
    message = reply.json()["error"]["message"]
    assert f"returned HTTP {code}" in message
    assert f"upstream says {code}" in message


# -- an upstream that takes no credential; an injected transport reading the request's body ----


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
@pytest.mark.parametrize("wiring", WIRINGS)
def test_an_upstream_without_a_credential_is_asked_without_one(
    wiring: Wiring, stream: bool
) -> None:
    """Settings without an upstream credential (a local deployment that asks for none): the
    upstream receives no ``Authorization`` header, and its reply reaches the client."""
    with (
        ScriptedUpstream(answer) as upstream,
        _gateway(wiring, _settings(upstream, credential=None)) as client,
    ):
        reply = client.post("/v1/messages", json=_turn(stream), headers=AUTH)
    _said_hello(reply, stream)
    ((head, _),) = upstream.requests
    assert _header(head, "authorization") is None


class Recording(httpx2.BaseTransport):
    """An upstream transport given to the in-process SDK client (``upstream=``) that keeps
    each request's body, read as ``request.content``, and sends it on over loopback."""

    def __init__(self) -> None:
        self.bodies: list[bytes] = []
        self._inner = httpx2.HTTPTransport()

    def handle_request(self, request: httpx2.Request) -> httpx2.Response:
        self.bodies.append(request.content)
        return self._inner.handle_request(request)

    def close(self) -> None:
        self._inner.close()


def test_an_injected_upstream_transport_reads_the_request_body() -> None:
    """The in-process SDK client over a transport of the caller's: the request it is handed
    has its body readable as ``request.content`` (as httpx2's own requests do), the very
    bytes the upstream then receives."""
    recording = Recording()
    with ScriptedUpstream(answer) as upstream:
        settings = _settings(upstream)
        transport = GatewayTransport(Gateway(settings), SyncUpstream(settings, transport=recording))
        with httpx2.Client(transport=transport, base_url="http://gateway.test") as client:
            reply = client.post("/v1/messages", json=_turn(False), headers=AUTH)
    _said_hello(reply, False)
    ((_, body),) = upstream.requests
    assert recording.bodies == [body]
    assert orjson.loads(body)["messages"][-1] == {"role": "user", "content": "hi"}
