"""``make load``: >= 1,000 concurrent conversations through one ``tpx serve`` (1 and 2 workers).

Phase 1 (tool loops): N conversations at once with the official ``AsyncAnthropic`` client, each
with ``turns`` tool turns of 1, 2, 3 parallel ``echo`` calls and a final text, streaming and
non-streaming mixed within every conversation (turn parity), every tenth conversation with one
upstream 529 on its first tool-result turn (the SDK's own retry must succeed). Checked:

- none lost: every conversation ends with its own final text;
- none cross-paired: every tool_use a client receives names its own conversation and turn, and
  the fake upstream's ledger (tests/e2e/fake_openai.py) confirms that each request's history
  echoed exactly the tool-call ids the upstream emitted for that conversation, with each
  result's content answering its own call; no violation anywhere.

Open streams (run first, on the fresh process): M streaming requests whose upstream holds the
stream after its first chunk until all M are open at once (``[hold:gate]``, then
``POST /_release``); the gateway's resident memory (main process plus workers) at the peak minus
before, divided by M, is reported as memory per open stream.

Bounded: fixed counts, every phase under ``anyio.fail_after``; loopback only.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import anyio
import httpx2
import orjson
import pytest

from tests.e2e.procs import (
    GATEWAY_KEY,
    Proc,
    cpu_seconds,
    fake_upstream,
    gateway,
    ledger,
    rss_bytes,
)

pytestmark = pytest.mark.e2e

CONVERSATIONS = int(os.environ.get("TPX_LOAD_CONVERSATIONS", "1000"))
OPEN_STREAMS = int(os.environ.get("TPX_LOAD_STREAMS", "1000"))
TURNS = 3
WARMUP = 20
TOOLS: Any = [
    {
        "name": "echo",
        "description": "echo the arguments",
        "input_schema": {
            "type": "object",
            "properties": {"conv": {"type": "string"}, "turn": {"type": "integer"}},
        },
    }
]
# The gateway's default bound on concurrent upstream requests is below the load; lift it so all
# conversations really are in flight at once. On a shared 2-core machine a thousand connects can
# take longer than the default 10 s connect timeout: this test is about loss and pairing, so the
# timeout is raised rather than reported as loss.
CONFIG = "[limits]\nmax_upstream = 4096\nconnect_timeout = 120.0\n"
RAMP_SECONDS = 2.0


@pytest.fixture(params=[1, 2], ids=["workers1", "workers2"])
def stack(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Proc, Proc]]:
    config = tmp_path / "gateway.toml"
    config.write_text(CONFIG)
    with (
        fake_upstream(tmp_path, "load") as up,
        gateway(tmp_path, up, workers=request.param, extra=["--config", str(config)]) as gw,
    ):
        yield up, gw


def _http() -> httpx2.AsyncClient:
    limits = httpx2.Limits(max_connections=4000, max_keepalive_connections=4000)
    return httpx2.AsyncClient(limits=limits, timeout=httpx2.Timeout(120.0, connect=30.0))


async def _conversation(client: anthropic.AsyncAnthropic, n: int, problems: list[str]) -> str:
    cid = f"c{n}"
    tags = f"[conv:{cid}] [turns:{TURNS}]" + (" [fail-turn:1]" if n % 10 == 0 else "")
    messages: list[Any] = [{"role": "user", "content": f"load {tags}"}]
    for turn in range(TURNS + 2):
        args: dict[str, Any] = {
            "model": "claude-load",
            "max_tokens": 1024,
            "messages": messages,
            "tools": TOOLS,
        }
        if (n + turn) % 2 == 0:
            async with client.messages.stream(**args) as stream:
                reply = await stream.get_final_message()
        else:
            reply = await client.messages.create(**args)
        uses = [b for b in reply.content if b.type == "tool_use"]
        if not uses:
            return "".join(b.text for b in reply.content if b.type == "text")
        expected = [{"conv": cid, "turn": turn, "i": i} for i in range(1 + turn % 3)]
        if [u.input for u in uses] != expected or reply.stop_reason != "tool_use":
            problems.append(f"{cid} turn {turn}: got {[u.input for u in uses]}")
        messages.append({"role": "assistant", "content": [b.model_dump() for b in reply.content]})
        messages.append(
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": u.id,
                        "content": "result:" + orjson.dumps(u.input).decode(),
                    }
                    for u in uses
                ],
            }
        )
    problems.append(f"{cid}: no final text after {TURNS + 2} turns")
    return ""


async def _phase_conversations(gw: Proc) -> tuple[dict[int, str], list[str], float]:
    problems: list[str] = []
    finals: dict[int, str] = {}
    async with _http() as http:
        client = anthropic.AsyncAnthropic(
            api_key=GATEWAY_KEY, base_url=gw.url, http_client=http, max_retries=4
        )

        async def one(n: int) -> None:
            try:
                finals[n] = await _conversation(client, n, problems)
            except anthropic.APIError as exc:
                problems.append(f"c{n}: {type(exc).__name__}: {exc}")

        start = time.monotonic()
        with anyio.fail_after(600):
            async with anyio.create_task_group() as tg:
                for n in range(CONVERSATIONS):
                    tg.start_soon(one, n)
                    await anyio.sleep(RAMP_SECONDS / CONVERSATIONS)
        return finals, problems, time.monotonic() - start


def _tool_inputs(sse: bytes) -> list[Any] | None:
    """The tool_use inputs of a complete Messages event stream (None if it did not stop)."""
    parts: dict[int, str] = {}
    stopped = False
    for line in sse.splitlines():
        if not line.startswith(b"data:"):
            continue
        event = orjson.loads(line[5:])
        if event["type"] == "content_block_start" and event["content_block"]["type"] == "tool_use":
            parts[event["index"]] = ""
        elif (
            event["type"] == "content_block_delta" and event["delta"]["type"] == "input_json_delta"
        ):
            parts[event["index"]] += event["delta"]["partial_json"]
        elif event["type"] == "message_stop":
            stopped = True
    return [orjson.loads(parts[i]) for i in sorted(parts)] if stopped else None


async def _phase_open_streams(up: Proc, gw: Proc) -> tuple[int, int, int, list[str]]:
    """(baseline rss, peak rss, streams seen open together, problems)."""
    pid = gw.popen.pid
    problems: list[str] = []
    opened = 0
    baseline = peak = 0
    max_open = 0
    done = anyio.Event()
    body = {
        "model": "claude-load",
        "max_tokens": 1024,
        "stream": True,
        "tools": TOOLS,
        "messages": [],
    }
    headers = {"x-api-key": GATEWAY_KEY, "anthropic-version": "2023-06-01"}

    async def one(n: int) -> None:
        nonlocal opened
        hold = "gate" if n < OPEN_STREAMS else "0"
        text = f"hold [conv:s{n}] [turns:1] [hold:{hold}]"
        payload = {**body, "messages": [{"role": "user", "content": text}]}
        async with http.stream("POST", gw.url + "/v1/messages", json=payload, headers=headers) as r:
            if r.status_code != 200:
                problems.append(f"s{n}: status {r.status_code}")
                return
            opened += 1
            data = b"".join([chunk async for chunk in r.aiter_bytes()])
            opened -= 1
        if _tool_inputs(data) != [{"conv": f"s{n}", "turn": 0, "i": 0}]:
            problems.append(f"s{n}: stream incomplete or not its own: {data[-300:]!r}")

    async def sample() -> None:
        nonlocal peak, max_open
        released = False
        while not done.is_set():
            peak = max(peak, rss_bytes(pid))
            max_open = max(max_open, opened)
            if not released and (opened == OPEN_STREAMS or problems):
                peak = max(peak, rss_bytes(pid))
                await http.post(up.url + "/_release")
                released = True
            await anyio.sleep(0.2)

    async with _http() as http:
        with anyio.fail_after(300):
            async with anyio.create_task_group() as warm:
                for n in range(WARMUP):
                    warm.start_soon(one, OPEN_STREAMS + n)
            baseline = peak = rss_bytes(pid)
            async with anyio.create_task_group() as outer:
                outer.start_soon(sample)
                async with anyio.create_task_group() as tg:
                    for n in range(OPEN_STREAMS):
                        tg.start_soon(one, n)
                done.set()
    return baseline, peak, max_open, problems


def test_load_conversations_none_lost_none_cross_paired(stack: tuple[Proc, Proc]) -> None:
    up, gw = stack
    client_cpu = time.process_time()
    # Open streams first, on a fresh process (memory freed by phase 1 would be reused and hide
    # the cost); the phase starts with a warm-up of a few streams before the baseline.
    baseline, peak, max_open, stream_problems = anyio.run(_phase_open_streams, up, gw)
    before = ledger(up)["requests"]
    finals, problems, seconds = anyio.run(_phase_conversations, gw)
    snap = ledger(up)
    requests_phase1 = snap["requests"] - before
    workers = gw.name.rsplit(" ", 1)[-1]
    cpu = {p.name: round(cpu_seconds(p.popen.pid), 1) for p in (gw, up)}
    print(f"\nCPU seconds used: {cpu} (client: {time.process_time() - client_cpu:.1f})")
    per_stream = (peak - baseline) / max(max_open, 1)
    print(
        f"\nload ({workers} worker(s)): {CONVERSATIONS} conversations, {requests_phase1} upstream "
        f"requests in {seconds:.1f} s ({requests_phase1 / seconds:.0f} req/s end to end); "
        f"open streams: {max_open} at once, gateway RSS {baseline / 2**20:.1f} -> "
        f"{peak / 2**20:.1f} MiB, {per_stream / 1024:.1f} KiB per open stream"
    )
    assert problems == [], problems[:20]
    assert sorted(finals) == list(range(CONVERSATIONS))
    assert all(finals[n] == f"final c{n}" for n in finals), [
        (n, t) for n, t in finals.items() if t != f"final c{n}"
    ][:20]
    assert snap["violations"] == [], snap["violations"][:20]
    convs = snap["conversations"]
    assert all(convs[f"c{n}"]["final"] for n in range(CONVERSATIONS))
    assert all(convs[f"c{n}"]["max_turn"] == TURNS for n in range(CONVERSATIONS))
    injected = [n for n in range(CONVERSATIONS) if n % 10 == 0]
    assert all(convs[f"c{n}"]["faults"] == 1 for n in injected)
    # every conversation: TURNS + 1 requests, plus the retried one where a fault was injected
    assert requests_phase1 == CONVERSATIONS * (TURNS + 1) + len(injected)
    assert stream_problems == [], stream_problems[:20]
    assert ledger(up)["violations"] == []
    assert max_open == OPEN_STREAMS, f"only {max_open} streams were open at once"
