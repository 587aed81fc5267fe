"""tpx.gateway.upstream: the requests the owned client sends are httpx2's own; one client
request is one upstream request (a real loopback upstream counts what it received)."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import httpx2
import pytest

from tests.gateway.conftest import GATEWAY_KEY, make_settings, serving
from tests.gateway.scripted import ScriptedUpstream, answer, answer_then_close, drop_after
from tpx.errors import ModelError, NetworkError
from tpx.gateway import h1 as h1_module
from tpx.gateway import upstream as upstream_module
from tpx.gateway.asgi import create_app
from tpx.gateway.upstream import AsyncUpstream, SyncUpstream
from tpx.gateway.wire import UpstreamCall

_NOWHERE = httpx2.MockTransport(lambda request: httpx2.Response(500))  # never sent


def _call(body: bytes, accept: str = "application/json", **extra: str) -> UpstreamCall:
    headers = (("content-type", "application/json"), ("accept", accept), *extra.items())
    return UpstreamCall("POST", "/chat/completions", headers, body, False)


@pytest.mark.parametrize("kind", [SyncUpstream, AsyncUpstream])
def test_a_request_is_what_httpx2_builds(kind: type[SyncUpstream | AsyncUpstream]) -> None:
    """Headers (names, values, order), URL, method and body as ``httpx2.Request(...,
    content=body)`` with the client's default headers makes them, for every set of
    headers, the first time and from the kept set."""
    upstream = kind(make_settings("TPX"), transport=_NOWHERE)
    defaults = dict(upstream.client.headers)
    calls = [
        _call(b'{"a":1}'),
        _call(b'{"a":2}' * 100),
        _call(b"{}", "text/event-stream"),
        _call(b'{"b":3}', **{"anthropic-beta": "x-2025"}),
        _call(b'{"a":1}'),
    ]
    for call in calls:
        headers = upstream._headers(call, upstream._token())
        got = upstream._request(call, headers)
        want = httpx2.Request(
            call.method,
            upstream._url(call),
            headers={**defaults, **headers},
            content=call.body,
        )
        assert got.headers.raw == want.headers.raw
        assert (got.method, got.url, got.content) == (want.method, want.url, want.content)
        assert got.extensions["timeout"] == upstream._timeouts
    assert len(upstream._prepared) == 3  # the first two calls share their headers
    assert "SECRET" not in repr(upstream._prepared)  # the credential is among them


def test_the_kept_header_sets_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(upstream_module, "_PREPARED", 3)
    upstream = SyncUpstream(make_settings("TPX"), transport=_NOWHERE)
    for n in range(10):
        call = _call(b"{}", **{"x-n": str(n)})
        upstream._request(call, upstream._headers(call, upstream._token()))
        assert len(upstream._prepared) <= 3


def test_a_request_without_a_body() -> None:
    upstream = SyncUpstream(make_settings("TPX"), transport=_NOWHERE)
    call = UpstreamCall("GET", "/models", (), b"", False)
    got = upstream._request(call, upstream._headers(call, upstream._token()))
    want = httpx2.Request(
        "GET",
        upstream._url(call),
        headers={**upstream.client.headers, **upstream._headers(call, upstream._token())},
    )
    assert got.headers.raw == want.headers.raw
    assert got.content == b""


# -- one generation per client request ------------------------------------------------------


def _turn(stream: bool) -> dict[str, Any]:
    return {
        "model": "claude-x",
        "max_tokens": 64,
        "stream": stream,
        "messages": [{"role": "user", "content": "hi"}],
    }


def _gateway_posts(
    upstream: ScriptedUpstream, bodies: list[dict[str, Any]]
) -> list[httpx2.Response]:
    """POST each body to a real gateway (uvicorn) in front of *upstream*, in order."""
    settings = make_settings("TPX", base_url=upstream.url, gateway_key=GATEWAY_KEY)
    replies = []
    with serving(create_app(settings)) as url, httpx2.Client(base_url=url, timeout=30) as client:
        for body in bodies:
            replies.append(
                client.post("/v1/messages", json=body, headers={"x-api-key": GATEWAY_KEY})
            )
    return replies


_ATTEMPT = AsyncUpstream._attempt


async def _resend_on_any_error(
    self: AsyncUpstream, request: httpx2.Request
) -> httpx2.Response | httpx2.HTTPError:
    """A seeded bug: an attempt re-sent once on any transport failure (the upstream may
    have generated, and billed, the first one)."""
    outcome = await _ATTEMPT(self, request)
    if isinstance(outcome, httpx2.HTTPError):
        return await _ATTEMPT(self, request)
    return outcome


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
@pytest.mark.parametrize("seeded", [False, True], ids=["real", "resend-bug"])
def test_a_request_the_upstream_read_and_dropped_is_not_sent_again(
    stream: bool, seeded: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The upstream reads the whole POST, works, and drops the connection: it may have
    generated the reply. The client gets a typed 502 and the upstream got ONE request (the
    seeded bug, a policy re-sending on any failure, makes it two: the check sees it)."""
    if seeded:
        monkeypatch.setattr(AsyncUpstream, "_attempt", _resend_on_any_error)
    with ScriptedUpstream(drop_after(0.3)) as upstream:
        (reply,) = _gateway_posts(upstream, [_turn(stream)])
        received = len(upstream.requests)
    assert received == (2 if seeded else 1)
    assert reply.status_code == 502
    assert reply.headers["content-type"].startswith("application/json")
    error = reply.json()
    assert error["type"] == "error"
    assert error["error"]["type"] == "api_error"
    assert "MODEL_NETWORK" in error["error"]["message"]


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_a_pooled_connection_the_upstream_closed_is_replaced(stream: bool) -> None:
    """The upstream answers, then closes the kept-alive connection: the next turn goes on a
    new connection, transparently, and each turn reached the upstream once."""
    closed = threading.Event()
    with ScriptedUpstream(answer_then_close(closed), answer) as upstream:
        settings = make_settings("TPX", base_url=upstream.url, gateway_key=GATEWAY_KEY)
        headers = {"x-api-key": GATEWAY_KEY}
        with serving(create_app(settings)) as url, httpx2.Client(base_url=url) as client:
            first = client.post("/v1/messages", json=_turn(stream), headers=headers)
            assert closed.wait(10)
            second = client.post("/v1/messages", json=_turn(stream), headers=headers)
        assert (first.status_code, second.status_code) == (200, 200), second.text
        assert (len(upstream.requests), upstream.connections) == (2, 2)
    assert "hello" in second.text


