"""Placed turns (``[[upstreams]]`` near a window: :mod:`tpx.gateway.context.placement`) under
``tpx serve --monitor``: a turn placed on the first upstream of its route it fits, one that
fails over to an upstream it fits (clamped there) or passes over one it does not, one refused
before the wire, streamed or not, each answers as without the monitor (no false 500) and the
monitor counts no violation; a seeded pool bug (:mod:`conformance.pool_bugs`) on a placed
turn is still stopped at its first wrong step, before it reaches an upstream.

The gateway (uvicorn) and the two fake upstreams of ``test_upstreams_tokenizer`` run on real
loopback sockets; the monitor's violations are read from ``/metrics``.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import orjson
import pytest

from conformance.failover_gateway import samples_of, violations
from conformance.pool_bugs import POOL_BUGS
from tpx.gateway.asgi import GatewayApp, create_app
from tpx.gateway.settings import load_settings

from ..conftest import GUARD, serving
from .test_upstreams_tokenizer import (
    COUNT_A,
    COUNT_B,
    ENV,
    MIN_OUTPUT,
    _config,
    _Fake,
    _post,
    _turn,
)

BUG = {bug.name: bug for bug in POOL_BUGS}


@contextlib.contextmanager
def _monitored(
    tmp_path: Path,
    a: _Fake,
    b: _Fake,
    *,
    window_a: int = 8000,
    window_b: int = 12000,
    first_byte_timeout: float = 8.0,
) -> Iterator[tuple[str, GatewayApp]]:
    """The gateway of ``test_upstreams_tokenizer`` with ``--monitor`` on."""
    with serving(a) as url_a, serving(b) as url_b:
        path = _config(tmp_path, url_a, url_b, window_a, window_b, "", 5.0)
        text = path.read_text().replace(
            "[routing]\n", f"[routing]\nfirst_byte_timeout = {first_byte_timeout}\n"
        )
        path.write_text(text)
        settings = load_settings(env=ENV, config_file=path, monitor=True)
        app = create_app(settings)
        assert app.gateway.monitor is not None
        with serving(app) as url:
            yield url, app


def _violations(url: str) -> dict[str, int]:
    """The monitor's violations by property (``/metrics``)."""
    return violations(samples_of(httpx2.get(f"{url}/metrics", timeout=GUARD).text))


def _stream(url: str, body: dict[str, Any]) -> tuple[int, bytes]:
    with httpx2.stream(
        "POST", f"{url}/v1/messages", json={**body, "stream": True}, timeout=GUARD
    ) as reply:
        return reply.status_code, reply.read()


def _stops(caplog: pytest.LogCaptureFixture) -> list[dict[str, Any]]:
    return [
        orjson.loads(r.getMessage())
        for r in caplog.records
        if r.name == "tpx.gateway" and "monitor_violation" in r.getMessage()
    ]


# -- placed turns answer as without the monitor -------------------------------------------------


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_a_turn_placed_on_the_first_upstream_it_fits(tmp_path: Path, stream: bool) -> None:
    """Route ``ba``: ``b`` is counted and too small, the turn goes to ``a``, clamped there."""
    a, b = _Fake("vllm", 1), _Fake("llama.cpp", 3)
    with _monitored(tmp_path, a, b, window_b=7000) as (url, _):
        if stream:
            status, data = _stream(url, _turn("ba-model"))
            assert b"message_stop" in data
            assert b"event: error" not in data
        else:
            reply = _post(url, "/v1/messages", _turn("ba-model"))
            status = reply.status_code
            assert reply.json()["type"] == "message", reply.text
        violations = _violations(url)
    assert status == 200
    assert violations == {}
    assert b.sent == []
    assert [s["max_tokens"] for s in a.sent] == [8000 - COUNT_A]


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_a_placed_turn_fails_over_to_an_upstream_it_fits(tmp_path: Path, stream: bool) -> None:
    """``a`` answers 503: the turn moves to ``b``, counted and clamped for b's window."""
    a, b = _Fake("vllm", 1, status=503), _Fake("llama.cpp", 3)
    with _monitored(tmp_path, a, b) as (url, _):
        if stream:
            status, data = _stream(url, _turn("ab-model"))
            assert b"message_stop" in data
        else:
            status = _post(url, "/v1/messages", _turn("ab-model")).status_code
        violations = _violations(url)
    assert status == 200
    assert violations == {}
    assert [s["max_tokens"] for s in b.sent] == [12000 - COUNT_B]


