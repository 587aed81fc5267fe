"""``make load-cluster``: three ``tpx serve`` replicas sharing their secrets behind HAProxy
(round robin on every request: each turn of a conversation may land on any replica), the
1,000-conversation load of ``make load``, and one replica killed (SIGKILL) in the middle.

Checked: none lost (every conversation ends with its own final text), none cross-paired (the
client's tool_use inputs and the upstream ledger, as in ``make load``); the turns that failed
are the killed replica's (its in-flight requests: a 502 from HAProxy, or a stream cut short)
and their retries -- the same body again, as Claude Code retries -- succeed on the others.
Printed, and written into docs/upstreams.md and the README (:mod:`tests.e2e.cluster_figures`)
when every check holds: the run's figures (exchanges per replica, failed attempts, seconds).

Loopback only; fixed counts; every phase under ``anyio.fail_after``.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import anthropic
import anyio
import httpx2
import orjson
import pytest

from tests.e2e import cluster_figures
from tests.e2e.procs import (
    GATEWAY_KEY,
    HarnessError,
    Proc,
    fake_upstream,
    free_port,
    gateway,
    ledger,
)
from tests.e2e.test_load import CONFIG, TOOLS, TURNS, _http

pytestmark = pytest.mark.e2e

CONVERSATIONS = int(os.environ.get("TPX_LOAD_CONVERSATIONS", "1000"))
REPLICAS = 3
RAMP_SECONDS = 2.0
#: attempts of one turn at most (the first and its retries)
ATTEMPTS = 6
#: the secrets every replica shares (ids and thinking signed on one verify on the others)
SHARED = {"TPX_GATEWAY_SECRET": "cluster-id-key", "TPX_THINKING_SECRET": "cluster-thinking-key"}

HAPROXY = """
global
    maxconn 8000

defaults
    mode http
    timeout connect 5s
    timeout client 300s
    timeout server 300s
    retries 3
    option redispatch

frontend gateway
    bind 127.0.0.1:{port}
    default_backend replicas

