"""The gateway and its upstream on real loopback sockets: connections are reused."""

from __future__ import annotations

from typing import Any

import httpx2

from tpx.gateway.asgi import create_app
from tpx.gateway.settings import Credential

from .conftest import GATEWAY_KEY, UPSTREAM_TOKEN, FakeServer, make_settings, serving
from .fakes import FakeUpstream


class CountingServer(FakeServer):
    """:class:`FakeServer` that records the client address of every request."""

    def __init__(self, fake: FakeUpstream) -> None:
        super().__init__(fake)
        self.peers: list[tuple[str, int]] = []

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            self.peers.append(tuple(scope["client"]))
        await super().__call__(scope, receive, send)


def _messages(text: str, stream: bool) -> dict[str, Any]:
    return {
        "model": "claude-x",
        "max_tokens": 64,
        "stream": stream,
        "messages": [{"role": "user", "content": text}],
    }


def test_streamed_and_plain_turns_reuse_one_upstream_connection() -> None:
    fake = FakeUpstream("TPX")
    upstream = CountingServer(fake)
    with serving(upstream) as upstream_url:
        settings = make_settings(
            "TPX",
            base_url=f"{upstream_url}/v1",
            credential=Credential(UPSTREAM_TOKEN),
            gateway_key=GATEWAY_KEY,
        )
        app = create_app(settings)
        with serving(app) as url, httpx2.Client(base_url=url, timeout=30) as client:
            headers = {"x-api-key": GATEWAY_KEY}
            for i in range(6):
                stream = i % 2 == 0
                body = _messages(f"conv-{i}", stream)
                response = client.post("/v1/messages", json=body, headers=headers)
                assert response.status_code == 200, response.text
                if stream:
                    assert response.text.rstrip().endswith('data: {"type":"message_stop"}')
                else:
                    assert response.json()["stop_reason"] == "tool_use"
    assert len(upstream.peers) == 6
    # one connection served all six (a stream's end is read, so its connection is pooled)
    assert len(set(upstream.peers)) == 1, upstream.peers