def test_a_placed_turn_passes_over_an_upstream_it_does_not_fit(tmp_path: Path) -> None:
    """``a`` answers 503 and the turn does not fit ``b``: never sent there, the client gets
    a's 503 (not the monitor's 500)."""
    a, b = _Fake("vllm", 1, status=503), _Fake("llama.cpp", 3)
    with _monitored(tmp_path, a, b, window_b=7000) as (url, _):
        reply = _post(url, "/v1/messages", _turn("ab-model"))
        violations = _violations(url)
    assert reply.status_code == 503, reply.text
    assert violations == {}
    assert (len(a.sent), b.sent, b.tokenized) == (1, [], 1)


def test_a_turn_no_upstream_fits_is_refused_before_the_wire(tmp_path: Path) -> None:
    a, b = _Fake("vllm", 1), _Fake("llama.cpp", 3)
    with _monitored(tmp_path, a, b, window_a=3000, window_b=7000) as (url, _):
        reply = _post(url, "/v1/messages", _turn("ab-model"))
        violations = _violations(url)
    assert reply.status_code == 400
    message = f"prompt is too long: {COUNT_B} tokens > {7000 - MIN_OUTPUT} maximum"
    assert reply.json()["error"]["message"] == message
    assert violations == {}
    assert a.sent == b.sent == []


# -- a seeded bug on a placed turn is still stopped -------------------------------------------


def _lost_cooldown(url: str, a: _Fake, b: _Fake) -> tuple[int, str]:
    """Two turns of route ``ab``: ``a`` answers 503 to the first, which moves to ``b``; ``a``
    cools down, so the second is placed on ``b`` (the bug forgets the cooldown: on ``a``)."""
    first = _post(url, "/v1/messages", _turn("ab-model"))
    assert first.status_code == 200, first.text
    second = _post(url, "/v1/messages", _turn("ab-model"))
    return second.status_code, second.text


def _timeout_fails_over(url: str, a: _Fake, b: _Fake) -> tuple[int, str]:
    """A streamed turn of route ``ab``: ``a`` holds it past ``first_byte_timeout``, which
    ends the exchange (the bug fails over to ``b``)."""
    status, data = _stream(url, _turn("ab-model"))
    a.release.set()
    return status, data.decode()


#: each bug's scenario: what ``a`` does, the gateway's first_byte_timeout, the turns, the
#: last turn's status without the bug, and the requests ``a`` and ``b`` get without the bug
#: and with it (its stopped step reaches no upstream)
SCENARIOS: dict[str, tuple[dict[str, Any], float, Any, int, tuple[int, int], tuple[int, int]]] = {
    "lost_cooldown": ({"status": 503}, 8.0, _lost_cooldown, 200, (1, 2), (1, 1)),
    "timeout_fails_over": ({"hold": True}, 0.3, _timeout_fails_over, 504, (1, 0), (1, 0)),
}


@pytest.mark.parametrize("name", sorted(SCENARIOS))
@pytest.mark.parametrize("seeded", [False, True], ids=["real", "bug"])
def test_a_seeded_bug_on_a_placed_turn_is_stopped(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, name: str, seeded: bool
) -> None:
    """Without the bug the scenario passes with no violation; with it, the monitor stops
    the bug's step (its property and action in the log line, in ``/metrics`` and in the
    client's error) before it reaches an upstream."""
    behaviour, timeout, run, status, sent, stopped = SCENARIOS[name]
    bug = BUG[name]
    caplog.set_level(logging.WARNING, logger="tpx.gateway")
    a, b = _Fake("vllm", 1, **behaviour), _Fake("llama.cpp", 3)
    active = bug.active() if seeded else contextlib.nullcontext()
    with active, _monitored(tmp_path, a, b, first_byte_timeout=timeout) as (url, _):
        got, message = run(url, a, b)
        violations = _violations(url)
    seen = (len(a.sent), len(b.sent))
    if not seeded:
        assert (got, violations, _stops(caplog)) == (status, {}, [])
        assert seen == sent
        return
    (stop,) = _stops(caplog)
    assert (stop["monitor_violation"], stop["action"]) == (bug.property, bug.action)
    assert violations == {bug.property: 1.0}
    assert f"({bug.property}, {bug.action})" in message  # the client got the monitor's error
    assert got in (200, 500)  # 200: an error event after the stream began
    assert seen == stopped  # the stopped step reached no upstream
