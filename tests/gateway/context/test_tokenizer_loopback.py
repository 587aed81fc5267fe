"""A tokenizer endpoint on a real socket (uvicorn, the gateway's own HTTP/1.1 client) that never
answers, trickles its reply or sends a huge one: the turn goes on with the estimate, within
the endpoint's timeout and size bound, and the endpoint's own reply never reaches the count."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx2
import orjson
import pytest

from tpx.gateway.asgi import GatewayApp
from tpx.gateway.context.config import ContextConfig
from tpx.gateway.core import Gateway
from tpx.gateway.upstream import AsyncUpstream
from tpx.transport.translate.profiles import get_profile

from ..conftest import lifespan, make_settings, request_body, serving
from .test_gateway_context import _reply

WINDOW = 200_000


class _Server:
    """The fake upstream: chat completions answered at once; ``/tokenize`` as *mode* says."""

    def __init__(self, mode: str) -> None:
        self.mode = mode

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            await lifespan(receive, send)
            return
        await request_body(receive)
        if scope["path"] != "/tokenize":
            await self._send(send, orjson.dumps(_reply()))
            return
        if self.mode == "hangs":
            await asyncio.sleep(3)  # far past the timeout, then a count
            await self._send(send, b'{"count": 7}')
        elif self.mode == "trickles":
            await send({"type": "http.response.start", "status": 200, "headers": []})
            for _ in range(150):  # 3 s of a byte every 20 ms
                await send({"type": "http.response.body", "body": b" ", "more_body": True})
                await asyncio.sleep(0.02)
            await send({"type": "http.response.body", "body": b'{"count": 7}'})
        else:  # huge: 10 MB of a list of token ids
            await self._send(send, b'{"count": 7, "tokens": [' + b"1," * 5_000_000 + b"1]}")

    @staticmethod
    async def _send(send: Any, body: bytes) -> None:
        headers = [(b"content-type", b"application/json")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": body})


@pytest.mark.parametrize(
    ("mode", "reason"), [("hangs", "timeout"), ("trickles", "timeout"), ("huge", "too_large")]
)
def test_a_tokenizer_endpoint_on_a_socket_never_holds_or_fails_the_turn(
    mode: str, reason: str
) -> None:
    body = {
        "model": "m",
        "max_tokens": WINDOW,
        "messages": [{"role": "user", "content": "word " * 5000}],
    }
    with serving(_Server(mode)) as url:
        settings = make_settings(
            "TPX",
            base_url=url,
            model="m",
            profile=get_profile("vllm"),
            context=ContextConfig(tokenizer=True, tokenizer_timeout=0.3, tokenizer_bytes=65536),
        )
        gateway = Gateway(settings)
        app = GatewayApp(gateway, AsyncUpstream(settings))

        async def main() -> httpx2.Response:
            transport = httpx2.ASGITransport(app=app)
            try:
                async with httpx2.AsyncClient(transport=transport, base_url="http://gw") as http:
                    return await http.post("/v1/messages", json=body)
            finally:
                await app.upstream.aclose()

        reply = asyncio.run(main())
    assert reply.status_code == 200, reply.text
    fallbacks = gateway.metrics.registry.get_sample_value(
        "tpx_gateway_tokenizer_fallbacks_total", {"reason": reason}
    )
    assert fallbacks == 1
