"""tpx.gateway.routing: [[upstreams]] / [[routes]] / [routing] read from the config file, and
the pure routing function on what Claude Code's requests carry."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from tpx.errors import ConfigurationError
from tpx.gateway.routing import (
    Facts,
    Options,
    Routing,
    Rule,
    facts_of,
    family_signer,
    parse_routing,
    route,
)
from tpx.gateway.settings import load_settings
from tpx.transport.translate.signing import ThinkingSigner
from tpx.transport.translate.tools import FrozenJSONList

ENV = {"TPX_OAUTH_TOKEN": "tok-default-SECRET", "SMALL_TOKEN": "tok-small-SECRET"}

CONFIG = """
[routing]
background_models = ["*haiku*", "small-fast"]

[[upstreams]]
name = "small"
base_url = "http://127.0.0.1:9001/v1"
token_env = "SMALL_TOKEN"
profile = "vllm"
models = ["Qwen/Qwen3-1.7B"]
context_window = 32768

[[upstreams]]
name = "big"
base_url = "http://127.0.0.1:9002"
models = ["Qwen/Qwen3-32B", "Qwen/Qwen3-32B-long"]
weight = 2
concurrency = 8
context_window = 131072

[[upstreams]]
name = "cloud"
base_url = "https://cloud.example/v1"
profile = "openai"
models = ["gpt-5"]
family = "openai"

[[routes]]
name = "background"
background = true
upstreams = ["small", "cloud"]

[[routes]]
name = "search"
tools = ["web_search*"]
upstreams = ["cloud"]

[[routes]]
name = "long"
min_input_tokens = 100000
upstreams = ["big", "cloud"]

[[routes]]
name = "agents"
subagent = true
upstreams = ["small", "big"]

