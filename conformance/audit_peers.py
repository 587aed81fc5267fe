"""``make audit-peers``: ``tpx audit`` of LiteLLM's proxy, claude-code-router and ``tpx
serve``, side by side, each configured to the audit's scripted upstream; the table goes into
docs/audit.md (between its ``audit-peers`` markers, with the date and the machine) and each
report (HTML, JSON, traces) into ``.cache/audit-peers/``. Each report is then confirmed from
its files (:mod:`conformance.audit_peers_confirm`): every failure's trace is run through ``tpx
check-trace``, which must reject it for the failure's property, and the HTML report is read
as headless Chromium shows it with no network (the table of checks and the first failure's
trace there); the table says so, and the run exits 1 when anything is not confirmed. The
table also gives each endpoint's CPU time per request (its processes, read from /proc before
and after its audit; kept beside its reports as ``NAME.cpu.json``).

    python -m conformance.audit_peers [--only NAME ...] [--no-docs] [--from-reports] [--jobs N]

LiteLLM 1.108.7 runs from ``.cache/litellm-venv`` (installed on first use, as ``make
bench-gateway`` does), claude-code-router 2.0.0 from ``.cache/ccr`` (``make audit-peers``
installs it with npm). Each peer gets the audit's model names mapped to the scripted
upstream, its own client key, and the upstream key the scripted upstream checks; LiteLLM
with its retries and cooldowns off (``num_retries: 0``, ``allowed_fails``), so a failure
reaches the client as the upstream made it, one worker process per core and its own loggers
quiet. Each audit has ``--jobs`` behaviours in flight together (``tpx audit --jobs``).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path

import attrs
import httpx2

from benchmarks.gateway_latency import LITELLM_VENV, LITELLM_VERSION, litellm_python
from benchmarks.report import machine
from conformance.audit_peers_confirm import Confirmed, check_traces, html_problems
from tests.e2e.procs import cpu_seconds, free_port
from tpx.audit import report
from tpx.audit.cli import UPSTREAM_KEY
from tpx.audit.findings import CHECKS, Result
from tpx.audit.harness import GATEWAY_KEY, Harness, terminate
from tpx.audit.run import JOBS, audit_gateway

ROOT = Path(__file__).parents[1]
OUT = ROOT / ".cache" / "audit-peers"
DOC = ROOT / "docs" / "audit.md"
CCR = ROOT / ".cache" / "ccr" / "node_modules" / ".bin" / "ccr"
CCR_VERSION = "2.0.0"
PEER_KEY = "sk-audit-peer"
#: the model names the audit's clients ask for
MODELS = ("claude-replay", "claude-audit")
BEGIN, END = "<!-- audit-peers:begin -->", "<!-- audit-peers:end -->"
#: LiteLLM's own loggers quiet (a uvicorn log config): the audit reads its answers, not its
#: log, and each error record it logs is redacted and its traceback formatted, a sixth of
#: its time per request
QUIET_LOGS = {
    "version": 1,
    "disable_existing_loggers": False,
    "loggers": {
        name: {"level": "CRITICAL"} for name in ("LiteLLM", "LiteLLM Router", "LiteLLM Proxy")
    },
}
#: LiteLLM's proxy processes (uvicorn workers): one per core, as it is deployed (one
#: process is busy about 40 ms per request of its own)
LITELLM_WORKERS = os.cpu_count() or 1


def _wait_up(url: str, popen: subprocess.Popen[bytes], log: Path, seconds: float = 180) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if popen.poll() is not None:
            raise RuntimeError(
                f"{url}: the process ended:\n{log.read_text(errors='replace')[-3000:]}"
            )
        try:
            httpx2.get(url, timeout=2)
            return
        except httpx2.TransportError:
            time.sleep(0.5)
    raise RuntimeError(f"{url} never answered:\n{log.read_text(errors='replace')[-3000:]}")


@contextmanager
def litellm(harness: Harness, work: Path) -> Iterator[tuple[str, int]]:
    upstream = harness.upstream_url
    litellm_python()
    port = free_port()
    entries = [
        {
            "model_name": name,
            "litellm_params": {
                "model": "openai/fake-model",
                "api_base": upstream + "/v1",
                "api_key": UPSTREAM_KEY,
            },
        }
        for name in MODELS
    ]
    settings = {
        "model_list": entries,
        "general_settings": {"master_key": PEER_KEY},
        "litellm_settings": {"telemetry": False, "drop_params": True, "num_retries": 0},
        "router_settings": {"num_retries": 0, "allowed_fails": 100000, "cooldown_time": 0},
    }
    config = work / "litellm.yaml"
    config.write_text(json.dumps(settings))  # YAML is a superset of JSON
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG", "TMPDIR")}
    env.update(
        {
            "LITELLM_TELEMETRY": "False",
            "LITELLM_LOCAL_MODEL_COST_MAP": "True",
            "LITELLM_USE_CHAT_COMPLETIONS_URL_FOR_ANTHROPIC_MESSAGES": "True",
        }
    )
    log = work / "litellm.log"
    cmd = [str(LITELLM_VENV / "bin" / "litellm"), "--config", str(config)]
    quiet = work / "logging.json"
    quiet.write_text(json.dumps(QUIET_LOGS))
    cmd += ["--log_config", str(quiet)]
    cmd += ["--host", "127.0.0.1", "--port", str(port), "--num_workers", str(LITELLM_WORKERS)]
    with log.open("wb") as out:
        popen = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_up(url + "/health/liveliness", popen, log)
        yield url, popen.pid
    finally:
        terminate(popen)


@contextmanager
def ccr(harness: Harness, work: Path) -> Iterator[tuple[str, int]]:
    upstream = harness.upstream_url
    if not CCR.exists():
        raise RuntimeError(f"{CCR} is missing: make audit-peers installs it")
    home = work / "ccr-home"
    (home / ".claude-code-router").mkdir(parents=True, exist_ok=True)
    port = 3456
    config = {
        "APIKEY": PEER_KEY,
        "HOST": "127.0.0.1",
        "PORT": port,
        "LOG": False,
        "Providers": [
            {
                "name": "scripted",
                "api_base_url": upstream + "/v1/chat/completions",
                "api_key": UPSTREAM_KEY,
                "models": ["fake-model"],
            }
        ],
        "Router": {"default": "scripted,fake-model"},
    }
    (home / ".claude-code-router" / "config.json").write_text(json.dumps(config))
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "LANG", "TMPDIR")}
    env["HOME"] = str(home)
    log = work / "ccr.log"
    with log.open("wb") as out:
        popen = subprocess.Popen(
            [str(CCR), "start"], env=env, stdout=out, stderr=subprocess.STDOUT, cwd=work
        )
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_up(url + "/", popen, log, 60)
        yield url, popen.pid
    finally:
        subprocess.run([str(CCR), "stop"], env=env, capture_output=True, timeout=60, check=False)
        terminate(popen)


@contextmanager
def tpx_serve(harness: Harness, work: Path) -> Iterator[tuple[str, int]]:
    gw = harness.gateway(False, True)
    yield gw.url, gw.popen.pid


#: how to run an endpoint: its URL and the process whose CPU time (its children's included) is
#: the endpoint's
Runner = Callable[[Harness, Path], AbstractContextManager[tuple[str, int]]]
#: name -> (its label in the table, how to run it, the key its clients send)
PEERS: dict[str, tuple[str, Runner, str]] = {
    "tpx": ("tpx serve", tpx_serve, GATEWAY_KEY),
    "litellm": (f"LiteLLM proxy {LITELLM_VERSION}", litellm, PEER_KEY),
    "ccr": (f"claude-code-router {CCR_VERSION}", ccr, PEER_KEY),
}


def _cell(result: Result, name: str) -> str:
    check = next(c for c in CHECKS if c.name == name)
    status = result.status(check)
    if status == "fail":
        return f"fail ({result.counts[name]})"
    return status


@attrs.define
class Confirmation:
    """A peer's report confirmed from its files: each failure's trace through ``tpx
    check-trace``; what the HTML report, as a browser shows it, lacks; how it was read."""

    traces: list[Confirmed]
    html: list[str]
    html_by: str

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.traces) and not self.html


def confirm(name: str, result: Result) -> Confirmation:
    traces = check_traces(result, OUT / f"{name}.traces")
    html, by = html_problems(OUT / f"{name}.html", result)
    return Confirmation(traces, html, by)


def _confirmed_cell(c: Confirmation) -> str:
    traced = [t for t in c.traces if not t.verdict.startswith("no spec trace")]
    if not traced:
        return "-"
    return f"{sum(t.ok for t in traced)} of {len(traced)}"


def _html_cell(c: Confirmation) -> str:
    if c.html:
        return "NOT as written: " + "; ".join(c.html)[:200]
    return "table and first trace shown" if c.traces else "table shown"


def cpu_ms(names: list[str]) -> dict[str, float]:
    """Each endpoint's CPU ms per request in its last audit (those with a ``NAME.cpu.json``)."""
    out = {}
    for name in names:
        path = OUT / f"{name}.cpu.json"
        if path.exists():
            kept = json.loads(path.read_text())
            out[name] = kept["cpu_seconds"] * 1e3 / max(kept["requests"], 1)
    return out


