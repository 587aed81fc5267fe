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
* A pooled connection the upstream closed after its reply: the next turn goes on a new
  connection and reaches the upstream once.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Iterator, Mapping
from typing import Any, Literal

import httpx2
import orjson
import pytest

from conformance.abstraction import assemble_messages
from conformance.fakes import (
    LOOPBACK_FAILURE_KINDS,
    FailureKind,
    FakeProvider,
    LoopbackServer,
)
from conformance.gateway_core import AUTH, GatewayRig, settings_for
from tests.gateway.conftest import serving
from tests.gateway.scripted import ScriptedUpstream, answer, answer_then_close
from tpx.audit.behaviours import RETRY, SMALL, cover_behaviours, mirror_graph
from tpx.audit.harness import Harness
from tpx.audit.replay import HttpReplayer
from tpx.gateway.asgi import GatewayApp, create_app
from tpx.gateway.core import Gateway
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
        self, provider: Provider, wiring: Wiring, server: LoopbackServer, **kwargs: Any
    ) -> None:
        base = server.url + ("/v1" if provider is Provider.TPX else "")
        super().__init__(provider, base_url=base, **kwargs)
        self.client.close()  # the in-process wiring the rig made
        server.fake = self.fake
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
            upstream = AsyncUpstream(
                self.settings, observe=self.gateway.metrics.upstream_latency.observe
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


@contextlib.contextmanager
def rig(
    provider: Provider, wiring: Wiring, *, seed: int = 0, streaming: bool = False
) -> Iterator[LoopbackRig]:
    with LoopbackServer.serving(FakeProvider("messages")) as server:
        live = LoopbackRig(provider, wiring, server, seed=seed, streaming=streaming)
        try:
            yield live
        finally:
            live.close()


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
        assert (first.status_code, second.status_code) == (200, 200), second.text
        assert (len(upstream.requests), upstream.connections) == (2, 2)
    for reply in (first, second):
        message = assemble_messages(reply.content) if stream else reply.json()
        assert message is not None
        assert message["content"] == [{"type": "text", "text": "hello"}]
