"""Added latency of ``tpx serve`` (and of LiteLLM's proxy) over calling the upstream directly.

    python -m benchmarks.gateway_latency [--rounds 300] [--no-litellm] [--no-floor]
                                         [--baseline REV [--repeat N]] [--monitor]
                                         (make bench-gateway)

One run, side by side, all on loopback, against the same scripted fake OpenAI upstream
(tests/e2e/fake_openai.py):

- ``direct``: the Chat Completions request (tpx's own translation of the body below) posted to
  the fake upstream;
- ``tpx``: the Messages request posted to ``tpx serve`` (1 worker) in front of it;
- ``floor``: the same Messages request posted to a pass-through on ``tpx serve``'s own HTTP
  stack that does no work (benchmarks/passthrough.py): the part of the added latency that
  the two HTTP hops cost by themselves, whatever the gateway does;
- ``litellm``: the same Messages request posted to LiteLLM's proxy ``/v1/messages`` (its
  ``openai/`` provider pointed at the same upstream), installed by this script into its own
  venv (.cache/litellm-venv, pinned) so none of its dependencies touch tpx's.

- ``tpx-cold``: ``tpx serve`` with ``[limits] tail_cache = 0``: every body parsed in full, as
  on a session's first turns (tpx.gateway.bodies).
- ``baseline`` (``--baseline REV``, ``make bench-gateway BASELINE=REV``): ``tpx serve`` as it
  is at the git revision REV (checked out into a temporary worktree under .cache/, run with
  this venv), in the same run: the ratio of the two added latencies (and CPU per request)
  says whether the tree is slower than REV. Such a run writes those ratios (docs/performance.md,
  section ``baseline``), not the gateway's table.
  ``--repeat N`` measures N times in the one run (the same servers) and prints each
  repetition's ratios, then their median and range: how far one ratio can be trusted.
- ``tpx-monitor`` (``--monitor``): a second ``tpx serve``, with ``--monitor`` (every spec
  step of every request checked live), in front of the same upstream, in the same run: the
  monitor's share of the gateway's added latency, (added p50 with the monitor - added p50
  without) / added p50 without, each kind, and of its CPU per request. Such a run writes
  that comparison (docs/performance.md, section ``monitor-gateway``) instead of the
  gateway's own table.

The request is the first turn Claude Code 2.1.197 really sent (tests/fixtures/clients/
claude-code/2.1.197/bash/002-post-v1-messages.json: 24 tools, about 75 KB) as it was sent
(``context_management``, ``output_config``, ``thinking``, the ``role: "system"`` message
included; the gateway translates it under its default ``generic`` profile), its first user
text ending with the round's number: each round's messages differ, as a session's turns do,
and what follows them (system, tools, settings) is the same bytes, as Claude Code sends it.
The targets take turns in blocks of 10 requests (the first of each block untimed: the previous
target's server finishes its own work meanwhile), so machine noise hits all alike.
Measured: total latency (non-streaming) and time to the first body byte (streaming); added
latency = a target's percentile minus ``direct``'s. Then throughput: requests per second
through one gateway worker with 32 requests in flight for a few seconds.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import httpx2
import orjson

from benchmarks.report import markdown_table, write_section
from tests.e2e.procs import (
    GATEWAY_KEY,
    ROOT,
    UPSTREAM_TOKEN,
    HarnessError,
    Proc,
    _spawn,
    _wait,
    base_env,
    cpu_seconds,
    fake_upstream,
    free_port,
    gateway,
)
from tpx.transport.translate import request_to_openai

FIXTURE = ROOT / "tests/fixtures/clients/claude-code/2.1.197/bash/002-post-v1-messages.json"
LITELLM_VENV = ROOT / ".cache" / "litellm-venv"
LITELLM_VERSION = "1.108.7"  # newer proxy extras pin packages PyPI does not have
LITELLM_KEY = "sk-tpx-bench"


@contextmanager
def baseline_tree(rev: str) -> Iterator[tuple[Path, str]]:
    """*rev* checked out (detached) into a worktree under .cache/, removed afterwards; its
    path and its commit."""
    found = subprocess.run(
        ["git", "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    if found.returncode != 0:
        raise HarnessError(f"--baseline {rev}: not a git revision of {ROOT}")
    commit = found.stdout.strip()
    tree = Path(tempfile.mkdtemp(prefix=f"bench-baseline-{commit[:12]}-", dir=_cache()))
    git = ["git", "-C", str(ROOT), "worktree"]
    subprocess.run(
        [*git, "add", "--detach", "--force", str(tree), commit], check=True, capture_output=True
    )
    try:
        yield tree, commit
    finally:
        subprocess.run([*git, "remove", "--force", str(tree)], check=False, capture_output=True)
        shutil.rmtree(tree, ignore_errors=True)
        subprocess.run([*git, "prune"], check=False, capture_output=True)


def _cache() -> Path:
    cache = ROOT / ".cache"
    cache.mkdir(exist_ok=True)
    return cache


@contextmanager
def baseline_gateway(logdir: Path, upstream: Proc, tree: Path) -> Iterator[Proc]:
    """``tpx serve`` as :func:`tests.e2e.procs.gateway` starts it, its ``tpx`` package the
    one in *tree* (first on ``PYTHONPATH``; this venv's dependencies)."""
    env = base_env()
    env.update(
        {
            "PYTHONPATH": str(tree),
            "TPX_BASE_URL": upstream.url + "/v1",
            "TPX_OAUTH_TOKEN": UPSTREAM_TOKEN,
            "TPX_GATEWAY_KEY": GATEWAY_KEY,
        }
    )
    probe = subprocess.run(
        [sys.executable, "-P", "-c", "import tpx; print(tpx.__file__)"],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if not probe.stdout.strip().startswith(str(tree)):
        raise HarnessError(f"the baseline's tpx is not imported from {tree}: {probe.stdout}")
    tpx = Path(sys.executable).parent / "tpx"
    port = free_port()
    cmd = [str(tpx), "serve", "--host", "127.0.0.1", "--port", str(port), "--workers", "1"]
    popen, log = _spawn("baseline", cmd, env, logdir)
    proc = Proc("tpx serve (baseline)", popen, log, port)

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


def messages_body(stream: bool, round_: int | None = None) -> dict[str, Any]:
    """The recorded turn; with *round_*, its first user text ends with the round's number:
    every round's messages differ (as a session's turns do) while the members after
    them (system, tools, settings) stay the same bytes, as Claude Code sends them."""
    body: dict[str, Any] = json.loads(FIXTURE.read_text())["body"]
    body["stream"] = stream
    if round_ is not None:
        first = body["messages"][0]["content"]
        first[-1]["text"] += f" (round {round_})"
    return body


def chat_body(stream: bool, round_: int | None = None) -> dict[str, Any]:
    out: dict[str, Any] = dict(request_to_openai(messages_body(stream, round_)).body)
    return out


def litellm_python() -> Path:
    """The venv's python, installing LiteLLM's proxy into it on first use."""
    python = LITELLM_VENV / "bin" / "python"
    if not (LITELLM_VENV / "bin" / "litellm").exists():
        print(f"installing litellm[proxy]=={LITELLM_VERSION} into {LITELLM_VENV} ...", flush=True)
        subprocess.run([sys.executable, "-m", "venv", str(LITELLM_VENV)], check=True)
        subprocess.run(
            [str(python), "-m", "pip", "install", "-q", f"litellm[proxy]=={LITELLM_VERSION}"],
            check=True,
        )
    return python


@contextmanager
def passthrough(logdir: Path, upstream: Proc) -> Iterator[Proc]:
    """The floor (benchmarks/passthrough.py): the same HTTP stack as ``tpx serve``, no work."""
    port = free_port()
    cmd = [sys.executable, "-m", "benchmarks.passthrough", str(port)]
    cmd.append(upstream.url + "/v1/chat/completions")
    for stream in (False, True):
        path = logdir / f"chat-{'stream' if stream else 'plain'}.json"
        path.write_bytes(orjson.dumps(chat_body(stream)))
        cmd.append(str(path))
    popen, log = _spawn("passthrough", cmd, base_env(), logdir)
    proc = Proc("passthrough", popen, log, port)
    probe = orjson.dumps(messages_body(False))

    def ready() -> bool:
        try:
            return httpx2.post(proc.url, content=probe, timeout=1).status_code == 200
        except httpx2.TransportError:
            return False

    try:
        _wait(proc, ready, 60)
        yield proc
    finally:
        proc.stop()


@contextmanager
def litellm_proxy(logdir: Path, upstream: Proc, model: str) -> Iterator[Proc]:
    litellm_python()
    port = free_port()
    config = logdir / "litellm.yaml"
    entry = {
        "model_name": model,
        "litellm_params": {
            "model": f"openai/{model}",
            "api_base": upstream.url + "/v1",
            "api_key": UPSTREAM_TOKEN,
        },
    }
    settings = {
        "model_list": [entry],
        "general_settings": {"master_key": LITELLM_KEY},
        "litellm_settings": {"telemetry": False, "drop_params": True},
    }
    config.write_text(json.dumps(settings))  # YAML is a superset of JSON
    env = base_env()
    env.update(
        {
            "LITELLM_TELEMETRY": "False",
            "LITELLM_LOCAL_MODEL_COST_MAP": "True",
            # its openai/ provider would otherwise send /v1/messages to the Responses API
            "LITELLM_USE_CHAT_COMPLETIONS_URL_FOR_ANTHROPIC_MESSAGES": "True",
        }
    )
    cmd = [str(LITELLM_VENV / "bin" / "litellm"), "--config", str(config)]
    cmd += ["--host", "127.0.0.1", "--port", str(port), "--num_workers", "1"]
    log = logdir / "litellm.log"
    with log.open("wb") as out:
        popen = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT)
    proc = Proc("litellm proxy", popen, log, port)
    try:
        deadline = time.monotonic() + 180
        while True:
            if not proc.alive():
                raise HarnessError(f"litellm exited {popen.returncode}:\n{proc.output()}")
            try:
                if httpx2.get(proc.url + "/health/liveliness", timeout=1).status_code == 200:
                    break
            except httpx2.TransportError:
                pass
            if time.monotonic() > deadline:
                raise HarnessError(f"litellm not ready:\n{proc.output()}")
            time.sleep(0.5)
        yield proc
    finally:
        proc.stop()


#: (name, url, headers, the body for (stream, round))
Target = tuple[str, str, dict[str, str], Callable[[bool, int], bytes]]
#: One repetition of a run: each target's timings by kind, and its CPU ms per request.
Repetition = tuple[dict[str, dict[str, list[float]]], dict[str, float]]


class _Bodies:
    """Each round's bodies (made before they are timed), for every target alike."""

    def __init__(self, make: Callable[[bool, int | None], dict[str, Any]]) -> None:
        self._make = make
        self._made: dict[tuple[bool, int], bytes] = {}

    def __call__(self, stream: bool, round_: int) -> bytes:
        key = (stream, round_)
        data = self._made.get(key)
        if data is None:
            if len(self._made) > 8:
                self._made.clear()
            data = self._made[key] = orjson.dumps(self._make(stream, round_))
        return data


def _timed(client: httpx2.Client, target: Target, stream: bool, round_: int) -> float:
    """Seconds to the full response (non-streaming) or to the first body byte (streaming)."""
    _, url, headers, body = target
    content = body(stream, round_)
    start = time.perf_counter()
    with client.stream("POST", url, content=content, headers=headers) as r:
        if r.status_code != 200:
            raise HarnessError(f"{url}: {r.status_code} {r.read()[:500]!r}")
        it = r.iter_raw()
        first = next(it)
        elapsed = time.perf_counter() - start
        rest = b"".join(it)
    if not stream:
        elapsed = time.perf_counter() - start
        orjson.loads(first + rest)  # a complete JSON reply
    return elapsed


#: Requests timed in a row per target (blocks alternate between the targets, so machine
#: noise hits all alike; back to back within a block, as a busy client sends them).
_BLOCK = 10


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def measure(targets: list[Target], rounds: int, warmup: int) -> dict[str, dict[str, list[float]]]:
    out: dict[str, dict[str, list[float]]] = {t[0]: {"plain": [], "ttfb": []} for t in targets}
    with httpx2.Client(timeout=60) as client:
        for target in targets:  # warm up
            for i in range(warmup):
                _timed(client, target, i % 2 == 1, i)
        for block in range(0, rounds, _BLOCK):
            for stream, kind in ((False, "plain"), (True, "ttfb")):
                for target in targets:
                    # one untimed request first: the previous target's server finishes its
                    # own (its log line, the upstream drain) on these 2 cores meanwhile
                    _timed(client, target, stream, block)
                    for i in range(block, min(block + _BLOCK, rounds)):
                        out[target[0]][kind].append(_timed(client, target, stream, i))
    return out


def throughput(target: Target, seconds: float, inflight: int) -> float:
    """Requests per second with ``inflight`` threads sharing one pooled client."""
    _, url, headers, body = target
    content = body(False, 0)
    done = 0
    lock = threading.Lock()
    ready = threading.Barrier(inflight + 1)
    stop = 0.0
    limits = httpx2.Limits(max_connections=inflight, max_keepalive_connections=inflight)

    def worker(client: httpx2.Client) -> None:
        nonlocal done
        ready.wait()
        while time.monotonic() < stop:
            r = client.post(url, content=content, headers=headers)
            if r.status_code != 200:
                raise HarnessError(f"{url}: {r.status_code}")
            with lock:
                done += 1

    with httpx2.Client(timeout=60, limits=limits) as client:
        threads = [threading.Thread(target=worker, args=(client,)) for _ in range(inflight)]
        for t in threads:
            t.start()
        start = time.monotonic()
        stop = start + seconds
        ready.wait()
        for t in threads:
            t.join()
        return done / (time.monotonic() - start)


#: The upstream's answer in the in-process measurements: one Bash tool call.
_TOOL_CALL_REPLY: dict[str, Any] = {
    "id": "chatcmpl-bench",
    "object": "chat.completion",
    "created": 1,
    "model": "m",
    "choices": [
        {
            "index": 0,
            "message": {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "Bash", "arguments": '{"command":"ls"}'},
                    }
                ],
            },
            "finish_reason": "tool_calls",
        }
    ],
    "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
}