def table(
    results: dict[str, Result],
    confirmed: dict[str, Confirmation] | None = None,
    cpu: dict[str, float] | None = None,
) -> str:
    labels = [PEERS[n][0] for n in results]
    lines = ["| check | " + " | ".join(labels) + " |", "| --- |" + " --- |" * len(labels)]
    for check in CHECKS:
        cells = [_cell(r, check.name) for r in results.values()]
        lines.append(f"| `{check.name}` | " + " | ".join(cells) + " |")
    lines.append(
        "| seconds (behaviours) | "
        + " | ".join(f"{r.seconds:.1f} ({r.behaviours})" for r in results.values())
        + " |"
    )
    if cpu:
        lines.append(
            "| the endpoint's CPU ms per request | "
            + " | ".join(f"{cpu[n]:.1f}" if n in cpu else "-" for n in results)
            + " |"
        )
    if confirmed:
        rows = (
            ("traces `tpx check-trace` rejects for their property", _confirmed_cell),
            ("HTML report, offline", _html_cell),
        )
        for title, cell in rows:
            lines.append(f"| {title} | " + " | ".join(cell(confirmed[n]) for n in results) + " |")
    return "\n".join(lines)


def findings(results: dict[str, Result], confirmed: dict[str, Confirmation] | None = None) -> str:
    """The first counterexample of each failed check, one line each, with what ``tpx
    check-trace`` said of its trace."""
    lines = []
    for name, result in results.items():
        said = {t.check: t for t in confirmed[name].traces} if confirmed else {}
        for check in CHECKS:
            failure = result.failures.get(check.name)
            if failure is not None:
                first = " ".join(failure.message.split())[:220]
                line = f"- {PEERS[name][0]}, `{check.name}`: {first}"
                t = said.get(check.name)
                if t is not None:
                    line += f" (`tpx check-trace`: {t.verdict}{'' if t.ok else ', NOT confirmed'})"
                lines.append(line)
    return "\n".join(lines)


