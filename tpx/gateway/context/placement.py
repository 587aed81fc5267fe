"""Where a routed request fits (``[[upstreams]]``): the preflight of each upstream it may go to.

With several upstreams a request's window and count depend on the upstream it goes to: each
``[[upstreams]]`` entry has its window (its ``context_window``, else its model's) and may
have its own tokenizer endpoint (``tokenizer = true``). When a ``/v1/messages`` body may come
near the window of one of its route's upstreams (the size test of :mod:`.preflight`),
:meth:`tpx.gateway.core.Gateway.handle` answers with a :class:`Placement` instead of a turn.
The I/O shell (:meth:`tpx.gateway.pool.UpstreamPool.place`) takes the route's upstreams in
the order balancing prefers them and, for each, counts the request for it (its endpoint,
asked once, bounded and holding an upstream slot and that upstream's ``concurrency`` slot,
as :mod:`.asked` says; else the estimate) and checks it against its window
(:meth:`Placement.check`): the first it fits is where the request goes
(:meth:`Placement.resume`: the turn, framed for it, its ``max_tokens`` clamped for its
window). When it fits none, it is refused before the wire (``prompt is too long``, against
the route's largest room: what fits there may go).

A failover only moves the turn to an upstream it fits: before another upstream is sent the
request, it is counted and checked for that upstream the same way (once an upstream), and
an upstream it does not fit is passed over (:func:`tpx.gateway.dispatch.pass_over`); with
none left, the client gets the answer of the last attempt (a 429 or 5xx that Claude Code
retries), never a refusal that would make it compact a conversation its first upstream
takes. ``count_tokens`` through a route counts with the upstream balancing picks first.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from tpx.gateway.context.asked import Asked, Count, Host, Outcome, log_gone
from tpx.gateway.context.gate import ContextGate, Sizing
from tpx.gateway.context.preflight import Verdict, preflight
from tpx.gateway.routing import Routed, Routing, Rule
from tpx.gateway.settings import ModelRoute
from tpx.gateway.wire import Response

__all__ = ["Placement", "context_record", "counting", "placing"]

#: What the core makes of a placed request: (upstream, its sizing, its count) -> response or
#: turn; for count_tokens: the count -> response.
Go = Callable[[str, Sizing | None, Count | None], Any]


def context_record(verdict: Verdict, counted: Count | None) -> dict[str, Any]:
    """The log line's ``context`` for a preflight's *verdict* (*counted*: the endpoint's
    count or its fallback; ``None``: the estimate)."""
    record: dict[str, Any] = {
        "input_tokens": verdict.input_tokens,
        "window": verdict.window,
        "clamped": verdict.clamped,
        # who counted: an estimate leans to overcount (a refusal on it may be early)
        "counted": "tokenizer" if counted is not None and counted.exact else "estimate",
    }
    if counted is not None and counted.fallback is not None:  # the endpoint gave none
        record["fallback"] = counted.fallback
    return record


class Placement:
    """A routed request waiting to be placed on an upstream it fits (module docstring).

    *sizings*: each candidate's sizing (``None``: it fits there without counting);
    *translate*: what is counted for a candidate (count_tokens); *go*: the core's
    continuation. *counting*: a ``count_tokens`` request (only the first upstream counts)."""

    def __init__(
        self,
        gate: ContextGate,
        host: Host,
        routing: Routing,
        candidates: tuple[str, ...],
        body: dict[str, Any],
        *,
        label: str,
        sizings: Mapping[str, Sizing | None],
        models: Mapping[str, str | None],
        go: Go,
        counting: Callable[[Count], Any] | None = None,
        translate: Callable[[str], Mapping[str, Any] | None] | None = None,
        log: dict[str, Any] | None = None,
    ) -> None:
        self.gate = gate
        self.host = host
        self.routing = routing
        self.candidates = candidates
        self.body = body
        self.label = label
        self.sizings = sizings
        self.models = models
        self.go = go
        self.counting = counting
        self.translate = translate
        self._translated: dict[str, Mapping[str, Any] | None] = {}
        self.log = log
        wanted = body.get("max_tokens")
        self.wanted = wanted if isinstance(wanted, int) else None
        self._asked: dict[str, Asked | None] = {}
        #: each upstream checked: its verdict (``None``: fits without counting) and count
        self.checked: dict[str, tuple[Verdict | None, Count | None]] = {}
        self._ended = False

    def asked(self, name: str) -> Asked | None:
        """The request waiting for *name*'s tokenizer endpoint (``None``: nothing to ask:
        it has none, or the request fits there without counting)."""
        if name in self._asked:
            return self._asked[name]
        upstream = self.routing.upstream(name)
        asked: Asked | None = None
        if upstream.tokenizer is not None:
            if self.counting is not None:
                translated = self._framed(name)
                if translated is not None:
                    asked = self.gate.asked(
                        self.host, self.label, translated, self.models[name], _same, None,
                        upstream=upstream,
                    )  # fmt: skip
            else:
                sizing = self.sizings.get(name)
                if sizing is not None:
                    asked = self.gate.asked(
                        self.host, self.label, sizing.translated, self.models[name], _same,
                        sizing.maximum, self.log, upstream=upstream,
                    )  # fmt: skip
        self._asked[name] = asked
        return asked

    def _framed(self, name: str) -> Mapping[str, Any] | None:
        """The request as it goes to *name* (count_tokens: translated once an upstream)."""
        if name not in self._translated:
            assert self.translate is not None
            self._translated[name] = self.translate(name)
        return self._translated[name]

    def known(self, name: str) -> bool | None:
        """Does the request fit *name* (``None``: not checked yet)?"""
        if name not in self.checked:
            return None
        verdict = self.checked[name][0]
        return verdict is None or verdict.refusal is None

    def check(self, name: str, outcome: Outcome | None) -> bool:
        """Count the request for *name* (*outcome*: what its endpoint gave, ``None``: not
        asked, the estimate counts) and check it against *name*'s window: does it fit?"""
        asked = self.asked(name)
        if self.counting is not None:
            translated = self._framed(name) or {}
            if asked is not None and outcome is not None:
                count = asked.count(outcome)
            else:
                count = Count(self.gate.count(translated, self.gate.ceiling()), exact=False)
            self.checked[name] = (None, count)
            return True
        sizing = self.sizings.get(name)
        if sizing is None:
            self.checked[name] = (None, None)
            return True
        if asked is not None and outcome is not None:
            count = asked.count(outcome)
        else:
            count = Count(self.gate.estimate(sizing), exact=False)
        verdict = preflight(
            count.tokens, sizing.wanted, sizing.window, min_output=self.gate.config.min_output
        )
        self.checked[name] = (verdict, count)
        return verdict.refusal is None

    def resume(self, name: str | None) -> Any:
        """What the request becomes on *name*, an upstream it fits; ``None``: it fits none of
        its route's upstreams (each checked), refused against the one with the most room."""
        if self._ended:
            raise RuntimeError("a request is placed once")
        self._ended = True
        if self.counting is not None:
            assert name is not None
            count = self.checked[name][1]
            assert count is not None
            result = self.counting(count)
        else:
            if name is None:
                refused = [n for n in self.checked if self.known(n) is False]
                name = max(refused, key=lambda n: self.sizings[n].maximum)  # type: ignore[union-attr]
            self.body["max_tokens"] = self.wanted  # as the client asked: clamped for *name*
            if self.wanted is None:
                self.body.pop("max_tokens", None)
            result = self.go(name, self.sizings.get(name), self.checked[name][1])
        if isinstance(result, Response):
            self.host.count(self.label, result.status)
        elif hasattr(result, "placement"):  # a turn: a failover checks the next upstream
            result.placement = self
        return result

    def abandon(self) -> None:
        """The client left while an endpoint was asked: the request ends (nothing goes
        upstream); a turn's line is logged with ``client_gone``."""
        if self._ended:
            raise RuntimeError("a request is placed once")
        self._ended = True
        log_gone(self.host, self.log)

    def apply(self, name: str) -> bool:
        """The turn goes to *name* (a failover; checked, fits): ``max_tokens`` clamped for
        *name*'s window, the log line's ``context`` its count. Did ``max_tokens`` change?"""
        if name not in self.checked:  # placed there without counting
            return False
        verdict, count = self.checked[name]
        before = self.body.get("max_tokens")
        wanted = self.wanted
        if verdict is not None and verdict.clamped:
            wanted = verdict.max_tokens
        if wanted is None:
            self.body.pop("max_tokens", None)
        else:
            self.body["max_tokens"] = wanted
        if self.log is not None:
            if verdict is not None:
                self.log["context"] = context_record(verdict, count)
            else:
                self.log.pop("context", None)
        return self.body.get("max_tokens") != before


