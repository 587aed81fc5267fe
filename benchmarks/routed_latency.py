"""What ``[[upstreams]]`` routing adds to ``tpx serve``'s latency, end to end.

    python -m benchmarks.routed_latency [--rounds 300] [--repeat 5]   (part of make bench-gateway)

One run, side by side and interleaved (:func:`benchmarks.gateway_latency.measure`: blocks of
10 requests per target, the first of each untimed), all on loopback, in front of the same
scripted fake OpenAI upstream, over the recorded Claude Code turn of ``make bench-gateway``:

- ``direct``: the Chat Completions request posted to the upstream (the zero of "added");
- ``tpx``: ``tpx serve`` with one upstream and no routes, as ``make bench-gateway`` runs it;
- ``tpx-routed``: ``tpx serve`` with the three ``[[upstreams]]`` and the two ``[[routes]]``
  of docs/upstreams.md's example (:data:`ROUTED`), every upstream pointing at the same fake
  upstream and with the same (default) profile, so that only routing differs: the rules are
  matched (the background rule is tried, then the main one), the least loaded healthy
  upstream of the route picked, its slot of ``concurrency`` taken and the attempt counted.

The measurement is repeated ``--repeat`` times in the one run (the same servers), the two
gateways changing places each time (the one measured second in a block comes out slower). Printed
and written into docs/performance.md (section ``routing-gateway``): each gateway's added p50
(total latency, non-streaming; time to the first byte, streaming), the difference (what
routing adds), its median and range over the repetitions, each gateway's CPU time per
request, and whether the difference keeps the bound routing is held to
(:data:`benchmarks.routing_cost.BOUND_MS`).
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
from contextlib import ExitStack
from pathlib import Path

import orjson

from benchmarks.gateway_latency import (
    Target,
    _Bodies,
    _pct,
    chat_body,
    measure,
    messages_body,
)
from benchmarks.report import markdown_table, write_section
from benchmarks.routing_cost import BOUND_MS
from tests.e2e.procs import (
    GATEWAY_KEY,
    UPSTREAM_TOKEN,
    HarnessError,
    cpu_seconds,
    fake_upstream,
    gateway,
)

#: docs/upstreams.md's example ("small model for background, big model for the rest, cloud
#: fallback"), each ``base_url`` the fake upstream's (``{url}``) and every profile the
#: default one, as the one-upstream gateway's: only the routing differs.
ROUTED = """
[routing]
background_models = ["*haiku*"]

[[upstreams]]
name = "small"
base_url = "{url}"
models = ["Qwen/Qwen3-1.7B"]

[[upstreams]]
name = "big"
base_url = "{url}"
models = ["Qwen/Qwen3-32B"]
concurrency = 16

[[upstreams]]
name = "cloud"
base_url = "{url}"
token_env = "OPENAI_API_KEY"
models = ["gpt-5"]

[[routes]]
name = "background"
background = true
upstreams = ["small", "cloud"]

[[routes]]
name = "main"
upstreams = ["big", "cloud"]
"""

KINDS = (("plain", "non-streaming"), ("ttfb", "first byte, streaming"))

#: one repetition: each target's latencies by kind
Results = dict[str, dict[str, list[float]]]


def added_ms(results: Results, name: str, kind: str) -> float:
    """*name*'s p50 minus ``direct``'s, in milliseconds."""
    return (_pct(results[name][kind], 0.5) - _pct(results["direct"][kind], 0.5)) * 1e3


def routing_ms(results: Results, kind: str) -> float:
    """What routing adds to the p50: the routed gateway's added p50 minus the plain one's."""
    return added_ms(results, "tpx-routed", kind) - added_ms(results, "tpx", kind)


def pooled(repetitions: list[Results]) -> Results:
    """Every repetition's latencies together, per target and kind."""
    out: Results = {}
    for results in repetitions:
        for name, kinds in results.items():
            for kind, values in kinds.items():
                out.setdefault(name, {}).setdefault(kind, []).extend(values)
    return out


def table(
    repetitions: list[Results], cpu_ms: dict[str, float], size: int, rounds: int
) -> tuple[str, list[str], bool]:
    """The section's table, its notes, and whether routing kept the bound (each kind's
    difference, over every repetition's requests pooled)."""
    every = pooled(repetitions)
    rows: list[tuple[object, ...]] = []
    met = True
    for kind, label in KINDS:
        diff = routing_ms(every, kind)
        each = [routing_ms(r, kind) for r in repetitions]
        met = met and diff <= BOUND_MS
        rows.append(
            (
                label,
                f"+{added_ms(every, 'tpx', kind):.3f} ms",
                f"+{added_ms(every, 'tpx-routed', kind):.3f} ms",
                f"**{diff:+.3f} ms**",
                f"{statistics.median(each):+.3f} ({min(each):+.3f}..{max(each):+.3f})",
            )
        )
    extra = cpu_ms["tpx-routed"] - cpu_ms["tpx"]
    rows.append(
        (
            "CPU per request",
            f"{cpu_ms['tpx']:.3f} ms",
            f"{cpu_ms['tpx-routed']:.3f} ms",
            f"{extra:+.3f} ms",
            "",
        )
    )
    headers = (
        "p50",
        "`tpx` added (one upstream)",
        "`tpx-routed` added",
        "routing adds",
        f"over {len(repetitions)} repetitions: median (range)",
    )
    notes = [
        f"Request: the recorded {size / 1024:.1f} KB Claude Code turn of `make bench-gateway`, "
        f"{rounds} rounds per target and kind in each of {len(repetitions)} repetitions, "
        "interleaved (the two gateways change places every repetition); added = a gateway's "
        "p50 minus `direct`'s (every repetition's requests "
        "together); routing adds = `tpx-routed`'s added p50 minus `tpx`'s.",
        "`tpx-routed`: three `[[upstreams]]` and two `[[routes]]` as in "
        "[upstreams.md](upstreams.md)'s example, every one pointing at the same fake upstream; "
        "each turn matched the `main` rule and went to `big`.",
        "CPU per request: each server's process CPU time over every measured request.",
        f"Bound: routing adds at most {BOUND_MS} ms p50 to a request; this run: "
        f"{'within' if met else 'ABOVE'} it.",
    ]
    return markdown_table(headers, rows), notes, met


