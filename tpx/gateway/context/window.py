"""The context window of each upstream model: configured, discovered, or the default.

Where a model's window comes from, first found wins:

1. the config file: ``context_window`` of the ``[[models]]`` entry that names the model
   (or of the entry a caller's model matched), or ``[upstream] context_window`` for
   ``TPX_MODEL`` / ``[upstream] model``;
2. discovered from the upstream (:mod:`tpx.gateway.context.discover`: vLLM's and SGLang's
   ``/v1/models`` ``max_model_len``, llama.cpp's ``/props`` ``n_ctx``, Ollama's ``/api/show``),
   kept until the next refresh;
3. :data:`DEFAULT_WINDOW`.

:class:`Windows` is read by the sans-I/O core (a dict look-up) and written by the I/O shell
when a discovery answers; both happen on one event loop, so no lock is needed.
"""

from __future__ import annotations

import attrs

__all__ = ["DEFAULT_WINDOW", "Window", "Windows"]

#: The window assumed when neither the config nor the upstream says one: the 200,000
#: tokens Claude Code assumes, so tpx never refuses what the Messages API would take.
DEFAULT_WINDOW = 200_000


@attrs.frozen
class Window:
    """A model's window in tokens, and where it came from (``config``, ``discovered``,
    ``default``)."""

    tokens: int
    source: str


class Windows:
    """The windows of the upstream models (configured ones fixed, discovered ones replaced
    at each refresh)."""

    __slots__ = ("_configured", "_default", "_discovered")

    def __init__(
        self, configured: dict[str, int] | None = None, default: int = DEFAULT_WINDOW
    ) -> None:
        self._configured = dict(configured or {})
        self._discovered: dict[str, int] = {}
        self._default = default

    def of(self, model: str | None, route_window: int | None = None) -> Window:
        """The window of upstream *model* (*route_window*: the matched ``[[models]]``
        entry's ``context_window``, which wins)."""
        if route_window is not None:
            return Window(route_window, "config")
        if model is not None:
            configured = self._configured.get(model)
            if configured is not None:
                return Window(configured, "config")
            discovered = self._discovered.get(model)
            if discovered is not None:
                return Window(discovered, "discovered")
        return Window(self._default, "default")

    def tokens(self, model: str | None, route_window: int | None = None) -> int:
        """``of(model, route_window).tokens``, nothing made (read for every request)."""
        if route_window is not None:
            return route_window
        if model is not None:
            configured = self._configured.get(model)
            if configured is not None:
                return configured
            discovered = self._discovered.get(model)
            if discovered is not None:
                return discovered
        return self._default

    def learn(self, model: str, tokens: int) -> None:
        """What the upstream said *model*'s window is (a discovery's answer)."""
        if tokens > 0:
            self._discovered[model] = tokens

    def largest(self) -> int:
        """The largest window any model has (configured, discovered or the default)."""
        return max([self._default, *self._configured.values(), *self._discovered.values()])

    def configured(self, model: str) -> bool:
        return model in self._configured
