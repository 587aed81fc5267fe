"""The gateway's upstream client over real loopback HTTP (a scripted upstream on a socket,
``tpx serve``'s app under uvicorn or the in-process sync SDK transport), beside
``test_gateway_upstream_cases.py``: what the client's environment, large bursts, bodies that
stop, and token commands change for a caller.

* A proxy configured in the environment: an upstream ``NO_PROXY`` names is still reached.
* A burst of stream bytes larger than the gateway's read-ahead piece reaches the client whole.
* A reply body cut short is a network failure naming its kind; one stalling past
  ``limits.read_timeout`` is a timeout (504).
* A token command: the event loop serves other requests while the command runs; a token
  the upstream refused is made again once per request, however long the upstream took; a
  command failing after a 401 gives the refused reply's connection back.
* ``[[upstreams]]``: an upstream whose token command fails was sent nothing: the request goes
  to the next upstream, and the failed one cools down.
* A client of the in-process async transport that leaves while its stream is still pinging
  and the upstream's answer has just come: that answer's connection is closed.
* A finished stream whose body never ends: the gateway stops waiting and closes it.
* A client that stops reading a long stream and then leaves: the stream's read-ahead ends
  with it (nothing the upstream sent stays held once the client is gone).
* An upstream client of the caller's (``create_app(client=)``): a turn's body reaches the
  upstream whole; the tokenizer endpoint's call keeps its own timeout.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import socket
import threading
import time
from pathlib import Path
from typing import Any

import attrs
import httpx2
import orjson
import pytest

from conformance.abstraction import assemble_messages
from conformance.fakes import TOKEN
from conformance.gateway_core import AUTH, settings_for
from conformance.test_gateway_upstream_cases import GUARD_S, _chunk, _settings, _sse
from conformance.test_gateway_upstream_live import (
    POOL_TOKEN_ENV,
    WIRINGS,
    Wiring,
    _gateway,
    _said_hello,
    _served,
    _turn,
    status,
)
from tests.gateway.conftest import serving
from tests.gateway.scripted import ScriptedUpstream, Step, answer, held_until_closed
from tpx.gateway import drive
from tpx.gateway.asgi import create_app
from tpx.gateway.context.config import ContextConfig
from tpx.gateway.core import Gateway
from tpx.gateway.credential import BACKOFF_FIRST
from tpx.gateway.routing import parse_routing
from tpx.gateway.settings import Credential, Limits, Settings
from tpx.gateway.upstream import AsyncUpstream
from tpx.sdk import AsyncGatewayTransport
from tpx.transport.exchange import Provider
from tpx.transport.translate.profiles import get_profile


def test_an_upstream_no_proxy_names_is_reached_with_a_proxy_configured(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``HTTPS_PROXY`` / ``HTTP_PROXY`` set (here to a port nothing listens on) and the
    upstream's host in ``NO_PROXY``: ``tpx serve`` reaches the upstream directly."""
    with socket.socket() as dead:
        dead.bind(("127.0.0.1", 0))
        proxy = f"http://127.0.0.1:{dead.getsockname()[1]}"
        for name in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"):
            monkeypatch.setenv(name, proxy)
        monkeypatch.setenv("NO_PROXY", "127.0.0.1")
        monkeypatch.setenv("no_proxy", "127.0.0.1")
        with ScriptedUpstream(answer) as upstream:
            with _gateway("serve", _settings(upstream)) as client:
                reply = client.post("/v1/messages", json=_turn(False), headers=AUTH)
            seen = len(upstream.requests)
    assert reply.status_code == 200, reply.text
    assert reply.json()["content"] == [{"type": "text", "text": "hello"}]
    assert seen == 1


def one_burst(text: str) -> Step:
    """A stream whose text delta is *text*, the whole body written at once."""

    def step(conn: socket.socket, head: bytes, request: bytes) -> bool:
        data = (
            _chunk({"role": "assistant", "content": ""})
            + _chunk({"content": text})
            + _chunk({}, "stop")
            + b"data: [DONE]\n\n"
        )
        _sse(conn, data)
        return True

    return step


