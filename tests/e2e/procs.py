"""Processes of the end-to-end harness: the fake upstream, ``tpx serve`` and the Claude Code CLI.

Everything binds 127.0.0.1. A missing piece (no CLI, no ``tpx serve``, a process that does not
come up) raises :class:`HarnessError` with the reason and the process's output: the e2e and load
tests fail loudly instead of skipping. The one exception: the Claude Code CLI, when no
``$TPX_CLAUDE`` names it (a plain ``pytest -m e2e``): those tests are skipped with the command
that installs and runs them (``make e2e``, which sets ``$TPX_CLAUDE`` and so fails if it is
missing).
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import httpx2
import orjson
import pytest

ROOT = Path(__file__).resolve().parents[2]
CLAUDE_DEFAULT = ROOT / ".cache" / "claude-code" / "node_modules" / ".bin" / "claude"
GATEWAY_KEY = "tpx-e2e-gateway-key"
UPSTREAM_TOKEN = "tpx-e2e-upstream-token"
# Environment variables that would change the gateway's provider selection or the CLI's target.
SCRUB = (
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_AUTH_TOKEN",
    "ANTHROPIC_BASE_URL",
    "TPX_OAUTH_TOKEN",
    "TPX_OAUTH_TOKEN_COMMAND",
    "TPX_BASE_URL",
    "TPX_MODEL",
    "TPX_PROFILE",
    "TPX_GATEWAY_KEY",
    "TPX_GATEWAY_SECRET",
)


class HarnessError(RuntimeError):
    """A piece of the e2e harness is missing or did not start."""


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def base_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in SCRUB}


@dataclass
class Proc:
    name: str
    popen: subprocess.Popen[bytes]
    log: Path
    port: int

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def output(self) -> str:
        return self.log.read_text(errors="replace")[-4000:]

    def alive(self) -> bool:
        return self.popen.poll() is None

    def stop(self) -> None:
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(10)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(10)


def _spawn(
    name: str, cmd: list[str], env: Mapping[str, str], logdir: Path
) -> tuple[subprocess.Popen[bytes], Path]:
    log = logdir / f"{name}.log"
    out: IO[bytes] = log.open("wb")
    try:
        popen = subprocess.Popen(cmd, env=dict(env), stdout=out, stderr=subprocess.STDOUT, cwd=ROOT)
    finally:
        out.close()
    return popen, log


def _wait(proc: Proc, ready: Any, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not proc.alive():
            raise HarnessError(f"{proc.name} exited with {proc.popen.returncode}:\n{proc.output()}")
        if ready():
            return
        time.sleep(0.1)
    proc.stop()
    raise HarnessError(f"{proc.name} not ready after {timeout} s:\n{proc.output()}")


@contextmanager
def fake_upstream(
    logdir: Path,
    script: str,
    command: str | None = None,
    extra: list[str] | None = None,
    name: str | None = None,
    window: list[str] | None = None,
) -> Iterator[Proc]:
    """``python -m tests.e2e.fake_openai`` on a free loopback port (requires UPSTREAM_TOKEN).
    *extra*: more flags; *name*: its log's (several fakes in one logdir); with *window* (its
    arguments), ``python -m tests.e2e.fake_window`` instead."""
    if window is not None:
        cmd = [sys.executable, "-m", "tests.e2e.fake_window", *window]
    else:
        cmd = [sys.executable, "-m", "tests.e2e.fake_openai", "--script", script]
    cmd += ["--token", UPSTREAM_TOKEN]
    if command is not None:
        cmd += ["--command", command]
    cmd += extra or []
    popen, log = _spawn(name or f"fake-{script}", cmd, base_env(), logdir)
    proc = Proc(f"fake upstream ({script})", popen, log, 0)

    def ready() -> bool:
        m = re.search(r"FAKE_OPENAI_PORT=(\d+)", log.read_text(errors="replace"))
        if m is None:
            return False
        proc.port = int(m.group(1))
        try:
            return httpx2.get(proc.url + "/_ledger", timeout=1).status_code == 200
        except httpx2.TransportError:
            return False

    try:
        _wait(proc, ready, 30)
        yield proc
    finally:
        proc.stop()


def ledger(upstream: Proc) -> dict[str, Any]:
    data: dict[str, Any] = orjson.loads(httpx2.get(upstream.url + "/_ledger", timeout=60).content)
    return data


def tpx_executable() -> Path:
    tpx = Path(os.environ.get("TPX_EXE") or Path(sys.executable).parent / "tpx")
    if not tpx.exists():
        raise HarnessError(f"{tpx} not found: run `make setup`")
    probe = subprocess.run(
        [str(tpx), "serve", "--help"], capture_output=True, text=True, check=False
    )
    if probe.returncode != 0:
        raise HarnessError(
            "`tpx serve` is not available in this tree:\n" + (probe.stderr or probe.stdout)[-1000:]
        )
    return tpx


@contextmanager
def gateway(
    logdir: Path,
    upstream: Proc,
    workers: int = 1,
    extra: list[str] | None = None,
    name: str = "gateway",
    env_extra: Mapping[str, str] | None = None,
) -> Iterator[Proc]:
    """``tpx serve`` on a free loopback port in front of ``upstream`` (provider TPX); ready when
    ``GET /healthz`` answers 200. *name*: its log's (two gateways in one logdir); *env_extra*:
    more environment (replicas sharing their secrets, ``TPX_PROFILE``, ``TPX_MODEL``)."""
    tpx = tpx_executable()
    port = free_port()
    env = base_env()
    env.update(
        {
            "TPX_BASE_URL": upstream.url + "/v1",
            "TPX_OAUTH_TOKEN": UPSTREAM_TOKEN,
            "TPX_GATEWAY_KEY": GATEWAY_KEY,
            **(env_extra or {}),
        }
    )
    cmd = [str(tpx), "serve", "--host", "127.0.0.1", "--port", str(port)]
    cmd += ["--workers", str(workers), *(extra or [])]
    popen, log = _spawn(f"{name}-w{workers}", cmd, env, logdir)
    proc = Proc(f"tpx serve --workers {workers}", popen, log, port)

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


def claude_executable() -> Path:
    """The CLI ``make e2e`` installed (or ``$TPX_CLAUDE``): a test is skipped when neither is
    there, and fails when ``$TPX_CLAUDE`` names a missing file."""
    configured = os.environ.get("TPX_CLAUDE")
    claude = ROOT / Path(configured or CLAUDE_DEFAULT)
    if not claude.exists():
        message = (
            f"Claude Code CLI not found at {claude}: run `make e2e` (it installs it with "
            "`npm install --prefix .cache/claude-code @anthropic-ai/claude-code`)"
        )
        if not configured:
            pytest.skip(message)
        raise HarnessError(message)
    return claude


@dataclass
class ClaudeRun:
    returncode: int
    stdout: str
    stderr: str


def run_claude(
    base_url: str,
    prompt: str,
    workdir: Path,
    key: str = GATEWAY_KEY,
    timeout: float = 300,
    max_retries: int | None = None,
    extra: list[str] | None = None,
    env_extra: Mapping[str, str | None] | None = None,
    home: Path | None = None,
    discovery: bool = False,
) -> ClaudeRun:
    """``claude -p PROMPT --allowedTools Bash`` in ``workdir`` with its own HOME.

    *env_extra*: more environment (a ``None`` value unsets the variable). ``max_retries`` caps
    the CLI's own retries (``CLAUDE_CODE_MAX_RETRIES``; 2.1.197 retries even a 401 with backoff
    for minutes by default). *home*: the HOME to use and keep (else a scratch one, removed).
    *discovery*: ``CLAUDE_CODE_ENABLE_GATEWAY_MODEL_DISCOVERY=1``, with nonessential traffic
    allowed (the CLI's discovery is part of it; there is no other network here)."""
    claude = claude_executable()
    keep = home is not None
    home = home or Path(tempfile.mkdtemp(prefix="tpx-e2e-home-"))
    env = base_env()
    env.update(
        {
            "HOME": str(home),
            "ANTHROPIC_BASE_URL": base_url,
            "ANTHROPIC_API_KEY": key,
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        }
    )
    if discovery:
        env["CLAUDE_CODE_ENABLE_GATEWAY_MODEL_DISCOVERY"] = "1"
        del env["CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC"]
    if max_retries is not None:
        env["CLAUDE_CODE_MAX_RETRIES"] = str(max_retries)
    for name, value in (env_extra or {}).items():  # None: unset
        if value is None:
            env.pop(name, None)
        else:
            env[name] = value
    try:
        done = subprocess.run(
            [str(claude), "-p", prompt, "--allowedTools", "Bash", *(extra or [])],
            cwd=workdir,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    finally:
        if not keep:
            shutil.rmtree(home, ignore_errors=True)
    return ClaudeRun(done.returncode, done.stdout, done.stderr)


def _family(pid: int) -> list[int]:
    pids = [pid]
    try:
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        pids += [int(c) for c in children]
    except OSError:
        pass
    return pids


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of ``pid`` and its children (uvicorn workers), from /proc."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for p in _family(pid):
        try:
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / ticks
    return total


def rss_bytes(pid: int) -> int:
    """Resident set size of ``pid`` and its children (uvicorn workers), from /proc."""
    total = 0
    for p in _family(pid):
        try:
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1]) * 1024
        except OSError:
            continue
    return total
