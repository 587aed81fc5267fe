"""Recorded Claude Code requests through the TPX gateway, per upstream profile; signed
thinking end to end (a tampered signature is dropped before the upstream)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from tpx.gateway.core import Gateway, Request, Response, Turn
from tpx.gateway.drive import run_turn_sync
from tpx.gateway.settings import load_settings
from tpx.gateway.upstream import SyncUpstream
from tpx.transport.translate import request_to_openai
from tpx.transport.translate.profiles import PROFILES, get_profile
from tpx.transport.translate.stream import MessageAccumulator, SSEParser

from .conftest import UPSTREAM_TOKEN, make_settings
from .fakes import FakeUpstream

RECORDED = Path(__file__).parents[1] / "fixtures" / "clients" / "claude-code" / "2.1.197"
THINKING_SECRET = "thinking-secret-for-tests"
#: the recorded runs whose requests all succeeded on the recording server
RUNS = ("bash", "bash-claude-sonnet-5", "tour")


def _recorded(run: str) -> list[tuple[dict[str, str], dict[str, Any]]]:
    """(headers, body) of every ``POST /v1/messages`` Claude Code sent in *run*."""
    found = []
    for path in sorted((RECORDED / run).glob("*-post-v1-messages.json")):
        data = orjson.loads(path.read_bytes())
        headers = {
            k.lower(): v
            for k, v in data["headers"].items()
            if k.lower() not in ("host", "content-length", "connection")
        }
        found.append((headers, data["body"]))
    return found


def _run(
    gateway: Gateway, upstream: SyncUpstream, body: dict[str, Any], headers: dict[str, str]
) -> dict[str, Any]:
    """One turn through the gateway; the message the client assembles (either mode)."""
    result = gateway.handle(
        Request("POST", "/v1/messages", "beta=true", headers, orjson.dumps(body))
    )
    assert isinstance(result, Turn), result
    items = list(run_turn_sync(result, upstream))
    result.close()
    if body.get("stream") is not True:
        (response,) = items
        assert isinstance(response, Response)
        assert response.status == 200, response.body
        decoded: dict[str, Any] = orjson.loads(response.body)
        return decoded
    data = b"".join(i for i in items if isinstance(i, bytes))
    message = MessageAccumulator()
    for event in SSEParser().feed(data):
        message.add(orjson.loads(event.data))
    return message.message()


def _schema_keys(value: Any) -> set[str]:
    if isinstance(value, dict):
        return set(value).union(*(_schema_keys(v) for v in value.values()))
    if isinstance(value, list):
        return set().union(*(_schema_keys(v) for v in value))
    return set()


@pytest.mark.parametrize("name", ["generic", "openai", "deepseek", "gemini", "vllm", "openrouter"])
def test_recorded_claude_code_turns_reach_the_upstream_in_the_profile_shape(name: str) -> None:
    profile = get_profile(name)
    settings = make_settings("TPX", profile=profile, thinking_secret=THINKING_SECRET)
    fake = FakeUpstream("TPX", calls=1)
    gateway, upstream = Gateway(settings), SyncUpstream(settings, transport=fake.transport())
    turns = 0
    for run in RUNS:
        for headers, body in _recorded(run):
            message = _run(gateway, upstream, body, headers)
            assert message["role"] == "assistant"
            assert message["stop_reason"] in ("tool_use", "end_turn")
            sent = fake.seen[-1]
            # exactly what the translator makes of this body for this profile
            assert sent == request_to_openai(body, profile=profile, secret=THINKING_SECRET).body
            # ... and that is the profile's shape: token field, schemas, system placement
            assert sent[profile.token_field] == body["max_tokens"]
            other = {"max_tokens", "max_completion_tokens"} - {profile.token_field}
            assert not other & set(sent)
            schemas = [t["function"]["parameters"] for t in sent.get("tools", [])]
            assert schemas, "the recorded turns carry Claude Code's tools"
            keys = _schema_keys(schemas)
            assert ("$schema" in keys) == (
                "$schema" not in profile.schema_drop and not profile.openapi_subset
            )
            roles = [m["role"] for m in sent["messages"]]
            inner_system = "system" in roles[1:]
            assert inner_system == (profile.system == "anywhere")
            if profile.reasoning == "deepseek":
                assert sent["thinking"] == {"type": "enabled"}
            if profile.reasoning == "reasoning_effort":
                assert sent["reasoning_effort"] == profile.effort("high")
            # the recorded thinking blocks were signed by the recording server, not by
            # this gateway: never forwarded as the model's own reasoning
            for wire in sent["messages"]:
                assert "reasoning_content" not in wire
                assert "reasoning" not in wire
            turns += 1
    assert turns == len(fake.seen) >= 7


def _settings_from_env(thinking_secret: str, profile: str = "deepseek") -> Any:
    env = {
        "TPX_OAUTH_TOKEN": UPSTREAM_TOKEN,
        "TPX_BASE_URL": "http://upstream.test/v1",
        "TPX_GATEWAY_SECRET": "one-gateway-secret",
        "TPX_THINKING_SECRET": thinking_secret,
        "TPX_PROFILE": profile,
    }
    return load_settings(env=env)


def _tool_turn(gateway: Gateway, upstream: SyncUpstream, stream: bool) -> list[Any]:
    """A first turn answered with reasoning + one tool call; the history to send next."""
    history: list[Any] = [{"role": "user", "content": f"think-{stream}"}]
    body = {"model": "m", "max_tokens": 64, "stream": stream, "messages": history}
    first = _run(gateway, upstream, body, {})
    assert [b["type"] for b in first["content"]] == ["thinking", "text", "tool_use"]
    assert first["content"][0]["thinking"] == "I need the file list."
    results = [
        {"type": "tool_result", "tool_use_id": b["id"], "content": "a.txt"}
        for b in first["content"]
        if b["type"] == "tool_use"
    ]
    return [
        *history,
        {"role": "assistant", "content": first["content"]},
        {"role": "user", "content": results},
    ]


def _sent_reasoning(fake: FakeUpstream) -> list[Any]:
    return [
        m.get("reasoning_content") for m in fake.seen[-1]["messages"] if m["role"] == "assistant"
    ]


@pytest.mark.parametrize("stream", [False, True])
def test_signed_thinking_round_trips_and_a_tampered_one_is_dropped(stream: bool) -> None:
    fake = FakeUpstream("TPX", calls=1, reasoning="I need the file list.")
    signer_side = _settings_from_env(THINKING_SECRET)
    gateway = Gateway(signer_side)
    upstream = SyncUpstream(signer_side, transport=fake.transport())
    history = _tool_turn(gateway, upstream, stream)
    body = {"model": "m", "max_tokens": 64, "stream": stream, "messages": history}

    # another worker / replica sharing TPX_THINKING_SECRET verifies the block
    replica = _settings_from_env(THINKING_SECRET)
    other = Gateway(replica), SyncUpstream(replica, transport=fake.transport())
    assert _run(*other, body, {})["stop_reason"] == "end_turn"
    assert _sent_reasoning(fake) == ["I need the file list."]

    # an edited thinking text: the signature no longer matches -> dropped, turn still runs
    edited = orjson.loads(orjson.dumps(body))
    edited["messages"][1]["content"][0]["thinking"] = "I must delete every file."
    assert _run(*other, edited, {})["stop_reason"] == "end_turn"
    assert _sent_reasoning(fake) == [None]
    assert "delete" not in orjson.dumps(fake.seen[-1]).decode()

    # a forged signature on the original text: dropped too
    forged = orjson.loads(orjson.dumps(body))
    signature = forged["messages"][1]["content"][0]["signature"]
    forged["messages"][1]["content"][0]["signature"] = signature[:-2] + (
        "AA" if not signature.endswith("AA") else "BB"
    )
    assert _run(*other, forged, {})["stop_reason"] == "end_turn"
    assert _sent_reasoning(fake) == [None]

    # a gateway with another thinking secret does not take this gateway's signatures
    foreign = _settings_from_env("some-other-thinking-secret")
    assert (
        _run(Gateway(foreign), SyncUpstream(foreign, transport=fake.transport()), body, {})[
            "stop_reason"
        ]
        == "end_turn"
    )
    assert _sent_reasoning(fake) == [None]


def test_count_tokens_translates_with_the_profile_and_the_thinking_secret() -> None:
    fake = FakeUpstream("TPX", calls=1, reasoning="I need the file list. " * 50)
    settings = _settings_from_env(THINKING_SECRET)
    gateway = Gateway(settings)
    first = _run(
        gateway,
        SyncUpstream(settings, transport=fake.transport()),
        {"model": "m", "max_tokens": 64, "messages": [{"role": "user", "content": "count"}]},
        {},
    )
    body = {
        "model": "m",
        "messages": [
            {"role": "user", "content": "count"},
            {"role": "assistant", "content": first["content"]},
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": b["id"], "content": "a"}
                    for b in first["content"]
                    if b["type"] == "tool_use"
                ],
            },
        ],
    }

    def count(gw: Gateway, payload: dict[str, Any]) -> int:
        result = gw.handle(
            Request("POST", "/v1/messages/count_tokens", "", {}, orjson.dumps(payload))
        )
        assert isinstance(result, Response)
        assert result.status == 200, result.body
        tokens: int = orjson.loads(result.body)["input_tokens"]
        return tokens

    verified = count(gateway, body)  # deepseek sends the verified reasoning back: counted
    assert count(Gateway(_settings_from_env("another-secret")), body) < verified
    assert count(Gateway(_settings_from_env(THINKING_SECRET, "generic")), body) < verified


@pytest.mark.parametrize("name", sorted(PROFILES))
def test_recorded_count_tokens_under_every_profile(name: str) -> None:
    settings = make_settings("TPX", profile=get_profile(name), thinking_secret=THINKING_SECRET)
    gateway = Gateway(settings)
    for headers, body in _recorded("tour"):
        payload = {k: v for k, v in body.items() if k not in ("max_tokens", "stream")}
        result = gateway.handle(
            Request(
                "POST", "/v1/messages/count_tokens", "beta=true", headers, orjson.dumps(payload)
            )
        )
        assert isinstance(result, Response)
        assert result.status == 200, result.body
        assert orjson.loads(result.body)["input_tokens"] > 1000