backend replicas
    balance roundrobin
    option httpchk GET /healthz
{servers}
"""


@contextmanager
def haproxy(logdir: Path, replicas: list[Proc]) -> Iterator[Proc]:
    exe = shutil.which("haproxy") or "/usr/sbin/haproxy"
    if not Path(exe).exists():
        raise HarnessError("haproxy not found: `make load-cluster` installs Debian's package")
    port = free_port()
    servers = "\n".join(
        f"    server r{i} 127.0.0.1:{r.port} check inter 500 fall 2 rise 2"
        for i, r in enumerate(replicas)
    )
    config = logdir / "haproxy.cfg"
    config.write_text(HAPROXY.format(port=port, servers=servers))
    log = logdir / "haproxy.log"
    with log.open("wb") as out:
        popen = subprocess.Popen([exe, "-db", "-f", str(config)], stdout=out, stderr=out)
    proc = Proc("haproxy", popen, log, port)
    deadline = time.monotonic() + 30
    try:
        while True:
            if not proc.alive():
                raise HarnessError(f"haproxy exited:\n{proc.output()}")
            try:
                if httpx2.get(proc.url + "/healthz", timeout=1).status_code == 200:
                    break
            except httpx2.TransportError:
                pass
            if time.monotonic() > deadline:
                raise HarnessError(f"haproxy not ready:\n{proc.output()}")
            time.sleep(0.1)
        yield proc
    finally:
        proc.stop()


class Tally:
    def __init__(self) -> None:
        self.turns = 0  #: turns answered
        self.failed: dict[str, int] = {}  #: failed attempts by kind
        self.problems: list[str] = []

    def fail(self, kind: str) -> None:
        self.failed[kind] = self.failed.get(kind, 0) + 1


async def _turn(
    client: anthropic.AsyncAnthropic, args: dict[str, Any], stream: bool, t: Tally
) -> Any:
    """One turn, sent again (the same body) after a failure, as Claude Code does."""
    for _ in range(ATTEMPTS):
        try:
            if stream:
                async with client.messages.stream(**args) as events:
                    return await events.get_final_message()
            return await client.messages.create(**args)
        except anthropic.APIStatusError as exc:
            t.fail(str(exc.status_code))
        except anthropic.APIError as exc:  # a connection or a stream cut short
            t.fail(type(exc).__name__)
        await anyio.sleep(0.2)
    raise RuntimeError(f"no answer after {ATTEMPTS} attempts")


async def _conversation(client: anthropic.AsyncAnthropic, n: int, t: Tally) -> str:
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
        reply = await _turn(client, args, (n + turn) % 2 == 0, t)
        t.turns += 1
        uses = [b for b in reply.content if b.type == "tool_use"]
        if not uses:
            return "".join(b.text for b in reply.content if b.type == "text")
        expected = [{"conv": cid, "turn": turn, "i": i} for i in range(1 + turn % 3)]
        if [u.input for u in uses] != expected or reply.stop_reason != "tool_use":
            t.problems.append(f"{cid} turn {turn}: got {[u.input for u in uses]}")
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
    t.problems.append(f"{cid}: no final text after {TURNS + 2} turns")
    return ""


async def _run(lb: Proc, victim: Proc) -> tuple[dict[int, str], Tally, float, float]:
    tally = Tally()
    finals: dict[int, str] = {}
    killed_at = 0.0
    async with _http() as http:
        client = anthropic.AsyncAnthropic(
            api_key=GATEWAY_KEY, base_url=lb.url, http_client=http, max_retries=0
        )

        async def one(n: int) -> None:
            try:
                finals[n] = await _conversation(client, n, tally)
            except (anthropic.APIError, RuntimeError) as exc:
                tally.problems.append(f"c{n}: {type(exc).__name__}: {exc}")

        async def kill() -> None:  # a quarter of the turns in: the victim dies
            nonlocal killed_at
            while tally.turns < CONVERSATIONS:
                await anyio.sleep(0.05)
            victim.popen.send_signal(signal.SIGKILL)
            killed_at = time.monotonic() - start

        start = time.monotonic()
        with anyio.fail_after(900):
            async with anyio.create_task_group() as tg:
                tg.start_soon(kill)
                for n in range(CONVERSATIONS):
                    tg.start_soon(one, n)
                    await anyio.sleep(RAMP_SECONDS / CONVERSATIONS)
        return finals, tally, time.monotonic() - start, killed_at


def _served(replica: Proc) -> int:
    """The exchanges a replica logged (one JSON line each)."""
    return sum(
        1 for line in replica.log.read_text(errors="replace").splitlines() if '"endpoint"' in line
    )


def test_three_replicas_behind_haproxy_one_killed_none_lost_none_cross_paired(
    tmp_path: Path,
) -> None:
    config = tmp_path / "gateway.toml"
    config.write_text(CONFIG)
    with ExitStack() as stack:
        up = stack.enter_context(fake_upstream(tmp_path, "load"))
        replicas = [
            stack.enter_context(
                gateway(
                    tmp_path,
                    up,
                    extra=["--config", str(config)],
                    name=f"replica{i}",
                    env_extra=SHARED,
                )
            )
            for i in range(REPLICAS)
        ]
        lb = stack.enter_context(haproxy(tmp_path, replicas))
        victim = replicas[1]
        finals, tally, seconds, killed_at = anyio.run(_run, lb, victim)
        snap = ledger(up)
        served = [_served(r) for r in replicas]
    injected = [n for n in range(CONVERSATIONS) if n % 10 == 0]
    lost = {k: v for k, v in tally.failed.items() if k != "529"}
    print(
        f"\nload-cluster: {CONVERSATIONS} conversations, {tally.turns} turns through HAProxy to "
        f"{REPLICAS} replicas in {seconds:.1f} s; exchanges per replica {served} (replica 1 "
        f"killed at {killed_at:.1f} s); failed attempts retried: {tally.failed} "
        f"({len(injected)} injected 529s); upstream requests {snap['requests']}"
    )
    assert tally.problems == [], tally.problems[:20]
    assert sorted(finals) == list(range(CONVERSATIONS))
    assert all(finals[n] == f"final c{n}" for n in finals)
    assert snap["violations"] == [], snap["violations"][:20]
    convs = snap["conversations"]
    assert all(convs[f"c{n}"]["final"] for n in range(CONVERSATIONS))
    assert all(convs[f"c{n}"]["max_turn"] == TURNS for n in range(CONVERSATIONS))
    assert tally.failed.get("529", 0) == len(injected)
    assert not victim.alive()
    assert all(count > 0 for count in served)  # every replica served turns
    # the killed replica lost only what it had in flight: a failed attempt each, at most one
    # per conversation, every one of them answered on a retry (none lost above)
    assert sum(lost.values()) <= CONVERSATIONS, lost
    run = cluster_figures.ClusterRun(
        conversations=CONVERSATIONS,
        turns=tally.turns,
        served=tuple(served),
        victim=replicas.index(victim),
        killed_at=killed_at,
        seconds=seconds,
        failed=dict(tally.failed),
        injected=len(injected),
        upstream_requests=snap["requests"],
        lost=sum(finals.get(n) != f"final c{n}" for n in range(CONVERSATIONS)),
        cross_paired=len(snap["violations"]) + sum(": got " in p for p in tally.problems),
    )
    cluster_figures.write(run)
