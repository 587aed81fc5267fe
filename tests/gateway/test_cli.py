"""``tpx serve`` as a process: flags, readiness, one log line per exchange, SIGTERM."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import anthropic
import httpx2
import orjson
import pytest

from tpx.cli import EXIT_SIGTERM, build_parser

from .conftest import GATEWAY_KEY, UPSTREAM_TOKEN, FakeServer, serving
from .fakes import FakeUpstream


@contextlib.contextmanager
def tpx_serve(env: dict[str, str], *args: str) -> Iterator[tuple[str, subprocess.Popen[str]]]:
    """Start ``tpx serve --port 0``; yield its base URL once /healthz answers 200."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "tpx.cli", "serve", "--port", "0", *args],
        env={"PATH": os.environ.get("PATH", ""), **env},
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline()
        assert line.startswith("tpx serve: listening on http://127.0.0.1:"), line
        url = line.split()[4]
        for _ in range(3000):
            with contextlib.suppress(httpx2.HTTPError):
                if httpx2.get(f"{url}/healthz").status_code == 200:
                    break
            time.sleep(0.01)
        yield url, proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(30)
        if proc.stderr is not None:
            proc.stderr.close()


def test_serve_flags_parse() -> None:
    args = build_parser().parse_args(
        ["serve", "--host", "127.0.0.1", "--port", "8082", "--workers", "2", "--log-bodies"]
    )
    assert (args.host, args.port, args.workers, args.log_bodies) == ("127.0.0.1", 8082, 2, True)
    with pytest.raises(SystemExit):
        build_parser().parse_args(["serve", "--workers", "0"])


def test_serve_end_to_end_with_a_loopback_upstream(tmp_path: Path) -> None:
    fake = FakeUpstream("TPX")
    with serving(FakeServer(fake)) as upstream:
        env = {
            "TPX_OAUTH_TOKEN": UPSTREAM_TOKEN,
            "TPX_BASE_URL": f"{upstream}/v1",
            "TPX_GATEWAY_KEY": GATEWAY_KEY,
        }
        with tpx_serve(env) as (url, proc):
            client = anthropic.Anthropic(api_key=GATEWAY_KEY, base_url=url)
            history: list[object] = [{"role": "user", "content": "cli-conv"}]
            first = client.messages.create(model="claude-x", max_tokens=64, messages=history)  # type: ignore[arg-type]
            results = [
                {"type": "tool_result", "tool_use_id": b.id, "content": "ok"}
                for b in first.content
                if b.type == "tool_use"
            ]
            history += [
                {"role": "assistant", "content": first.content},
                {"role": "user", "content": results},
            ]
            with client.messages.stream(
                model="claude-x",
                max_tokens=64,
                messages=history,  # type: ignore[arg-type]
                extra_headers={"X-Claude-Code-Session-Id": "sess-1"},
            ) as stream:
                final = stream.get_final_message()
            assert final.stop_reason == "end_turn"
            client.close()
            proc.send_signal(signal.SIGTERM)
            # uvicorn shuts down gracefully, then re-raises the signal it captured, which
            # tpx.cli turns into the conventional 128 + SIGTERM
            assert proc.wait(30) == EXIT_SIGTERM
            assert proc.stderr is not None
            log = proc.stderr.read()
    assert fake.headers[0]["authorization"] == f"Bearer {UPSTREAM_TOKEN}"
    assert UPSTREAM_TOKEN not in log
    assert GATEWAY_KEY not in log
    records = [orjson.loads(line) for line in log.splitlines() if line.startswith("{")]
    assert len(records) == 2
    assert records[0]["actions"] == ["CallerSend", "ProviderReply", "Deliver"]
    assert records[1]["session"] == "sess-1"
    assert records[1]["stream"] is True
    assert all(r["request_id"].startswith("req_") for r in records)


def test_serve_refuses_bad_configuration(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("[limits]\nmax_body_bytes = -1\n")
    done = subprocess.run(
        [sys.executable, "-m", "tpx.cli", "serve", "--config", str(bad)],
        env={"PATH": os.environ.get("PATH", "")},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert "limits.max_body_bytes must be > 0" in done.stderr


def test_serve_refuses_an_unknown_profile() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "tpx.cli", "serve", "--profile", "no-such-server"],
        env={"PATH": os.environ.get("PATH", ""), "TPX_THINKING_SECRET": "t-SECRET-9"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert "unknown upstream profile 'no-such-server'" in done.stderr
    assert "t-SECRET-9" not in done.stderr


def test_sigterm_lets_a_running_stream_finish() -> None:
    fake = FakeUpstream("TPX", pause=1.5)
    with serving(FakeServer(fake)) as upstream:
        env = {"TPX_OAUTH_TOKEN": UPSTREAM_TOKEN, "TPX_BASE_URL": upstream}
        with tpx_serve(env) as (url, proc), httpx2.Client(base_url=url, timeout=30) as client:
            body = {
                "model": "m",
                "max_tokens": 8,
                "stream": True,
                "messages": [{"role": "user", "content": "SILENT shutdown"}],
            }
            with client.stream("POST", "/v1/messages", json=body) as reply:
                chunks = reply.iter_bytes()
                first = next(chunks)  # message_start: the stream is running
                proc.send_signal(signal.SIGTERM)
                rest = b"".join(chunks)
            assert first.startswith(b"event: message_start")
            assert rest.rstrip().endswith(b'data: {"type":"message_stop"}')
            assert proc.wait(30) == EXIT_SIGTERM


def test_two_workers_serve_one_gateway() -> None:
    """Each request on a new connection: whichever worker answers accepts the ids and the
    thinking signatures any of them issued (both secrets shared, neither configured)."""
    fake = FakeUpstream("TPX", reasoning="I list the files.")
    with serving(FakeServer(fake)) as upstream:
        env = {"TPX_OAUTH_TOKEN": UPSTREAM_TOKEN, "TPX_BASE_URL": upstream}
        with tpx_serve(env, "--workers", "2", "--profile", "deepseek") as (url, proc):
            for n in range(6):
                history: list[object] = [{"role": "user", "content": f"workers-{n}"}]
                body = {"model": "m", "max_tokens": 8, "messages": history}
                first = httpx2.post(f"{url}/v1/messages", json=body, timeout=30).json()
                results = [
                    {"type": "tool_result", "tool_use_id": b["id"], "content": "ok"}
                    for b in first["content"]
                    if b["type"] == "tool_use"
                ]
                assert len(results) == 2
                history += [
                    {"role": "assistant", "content": first["content"]},
                    {"role": "user", "content": results},
                ]
                assert first["content"][0]["type"] == "thinking"
                final = httpx2.post(f"{url}/v1/messages", json=body, timeout=30)
                assert final.status_code == 200
                assert final.json()["stop_reason"] == "end_turn"
                # the thinking block verified on whichever worker took the second turn
                (assistant,) = [m for m in fake.seen[-1]["messages"] if m["role"] == "assistant"]
                assert assistant["reasoning_content"] == "I list the files."
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(60) == 0
            assert proc.stderr is not None
            log = proc.stderr.read()
    records = [orjson.loads(line) for line in log.splitlines() if line.startswith("{")]
    assert len(records) == 12
    assert all(r["outcome"] == "ok" for r in records)