#: Distinct bodies the in-process measurements cycle through (their messages differ).
_VARIANTS = 16


def in_process_cpu_ms(rounds: int) -> float:
    """CPU ms per request of the gateway core run in-process (``tpx.sdk``'s httpx2 transport,
    the upstream a MockTransport answering one tool call): the translation without HTTP."""
    import tpx.sdk

    reply = orjson.dumps(_TOOL_CALL_REPLY)
    upstream = httpx2.MockTransport(
        lambda _: httpx2.Response(200, content=reply, headers={"content-type": "application/json"})
    )
    env = {"TPX_OAUTH_TOKEN": UPSTREAM_TOKEN, "TPX_BASE_URL": "http://upstream.invalid/v1"}
    http = tpx.sdk.anthropic_client(env=env, upstream=upstream)._client
    bodies = [orjson.dumps(messages_body(False, i)) for i in range(_VARIANTS)]
    headers = {"content-type": "application/json", "anthropic-version": "2023-06-01"}
    rounds_done = 0

    def once() -> None:
        nonlocal rounds_done
        body = bodies[rounds_done % _VARIANTS]
        rounds_done += 1
        r = http.post("http://tpx.in-process/v1/messages?beta=true", content=body, headers=headers)
        if r.status_code != 200:
            raise HarnessError(f"in-process: {r.status_code} {r.text[:300]}")

    for _ in range(20):
        once()
    start = time.process_time()
    for _ in range(rounds):
        once()
    return (time.process_time() - start) * 1e3 / rounds


