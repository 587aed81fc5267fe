"""The context-window contract through the gateway (in-process, TPX): the preflight, the
upstream's context errors in the Messages wording (plain, streamed, mid-stream), the count
count_tokens gives, the claude-tpx aliases of GET /v1/models."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import attrs
import httpx2
import orjson
import pytest

from tpx.gateway.context.config import ContextConfig
from tpx.gateway.core import Gateway
from tpx.gateway.settings import ModelRoute, Settings
from tpx.gateway.upstream import SyncUpstream
from tpx.sdk import GatewayTransport
from tpx.transport.translate.overflow import too_long
from tpx.transport.translate.profiles import get_profile

from ..conftest import make_settings

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "upstream" / "context_errors.json"
CASES: list[dict[str, Any]] = json.loads(FIXTURES.read_text())["cases"]
IDS = [f"{c['profile']}-{c['form']}-{i}" for i, c in enumerate(CASES)]
Handler = Callable[[httpx2.Request], httpx2.Response]


def _reply(text: str = "ok") -> dict[str, Any]:
    return {
        "id": "c1",
        "object": "chat.completion",
        "model": "m",
        "created": 0,
        "choices": [
            {
                "index": 0,
                "finish_reason": "stop",
                "message": {"role": "assistant", "content": text},
            }
        ],
        "usage": {"prompt_tokens": 10, "completion_tokens": 1, "total_tokens": 11},
    }


class Upstream:
    """Records what reached it; answers with *answer* (a handler) or a plain reply."""

    def __init__(self, answer: Handler | None = None) -> None:
        self.bodies: list[dict[str, Any]] = []
        self.answer = answer

    def __call__(self, request: httpx2.Request) -> httpx2.Response:
        if request.url.path.endswith("/chat/completions"):
            self.bodies.append(orjson.loads(request.read()))
        if self.answer is not None:
            return self.answer(request)
        return httpx2.Response(200, json=_reply())


@contextlib.contextmanager
def client(settings: Settings, upstream: Upstream) -> Iterator[httpx2.Client]:
    transport = GatewayTransport(
        Gateway(settings), SyncUpstream(settings, transport=httpx2.MockTransport(upstream))
    )
    with httpx2.Client(transport=transport, base_url="http://gateway.test") as http:
        yield http


def settings(profile: str = "vllm", **context: Any) -> Settings:
    return make_settings(
        "TPX", model="up-model", profile=get_profile(profile), context=ContextConfig(**context)
    )


def body(text: str = "hello", max_tokens: int = 64, **extra: Any) -> dict[str, Any]:
    return {
        "model": "claude-sonnet-5",
        "max_tokens": max_tokens,
        "messages": [{"role": "user", "content": text}],
        **extra,
    }


def expected(case: dict[str, Any], counted: int | None = None, window: int = 200_000) -> str:
    """What the client must read for *case* (numbers the error does not carry: the
    gateway's count when it counted, the window; N > M always)."""
    maximum = case["m"] if case["m"] is not None else window
    tokens = case["n"] if case["n"] is not None else counted
    if tokens is None or tokens <= maximum:
        tokens = maximum + 1
    return too_long(tokens, maximum)


def _raw(case: dict[str, Any]) -> bytes:
    return json.dumps(case["body"]).encode()


def _error_answer(case: dict[str, Any]) -> Handler:
    def answer(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(
            case["status"], content=_raw(case), headers={"content-type": "application/json"}
        )

    return answer


def _sse_error_answer(case: dict[str, Any]) -> Handler:
    """A stream that starts, then carries the error object as a chunk (as vLLM and
    llama.cpp do for an error met after the headers went out)."""
    first = {
        "id": "c1",
        "object": "chat.completion.chunk",
        "model": "m",
        "created": 0,
        "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}],
    }
    error = case["body"][0] if isinstance(case["body"], list) else case["body"]
    if "error" not in error:  # vLLM and SGLang wrap their error object in a stream
        error = {"error": error}
    data = b"data: " + orjson.dumps(first) + b"\n\ndata: " + orjson.dumps(error) + b"\n\n"

    def answer(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(200, content=data, headers={"content-type": "text/event-stream"})

    return answer


def _events(text: str) -> list[dict[str, Any]]:
    return [json.loads(line[5:]) for line in text.splitlines() if line.startswith("data:")]


@pytest.mark.parametrize("case", CASES, ids=IDS)
@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
def test_each_profiles_context_error_reaches_the_client_in_the_messages_wording(
    case: dict[str, Any], stream: bool
) -> None:
    upstream = Upstream(_error_answer(case))
    with client(settings(case["profile"]), upstream) as http:
        response = http.post("/v1/messages", json=body(stream=stream))
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error == {"type": "invalid_request_error", "message": expected(case)}
    assert "prompt is too long" in error["message"]
    assert len(upstream.bodies) == 1


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_a_context_error_inside_a_stream_becomes_an_error_event_in_the_messages_wording(
    case: dict[str, Any],
) -> None:
    upstream = Upstream(_sse_error_answer(case))
    with client(settings(case["profile"]), upstream) as http:
        response = http.post("/v1/messages", json=body(stream=True))
    assert response.status_code == 200
    errors = [e for e in _events(response.text) if e["type"] == "error"]
    if case.get("numbers_in_fields"):  # a stream error keeps only the message's words
        case = {**case, "n": None, "m": None}
    assert errors == [
        {"type": "error", "error": {"type": "invalid_request_error", "message": expected(case)}}
    ], response.text


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
def test_with_the_rewrite_off_the_upstreams_own_words_go_through(stream: bool) -> None:
    case = next(c for c in CASES if c["profile"] == "vllm")
    upstream = Upstream(_error_answer(case))
    with client(settings("vllm", rewrite_errors=False), upstream) as http:
        response = http.post("/v1/messages", json=body(stream=stream))
    assert response.status_code == 400
    message = response.json()["error"]["message"]
    assert "prompt is too long" not in message
    assert "maximum context length is 8192 tokens" in message


def test_an_error_that_is_not_about_the_window_is_left_alone() -> None:
    def answer(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(400, json={"error": {"message": "temperature: bad value"}})

    with client(settings("generic"), Upstream(answer)) as http:
        response = http.post("/v1/messages", json=body())
    assert response.status_code == 400
    assert "prompt is too long" not in response.json()["error"]["message"]
    assert "temperature: bad value" in response.json()["error"]["message"]


def test_a_profile_only_rewrites_its_own_forms() -> None:
    gemini = next(c for c in CASES if c["profile"] == "gemini")
    with client(settings("vllm"), Upstream(_error_answer(gemini))) as http:
        response = http.post("/v1/messages", json=body())
    assert "prompt is too long" not in response.json()["error"]["message"]


# -- the preflight -------------------------------------------------------------------------


def _count(http: httpx2.Client, request: dict[str, Any]) -> int:
    counted = http.post("/v1/messages/count_tokens", json=request)
    assert counted.status_code == 200, counted.text
    tokens = counted.json()["input_tokens"]
    assert isinstance(tokens, int)
    return tokens


def test_a_request_longer_than_the_window_is_refused_before_the_wire() -> None:
    upstream = Upstream()
    text = "word " * 6000
    with client(settings(window=4096), upstream) as http:
        tokens = _count(http, {"model": "claude-sonnet-5", "messages": body(text)["messages"]})
        for stream in (False, True):
            response = http.post("/v1/messages", json=body(text, 1000, stream=stream))
            assert response.status_code == 400
            assert response.json()["error"] == {
                "type": "invalid_request_error",
                "message": too_long(tokens, 4096 - 1000),
            }
    assert tokens > 4096
    assert upstream.bodies == []  # nothing was sent


def test_max_tokens_is_clamped_when_the_input_fits() -> None:
    upstream = Upstream()
    text = "word " * 1000
    with client(settings(window=4096), upstream) as http:
        tokens = _count(http, {"model": "claude-sonnet-5", "messages": body(text)["messages"]})
        response = http.post("/v1/messages", json=body(text, 32000))
    assert response.status_code == 200, response.text
    assert upstream.bodies[0]["max_tokens"] == 4096 - tokens
    assert 0 < 4096 - tokens < 32000


def test_a_request_that_fits_goes_as_it_is() -> None:
    upstream = Upstream()
    with client(settings(window=4096), upstream) as http:
        response = http.post("/v1/messages", json=body("hello", 1000))
    assert response.status_code == 200
    assert upstream.bodies[0]["max_tokens"] == 1000


def test_a_models_entry_window_applies_to_its_model() -> None:
    upstream = Upstream()
    routes = (ModelRoute("*haiku*", "small", context_window=2048),)
    configured = attrs.evolve(settings(window=100_000), routes=routes)
    text = "word " * 3000
    with client(configured, upstream) as http:
        small = http.post("/v1/messages", json=body(text, 100, model="claude-haiku-4-5"))
        large = http.post("/v1/messages", json=body(text, 100))
    assert small.status_code == 400
    assert "> 1948 maximum" in small.json()["error"]["message"]
    assert large.status_code == 200
    assert [b["model"] for b in upstream.bodies] == ["up-model"]


def test_the_preflight_off_sends_whatever_the_size() -> None:
    upstream = Upstream()
    with client(settings(window=1024, preflight=False), upstream) as http:
        response = http.post("/v1/messages", json=body("word " * 3000, 64))
    assert response.status_code == 200
    assert len(upstream.bodies) == 1


def test_a_rewritten_error_without_numbers_uses_the_gateways_count_and_window() -> None:
    case = next(c for c in CASES if c["form"] == "ollama-input-length")
    upstream = Upstream(_error_answer(case))
    text = "word " * 3000
    with client(settings("ollama", window=8192, min_output=100), upstream) as http:
        tokens = _count(http, {"model": "claude-sonnet-5", "messages": body(text)["messages"]})
        response = http.post("/v1/messages", json=body(text, 100))
    assert response.json()["error"]["message"] == too_long(max(tokens, 8193), 8192)


# -- aliases -------------------------------------------------------------------------------


def test_models_lists_claude_aliases_that_resolve_to_their_models() -> None:
    upstream = Upstream()
    routes = (ModelRoute("*haiku*", "Qwen/Qwen3-1.7B", context_window=8192),)
    configured = attrs.evolve(settings(window=32768), model="Qwen/Qwen3-8B", routes=routes)
    with client(configured, upstream) as http:
        listed = http.get("/v1/models").json()["data"]
        for alias in ("claude-tpx-qwen-qwen3-8b", "claude-tpx-qwen-qwen3-1-7b"):
            assert http.post("/v1/messages", json=body(model=alias)).status_code == 200
    shown = {m["id"]: m["display_name"] for m in listed}
    assert shown["claude-tpx-qwen-qwen3-8b"] == "Qwen/Qwen3-8B via tpx (32768-token window)"
    assert shown["claude-tpx-qwen-qwen3-1-7b"] == "Qwen/Qwen3-1.7B via tpx (8192-token window)"
    assert [b["model"] for b in upstream.bodies] == ["Qwen/Qwen3-8B", "Qwen/Qwen3-1.7B"]


def test_aliases_can_be_switched_off() -> None:
    with client(settings(aliases=False), Upstream()) as http:
        listed = http.get("/v1/models").json()["data"]
    assert [m["id"] for m in listed] == ["up-model"]


# -- usage ---------------------------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
def test_cached_tokens_are_reported_apart_from_input_tokens(stream: bool) -> None:
    usage = {
        "prompt_tokens": 9000,
        "completion_tokens": 7,
        "total_tokens": 9007,
        "prompt_tokens_details": {"cached_tokens": 8000},
    }

    def answer(request: httpx2.Request) -> httpx2.Response:
        if not stream:
            return httpx2.Response(200, json={**_reply(), "usage": usage})
        chunk = {
            "id": "c1",
            "object": "chat.completion.chunk",
            "model": "m",
            "created": 0,
            "choices": [{"index": 0, "delta": {"role": "assistant", "content": "ok"}}],
        }
        end = {**chunk, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}
        tail = {**chunk, "choices": [], "usage": usage}
        data = b"".join(b"data: " + orjson.dumps(c) + b"\n\n" for c in (chunk, end, tail))
        return httpx2.Response(
            200, content=data + b"data: [DONE]\n\n", headers={"content-type": "text/event-stream"}
        )

    with client(settings(), Upstream(answer)) as http:
        response = http.post("/v1/messages", json=body(stream=stream))
    assert response.status_code == 200, response.text
    if stream:
        found = [e["usage"] for e in _events(response.text) if e["type"] == "message_delta"]
        reported = found[-1]
    else:
        reported = response.json()["usage"]
    assert reported["input_tokens"] == 1000
    assert reported["cache_read_input_tokens"] == 8000


def test_a_preflight_refusal_under_the_monitor_is_no_violation() -> None:
    upstream = Upstream()
    watched = attrs.evolve(settings(window=4096), monitor=True)
    gateway = Gateway(watched)
    transport = GatewayTransport(
        gateway, SyncUpstream(watched, transport=httpx2.MockTransport(upstream))
    )
    with httpx2.Client(transport=transport, base_url="http://gateway.test") as http:
        refused = http.post("/v1/messages", json=body("word " * 6000, 1000))
        fits = http.post("/v1/messages", json=body("hello", 1000))
    assert refused.status_code == 400
    assert "prompt is too long" in refused.json()["error"]["message"]
    assert fits.status_code == 200
    assert len(upstream.bodies) == 1
    assert "tpx_gateway_monitor_violations_total{" not in gateway.metrics.render().decode()


def test_the_monitor_sees_the_preflight_refusal_as_prompt_too_long() -> None:
    upstream = Upstream()
    watched = attrs.evolve(settings(window=4096), monitor=True)
    gateway = Gateway(watched)
    assert gateway.monitor is not None
    seen: list[tuple[int, int]] = []
    real = gateway.monitor.preflight_refused

    def spy(key: str, snapshot: Any, *, input_tokens: int, maximum: int) -> None:
        seen.append((input_tokens, maximum))
        real(key, snapshot, input_tokens=input_tokens, maximum=maximum)

    gateway.monitor.preflight_refused = spy  # type: ignore[method-assign]
    transport = GatewayTransport(
        gateway, SyncUpstream(watched, transport=httpx2.MockTransport(upstream))
    )
    with httpx2.Client(transport=transport, base_url="http://gateway.test") as http:
        refused = http.post("/v1/messages", json=body("word " * 6000, 1000))
    assert refused.status_code == 400
    assert len(seen) == 1
    assert seen[0][0] > seen[0][1]  # the spec's PromptTooLong: the request does not fit
    assert upstream.bodies == []


def test_the_monitor_stops_a_preflight_that_refuses_a_request_that_fits(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Seeded bug: the preflight refuses a request that fits its window; ``--monitor`` stops
    the refusal (RefusesOnlyWrong) instead of letting a spurious 400 reach the client."""
    from tpx.gateway.context import preflight as preflight_module
    from tpx.gateway.context.preflight import Verdict

    def refuses_all(
        input_tokens: int, max_tokens: int | None, window: int, *, min_output: int = 1024
    ) -> Verdict:
        return Verdict(
            input_tokens, window, max_tokens, refusal=too_long(input_tokens, window), maximum=window
        )

    import tpx.gateway.context.gate as gate_module

    monkeypatch.setattr(gate_module, "preflight", refuses_all)
    monkeypatch.setattr(gate_module, "may_overflow", lambda *a: True)
    assert preflight_module.preflight is not refuses_all
    upstream = Upstream()
    watched = attrs.evolve(settings(window=4096), monitor=True)
    gateway = Gateway(watched)
    transport = GatewayTransport(
        gateway, SyncUpstream(watched, transport=httpx2.MockTransport(upstream))
    )
    with httpx2.Client(transport=transport, base_url="http://gateway.test") as http:
        answer = http.post("/v1/messages", json=body("hello", 100))
    assert answer.status_code == 500
    assert "RefusesOnlyWrong" in gateway.metrics.render().decode()
    assert upstream.bodies == []
