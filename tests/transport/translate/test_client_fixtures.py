"""Every recorded client request translates under every profile, as the SDK types accept."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from tpx.transport.translate import PROFILES, request_bytes_to_openai, request_to_openai

from .clients import claude_code_requests, client_requests
from .sdk import validate_openai_request

REQUESTS = client_requests()


def test_the_corpus_has_every_client() -> None:
    clients = {name.split("/")[0] for name in REQUESTS}
    assert {"claude-code", "python-sdk", "typescript-sdk"} <= clients
    sdk = {name.split("/")[-1] for name in REQUESTS if name.startswith("python-sdk/")}
    assert {"tools", "images", "documents", "thinking", "structured_output", "stream"} <= sdk
    assert len(claude_code_requests()) >= 10


@pytest.mark.parametrize("profile", sorted(PROFILES))
@pytest.mark.parametrize("name", sorted(REQUESTS))
def test_every_request_translates_for_every_profile(name: str, profile: str) -> None:
    request: dict[str, Any] = REQUESTS[name]
    translation = request_to_openai(request, profile=profile)
    validate_openai_request(translation.body)
    # The bytes hot path says exactly the same.
    data = request_bytes_to_openai(orjson.dumps(request), profile=profile)
    assert orjson.loads(data) == translation.body
    # Every tool_use of the history is carried, each answered by one tool message.
    calls = [
        call["id"]
        for message in translation.body["messages"]
        for call in message.get("tool_calls", ())
    ]
    answers = [m["tool_call_id"] for m in translation.body["messages"] if m["role"] == "tool"]
    assert calls == answers


WITH_SYSTEM = {
    name: request
    for name, request in claude_code_requests().items()
    if any(m["role"] == "system" for m in request["messages"])
}


def test_claude_code_sends_system_messages_inside_messages() -> None:
    assert len(WITH_SYSTEM) >= 5  # opus / sonnet-5 turns (haiku 4.5 gets none)


@pytest.mark.parametrize("name", sorted(WITH_SYSTEM))
def test_claude_code_mid_conversation_system_message_is_carried(name: str) -> None:
    request = WITH_SYSTEM[name]
    mid = [m["content"] for m in request["messages"] if m["role"] == "system"]
    for profile in PROFILES:
        dumped = orjson.dumps(request_to_openai(request, profile=profile).body).decode()
        assert orjson.dumps(mid[0]).decode()[1:-1][:200] in dumped, profile
