"""Fixtures: gateway settings per provider, a real uvicorn server on an ephemeral port, and
what the fake upstreams served there share (their lifespan, a wait for the client leaving, a
request sent on a socket of its own, a wait for something the other side does)."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import attrs
import httpx2
import orjson
import uvicorn

from tpx.gateway.context.config import ContextConfig
from tpx.gateway.protocol import HeaderTimeoutProtocol
from tpx.gateway.settings import Credential, Limits, Settings
from tpx.transport.exchange import Provider
from tpx.transport.translate.profiles import get_profile

#: How long a test waits for something the other side does before it fails (a hang guard:
#: every wait ends as soon as the thing happened).
GUARD = 20.0
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


def tokenizer_settings(url: str, max_upstream: int, timeout: float) -> Settings:
    """A vLLM upstream at *url* whose tokenizer endpoint counts (``tokenizer_timeout``:
    *timeout*), with *max_upstream* upstream slots and no window discovery."""
    return make_settings(
        "TPX",
        base_url=url,
        model="m",
        profile=get_profile("vllm"),
        limits={"max_upstream": max_upstream},
        context=ContextConfig(tokenizer=True, tokenizer_timeout=timeout, discover=False),
    )


def until(done: Callable[[], bool], what: str) -> None:
    """Wait for *done* (at most :data:`GUARD` seconds: then fail, saying *what* never was)."""
    deadline = time.monotonic() + GUARD
    while not done():
        assert time.monotonic() < deadline, f"never happened: {what}"
        time.sleep(0.01)


def post_unread(url: str, path: str, body: dict[str, Any]) -> socket.socket:
    """A request sent on a socket of its own, its response not read."""
    host, port = url.removeprefix("http://").split(":")
    data = orjson.dumps(body)
    head = (
        f"POST {path} HTTP/1.1\r\nhost: {host}\r\ncontent-type: application/json\r\n"
        f"content-length: {len(data)}\r\n\r\n"
    )
    sock = socket.create_connection((host, int(port)), timeout=GUARD)
    sock.sendall(head.encode() + data)
    return sock


async def lifespan(receive: Any, send: Any) -> None:
    """An ASGI app's ``lifespan`` scope: started at once, shut down when told."""
    while (await receive())["type"] != "lifespan.shutdown":
        await send({"type": "lifespan.startup.complete"})
    await send({"type": "lifespan.shutdown.complete"})


async def request_body(receive: Any) -> bytes:
    """In an ASGI app: the request's whole body."""
    parts: list[bytes] = []
    more = True
    while more:
        message = await receive()
        parts.append(message.get("body", b""))
        more = message.get("more_body", False)
    return b"".join(parts)


async def released(release: threading.Event, receive: Any) -> bool:
    """In an ASGI app that read a request's body: wait for *release* (True) or the client's
    going away (False)."""
    gone = asyncio.ensure_future(receive())
    try:
        while not release.is_set():
            if gone.done():
                return False  # after the body, the only message is the disconnect
            await asyncio.sleep(0.01)
        return True
    finally:
        gone.cancel()


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
                await lifespan(receive, send)
            return
        body = await request_body(receive)
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
