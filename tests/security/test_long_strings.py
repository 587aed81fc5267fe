"""A request made of one huge string (a 30 MB text, a 30 MB model name) never holds the
event loop: its body is parsed in short steps (:mod:`tpx.gateway.longjson`), so a
concurrent ``GET /healthz`` is answered meanwhile (docs/limits.md).

The fast tests check the parse path itself (no orjson call is given more than a slice of
the body); the ``redteam`` one sends such bodies to a real ``tpx serve`` and measures the
``/healthz`` latencies meanwhile (``make redteam`` prints them).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from typing import Any

import httpx2
import orjson
import pytest

from tests.security.conftest import MB, Figures, Serve, Server, local_gateway, mb
from tests.security.test_client_bounds import AUTH
from tpx.gateway import longjson


def _text(size: int) -> dict[str, Any]:
    words = "word " * (size // 5)
    return {"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": words}]}


def _model(size: int) -> dict[str, Any]:
    return {"model": "m" * size, "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]}


LONG: dict[str, Callable[[int], dict[str, Any]]] = {
    "a long text": _text,
    "a long model name": _model,
}


@pytest.mark.parametrize("shape", list(LONG))
def test_a_long_string_is_parsed_a_slice_at_a_time(
    monkeypatch: pytest.MonkeyPatch, shape: str
) -> None:
    """Through the gateway (in this process): the body of 8 MB is parsed by orjson calls
    of at most a slice each (plus the little rest of the body), and the turn is answered
    as for any body."""
    sizes: list[int] = []
    real = longjson._parse

    def recording(data: bytes) -> Any:
        sizes.append(len(data))
        return real(data)

    monkeypatch.setattr(longjson, "_parse", recording)
    body = orjson.dumps(LONG[shape](8 * MB))
    with local_gateway() as (url, _), httpx2.Client(base_url=url, timeout=60) as client:
        response = client.post("/v1/messages", headers=AUTH, content=body)
    assert response.status_code == 200, response.text
    assert response.json()["type"] == "message"
    assert sizes, "the large body was not parsed by longjson"
    assert max(sizes) <= longjson.SLICE + 2
    assert sum(sizes) >= len(body) - 1024, "each byte of the body went through a slice"


def _poll_while(server: Server, busy: threading.Thread) -> list[float]:
    """``GET /healthz`` latencies (seconds), one every 5 ms while *busy* runs."""
    latencies: list[float] = []
    with httpx2.Client(base_url=server.url, timeout=30) as client:
        while busy.is_alive():
            started = time.monotonic()
            assert client.get("/healthz").status_code == 200
            latencies.append(time.monotonic() - started)
            time.sleep(0.005)
    return latencies


@pytest.mark.redteam
@pytest.mark.parametrize("shape", list(LONG))
def test_a_30_mb_string_leaves_the_event_loop_free(
    serve: Serve, figures: Figures, shape: str
) -> None:
    """``/v1/messages`` with 30 MB in one string: ``/healthz`` answers within 100 ms all
    along (on a quiet machine: the load average is printed with the figures). The upstream
    model is the gateway's own (``TPX_MODEL``): the fake upstream echoes the model it is
    asked for, and a 30 MB reply is the upstream's body, bounded by
    ``limits.max_upstream_body``, not the client's."""
    server = serve(env={"TPX_MODEL": "gpt-test"})
    body = orjson.dumps(LONG[shape](30 * MB))
    outcome: list[tuple[int, float]] = []

    def post() -> None:
        started = time.monotonic()
        response = httpx2.post(
            server.url + "/v1/messages", content=body, headers=server.headers(), timeout=300
        )
        outcome.append((response.status_code, time.monotonic() - started))

    busy = threading.Thread(target=post)
    busy.start()
    latencies = _poll_while(server, busy)
    busy.join()
    ((status, seconds),) = outcome
    worst = max(latencies)
    ordered = sorted(latencies)
    stalled = sum(t for t in latencies if t > 0.1)
    figures(
        f"2 {shape}",
        f"/v1/messages ({mb(len(body))}): status, seconds",
        f"{status}, {seconds:.2f} s",
    )
    figures(
        f"2 {shape}",
        f"/healthz meanwhile: worst, median of {len(latencies)} (load {os.getloadavg()[0]:.1f})",
        f"{worst * 1e3:.1f} ms, {ordered[len(ordered) // 2] * 1e3:.1f} ms",
    )
    figures(
        f"2 {shape}",
        "/healthz meanwhile: time in answers > 100 ms",
        f"{stalled * 1e3:.0f} ms of {seconds * 1e3:.0f} ms",
    )
    assert status == 200
    assert len(latencies) >= 5, "the request was too quick to measure anything"
    # a quiet machine answers every /healthz in < 100 ms (docs/limits.md); a loaded one adds
    # scheduling pauses of its own (the load average is printed with the figures)
    assert worst < 0.25
    assert stalled < 0.25 * seconds
