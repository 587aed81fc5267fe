"""The gateway's upstream client (:mod:`tpx.gateway.upstream`, :mod:`tpx.gateway.drive`) over
real loopback HTTP: nothing in between is mocked.

* The gateway spec's small cfgs, replayed through real ``tpx serve`` processes
  (:mod:`tpx.audit`): each process's own pooled client speaks HTTP to the fake upstreams,
  and every step's observed state must be the spec's (every second behaviour streamed;
  one cfg streamed with pings every 5 ms while the upstream holds a request).
* The conformance conversations of :class:`~conformance.gateway_core.GatewayRig` with the
  conformance fake provider on a loopback socket (:class:`~conformance.fakes.LoopbackServer`)
  and the real client, in both wirings: ``serve`` (``tpx serve``'s ASGI app under uvicorn,
  the async client and its driver) and ``sdk`` (the in-process sync SDK transport, the sync
  client): tool loops, every failure a socket can carry (429 / 529 / 5xx with their
  ``retry-after``, a 401, bodies that are no reply, a connection dropped after the request
  was read, streams broken off or malformed), each followed by the same request again.
  Every post must reach the upstream exactly once (a request the upstream may have
  generated is never sent twice).
* ``[[upstreams]]``: the conversations balanced over two upstreams; a 429 / 5xx / 529 fails
  over to the next upstream, a refused connection too, while a connection dropped after
  the request was read does not (one generation: a 502, the request sent once).
* ``limits.max_in_flight``: a request past it is answered 529 before the wire.
* A pooled connection the upstream closed after its reply: the next turn goes on a new
  connection and reaches the upstream once.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Literal

import attrs
import httpx2
import orjson
import pytest

from conformance.abstraction import assemble_messages
from conformance.fakes import (
    KEY,
    LOOPBACK_FAILURE_KINDS,
    TOKEN,
    FailureKind,
    FakeProvider,
    LoopbackServer,
)
from conformance.gateway_core import AUTH, GATEWAY_KEY, GatewayRig, log_records, settings_for
from tests.gateway.conftest import serving
from tests.gateway.scripted import ScriptedUpstream, Step, answer, answer_then_close, drop_after
from tpx.audit.behaviours import RETRY, SMALL, cover_behaviours, mirror_graph
from tpx.audit.harness import Harness
from tpx.audit.replay import HttpReplayer
from tpx.gateway.asgi import GatewayApp, create_app
from tpx.gateway.core import Gateway
from tpx.gateway.pool import UpstreamPool
from tpx.gateway.routing import Routing, parse_routing
from tpx.gateway.settings import Credential, Limits, Settings
from tpx.gateway.upstream import AsyncUpstream, SyncUpstream
from tpx.sdk import GatewayTransport
from tpx.transport.exchange import Provider

Wiring = Literal["serve", "sdk"]
WIRINGS: tuple[Wiring, ...] = ("serve", "sdk")
PROVIDERS = [Provider.TPX, Provider.ANTHROPIC]
#: the failures a loopback upstream can cause in the middle of a stream
MID_STREAM: tuple[FailureKind, ...] = ("drop", "error_event", "malformed", "no_done", "bad_delta")
#: a hang guard only: how long a served exchange's log line may take to follow its last byte
LOG_GUARD_S = 30.0


# -- the spec's behaviours through tpx serve processes ---------------------------------------


@pytest.fixture(scope="module")
def harness() -> Iterator[Harness]:
    harness = Harness()
    try:
        yield harness
    finally:
        harness.close()


def test_small_cfgs_replayed_through_tpx_serve(harness: Harness) -> None:
    """An edge cover of each small cfg through ``tpx serve`` processes and their own
    upstream client: the replay raises at the first step that leaves the spec."""
    runs: list[tuple[Any, bool | None, float | None]] = [
        (SMALL, None, None),
        (RETRY, True, 0.005),
    ]
    for config, streaming, ping in runs:
        behaviours = cover_behaviours(mirror_graph(config))
        replayer = HttpReplayer(harness, config, streaming=streaming, ping_interval=ping)
        strays = len(harness.upstreams.strays)
        try:
            assert replayer.replay_all(behaviours) == len(behaviours)
        finally:
            replayer.close()
        assert len(harness.upstreams.strays) == strays  # every upstream request a conversation's


# -- the conformance conversations over loopback -------------------------------------------


class _Lines(logging.Handler):
    """Counts the gateway's ``/v1/messages`` log lines."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.count = 0
        self.changed = threading.Condition()

    def emit(self, record: logging.LogRecord) -> None:
        try:
            line = orjson.loads(record.getMessage())
        except orjson.JSONDecodeError:
            return
        if isinstance(line, dict) and line.get("endpoint") == "messages":
            with self.changed:
                self.count += 1
                self.changed.notify_all()


