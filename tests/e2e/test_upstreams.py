"""``make e2e``: the real Claude Code CLI through ``tpx serve`` with three scripted upstreams
(``[[upstreams]]``): its background calls at the small one, its main turns at the big one, a
fallback. The big one is killed in the middle of a session (by the very tool call it asked
for) and the session finishes on the fallback; a 529 whose ``retry-after`` is short is waited
for on the same upstream, a long one fails over at once. No tool call is delivered twice: the
upstreams' ledgers and the CLI's own transcript (``--output-format stream-json``) agree.
"""

from __future__ import annotations

import contextlib
import json
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.procs import (
    ClaudeRun,
    Proc,
    claude_executable,
    fake_upstream,
    gateway,
    run_claude,
)

pytestmark = pytest.mark.e2e

NAMES = ("small", "big", "cloud")
CONFIG = """
[routing]
background_models = ["*haiku*"]
probe_interval = 0

[[upstreams]]
name = "small"
base_url = "{small}/v1"
models = ["small-model"]

[[upstreams]]
name = "big"
base_url = "{big}/v1"
models = ["big-model"]

[[upstreams]]
name = "cloud"
base_url = "{cloud}/v1"
models = ["cloud-model"]

[[routes]]
name = "background"
background = true
upstreams = ["small", "cloud"]

[[routes]]
name = "main"
upstreams = ["big", "cloud"]
"""
#: Claude Code's small/fast model, which its background calls ask for (they are part of the
#: traffic CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC turns off)
HAIKU: dict[str, str | None] = {
    "ANTHROPIC_DEFAULT_HAIKU_MODEL": "claude-haiku-4-5",
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": None,
}


@pytest.fixture(autouse=True)
def _claude_cli() -> None:
    claude_executable()


@contextlib.contextmanager
def _cluster(tmp_path: Path, command: str) -> Iterator[tuple[dict[str, Proc], Proc]]:
    """Three fake upstreams (each writing its ledger to a file) and a gateway routing to them."""
    with contextlib.ExitStack() as stack:
        ups = {
            name: stack.enter_context(
                fake_upstream(
                    tmp_path,
                    "bash",
                    command,
                    extra=[
                        "--shared",
                        "--ledger-file",
                        str(tmp_path / f"{name}.ledger.json"),
                        *([] if name == "big" else ["--no-faults"]),  # only the big one fails
                    ],
                    name=f"fake-{name}",
                )
            )
            for name in NAMES
        }
        config = tmp_path / "gateway.toml"
        config.write_text(CONFIG.format(**{n: p.url for n, p in ups.items()}))
        gw = stack.enter_context(gateway(tmp_path, ups["big"], extra=["--config", str(config)]))
        yield ups, gw


def _ledger(tmp_path: Path, name: str) -> dict[str, Any]:
    path = tmp_path / f"{name}.ledger.json"
    if not path.exists():
        return {"requests": 0, "violations": [], "conversations": {}}
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def _lines(gw: Proc) -> list[dict[str, Any]]:
    found = []
    for line in gw.log.read_text(errors="replace").splitlines():
        if line.startswith("{"):
            record = json.loads(line)
            if record.get("endpoint") == "messages":
                found.append(record)
    return found


def _transcript_tool_uses(run: ClaudeRun) -> list[str]:
    """The tool_use ids of the CLI's transcript (stream-json: one JSON object a line)."""
    ids = []
    for line in run.stdout.splitlines():
        if not line.startswith("{"):
            continue
        event = json.loads(line)
        if event.get("type") == "assistant":
            for block in event["message"]["content"]:
                if block.get("type") == "tool_use":
                    ids.append(block["id"])
    return ids


def _final_text(run: ClaudeRun) -> str:
    for line in run.stdout.splitlines():
        if line.startswith("{"):
            event = json.loads(line)
            if event.get("type") == "result":
                return str(event.get("result"))
    return ""


def _detail(run: ClaudeRun, gw: Proc, tmp_path: Path) -> str:
    ledgers = {n: _ledger(tmp_path, n) for n in NAMES}
    return (
        f"exit {run.returncode}\nstdout: {run.stdout[-3000:]}\nstderr: {run.stderr[-2000:]}\n"
        f"gateway: {gw.output()}\nledgers: {json.dumps(ledgers)[:3000]}"
    )


def _claude(gw: Proc, prompt: str, work: Path) -> ClaudeRun:
    return run_claude(
        gw.url,
        prompt,
        work,
        extra=["--output-format", "stream-json", "--verbose"],
        env_extra=HAIKU,
    )


