"""The audit's report: one HTML file that needs no network (the table of checks, the first
failure's trace shown), the JSON for CI, the traces beside it; and ``tpx audit``'s exit
codes."""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import httpx2
import pytest

from tests.e2e.procs import free_port
from tpx.audit import report
from tpx.audit.cli import UPSTREAM_API_KEY, UPSTREAM_KEY
from tpx.audit.findings import CHECKS, Failure, Result
from tpx.cli import main

ROOT = Path(__file__).parents[2]


def _failing() -> Result:
    result = Result("http://127.0.0.1:1", "gateway", behaviours=3, requests=7)
    result.ran |= {c.name for c in CHECKS if c.name != "Models"}
    trace = {"#meta": {}, "vars": ["x"], "states": [{"x": {"#bigint": "1"}}, {"x": {"#set": []}}]}
    big = Failure("MessageId", "the id 'chatcmpl-1' <b>", "SMALL #1", ["A(c1)", "B(c1)"], [], [])
    small = Failure(
        "MessageId",
        "the id 'chatcmpl-2'",
        "SMALL #0",
        ["A(c1)"],
        [{"conversation": "c1", "request": "{}", "status": 200, "headers": {}, "answer": "{}"}],
        [
            {
                "conversation": "c1",
                "path": "/v1/chat/completions",
                "request": "{}",
                "status": 200,
                "reply": "{}",
                "seq": 1,
                "client_request": 0,
            }
        ],
        trace=trace,
        verdict="REJECTED at step 2 (ShapeInv): x",
        rejected_for="ShapeInv",
    )
    result.add(big)
    result.add(small)
    result.add(Failure("CountTokens", "no input_tokens", "POST", ["POST"], [], []))
    return result


def test_the_smallest_counterexample_is_kept() -> None:
    result = _failing()
    assert result.failures["MessageId"].where == "SMALL #0"
    assert result.counts["MessageId"] == 2
    assert [result.status(c) for c in CHECKS if c.name in ("MessageId", "Models", "Usage")] == [
        "fail",
        "pass",
        "n/a",
    ]


def test_the_html_report_is_one_file_with_the_table_and_the_first_trace(tmp_path: Path) -> None:
    path = tmp_path / "r.html"
    traces = report.write(_failing(), path)
    text = path.read_text(encoding="utf-8")
    assert text.startswith("<!DOCTYPE html>")
    assert "<script" not in text
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", text)  # nothing fetched
    rows = re.findall(r"<tr><td><code>(\w+)</code>", text)
    assert rows == [c.name for c in CHECKS]
    assert '<td class="fail"><a href="#MessageId">fail</a>' in text
    assert "<details open><summary>the trace (ITF)</summary>" in text
    assert '<table class="states">' in text
    assert "REJECTED at step 2 (ShapeInv)" in text
    assert "&lt;b&gt;" not in text  # the bigger counterexample is not the one shown
    assert set(traces) == {"MessageId"}
    assert json.loads(traces["MessageId"].read_text())["states"][1] == {"x": {"#set": []}}
    assert '<tr class="last"><td>2</td><td></td><td>{}</td></tr>' in text


def test_the_json_report_names_the_trace_files(tmp_path: Path) -> None:
    path = tmp_path / "r.json"
    report.write(_failing(), path)
    doc = json.loads(path.read_text())
    assert doc["ok"] is False
    assert [f["check"] for f in doc["failures"]] == ["MessageId", "CountTokens"]
    assert doc["failures"][0]["trace_file"].endswith("r.traces/MessageId.itf.json")
    assert {c["name"]: c["status"] for c in doc["checks"]}["Models"] == "n/a"


def test_an_endpoint_that_is_not_there_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["audit", f"http://127.0.0.1:{free_port()}", "--live"]) == 2
    assert "ConnectError" in capsys.readouterr().err


def test_a_scripted_messages_upstream_is_not_live(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["audit", "http://127.0.0.1:1", "--live", "--messages-upstream"]) == 2
    assert "not with --live" in capsys.readouterr().err


def test_a_report_of_another_kind_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["audit", "http://127.0.0.1:1", "--report", "r.txt"]) == 2
    assert ".html or .json" in capsys.readouterr().err