class LoopbackRig(GatewayRig):
    """:class:`GatewayRig` with its fake provider on *server* and the real upstream client."""

    def __init__(
        self,
        provider: Provider,
        wiring: Wiring,
        server: LoopbackServer,
        *,
        pool: LoopbackServer | None = None,
        **kwargs: Any,
    ) -> None:
        """*pool*: a second server serving the same fake; the gateway then has two
        ``[[upstreams]]`` (one on each server) behind one route (``serve`` only)."""
        base = server.url + ("/v1" if provider is Provider.TPX else "")
        if pool is not None:
            kwargs["routing"] = _routing(server.url, pool.url)
        super().__init__(provider, base_url=base, **kwargs)
        self.client.close()  # the in-process wiring the rig made
        server.fake = self.fake
        if pool is not None:
            pool.fake = self.fake
        self.wiring = wiring
        self._stack = contextlib.ExitStack()
        self._lines = _Lines()
        logger = logging.getLogger("tpx.gateway")
        logger.addHandler(self._lines)
        self._stack.callback(logger.removeHandler, self._lines)
        if wiring == "sdk":
            self.upstream = SyncUpstream(self.settings)
            self.client = httpx2.Client(
                transport=GatewayTransport(self.gateway, self.upstream),
                base_url="http://gateway.test",
            )
        else:
            upstream: AsyncUpstream | UpstreamPool = (
                AsyncUpstream(self.settings, observe=self.gateway.metrics.upstream_latency.observe)
                if pool is None
                else UpstreamPool(self.settings, metrics=self.gateway.metrics)
            )
            url = self._stack.enter_context(serving(GatewayApp(self.gateway, upstream)))
            self.client = httpx2.Client(base_url=url, timeout=60)
        self._stack.callback(self.client.close)

    def close(self) -> None:
        self._stack.close()

    def post(
        self, body: Mapping[str, Any], headers: Mapping[str, str] = AUTH
    ) -> tuple[int, httpx2.Headers, bytes]:
        before = self._lines.count
        out = super().post(body, headers)
        # a served exchange's log line follows its last byte (the caller may read that
        # first): wait for the line, as the in-process wiring has it by now
        deadline = time.monotonic() + LOG_GUARD_S
        with self._lines.changed:
            while self._lines.count == before and time.monotonic() < deadline:
                self._lines.changed.wait(0.05)
        return out


#: the environment variable holding the token of every ``[[upstreams]]`` entry
POOL_TOKEN_ENV = "TPX_CONFORMANCE_POOL_TOKEN"


def _routing(*urls: str, **options: float) -> Routing:
    """Upstreams ``u0``, ``u1``, ... at *urls* (TPX, the conformance token) behind one route."""
    data = {
        "routing": {"probe_interval": 0, "retry_after_max": 0.5, **options},
        "upstreams": [
            {"name": f"u{i}", "base_url": f"{url}/v1", "token_env": POOL_TOKEN_ENV}
            for i, url in enumerate(urls)
        ],
        "routes": [{"name": "main", "upstreams": [f"u{i}" for i in range(len(urls))]}],
    }
    routing = parse_routing(data, {POOL_TOKEN_ENV: TOKEN})
    assert routing is not None
    return routing


@contextlib.contextmanager
def rig(
    provider: Provider,
    wiring: Wiring,
    *,
    seed: int = 0,
    streaming: bool = False,
    pooled: bool = False,
) -> Iterator[LoopbackRig]:
    with contextlib.ExitStack() as stack:
        server = stack.enter_context(LoopbackServer.serving(FakeProvider("messages")))
        pool = stack.enter_context(LoopbackServer.serving(server.fake)) if pooled else None
        live = LoopbackRig(provider, wiring, server, pool=pool, seed=seed, streaming=streaming)
        stack.callback(live.close)
        yield live


def _ok(result: Any) -> None:
    assert result.problems == (), result


