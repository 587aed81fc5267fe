"""The billing-header switch from the config file: ``[context] drop_billing_header`` for the
gateway's upstream and as every ``[[upstreams]]`` entry's default, ``drop_billing_header`` in an
entry for that upstream. End to end through ``tpx serve`` on loopback: Claude Code's recorded
first turn reaches the fake upstream with its ``x-anthropic-billing-header`` block only where the
switch is off."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx2
import orjson
import pytest

from tpx.errors import ConfigurationError
from tpx.gateway.context.config import context_config
from tpx.gateway.settings import load_settings

from ..conftest import GATEWAY_KEY, UPSTREAM_TOKEN, FakeServer, serving
from ..fakes import FakeUpstream
from ..test_cli import tpx_serve

RECORDED = (
    Path(__file__).resolve().parents[2]
    / "fixtures"
    / "clients"
    / "claude-code"
    / "2.1.197"
    / "bash"
    / "002-post-v1-messages.json"
)
HEADER = "x-anthropic-billing-header"
ENV = {"TPX_OAUTH_TOKEN": "tok", "TPX_BASE_URL": "http://127.0.0.1:9/v1", "TPX_MODEL": "m"}


def _turn(model: str) -> dict[str, Any]:
    body: dict[str, Any] = orjson.loads(RECORDED.read_bytes())["body"]
    assert body["system"][0]["text"].startswith(HEADER + ":")
    return {**body, "model": model, "stream": False}


def _sent_header(seen: dict[str, Any]) -> bool:
    """Did the upstream get the billing header (anywhere in its messages)?"""
    return HEADER in orjson.dumps(seen["messages"]).decode()


def _config(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "gateway.toml"
    path.write_text(text)
    return path


def test_the_switch_defaults_on_and_is_read_from_the_context_table(tmp_path: Path) -> None:
    assert context_config({}).drop_billing_header is True
    assert load_settings(env=ENV).profile.drop_billing_header is True
    path = _config(
        tmp_path, '[upstream]\nprofile = "vllm"\n[context]\ndrop_billing_header = false\n'
    )
    settings = load_settings(env=ENV, config_file=path)
    assert settings.context.drop_billing_header is False
    assert settings.profile.name == "vllm"
    assert settings.profile.drop_billing_header is False
    with pytest.raises(ConfigurationError, match="drop_billing_header has the wrong type"):
        context_config({"context": {"drop_billing_header": "no"}})


def test_an_upstreams_entry_overrides_the_context_table(tmp_path: Path) -> None:
    path = _config(
        tmp_path,
        "[context]\ndrop_billing_header = false\n"
        '[[upstreams]]\nname = "a"\nbase_url = "http://127.0.0.1:9001"\nprofile = "vllm"\n'
        '[[upstreams]]\nname = "b"\nbase_url = "http://127.0.0.1:9002"\nprofile = "vllm"\n'
        "drop_billing_header = true\n",
    )
    routing = load_settings(env=ENV, config_file=path).routing
    assert routing is not None
    assert routing.upstream("a").profile.drop_billing_header is False
    assert routing.upstream("b").profile.drop_billing_header is True
    bad = _config(
        tmp_path,
        '[[upstreams]]\nname = "a"\nbase_url = "http://127.0.0.1:9001"\ndrop_billing_header = 0\n',
    )
    with pytest.raises(ConfigurationError, match=r"upstreams\[0\]\.drop_billing_header"):
        load_settings(env=ENV, config_file=bad)


def _post(url: str, body: dict[str, Any]) -> None:
    response = httpx2.post(
        f"{url}/v1/messages", json=body, headers={"x-api-key": GATEWAY_KEY}, timeout=30
    )
    assert response.status_code == 200, response.text


@pytest.mark.parametrize("drop", [None, True, False], ids=["default", "on", "off"])
def test_tpx_serve_sends_the_header_only_when_the_switch_is_off(
    tmp_path: Path, drop: bool | None
) -> None:
    text = '[upstream]\nprofile = "vllm"\n'
    if drop is not None:
        text += f"[context]\ndrop_billing_header = {str(drop).lower()}\n"
    fake = FakeUpstream("TPX")
    with serving(FakeServer(fake)) as upstream:
        env = {
            "TPX_OAUTH_TOKEN": UPSTREAM_TOKEN,
            "TPX_BASE_URL": f"{upstream}/v1",
            "TPX_GATEWAY_KEY": GATEWAY_KEY,
        }
        with tpx_serve(env, "--config", str(_config(tmp_path, text))) as (url, _):
            _post(url, _turn("claude-sonnet-5"))
    assert len(fake.seen) == 1
    assert _sent_header(fake.seen[0]) is (drop is False)
    assert "You are a Claude agent" in orjson.dumps(fake.seen[0]["messages"]).decode()


def test_tpx_serve_keeps_the_header_for_the_upstream_whose_switch_is_off(tmp_path: Path) -> None:
    keeping, dropping = FakeUpstream("TPX"), FakeUpstream("TPX")
    with serving(FakeServer(keeping)) as keep_url, serving(FakeServer(dropping)) as drop_url:
        text = (
            f'[[upstreams]]\nname = "keeps"\nbase_url = "{keep_url}/v1"\nprofile = "vllm"\n'
            'models = ["kept"]\ndrop_billing_header = false\n'
            f'[[upstreams]]\nname = "drops"\nbase_url = "{drop_url}/v1"\nprofile = "vllm"\n'
            'models = ["dropped"]\n'
            '[[routes]]\nmodel = ["kept"]\nupstreams = ["keeps"]\n'
            '[[routes]]\nmodel = ["dropped"]\nupstreams = ["drops"]\n'
        )
        env = {"TPX_OAUTH_TOKEN": UPSTREAM_TOKEN, "TPX_GATEWAY_KEY": GATEWAY_KEY}
        with tpx_serve(env, "--config", str(_config(tmp_path, text))) as (url, _):
            _post(url, _turn("kept"))
            _post(url, _turn("dropped"))
    # (the upstreams also see the pool's recovery probes, which carry no messages)
    assert [_sent_header(seen) for seen in keeping.seen if "messages" in seen] == [True]
    assert [_sent_header(seen) for seen in dropping.seen if "messages" in seen] == [False]
