"""What the gateway core asks of the context-window contract (TPX provider), in one object.

:class:`ContextGate` holds the windows (:mod:`.window`), the model aliases (:mod:`.aliases`)
and the switches (``[context]``), and answers the core's questions: which upstream model an
alias names, whether a request fits its window (:meth:`ContextGate.check`, the preflight),
how many tokens a translated request counts, what an upstream context error becomes. Pure:
discovery writes the windows from the I/O shell (:mod:`.discover`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import attrs

from tpx.errors import ProtocolError, UnsupportedError
from tpx.gateway.context.aliases import aliases
from tpx.gateway.context.asked import Asked, Count, Host
from tpx.gateway.context.preflight import Verdict, maximum_input, may_overflow, preflight
from tpx.gateway.context.tokenizer import TOKENIZERS, TokenizerEndpoint
from tpx.gateway.context.window import Window, Windows
from tpx.gateway.routing import UpstreamConfig, family_signer
from tpx.gateway.settings import ModelRoute, Settings
from tpx.transport.exchange import Provider
from tpx.transport.translate import request_to_openai
from tpx.transport.translate.overflow import overflow_in, too_long

__all__ = ["ContextGate", "Sizing"]


@attrs.frozen
class Sizing:
    """What a request's preflight counts against (:meth:`ContextGate.sizing`)."""

    window: int
    wanted: int | None
    #: the most input tokens the window takes (a refusal's M; counting may stop past it)
    maximum: int
    translated: Mapping[str, Any]


