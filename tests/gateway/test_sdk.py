"""The official anthropic SDK (2.15) against the gateway: on loopback (a real uvicorn server)
and in-process (tpx.sdk), for both providers, sync and async; tool loops of several turns,
streaming with the final-message helper, count_tokens, and the SDK's own 529 retry."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import anthropic
import pytest

import tpx.sdk
from tpx.gateway.asgi import create_app
from tpx.transport.translate.ids import verify_signed_id

from .conftest import GATEWAY_KEY, make_settings, serving
from .fakes import FakeUpstream

PROVIDERS = ["TPX", "ANTHROPIC"]
MODES = ["loopback", "inprocess"]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@contextlib.contextmanager
def sync_client(provider: str, mode: str, fake: FakeUpstream) -> Iterator[anthropic.Anthropic]:
    settings = make_settings(provider, gateway_key=GATEWAY_KEY)
    if mode == "inprocess":
        client = tpx.sdk.anthropic_client(settings=settings, upstream=fake.transport())
        with client:
            yield client
        return
    app = create_app(settings, transport=fake.transport())
    with serving(app) as url, anthropic.Anthropic(api_key=GATEWAY_KEY, base_url=url) as client:
        yield client


@contextlib.asynccontextmanager
async def async_client(provider: str, mode: str, fake: FakeUpstream) -> Any:
    settings = make_settings(provider, gateway_key=GATEWAY_KEY)
    if mode == "inprocess":
        client = tpx.sdk.async_anthropic_client(settings=settings, upstream=fake.transport())
        async with client:
            yield client
        return
    with serving(create_app(settings, transport=fake.transport())) as url:
        async with anthropic.AsyncAnthropic(api_key=GATEWAY_KEY, base_url=url) as client:
            yield client


TOOLS: list[Any] = [{"name": "ls", "description": "list", "input_schema": {"type": "object"}}]


def _results(content: list[Any]) -> list[dict[str, Any]]:
    return [
        {"type": "tool_result", "tool_use_id": b.id, "content": f"out-{n}", "is_error": False}
        for n, b in enumerate(c for c in content if c.type == "tool_use")
        for b in [b]
    ]


def _check_ids(provider: str, message: Any, fake: FakeUpstream, tag: str) -> list[str]:
    ids = [b.id for b in message.content if b.type == "tool_use"]
    assert len(ids) == 2
    assert len(set(ids)) == 2
    if provider == "TPX":
        for tool_id in ids:  # signed by the gateway; decodes to what the upstream emitted
            unsigned = verify_signed_id(tool_id, b"test-secret")
            assert unsigned is not None
            assert unsigned.split("_", 1)[1] in fake.emitted[tag]
    else:
        assert set(ids) <= set(fake.emitted[tag])
    return ids


def _loop(
    provider: str, client: anthropic.Anthropic, fake: FakeUpstream, tag: str, stream: bool
) -> list[Any]:
    """Two rounds of: user text -> 2 parallel tool calls -> tool results -> text."""
    history: list[Any] = []
    for round_ in range(2):
        history.append({"role": "user", "content": [{"type": "text", "text": f"{tag} {round_}"}]})
        if round_ == 0:
            history[0]["content"][0]["text"] = tag
        for expect_tools in (True, False):
            kwargs: dict[str, Any] = {
                "model": "claude-x",
                "max_tokens": 1024,
                "tools": TOOLS,
                "messages": history,
            }
            if stream:
                with client.messages.stream(**kwargs) as s:
                    message = s.get_final_message()
            else:
                message = client.messages.create(**kwargs)
            if expect_tools:
                assert message.stop_reason == "tool_use"
                _check_ids(provider, message, fake, tag)
                history.append({"role": "assistant", "content": message.content})
                history.append({"role": "user", "content": _results(message.content)})
            else:
                assert message.stop_reason == "end_turn"
                text = "".join(b.text for b in message.content if b.type == "text")
                assert "out-0" in text
                assert "out-1" in text
                history.append({"role": "assistant", "content": message.content})
    return history


@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("stream", [False, True])
def test_sync_tool_loop(provider: str, mode: str, stream: bool) -> None:
    fake = FakeUpstream(provider)
    with sync_client(provider, mode, fake) as client:
        history = _loop(provider, client, fake, f"conv-{mode}-{stream}", stream)
    assert len(history) == 8
    assert len(fake.seen) == 4


@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.anyio
async def test_async_tool_loop_and_stream(provider: str, mode: str) -> None:
    fake = FakeUpstream(provider)
    async with async_client(provider, mode, fake) as client:
        history: list[Any] = [{"role": "user", "content": "async-conv"}]
        first = await client.messages.create(
            model="claude-x", max_tokens=256, tools=TOOLS, messages=history
        )
        _check_ids(provider, first, fake, "async-conv")
        history += [
            {"role": "assistant", "content": first.content},
            {"role": "user", "content": _results(first.content)},
        ]
        async with client.messages.stream(
            model="claude-x", max_tokens=256, tools=TOOLS, messages=history
        ) as s:
            final = await s.get_final_message()
        assert final.stop_reason == "end_turn"
        assert "out-1" in final.content[0].text
        counted = await client.messages.count_tokens(
            model="claude-x", tools=TOOLS, messages=history
        )
    assert counted.input_tokens > 0


@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize("mode", MODES)
def test_count_tokens(provider: str, mode: str) -> None:
    fake = FakeUpstream(provider)
    with sync_client(provider, mode, fake) as client:
        short = client.messages.count_tokens(
            model="claude-x", messages=[{"role": "user", "content": "hi"}]
        )
        longer = client.messages.count_tokens(
            model="claude-x", tools=TOOLS, messages=[{"role": "user", "content": "hi " * 200}]
        )
    if provider == "ANTHROPIC":  # forwarded: the upstream's own count
        assert short.input_tokens == 42
        assert fake.seen[0]["model"] == "claude-x"
    else:  # estimated locally (tiktoken cl100k_base), no upstream request
        assert 0 < short.input_tokens < longer.input_tokens
        assert not fake.seen
        assert longer.input_tokens >= 200


@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize("mode", MODES)
def test_sdk_retry_on_529_succeeds_on_a_tool_turn(provider: str, mode: str) -> None:
    """Every distinct body gets one 529 first; the SDK retries the byte-identical body."""
    fake = FakeUpstream(provider)
    with sync_client(provider, mode, fake) as client:
        retrying = client.with_options(max_retries=2, timeout=30)
        tag = "FAIL529 retry"
        history: list[Any] = [{"role": "user", "content": tag}]
        first = retrying.messages.create(
            model="claude-x", max_tokens=64, tools=TOOLS, messages=history
        )
        history += [
            {"role": "assistant", "content": first.content},
            {"role": "user", "content": _results(first.content)},
        ]
        final = retrying.messages.create(
            model="claude-x", max_tokens=64, tools=TOOLS, messages=history
        )
    assert final.stop_reason == "end_turn"
    assert fake.failures == 2  # one 529 on the first turn, one on the tool turn
    assert len(fake.seen) == 4
    assert fake.seen[2] == fake.seen[3]  # the tool turn, retried as it was


def test_in_process_stream_closed_early_fails_the_exchange() -> None:
    fake = FakeUpstream("TPX")
    settings = make_settings("TPX")
    with tpx.sdk.anthropic_client(settings=settings, upstream=fake.transport()) as client:
        transport = client._client._transport
        assert isinstance(transport, tpx.sdk.GatewayTransport)
        with client.messages.stream(
            model="m", max_tokens=64, messages=[{"role": "user", "content": "early"}]
        ) as stream:
            first = next(iter(stream))
            assert first.type == "message_start"
        again = client.messages.create(
            model="m", max_tokens=64, messages=[{"role": "user", "content": "early"}]
        )
    assert again.stop_reason == "tool_use"
    metrics = transport.gateway.metrics.render().decode()
    assert 'tpx_gateway_spec_actions_total{action="ProviderFail"} 1.0' in metrics
    assert 'tpx_gateway_spec_actions_total{action="Deliver"} 1.0' in metrics