def write_doc(
    results: dict[str, Result], confirmed: dict[str, Confirmation], cpu: dict[str, float]
) -> None:
    text = DOC.read_text(encoding="utf-8")
    head, _, rest = text.partition(BEGIN)
    _, _, tail = rest.partition(END)
    when = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    read = sorted({c.html_by for c in confirmed.values()})
    body = (
        f"Written by `make audit-peers` on {when}; machine: {machine()}; each peer's reports "
        "are in "
        "`.cache/audit-peers/`. `fail (N)`: N failures of the check (a behaviour stops at its "
        "first); the first counterexample of each is below the table. Each counterexample's "
        "trace was run through `tpx check-trace --spec spec/TpxGateway.tla`, which rejected it "
        "for the property shown; each HTML report was read as "
        + ", ".join(read)
        + " shows it.\n\n"
        + table(results, confirmed, cpu)
        + "\n\nWhat each gets wrong, as found (the first counterexample of each failed check):\n\n"
        + (findings(results, confirmed) or "- nothing")
        + "\n"
    )
    DOC.write_text(f"{head}{BEGIN}\n{body}{END}{tail}", encoding="utf-8")


def _audit(names: list[str], jobs: int = JOBS) -> dict[str, Result]:
    OUT.mkdir(parents=True, exist_ok=True)
    results: dict[str, Result] = {}
    harness = Harness()
    try:
        for name in names:
            label, run, key = PEERS[name]
            print(f"== {label}", flush=True)
            with (
                tempfile.TemporaryDirectory(prefix=f"audit-{name}-") as work,
                run(harness, Path(work)) as (url, pid),
            ):
                before = cpu_seconds(pid)
                result = audit_gateway(harness, url, key, jobs=jobs)
                spent = cpu_seconds(pid) - before
            results[name] = result
            kept = {"cpu_seconds": spent, "requests": result.requests}
            (OUT / f"{name}.cpu.json").write_text(json.dumps(kept))
            print(report.summary(result), flush=True)
            report.write(result, OUT / f"{name}.html")
            report.write(result, OUT / f"{name}.json")
    finally:
        harness.close()
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m conformance.audit_peers")
    parser.add_argument("--only", nargs="*", choices=list(PEERS), default=list(PEERS))
    parser.add_argument("--no-docs", action="store_true", help="do not rewrite docs/audit.md")
    parser.add_argument(
        "--jobs", type=int, default=JOBS, help=f"behaviours in flight together (default {JOBS})"
    )
    parser.add_argument(
        "--from-reports",
        action="store_true",
        help="no audit: the table from the JSON reports in .cache/audit-peers/ (confirmed again)",
    )
    args = parser.parse_args(argv)
    if args.from_reports:
        results = {
            name: Result.from_json(json.loads((OUT / f"{name}.json").read_text()))
            for name in args.only
        }
    else:
        results = _audit(args.only, args.jobs)
    confirmed = {}
    for name, result in results.items():
        confirmed[name] = c = confirm(name, result)
        for t in c.traces:
            print(f"{PEERS[name][0]}, {t.check}: {t.verdict}" + ("" if t.ok else "  NOT CONFIRMED"))
        print(
            f"{OUT / (name + '.html')}, read by {c.html_by}: "
            + ("; ".join(c.html) or "the table and the first trace shown")
        )
    cpu = cpu_ms(list(results))
    print(table(results, confirmed, cpu))
    if not args.no_docs:
        write_doc(results, confirmed, cpu)
    return 0 if all(c.ok for c in confirmed.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
