"""Discovery of the context windows, per profile: the probes read what each server says,
a failed probe changes nothing, configured windows are never asked for, and the gateway's
lifespan keeps them fresh through its upstream client."""

from __future__ import annotations

import asyncio
from collections.abc import MutableMapping
from typing import Any

import attrs
import httpx2
import orjson
import pytest

from tpx.gateway.context.config import ContextConfig
from tpx.gateway.context.discover import PROBES, discover
from tpx.gateway.context.gate import ContextGate
from tpx.gateway.context.window import DEFAULT_WINDOW, Windows
from tpx.gateway.settings import ModelRoute
from tpx.gateway.upstream import AsyncUpstream
from tpx.transport.translate.profiles import get_profile

from ..conftest import make_settings

#: What each server answers (shapes from their documentation, trimmed).
ANSWERS: dict[str, tuple[str, dict[str, Any]]] = {
    "vllm": (
        "/v1/models",
        {
            "object": "list",
            "data": [
                {"id": "other", "object": "model", "max_model_len": 4096},
                {
                    "id": "Qwen/Qwen3-8B",
                    "object": "model",
                    "owned_by": "vllm",
                    "max_model_len": 8192,
                },
            ],
        },
    ),
    "sglang": ("/v1/models", {"data": [{"id": "Qwen/Qwen3-8B", "max_model_len": 8192}]}),
    "llama.cpp": (
        "/props",
        {"default_generation_settings": {"n_ctx": 8192, "params": {}}, "total_slots": 1},
    ),
    "ollama": (
        "/api/show",
        {
            "parameters": 'stop "<|im_end|>"\nnum_ctx                        8192',
            "model_info": {"qwen3.context_length": 40960},
        },
    ),
}


def _transport(profile: str, seen: list[str]) -> httpx2.MockTransport:
    path, answer = ANSWERS[profile]

    def handle(request: httpx2.Request) -> httpx2.Response:
        seen.append(request.url.path)
        if request.url.path == path:
            if profile == "ollama":
                assert orjson.loads(request.read()) == {"model": "Qwen/Qwen3-8B"}
            return httpx2.Response(200, json=answer)
        return httpx2.Response(404, json={"error": "not found"})

    return httpx2.MockTransport(handle)


@pytest.mark.parametrize("profile", sorted(ANSWERS))
def test_each_probe_reads_its_servers_window(profile: str) -> None:
    seen: list[str] = []
    settings = make_settings("TPX", model="Qwen/Qwen3-8B", profile=get_profile(profile))
    windows = Windows()

    async def run() -> None:
        upstream = AsyncUpstream(settings, transport=_transport(profile, seen))
        try:
            await discover(upstream, PROBES[profile], ["Qwen/Qwen3-8B"], windows)
        finally:
            await upstream.aclose()

    asyncio.run(run())
    window = windows.of("Qwen/Qwen3-8B")
    assert (window.tokens, window.source) == (8192, "discovered")
    assert seen == [ANSWERS[profile][0]]


def test_ollama_without_num_ctx_takes_the_models_context_length() -> None:
    body = orjson.dumps({"model_info": {"llama.context_length": 131072}})
    assert PROBES["ollama"].read(200, body, "m") == 131072


@pytest.mark.parametrize(
    ("status", "body"),
    [(404, b'{"error":"no"}'), (200, b"not json"), (200, b'{"data":[{"id":"x"}]}'), (0, b"")],
)
def test_a_probe_that_says_nothing_leaves_the_default(status: int, body: bytes) -> None:
    assert PROBES["vllm"].read(status, body, "m") is None
    windows = Windows()
    assert windows.of("m").tokens == DEFAULT_WINDOW


def test_hosted_profiles_have_no_probe() -> None:
    assert {"openai", "gemini", "deepseek", "openrouter", "generic"}.isdisjoint(PROBES)


def test_the_config_wins_over_discovery_and_is_not_asked_for() -> None:
    seen: list[str] = []
    settings = make_settings(
        "TPX",
        model="Qwen/Qwen3-8B",
        profile=get_profile("vllm"),
        context=ContextConfig(window=2048),
    )
    gate = ContextGate(settings)

    async def run() -> None:
        upstream = AsyncUpstream(settings, transport=_transport("vllm", seen))
        try:
            await discover(upstream, PROBES["vllm"], gate.models(), gate.windows)
        finally:
            await upstream.aclose()

    asyncio.run(run())
    assert seen == []
    assert gate.window("Qwen/Qwen3-8B").tokens == 2048


def test_a_models_entry_window_is_configured() -> None:
    settings = attrs.evolve(
        make_settings("TPX", model="big"), routes=(ModelRoute("*haiku*", "small", None, 4096),)
    )
    gate = ContextGate(settings)
    assert gate.window("small").tokens == 4096
    assert gate.window("big").source == "default"


def test_the_gateway_discovers_at_start_through_its_lifespan() -> None:
    from tpx.gateway.asgi import create_app

    seen: list[str] = []
    settings = make_settings("TPX", model="Qwen/Qwen3-8B", profile=get_profile("vllm"))
    app = create_app(settings, transport=_transport("vllm", seen))

    async def run() -> int:
        messages: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        sent: list[MutableMapping[str, Any]] = []

        async def send(message: MutableMapping[str, Any]) -> None:
            sent.append(message)

        await messages.put({"type": "lifespan.startup"})
        task = asyncio.create_task(app({"type": "lifespan"}, messages.get, send))
        while app.gateway.context.windows.of("Qwen/Qwen3-8B").source != "discovered":
            await asyncio.sleep(0.01)  # the discovery task runs on this loop
        await messages.put({"type": "lifespan.shutdown"})
        await task
        return app.gateway.context.windows.of("Qwen/Qwen3-8B").tokens

    assert asyncio.run(asyncio.wait_for(run(), 60)) == 8192
    assert seen[0] == "/v1/models"
