"""From a read ``/v1/messages`` request to its exchange: what :class:`tpx.gateway.core.Gateway`
does once the request is parsed and its pairing judged (:meth:`Gateway._messages
<tpx.gateway.core.Gateway>`, which refuses what it must first).

:class:`Exchanges`, a part of the gateway, frames the request's
:class:`~tpx.gateway.turn.Conversation` (the exchange seeded with its history's
obligations) for its upstream: the route's upstream chosen by the window it fits
([[upstreams]]: :meth:`Exchanges._placement`), the context-window preflight (refused:
``PromptTooLong``), the in-flight slot (``limits.max_in_flight``), then ``CallerSend``:
a :class:`~tpx.gateway.turn.Turn` the I/O shell sends. With ``--monitor`` the exchange's
steps go through the :class:`~tpx.gateway.monitoring.LiveMonitor`, which takes the
client's obligations as :class:`Sent` read them from the request's bytes.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple

import orjson

from tpx.errors import PairingError, ProtocolError, UnsupportedError
from tpx.gateway import history
from tpx.gateway.bodies import BodyReader, Decoded
from tpx.gateway.context.asked import Count
from tpx.gateway.context.gate import ContextGate, Sizing
from tpx.gateway.context.placement import Placement, context_record, placing
from tpx.gateway.context.preflight import Verdict
from tpx.gateway.metrics import Metrics
from tpx.gateway.monitoring import LiveMonitor, SpecViolationError
from tpx.gateway.routing import Routed, UpstreamConfig, facts_of, family_signer, route
from tpx.gateway.settings import ModelRoute, Settings
from tpx.gateway.turn import Conversation, Turn
from tpx.gateway.wire import (
    Request,
    Response,
    UpstreamCall,
    endpoint_label,
    error_response,
    model_error_response,
    snapshot_record,
)
from tpx.oracle.tracecheck_gateway import EXCHANGE_TRACE
from tpx.transport.exchange import ExchangeSnapshot, Provider

if TYPE_CHECKING:
    from tpx.gateway.redaction import Secrets
    from tpx.transport.translate.profiles import Profile

__all__ = ["SLOT", "Exchanges", "Read", "Sent"]

#: the log-record key of an exchange holding an in-flight slot (removed before logging)
SLOT = "#slot"
_NO_IDS: frozenset[str] = frozenset()


class Sent:
    """A ``/v1/messages`` body as the client sent it, read once at the boundary
    (:meth:`Gateway.handle <tpx.gateway.core.Gateway.handle>`, ``--monitor``): its parse
    (the core reuses it while the body it handles is these very bytes), its history's
    obligations (the tool_use ids of the last assistant turn), which the monitor's
    ``Resume`` takes, and its conversation."""

    __slots__ = ("body", "decoded", "obligations", "opening")

    def __init__(
        self,
        body: bytes,
        decoded: Decoded | None,
        obligations: frozenset[str],
        opening: history.Opening | None = None,
    ) -> None:
        self.body = body
        self.decoded = decoded
        self.obligations = obligations
        #: its conversation, as the monitor names it (:func:`tpx.gateway.history.opening`)
        self.opening = opening

    @classmethod
    def read(cls, body: bytes, reader: BodyReader) -> Sent:
        try:
            decoded = reader.read(body)
        except orjson.JSONDecodeError:
            return cls(b"", None, _NO_IDS)  # not reused: the core refuses it
        value = decoded.value
        messages = value.get("messages") if type(value) is dict else None
        if type(messages) is not list:
            return cls(body, decoded, _NO_IDS)
        try:
            obligations = frozenset(history.pending_ids(messages))
        except (KeyError, TypeError):  # ill-formed: the core refuses it
            obligations = _NO_IDS
        return cls(body, decoded, obligations, history.opening(value))

    def answers(self) -> tuple[str, ...]:
        """The tool_result ids of its last user turn, in order, repeats kept: read from the
        bytes when asked (a refusal is judged by them; the core changes the parse's ids)."""
        with contextlib.suppress(orjson.JSONDecodeError, KeyError, TypeError):
            value = orjson.loads(self.body)
            messages = value.get("messages") if type(value) is dict else None
            if type(messages) is list:
                return tuple(history.answer_ids(messages))
        return ()


class Read(NamedTuple):
    """A ``/v1/messages`` request as :meth:`Gateway._messages
    <tpx.gateway.core.Gateway>` read it: what its exchange is framed from, whichever
    upstream it goes to."""

    request: Request
    request_id: str
    sent: Sent | None
    """the body as the client sent it (``--monitor``; else ``None``)"""
    log: dict[str, Any]
    """the request's log record, filled as it goes"""
    decoded: Decoded
    pending: list[str]
    """the obligations its history carries, as the core reads them"""
    problem: str | None
    """the Messages API's wording of its pairing problem (``None``: it pairs)"""


class Exchanges:
    """The exchanges of :class:`tpx.gateway.core.Gateway` (a part of it: see the module doc).
    Holds the in-flight count (``limits.max_in_flight``)."""

    if TYPE_CHECKING:  # what the gateway gives this part of it
        settings: Settings
        metrics: Metrics
        monitor: LiveMonitor | None
        context: ContextGate
        _action_counters: dict[str, Any]

        @property
        def secrets(self) -> Secrets: ...

        def count(self, endpoint: str, status: int) -> None: ...

        def log(self, record: dict[str, Any], *, failed: bool) -> None: ...

        def redact(self, text: str) -> str: ...

    def __init__(self) -> None:
        #: exchanges in flight (limits.max_in_flight), under a lock: big bodies are handled
        #: on worker threads
        self._in_flight = 0
        self._slots = threading.Lock()

    def _exchange(
        self,
        read: Read,
        upstream_model: str | None,
        translation: dict[str, Any],
        routed: Routed | None,
        sizing: Sizing | None,
        counted: Count | None,
    ) -> Response | Turn:
        """The exchange of a ``/v1/messages`` request, its preflight counted (*counted*: the
        tokenizer endpoint's count or its fallback; ``None``: the estimate)."""
        request, request_id, sent, log, decoded, pending, problem = read
        settings = self.settings
        body: dict[str, Any] = decoded.value
        actions: list[str] = []
        log["actions"] = actions
        monitor = self.monitor  # --monitor: its traces replace the raw exchange traces
        trace: list[dict[str, Any]] | None = (
            [] if settings.trace_dir is not None and monitor is None else None
        )
        observer = self._observer(actions, trace)
        if monitor is not None:
            observer = monitor.observer(request_id, pending, observer)
        exchange = Conversation(
            settings.provider,
            pending,
            model=upstream_model,
            prepared=self.secrets,
            observer=observer,
            **translation,
        )
        if trace is not None:
            trace.append(
                {
                    "#trace": EXCHANGE_TRACE,
                    "#action": "Resume",
                    **snapshot_record(exchange.snapshot()),
                }
            )
            log["#trace"] = trace
        try:
            if monitor is not None:
                # Resume: the obligations of the history AS THE CLIENT SENT IT (the spec's
                # pending), not what the core derived from it
                monitor.start(
                    request_id,
                    exchange.snapshot(),
                    sent.obligations if sent else None,
                    sent.answers if sent else None,
                    conversation=sent.opening if sent else None,
                )
            if settings.provider is Provider.NONE:
                error = exchange.no_provider()
                log["error"] = error.code
                self.log(log, failed=True)
                return model_error_response(error, request_id)
            verdict = self._context_preflight(body, sizing, counted, log)
            if verdict is not None and verdict.refusal is not None:
                # the preflight refusal (the spec's PromptTooLong): nothing goes on the wire
                too_long = verdict.refusal
                if monitor is not None:
                    monitor.preflight_refused(
                        request_id,
                        exchange.snapshot(),
                        input_tokens=verdict.input_tokens,
                        maximum=verdict.maximum if verdict.maximum is not None else 0,
                    )
                log["error"] = "GATEWAY_400"
                self.metrics.errors.labels("GATEWAY_400").inc()
                self.log(log, failed=True)
                return error_response(400, "invalid_request_error", too_long, request_id)
            if not self._take_slot():  # MaxInFlight: CallerSend is not enabled
                log["error"] = "GATEWAY_529"
                self.log(log, failed=True)
                self.metrics.errors.labels("GATEWAY_529").inc()
                return error_response(
                    529,
                    "overloaded_error",
                    f"The gateway has {settings.limits.max_in_flight} requests in flight; "
                    "retry shortly",
                    request_id,
                )
            log[SLOT] = True  # released when the exchange's line is logged
            # orjson parsed the body: its depth is checked at C speed, once (a tail kept
            # by the body reader: its verdict was taken when it was kept)
            outbound = exchange.send(body, shallow=not decoded.too_deep())
        except SpecViolationError as stop:  # --monitor: fail closed
            log["error"] = stop.code
            self.log(log, failed=True)
            return model_error_response(stop, request_id)
        except PairingError as error:  # CallerAbort (pending) or refused (nothing pending)
            log["error"] = error.code
            if monitor is not None and not actions:  # refused: the spec's CallerAbort
                try:
                    monitor.refused(request_id, exchange.snapshot())
                except SpecViolationError as stop:
                    log["error"] = stop.code
                    self.log(log, failed=True)
                    return model_error_response(stop, request_id)
            self.log(log, failed=True)
            message = problem or error.message
            return error_response(400, "invalid_request_error", message, request_id)
        except (ProtocolError, UnsupportedError) as error:
            log["error"] = error.code
            self.log(log, failed=True)
            return error_response(400, "invalid_request_error", error.message, request_id)
        headers = list(outbound.headers)
        if settings.provider is Provider.ANTHROPIC:
            beta = request.headers.get("anthropic-beta")
            if beta:
                headers.append(("anthropic-beta", beta))
        call = UpstreamCall(
            outbound.method, outbound.path, tuple(headers), outbound.body, exchange.streaming
        )
        turn = Turn(self, request_id, call, exchange, log)
        turn.routed = routed
        return turn

    def _placement(
        self,
        read: Read,
        routed: Routed,
        place: Callable[[str, Sizing | None, Count | None], Response | Turn],
    ) -> Response | Turn | Placement:
        """A routed turn: sent as balancing picks when it cannot come near the window of any
        upstream of its route, else placed on one it fits (tpx.gateway.context.placement)."""
        body: dict[str, Any] = read.decoded.value
        request = read.request
        model_route = self._model_route(body["model"])
        label = endpoint_label(request.path)
        routing = self.settings.routing
        assert routing is not None
        size = len(request.body)
        placement = placing(
            self.context, self, routing, routed, body, size, model_route, label, read.log, place
        )
        if placement is None:  # fits everywhere: the pool balances
            return place(routed.rule.upstreams[0], None, None)
        return placement

    def _placed(
        self,
        read: Read,
        routed: Routed,
        name: str,
        sizing: Sizing | None,
        counted: Count | None,
    ) -> Response | Turn:
        """The exchange of a routed turn framed for upstream *name*."""
        routing = self.settings.routing
        assert routing is not None
        upstream = routing.upstream(name)
        model, framed, translation = self._framing(upstream, routed.requested)
        routed.upstream = name
        routed.framed = framed
        read.log["upstream"] = name
        if model is not None:
            read.log["upstream_model"] = model
        return self._exchange(read, model, translation, routed, sizing, counted)

    def _routed(
        self, request: Request, body: dict[str, Any], requested: str | None
    ) -> tuple[Routed, str | None, dict[str, Any]]:
        """The route of a request ([[upstreams]]; tpx.gateway.routing): framed for the first
        upstream of its rule (the driver may send it to another: ``Turn.target``)."""
        routing = self.settings.routing
        assert routing is not None
        facts = facts_of(body, request.headers, len(request.body), routing.options)
        rule = route(routing, facts)
        upstream = routing.upstream(rule.upstreams[0])
        model, framed, translation = self._framing(upstream, requested or body["model"])
        routed = Routed(rule, body, requested or body["model"], upstream.name, framed)
        return routed, model, translation

    def _framing(
        self, upstream: UpstreamConfig, requested: str | None
    ) -> tuple[str | None, tuple[str | None, Profile, str], dict[str, Any]]:
        """How a request for model *requested* is framed for *upstream*: the model it names
        there, what :attr:`Routed.framed` records, and what its exchange translates with
        (the upstream's profile, the thinking signer of its family)."""
        model = upstream.model_for(requested)
        signer = family_signer(self.settings.signer, upstream.family)
        translation = {"profile": upstream.profile, "thinking_secret": signer}
        return model, (model, upstream.profile, upstream.family), translation

    def _model_route(self, model: str) -> ModelRoute | None:
        """The ``[[models]]`` route of a requested *model* (a ``claude-tpx-...`` alias's own)."""
        alias = self.context.resolve(model)
        return alias[1] if alias is not None else self.settings.route(model)

    def _context_sizing(
        self, body: dict[str, Any], upstream_model: str | None, size: int
    ) -> Sizing | None:
        """What the preflight (TPX) counts against, ``None`` when nothing is counted: only a
        body that may come near its window is (tpx.gateway.context.preflight)."""
        model_route = self._model_route(body["model"])
        return self.context.sizing(body, upstream_model, size, model_route)

    def _context_preflight(
        self,
        body: dict[str, Any],
        sizing: Sizing | None,
        counted: Count | None,
        log: dict[str, Any],
    ) -> Verdict | None:
        """The preflight (TPX): its verdict (``refusal``: ``prompt is too long: N tokens > M
        maximum`` when the request cannot fit its model's context window; else its
        ``max_tokens`` lowered to what the window leaves when needed), ``None`` when it was
        not counted. *counted*: the tokenizer endpoint's count (``None``: the estimate)."""
        if sizing is None:
            return None
        tokens = counted.tokens if counted is not None else self.context.estimate(sizing)
        verdict = self.context.decide(body, sizing, tokens)
        log["context"] = context_record(verdict, counted)
        return verdict

    def _observer(
        self, actions: list[str], trace: list[dict[str, Any]] | None
    ) -> Callable[[str, ExchangeSnapshot], None]:
        counters = self._action_counters

        def observe(action: str, snapshot: ExchangeSnapshot) -> None:
            actions.append(action)
            counter = counters.get(action)
            if counter is None:  # labels() takes a lock: resolve each action's child once
                counter = counters[action] = self.metrics.actions.labels(action)
            counter.inc()
            if trace is not None:
                trace.append({"#action": action, **snapshot_record(snapshot)})

        return observe

    def _take_slot(self) -> bool:
        """One more exchange in flight, if fewer than ``limits.max_in_flight`` are."""
        with self._slots:
            if self._in_flight >= self.settings.limits.max_in_flight:
                return False
            self._in_flight += 1
            return True

    def _free_slot(self, record: dict[str, Any]) -> None:
        """The exchange of the log *record* ended: its slot, if it held one, is free."""
        if record.pop(SLOT, False):
            with self._slots:
                self._in_flight -= 1

    @property
    def in_flight(self) -> int:
        """/v1/messages exchanges in flight (sent upstream, their line not yet logged)."""
        return self._in_flight
