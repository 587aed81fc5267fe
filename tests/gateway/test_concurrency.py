"""Many concurrent conversations through one gateway: none lost, none cross-paired."""

from __future__ import annotations

import asyncio
from typing import Any

import anthropic
import pytest

from tpx.gateway.asgi import create_app

from .conftest import GATEWAY_KEY, make_settings, serving
from .fakes import FakeUpstream

CONVERSATIONS = 120


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def _conversation(client: anthropic.AsyncAnthropic, n: int) -> tuple[str, list[str]]:
    tag = f"conc-{n}"
    history: list[Any] = [{"role": "user", "content": tag}]
    stream = n % 2 == 0
    kwargs: dict[str, Any] = {"model": "m", "max_tokens": 64, "messages": history}
    if stream:
        async with client.messages.stream(**kwargs) as s:
            first = await s.get_final_message()
    else:
        first = await client.messages.create(**kwargs)
    ids = [b.id for b in first.content if b.type == "tool_use"]
    history += [
        {"role": "assistant", "content": first.content},
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": i, "content": i} for i in ids],
        },
    ]
    final = await client.messages.create(model="m", max_tokens=64, messages=history)
    assert final.stop_reason == "end_turn"
    return tag, ids


@pytest.mark.anyio
async def test_concurrent_conversations_are_neither_lost_nor_cross_paired() -> None:
    fake = FakeUpstream("TPX", calls=3)
    app = create_app(make_settings("TPX", gateway_key=GATEWAY_KEY), transport=fake.transport())
    with serving(app) as url:
        async with anthropic.AsyncAnthropic(
            api_key=GATEWAY_KEY, base_url=url, max_retries=0
        ) as client:
            done = await asyncio.gather(*(_conversation(client, n) for n in range(CONVERSATIONS)))
    assert len(done) == CONVERSATIONS
    for tag, ids in done:
        # each conversation's ids decode to exactly what the upstream emitted for it
        assert [i.split("_", 1)[1] for i in ids] == fake.emitted[tag]
    tool_messages = [m for body in fake.seen for m in body["messages"] if m["role"] == "tool"]
    assert len(tool_messages) == 3 * CONVERSATIONS
    for message in tool_messages:  # every result went back under the id it answers
        assert message["tool_call_id"] in message["content"]
    metrics = app.gateway.metrics.render().decode()
    assert f'tpx_gateway_spec_actions_total{{action="Deliver"}} {2.0 * CONVERSATIONS}' in metrics