def core_cpu_ms(rounds: int) -> float:
    """CPU ms per request of the sans-I/O core alone, as ``tpx serve`` runs it (its log line
    on, to a null handler): ``Gateway.handle`` (decode, pairing, translate, encode) and
    ``Turn.reply`` (translate back, sign ids) on the benchmark body, no httpx2 at all."""
    import logging

    from tpx.gateway.core import Gateway, Request, Turn
    from tpx.gateway.settings import load_settings

    log = logging.getLogger("tpx.gateway")
    saved = (log.level, log.propagate, list(log.handlers))
    log.setLevel(logging.INFO)
    log.propagate = False
    log.handlers = [logging.NullHandler()]
    env = {
        "TPX_OAUTH_TOKEN": UPSTREAM_TOKEN,
        "TPX_BASE_URL": "http://upstream.invalid/v1",
        "TPX_GATEWAY_KEY": GATEWAY_KEY,
    }
    gateway = Gateway(load_settings(env=env))
    bodies = [orjson.dumps(messages_body(False, i)) for i in range(_VARIANTS)]
    headers = {"content-type": "application/json", "x-api-key": GATEWAY_KEY}
    reply = orjson.dumps(_TOOL_CALL_REPLY)
    json_headers = {"content-type": "application/json"}
    rounds_done = 0

    def once() -> None:
        nonlocal rounds_done
        body = bodies[rounds_done % _VARIANTS]
        rounds_done += 1
        turn = gateway.handle(Request("POST", "/v1/messages", "beta=true", headers, body))
        if not isinstance(turn, Turn):
            raise HarnessError(f"core: {turn}")
        if turn.reply(200, json_headers, reply).status != 200:
            raise HarnessError("core: the reply was refused")
        turn.close()

    try:
        for _ in range(20):
            once()
        start = time.process_time()
        for _ in range(rounds):
            once()
        return (time.process_time() - start) * 1e3 / rounds
    finally:
        log.level, log.propagate, log.handlers = saved


