"""Asking the upstream what its models' context windows are, per profile.

Where each kind of server says it (one :class:`Probe` record per profile, data):

* vLLM and SGLang: ``GET /v1/models``, each model card's ``max_model_len``;
* llama.cpp: ``GET /props``, ``default_generation_settings.n_ctx`` (the context the server
  was started with, ``-c``; per slot), else ``n_ctx`` at the top;
* Ollama: ``POST /api/show`` ``{"model": NAME}``: ``num_ctx`` in ``parameters`` when the
  model sets it, else ``model_info["<arch>.context_length"]``.

Other profiles (hosted APIs) say nothing: their windows come from the config or the default.
The parsers are pure (:meth:`Probe.read`); :func:`discover` does the I/O through the
gateway's upstream client (its credential, timeouts and limits) and is run by the I/O shell
at start and every ``[context] refresh`` seconds (:func:`keep_fresh`). A probe that fails
(a 404, a timeout, an odd body) leaves the window where it was: discovery never fails a
request.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol

import attrs
import orjson

from tpx import _safe
from tpx.gateway.context.gate import ContextGate
from tpx.gateway.context.window import Windows
from tpx.gateway.wire import UpstreamCall

__all__ = ["PROBES", "Probe", "discover", "keep_fresh", "start_discovery"]

logger = logging.getLogger("tpx.gateway")


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def _model_cards(data: Any, model: str) -> int | None:
    cards = data.get("data") if isinstance(data, dict) else None
    for card in cards if isinstance(cards, list) else ():
        if isinstance(card, dict) and card.get("id") == model:
            return _int(card.get("max_model_len"))
    return None


def _llama_props(data: Any, model: str) -> int | None:
    if not isinstance(data, dict):
        return None
    settings = data.get("default_generation_settings")
    if isinstance(settings, dict) and _int(settings.get("n_ctx")):
        return _int(settings.get("n_ctx"))
    return _int(data.get("n_ctx"))


_NUM_CTX = re.compile(r"^\s*num_ctx\s+(\d+)\s*$", re.MULTILINE)


def _ollama_show(data: Any, model: str) -> int | None:
    if not isinstance(data, dict):
        return None
    parameters = data.get("parameters")
    if isinstance(parameters, str):
        found = _NUM_CTX.search(parameters)
        if found:
            return int(found.group(1))
    info = data.get("model_info")
    if isinstance(info, dict):
        for key, value in info.items():
            if isinstance(key, str) and key.endswith(".context_length") and _int(value):
                return _int(value)
    return None


@attrs.frozen
class Probe:
    """Where a kind of server says a model's window: *method* *path* (*per_model*: once per
    model, with ``{"model": NAME}`` as the body), read by *parse*."""

    method: str
    path: str
    parse: Callable[[Any, str], int | None]
    per_model: bool = False

    def call(self, model: str) -> UpstreamCall:
        body = orjson.dumps({"model": model}) if self.per_model else b""
        headers = (("content-type", "application/json"),) if body else ()
        return UpstreamCall(self.method, self.path, headers, body)

    def read(self, status: int, body: bytes, model: str) -> int | None:
        """The window in a reply (``None``: not said, or not a 200)."""
        if status != 200:
            return None
        try:
            data = _safe.loads(body)
        except (ValueError, TypeError):
            return None
        return self.parse(data, model)


#: The probe of each profile that has one.
PROBES: Mapping[str, Probe] = {
    "vllm": Probe("GET", "/v1/models", _model_cards),
    "sglang": Probe("GET", "/v1/models", _model_cards),
    "llama.cpp": Probe("GET", "/props", _llama_props),
    "ollama": Probe("POST", "/api/show", _ollama_show, per_model=True),
}


class Upstream(Protocol):
    """What discovery needs of :class:`tpx.gateway.upstream.AsyncUpstream`."""

    async def open(self, call: UpstreamCall) -> Any: ...

    async def read(self, response: Any) -> bytes: ...


async def discover(
    upstream: Upstream, probe: Probe, models: Iterable[str], windows: Windows
) -> None:
    """Ask once for each of *models* (one request for all when the probe lists them all)."""
    answers: dict[bytes, tuple[int, bytes]] = {}
    for model in models:
        if windows.configured(model):
            continue
        call = probe.call(model)
        key = call.body
        if key not in answers:
            try:
                response = await upstream.open(call)
                answers[key] = (response.status_code, await upstream.read(response))
            except Exception as exc:  # a probe never fails the gateway
                logger.info("context window discovery failed: %s", type(exc).__name__)
                answers[key] = (0, b"")
        status, body = answers[key]
        tokens = probe.read(status, body, model)
        if tokens is not None:
            windows.learn(model, tokens)


async def keep_fresh(
    upstream: Upstream, probe: Probe, models: Iterable[str], windows: Windows, every: float
) -> None:
    """:func:`discover` now and every *every* seconds (a task the shell cancels at shutdown)."""
    names = tuple(models)
    while True:
        with contextlib.suppress(Exception):
            await discover(upstream, probe, names, windows)
        await asyncio.sleep(every)


def start_discovery(
    gate: ContextGate,
    upstream: Upstream,
    *,
    profile: str | None = None,
    served: Iterable[str] | None = None,
) -> asyncio.Task[None] | None:
    """Start :func:`keep_fresh` for *gate*'s models when its profile has a probe, discovery
    is on and the provider is TPX (``None``: nothing to discover). One upstream of
    ``[[upstreams]]``: its *profile* and the models it *served*."""
    probe = PROBES.get(profile if profile is not None else gate.settings.profile.name)
    names = gate.models() if served is None else list(served)
    models = [m for m in names if not gate.windows.configured(m)]
    if not gate.active or not gate.config.discover or probe is None or not models:
        return None
    return asyncio.create_task(
        keep_fresh(upstream, probe, models, gate.windows, gate.config.refresh)
    )
