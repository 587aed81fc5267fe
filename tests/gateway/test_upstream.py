"""tpx.gateway.upstream: the requests the owned client sends are httpx2's own."""

from __future__ import annotations

import httpx2
import pytest

from tests.gateway.conftest import make_settings
from tpx.gateway import upstream as upstream_module
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
        headers = upstream._headers(call)
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
        upstream._request(call, upstream._headers(call))
        assert len(upstream._prepared) <= 3


def test_a_request_without_a_body() -> None:
    upstream = SyncUpstream(make_settings("TPX"), transport=_NOWHERE)
    call = UpstreamCall("GET", "/models", (), b"", False)
    got = upstream._request(call, upstream._headers(call))
    want = httpx2.Request(
        "GET", upstream._url(call), headers={**upstream.client.headers, **upstream._headers(call)}
    )
    assert got.headers.raw == want.headers.raw
    assert got.content == b""
