"""The low findings (docs/limits.md): who may read /metrics, a trace folder that cannot be
written, what HEAD says."""

from __future__ import annotations

import logging
import subprocess
import time
from pathlib import Path

import httpx2
import orjson
import pytest

from tests.e2e import procs
from tests.e2e.procs import GATEWAY_KEY
from tests.security.conftest import local_gateway
from tpx.errors import ConfigurationError
from tpx.gateway.settings import load_settings

AUTH = {"x-api-key": GATEWAY_KEY}
ENV = {"TPX_OAUTH_TOKEN": "t", "TPX_BASE_URL": "http://127.0.0.1:9/v1"}


def test_metrics_are_open_by_default_and_can_require_the_key() -> None:
    with local_gateway() as (url, _), httpx2.Client(base_url=url, timeout=30) as client:
        assert client.get("/metrics").status_code == 200
    with local_gateway(metrics_auth=True) as (url, _), httpx2.Client(base_url=url) as client:
        refused = client.get("/metrics")
        assert refused.status_code == 401
        assert refused.json()["error"]["type"] == "authentication_error"
        assert "tpx_gateway" not in refused.text
        assert client.get("/metrics", headers={"x-api-key": "wrong"}).status_code == 401
        shown = client.get("/metrics", headers=AUTH)
        assert shown.status_code == 200
        assert 'tpx_gateway_requests_total{endpoint="metrics",status="401"} 2.0' in shown.text
        assert client.get("/healthz").status_code == 200, "probes stay open"
        assert client.get("/").status_code == 200


def test_metrics_auth_from_the_flag_or_the_file(tmp_path: Path) -> None:
    assert load_settings(env=ENV).metrics_auth is False
    assert load_settings(env=ENV, metrics_auth=True).metrics_auth is True
    config = tmp_path / "tpx.toml"
    config.write_text("[server]\nmetrics_auth = true\n")
    assert load_settings(env=ENV, config_file=config).metrics_auth is True
    config.write_text('[server]\nmetrics_auth = "yes"\n')
    with pytest.raises(ConfigurationError, match="metrics_auth must be true or false"):
        load_settings(env=ENV, config_file=config)


def test_a_trace_dir_that_goes_away_never_breaks_an_exchange(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The exchange answers as it would have (a pairing refusal stays a 400) and its log
    line is written, saying why its trace is missing."""
    traces = tmp_path / "traces"
    traces.mkdir()
    caplog.set_level(logging.INFO, logger="tpx.gateway")
    with local_gateway(trace_dir=traces) as (url, _), httpx2.Client(base_url=url) as client:
        ok = {"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]}
        assert client.post("/v1/messages", headers=AUTH, json=ok).status_code == 200
        deadline = time.monotonic() + 10  # the line (and the trace) come once the reply went
        while not any(traces.iterdir()) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(list(traces.iterdir())) == 1
        for trace in traces.iterdir():
            trace.unlink()
        traces.rmdir()
        answered = client.post("/v1/messages", headers=AUTH, json=ok)
        assert answered.status_code == 200
        unpaired = {
            "model": "m",
            "max_tokens": 8,
            "messages": [
                {"role": "user", "content": "hi"},
                {
                    "role": "assistant",
                    "content": [{"type": "tool_use", "id": "toolu_1", "name": "t", "input": {}}],
                },
                {"role": "user", "content": "no result"},
            ],
        }
        refused = client.post("/v1/messages", headers=AUTH, json=unpaired)
        assert refused.status_code == 400, refused.text
        assert refused.json()["error"]["type"] == "invalid_request_error"
        assert "tool_result" in refused.json()["error"]["message"], refused.text
        deadline = time.monotonic() + 10
        while len(_lines(caplog)) < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
    lines = _lines(caplog)
    assert len(lines) == 3
    assert "trace_error" not in lines[0]
    assert [line["trace_error"] for line in lines[1:]] == ["No such file or directory"] * 2


def _lines(caplog: pytest.LogCaptureFixture) -> list[dict[str, object]]:
    return [orjson.loads(r.getMessage()) for r in caplog.records if r.getMessage()[:1] == "{"]


def test_tpx_serve_stops_at_start_on_a_trace_dir_it_cannot_write(tmp_path: Path) -> None:
    taken = tmp_path / "a-file"
    taken.write_text("")
    env = procs.base_env()
    env.update(ENV)
    done = subprocess.run(
        [str(procs.tpx_executable()), "serve", "--port", "0", "--trace-dir", str(taken)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert f"--trace-dir {taken}: cannot write traces there" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("path", ["/", "/healthz"])
def test_head_says_what_get_sends(path: str) -> None:
    with local_gateway() as (url, _), httpx2.Client(base_url=url) as client:
        got = client.get(path)
        head = client.head(path)
    assert head.status_code == got.status_code == 200
    assert head.content == b""
    assert head.headers["content-length"] == str(len(got.content)) != "0"
    assert head.headers["content-type"] == got.headers["content-type"]