@pytest.mark.parametrize("streaming", [False, True], ids=["plain", "streamed"])
@pytest.mark.parametrize("provider", PROVIDERS, ids=lambda p: p.name)
@pytest.mark.parametrize("wiring", WIRINGS)
def test_tool_loops_over_loopback(wiring: Wiring, provider: Provider, streaming: bool) -> None:
    with rig(provider, wiring, seed=1, streaming=streaming) as live:
        for ids in (("t1", "t2"), ("t2",), ("t3", "t1")):
            _ok(live.turn("reply", ids=ids))
        _ok(live.turn("abort", style="partial"))
        _ok(live.turn("reply", ids=("t1",)))
        _ok(live.turn("reply", ids=()))
        assert live.caller.obligations == []


@pytest.mark.parametrize("streaming", [False, True], ids=["plain", "streamed"])
@pytest.mark.parametrize("provider", PROVIDERS, ids=lambda p: p.name)
@pytest.mark.parametrize("wiring", WIRINGS)
def test_upstream_failures_over_loopback(
    wiring: Wiring, provider: Provider, streaming: bool
) -> None:
    """Every failure a loopback upstream can cause, between good turns; ``connect`` here is
    the upstream reading the whole request and closing the connection without a reply (it
    may be generating): a 502, and the request is not sent again."""
    kinds = LOOPBACK_FAILURE_KINDS + (MID_STREAM if streaming else ())
    with rig(provider, wiring, seed=2, streaming=streaming) as live:
        _ok(live.turn("reply", ids=("t1", "t2")))
        for kind in kinds:
            _ok(live.turn("fail", failure=kind))
            _ok(live.turn("fail", failure=kind, retry=False))
            _ok(live.turn("reply", ids=("t2",)))


@pytest.mark.parametrize("streaming", [False, True], ids=["plain", "streamed"])
def test_tool_loops_over_two_upstreams(streaming: bool) -> None:
    """``[[upstreams]]``: the turns of one conversation balanced over two upstreams."""
    with rig(Provider.TPX, "serve", seed=3, streaming=streaming, pooled=True) as live:
        for ids in (("t1", "t2"), ("t2",), ("t3", "t1")):
            _ok(live.turn("reply", ids=ids))
        _ok(live.turn("abort", style="unknown"))
        _ok(live.turn("reply", ids=("t1",)))
        _ok(live.turn("reply", ids=()))


# -- scripted upstreams: failover, MaxInFlight, a pooled connection closed --------------------


def status(code: int, retry_after: str | None = None) -> Step:
    """Answer *code* with a Chat Completions error body (and ``retry-after``)."""
    body = orjson.dumps({"error": {"message": f"upstream says {code}", "type": "server_error"}})

    def step(conn: socket.socket, head: bytes, request: bytes) -> bool:
        extra = b"" if retry_after is None else b"retry-after: %s\r\n" % retry_after.encode()
        conn.sendall(
            b"HTTP/1.1 %d Oops\r\ncontent-type: application/json\r\n%scontent-length: %d\r\n\r\n%s"
            % (code, extra, len(body), body)
        )
        return True

    return step


def held(release: threading.Event) -> Step:
    """Answer once *release* is set."""

    def step(conn: socket.socket, head: bytes, request: bytes) -> bool:
        assert release.wait(60)
        return answer(conn, head, request)

    return step


def _served(settings: Settings) -> contextlib.AbstractContextManager[str]:
    gateway = Gateway(settings)
    upstream: AsyncUpstream | UpstreamPool = (
        AsyncUpstream(settings, observe=gateway.metrics.upstream_latency.observe)
        if settings.routing is None
        else UpstreamPool(settings, metrics=gateway.metrics)
    )
    return serving(GatewayApp(gateway, upstream))


def _pooled(*urls: str) -> Settings:
    return settings_for(Provider.TPX, routing=_routing(*urls), monitor=False)


def _post(url: str, stream: bool) -> httpx2.Response:
    with httpx2.Client(base_url=url, timeout=60) as client:
        return client.post("/v1/messages", json=_turn(stream), headers=AUTH)


def _said_hello(reply: httpx2.Response, stream: bool) -> None:
    assert reply.status_code == 200, reply.text
    message = assemble_messages(reply.content) if stream else reply.json()
    assert message is not None
    assert message["content"] == [{"type": "text", "text": "hello"}]