def main() -> None:
    parser = argparse.ArgumentParser(description="gateway added latency, side by side")
    parser.add_argument("--rounds", type=int, default=300)
    parser.add_argument("--warmup", type=int, default=30)
    parser.add_argument("--no-litellm", action="store_true")
    parser.add_argument("--no-floor", action="store_true", help="skip the pass-through floor")
    parser.add_argument("--no-cold", action="store_true", help="skip tpx-cold (the tail cache off)")
    parser.add_argument("--throughput-seconds", type=float, default=5.0)
    parser.add_argument(
        "--repeat",
        type=int,
        default=1,
        metavar="N",
        help="with --baseline: measure N times in this run; print each ratio and their median",
    )
    parser.add_argument(
        "--baseline",
        metavar="REV",
        help="also run tpx serve as it is at git revision REV, side by side; print the ratio",
    )
    parser.add_argument(
        "--monitor",
        action="store_true",
        help="also run tpx serve --monitor, side by side; print and write the monitor's share "
        "of the gateway's added latency",
    )
    args = parser.parse_args()
    direct_bodies = _Bodies(chat_body)
    messages_bodies = _Bodies(messages_body)
    model = str(messages_body(False)["model"])
    json_headers = {"content-type": "application/json"}
    logdir = Path(tempfile.mkdtemp(prefix="tpx-bench-"))
    try:
        with ExitStack() as stack:
            up = stack.enter_context(fake_upstream(logdir, "bash"))
            gw = stack.enter_context(gateway(logdir, up))
            messages_headers = {
                **json_headers,
                "x-api-key": GATEWAY_KEY,
                "anthropic-version": "2023-06-01",
            }
            targets: list[Target] = [
                (
                    "direct",
                    up.url + "/v1/chat/completions",
                    {**json_headers, "authorization": f"Bearer {UPSTREAM_TOKEN}"},
                    direct_bodies,
                ),
                ("tpx", gw.url + "/v1/messages?beta=true", messages_headers, messages_bodies),
            ]
            if not args.no_cold:
                config = logdir / "cold.toml"
                config.write_text("[limits]\ntail_cache = 0\n")
                cold = stack.enter_context(
                    gateway(logdir, up, extra=["--config", str(config)], name="cold")
                )
                targets.append(
                    (
                        "tpx-cold",
                        cold.url + "/v1/messages?beta=true",
                        messages_headers,
                        messages_bodies,
                    )
                )
            commit = ""
            if args.baseline:
                tree, commit = stack.enter_context(baseline_tree(args.baseline))
                base_gw = stack.enter_context(baseline_gateway(logdir, up, tree))
                print(f"baseline: {args.baseline} = {commit[:12]}", flush=True)
                targets.append(
                    (
                        "baseline",
                        base_gw.url + "/v1/messages?beta=true",
                        messages_headers,
                        messages_bodies,
                    )
                )
            if args.monitor:
                watched = stack.enter_context(
                    gateway(logdir, up, extra=["--monitor"], name="monitor")
                )
                targets.append(
                    (
                        "tpx-monitor",
                        watched.url + "/v1/messages?beta=true",
                        messages_headers,
                        messages_bodies,
                    )
                )
            if not args.no_floor:
                floor = stack.enter_context(passthrough(logdir, up))
                targets.append(("floor", floor.url + "/", json_headers, messages_bodies))
            if not args.no_litellm:
                lite = stack.enter_context(litellm_proxy(logdir, up, model))
                targets.append(
                    (
                        "litellm",
                        lite.url + "/v1/messages",
                        {
                            **json_headers,
                            "x-api-key": LITELLM_KEY,
                            "anthropic-version": "2023-06-01",
                        },
                        messages_bodies,
                    )
                )
            size = len(messages_bodies(False, 0))
            print(f"request: {size / 1024:.1f} KB Messages body, {args.rounds} rounds", flush=True)
            procs = {"direct": up, "tpx": gw}
            if not args.no_cold:
                procs["tpx-cold"] = cold
            if args.baseline:
                procs["baseline"] = base_gw
            if args.monitor:
                procs["tpx-monitor"] = watched
            if not args.no_floor:
                procs["floor"] = floor
            if not args.no_litellm:
                procs["litellm"] = lite
            repetitions: list[Repetition] = []
            loads: list[float] = []
            for repetition in range(args.repeat):
                before = {name: cpu_seconds(p.popen.pid) for name, p in procs.items()}
                results = measure(targets, args.rounds, args.warmup)
                requests = {name: 2 * (args.rounds + args.warmup) for name in procs}
                requests["direct"] *= len(targets)  # the upstream serves every target's
                cpu_ms = {
                    name: (cpu_seconds(p.popen.pid) - before[name]) * 1e3 / requests[name]
                    for name, p in procs.items()
                }
                repetitions.append((results, cpu_ms))
                loads.append(os.getloadavg()[0])
                if args.baseline and args.repeat > 1:
                    print(f"repetition {repetition + 1}, load average {os.getloadavg()}:")
                    print(baseline_ratio(results, cpu_ms, args.baseline), flush=True)
            rps = throughput(targets[1], args.throughput_seconds, 32)
    finally:
        shutil.rmtree(logdir, ignore_errors=True)
    report(results, rps)
    core_ms = in_process_cpu_ms(args.rounds)
    alone_ms = core_cpu_ms(args.rounds)
    print(
        "CPU ms per request (process CPU time over the measured requests; robust to machine "
        "load): " + ", ".join(f"{name} {ms:.2f}" for name, ms in cpu_ms.items())
    )
    print(f"tpx gateway core in-process (no HTTP server, no sockets): {core_ms:.2f} CPU ms/request")
    print(
        "tpx gateway core alone (sans-I/O: handle + reply + log line, no httpx2): "
        f"{alone_ms:.2f} CPU ms/request"
    )
    command = ".venv/bin/python -m benchmarks.gateway_latency " + " ".join(sys.argv[1:])
    if args.monitor:
        print(monitor_share(results, cpu_ms))
        if not args.baseline:
            table, notes = monitor_table(results, cpu_ms, size, args.rounds)
            written = write_section("monitor-gateway", command.strip(), table, notes=notes)
            if written is not None:
                print(f"table written to {written}")
    if args.baseline:
        print(baseline_ratio(results, cpu_ms, args.baseline))
        if args.repeat > 1:
            print(ratio_spread(repetitions, args.baseline))
        table, notes = baseline_table(repetitions, args.baseline, commit, loads, size, args.rounds)
        written = write_section("baseline", command.strip(), table, notes=notes, part_of=None)
        if written is not None:
            print(f"ratios written to {written}")
    if args.baseline or args.monitor:
        return  # the gateway's table is the tree's alone
    table, notes = gateway_table(results, rps, cpu_ms, core_ms, alone_ms, size, args.rounds)
    written = write_section("gateway", command.strip(), table, notes=notes)
    if written is not None:
        print(f"table written to {written}")


