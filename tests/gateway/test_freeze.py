"""``tpx serve``'s app freezes what the started process holds (``gc.freeze()``) so the garbage
collector's full collections do not walk it; an app made in-process (tests, the SDK) does not."""

from __future__ import annotations

import asyncio
import gc
import logging
from collections.abc import MutableMapping
from typing import Any

import httpx2
import pytest

from tpx.gateway.asgi import create_app
from tpx.gateway.cli import worker_app

from .conftest import make_settings


def _start_and_stop(app: Any) -> int:
    """The app's lifespan, started then shut down; the frozen objects counted once started."""
    frozen = -1

    async def run() -> None:
        nonlocal frozen
        messages: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        started = asyncio.Event()

        async def send(message: MutableMapping[str, Any]) -> None:
            if message["type"] == "lifespan.startup.complete":
                started.set()

        await messages.put({"type": "lifespan.startup"})
        task = asyncio.create_task(app({"type": "lifespan"}, messages.get, send))
        await started.wait()
        frozen = gc.get_freeze_count()
        await messages.put({"type": "lifespan.shutdown"})
        await task

    asyncio.run(asyncio.wait_for(run(), 60))
    return frozen


@pytest.mark.parametrize("freeze", [False, True])
def test_only_a_server_process_freezes_its_heap_once_started(freeze: bool) -> None:
    transport = httpx2.MockTransport(lambda _: httpx2.Response(200))
    app = create_app(make_settings("TPX"), transport=transport, freeze=freeze)
    gc.unfreeze()
    try:
        frozen = _start_and_stop(app)
    finally:
        gc.unfreeze()
    assert (frozen > 1000) is freeze, frozen


def test_tpx_serve_workers_freeze(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TPX_OAUTH_TOKEN", "tok")
    monkeypatch.setenv("TPX_BASE_URL", "http://upstream.test/v1")
    log = logging.getLogger("tpx.gateway")  # the worker sets up its log line's handler
    saved = (log.level, log.propagate, list(log.handlers))
    try:
        assert worker_app().freeze is True
    finally:
        log.level, log.propagate, log.handlers = saved