def placing(
    gate: ContextGate,
    host: Host,
    routing: Routing,
    routed: Routed,
    body: dict[str, Any],
    size: int,
    route: ModelRoute | None,
    label: str,
    log: dict[str, Any],
    go: Go,
) -> Placement | None:
    """The placement of a routed ``/v1/messages`` body of *size* bytes (ids unsigned),
    ``None`` when it cannot come near the window of any upstream of its route (nothing to
    count: balancing picks). *go*: the core's exchange framed for an upstream."""
    candidates = routed.rule.upstreams
    requested = routed.requested
    models: dict[str, str | None] = {}
    sizings: dict[str, Sizing | None] = {}
    near = False  # the body may come near some upstream's window (it is counted then)
    for name in candidates:  # one pass: every routed request takes it
        upstream = routing.upstream(name)
        model = models[name] = upstream.model_for(requested)
        sizing = sizings[name] = gate.sizing(body, model, size, route, upstream)
        near = near or sizing is not None
    if not near:
        return None
    return Placement(
        gate, host, routing, candidates, body,
        label=label, sizings=sizings, models=models, go=go, log=log,
    )  # fmt: skip


def counting(
    gate: ContextGate,
    host: Host,
    routing: Routing,
    rule: Rule,
    requested: str,
    body: dict[str, Any],
    label: str,
    answer: Callable[[Count], Any],
) -> Placement | None:
    """The placement of a routed ``count_tokens`` body: counted for the upstream of *rule*
    balancing picks first, with its endpoint (``None``: no upstream of the route has one,
    the estimate counts as with one upstream)."""
    candidates = rule.upstreams
    if all(routing.upstream(n).tokenizer is None for n in candidates):
        return None
    models = {n: routing.upstream(n).model_for(requested) for n in candidates}

    def framed(name: str) -> Mapping[str, Any] | None:
        return gate.translate(body, models[name], routing.upstream(name))

    return Placement(
        gate, host, routing, candidates, body,
        label=label, sizings={}, models=models, go=_never, counting=answer, translate=framed,
    )  # fmt: skip


def _same(count: Count) -> Count:
    return count


def _never(name: str, sizing: Sizing | None, counted: Count | None) -> Any:
    raise AssertionError("a count is answered, never sent")
