"""count_tokens from the upstream's tokenizer endpoint: for every recorded Claude Code and SDK
body, the count the client gets is the fake upstream tokenizer's (DeepSeek V4's vocabulary:
benchmarks.context_counts.FakeTokenizer);
the estimate when the endpoint fails; the endpoint never asked for when it is off."""

from __future__ import annotations

from typing import Any

import httpx2
import pytest

from benchmarks.context_counts import FakeTokenizer, recorded
from tpx.gateway.context.config import ContextConfig
from tpx.gateway.context.tokenizer import TOKENIZERS, framing
from tpx.transport.translate import request_to_openai
from tpx.transport.translate.profiles import get_profile

from ..conftest import make_settings
from .test_gateway_context import client

BODIES = recorded()
Tokenizer = FakeTokenizer


def _count(profile: str, tokenizer: Any, body: dict[str, Any], on: bool = True) -> int:
    from .test_gateway_context import Upstream

    # (a 100 KB body's first count takes the fake over a second on a loaded machine: the
    # endpoint's time bound is not what these tests are about, test_tokenizer_bounds is)
    context = ContextConfig(tokenizer=on, tokenizer_timeout=60.0)
    settings = make_settings("TPX", model="m", profile=get_profile(profile), context=context)
    with client(settings, Upstream(tokenizer)) as http:
        response = http.post("/v1/messages/count_tokens", json=body)
    assert response.status_code == 200, response.text
    tokens = response.json()["input_tokens"]
    assert isinstance(tokens, int)
    return tokens


@pytest.mark.parametrize(("name", "body"), BODIES, ids=[n for n, _ in BODIES])
def test_the_count_is_the_upstream_tokenizers_for_every_recorded_body(
    name: str, body: dict[str, Any]
) -> None:
    vllm = Tokenizer("vllm")
    assert _count("vllm", vllm, body) == vllm.last
    llama = Tokenizer("llama.cpp")
    counted = _count("llama.cpp", llama, body)
    assert llama.last is not None
    translated = request_to_openai({"max_tokens": 1, **body}, model="m", profile="llama.cpp")
    assert counted == llama.last + framing(translated.body)  # the endpoint's, plus framing


def test_text_endpoints_add_tpxs_framing() -> None:
    body = {"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]}
    assert framing(body) == 9
    assert TOKENIZERS["llama.cpp"].read(200, b'{"tokens":[1,2,3]}', body) == 12
    assert TOKENIZERS["sglang"].read(200, b'{"tokens":[1,2],"count":2}', body) == 11
    assert TOKENIZERS["vllm"].read(200, b'{"count":7,"tokens":[]}', body) == 7


def test_a_failing_endpoint_gives_the_estimate() -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": "word " * 100}]}
    estimate = _count("vllm", Tokenizer("vllm"), body, on=False)

    def broken(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(404, json={"detail": "Not Found"})

    assert _count("vllm", broken, body) == estimate


def test_the_endpoint_is_not_asked_when_off() -> None:
    tokenizer = Tokenizer("vllm")
    body = {"model": "m", "messages": [{"role": "user", "content": "hello"}]}
    _count("vllm", tokenizer, body, on=False)
    assert tokenizer.calls == 0


def test_a_request_the_endpoint_counts_is_not_estimated_too(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from tpx.gateway.context.gate import ContextGate

    estimated: list[int] = []
    real = ContextGate.count

    def counting(gate: ContextGate, translated: Any, stop_above: int | None = None) -> int:
        estimated.append(1)
        return real(gate, translated, stop_above)

    monkeypatch.setattr(ContextGate, "count", counting)
    body = {"model": "m", "messages": [{"role": "user", "content": "word " * 100}]}
    vllm = Tokenizer("vllm")
    assert _count("vllm", vllm, body) == vllm.last
    assert (vllm.calls, estimated) == (1, [])

    def broken(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(404, json={"detail": "Not Found"})

    _count("vllm", broken, body)
    assert estimated == [1]  # the fallback, worked out only when the endpoint fails