@pytest.mark.parametrize("wiring", WIRINGS)
def test_a_burst_larger_than_a_read_ahead_piece_reaches_the_client_whole(wiring: Wiring) -> None:
    """One text delta of 600 KiB (several of the gateway's 64 KiB read-ahead pieces, read
    from the socket in large reads): the client assembles exactly that text."""
    text = "".join(f"{i:07d} " for i in range(600 * 1024 // 8))
    with ScriptedUpstream(one_burst(text)) as upstream:
        limits = attrs.evolve(Limits(), max_upstream_stream=8 << 20)
        with _gateway(wiring, _settings(upstream, limits=limits)) as client:
            reply = client.post("/v1/messages", json=_turn(True), headers=AUTH)
    assert reply.status_code == 200
    message = assemble_messages(reply.content)
    assert message is not None
    assert message["content"] == [{"type": "text", "text": text}]


def test_a_running_token_command_does_not_hold_other_requests(tmp_path: Path) -> None:
    """``tpx serve`` with a token command not run yet (its token expired: ``ttl`` 0) whose
    run waits (for a file): other requests (``/metrics``) are answered meanwhile; the turn goes
    once the command ended."""
    running, go = tmp_path / "running", tmp_path / "go"
    wait = f"i=0; while [ ! -e {go} ] && [ $i -lt 3000 ]; do sleep 0.01; i=$((i+1)); done"
    command = f"touch {running}; {wait}; echo tok-1"
    with ScriptedUpstream(answer) as upstream:
        credential = Credential(None, command=command, ttl=0.0)
        settings = _settings(upstream, credential=credential)
        with _served(settings) as url, httpx2.Client(base_url=url, timeout=GUARD_S) as client:
            turns: list[httpx2.Response] = []
            worker = threading.Thread(
                target=lambda: turns.append(
                    client.post("/v1/messages", json=_turn(False), headers=AUTH)
                )
            )
            worker.start()
            try:
                deadline = time.monotonic() + GUARD_S  # a hang guard only
                while not running.exists() and time.monotonic() < deadline:
                    time.sleep(0.01)
                metrics = client.get("/metrics", timeout=GUARD_S)
                waiting = len(upstream.requests)
            finally:
                go.touch()
                worker.join(GUARD_S)
        tokens = [head for head, _ in upstream.requests]
    assert metrics.status_code == 200
    assert waiting == 0  # the command had not ended: nothing was sent yet
    assert turns[0].status_code == 200, turns[0].text
    assert len(tokens) == 1
    assert b"Bearer tok-1" in tokens[0]


def slow_status(code: int, seconds: float) -> Step:
    """:func:`status` after *seconds*."""
    then = status(code)

    def step(conn: socket.socket, head: bytes, request: bytes) -> bool:
        time.sleep(seconds)
        return then(conn, head, request)

    return step


@pytest.mark.parametrize("wiring", WIRINGS)
def test_a_refused_token_is_made_again_once_per_request(wiring: Wiring, tmp_path: Path) -> None:
    """A 401, a new token, and a 401 again after longer than the command's first backoff
    (1 s): the second refusal stands (a 502); the request was sent twice, not three times."""
    runs = tmp_path / "runs"
    command = f"n=$(($(cat {runs} 2>/dev/null || echo 0) + 1)); echo $n > {runs}; echo tok-$n-x"
    later = BACKOFF_FIRST + 0.3
    with ScriptedUpstream(status(401), slow_status(401, later), answer) as upstream:
        settings = _settings(upstream, credential=Credential.from_command(command, ttl=600.0))
        with _gateway(wiring, settings) as client:
            reply = client.post("/v1/messages", json=_turn(False), headers=AUTH)
        seen = len(upstream.requests)
    assert reply.status_code == 502, reply.text
    assert seen == 2


def cut_short(conn: socket.socket, head: bytes, request: bytes) -> bool:
    """A plain reply whose body stops halfway (the connection closed)."""
    conn.sendall(
        b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 400\r\n\r\n"
        b'{"id": "chatcmpl-1", "object": "chat.completion", '
    )
    return False


@pytest.mark.parametrize("wiring", WIRINGS)
def test_a_reply_cut_short_is_a_network_error(wiring: Wiring) -> None:
    """The upstream's reply body stops before its length: a 502 naming the network failure
    and its kind, the request sent once."""
    with ScriptedUpstream(cut_short) as upstream:
        with _gateway(wiring, _settings(upstream)) as client:
            reply = client.post("/v1/messages", json=_turn(False), headers=AUTH)
        seen = len(upstream.requests)
    assert reply.status_code == 502, reply.text
    error = reply.json()["error"]
    assert error["type"] == "api_error"
    assert error["message"].startswith("MODEL_NETWORK"), error
    assert "RemoteProtocolError" in error["message"] or "ReadError" in error["message"], error
    assert seen == 1


def refused_then_let_go(let_go: threading.Event) -> Step:
    """Answer 401, then set *let_go* once the client lets the connection go: closes it, or
    sends its next request on it (the hang guard: the connection's own 30 s timeout)."""
    refuse = status(401)

    def step(conn: socket.socket, head: bytes, request: bytes) -> bool:
        refuse(conn, head, request)
        with contextlib.suppress(OSError):
            more = conn.recv(1, socket.MSG_PEEK)
            let_go.set()
            return bool(more)
        return False

    return step


@pytest.mark.parametrize("wiring", WIRINGS)
def test_a_token_command_failing_after_a_401_leaves_the_connection_usable(
    wiring: Wiring, tmp_path: Path
) -> None:
    """A 401, then the token command fails: the client gets that failure (a 502 naming the
    command, nothing leaked); the refused reply (its body a few bytes) is closed at once, its
    connection let go (``tpx serve``'s client gives it back: the next request, the old token,
    answered, goes on it), not held until the gateway's client closes."""
    runs = tmp_path / "runs"
    command = (
        f"n=$(($(cat {runs} 2>/dev/null || echo 0) + 1)); echo $n > {runs}; "
        '[ "$n" = 2 ] && exit 1; echo tok-$n-x'
    )
    let_go = threading.Event()
    with ScriptedUpstream(refused_then_let_go(let_go), answer) as upstream:
        settings = _settings(upstream, credential=Credential.from_command(command, ttl=600.0))
        with _gateway(wiring, settings) as client:
            refused = client.post("/v1/messages", json=_turn(False), headers=AUTH)
            after = client.post("/v1/messages", json=_turn(False), headers=AUTH)
            released = let_go.wait(GUARD_S)  # the gateway's client still open
        seen = (len(upstream.requests), upstream.connections)
    assert refused.status_code == 502, refused.text
    error = refused.json()["error"]
    assert error["type"] == "api_error"
    assert error["message"].startswith("MODEL_UNAUTHORIZED: TPX_OAUTH_TOKEN_COMMAND"), error
    assert "tok-" not in refused.text
    assert after.status_code == 200, after.text
    assert released
    assert seen[0] == 2
    if wiring == "serve":
        assert seen[1] == 1


def stalled_body(release: threading.Event) -> Step:
    """A plain reply whose body stops halfway and stays silent until *release*."""

    def step(conn: socket.socket, head: bytes, request: bytes) -> bool:
        cut_short(conn, head, request)
        release.wait(GUARD_S)
        return False

    return step


@pytest.mark.parametrize("wiring", WIRINGS)
def test_a_reply_body_stalling_past_the_read_timeout_is_a_timeout(wiring: Wiring) -> None:
    """``limits.read_timeout``: a reply whose body stops arriving halfway is a 504
    ``timeout_error`` (not a network failure), the request sent once."""
    release = threading.Event()
    limits = attrs.evolve(Limits(), read_timeout=0.3)
    with ScriptedUpstream(stalled_body(release)) as upstream:
        try:
            with _gateway(wiring, _settings(upstream, limits=limits)) as client:
                reply = client.post("/v1/messages", json=_turn(False), headers=AUTH)
        finally:
            release.set()
        seen = len(upstream.requests)
    assert reply.status_code == 504, reply.text
    assert reply.json()["error"]["type"] == "timeout_error"
    assert seen == 1


def done_but_open(closed: threading.Event) -> Step:
    """A whole stream (``[DONE]`` included) whose chunked body never ends: the connection
    stays open, silent; *closed* is set once the client closes it."""

    def piece(data: bytes) -> bytes:
        return b"%x\r\n%s\r\n" % (len(data), data)

    def step(conn: socket.socket, head: bytes, request: bytes) -> bool:
        data = (
            _chunk({"role": "assistant", "content": "hello"})
            + _chunk({}, "stop")
            + b"data: [DONE]\n\n"
        )
        conn.sendall(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
            b"transfer-encoding: chunked\r\n\r\n" + piece(data)
        )
        return held_until_closed(conn, closed)

    return step


def test_a_finished_stream_whose_body_never_ends_is_closed() -> None:
    """``tpx serve``: the client has its whole reply; the upstream's body, past ``[DONE]``,
    never ends: the gateway stops waiting for it and closes that connection."""
    closed = threading.Event()
    with (
        ScriptedUpstream(done_but_open(closed)) as upstream,
        _gateway("serve", _settings(upstream)) as client,
    ):
        reply = client.post("/v1/messages", json=_turn(True), headers=AUTH)
        stopped = closed.wait(GUARD_S)
    assert reply.status_code == 200
    message = assemble_messages(reply.content)
    assert message is not None
    assert message["content"] == [{"type": "text", "text": "hello"}]
    assert stopped


def endless_text(closed: threading.Event) -> Step:
    """A chunked stream of text deltas (16 KiB each) written as fast as the gateway reads
    them, until the gateway closes the connection (*closed* set then) or 64 MiB went."""
    delta = _chunk({"content": "x" * (16 * 1024)})
    piece = b"%x\r\n%s\r\n" % (len(delta), delta)

    def step(conn: socket.socket, head: bytes, request: bytes) -> bool:
        conn.settimeout(GUARD_S)  # a hang guard only
        try:
            conn.sendall(
                b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                b"transfer-encoding: chunked\r\n\r\n"
            )
            for _ in range(4096):
                conn.sendall(piece)
        except OSError:
            closed.set()
        return False

    return step


def _readers() -> list[asyncio.Task[None]]:
    """The read-ahead tasks of streams (:func:`tpx.gateway.drive._read`) not ended yet."""
    code = drive._read.__code__
    return [
        task
        for task in gc.get_objects()
        if isinstance(task, asyncio.Task)
        and not task.done()
        and getattr(task.get_coro(), "cr_code", None) is code
    ]


def _full(task: asyncio.Task[None]) -> bool:
    frame = getattr(task.get_coro(), "cr_frame", None)
    queue = None if frame is None else frame.f_locals.get("queue")
    return isinstance(queue, asyncio.Queue) and queue.full()


def test_a_slow_client_leaving_ends_its_streams_read_ahead() -> None:
    """``tpx serve``: a client that stops reading a long stream (the gateway's read-ahead
    fills to ``limits.stream_buffer_bytes`` and waits) and then closes its connection: by
    the time the upstream's connection is closed, the stream's read-ahead task has ended
    (it no longer holds what it read, nor waits for a reader that is gone)."""
    closed = threading.Event()
    before = {id(task) for task in _readers()}
    limits = attrs.evolve(Limits(), stream_buffer_bytes=64 * 1024)
    body = orjson.dumps(_turn(True))
    gc.disable()  # a task left waiting is then still there to be seen, not collected
    try:
        with (
            ScriptedUpstream(endless_text(closed)) as upstream,
            _served(_settings(upstream, limits=limits)) as url,
        ):
            host, port = url.removeprefix("http://").split(":")
            with socket.socket() as slow:
                slow.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
                slow.settimeout(GUARD_S)
                slow.connect((host, int(port)))
                head = "".join(f"{k}: {v}\r\n" for k, v in AUTH.items())
                slow.sendall(
                    b"POST /v1/messages HTTP/1.1\r\nhost: gateway\r\n"
                    b"content-type: application/json\r\ncontent-length: %d\r\n%s\r\n%s"
                    % (len(body), head.encode(), body)
                )
                deadline = time.monotonic() + GUARD_S  # a hang guard only
                waiting: list[asyncio.Task[None]] = []
                while not waiting and time.monotonic() < deadline:
                    waiting = [t for t in _readers() if id(t) not in before and _full(t)]
                    time.sleep(0.02)
            # the client is gone (its connection closed, unread bytes in it)
            gone = closed.wait(GUARD_S)
            left = [t for t in _readers() if id(t) not in before]
    finally:
        gc.enable()
    assert len(waiting) == 1  # the read-ahead was full, waiting for the slow client
    assert gone  # the gateway closed the upstream's connection
    assert left == []


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
def test_an_upstream_whose_token_command_fails_fails_over(stream: bool, tmp_path: Path) -> None:
    """``[[upstreams]]``: the first upstream's token expired and its ``token_command`` now
    fails, so nothing was sent to it: the second upstream answers the request, and the first
    one cools down."""
    runs = tmp_path / "runs"
    command = (
        f"n=$(($(cat {runs} 2>/dev/null || echo 0) + 1)); echo $n > {runs}; "
        '[ "$n" -gt 1 ] && exit 3; echo tok-1'
    )
    with ScriptedUpstream(answer) as first, ScriptedUpstream(answer) as second:
        data = {
            "routing": {"probe_interval": 0},
            "upstreams": [
                {
                    "name": "u0",
                    "base_url": f"{first.url}/v1",
                    "token_command": command,
                    "token_ttl": 0.001,
                },
                {"name": "u1", "base_url": f"{second.url}/v1", "token_env": POOL_TOKEN_ENV},
            ],
            "routes": [{"name": "main", "upstreams": ["u0", "u1"]}],
        }
        routing = parse_routing(data, {POOL_TOKEN_ENV: TOKEN})
        settings = settings_for(Provider.TPX, routing=routing, monitor=False)
        with _served(settings) as url, httpx2.Client(base_url=url, timeout=GUARD_S) as client:
            reply = client.post("/v1/messages", json=_turn(stream), headers=AUTH)
            metrics = client.get("/metrics").text
        seen = (len(first.requests), len(second.requests))
    _said_hello(reply, stream)
    assert seen == (0, 1)
    assert runs.read_text().strip() == "2"  # the command failed at the request
    assert 'tpx_gateway_upstream_cooldowns_total{upstream="u0"} 1.0' in metrics
    assert 'tpx_gateway_upstream_failovers_total{upstream="u0"} 1.0' in metrics


def answered_late(release: threading.Event, closed: threading.Event) -> Step:
    """A stream's status, headers and first event once *release* is set; then silence until
    the client closes the connection (*closed* set then)."""

    def step(conn: socket.socket, head: bytes, request: bytes) -> bool:
        release.wait(GUARD_S)
        data = _chunk({"role": "assistant", "content": "hello"})
        conn.sendall(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
            b"transfer-encoding: chunked\r\n\r\n%x\r\n%s\r\n" % (len(data), data)
        )
        conn.settimeout(GUARD_S)  # a hang guard only
        return held_until_closed(conn, closed)

    return step


def _opening() -> bool:
    """A streamed turn is still waiting for its upstream's answer (:func:`drive._open`)."""
    code = drive._open.__code__
    return any(getattr(task.get_coro(), "cr_code", None) is code for task in asyncio.all_tasks())


def test_a_client_leaving_as_the_upstream_answers_closes_that_answer() -> None:
    """The in-process async transport (``AsyncGatewayTransport``): a streamed turn has sent
    its client a ``ping`` (the upstream silent); the upstream's answer then comes, and the
    client closes its response before reading further: the gateway closes the upstream's
    answer (its connection), which no one will read."""
    release, closed = threading.Event(), threading.Event()
    limits = attrs.evolve(Limits(), ping_interval=0.05)

    async def scenario(settings: Settings) -> tuple[bytes, bool]:
        transport = AsyncGatewayTransport(Gateway(settings), AsyncUpstream(settings))
        async with (
            httpx2.AsyncClient(transport=transport, base_url="http://gateway.test") as c,
            c.stream("POST", "/v1/messages", json=_turn(True), headers=AUTH) as reply,
        ):
            raw = reply.aiter_raw()  # kept: the client reads no further, nor closes it
            first = await raw.__anext__()  # the first ping
            release.set()
            deadline = time.monotonic() + GUARD_S  # a hang guard only
            while _opening() and time.monotonic() < deadline:
                await asyncio.sleep(0.01)
            answered = not _opening()
        return first, answered

    with ScriptedUpstream(answered_late(release, closed)) as upstream:
        try:
            first, answered = asyncio.run(scenario(_settings(upstream, limits=limits)))
        finally:
            release.set()
        stopped = closed.wait(GUARD_S)
    assert first.startswith(b"event: ping")
    assert answered  # the upstream's answer came before the client left
    assert stopped  # and its connection was closed


def tokenizer_late(seconds: float) -> Step:
    """Answer a ``/tokenize`` request with a count of 321 after *seconds*; any other
    request with :func:`answer` at once."""

    def step(conn: socket.socket, head: bytes, request: bytes) -> bool:
        if not head.startswith(b"POST /tokenize "):
            return answer(conn, head, request)
        time.sleep(seconds)
        data = orjson.dumps({"count": 321})
        conn.sendall(
            b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s"
            % (len(data), data)
        )
        return True

    return step


class ClosingClient:
    """An ASGI app that closes *client* once the wrapped app's lifespan shut down (in the
    server's event loop, where the client was used)."""

    def __init__(self, app: Any, client: httpx2.AsyncClient) -> None:
        self.app = app
        self.client = client

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "lifespan":
            await self.app(scope, receive, send)
            return

        async def sending(message: Any) -> None:
            if message["type"] == "lifespan.shutdown.complete":
                await self.client.aclose()
            await send(message)

        await self.app(scope, receive, sending)


def test_an_injected_upstream_client_sends_bodies_and_the_tokenizers_own_timeout() -> None:
    """``tpx serve``'s app over an ``httpx2.AsyncClient`` of the caller's (``create_app(client=)``)
    whose read timeout (0.2 s) is shorter than ``[context] tokenizer_timeout`` (30 s): a
    turn's body reaches the upstream whole; the tokenizer endpoint, answering after 1 s, is
    waited for (its call's own timeout replaces the client's), so ``count_tokens`` is its
    count, not the gateway's estimate."""
    with ScriptedUpstream(tokenizer_late(1.0)) as upstream:
        settings = settings_for(
            Provider.TPX,
            base_url=upstream.url,  # the profile's paths hold /v1
            model="up-model",
            monitor=False,
            profile=get_profile("vllm"),
            context=ContextConfig(tokenizer=True, tokenizer_timeout=30.0),
        )
        injected = httpx2.AsyncClient(timeout=httpx2.Timeout(0.2))
        app = ClosingClient(create_app(settings, client=injected), injected)
        with serving(app) as url, httpx2.Client(base_url=url, timeout=60) as client:
            turn = client.post("/v1/messages", json=_turn(False), headers=AUTH)
            counted = client.post("/v1/messages/count_tokens", json=_turn(False), headers=AUTH)
        bodies = {head.split(b" ", 2)[1]: body for head, body in upstream.requests}
    assert turn.status_code == 200, turn.text
    assert orjson.loads(bodies[b"/v1/chat/completions"])["messages"][-1] == {
        "role": "user",
        "content": "hi",
    }
    assert counted.status_code == 200, counted.text
    assert counted.json() == {"input_tokens": 321}
    assert b"/tokenize" in bodies