def _error(reply: httpx2.Response, status: int, kind: str) -> dict[str, Any]:
    assert reply.status_code == status, reply.text
    error: dict[str, Any] = reply.json()
    assert error["type"] == "error"
    assert error["error"]["type"] == kind
    return error


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
@pytest.mark.parametrize("code", [429, 503, 529])
def test_an_upstream_refusing_before_the_first_byte_fails_over(code: int, stream: bool) -> None:
    """``[[upstreams]]``: a 429 / 5xx / 529 (nothing generated) goes to the next upstream; the
    client gets the second upstream's reply, and each upstream got the request once."""
    with (
        ScriptedUpstream(status(code, "30")) as first,
        ScriptedUpstream(answer) as second,
        _served(_pooled(first.url, second.url)) as url,
    ):
        reply = _post(url, stream)
        seen = (len(first.requests), len(second.requests))
    _said_hello(reply, stream)
    assert seen == (1, 1)


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
def test_a_request_the_upstream_may_be_generating_is_not_sent_again(stream: bool) -> None:
    """The upstream reads the whole request and drops the connection: it may be generating.
    One upstream or two, the request is sent once and the client gets a 502."""
    with (
        ScriptedUpstream(drop_after(0.05)) as first,
        ScriptedUpstream(answer) as second,
    ):
        for settings in (
            settings_for(Provider.TPX, base_url=first.url + "/v1", monitor=False),
            _pooled(first.url, second.url),
        ):
            before = len(first.requests)
            with _served(settings) as url:
                reply = _post(url, stream)
            error = _error(reply, 502, "api_error")
            assert "MODEL_NETWORK" in error["error"]["message"]
            assert len(first.requests) == before + 1
        assert second.requests == []


def test_an_upstream_refusing_connections_fails_over() -> None:
    """Nothing was sent to an upstream whose port refuses connections: the next one answers."""
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{closed.getsockname()[1]}"  # bound, not listening
        with ScriptedUpstream(answer) as second, _served(_pooled(dead, second.url)) as url:
            reply = _post(url, False)
            seen = len(second.requests)
    _said_hello(reply, False)
    assert seen == 1


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
def test_max_in_flight_refuses_a_request_past_it(stream: bool) -> None:
    """``limits.max_in_flight = 1``: while one exchange is held upstream, another request is
    answered 529 before anything reaches the upstream (its log line says so); once it ended,
    the next one goes."""
    release = threading.Event()
    limits = attrs.evolve(Limits(), max_in_flight=1)
    with ScriptedUpstream(held(release), answer) as upstream:
        settings = settings_for(
            Provider.TPX, base_url=upstream.url + "/v1", limits=limits, monitor=False
        )
        with log_records() as lines, _served(settings) as url:
            replies: list[httpx2.Response] = []
            first = threading.Thread(target=lambda: replies.append(_post(url, stream)))
            first.start()
            try:
                deadline = time.monotonic() + 60  # a hang guard only
                while not upstream.requests and time.monotonic() < deadline:
                    time.sleep(0.01)
                refused = _post(url, stream)
                seen = len(upstream.requests)
                logged = [line.get("error") for line in lines]
            finally:
                release.set()
                first.join(60)
            after = _post(url, stream)
    error = _error(refused, 529, "overloaded_error")
    assert "1 requests in flight" in error["error"]["message"]
    assert seen == 1
    assert logged == ["GATEWAY_529"]  # the refused request's line (the held one has none yet)
    _said_hello(replies[0], stream)
    _said_hello(after, stream)
    assert len(upstream.requests) == 2


def echo(conn: socket.socket, head: bytes, request: bytes) -> bool:
    """Answer 200 with what arrived: the request line and the body's length."""
    line = head.split(b"\r\n", 1)[0].decode()
    data = orjson.dumps({"request_line": line, "body_bytes": len(request)})
    conn.sendall(
        b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s"
        % (len(data), data)
    )
    return True


def _header(head: bytes, name: str) -> str | None:
    for line in head.split(b"\r\n")[1:]:
        key, _, value = line.partition(b":")
        if key.strip().lower() == name.encode():
            return value.strip().decode()
    return None


@contextlib.contextmanager
def _gateway(wiring: Wiring, settings: Settings) -> Iterator[httpx2.Client]:
    """A client of a gateway with *settings*, in *wiring*."""
    if wiring == "sdk":
        transport = GatewayTransport(Gateway(settings), SyncUpstream(settings))
        with httpx2.Client(transport=transport, base_url="http://gateway.test") as client:
            yield client
        return
    with _served(settings) as url, httpx2.Client(base_url=url, timeout=60) as client:
        yield client