class ContextGate:
    """The context-window contract of one gateway (see the module docstring)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.config = settings.context
        self.active = settings.provider is Provider.TPX
        configured: dict[str, int] = {}
        if settings.model and self.config.window is not None:
            configured[settings.model] = self.config.window
        for route in settings.routes:
            if route.model and route.context_window is not None:
                configured.setdefault(route.model, route.context_window)
        for upstream in settings.routing.upstreams if settings.routing is not None else ():
            if upstream.context_window is None:
                continue
            for model in upstream.models:  # served by several: the smallest window holds
                known = configured.get(model)
                configured[model] = min(known or upstream.context_window, upstream.context_window)
        self.windows = Windows(configured, self.config.default)
        #: the tokenizer endpoint count_tokens and the preflight ask (``[context] tokenizer``
        #: and one upstream; None: the estimate counts)
        self.tokenizer: TokenizerEndpoint | None = (
            TOKENIZERS.get(settings.profile.name)
            if self.active and self.config.tokenizer and settings.routing is None
            else None
        )
        #: some upstream's tokenizer endpoint counts (the one upstream's, or an entry's)
        self.asks = self.tokenizer is not None or (
            self.active
            and settings.routing is not None
            and any(u.tokenizer is not None for u in settings.routing.upstreams)
        )
        self.aliases: Mapping[str, str] = (
            aliases(self.models()) if self.active and self.config.aliases else {}
        )

    def models(self) -> list[str]:
        """The configured upstream models, ``TPX_MODEL`` first, then ``[[models]]``, then the
        models of ``[[upstreams]]``, each once."""
        names: list[str] = []
        routing = self.settings.routing
        served = [m for u in routing.upstreams for m in u.models] if routing is not None else []
        for name in [self.settings.model, *(r.model for r in self.settings.routes), *served]:
            if name and name not in names:
                names.append(name)
        return names

    def resolve(self, model: str) -> tuple[str, ModelRoute | None] | None:
        """For an alias: its upstream model and the ``[[models]]`` entry naming it."""
        target = self.aliases.get(model)
        if target is None:
            return None
        return target, next((r for r in self.settings.routes if r.model == target), None)

    def window(self, upstream_model: str | None, route: ModelRoute | None = None) -> Window:
        return self.windows.of(upstream_model, route.context_window if route else None)

    def window_at(
        self, upstream: UpstreamConfig | None, model: str | None, route: ModelRoute | None
    ) -> int:
        """The window of *model* on *upstream* (``[[upstreams]]``): the entry's own
        ``context_window`` when it has one, else the model's (:meth:`window`)."""
        if upstream is not None and upstream.context_window is not None:
            return upstream.context_window
        return self.windows.tokens(model, route.context_window if route else None)

    def sizing(
        self,
        body: dict[str, Any],
        upstream_model: str | None,
        body_bytes: int,
        route: ModelRoute | None = None,
        upstream: UpstreamConfig | None = None,
    ) -> Sizing | None:
        """What the preflight of a ``/v1/messages`` body (ids already unsigned) counts against:
        ``None`` when it cannot come near its window (nothing to count) or the preflight is
        off; else its window, its ``max_tokens``, the most input the window takes (``M``) and
        the request translated (what is counted). *upstream*: the ``[[upstreams]]`` entry it
        goes to (its window, framed with its profile)."""
        if not self.active or not self.config.preflight:
            return None
        window = self.window_at(upstream, upstream_model, route)
        max_tokens = body.get("max_tokens")
        wanted = max_tokens if isinstance(max_tokens, int) else None
        if not may_overflow(body_bytes, wanted, window, self.config.estimate_margin):
            return None
        translated = self.translate(body, upstream_model, upstream)
        if translated is None:
            return None  # the exchange refuses it with its own words
        maximum = maximum_input(window, wanted, self.config.min_output)
        return Sizing(window, wanted, maximum, translated)

    def translate(
        self, body: dict[str, Any], model: str | None, upstream: UpstreamConfig | None = None
    ) -> Mapping[str, Any] | None:
        """*body* as it goes upstream (what is counted), framed for *upstream* when given
        (``None``: it cannot be translated)."""
        profile, signer = self.settings.profile, self.settings.signer
        if upstream is not None:
            profile, signer = upstream.profile, family_signer(signer, upstream.family)
        try:
            return request_to_openai(body, model=model, profile=profile, secret=signer).body
        except (ProtocolError, UnsupportedError):
            return None

    def estimate(self, sizing: Sizing) -> int:
        """The preflight's estimate: counting stops once the count passes ``M``."""
        return self.count(sizing.translated, sizing.maximum)

    def decide(self, body: dict[str, Any], sizing: Sizing, input_tokens: int) -> Verdict:
        """The preflight's verdict on *input_tokens*, with ``body["max_tokens"]`` lowered
        when it was clamped."""
        verdict = preflight(
            input_tokens, sizing.wanted, sizing.window, min_output=self.config.min_output
        )
        if verdict.clamped:
            body["max_tokens"] = verdict.max_tokens
        return verdict

    def check(
        self,
        body: dict[str, Any],
        upstream_model: str | None,
        body_bytes: int,
        route: ModelRoute | None = None,
    ) -> Verdict | None:
        """The preflight counted with the estimate (:meth:`sizing`, then :meth:`decide`)."""
        sizing = self.sizing(body, upstream_model, body_bytes, route)
        if sizing is None:
            return None
        return self.decide(body, sizing, self.estimate(sizing))

    def ceiling(self) -> int:
        """Where count_tokens stops counting: the largest window any model has (a count
        past it is the count so far, already above every window)."""
        routes = [r.context_window for r in self.settings.routes if r.context_window]
        routing = self.settings.routing
        for upstream in routing.upstreams if routing is not None else ():
            if upstream.context_window:
                routes.append(upstream.context_window)
        return max([self.windows.largest(), *routes])

    def asked(
        self,
        gateway: Host,
        label: str,
        translated: Mapping[str, Any],
        model: str | None,
        proceed: Callable[[Count], Any],
        maximum: int | None,
        log: dict[str, Any] | None = None,
        upstream: UpstreamConfig | None = None,
    ) -> Asked:
        """A request waiting for the tokenizer endpoint's count (:mod:`.asked`). Its estimate,
        when the endpoint gives none, stops past *maximum* (the preflight's ``M``; ``None``:
        count_tokens, past every window: :meth:`ceiling`). *log*: a turn's line, logged
        should the client leave while the endpoint is asked. *upstream*: the
        ``[[upstreams]]`` entry asked (its endpoint and bounds; ``None``: the one upstream)."""
        endpoint = self.tokenizer if upstream is None else upstream.tokenizer
        assert endpoint is not None
        timeout, limit = self.config.tokenizer_timeout, self.config.tokenizer_bytes
        if upstream is not None:
            timeout = upstream.tokenizer_timeout or timeout
            limit = upstream.tokenizer_bytes or limit
        stop = self.ceiling() if maximum is None else maximum
        return Asked(
            gateway,
            label,
            endpoint,
            translated,
            model,
            lambda: self.count(translated, stop),
            proceed,
            timeout=timeout,
            limit=limit,
            log=log,
        )

    def count(self, translated: Mapping[str, Any], stop_above: int | None = None) -> int:
        """The input tokens of a translated request (count_tokens and the preflight), the
        estimate with the configured margin. With *stop_above*, counting stops once the count
        passes it."""
        from tpx.gateway.context.counting import estimate_tokens

        return estimate_tokens(translated, stop_above, self.config.estimate_margin)

    def rewrite(
        self, text: str | bytes, fallback_tokens: int | None = None, window: int | None = None
    ) -> str | None:
        """The Messages wording for an upstream context error in *text* (``None``: not one,
        or the rewrite is off). Numbers the error does not carry: *fallback_tokens* (the
        gateway's count) and *window*, else the largest the wording allows."""
        if not self.active or not self.config.rewrite_errors:
            return None
        found = overflow_in(text, self.settings.profile.overflow)
        if found is None:
            return None
        maximum = found.maximum if found.maximum is not None else window
        tokens = found.tokens if found.tokens is not None else fallback_tokens
        if maximum is None:
            maximum = self.config.default
        if tokens is None or tokens <= maximum:
            tokens = maximum + 1  # the server said it is too long: N > M, whatever it counted
        return too_long(tokens, maximum)