def gateway_table(
    results: dict[str, dict[str, list[float]]],
    rps: float,
    cpu_ms: dict[str, float],
    in_process_ms: float,
    alone_ms: float,
    size: int,
    rounds: int,
) -> tuple[str, list[str]]:
    """The run as a Markdown table (one row per target) and its notes, for docs/performance.md."""
    base = results["direct"]

    def added(name: str, kind: str, q: float) -> float:
        return (_pct(results[name][kind], q) - _pct(base[kind], q)) * 1e3

    rows: list[tuple[object, ...]] = []
    for name, kinds in results.items():
        cells: list[object] = [f"`{name}`"]
        for kind in ("plain", "ttfb"):
            p50 = _pct(kinds[kind], 0.5) * 1e3
            if name == "direct":
                cells += [f"{p50:.2f} ms", "", ""]
            else:
                cells += [
                    f"{p50:.2f} ms",
                    f"**+{added(name, kind, 0.5):.2f}**",
                    f"+{added(name, kind, 0.99):.2f}",
                ]
        cells.append(f"{cpu_ms[name]:.2f}" if name in cpu_ms else "")
        rows.append(tuple(cells))
    headers = (
        "target",
        "p50 (non-streaming)",
        "added p50 ms",
        "added p99 ms",
        "p50 (first byte, streaming)",
        "added p50 ms",
        "added p99 ms",
        "CPU ms per request",
    )
    notes = [
        f"Request: the recorded {size / 1024:.1f} KB Claude Code turn, {rounds} rounds per target "
        "and kind; added = a target's percentile minus `direct`'s.",
        f"Throughput, one `tpx serve` worker, 32 requests in flight: {rps:.0f} req/s.",
        f"Gateway core in-process through `tpx.sdk` (no sockets): {in_process_ms:.2f} CPU ms per "
        f"request; the sans-I/O core alone (handle + reply + log line): {alone_ms:.2f} CPU ms.",
    ]
    if "litellm" in results:
        for kind, label in (("plain", "non-streaming"), ("ttfb", "first byte")):
            ratio = added("litellm", kind, 0.5) / max(added("tpx", kind, 0.5), 1e-6)
            notes.append(f"LiteLLM / tpx added p50 latency ({label}): {ratio:.1f}x.")
    return markdown_table(headers, rows), notes