@pytest.mark.parametrize("wiring", WIRINGS)
def test_the_pass_through_endpoints_over_loopback(wiring: Wiring) -> None:
    """ANTHROPIC: ``count_tokens`` and ``GET /v1/models`` (each query its own) reach the
    upstream as sent, with the gateway's key, and its reply reaches the client whole."""
    with ScriptedUpstream(echo) as upstream:
        settings = settings_for(Provider.ANTHROPIC, base_url=upstream.url, monitor=False)
        with _gateway(wiring, settings) as client:
            body = {"model": "claude-x", "messages": [{"role": "user", "content": "hi"}]}
            counted = client.post("/v1/messages/count_tokens", json=body, headers=AUTH)
            first = client.get("/v1/models?limit=1", headers=AUTH)
            second = client.get("/v1/models?limit=2", headers=AUTH)
            again = client.get("/v1/models?limit=1", headers=AUTH)
        heads = [head for head, _ in upstream.requests]
    assert counted.status_code == 200
    assert counted.json()["request_line"] == "POST /v1/messages/count_tokens HTTP/1.1"
    assert counted.json()["body_bytes"] == len(upstream.requests[0][1]) > 0
    lines = [r.json()["request_line"] for r in (first, second, again)]
    assert lines == [
        "GET /v1/models?limit=1 HTTP/1.1",
        "GET /v1/models?limit=2 HTTP/1.1",
        "GET /v1/models?limit=1 HTTP/1.1",
    ]
    assert [r.json()["body_bytes"] for r in (first, second, again)] == [0, 0, 0]
    assert len(heads) == 4
    # a request without a body goes without one, as the client sent it: no Content-Length
    assert [_header(head, "content-length") for head in heads[1:]] == [None, None, None]
    for head in heads:
        assert _header(head, "x-api-key") == KEY
        assert _header(head, "authorization") is None
        assert _header(head, "accept-encoding") == "identity"
        assert GATEWAY_KEY not in head.decode()


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
@pytest.mark.parametrize("wiring", WIRINGS)
def test_a_token_the_upstream_refused_is_made_again_once(
    wiring: Wiring, stream: bool, tmp_path: Path
) -> None:
    """A token command's token refused with a 401: the command runs again and the request is
    sent once more with the new token (nothing was generated); a second 401 stands (a 502)."""
    runs = tmp_path / "runs"
    command = f"n=$(($(cat {runs} 2>/dev/null || echo 0) + 1)); echo $n > {runs}; echo tok-$n-x"
    with ScriptedUpstream(status(401), answer, status(401)) as upstream:
        settings = settings_for(
            Provider.TPX,
            base_url=upstream.url + "/v1",
            credential=Credential.from_command(command, ttl=600.0),
            monitor=False,
        )
        with _gateway(wiring, settings) as client:
            good = client.post("/v1/messages", json=_turn(stream), headers=AUTH)
            refused = client.post("/v1/messages", json=_turn(stream), headers=AUTH)
        tokens = [_header(head, "authorization") for head, _ in upstream.requests]
    _said_hello(good, stream)
    _error(refused, 502, "api_error")
    # the refusal of tok-2 stands: the command's backoff holds the next run off
    assert tokens == ["Bearer tok-1-x", "Bearer tok-2-x", "Bearer tok-2-x"]


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
@pytest.mark.parametrize("wiring", WIRINGS)
def test_an_upstream_that_never_answers_times_out(wiring: Wiring, stream: bool) -> None:
    """``limits.read_timeout``: no reply in time is a 504 ``timeout_error``, the request sent
    once."""
    release = threading.Event()
    limits = attrs.evolve(Limits(), read_timeout=0.3, ping_interval=60.0)
    with ScriptedUpstream(held(release)) as upstream:
        settings = settings_for(
            Provider.TPX, base_url=upstream.url + "/v1", limits=limits, monitor=False
        )
        try:
            with _gateway(wiring, settings) as client:
                reply = client.post("/v1/messages", json=_turn(stream), headers=AUTH)
        finally:
            release.set()
        seen = len(upstream.requests)
    _error(reply, 504, "timeout_error")
    assert seen == 1


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
@pytest.mark.parametrize("wiring", WIRINGS)
def test_a_reply_past_the_upstream_limits_fails(wiring: Wiring, stream: bool) -> None:
    """A reply larger than ``limits.max_upstream_body`` (read whole) or
    ``limits.max_upstream_stream`` (a stream, here past it in its first read) fails the
    exchange: a 502 ``api_error``."""
    limits = attrs.evolve(Limits(), max_upstream_body=64, max_upstream_stream=64)
    with ScriptedUpstream(answer) as upstream:
        settings = settings_for(
            Provider.TPX, base_url=upstream.url + "/v1", limits=limits, monitor=False
        )
        with _gateway(wiring, settings) as client:
            reply = client.post("/v1/messages", json=_turn(stream), headers=AUTH)
    error = _error(reply, 502, "api_error")
    limit = "limits.max_upstream_stream" if stream else "limits.max_upstream_body"
    assert limit in error["error"]["message"]


