"""The gateway's hot path where secrets are in play: the log line's redaction, one core
request, and a streamed reply read through the scrubber (its deltas held back at the
boundaries that could begin a secret).

Run: ``pytest benchmarks -k redact -p no:xdist --benchmark-only``.

Every request pays these whatever its content: a clean log line through the redactor, a
reply through the scrubber, a stream of 200 text deltas through the exchange with the
gateway's secrets. The per-MB cost of redaction itself (worst-case texts) is printed by
``python -m benchmarks.redaction_cost``.
"""

from __future__ import annotations

from typing import Any

import orjson

from tpx.errors import secret_forms
from tpx.gateway.core import Gateway, Request, Turn
from tpx.gateway.redaction import Redactor, prepared
from tpx.gateway.settings import Credential, Settings
from tpx.gateway.turn import Conversation
from tpx.transport.exchange import Provider

TOKEN = "sk-proj-Ab3dEf6hIj9lMn2pQr5tUv8xYz1bCd4fGh7jKl0nOp3rSt6vWx9z"
GATEWAY_KEY = "gw-key-0123456789abcdef"
THINKING = "0123456789abcdef" * 4
SECRETS = (GATEWAY_KEY, TOKEN, THINKING)
_LINE = orjson.dumps(
    {
        "request_id": "req_tpx0011223344556677",
        "endpoint": "messages",
        "pid": 4242,
        "model": "claude-sonnet-4-5-20250929",
        "stream": True,
        "upstream_model": "gpt-5-mini",
        "actions": ["CallerSend", "ProviderReply", "Deliver"],
        "upstream_status": 200,
        "input_tokens": 1200,
        "output_tokens": 80,
        "latency_ms": 812.5,
        "outcome": "ok",
        "status": 200,
    }
).decode()


def test_redact_a_clean_log_line(benchmark: Any) -> None:
    redactor = Redactor(secret_forms(SECRETS))
    assert benchmark(redactor, _LINE) == _LINE


def test_redact_a_log_line_with_a_cut_model_name(benchmark: Any) -> None:
    redactor = Redactor(secret_forms(SECRETS))
    line = _LINE.replace("claude-sonnet-4-5-20250929", TOKEN[:20] + "...")
    assert TOKEN[:20] not in benchmark(redactor, line)


def _chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
    choice = {"index": 0, "delta": delta, "finish_reason": finish}
    data = {"id": "c", "object": "chat.completion.chunk", "model": "m", "choices": [choice]}
    return b"data: " + orjson.dumps(data) + b"\n\n"


_STREAM = b"".join(
    [
        _chunk({"role": "assistant", "content": ""}),
        *[_chunk({"content": f"word{i} and some more text s"}) for i in range(200)],
        _chunk({}, "stop"),
        b"data: [DONE]\n\n",
    ]
)


def test_redact_stream_200_deltas_through_the_scrubber(benchmark: Any) -> None:
    secrets = prepared(SECRETS)
    request = {
        "model": "m",
        "max_tokens": 16,
        "stream": True,
        "messages": [{"role": "user", "content": "hi"}],
    }

    def once() -> int:
        exchange = Conversation(Provider.TPX, [], prepared=secrets)
        exchange.send(request)
        exchange.receive_stream_start(200, {"content-type": "text/event-stream"})
        events = exchange.feed(_STREAM)
        events += exchange.end_stream()
        exchange.deliver()
        return len(events)

    assert benchmark(once) > 200


def test_redact_core_request(benchmark: Any) -> None:
    settings = Settings(
        provider=Provider.TPX,
        base_url="http://upstream.invalid/v1",
        credential=Credential(TOKEN),
        gateway_key=GATEWAY_KEY,
        thinking_secret=THINKING,
        secret=b"bench-secret",
    )
    gateway = Gateway(settings)
    body = orjson.dumps(
        {"model": "claude-x", "max_tokens": 64, "messages": [{"role": "user", "content": "hi"}]}
    )
    reply = orjson.dumps(
        {
            "id": "c",
            "object": "chat.completion",
            "model": "m",
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": "hello there, a short answer"},
                    "finish_reason": "stop",
                }
            ],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1},
        }
    )
    headers = {"x-api-key": GATEWAY_KEY, "content-type": "application/json"}

    def once() -> int:
        turn = gateway.handle(Request("POST", "/v1/messages", "", headers, body))
        assert isinstance(turn, Turn)
        response = turn.reply(200, {"content-type": "application/json"}, reply)
        turn.close()
        return response.status

    assert benchmark(once) == 200