def baseline_ratio(
    results: dict[str, dict[str, list[float]]], cpu_ms: dict[str, float], rev: str
) -> str:
    """The tree against the baseline revision: the ratio of their added p50 latencies (each
    kind) and of their CPU time per request; above 1: the tree is slower."""
    base = results["direct"]

    def added(name: str, kind: str) -> float:
        return _pct(results[name][kind], 0.5) - _pct(base[kind], 0.5)

    lines = []
    for kind, label in (("plain", "non-streaming"), ("ttfb", "first byte, streaming")):
        ours, theirs = added("tpx", kind), added("baseline", kind)
        ratio = ours / theirs if theirs > 0 else float("inf")
        lines.append(
            f"tpx / baseline {rev}, added p50 latency ({label}): {ratio:.3f} "
            f"({ours * 1e3:.3f} ms vs {theirs * 1e3:.3f} ms, {100 * (ratio - 1):+.1f}%)"
        )
    ratio = cpu_ms["tpx"] / cpu_ms["baseline"]
    lines.append(
        f"tpx / baseline {rev}, gateway CPU ms per request: {ratio:.3f} "
        f"({cpu_ms['tpx']:.3f} vs {cpu_ms['baseline']:.3f}, {100 * (ratio - 1):+.1f}%)"
    )
    return "\n".join(lines)