@pytest.mark.parametrize("seeded", [False, True], ids=["real", "no-check-bug"])
def test_a_closed_pooled_connection_the_loop_has_not_seen_is_not_written_to(
    seeded: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The upstream closed the idle connection while the client's event loop was busy (the
    FIN is in the socket, unread): the request goes on a new connection, not into the dead
    one, where it would fail after being written and could not be re-sent (the seeded bug,
    no check before writing, fails the second request)."""
    if seeded:
        monkeypatch.setattr(h1_module._Connection, "peer_spoke", lambda self: False)
    closed = threading.Event()
    call = UpstreamCall(
        "POST", "/chat/completions", (("content-type", "application/json"),), b"{}", False
    )

    async def main(upstream: ScriptedUpstream) -> list[bytes | ModelError]:
        client = AsyncUpstream(make_settings("TPX", base_url=upstream.url))
        assert client.io == "h1"
        bodies: list[bytes | ModelError] = []
        try:
            for _ in range(2):
                try:
                    response = await client.open(call)
                    try:
                        bodies.append(await client.read(response))
                    finally:
                        await response.aclose()
                except ModelError as error:
                    bodies.append(error)
                assert closed.wait(10)  # blocks the loop: the FIN is not read by it
        finally:
            await client.aclose()
        return bodies

    with ScriptedUpstream(answer_then_close(closed), answer) as upstream:
        first, second = asyncio.run(main(upstream))
        connections = upstream.connections
    assert isinstance(first, bytes)
    assert b"hello" in first
    if seeded:
        assert isinstance(second, NetworkError)
        assert connections == 1
    else:
        assert second == first
        assert connections == 2
