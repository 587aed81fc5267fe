"""The context windows of ``[[upstreams]]``: each upstream's ``context_window`` is a configured
window of the models it serves (the smallest where two serve one model), its models are
listed with their aliases, and each upstream is asked for the rest with its own profile."""

from __future__ import annotations

import asyncio
from collections.abc import MutableMapping
from pathlib import Path
from typing import Any

import httpx2

from tpx.gateway.context.gate import ContextGate
from tpx.gateway.settings import Settings, load_settings

ENV = {"TPX_OAUTH_TOKEN": "tok", "TPX_BASE_URL": "http://127.0.0.1:9/v1"}

CONFIG = """
[[upstreams]]
name = "small"
base_url = "http://127.0.0.1:9001/v1"
profile = "vllm"
models = ["Qwen/Qwen3-1.7B"]

[[upstreams]]
name = "big"
base_url = "http://127.0.0.1:9002/v1"
profile = "llama.cpp"
models = ["Qwen/Qwen3-32B", "shared"]
context_window = 65536

[[upstreams]]
name = "replica"
base_url = "http://127.0.0.1:9003/v1"
profile = "vllm"
models = ["shared"]
context_window = 16384

[[routes]]
upstreams = ["big", "replica", "small"]
"""


def _settings(tmp_path: Path) -> Settings:
    path = tmp_path / "gateway.toml"
    path.write_text(CONFIG)
    return load_settings(env=ENV, config_file=path)


def test_an_upstreams_window_is_configured_for_its_models(tmp_path: Path) -> None:
    gate = ContextGate(_settings(tmp_path))
    assert (gate.window("Qwen/Qwen3-32B").tokens, gate.window("Qwen/Qwen3-32B").source) == (
        65536,
        "config",
    )
    assert gate.window("shared").tokens == 16384  # the smaller of the two that serve it
    assert gate.window("Qwen/Qwen3-1.7B").source == "default"


def test_the_upstreams_models_are_listed_with_their_aliases(tmp_path: Path) -> None:
    gate = ContextGate(_settings(tmp_path))
    assert gate.models() == ["Qwen/Qwen3-1.7B", "Qwen/Qwen3-32B", "shared"]
    assert set(gate.aliases.values()) == set(gate.models())


def test_each_upstream_is_asked_with_its_own_profile(tmp_path: Path) -> None:
    from tpx.gateway.asgi import create_app

    seen: list[tuple[str, str]] = []

    def transport(name: str) -> httpx2.MockTransport:
        def handle(request: httpx2.Request) -> httpx2.Response:
            seen.append((name, request.url.path))
            if request.url.path.endswith("/models"):
                cards = [{"id": "Qwen/Qwen3-1.7B", "max_model_len": 4096}]
                return httpx2.Response(200, json={"data": cards})
            return httpx2.Response(404, json={"error": "not found"})

        return httpx2.MockTransport(handle)

    app = create_app(
        _settings(tmp_path), transport={n: transport(n) for n in ("small", "big", "replica")}
    )

    async def run() -> int:
        messages: asyncio.Queue[dict[str, Any]] = asyncio.Queue()

        async def send(message: MutableMapping[str, Any]) -> None:
            pass

        await messages.put({"type": "lifespan.startup"})
        task = asyncio.create_task(app({"type": "lifespan"}, messages.get, send))
        while app.gateway.context.windows.of("Qwen/Qwen3-1.7B").source != "discovered":
            await asyncio.sleep(0.01)  # the discovery tasks run on this loop
        await messages.put({"type": "lifespan.shutdown"})
        await task
        return app.gateway.context.windows.of("Qwen/Qwen3-1.7B").tokens

    assert asyncio.run(asyncio.wait_for(run(), 60)) == 4096
    # only the small one has a model without a configured window: the others are not asked
    assert {name for name, _ in seen} == {"small"}
