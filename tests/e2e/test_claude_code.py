"""``make e2e``: the real Claude Code CLI through ``tpx serve`` to a scripted OpenAI upstream.

The fake upstream asks for one Bash tool call (a command that appends a random marker to a file)
and then answers text. The CLI must run the tool exactly once, print the final text and exit 0;
also when the upstream fails the tool turn once (529 / 503) and the CLI retries it, and with two
gateway workers (the retry may land on the other worker: the signed tool ids must hold there).
"""

from __future__ import annotations

import json
import secrets
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.procs import (
    ClaudeRun,
    Proc,
    claude_executable,
    fake_upstream,
    gateway,
    ledger,
    run_claude,
)

pytestmark = pytest.mark.e2e


@pytest.fixture(autouse=True)
def _claude_cli() -> None:
    """Skip (with the command that runs these) before any process starts when the CLI is not
    installed and ``make e2e`` did not name it; see :func:`claude_executable`."""
    claude_executable()


def _detail(run: ClaudeRun, *procs: Proc) -> str:
    logs = "\n".join(f"--- {p.name} ---\n{p.output()}" for p in procs)
    return f"exit {run.returncode}\nstdout: {run.stdout}\nstderr: {run.stderr[-3000:]}\n{logs}"


@pytest.mark.parametrize(
    ("fail_status", "workers"), [(None, 1), (529, 1), (503, 1), (529, 2)], ids=str
)
def test_claude_code_bash_tool_through_the_gateway(
    tmp_path: Path, fail_status: int | None, workers: int
) -> None:
    marker = f"tpx-e2e-{secrets.token_hex(6)}"
    work = tmp_path / "work"
    work.mkdir()
    conv = f"cc{fail_status or ''}"
    prompt = f"Write the marker file, then report. [conv:{conv}]"
    if fail_status is not None:
        prompt += f" [fail-turn:1] [fail-status:{fail_status}]"
    command = f"echo {marker} >> tpx-e2e.txt"
    with fake_upstream(tmp_path, "bash", command) as up, gateway(tmp_path, up, workers) as gw:
        run = run_claude(gw.url, prompt, work)
        snap = ledger(up)
        detail = _detail(run, gw, up)
    assert run.returncode == 0, detail
    assert f"tpx-e2e-final {conv}" in run.stdout, detail
    # The tool really ran, exactly once (the retry re-sent the turn, not the command).
    assert (work / "tpx-e2e.txt").read_text().splitlines() == [marker], detail
    assert snap["violations"] == [], detail
    seen = snap["conversations"][conv]
    assert seen["final"] is True, detail
    assert seen["faults"] == (1 if fail_status else 0), detail
    assert seen["requests"] == (3 if fail_status else 2), detail
    assert seen["max_turn"] == 1, detail


def test_claude_code_with_a_wrong_gateway_key_reaches_nothing(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    with (
        fake_upstream(tmp_path, "bash", "echo never >> tpx-e2e.txt") as up,
        gateway(tmp_path, up) as gw,
    ):
        run = run_claude(gw.url, "Try. [conv:nokey]", work, key="wrong-key", max_retries=1)
        snap = ledger(up)
        detail = _detail(run, gw, up)
    assert run.returncode != 0, detail
    assert "Invalid API key" in run.stdout + run.stderr, detail
    assert snap["requests"] == 0, detail
    assert not (work / "tpx-e2e.txt").exists(), detail


def test_claude_code_keeps_the_signed_thinking_the_gateway_sends(tmp_path: Path) -> None:
    """Upstream reasoning reaches the CLI as a signed thinking block (an unsigned one would be
    discarded with its reply), and the tool turn still completes."""
    marker = f"tpx-e2e-{secrets.token_hex(6)}"
    work = tmp_path / "work"
    work.mkdir()
    prompt = "Think, write the marker file, report. [conv:think] [reasoning:1]"
    command = f"echo {marker} >> tpx-e2e.txt"
    verbose = ["--output-format", "stream-json", "--verbose"]
    with fake_upstream(tmp_path, "bash", command) as up, gateway(tmp_path, up) as gw:
        run = run_claude(gw.url, prompt, work, extra=verbose)
        snap = ledger(up)
        detail = _detail(run, gw, up)
    assert run.returncode == 0, detail
    assert (work / "tpx-e2e.txt").read_text().splitlines() == [marker], detail
    events: list[Any] = [json.loads(line) for line in run.stdout.splitlines() if line.strip()]
    blocks = [
        block
        for event in events
        if event.get("type") == "assistant"
        for block in event["message"]["content"]
    ]
    thinking = [b for b in blocks if b["type"] == "thinking"]
    assert [b["thinking"] for b in thinking] == ["reasoning think turn 0", "reasoning think turn 1"]
    assert all(b.get("signature") for b in thinking), detail
    assert [b["name"] for b in blocks if b["type"] == "tool_use"] == ["Bash"], detail
    assert any(e.get("type") == "result" and "tpx-e2e-final think" in e["result"] for e in events)
    assert snap["violations"] == [], detail
    assert snap["conversations"]["think"]["final"] is True, detail
