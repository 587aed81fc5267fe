"""Profile and thinking-secret plumbing: boot(profile=, thinking_secret=), TPX_PROFILE,
TPX_THINKING_SECRET -- a signed thinking block goes out and comes back through a transport."""

from __future__ import annotations

from typing import Any

import anthropic
import httpx2
import orjson
import pytest

from tests.transport.translate.test_stream import sse, stream_of
from tpx import errors
from tpx.transport import Transport, boot
from tpx.transport.translate.signing import ThinkingSigner

TOKEN = "oauth-TOKEN-SECRET-123456"
TPX_URL = "https://tpx.example.test"
SECRET = "thinking-SECRET-value-42"
THOUGHT = "Two cities, one call each."


def _reply() -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 0,
        "model": "deepseek-v4",
        "choices": [
            {
                "index": 0,
                "finish_reason": "tool_calls",
                "message": {
                    "role": "assistant",
                    "content": None,
                    "reasoning_content": THOUGHT,
                    "tool_calls": [
                        {
                            "id": "call_1",
                            "type": "function",
                            "function": {"name": "f", "arguments": "{}"},
                        }
                    ],
                },
            }
        ],
        "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5},
    }


def _text_reply() -> dict[str, Any]:
    body = _reply()
    body["choices"][0] = {
        "index": 0,
        "finish_reason": "stop",
        "message": {"role": "assistant", "content": "done"},
    }
    return body


class _Upstream:
    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []
        self.replies = [_reply(), _text_reply()]

    def __call__(self, request: httpx2.Request) -> httpx2.Response:
        self.bodies.append(orjson.loads(request.content))
        return httpx2.Response(200, json=self.replies.pop(0))


def _boot(upstream: _Upstream, env: dict[str, str], **kw: Any) -> Transport:
    return boot(
        oauth_token=TOKEN,
        tpx_base_url=TPX_URL,
        env=env,
        transport=httpx2.MockTransport(upstream),
        **kw,
    )


REQUEST: dict[str, Any] = {
    "model": "claude-sonnet-5",
    "max_tokens": 64000,
    "thinking": {"type": "adaptive"},
    "output_config": {"effort": "high"},
    "tools": [{"name": "f", "input_schema": {"type": "object"}}],
    "messages": [{"role": "user", "content": "go"}],
}


def _two_turns(t: Transport) -> dict[str, Any]:
    first = t.create(REQUEST)
    follow = {
        **REQUEST,
        "messages": [
            *REQUEST["messages"],
            {"role": "assistant", "content": first["content"]},
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": first["content"][1]["id"],
                        "content": "x",
                    }
                ],
            },
        ],
    }
    t.create(follow)
    return first


@pytest.mark.parametrize("how", ["argument", "environment"])
def test_signed_thinking_goes_out_and_back_through_a_deepseek_transport(how: str) -> None:
    upstream = _Upstream()
    if how == "argument":
        t = _boot(upstream, {"TPX_PROFILE": "openai"}, profile="deepseek", thinking_secret=SECRET)
    else:
        t = _boot(upstream, {"TPX_PROFILE": "deepseek", "TPX_THINKING_SECRET": SECRET})
    with t:
        first = _two_turns(t)
        assert SECRET not in repr(t)
    assert first["content"][0] == {
        "type": "thinking",
        "thinking": THOUGHT,
        "signature": ThinkingSigner(SECRET).sign(THOUGHT),
    }
    out, back = upstream.bodies
    assert out["thinking"] == {"type": "enabled"}
    assert out["reasoning_effort"] == "high"
    assert out["max_tokens"] == 64000
    assert back["messages"][1]["reasoning_content"] == THOUGHT


def test_the_profile_comes_from_tpx_profile() -> None:
    upstream = _Upstream()
    with _boot(upstream, {"TPX_PROFILE": "openai"}) as t:
        _two_turns(t)
    out, back = upstream.bodies
    assert out["max_completion_tokens"] == 64000
    assert "max_tokens" not in out
    assert "reasoning_content" not in back["messages"][1]  # openai takes no reasoning back


