"""``make e2e``: the real Claude Code CLI through ``tpx serve`` on an upstream whose context window
is far below the 200K Claude Code assumes (``tests/e2e/fake_window.py``: it counts every
request's tokens and answers its server's own context error past the window).

The task's tool outputs outgrow the window. The session must compact and finish: once where the
gateway's preflight refuses (``[context] window`` set: the upstream never sees a request that
does not fit), once per server wording where the upstream's own error (llama.cpp's, vLLM's,
SGLang's, Ollama's, OpenAI's) is rewritten into the Messages API's ``prompt is too long``; with
the rewrite switched off the CLI does not recognise the error and the task does not finish.
"""

from __future__ import annotations

import json
import os
import re
import secrets
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.procs import claude_executable, fake_upstream, gateway, ledger, run_claude

pytestmark = pytest.mark.e2e

WINDOW = 30_000
STEPS = 4
FIXTURE = (
    Path(__file__).resolve().parents[1] / "fixtures" / "upstream" / "claude_code_compaction.json"
)


@pytest.fixture(autouse=True)
def _claude_cli() -> None:
    claude_executable()


def _run(
    tmp_path: Path,
    profile: str,
    context: str,
    conv: str,
    home: Path | None = None,
    steps: int = STEPS,
    lines: int = 600,
    form: str | None = None,
) -> tuple[Any, dict[str, Any], str]:
    work = tmp_path / "work"
    work.mkdir()
    config = tmp_path / "gateway.toml"
    config.write_text(f"[context]\n{context}\n")
    window = ["--window", str(WINDOW), "--profile", profile, "--steps", str(steps)]
    window += ["--lines", str(lines)]
    if form is not None:
        window += ["--form", form]
    prompt = f"Run the listing steps one by one, then report. [conv:{conv}]"
    env = {"TPX_PROFILE": profile, "TPX_MODEL": "small-window-model"}
    with (
        fake_upstream(tmp_path, "window", window=window) as up,
        gateway(tmp_path, up, extra=["--config", str(config)], env_extra=env) as gw,
    ):
        run = run_claude(gw.url, prompt, work, max_retries=1, home=home, discovery=bool(home))
        snap = ledger(up)
        detail = (
            f"exit {run.returncode}\nstdout: {run.stdout[-2000:]}\nstderr: {run.stderr[-2000:]}\n"
            f"--- gateway ---\n{gw.output()}\n--- upstream ---\n{up.output()}\n"
            f"ledger: {json.dumps({k: v for k, v in snap.items() if k != 'compaction_request'})}"
        )
    return run, snap, detail


def _compaction_prompt(request: dict[str, Any]) -> str:
    last = next(m for m in reversed(request["messages"]) if m["role"] == "user")
    content = last["content"]
    return content if isinstance(content, str) else " ".join(p.get("text", "") for p in content)


def _record(request: dict[str, Any], tmp_path: Path) -> None:
    """Keep the compaction request as the upstream got it (scratch paths replaced)."""
    text = json.dumps(request, indent=1).replace(str(tmp_path / "work"), "/tmp/tpx-rec")
    text = re.sub(r"/tmp/tpx-e2e-home-[^/]+", "/tmp/tpx-rec-home", text)
    text = re.sub(r"-tmp-pytest-of-[^/\"]+", "-tmp-tpx-rec", text)
    FIXTURE.write_text(text + "\n")


def test_the_preflight_refusal_makes_claude_code_compact_and_finish(tmp_path: Path) -> None:
    conv = f"pre{secrets.token_hex(3)}"
    # the fake upstream counts with cl100k itself: the margin its tokenizer needs is 1.0 (with
    # the default 1.20, Claude Code's own prompt leaves no room in a 30,000-token window)
    run, snap, detail = _run(tmp_path, "vllm", f"window = {WINDOW}\nestimate_margin = 1.0", conv)
    assert run.returncode == 0, detail
    assert f"tpx-e2e-final {conv}" in run.stdout, detail
    task = snap["tasks"][conv]
    assert task["done"] == STEPS, detail
    assert task["compactions"] >= 1, detail
    assert task["refused"] == 0, detail  # the gateway refused first: nothing too long was sent
    assert snap["violations"] == [], detail  # every max_tokens was clamped into the window
    assert '"error":"GATEWAY_400"' in detail, detail


#: (profile, form): the upstream's own context error, as its server words it (None: the fake's
#: llama.cpp body; else that form's body of tests/fixtures/upstream/context_errors.json).
REWRITTEN = [
    ("llama.cpp", None),
    ("vllm", "vllm-request-has"),
    ("sglang", "sglang-input-longer"),
    ("ollama", "ollama-prompt-longer"),
    ("openai", "openai-max-context"),
]


@pytest.mark.parametrize(("profile", "form"), REWRITTEN, ids=[f or p for p, f in REWRITTEN])
def test_the_upstreams_context_error_rewritten_makes_claude_code_compact_and_finish(
    tmp_path: Path, profile: str, form: str | None
) -> None:
    conv = f"up{secrets.token_hex(3)}"
    run, snap, detail = _run(tmp_path, profile, "rewrite_errors = true", conv, form=form)
    assert run.returncode == 0, detail
    assert f"tpx-e2e-final {conv}" in run.stdout, detail
    task = snap["tasks"][conv]
    assert task["done"] == STEPS, detail
    assert task["refused"] >= 1, detail
    assert task["compactions"] >= 1, detail
    request = snap["compaction_request"]
    assert request is not None, detail
    if os.environ.get("TPX_RECORD_COMPACTION") == "1" and form is None:
        _record(request, tmp_path)
    recorded = json.loads(FIXTURE.read_text())
    assert _compaction_prompt(request) == _compaction_prompt(recorded)


def test_with_the_rewrite_off_claude_code_does_not_compact(tmp_path: Path) -> None:
    conv = f"off{secrets.token_hex(3)}"
    run, snap, detail = _run(tmp_path, "vllm", "rewrite_errors = false", conv)
    assert f"tpx-e2e-final {conv}" not in run.stdout, detail
    task = snap["tasks"][conv]
    assert task["refused"] >= 1, detail
    assert task["compactions"] == 0, detail
    assert task["done"] < STEPS, detail


def test_claude_codes_model_discovery_keeps_the_aliases(tmp_path: Path) -> None:
    """With ``CLAUDE_CODE_ENABLE_GATEWAY_MODEL_DISCOVERY=1`` the CLI reads ``GET /v1/models``,
    keeps the ids starting ``claude`` (its /model picker's options) and caches them."""
    home = tmp_path / "home"
    home.mkdir()
    conv = f"disc{secrets.token_hex(3)}"
    run, snap, detail = _run(
        tmp_path, "vllm", f"window = {WINDOW}", conv, home=home, steps=1, lines=20
    )
    assert snap["tasks"][conv]["final"] is True, detail
    assert run.returncode == 0, detail
    (cache,) = home.rglob("gateway-models.json")
    kept = json.loads(cache.read_text())["models"]
    assert kept == [
        {
            "id": "claude-tpx-small-window-model",
            "display_name": f"small-window-model via tpx ({WINDOW}-token window)",
        }
    ], detail