def baseline_ratios(
    results: dict[str, dict[str, list[float]]], cpu_ms: dict[str, float]
) -> dict[str, float]:
    """tpx / baseline: added p50 latency of each kind, and CPU time per request."""
    base = results["direct"]

    def added(name: str, kind: str) -> float:
        return _pct(results[name][kind], 0.5) - _pct(base[kind], 0.5)

    out = {}
    for kind in ("plain", "ttfb"):
        theirs = added("baseline", kind)
        out[kind] = added("tpx", kind) / theirs if theirs > 0 else float("inf")
    out["cpu"] = cpu_ms["tpx"] / cpu_ms["baseline"]
    return out


def ratio_spread(repetitions: list[Repetition], rev: str) -> str:
    """The ratios of :func:`baseline_ratios` over the repetitions of one run: each one, their
    median and their range."""
    ratios = [baseline_ratios(results, cpu_ms) for results, cpu_ms in repetitions]
    lines = [f"tpx / baseline {rev} over {len(ratios)} repetitions (median, min..max):"]
    for key, label in (
        ("plain", "added p50 latency (non-streaming)"),
        ("ttfb", "added p50 latency (first byte, streaming)"),
        ("cpu", "gateway CPU ms per request"),
    ):
        values = [r[key] for r in ratios]
        each = " ".join(f"{100 * (v - 1):+.1f}%" for v in values)
        lines.append(
            f"  {label}: {statistics.median(values):.3f} "
            f"({100 * (statistics.median(values) - 1):+.1f}%), "
            f"{min(values):.3f}..{max(values):.3f}; each: {each}"
        )
    return "\n".join(lines)


#: What :func:`baseline_table` reports, in its order: (key, label).
_MEASURES = (
    ("plain", "added p50 latency (non-streaming)"),
    ("ttfb", "added p50 latency (first byte, streaming)"),
    ("cpu", "gateway CPU per request"),
)


def _measured(
    results: dict[str, dict[str, list[float]]], cpu_ms: dict[str, float], name: str
) -> dict[str, float]:
    """*name*'s added p50 latency of each kind and its CPU per request, in ms."""
    base = results["direct"]
    out = {
        kind: (_pct(results[name][kind], 0.5) - _pct(base[kind], 0.5)) * 1e3
        for kind in ("plain", "ttfb")
    }
    out["cpu"] = cpu_ms[name]
    return out


def baseline_table(
    repetitions: list[Repetition],
    rev: str,
    commit: str,
    loads: list[float],
    size: int,
    rounds: int,
) -> tuple[str, list[str]]:
    """The tree against revision *rev* (docs/performance.md, section ``baseline``): each
    measure's median over the repetitions for both, the median of the per-repetition ratios,
    their range and each one."""
    ours = [_measured(results, cpu_ms, "tpx") for results, cpu_ms in repetitions]
    theirs = [_measured(results, cpu_ms, "baseline") for results, cpu_ms in repetitions]
    ratios = [baseline_ratios(results, cpu_ms) for results, cpu_ms in repetitions]
    rows: list[tuple[object, ...]] = []
    for key, label in _MEASURES:
        values = [r[key] for r in ratios]
        median = statistics.median(values)
        rows.append(
            (
                label,
                f"{statistics.median(m[key] for m in ours):.3f} ms",
                f"{statistics.median(m[key] for m in theirs):.3f} ms",
                f"**{median:.3f}** ({100 * (median - 1):+.1f}%)",
                f"{min(values):.3f}..{max(values):.3f}",
                " ".join(f"{100 * (v - 1):+.1f}%" for v in values),
            )
        )
    headers = (
        "median of the repetitions",
        "`tpx` (this tree)",
        f"`baseline` ({rev})",
        "tpx / baseline",
        "range",
        "each repetition",
    )
    notes = [
        f"Baseline: `{rev}` = {commit[:12]}, checked out into a temporary worktree and run as "
        "one more target in the same run, in the same blocks; above 1: the tree is slower.",
        f"Request: the recorded {size / 1024:.1f} KB Claude Code turn, {rounds} rounds per "
        f"target and kind in each of {len(repetitions)} repetitions (the same servers); added "
        "= a target's p50 minus `direct`'s; CPU: each server's process CPU time over the "
        "measured requests.",
        "Load average (1 min) after each repetition: "
        + ", ".join(f"{load:.1f}" for load in loads)
        + ".",
    ]
    return markdown_table(headers, rows), notes


def _monitor_added(results: dict[str, dict[str, list[float]]], kind: str) -> tuple[float, float]:
    """The added p50 latency (seconds) of ``tpx`` and of ``tpx-monitor`` for *kind*."""
    base = _pct(results["direct"][kind], 0.5)
    return _pct(results["tpx"][kind], 0.5) - base, _pct(results["tpx-monitor"][kind], 0.5) - base


