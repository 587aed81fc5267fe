"""Cost of ``tpx serve --monitor``: the gateway core per request, monitor off vs on.

Run: ``pytest benchmarks -p no:xdist --benchmark-only`` (``make bench``).

The core (:class:`tpx.gateway.core.Gateway`, no HTTP) answers the same two requests of one
conversation (TPX: a tool turn, then the turn carrying its tool_results; the upstream's
reply bytes given directly) with and without the monitor. ``test_monitor_ratio`` runs the
two interleaved in this process and prints the monitor's added time per request, and its
share of the core's own. The core is only part of what the gateway adds over calling the
upstream directly (HTTP parsing, uvicorn, the upstream client: see ``make
bench-gateway``); the target is the monitor under 5% of the gateway's added latency, so
under 50 us per request against a 1 ms gateway. Times are the thread's CPU time
(``time.thread_time``): the core is sans-I/O and single-threaded, so that is its latency,
without the time other processes take the CPU from it on a shared machine.
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import orjson
import pytest

from benchmarks.report import markdown_table, write_section
from tpx.gateway.core import Gateway, Request, Turn
from tpx.gateway.settings import Credential, Settings
from tpx.transport.exchange import Provider

_HEADERS = {"content-type": "application/json"}


def _reply(calls: int) -> bytes:
    message: dict[str, Any] = {"role": "assistant", "content": "ok"}
    if calls:
        message["tool_calls"] = [
            {"id": f"call_{i}", "type": "function", "function": {"name": "ls", "arguments": "{}"}}
            for i in range(calls)
        ]
    return orjson.dumps(
        {
            "id": "c",
            "object": "chat.completion",
            "created": 0,
            "model": "m",
            "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
        }
    )


def _gateway(monitor: bool) -> Gateway:
    settings = Settings(
        provider=Provider.TPX,
        base_url="http://upstream.invalid/v1",
        credential=Credential("tok-bench"),
        secret=b"bench-secret",
        monitor=monitor,
    )
    return Gateway(settings)


def _conversation(gateway: Gateway) -> Callable[[], None]:
    first: dict[str, Any] = {
        "model": "claude-x",
        "max_tokens": 64,
        "messages": [{"role": "user", "content": "list the files"}],
    }
    with_calls, done = _reply(2), _reply(0)

    def turn(body: dict[str, Any], reply: bytes) -> dict[str, Any]:
        result = gateway.handle(Request("POST", "/v1/messages", "", {}, orjson.dumps(body)))
        assert isinstance(result, Turn)
        response = result.reply(200, _HEADERS, reply)
        result.close()
        assert response.status == 200
        message: dict[str, Any] = orjson.loads(response.body)
        return message

    def once() -> None:
        message = turn(first, with_calls)
        ids = [b["id"] for b in message["content"] if b["type"] == "tool_use"]
        answer = {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": i, "content": "a"} for i in ids],
        }
        messages = [*first["messages"], {"role": "assistant", "content": message["content"]}]
        turn({**first, "messages": [*messages, answer]}, done)

    return once


@pytest.mark.parametrize("monitor", [False, True], ids=["off", "on"])
def test_core_conversation(benchmark: Any, monitor: bool) -> None:
    gateway = _gateway(monitor)
    benchmark(_conversation(gateway))
    if monitor:
        assert gateway.monitor is not None
        assert gateway.monitor.monitor.violations == 0
        assert gateway.monitor.monitor.conversations() == 0


def _interleaved(rounds: int) -> dict[str, float]:
    """Median microseconds per request, off and on, measured round by round in turn."""
    off, on = _conversation(_gateway(False)), _conversation(_gateway(True))
    for f in (off, on):
        for _ in range(50):
            f()
    spent: dict[str, list[float]] = {"off": [], "on": []}
    for _ in range(rounds):
        for name, f in (("off", off), ("on", on)):
            start = time.thread_time()
            f()
            spent[name].append((time.thread_time() - start) * 1e6 / 2)
    return {k: statistics.median(v) for k, v in spent.items()}


def test_monitor_ratio(benchmark: Any) -> None:
    """Interleaved off/on rounds in this process; prints the monitor's share (medians)."""
    per = benchmark.pedantic(_interleaved, args=(400,), rounds=1, iterations=1)
    share = (per["on"] - per["off"]) / per["off"]
    added = per["on"] - per["off"]
    print(
        f"\nmonitor: core {per['off']:.0f} us/request off, {per['on']:.0f} us on: "
        f"+{added:.0f} us per request ({share:+.1%} of the core alone; "
        f"{added / 1000:.1%} of a 1 ms gateway, {added / 2000:.1%} of a 2 ms one)",
        file=sys.stderr,
    )
    benchmark.extra_info.update(per)
    table = markdown_table(
        (
            "core, monitor off",
            "core, monitor on",
            "monitor adds",
            "of the core",
            "of a 1 ms gateway",
        ),
        [
            (
                f"{per['off']:.0f} us",
                f"{per['on']:.0f} us",
                f"**+{added:.0f} us**",
                f"{share:+.1%}",
                f"{added / 1000:.1%}",
            )
        ],
    )
    write_section(
        "monitor",
        ".venv/bin/python -m pytest benchmarks/test_monitor_bench.py -p no:xdist "
        "--benchmark-only -k ratio",
        table,
        notes=[
            "Medians of 400 interleaved rounds, thread CPU time per request (two requests each)."
        ],
    )
    assert per["on"] > 0