def test_served_turns_go_on_one_upstream_connection() -> None:
    """``tpx serve``: plain and streamed turns one after the other reuse one kept-alive
    upstream connection (a stream is read to its end after its last event)."""
    with ScriptedUpstream(answer) as upstream:
        settings = settings_for(Provider.TPX, base_url=upstream.url + "/v1", monitor=False)
        with _gateway("serve", settings) as client:
            replies = [
                (stream, client.post("/v1/messages", json=_turn(stream), headers=AUTH))
                for stream in (True, False, True, True, False)
            ]
        connections = upstream.connections
    for stream, reply in replies:
        _said_hello(reply, stream)
    assert connections == 1


def test_served_upstream_latency_is_observed_once_per_reply() -> None:
    """``/metrics``: one upstream latency observation per upstream response."""
    with ScriptedUpstream(answer, status(529, "3"), answer) as upstream:
        settings = settings_for(Provider.TPX, base_url=upstream.url + "/v1", monitor=False)
        with _gateway("serve", settings) as client:
            for _ in range(3):
                client.post("/v1/messages", json=_turn(False), headers=AUTH)
            metrics = client.get("/metrics").text
    assert "tpx_gateway_upstream_latency_seconds_count 3.0" in metrics


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
def test_max_upstream_bounds_the_requests_upstream_at_once(stream: bool) -> None:
    """``limits.max_upstream = 1``: a second turn waits for the first one's upstream
    request to end (it is not refused), so the upstream never has two at once."""
    release = threading.Event()
    limits = attrs.evolve(Limits(), max_upstream=1)
    with ScriptedUpstream(held(release), answer) as upstream:
        settings = settings_for(
            Provider.TPX, base_url=upstream.url + "/v1", limits=limits, monitor=False
        )
        with _served(settings) as url:
            replies: list[httpx2.Response] = []
            threads = [
                threading.Thread(target=lambda: replies.append(_post(url, stream)))
                for _ in range(2)
            ]
            threads[0].start()
            try:
                deadline = time.monotonic() + 60  # a hang guard only
                while not upstream.requests and time.monotonic() < deadline:
                    time.sleep(0.01)
                threads[1].start()
                time.sleep(0.3)  # room for a second request to reach the upstream
                seen = len(upstream.requests)
            finally:
                release.set()
                for thread in threads:
                    thread.join(60)
    assert seen == 1
    assert len(replies) == 2
    for reply in replies:
        _said_hello(reply, stream)


# -- a pooled connection the upstream closed ---------------------------------------------------


def _turn(stream: bool) -> dict[str, Any]:
    return {
        "model": "claude-x",
        "max_tokens": 64,
        "stream": stream,
        "messages": [{"role": "user", "content": "hi"}],
    }


@contextlib.contextmanager
def _client(wiring: Wiring, base_url: str) -> Iterator[httpx2.Client]:
    settings = settings_for(Provider.TPX, base_url=base_url)
    if wiring == "sdk":
        transport = GatewayTransport(Gateway(settings), SyncUpstream(settings))
        with httpx2.Client(transport=transport, base_url="http://gateway.test") as client:
            yield client
        return
    with (
        serving(create_app(settings)) as url,
        httpx2.Client(base_url=url, timeout=60) as client,
    ):
        yield client


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
@pytest.mark.parametrize("wiring", WIRINGS)
def test_a_pooled_connection_the_upstream_closed_is_replaced(wiring: Wiring, stream: bool) -> None:
    """The upstream answers, then closes the kept-alive connection: the next turn goes on a
    new connection, and each turn reached the upstream once."""
    closed = threading.Event()
    with ScriptedUpstream(answer_then_close(closed), answer) as upstream:
        with _client(wiring, upstream.url) as client:
            first = client.post("/v1/messages", json=_turn(stream), headers=AUTH)
            assert closed.wait(30)
            second = client.post("/v1/messages", json=_turn(stream), headers=AUTH)
        assert (len(upstream.requests), upstream.connections) == (2, 2)
    _said_hello(first, stream)
    _said_hello(second, stream)