def test_a_thinking_block_signed_by_another_secret_is_not_sent_back() -> None:
    upstream = _Upstream()
    with _boot(upstream, {}, profile="deepseek", thinking_secret="one") as t:
        first = t.create(REQUEST)
        forged = dict(first["content"][0], signature=ThinkingSigner("two").sign(THOUGHT))
        follow = {
            **REQUEST,
            "messages": [
                *REQUEST["messages"],
                {"role": "assistant", "content": [forged, first["content"][1]]},
                {
                    "role": "user",
                    "content": [
                        {
                            "type": "tool_result",
                            "tool_use_id": first["content"][1]["id"],
                            "content": "x",
                        }
                    ],
                },
            ],
        }
        t.create(follow)
    assert "reasoning_content" not in upstream.bodies[1]["messages"][1]


def test_an_unknown_profile_fails_at_boot() -> None:
    with pytest.raises(errors.ConfigurationError, match="unknown upstream profile"):
        _boot(_Upstream(), {"TPX_PROFILE": "mistery"})


def _sdk_message(data: bytes) -> dict[str, Any]:
    """The official SDK's stream accumulator over the transport's SSE bytes."""

    def handler(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(200, headers={"content-type": "text/event-stream"}, content=data)

    client = anthropic.Anthropic(
        api_key="k",
        base_url="http://sdk.test",
        http_client=httpx2.Client(transport=httpx2.MockTransport(handler)),
        max_retries=0,
    )
    with client.messages.stream(
        model="m", max_tokens=10, messages=[{"role": "user", "content": "x"}]
    ) as stream:
        message: dict[str, Any] = stream.get_final_message().model_dump(mode="json")
    return message


def test_a_streamed_reply_reaches_the_caller_as_the_non_streamed_one() -> None:
    reply = _reply()
    calls = reply["choices"][0]["message"]["tool_calls"]
    calls.append(
        {"id": "call_2", "type": "function", "function": {"name": "f", "arguments": '{"a": 1}'}}
    )
    chunks = stream_of(reply, "interleaved", piece=3)
    data = sse(chunks)

    def streamed(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(200, headers={"content-type": "text/event-stream"}, content=data)

    def whole(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(200, json=reply)

    env = {"TPX_PROFILE": "deepseek", "TPX_THINKING_SECRET": SECRET}
    with boot(
        oauth_token=TOKEN, tpx_base_url=TPX_URL, env=env, transport=httpx2.MockTransport(streamed)
    ) as t:
        got = _sdk_message(b"".join(t.stream(REQUEST)))
    with boot(
        oauth_token=TOKEN, tpx_base_url=TPX_URL, env=env, transport=httpx2.MockTransport(whole)
    ) as t:
        expected = anthropic.types.Message.model_validate(t.create(REQUEST)).model_dump(mode="json")
    assert [b["type"] for b in got["content"]] == ["thinking", "tool_use", "tool_use"]
    assert got["content"][0]["signature"] == ThinkingSigner(SECRET).sign(THOUGHT)
    # tool ids carry a fresh nonce per response: compare everything else
    for message in (got, expected):
        for block in message["content"]:
            block.pop("id", None)
    assert got["content"] == expected["content"]
    assert got["stop_reason"] == expected["stop_reason"] == "tool_use"


def test_the_thinking_secret_is_redacted_like_a_credential() -> None:
    def echo(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(400, json={"error": {"message": f"bad: {SECRET}", "type": "x"}})

    with (
        boot(
            oauth_token=TOKEN,
            tpx_base_url=TPX_URL,
            env={"TPX_THINKING_SECRET": SECRET},
            transport=httpx2.MockTransport(echo),
        ) as t,
        pytest.raises(errors.ModelError) as info,
    ):
        t.create(REQUEST)
    assert SECRET not in str(info.value)
    assert str(info.value).endswith("HTTP 400: [REDACTED]")  # withheld whole (tpx.errors)
