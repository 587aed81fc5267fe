"""A hostile upstream cannot grow a real ``tpx serve``'s memory: gzip bombs, huge bodies and
endless streams get the client a Messages-shaped 502 while the gateway's resident set grows
by less than :data:`PEAK_BUDGET` at its peak and is back near where it was afterwards.

The gateway is the ``serve`` fixture's (tests/security/conftest.py); the peak is the kernel's
high-water mark (``VmHWM``, reset before each case); ``make redteam`` (``pytest -s``) prints
every case's figures. The small cases run in ``make test``; the heavy ones (1 MB of gzip
inflating to 1 GiB, a 300 MB body, a 1 GiB stream) in ``make redteam``.
"""

from __future__ import annotations

from typing import Any

import httpx2
import pytest

from tests.gateway.scripted import (
    COMMENTS,
    SSE_TYPE,
    ScriptedUpstream,
    by_marker,
    compressed,
    gzip_bomb,
    gzip_completion,
    huge,
    huge_completion,
)
from tests.security.conftest import MB, Serve, Server, settle

#: How much a hostile reply may raise the gateway's resident set at its peak.
PEAK_BUDGET = 50 * MB
#: How much of it may still be held once the reply is over.
KEPT_BUDGET = 20 * MB
TOKEN = "tok-security-9f8e7d6c"


def _turn(marker: str, stream: bool) -> dict[str, Any]:
    return {
        "model": "claude-x",
        "max_tokens": 64,
        "stream": stream,
        "messages": [{"role": "user", "content": marker}],
    }


def _post(server: Server, marker: str, stream: bool) -> httpx2.Response:
    with httpx2.Client(base_url=server.url, timeout=120) as client:
        return client.post("/v1/messages", json=_turn(marker, stream), headers=server.headers())


def _measure(server: Server, marker: str, stream: bool) -> tuple[httpx2.Response, int, int]:
    """The reply to a hostile turn; the peak and the kept growth of the gateway's RSS."""
    server.reset_peak()
    before = server.rss()
    reply = _post(server, marker, stream)
    peak = server.peak() - before
    settle(server, 0.25)
    kept = server.rss() - before
    print(
        f"{marker} stream={stream}: {reply.status_code}, peak +{peak / MB:.1f} MiB, "
        f"kept +{kept / MB:.1f} MiB"
    )
    return reply, peak, kept


def _bad_gateway(reply: httpx2.Response, limit: str) -> None:
    assert reply.status_code == 502, reply.text[:300]
    error = reply.json()
    assert error["type"] == "error"
    assert error["error"]["type"] == "api_error"
    assert "MODEL_PROTOCOL" in error["error"]["message"]
    assert limit in error["error"]["message"]


def _run(serve: Serve, cases: dict[str, tuple[Any, bool, str]], **limits: int) -> None:
    steps = {marker.encode(): step for marker, (step, _, _) in cases.items()}
    with ScriptedUpstream(by_marker(steps)) as upstream:
        # a token sharing no word with the error messages (the redaction hides fragments)
        server = serve(base_url=upstream.url, limits=limits, env={"TPX_OAUTH_TOKEN": TOKEN})
        for stream in (False, True, False):  # warm: the steady state's allocations
            assert _post(server, "fine", stream).status_code == 200
        for marker, (_, stream, limit) in cases.items():
            reply, peak, kept = _measure(server, marker, stream)
            _bad_gateway(reply, limit)
            assert peak < PEAK_BUDGET, f"{marker}: the peak grew by {peak / MB:.1f} MiB"
            assert kept < KEPT_BUDGET, f"{marker}: {kept / MB:.1f} MiB kept afterwards"
        fine = _post(server, "fine", True)  # and the gateway still serves
        assert fine.status_code == 200
        assert "hello" in fine.text


BODY = "limits.max_upstream_body"
STREAM = "limits.max_upstream_stream"


def test_small_hostile_replies_are_502s_within_the_memory_budget(serve: Serve) -> None:
    """64 MiB of gzip (64 KB sent), a 40 MiB body, a 24 MiB gzip stream (limit 8 MiB)."""
    cases = {
        "BOMB-PLAIN": (compressed(gzip_completion(64 * MB)), False, BODY),
        "HUGE-PLAIN": (huge_completion(40 * MB), False, BODY),
        "SSE-BOMB": (compressed(gzip_bomb(24 * MB, COMMENTS), SSE_TYPE), True, STREAM),
    }
    _run(serve, cases, max_upstream_stream=8 * MB)


@pytest.mark.redteam
def test_heavy_hostile_replies_are_502s_within_the_memory_budget(serve: Serve) -> None:
    """1 MB of gzip inflating to 1 GiB, a 300 MB body, 1 GiB streams; default limits."""
    bomb = compressed(gzip_completion(1024 * MB))
    cases = {
        "BOMB-PLAIN": (bomb, False, BODY),
        "BOMB-STREAMED": (bomb, True, ""),  # a JSON reply to a stream: refused unread
        "HUGE-PLAIN": (huge_completion(300 * MB), False, BODY),
        "SSE-BOMB": (compressed(gzip_bomb(1024 * MB, COMMENTS), SSE_TYPE), True, STREAM),
        "SSE-HUGE": (huge(300 * MB, SSE_TYPE, COMMENTS), True, STREAM),
    }
    _run(serve, cases)
