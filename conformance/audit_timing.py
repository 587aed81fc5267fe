"""What one ``tpx audit`` of ``tpx serve`` takes, in both modes, with the default lanes and
with one: the figures of docs/audit.md's section ``audit-timing`` (:mod:`benchmarks.report`).

    python -m conformance.audit_timing [--no-docs]      (part of make audit-peers)

For gateway mode (an OpenAI-compatible upstream) and pass-through mode (a Messages upstream,
``--messages-upstream``), ``tpx serve`` is started once in front of the audit's scripted
upstream and audited over the small cfgs with ``--jobs`` :data:`tpx.audit.lanes.JOBS` and
with ``--jobs 1``, one after the other: the behaviours and requests, the seconds, the audit's
own CPU time (this process: the scripted upstream, the clients, the judging) and that of
``tpx serve``. Every audit must pass every check (exit 1 otherwise, nothing written).
"""

from __future__ import annotations

import argparse
import sys
import time

import attrs

from benchmarks.report import markdown_table, write_section
from tests.e2e.procs import cpu_seconds
from tpx.audit.harness import GATEWAY_KEY, Harness
from tpx.audit.lanes import JOBS
from tpx.audit.report import summary
from tpx.audit.run import audit_gateway

COMMAND = ".venv/bin/python -m conformance.audit_timing"
#: (label, the scripted upstream's API, the gateway's credentials: has_key, has_token)
MODES = (("gateway", "openai", False, True), ("pass-through", "messages", True, False))


@attrs.frozen
class Timing:
    mode: str
    jobs: int
    behaviours: int
    requests: int
    seconds: float
    audit_cpu: float  #: seconds of this process's CPU
    serve_cpu: float  #: seconds of ``tpx serve``'s CPU


def measure(harness: Harness, jobs: tuple[int, ...]) -> tuple[list[Timing], list[str]]:
    """Each mode with each of *jobs*; the timings and the audits that did not pass."""
    timings: list[Timing] = []
    failed: list[str] = []
    for mode, upstream, has_key, has_token in MODES:
        gw = harness.gateway(has_key, has_token)
        for n in jobs:
            cpu, served = time.process_time(), cpu_seconds(gw.popen.pid)
            result = audit_gateway(harness, gw.url, GATEWAY_KEY, upstream=upstream, jobs=n)
            audit_cpu, serve_cpu = time.process_time() - cpu, cpu_seconds(gw.popen.pid) - served
            print(summary(result).splitlines()[0] + f" (--jobs {n})", flush=True)
            if not result.ok:
                failed.append(f"{mode} mode, --jobs {n}: {sorted(result.failures)}")
            timings.append(
                Timing(
                    mode,
                    n,
                    result.behaviours,
                    result.requests,
                    result.seconds,
                    audit_cpu,
                    serve_cpu,
                )
            )
    return timings, failed


def table(timings: list[Timing]) -> str:
    rows = [
        (
            f"{t.mode}{' (`--messages-upstream`)' if t.mode == 'pass-through' else ''}",
            t.jobs,
            t.behaviours,
            t.requests,
            f"**{t.seconds:.1f}**",
            f"{t.audit_cpu:.1f}",
            f"{t.serve_cpu:.1f}",
        )
        for t in timings
    ]
    headers = (
        "mode",
        "`--jobs`",
        "behaviours",
        "requests",
        "seconds",
        "the audit's CPU s",
        "`tpx serve`'s CPU s",
    )
    return markdown_table(headers, rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m conformance.audit_timing")
    parser.add_argument("--no-docs", action="store_true", help="do not rewrite docs/audit.md")
    args = parser.parse_args(argv)
    harness = Harness()
    try:
        for _ in range(500):  # until the scripted upstream accepts connections
            if harness.started():
                break
            time.sleep(0.01)
        timings, failed = measure(harness, (JOBS, 1))
    finally:
        harness.close()
    text = table(timings)
    print(text)
    if failed:
        print("not every check passed:\n" + "\n".join(failed), file=sys.stderr)
        return 1
    if not args.no_docs:
        notes = [
            "`tpx serve` audited over the small cfgs (`--profile small`), the scripted upstream "
            "and the audit in this one process; every check passed in every run.",
        ]
        written = write_section(
            "audit-timing", COMMAND, text, notes=notes, part_of="make audit-peers"
        )
        if written is not None:
            print(f"table written to {written}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