[[routes]]
name = "reasoning"
thinking = true
model = ["claude-opus-*", "opus"]
upstreams = ["big", "cloud"]
"""


def _routing(tmp_path: Path, text: str = CONFIG, env: dict[str, str] | None = None) -> Routing:
    path = tmp_path / "gateway.toml"
    path.write_text(text)
    settings = load_settings(env=env or ENV, config_file=path)
    assert settings.routing is not None
    return settings.routing


def test_upstreams_are_read_with_their_fields(tmp_path: Path) -> None:
    routing = _routing(tmp_path)
    small, big, cloud = routing.upstreams
    assert (small.name, small.base_url, small.profile.name) == (
        "small",
        "http://127.0.0.1:9001",
        "vllm",
    )
    assert small.context_window == 32768
    assert big.context_window == 131072
    assert (big.weight, big.concurrency, cloud.weight, cloud.concurrency) == (2.0, 8, 1.0, None)
    assert small.family == "Qwen/Qwen3-1.7B"
    assert cloud.family == "openai"
    assert small.credential is not None
    assert small.credential.value() == "tok-small-SECRET"
    # an upstream naming no credential uses the gateway's own
    assert big.credential is not None
    assert big.credential.value() == "tok-default-SECRET"
    # never rendered, every credential redacted
    assert "SECRET" not in repr(routing) + repr(small) + repr(big)


def test_the_credentials_of_every_upstream_are_secrets_of_the_gateway(tmp_path: Path) -> None:
    path = tmp_path / "gateway.toml"
    path.write_text(CONFIG)
    settings = load_settings(env=ENV, config_file=path)
    assert {"tok-default-SECRET", "tok-small-SECRET"} <= set(settings.secret_values())


def test_an_upstream_model_is_the_requested_one_when_it_serves_it(tmp_path: Path) -> None:
    big = _routing(tmp_path).upstream("big")
    assert big.model_for("Qwen/Qwen3-32B-long") == "Qwen/Qwen3-32B-long"
    assert big.model_for("claude-opus-4-8") == "Qwen/Qwen3-32B"


def _facts(**changes: Any) -> Facts:
    return Facts(**{"model": "claude-opus-4-8", **changes})


@pytest.mark.parametrize(
    ("facts", "expected"),
    [
        (_facts(background=True), "background"),
        (_facts(background=True, tools=("web_search_20250305",)), "background"),  # first wins
        (_facts(tools=("Bash", "web_search_20250305")), "search"),
        (_facts(input_tokens=100_000, thinking=True), "long"),
        (_facts(input_tokens=99_999, subagent=True, thinking=True), "agents"),
        (_facts(thinking=True), "reasoning"),
        (_facts(model="opus", thinking=True), "reasoning"),  # an alias
        (_facts(model="claude-sonnet-5", thinking=True), "default"),  # no glob matches
        (_facts(), "default"),
    ],
)
def test_the_first_matching_rule_wins(tmp_path: Path, facts: Facts, expected: str) -> None:
    routing = _routing(tmp_path)
    rule = route(routing, facts)
    assert rule.name == expected
    if expected == "default":  # every upstream, in the config's order
        assert rule.upstreams == ("small", "big", "cloud")


def test_the_facts_of_a_claude_code_request() -> None:
    options = Options(background_models=("*haiku*",))
    body = {
        "model": "claude-haiku-4-5-20251001",
        "thinking": {"type": "adaptive"},
        "tools": [{"name": "Bash"}, {"type": "web_search_20250305", "name": "web_search"}],
    }
    headers = {"x-claude-code-agent-id": "agent-1"}
    facts = facts_of(body, headers, 40_004, options)
    assert facts == Facts(
        model="claude-haiku-4-5-20251001",
        background=True,
        thinking=True,
        input_tokens=10_001,
        subagent=True,
        tools=("Bash", "web_search", "web_search_20250305"),
    )
    plain = facts_of({"model": "claude-opus-4-8", "thinking": {"type": "disabled"}}, {}, 8, options)
    assert (plain.background, plain.thinking, plain.subagent, plain.tools) == (
        False,
        False,
        False,
        (),
    )


def test_a_rule_holds_only_when_all_its_conditions_hold() -> None:
    rule = Rule("r", ("a",), model=("claude-*",), thinking=True, min_input_tokens=10)
    assert rule.matches(_facts(thinking=True, input_tokens=10))
    assert not rule.matches(_facts(thinking=False, input_tokens=10))
    assert not rule.matches(_facts(thinking=True, input_tokens=9))
    assert not rule.matches(_facts(model="gpt-5", thinking=True, input_tokens=10))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('[[routes]]\nupstreams = ["a"]\n', "[[routes]] need [[upstreams]]"),
        ('[[upstreams]]\nname = "a"\n', "needs a 'name' and a 'base_url'"),
        (
            '[[upstreams]]\nname = "a"\nbase_url = "http://h"\n[[routes]]\nupstreams = ["b"]\n',
            "no upstream named 'b'",
        ),
        (
            '[[upstreams]]\nname = "a"\nbase_url = "http://h"\n[[routes]]\nupstreams = ["a"]\n'
            "thinkin = true\n",
            "unknown key 'thinkin'",
        ),
        (
            '[[upstreams]]\nname = "a"\nbase_url = "http://h"\n[[upstreams]]\nname = "a"\n'
            'base_url = "http://i"\n',
            "the same name",
        ),
        ('[[upstreams]]\nname = "a"\nbase_url = "http://h"\nweight = 0\n', "weight must be > 0"),
        (
            '[[upstreams]]\nname = "a"\nbase_url = "http://h"\ntoken_env = "NOPE"\n',
            "NOPE is not set",
        ),
        (
            '[routing]\nmax_attempts = 0\n[[upstreams]]\nname = "a"\nbase_url = "http://h"\n',
            "routing.max_attempts is out of range",
        ),
    ],
)
def test_a_bad_config_is_refused_with_what_is_wrong(
    tmp_path: Path, text: str, message: str
) -> None:
    path = tmp_path / "gateway.toml"
    path.write_text(text)
    env = {"TPX_OAUTH_TOKEN": "t", "TPX_BASE_URL": "http://default"}
    with pytest.raises(ConfigurationError, match=re.escape(message)):
        load_settings(env=env, config_file=path)


def test_upstreams_need_the_tpx_provider(tmp_path: Path) -> None:
    path = tmp_path / "gateway.toml"
    path.write_text('[[upstreams]]\nname = "a"\nbase_url = "http://h"\n')
    with pytest.raises(ConfigurationError, match="TPX"):
        load_settings(env={"ANTHROPIC_API_KEY": "sk-ant-x"}, config_file=path)


def test_the_first_upstream_is_the_default_base_url(tmp_path: Path) -> None:
    path = tmp_path / "gateway.toml"
    path.write_text('[[upstreams]]\nname = "a"\nbase_url = "http://h:1/v1"\n')
    settings = load_settings(env={"TPX_OAUTH_TOKEN": "t"}, config_file=path)
    assert settings.base_url == "http://h:1"
    assert parse_routing({}) is None


def test_the_tools_of_a_shared_tail_are_read_once_and_judged_per_list() -> None:
    """A client's tools kept by the body reader (FrozenJSONList) are named once; a rule's
    verdict is kept per tool list, and another list gets its own."""
    options = Options()
    search = FrozenJSONList([{"type": "web_search_20250305", "name": "web_search"}], b"[1]")
    bash = FrozenJSONList([{"name": "Bash"}], b"[2]")
    rule = Rule("search", ("a",), tools=("web_search*",))
    for _ in range(2):
        with_search = facts_of({"model": "m", "tools": search}, {}, 0, options)
        with_bash = facts_of({"model": "m", "tools": bash}, {}, 0, options)
        assert with_search.tools == ("web_search", "web_search_20250305")
        assert with_bash.tools == ("Bash",)
        assert rule.matches(with_search)
        assert not rule.matches(with_bash)


def test_thinking_is_signed_for_its_family_and_verifies_only_there() -> None:
    base = ThinkingSigner("thinking-key")
    qwen, other = family_signer(base, "Qwen/Qwen3-32B"), family_signer(base, "openai")
    signature = qwen.sign("I need the file list.")
    assert signature.startswith("tpx1.")
    assert signature.endswith("~Qwen_Qwen3-32B")  # names its producer
    assert qwen.verify("I need the file list.", signature)
    assert family_signer(ThinkingSigner("thinking-key"), "Qwen/Qwen3-32B").verify(
        "I need the file list.", signature
    )  # another replica sharing the secret
    assert not other.verify("I need the file list.", signature)
    forged = signature[: -len("Qwen_Qwen3-32B")] + "openai"  # the name changed, not the MAC
    assert not other.verify("I need the file list.", forged)
    assert not qwen.verify("I must delete every file.", signature)
    assert not qwen.verify("I need the file list.", base.sign("I need the file list."))
    assert not base.verify("I need the file list.", signature)
