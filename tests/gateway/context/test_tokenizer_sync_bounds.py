"""The sync SDK client's tokenizer calls (``tpx.sdk.anthropic_client``): a sync client may be
shared by many threads, so its upstream calls, turns and tokenizer calls together, are held
to ``limits.max_upstream`` slots (:attr:`tpx.gateway.upstream.SyncUpstream.slots`) as the
async gateway's are: a turn holds one until its reply is closed, a tokenizer call holds one
while it runs and waits for one within ``tokenizer_timeout`` (none free: reason ``busy``, the
estimate counts); an endpoint that never answers gives the estimate within its timeout."""

from __future__ import annotations

import threading
from typing import Any

import httpx2
import orjson

from tpx.gateway.core import Gateway
from tpx.gateway.settings import Settings
from tpx.gateway.upstream import SyncUpstream
from tpx.sdk import GatewayTransport

from ..conftest import GUARD, lifespan, serving, tokenizer_settings, until
from .test_gateway_context import _reply

SMALL = {"model": "m", "messages": [{"role": "user", "content": "word " * 50}]}
SPARED = {"model": "m", "max_tokens": 64, "messages": [{"role": "user", "content": "hi"}]}


class _Fake:
    """The upstream, in the calling thread (an httpx2 MockTransport): ``/tokenize`` answers
    ``{"count": 7}``, chat completions a reply; either held until :attr:`release` is set when
    told to (*hold*: ``tokenize`` or ``turns``)."""

    def __init__(self, hold: str) -> None:
        self.hold = hold
        self.release = threading.Event()
        self.tokenize = 0
        self.turns = 0

    def __call__(self, request: httpx2.Request) -> httpx2.Response:
        tokenize = request.url.path == "/tokenize"
        if tokenize:
            self.tokenize += 1
        else:
            self.turns += 1
        if self.hold == ("tokenize" if tokenize else "turns"):
            assert self.release.wait(GUARD)
        return httpx2.Response(200, json={"count": 7} if tokenize else _reply())


def _client(
    settings: Settings, transport: httpx2.BaseTransport | None
) -> tuple[httpx2.Client, Gateway, SyncUpstream]:
    gateway = Gateway(settings)
    upstream = SyncUpstream(settings, transport=transport)
    http = httpx2.Client(
        transport=GatewayTransport(gateway, upstream), base_url="http://gw", timeout=GUARD
    )
    return http, gateway, upstream


def _fallbacks(gateway: Gateway, reason: str) -> float:
    value = gateway.metrics.registry.get_sample_value(
        "tpx_gateway_tokenizer_fallbacks_total", {"reason": reason}
    )
    return 0.0 if value is None else value


def test_a_sync_turn_holds_the_slot_a_tokenizer_call_would_take() -> None:
    fake = _Fake(hold="turns")
    http, gateway, _ = _client(
        tokenizer_settings("http://upstream.test", max_upstream=1, timeout=0.3),
        httpx2.MockTransport(fake),
    )
    with http:
        replies: list[httpx2.Response] = []
        turn = threading.Thread(
            target=lambda: replies.append(http.post("/v1/messages", json=SPARED))
        )
        turn.start()
        until(lambda: fake.turns == 1, "the turn sent")
        counted = http.post("/v1/messages/count_tokens", json=SMALL)
        fake.release.set()
        turn.join(GUARD)
    assert fake.tokenize == 0  # no slot freed within the tokenizer's timeout: never asked
    assert counted.status_code == 200
    assert counted.json()["input_tokens"] != 7  # the estimate's
    assert _fallbacks(gateway, "busy") == 1
    assert [r.status_code for r in replies] == [200]


def test_a_sync_tokenizer_call_holds_a_slot_and_gives_it_back() -> None:
    fake = _Fake(hold="tokenize")
    http, gateway, upstream = _client(
        tokenizer_settings("http://upstream.test", max_upstream=2, timeout=GUARD),
        httpx2.MockTransport(fake),
    )
    free: list[int] = []

    def watch() -> None:
        until(lambda: fake.tokenize == 1, "the tokenizer asked")
        free.append(_free(upstream))
        fake.release.set()

    watcher = threading.Thread(target=watch)
    watcher.start()
    with http:
        counted = http.post("/v1/messages/count_tokens", json=SMALL)
        watcher.join(GUARD)
        assert http.post("/v1/messages", json=SPARED).status_code == 200
    assert counted.json() == {"input_tokens": 7}
    assert free == [1]  # one of the two taken while the endpoint was asked
    assert _free(upstream) == 2  # both given back, after the turn too
    assert _fallbacks(gateway, "busy") == 0


def test_a_sync_tokenizer_endpoint_that_never_answers_gives_the_estimate() -> None:
    """On a real socket: the endpoint reads the request and never answers; the count is the
    estimate (reason ``timeout``) and the slot is given back."""
    gone = threading.Event()

    async def never(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            await lifespan(receive, send)
            return
        while (await receive())["type"] != "http.disconnect":
            pass
        gone.set()  # the gateway closed the call

    with serving(never) as url:
        http, gateway, upstream = _client(
            tokenizer_settings(url, max_upstream=1, timeout=0.3), None
        )
        with http:
            counted = http.post("/v1/messages/count_tokens", json=SMALL)
        assert gone.wait(GUARD)
    assert counted.status_code == 200
    assert orjson.loads(counted.content)["input_tokens"] > 50
    assert _fallbacks(gateway, "timeout") == 1
    assert _free(upstream) == 1


def _free(upstream: SyncUpstream) -> int:
    """The slots free now (taken and given back at once)."""
    taken = 0
    while upstream.slots.acquire(blocking=False):
        taken += 1
    for _ in range(taken):
        upstream.slots.release()
    return taken