def _routed_turns(log: Path) -> tuple[int, int]:
    """The exchanges the routed gateway logged, and those of them its ``main`` rule sent to
    ``big``."""
    lines = [
        orjson.loads(line)
        for line in log.read_text(errors="replace").splitlines()
        if line.startswith("{") and '"endpoint"' in line
    ]
    main = sum(1 for e in lines if e.get("route") == "main" and e.get("upstream") == "big")
    return len(lines), main


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=300)
    parser.add_argument("--warmup", type=int, default=30)
    parser.add_argument("--repeat", type=int, default=5, metavar="N")
    parser.add_argument("--no-docs", action="store_true", help="do not write docs/performance.md")
    args = parser.parse_args()
    logdir = Path(tempfile.mkdtemp(prefix="tpx-bench-routed-"))
    messages_bodies = _Bodies(messages_body)
    json_headers = {"content-type": "application/json"}
    messages_headers = {**json_headers, "x-api-key": GATEWAY_KEY, "anthropic-version": "2023-06-01"}
    try:
        with ExitStack() as stack:
            up = stack.enter_context(fake_upstream(logdir, "bash"))
            plain = stack.enter_context(gateway(logdir, up))
            config = logdir / "routed.toml"
            config.write_text(ROUTED.format(url=up.url + "/v1"))
            routed = stack.enter_context(
                gateway(
                    logdir,
                    up,
                    extra=["--config", str(config)],
                    name="routed",
                    env_extra={"OPENAI_API_KEY": UPSTREAM_TOKEN},
                )
            )
            targets: list[Target] = [
                (
                    "direct",
                    up.url + "/v1/chat/completions",
                    {**json_headers, "authorization": f"Bearer {UPSTREAM_TOKEN}"},
                    _Bodies(chat_body),
                ),
                ("tpx", plain.url + "/v1/messages?beta=true", messages_headers, messages_bodies),
                (
                    "tpx-routed",
                    routed.url + "/v1/messages?beta=true",
                    messages_headers,
                    messages_bodies,
                ),
            ]
            size = len(messages_bodies(False, 0))
            print(
                f"request: {size / 1024:.1f} KB Messages body, {args.rounds} rounds, "
                f"{args.repeat} repetitions",
                flush=True,
            )
            procs = {"tpx": plain, "tpx-routed": routed}
            before = {name: cpu_seconds(p.popen.pid) for name, p in procs.items()}
            repetitions: list[Results] = []
            direct, plain_target, routed_target = targets
            for n in range(args.repeat):
                # the two gateways change places every repetition: the one measured second
                # in a block came out slower even with the same gateway in both places
                order = (
                    (plain_target, routed_target) if n % 2 == 0 else (routed_target, plain_target)
                )
                results = measure([direct, *order], args.rounds, args.warmup)
                repetitions.append(results)
                print(
                    f"repetition {n + 1}: routing adds "
                    + ", ".join(f"{kind} {routing_ms(results, kind):+.3f} ms" for kind, _ in KINDS),
                    flush=True,
                )
            requests = 2 * (args.rounds + args.warmup) * args.repeat
            cpu_ms = {
                name: (cpu_seconds(p.popen.pid) - before[name]) * 1e3 / requests
                for name, p in procs.items()
            }
            logged, main_big = _routed_turns(routed.log)
    finally:
        shutil.rmtree(logdir, ignore_errors=True)
    if logged == 0 or main_big != logged:
        raise HarnessError(
            f"the routed gateway logged {logged} exchanges, {main_big} of them routed main -> big"
        )
    text, notes, met = table(repetitions, cpu_ms, size, args.rounds)
    print(text)
    for note in notes:
        print(f"- {note}")
    if args.no_docs:
        return
    command = ".venv/bin/python -m benchmarks.routed_latency " + " ".join(sys.argv[1:])
    written = write_section(
        "routing-gateway", command.strip(), text, notes=notes, part_of="make bench-gateway"
    )
    if written is not None:
        print(f"table written to {written}")
    if not met:
        print(f"routing adds more than {BOUND_MS} ms p50 in this run", file=sys.stderr)


if __name__ == "__main__":
    main()
