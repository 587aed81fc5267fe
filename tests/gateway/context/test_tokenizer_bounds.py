"""The tokenizer endpoint's calls, with the gateway and the fake upstream on real loopback
sockets: each call takes one of the upstream slots (``limits.max_upstream``) turns take, and
falls back to the estimate (reason ``busy``) when none frees within ``tokenizer_timeout``; its
latency is counted apart from the upstream's; a client that leaves while the endpoint is
asked ends the request there (the call is cancelled, nothing goes upstream, the turn's line
says ``client_gone``)."""

from __future__ import annotations

import asyncio
import logging
import threading
from typing import Any

import httpx2
import orjson
import pytest

from tpx.gateway.asgi import GatewayApp, create_app
from tpx.gateway.upstream import AsyncUpstream

from ..conftest import (
    GUARD,
    lifespan,
    post_unread,
    released,
    request_body,
    serving,
    tokenizer_settings,
    until,
)
from .test_gateway_context import _reply

WINDOW = 200_000
COUNTED = {  # a body the preflight counts (max_tokens asks for the whole window)
    "model": "m",
    "max_tokens": WINDOW,
    "messages": [{"role": "user", "content": "word " * 5000}],
}
SPARED = {"model": "m", "max_tokens": 64, "messages": [{"role": "user", "content": "hi"}]}
SMALL = {"model": "m", "messages": [{"role": "user", "content": "word " * 50}]}


class _Fake:
    """The upstream: ``/tokenize`` answers ``{"count": 7}``, chat completions a reply; either
    is held until :attr:`release` is set when told to (*hold*: ``tokenize`` or ``turns``).
    Counts the arrivals, and the tokenizer calls whose caller went away while held."""

    def __init__(self, hold: str = "") -> None:
        self.hold = hold
        self.release = threading.Event()
        self.tokenize = 0
        self.turns = 0
        self.left = 0

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            await lifespan(receive, send)
            return
        await request_body(receive)
        tokenize = scope["path"] == "/tokenize"
        if tokenize:
            self.tokenize += 1
        else:
            self.turns += 1
        held = self.hold == ("tokenize" if tokenize else "turns")
        if held and not await released(self.release, receive):
            self.left += tokenize
            return
        body = b'{"count": 7}' if tokenize else orjson.dumps(_reply())
        headers = [(b"content-type", b"application/json")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": body})


def _sample(app: GatewayApp, name: str, labels: dict[str, str] | None = None) -> float:
    value = app.gateway.metrics.registry.get_sample_value(name, labels or {})
    return 0.0 if value is None else value


def _upstream(app: GatewayApp) -> AsyncUpstream:
    assert isinstance(app.upstream, AsyncUpstream)
    return app.upstream


def test_with_every_upstream_slot_taken_the_tokenizer_is_not_asked_and_the_estimate_counts() -> (
    None
):
    fake = _Fake(hold="turns")
    with serving(fake) as upstream_url:
        app = create_app(tokenizer_settings(upstream_url, max_upstream=2, timeout=0.3))
        with serving(app) as url:

            async def main() -> tuple[list[httpx2.Response], list[httpx2.Response]]:
                async with httpx2.AsyncClient(base_url=url, timeout=GUARD) as http:
                    turns = [
                        asyncio.ensure_future(http.post("/v1/messages", json=SPARED))
                        for _ in range(2)
                    ]
                    await asyncio.to_thread(until, lambda: fake.turns == 2, "two turns sent")
                    counts = await asyncio.gather(
                        *[http.post("/v1/messages/count_tokens", json=SMALL) for _ in range(4)]
                    )
                    fake.release.set()
                    return list(counts), list(await asyncio.gather(*turns))

            counts, turns = asyncio.run(main())
    assert [t.status_code for t in turns] == [200, 200]
    assert fake.tokenize == 0  # no slot freed within the tokenizer's timeout: never asked
    assert all(c.status_code == 200 for c in counts)
    assert {c.json()["input_tokens"] for c in counts} != {7}  # the estimate's
    assert len({c.json()["input_tokens"] for c in counts}) == 1
    assert _sample(app, "tpx_gateway_tokenizer_fallbacks_total", {"reason": "busy"}) == 4


def test_a_tokenizer_call_holds_an_upstream_slot_and_its_latency_is_its_own() -> None:
    fake = _Fake(hold="tokenize")
    with serving(fake) as upstream_url:
        app = create_app(tokenizer_settings(upstream_url, max_upstream=1, timeout=GUARD))
        slots = _upstream(app).slots
        with serving(app) as url, httpx2.Client(base_url=url, timeout=GUARD) as http:
            held: list[bool] = []

            def watch() -> None:
                until(lambda: fake.tokenize == 1, "the tokenizer asked")
                held.append(slots.locked())  # the one slot is the tokenizer call's
                fake.release.set()

            watcher = threading.Thread(target=watch)
            watcher.start()
            counted = http.post("/v1/messages/count_tokens", json=SMALL)
            watcher.join()
            assert counted.json() == {"input_tokens": 7}
            assert held == [True]
            assert not slots.locked()  # given back
            assert _sample(app, "tpx_gateway_tokenizer_latency_seconds_count") == 1
            assert _sample(app, "tpx_gateway_upstream_latency_seconds_count") == 0
            assert http.post("/v1/messages", json=SPARED).status_code == 200
    assert _sample(app, "tpx_gateway_upstream_latency_seconds_count") == 1  # a turn's counts
    assert _sample(app, "tpx_gateway_tokenizer_latency_seconds_count") == 1


@pytest.mark.parametrize("path", ["/v1/messages", "/v1/messages/count_tokens"])
def test_a_client_gone_while_the_tokenizer_is_asked_cancels_the_call(
    path: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="tpx.gateway")
    fake = _Fake(hold="tokenize")
    turn = path == "/v1/messages"
    with serving(fake) as upstream_url:
        app = create_app(tokenizer_settings(upstream_url, max_upstream=1, timeout=GUARD))
        with serving(app) as url:
            sock = post_unread(url, path, COUNTED if turn else SMALL)
            until(lambda: fake.tokenize == 1, "the tokenizer asked")
            sock.close()
            until(lambda: fake.left == 1, "the tokenizer call cancelled")
            if turn:
                until(lambda: "client_gone" in caplog.text, "the turn's line logged")
            until(lambda: not _upstream(app).slots.locked(), "its slot given back")
            fake.release.set()
    assert fake.turns == 0  # nothing went upstream
    assert _sample(app, "tpx_gateway_tokenizer_fallbacks_total", {"reason": "timeout"}) == 0
    assert app.gateway.in_flight == 0
    if turn:
        lines = [r for r in caplog.records if "client_gone" in r.getMessage()]
        record = orjson.loads(lines[0].getMessage())
        assert record["client_gone"] is True
        assert record["endpoint"] == "messages"
        assert len(lines) == 1