def _share(ours: float, watched: float) -> float:
    """The monitor's share of the gateway's added latency: (with - without) / without."""
    return (watched - ours) / ours if ours > 0 else float("inf")


def monitor_share(results: dict[str, dict[str, list[float]]], cpu_ms: dict[str, float]) -> str:
    """What ``--monitor`` adds, as a share of what the gateway adds over calling the upstream
    directly: the difference of the two added p50 latencies (each kind) over tpx's, and the
    difference of their CPU time per request over tpx's own."""
    lines = []
    for kind, label in (("plain", "non-streaming"), ("ttfb", "first byte, streaming")):
        ours, watched = _monitor_added(results, kind)
        lines.append(
            f"--monitor, added p50 latency ({label}): {(watched - ours) * 1e6:+.0f} us, "
            f"{_share(ours, watched):+.1%} of the gateway's {ours * 1e3:.3f} ms"
        )
    extra = cpu_ms["tpx-monitor"] - cpu_ms["tpx"]
    lines.append(
        f"--monitor, gateway CPU per request: {extra * 1e3:+.0f} us, "
        f"{extra / cpu_ms['tpx']:+.1%} of tpx's {cpu_ms['tpx']:.3f} ms"
    )
    return "\n".join(lines)


def monitor_table(
    results: dict[str, dict[str, list[float]]], cpu_ms: dict[str, float], size: int, rounds: int
) -> tuple[str, list[str]]:
    """``tpx serve`` with and without ``--monitor`` side by side (docs/performance.md): the
    added p50 latency of each, the monitor's share of it, and the CPU per request."""
    rows: list[tuple[object, ...]] = []
    for kind, label in (("plain", "non-streaming"), ("ttfb", "first byte, streaming")):
        ours, watched = _monitor_added(results, kind)
        rows.append(
            (
                label,
                f"+{ours * 1e3:.3f} ms",
                f"+{watched * 1e3:.3f} ms",
                f"{(watched - ours) * 1e6:+.0f} us",
                f"**{_share(ours, watched):+.1%}**",
            )
        )
    extra = cpu_ms["tpx-monitor"] - cpu_ms["tpx"]
    rows.append(
        (
            "CPU per request",
            f"{cpu_ms['tpx']:.3f} ms",
            f"{cpu_ms['tpx-monitor']:.3f} ms",
            f"{extra * 1e3:+.0f} us",
            f"{extra / cpu_ms['tpx']:+.1%}",
        )
    )
    headers = ("p50", "`tpx` added", "`tpx-monitor` added", "the monitor adds", "its share")
    notes = [
        f"Request: the recorded {size / 1024:.1f} KB Claude Code turn (no tool loop: one "
        f"`Resume`, `CallerSend`, `ProviderReply`, `Deliver` each), {rounds} rounds per target "
        "and kind, interleaved; added = a target's p50 minus `direct`'s; share = (added with "
        "the monitor - added without) / added without.",
        "CPU per request: each server's process CPU time over the measured requests.",
    ]
    return markdown_table(headers, rows), notes


def report(results: dict[str, dict[str, list[float]]], rps: float) -> None:
    base = results["direct"]
    print(f"{'target':<9} {'kind':<6} {'p50 ms':>8} {'p99 ms':>8} {'+p50 ms':>8} {'+p99 ms':>8}")
    added: dict[tuple[str, str], float] = {}
    for name, kinds in results.items():
        for kind, values in kinds.items():
            p50, p99 = _pct(values, 0.5) * 1e3, _pct(values, 0.99) * 1e3
            b50, b99 = _pct(base[kind], 0.5) * 1e3, _pct(base[kind], 0.99) * 1e3
            added[(name, kind)] = p50 - b50
            print(f"{name:<9} {kind:<6} {p50:8.2f} {p99:8.2f} {p50 - b50:8.2f} {p99 - b99:8.2f}")
    if "floor" in results:
        for kind in ("plain", "ttfb"):
            own = added[("tpx", kind)] - added[("floor", kind)]
            print(
                f"tpx's own work ({kind}): {own:.2f} ms of its {added[('tpx', kind)]:.2f} ms "
                f"(the HTTP stack alone, floor: {added[('floor', kind)]:.2f} ms)"
            )
    if "litellm" in results:
        for kind in ("plain", "ttfb"):
            ratio = added[("litellm", kind)] / max(added[("tpx", kind)], 1e-6)
            print(f"litellm / tpx added p50 latency ({kind}): {ratio:.1f}x")
    print(f"tpx throughput, 1 worker, 32 in flight, non-streaming: {rps:.0f} req/s")
    spread = statistics.pstdev(base["plain"]) * 1e3
    print(f"direct non-streaming spread (stdev): {spread:.2f} ms; load average {os.getloadavg()}")


if __name__ == "__main__":
    main()