@pytest.mark.parametrize("jobs", ["0", "-1", "two"])
def test_jobs_is_a_whole_number_of_at_least_one(
    capsys: pytest.CaptureFixture[str], jobs: str
) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["audit", "http://127.0.0.1:1", "--jobs", jobs])
    assert exit_.value.code == 2
    assert "--jobs" in capsys.readouterr().err


def serve_for_audit(
    tmp_path: Path,
    upstream: int,
    tpx: Sequence[str] = (sys.executable, "-m", "tpx.cli"),
    cwd: Path = ROOT,
    messages: bool = False,
    **extra: str,
) -> tuple[subprocess.Popen[bytes], str]:
    """``tpx serve`` (*tpx*: the command that runs tpx, in *cwd*) on a free port for the
    OpenAI-compatible upstream on *upstream* (*messages*: the Anthropic one, passed
    through), once ``/healthz`` answers 200."""
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG", "TMPDIR")}
    if messages:
        env.update(
            ANTHROPIC_API_KEY=UPSTREAM_API_KEY, ANTHROPIC_BASE_URL=f"http://127.0.0.1:{upstream}"
        )
    else:
        env.update(TPX_OAUTH_TOKEN=UPSTREAM_KEY, TPX_BASE_URL=f"http://127.0.0.1:{upstream}/v1")
    env.update(TPX_GATEWAY_KEY="audit-key", **extra)
    log = tmp_path / "serve.log"
    with log.open("wb") as out:  # a file: one log line per exchange never fills a pipe
        serve = subprocess.Popen(
            [*tpx, "serve", "--host", "127.0.0.1", "--port", "0"],
            cwd=cwd,
            env=env,
            stderr=out,
        )
    for _ in range(3000):  # the start-up contract: the address, then /healthz says 200
        found = re.search(r"listening on (http://[0-9.]+:[0-9]+)", log.read_text())
        if found is not None:
            with contextlib.suppress(httpx2.TransportError):
                if httpx2.get(found.group(1) + "/healthz", timeout=30).status_code == 200:
                    return serve, found.group(1)
        if serve.poll() is not None:
            break
        time.sleep(0.02)
    serve.terminate()
    serve.wait(30)
    raise AssertionError(log.read_text())


@pytest.mark.parametrize("messages", [False, True], ids=["gateway", "pass-through"])
def test_tpx_audit_of_tpx_serve_exits_0_with_its_report(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], messages: bool
) -> None:
    upstream = free_port()
    serve, url = serve_for_audit(tmp_path, upstream, messages=messages)
    try:
        html = tmp_path / "tpx.html"
        args = ["audit", url, "--key", "audit-key", "--report", str(html)]
        args += ["--messages-upstream", "--jobs", "3"] * messages  # and three in flight
        code = main([*args, "--upstream-listen", f"127.0.0.1:{upstream}"])
        assert code == 0
        assert "every check passes" in html.read_text(encoding="utf-8")
        mode = "pass-through" if messages else "gateway"
        assert f"({mode} mode)" in capsys.readouterr().out
    finally:
        serve.terminate()
        serve.wait(30)


def test_live_mode_on_tpx_serve_before_a_model(tmp_path: Path) -> None:
    """--live: tpx serve in front of the e2e scripted model (its first tool turn asks for a
    call, the next answers), the tool round answered and a forged result refused."""
    port = free_port()
    model = subprocess.Popen(
        [sys.executable, "-m", "tests.e2e.fake_openai", "--port", str(port)],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    serve = None
    try:
        serve, url = serve_for_audit(tmp_path, port, TPX_MODEL="fake-model")
        path = tmp_path / "live.json"
        assert main(["audit", url, "--key", "audit-key", "--live", "--report", str(path)]) == 0
        doc = json.loads(path.read_text())
        status = {c["name"]: c["status"] for c in doc["checks"]}
        assert status["Refusal"] == "pass"
        assert status["Refinement"] == "n/a"
        assert doc["requests"] == 7  # three turns; each tool call answered, then forged
    finally:
        for proc in (serve, model):
            if proc is not None:
                proc.terminate()
                proc.wait(30)
