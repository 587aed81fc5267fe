"""Fixtures: gateway settings per provider, a real uvicorn server on an ephemeral port."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from typing import Any

import attrs
import httpx2
import uvicorn

from tpx.gateway.protocol import HeaderTimeoutProtocol
from tpx.gateway.settings import Credential, Limits, Settings
from tpx.transport.exchange import Provider

UPSTREAM_TOKEN = "tok-upstream-SECRET-1234"
UPSTREAM_KEY = "sk-ant-upstream-SECRET-5678"
GATEWAY_KEY = "gw-key-0001"


def make_settings(provider: str, **changes: Any) -> Settings:
    if provider == "TPX":
        settings = Settings(
            provider=Provider.TPX,
            base_url="http://upstream.test",
            credential=Credential(UPSTREAM_TOKEN),
            secret=b"test-secret",
        )
    else:
        settings = Settings(
            provider=Provider.ANTHROPIC,
            base_url="http://anthropic.test",
            credential=Credential(UPSTREAM_KEY),
            secret=b"test-secret",
        )
    limits = changes.pop("limits", None)
    if limits is not None:
        changes["limits"] = attrs.evolve(Limits(), **limits)
    return attrs.evolve(settings, **changes)


@contextlib.contextmanager
def serving(
    app: Any, *, header_timeout: float = 30.0, max_header_bytes: int | None = None
) -> Iterator[str]:
    """Run *app* under uvicorn (uvloop, httptools) on 127.0.0.1:<ephemeral>; its base URL.
    The protocol's limits: *header_timeout*, and *max_header_bytes* (its default if None)."""
    limits: dict[str, float] = {"header_timeout": header_timeout}
    if max_header_bytes is not None:
        limits["max_header_bytes"] = max_header_bytes
    config = uvicorn.Config(
        app,
        host="127.0.0.1",
        port=0,
        loop="uvloop",
        http=type("Protocol", (HeaderTimeoutProtocol,), limits),
        lifespan="on",
        log_level="warning",
        access_log=False,
    )
    sock = config.bind_socket()
    port = sock.getsockname()[1]
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert thread.is_alive(), "the server thread died"
        assert time.monotonic() < deadline, "the server did not start"
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(30)
        sock.close()


class FakeServer:
    """An ASGI app serving a :class:`~tests.gateway.fakes.FakeUpstream` (for loopback runs)."""

    def __init__(self, fake: Any) -> None:
        self.fake = fake

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            if scope["type"] == "lifespan":
                while (await receive())["type"] != "lifespan.shutdown":
                    await send({"type": "lifespan.startup.complete"})
                await send({"type": "lifespan.shutdown.complete"})
            return
        body = b""
        more = True
        while more:
            message = await receive()
            body += message.get("body", b"")
            more = message.get("more_body", False)
        headers = [(k.decode(), v.decode()) for k, v in scope["headers"]]
        request = httpx2.Request(
            scope["method"], f"http://fake{scope['path']}", headers=headers, content=body
        )
        response = self.fake.handle(request)
        await send(
            {
                "type": "http.response.start",
                "status": response.status_code,
                "headers": [(k.encode(), v.encode()) for k, v in response.headers.items()],
            }
        )
        async for part in response.aiter_bytes():
            await send({"type": "http.response.body", "body": part, "more_body": True})
        await send({"type": "http.response.body", "body": b""})
