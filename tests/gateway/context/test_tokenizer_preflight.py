"""The preflight counts with the upstream's tokenizer endpoint when one is configured: for every
recorded Claude Code and SDK body, count_tokens, the preflight and the fake endpoint give one
number, asked for once a request; an endpoint that hangs, fails or answers garbage leaves the
turn to the estimate (logged, counted in the metrics) and never fails it."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import httpx2
import orjson
import pytest

from benchmarks.context_counts import ENDPOINT_PROFILES, FakeTokenizer, recorded
from tpx.gateway.asgi import GatewayApp
from tpx.gateway.context.config import ContextConfig
from tpx.gateway.context.tokenizer import TOKENIZERS, framing
from tpx.gateway.core import Gateway
from tpx.gateway.settings import Settings
from tpx.gateway.upstream import AsyncUpstream, SyncUpstream
from tpx.sdk import GatewayTransport
from tpx.transport.translate import request_to_openai
from tpx.transport.translate.profiles import get_profile

from ..conftest import make_settings
from .test_gateway_context import Upstream, _reply, client

BODIES = recorded()
#: The default window: a request asking for all of it as max_tokens is counted and, when its
#: input fits, sent with max_tokens = WINDOW - the preflight's count.
WINDOW = 200_000


def _settings(
    profile: str = "vllm", limits: dict[str, Any] | None = None, **context: Any
) -> Settings:
    return make_settings(
        "TPX",
        model="m",
        profile=get_profile(profile),
        # (the fake counts a 100 KB body in over a second on a loaded machine: the endpoint's
        # time bound is test_tokenizer_bounds's subject, not this file's)
        context=ContextConfig(**{"tokenizer": True, "tokenizer_timeout": 60.0, **context}),
        **({"limits": limits} if limits else {}),
    )


def _upstream(profile: str, tokenizer: Callable[[httpx2.Request], httpx2.Response]) -> Upstream:
    path = TOKENIZERS[profile].path

    def answer(request: httpx2.Request) -> httpx2.Response:
        if request.url.path == path:
            return tokenizer(request)
        return httpx2.Response(200, json=_reply())

    return Upstream(answer)


def _preflight_count(upstream: Upstream, window: int = WINDOW) -> int:
    """The preflight's count of the last request that went upstream (its max_tokens clamped
    to what the window leaves)."""
    sent = upstream.bodies[-1]["max_tokens"]
    assert isinstance(sent, int)
    return window - sent


@pytest.mark.parametrize("profile", ENDPOINT_PROFILES)
@pytest.mark.parametrize(("name", "body"), BODIES, ids=[n for n, _ in BODIES])
def test_count_tokens_the_preflight_and_the_endpoint_give_one_number(
    name: str, body: dict[str, Any], profile: str
) -> None:
    fake = FakeTokenizer(profile)
    upstream = _upstream(profile, fake)
    with client(_settings(profile), upstream) as http:
        counted = http.post("/v1/messages/count_tokens", json=body).json()["input_tokens"]
        assert fake.calls == 1
        endpoint = fake.last
        reply = http.post("/v1/messages", json={**body, "max_tokens": WINDOW})
    assert reply.status_code == 200, reply.text
    assert fake.calls == 2  # once a request
    assert fake.last == endpoint
    assert counted == _preflight_count(upstream)
    if profile == "vllm":  # the chat template applied: the endpoint's count as it is
        assert counted == endpoint
    else:  # a text: the endpoint's count plus tpx's framing
        translated = request_to_openai({"max_tokens": 1, **body}, model="m", profile=profile)
        assert counted == (endpoint or 0) + framing(translated.body)


def _long(words: int = 5000, max_tokens: int = 1000) -> dict[str, Any]:
    return {
        "model": "m",
        "max_tokens": max_tokens,
        "messages": [{"role": "user", "content": "word " * words}],
    }


def _estimate(body: dict[str, Any]) -> int:
    """What the preflight counts without a tokenizer (the estimate, through the gateway)."""
    upstream = Upstream()
    with client(_settings(tokenizer=False), upstream) as http:
        http.post("/v1/messages", json={**body, "max_tokens": WINDOW})
    return _preflight_count(upstream)


def test_the_preflight_refuses_on_the_endpoints_count_not_the_estimate() -> None:
    body = _long()
    estimate = _estimate(body)

    def says(count: int) -> Callable[[httpx2.Request], httpx2.Response]:
        return lambda request: httpx2.Response(200, json={"count": count})

    # the endpoint counts more than the window takes: refused with its count as N
    upstream = _upstream("vllm", says(21_000))
    with client(_settings(window=20_000), upstream) as http:
        refused = http.post("/v1/messages", json=body | {"max_tokens": 4096})
    assert estimate < 18_976
    assert refused.status_code == 400
    assert refused.json()["error"]["message"] == "prompt is too long: 21000 tokens > 18976 maximum"
    assert upstream.bodies == []
    # the endpoint counts fewer than the estimate: the request goes, clamped by that count
    window = estimate + 500  # the estimate leaves no room for the reply; the endpoint does
    upstream = _upstream("vllm", says(estimate - 2000))
    with client(_settings(window=window), upstream) as http:
        sent = http.post("/v1/messages", json=body | {"max_tokens": 4000})
    assert sent.status_code == 200, sent.text
    assert _preflight_count(upstream, window) == estimate - 2000


def _fallbacks(gateway: Gateway, reason: str) -> float:
    value = gateway.metrics.registry.get_sample_value(
        "tpx_gateway_tokenizer_fallbacks_total", {"reason": reason}
    )
    return value or 0.0


GARBAGE: dict[str, tuple[Callable[[httpx2.Request], httpx2.Response], str]] = {
    "a 404": (lambda r: httpx2.Response(404, json={"detail": "Not Found"}), "status"),
    "a 500": (lambda r: httpx2.Response(500, text="boom"), "status"),
    "not JSON": (lambda r: httpx2.Response(200, content=b"\x00garbage"), "unreadable"),
    "no count": (lambda r: httpx2.Response(200, json={"tokens": "many"}), "unreadable"),
    "a count below 0": (lambda r: httpx2.Response(200, json={"count": -3}), "implausible"),
    "a huge count": (lambda r: httpx2.Response(200, json={"count": 10**12}), "implausible"),
    "a bool": (lambda r: httpx2.Response(200, json={"count": True}), "unreadable"),
    "too large": (
        lambda r: httpx2.Response(200, json={"count": 7, "pad": "x" * 5000}),
        "too_large",
    ),
    "a dropped connection": (
        lambda r: (_ for _ in ()).throw(httpx2.RemoteProtocolError("gone", request=r)),
        "error",
    ),
    "a read timeout": (
        lambda r: (_ for _ in ()).throw(httpx2.ReadTimeout("slow", request=r)),
        "timeout",
    ),
}


@pytest.mark.parametrize("case", list(GARBAGE))
def test_an_endpoint_that_fails_or_answers_garbage_leaves_the_turn_to_the_estimate(
    case: str,
) -> None:
    handler, reason = GARBAGE[case]
    body = _long()
    estimate = _estimate(body)
    upstream = _upstream("vllm", handler)
    settings = _settings(tokenizer_bytes=4096)
    gateway = Gateway(settings)
    transport = GatewayTransport(
        gateway, SyncUpstream(settings, transport=httpx2.MockTransport(upstream))
    )
    with httpx2.Client(transport=transport, base_url="http://gateway.test") as http:
        reply = http.post("/v1/messages", json={**body, "max_tokens": WINDOW})
        counted = http.post("/v1/messages/count_tokens", json=body)
    assert reply.status_code == 200, reply.text
    assert _preflight_count(upstream) == estimate
    assert counted.status_code == 200
    assert counted.json() == {"input_tokens": estimate}
    assert _fallbacks(gateway, reason) == 2


def _asgi(
    settings: Settings, tokenizer: Callable[[httpx2.Request], Awaitable[httpx2.Response]]
) -> tuple[GatewayApp, list[dict[str, Any]]]:
    """The ASGI app over a fake upstream: *tokenizer* answers its tokenizer endpoint; the chat
    bodies it got are listed."""
    chats: list[dict[str, Any]] = []

    async def answer(request: httpx2.Request) -> httpx2.Response:
        if request.url.path == TOKENIZERS[settings.profile.name].path:
            return await tokenizer(request)
        chats.append(orjson.loads(request.read()))
        return httpx2.Response(200, json=_reply())

    upstream = AsyncUpstream(settings, transport=httpx2.MockTransport(answer))
    return GatewayApp(Gateway(settings), upstream), chats


async def _post(app: GatewayApp, path: str, body: dict[str, Any]) -> httpx2.Response:
    transport = httpx2.ASGITransport(app=app)
    async with httpx2.AsyncClient(transport=transport, base_url="http://gateway.test") as http:
        return await http.post(path, json=body)


async def _hangs(request: httpx2.Request) -> httpx2.Response:
    await asyncio.sleep(3)  # far past the timeout; then a count
    return httpx2.Response(200, json={"count": 7})


async def _drops(request: httpx2.Request) -> httpx2.Response:
    raise httpx2.ConnectError("refused", request=request)


@pytest.mark.parametrize("offloaded", [False, True])
@pytest.mark.parametrize(("endpoint", "reason"), [(_hangs, "timeout"), (_drops, "error")])
def test_an_endpoint_that_hangs_or_drops_leaves_the_turn_to_the_estimate(
    offloaded: bool,
    endpoint: Callable[[httpx2.Request], Awaitable[httpx2.Response]],
    reason: str,
) -> None:
    body = _long()
    estimate = _estimate(body)
    limits = {"offload_bytes": 1} if offloaded else None
    app, chats = _asgi(_settings(limits=limits, tokenizer_timeout=0.05), endpoint)

    async def main() -> tuple[httpx2.Response, httpx2.Response]:
        try:
            turn = await _post(app, "/v1/messages", {**body, "max_tokens": WINDOW})
            count = await _post(app, "/v1/messages/count_tokens", body)
        finally:
            await app.offload.aclose()
        return turn, count

    turn, count = asyncio.run(main())
    assert turn.status_code == 200, turn.text
    assert WINDOW - chats[-1]["max_tokens"] == estimate
    assert count.json() == {"input_tokens": estimate}
    assert _fallbacks(app.gateway, reason) == 2


def test_the_asgi_shell_asks_once_and_takes_the_endpoints_count() -> None:
    fake = FakeTokenizer("vllm")

    async def tokenizer(request: httpx2.Request) -> httpx2.Response:
        return fake(request)

    app, chats = _asgi(_settings(), tokenizer)
    body = _long()
    reply = asyncio.run(_post(app, "/v1/messages", {**body, "max_tokens": WINDOW}))
    assert reply.status_code == 200, reply.text
    assert fake.calls == 1
    assert WINDOW - chats[-1]["max_tokens"] == fake.last


def test_the_async_sdk_transport_asks_once_and_falls_back_on_a_drop() -> None:
    from tpx.sdk import AsyncGatewayTransport

    body = _long()
    estimate = _estimate(body)
    fake = FakeTokenizer("vllm")
    chats: list[dict[str, Any]] = []

    async def main(dropping: bool) -> httpx2.Response:
        settings = _settings()

        async def answer(request: httpx2.Request) -> httpx2.Response:
            if request.url.path == "/tokenize":
                if dropping:
                    raise httpx2.ConnectError("refused", request=request)
                return fake(request)
            chats.append(orjson.loads(request.read()))
            return httpx2.Response(200, json=_reply())

        upstream = AsyncUpstream(settings, transport=httpx2.MockTransport(answer))
        transport = AsyncGatewayTransport(Gateway(settings), upstream)
        async with httpx2.AsyncClient(transport=transport, base_url="http://gw") as http:
            return await http.post("/v1/messages", json={**body, "max_tokens": WINDOW})

    assert asyncio.run(main(False)).status_code == 200
    assert fake.calls == 1
    assert WINDOW - chats[-1]["max_tokens"] == fake.last
    assert asyncio.run(main(True)).status_code == 200
    assert WINDOW - chats[-1]["max_tokens"] == estimate


def _context_of(caplog: pytest.LogCaptureFixture) -> dict[str, Any]:
    lines = [orjson.loads(r.getMessage()) for r in caplog.records if '"context"' in r.getMessage()]
    context = lines[-1]["context"]
    assert isinstance(context, dict)
    return context


def test_a_refusal_on_the_estimate_says_so(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level("INFO", logger="tpx.gateway")
    body = _long(max_tokens=4096)

    def drops(request: httpx2.Request) -> httpx2.Response:
        raise httpx2.ConnectError("refused", request=request)

    for tokenizer in (drops, lambda r: httpx2.Response(200, json={"count": 4000})):
        upstream = _upstream("vllm", tokenizer)
        with client(_settings(window=6000), upstream) as http:
            reply = http.post("/v1/messages", json=body)
        assert reply.status_code == (400 if tokenizer is drops else 200), reply.text
        context = _context_of(caplog)
        if tokenizer is drops:  # refused on the estimate, which the log line says
            assert "prompt is too long" in reply.json()["error"]["message"]
            assert (context["counted"], context["fallback"]) == ("estimate", "error")
            assert any("the estimate counts" in r.getMessage() for r in caplog.records)
        else:  # the endpoint's count: the request fits
            assert context["counted"] == "tokenizer"
            assert "fallback" not in context
    with client(
        make_settings("TPX", model="m", context=ContextConfig(window=6000)), Upstream()
    ) as http:
        http.post("/v1/messages", json=body)
    assert _context_of(caplog)["counted"] == "estimate"  # no endpoint: the estimate, said so
