"""A hostile upstream cannot grow a real ``tpx serve``'s memory: gzip bombs, huge bodies and
endless streams get the client a Messages-shaped 502 while the gateway's resident set grows
by less than :data:`PEAK_BUDGET` at its peak and is back near where it was afterwards.

The peak is the kernel's high-water mark (``VmHWM``, reset through ``/proc/PID/clear_refs``
before each case); ``python -m pytest tests/security/test_upstream_bounds.py -s`` prints
every case's figures. The small cases run in ``make test``; the heavy ones (1 MB of gzip
inflating to 1 GiB, a 300 MB body, a 1 GiB stream) in ``make redteam``.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx2
import pytest

from tests.e2e.procs import Proc, _spawn, _wait, base_env, free_port, rss_bytes, tpx_executable
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

MiB = 1 << 20
#: How much a hostile reply may raise the gateway's resident set at its peak.
PEAK_BUDGET = 50 * MiB
#: How much of it may still be held once the reply is over.
KEPT_BUDGET = 20 * MiB
KEY = "gw-key-security-0001"
TOKEN = "tok-security-9f8e7d6c"


def _status(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no {field} in /proc/{pid}/status")


@contextmanager
def _gateway(tmp_path: Path, upstream: ScriptedUpstream, limits: str = "") -> Iterator[Proc]:
    """``tpx serve`` (one process) in front of *upstream*; *limits*: a ``[limits]`` table."""
    config = tmp_path / "tpx.toml"
    config.write_text(f"[limits]\n{limits}\n")
    port = free_port()
    env = base_env()
    env.update({"TPX_BASE_URL": upstream.url, "TPX_OAUTH_TOKEN": TOKEN, "TPX_GATEWAY_KEY": KEY})
    cmd = [str(tpx_executable()), "serve", "--host", "127.0.0.1", "--port", str(port)]
    cmd += ["--config", str(config)]
    popen, log = _spawn("gateway-bounds", cmd, env, tmp_path)
    proc = Proc("tpx serve", popen, log, port)

    def ready() -> bool:
        try:
            return httpx2.get(proc.url + "/healthz", timeout=1).status_code == 200
        except httpx2.TransportError:
            return False

    try:
        _wait(proc, ready, 60)
        yield proc
    finally:
        proc.stop()


def _turn(marker: str, stream: bool) -> dict[str, Any]:
    return {
        "model": "claude-x",
        "max_tokens": 64,
        "stream": stream,
        "messages": [{"role": "user", "content": marker}],
    }


def _post(proc: Proc, marker: str, stream: bool) -> httpx2.Response:
    with httpx2.Client(base_url=proc.url, timeout=120) as client:
        return client.post("/v1/messages", json=_turn(marker, stream), headers={"x-api-key": KEY})


def _measure(proc: Proc, marker: str, stream: bool) -> tuple[httpx2.Response, int, int]:
    """The reply to a hostile turn; the peak and the kept growth of the gateway's RSS."""
    pid = proc.popen.pid
    Path(f"/proc/{pid}/clear_refs").write_text("5")  # VmHWM := VmRSS
    before = rss_bytes(pid)
    reply = _post(proc, marker, stream)
    peak = _status(pid, "VmHWM") - before
    time.sleep(0.25)
    kept = rss_bytes(pid) - before
    print(
        f"{marker} stream={stream}: {reply.status_code}, peak +{peak / MiB:.1f} MiB, "
        f"kept +{kept / MiB:.1f} MiB"
    )
    return reply, peak, kept


def _bad_gateway(reply: httpx2.Response, limit: str) -> None:
    assert reply.status_code == 502, reply.text[:300]
    if reply.headers["content-type"].startswith("text/event-stream"):  # an error event
        assert "event: error" in reply.text
        assert limit in reply.text
        return
    error = reply.json()
    assert error["type"] == "error"
    assert error["error"]["type"] == "api_error"
    assert "MODEL_PROTOCOL" in error["error"]["message"]
    assert limit in error["error"]["message"]


def _run(tmp_path: Path, cases: dict[str, tuple[Any, bool, str]], limits: str = "") -> None:
    steps = {marker.encode(): step for marker, (step, _, _) in cases.items()}
    with ScriptedUpstream(by_marker(steps)) as upstream, _gateway(tmp_path, upstream, limits) as p:
        for stream in (False, True, False):  # warm: the steady state's allocations
            assert _post(p, "fine", stream).status_code == 200
        for marker, (_, stream, limit) in cases.items():
            reply, peak, kept = _measure(p, marker, stream)
            _bad_gateway(reply, limit)
            assert peak < PEAK_BUDGET, f"{marker}: the peak grew by {peak / MiB:.1f} MiB"
            assert kept < KEPT_BUDGET, f"{marker}: {kept / MiB:.1f} MiB kept afterwards"
        fine = _post(p, "fine", True)  # and the gateway still serves
        assert fine.status_code == 200
        assert "hello" in fine.text


BODY = "limits.max_upstream_body"
STREAM = "limits.max_upstream_stream"


def test_small_hostile_replies_are_502s_within_the_memory_budget(tmp_path: Path) -> None:
    """64 MiB of gzip (64 KB sent), a 40 MiB body, a 24 MiB gzip stream (limit 8 MiB)."""
    cases = {
        "BOMB-PLAIN": (compressed(gzip_completion(64 * MiB)), False, BODY),
        "HUGE-PLAIN": (huge_completion(40 * MiB), False, BODY),
        "SSE-BOMB": (compressed(gzip_bomb(24 * MiB, COMMENTS), SSE_TYPE), True, STREAM),
    }
    _run(tmp_path, cases, limits=f"max_upstream_stream = {8 * MiB}")


@pytest.mark.slow
@pytest.mark.redteam
def test_heavy_hostile_replies_are_502s_within_the_memory_budget(tmp_path: Path) -> None:
    """1 MB of gzip inflating to 1 GiB, a 300 MB body, 1 GiB streams; default limits."""
    bomb = compressed(gzip_completion(1024 * MiB))
    cases = {
        "BOMB-PLAIN": (bomb, False, BODY),
        "BOMB-STREAMED": (bomb, True, ""),  # a JSON reply to a stream: refused unread
        "HUGE-PLAIN": (huge_completion(300 * MiB), False, BODY),
        "SSE-BOMB": (compressed(gzip_bomb(1024 * MiB, COMMENTS), SSE_TYPE), True, STREAM),
        "SSE-HUGE": (huge(300 * MiB, SSE_TYPE, COMMENTS), True, STREAM),
    }
    _run(tmp_path, cases)