def test_background_at_the_small_one_main_at_the_big_one_which_dies_mid_session(
    tmp_path: Path,
) -> None:
    marker = f"tpx-e2e-{secrets.token_hex(6)}"
    work = tmp_path / "work"
    work.mkdir()
    conv = "killed"
    pid_file = tmp_path / "big.pid"
    # the tool call the big upstream asks for writes the marker, then kills the big upstream
    command = f"echo {marker} >> tpx-e2e.txt && kill -9 $(cat {pid_file})"
    with _cluster(tmp_path, command) as (ups, gw):
        pid_file.write_text(str(ups["big"].popen.pid))
        run = _claude(gw, f"Write the marker file, then report. [conv:{conv}]", work)
        ups["big"].popen.wait(10)
        detail = _detail(run, gw, tmp_path)
        lines = _lines(gw)
    assert run.returncode == 0, detail
    assert f"tpx-e2e-final {conv}" in _final_text(run), detail
    assert (work / "tpx-e2e.txt").read_text().splitlines() == [marker], detail  # ran once
    small, big, cloud = (_ledger(tmp_path, n) for n in NAMES)
    # background calls (the small/fast model) at the small one, main turns at the big one
    background = [r for r in lines if r.get("route") == "background"]
    main = [r for r in lines if r.get("route") == "main"]
    assert background, detail
    assert {r["upstream"] for r in background} == {"small"}, detail
    assert {r["model"] for r in background} == {"claude-haiku-4-5"}, detail
    assert small["requests"] == len(background), detail
    assert main[0]["upstream"] == "big", detail
    # the turn after the kill: refused by the dead one, finished on the fallback
    assert main[-1]["upstream"] == "cloud", detail
    assert main[-1]["attempts"] == [
        {"upstream": "big", "outcome": "connect"},
        {"upstream": "cloud", "outcome": "ok"},
    ], detail
    # no tool call delivered twice: the big one emitted one call, the fallback none, the
    # fallback's history echoes exactly the big one's, and the CLI saw one tool_use
    emitted = big["conversations"][conv]["emitted"]
    assert [len(emitted[t]) for t in sorted(emitted)] == [1], detail
    (call,) = [c[0] for c in emitted["0"]]
    assert cloud["conversations"][conv]["emitted"] == {"1": []}, detail
    assert cloud["conversations"][conv]["adopted"] == {"0": [call]}, detail
    assert big["violations"] == cloud["violations"] == small["violations"] == [], detail
    uses = _transcript_tool_uses(run)
    assert len(uses) == 1, detail
    assert uses[0].endswith("_" + call), detail


@pytest.mark.parametrize(("after", "fallback"), [(1, False), (60, True)], ids=str)
def test_a_529_with_retry_after_is_honoured_before_failing_over(
    tmp_path: Path, after: int, fallback: bool
) -> None:
    """A short retry-after (1 s, within ``retry_after_max``): waited for, the same upstream
    again; a long one (60 s): the fallback at once. The client never sees the 529."""
    marker = f"tpx-e2e-{secrets.token_hex(6)}"
    work = tmp_path / "work"
    work.mkdir()
    conv = f"busy{after}"
    prompt = (
        f"Write the marker file, then report. [conv:{conv}] [fail-turn:1] "
        f"[fail-status:529] [retry-after:{after}]"
    )
    with _cluster(tmp_path, f"echo {marker} >> tpx-e2e.txt") as (_, gw):
        run = _claude(gw, prompt, work)
        detail = _detail(run, gw, tmp_path)
        lines = _lines(gw)
    assert run.returncode == 0, detail
    assert f"tpx-e2e-final {conv}" in _final_text(run), detail
    assert (work / "tpx-e2e.txt").read_text().splitlines() == [marker], detail
    main = [r for r in lines if r.get("route") == "main"]
    assert [r["status"] for r in main] == [200, 200], detail  # the 529 never reached the CLI
    expected = (
        [{"upstream": "big", "outcome": 529}, {"upstream": "cloud", "outcome": "ok"}]
        if fallback
        else [
            {"upstream": "big", "outcome": 529},
            {"upstream": "big", "outcome": "ok", "waited": 1.0},
        ]
    )
    assert main[1]["attempts"] == expected, detail
    big, cloud = _ledger(tmp_path, "big"), _ledger(tmp_path, "cloud")
    assert big["conversations"][conv]["faults"] == 1, detail
    assert (conv in cloud["conversations"]) is fallback, detail
    assert len(_transcript_tool_uses(run)) == 1, detail
