"""The sans-I/O gateway core: an HTTP request in, a response (or an upstream call) out.

No sockets, no event loop: :meth:`Gateway.handle` takes a :class:`Request` (method, path,
query, headers, body bytes) and returns one of

* a :class:`Response` (status, headers, body bytes) to send as it is;
* a :class:`Turn`: one ``POST /v1/messages`` exchange that needs the upstream. The I/O
  shell sends :attr:`Turn.call` (credential-free: the shell adds the credential), then
  feeds the reply back: :meth:`Turn.reply` (non-streaming) or :meth:`Turn.start`,
  :meth:`Turn.feed`, :meth:`Turn.end`, :meth:`Turn.finish` (streaming: SSE bytes out);
  :meth:`Turn.fail` for a transport failure, :meth:`Turn.abandon` when the client left,
  and :meth:`Turn.close` once (the log line);
* a :class:`Forward`: an ANTHROPIC pass-through (``count_tokens``, ``/v1/models``);
* an :class:`~tpx.gateway.context.asked.Asked`: a request waiting for the upstream's
  tokenizer count (``[context] tokenizer``): the shell asks, then :meth:`Asked.resume` gives
  one of the above.

Each turn runs its own :class:`~tpx.transport.exchange.Exchange` (one spec instance per
conversation turn) seeded with the obligations its history carries
(:mod:`tpx.gateway.history`); only the boot-time provider selection
(:class:`~tpx.gateway.settings.Settings`) is shared, so any number of conversations run
concurrently, on any number of workers or replicas sharing ``TPX_GATEWAY_SECRET``.

Retries: a failed turn (429 / 529 / 5xx / a stream error / the client gone) leaves
nothing behind, so the same body sent again (or without ``stream``) is a fresh turn
whose obligations are again its history's: it succeeds. This is the gateway's one
deliberate difference from the seed spec, whose ProviderFail discards ``pending``.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import secrets
import threading
from collections.abc import Callable, Mapping
from typing import Any

import attrs
import orjson

from tpx import _safe
from tpx.errors import PairingError, ProtocolError, UnsupportedError
from tpx.gateway import history
from tpx.gateway.bodies import BodyReader, Decoded
from tpx.gateway.context.asked import Asked, Count
from tpx.gateway.context.gate import ContextGate, Sizing
from tpx.gateway.context.placement import Placement, context_record, counting, placing
from tpx.gateway.context.preflight import Verdict
from tpx.gateway.history import (
    Refusal,
    pairing_problem,
    pending_ids,
    unsign_ids,
    validate_request,
)
from tpx.gateway.metrics import CONTENT_TYPE, Metrics
from tpx.gateway.monitoring import LiveMonitor, SpecViolationError
from tpx.gateway.redaction import Secrets, prepared
from tpx.gateway.routing import Routed, facts_of, family_signer, route
from tpx.gateway.settings import Settings
from tpx.gateway.turn import Conversation, Forward, Turn
from tpx.gateway.wire import (
    COUNT,
    JSON,
    MESSAGES,
    MODELS,
    PING,
    SSE_HEADERS,
    Request,
    Response,
    UpstreamCall,
    endpoint_label,
    error_body,
    error_response,
    json_response,
    model_error_response,
    new_request_id,
    snapshot_record,
)
from tpx.oracle.tracecheck_gateway import EXCHANGE_TRACE
from tpx.transport.exchange import ExchangeSnapshot, Provider
from tpx.transport.translate import request_to_openai

__all__ = [
    "PING",
    "SSE_HEADERS",
    "Forward",
    "Gateway",
    "Request",
    "Response",
    "Turn",
    "UpstreamCall",
    "error_body",
    "new_request_id",
]

logger = logging.getLogger("tpx.gateway")

_PID = os.getpid()
#: the log-record key of an exchange holding an in-flight slot (removed before logging)
_SLOT = "#slot"
os.register_at_fork(after_in_child=lambda: globals().update(_PID=os.getpid()))


class Gateway:
    """The sans-I/O gateway (one per process; holds no per-conversation state)."""

    def __init__(self, settings: Settings, *, metrics: Metrics | None = None) -> None:
        self.settings = settings
        self.metrics = metrics or Metrics()
        # what every TPX exchange translates with: the upstream's profile and the thinking
        # signer (a block signed by one worker or replica verifies on any other sharing
        # TPX_THINKING_SECRET); the ANTHROPIC pass-through takes neither
        self._translation: dict[str, Any] = (
            {"profile": settings.profile, "thinking_secret": settings.signer}
            if settings.provider is Provider.TPX
            else {}
        )
        #: parses request bodies (a tail a client sends again is parsed once)
        self.bodies = BodyReader(settings.limits.tail_cache)
        self._action_counters: dict[str, Any] = {}
        self._request_counters: dict[tuple[str, int], Any] = {}
        #: exchanges in flight (limits.max_in_flight), under a lock: big bodies are handled
        #: on worker threads
        self._in_flight = 0
        self._slots = threading.Lock()
        self.monitor: LiveMonitor | None = None
        #: the context-window contract: windows, aliases, preflight, error wording
        self.context = ContextGate(settings)
        if settings.monitor:  # tpx serve --monitor
            self.monitor = LiveMonitor(settings, self.metrics)

    @property
    def secrets(self) -> Secrets:
        """The secrets' forms, scrubber and redactor (a token command may change the
        credential: prepared once per value)."""
        return prepared(self.settings.secret_values())

    def redact(self, text: str) -> str:
        """*text* for a log (every piece of a secret removed); never for a text a client
        sees, which is shown whole or withheld whole (:func:`tpx.errors.withheld`)."""
        return self.secrets.redact(text)

    # -- entry point ---------------------------------------------------------------------

    def handle(
        self, request: Request, *, admitted: bool = False
    ) -> Response | Turn | Forward | Asked | Placement:
        """Answer *request*: a :class:`Response`, or a :class:`Turn` / :class:`Forward`
        that needs the upstream (see the module docstring). *admitted*: :meth:`preflight`
        let this very request (its method, path and headers) through, so its route, method
        and key are not checked a second time."""
        result = self._handle(request, admitted)
        if isinstance(result, Response):
            self.count(endpoint_label(request.path), result.status)
        return result

    def count(self, endpoint: str, status: int) -> None:
        """One answered request in ``tpx_gateway_requests`` (each child resolved once:
        ``labels()`` takes a lock)."""
        key = (endpoint, status)
        child = self._request_counters.get(key)
        if child is None:
            child = self._request_counters[key] = self.metrics.requests.labels(
                endpoint, str(status)
            )
        child.inc()

    def preflight(self, method: str, path: str, headers: Mapping[str, str]) -> Response | None:
        """What a request gets before its body is read: its refusal when the route, the
        method or the key already refuses it (``None``: read the body, then :meth:`handle`).
        The I/O shell asks first, so a client without the key cannot make the gateway hold
        (or ask for, ``100 Continue``) a body."""
        try:
            self._admit(method, path, headers)
        except Refusal as refusal:
            self.metrics.errors.labels(f"GATEWAY_{refusal.status}").inc()
            self.count(endpoint_label(path), refusal.status)
            return error_response(
                refusal.status, refusal.error_type, refusal.message, new_request_id()
            )
        return None

    def _admit(self, method: str, path: str, headers: Mapping[str, str]) -> str:
        """Raise the :class:`Refusal` the route, the method or the key gives; the route."""
        route = _route_of(path)
        method = method.upper()
        if route == "/":
            if method not in ("GET", "HEAD"):
                raise Refusal(f"{method} / is not supported", status=405)
        elif route == "/healthz":
            self._method(method, "GET", route)
        elif route == "/metrics":
            if self.settings.metrics_auth:
                self._authenticate(headers)
            self._method(method, "GET", route)
        elif route not in (MESSAGES, COUNT, MODELS):
            raise Refusal(f"Not found: {method} {path}", status=404)
        else:
            self._authenticate(headers)
            self._method(method, "GET" if route == MODELS else "POST", route)
        return route

    def _handle(
        self, request: Request, admitted: bool
    ) -> Response | Turn | Forward | Asked | Placement:
        request_id = new_request_id()
        try:
            if admitted:  # preflight checked it: one check per request
                path = _route_of(request.path)
            else:
                path = self._admit(request.method, request.path, request.headers)
            if path == "/":  # HEAD: the same headers, content-length included
                return json_response(200, b'{"service":"tpx","status":"ok"}', request_id)
            if path == "/healthz":
                return json_response(200, b'{"status":"ok"}', request_id)
            if path == "/metrics":
                data = self.metrics.render()
                return Response(
                    200, (("content-type", CONTENT_TYPE), ("request-id", request_id)), data
                )
            if path == MODELS:
                return self._models(request, request_id)
            if len(request.body) > self.settings.limits.max_body_bytes:
                raise Refusal(
                    f"Request exceeds the maximum size of "
                    f"{self.settings.limits.max_body_bytes} bytes",
                    status=413,
                )
            if _too_many_containers(request.body, self.settings.limits.max_json_containers):
                raise Refusal(
                    f"Request holds more than {self.settings.limits.max_json_containers} "
                    "JSON objects and arrays",
                    status=413,
                )
            if path == COUNT:
                return self._count(request, request_id)
            sent = _Sent.read(request.body, self.bodies) if self.monitor is not None else None
            return self._messages(request, request_id, sent)
        except Refusal as refusal:
            self.metrics.errors.labels(f"GATEWAY_{refusal.status}").inc()
            return error_response(refusal.status, refusal.error_type, refusal.message, request_id)

    @staticmethod
    def _method(method: str, allowed: str, path: str) -> None:
        if method != allowed and not (allowed == "GET" and method == "HEAD"):
            raise Refusal(f"{method} {path} is not supported; use {allowed}", status=405)

    def _authenticate(self, headers: Mapping[str, str]) -> None:
        key = self.settings.gateway_key
        if key is None:
            return
        presented = headers.get("x-api-key")
        auth = headers.get("authorization", "")
        if presented is None and auth[:7].lower() == "bearer ":
            presented = auth[7:].strip()
        if presented is None or not secrets.compare_digest(
            presented.encode("utf-8", "surrogatepass"), key.encode()
        ):
            raise Refusal("invalid x-api-key", status=401)

    # -- /v1/messages ------------------------------------------------------------------------

    def _decode(
        self, request: Request, *, count_tokens: bool = False, sent: _Sent | None = None
    ) -> Decoded:
        if sent is not None and sent.body is request.body:  # parsed once, at the boundary
            assert sent.decoded is not None
            decoded = sent.decoded
        else:
            try:
                decoded = self.bodies.read(request.body)
            except orjson.JSONDecodeError as exc:
                raise Refusal(f"The request body is not valid JSON: {exc}") from None
        validate_request(decoded.value, count_tokens=count_tokens)
        assert isinstance(decoded.value, dict)
        return decoded

    def _route(self, body: dict[str, Any]) -> str | None:
        """Apply the model map: the upstream model for TPX (``None``: the caller's)."""
        alias = self.context.resolve(body["model"])  # a claude-tpx-... alias (GET /v1/models)
        route = alias[1] if alias is not None else self.settings.route(body["model"])
        ceiling = route.max_tokens if route is not None else None
        current = body.get("max_tokens")
        if ceiling is not None and isinstance(current, int) and current > ceiling:
            body["max_tokens"] = ceiling
        target = route.model if route is not None and route.model else None
        if alias is not None:
            target = alias[0]
        if self.settings.provider is Provider.TPX:
            return target or self.settings.model
        if target is not None:
            body["model"] = target
        return None

    def _messages(
        self, request: Request, request_id: str, sent: _Sent | None = None
    ) -> Response | Turn | Asked | Placement:
        settings = self.settings
        log: dict[str, Any] = {"request_id": request_id, "endpoint": "messages", "pid": _PID}
        session = request.headers.get("x-claude-code-session-id")
        if session:
            log["session"] = session[:128]
        try:
            decoded = self._decode(request, sent=sent)
            body: dict[str, Any] = decoded.value
            log["model"] = body["model"]
            log["stream"] = body.get("stream") is True
            if settings.log_bodies:  # redacted with the whole record (Gateway.log)
                log["request_body"] = request.body.decode("utf-8", "replace")
            upstream_model = self._route(body)
            translation = self._translation
            routed: Routed | None = None
            if settings.routing is not None:  # [[upstreams]]: framed for the route's first
                routed, upstream_model, translation = self._routed(request, body, upstream_model)
                log["route"] = routed.rule.name
                log["upstream"] = routed.upstream
            if upstream_model is not None:
                log["upstream_model"] = upstream_model
            shown: dict[str, str] = {}
            if settings.provider is Provider.TPX:
                shown = unsign_ids(body, settings.id_keys)
            pending = pending_ids(body["messages"])
            problem = pairing_problem(body["messages"], pending, shown)
        except Refusal as refusal:
            log["error"] = f"GATEWAY_{refusal.status}"
            self.log(log, failed=True)
            raise
        if routed is not None:  # [[upstreams]]: each upstream its window and count
            place = functools.partial(
                self._placed, request, request_id, sent, log, decoded, routed, pending, problem
            )
            return self._placement(request, body, routed, log, place)
        sizing = self._context_sizing(body, upstream_model, len(request.body))
        go = functools.partial(
            self._exchange, request, request_id, sent, log, decoded, upstream_model,
            translation, routed, pending, problem, sizing,
        )  # fmt: skip
        if sizing is not None and self.context.tokenizer is not None:  # the upstream's counts
            label = endpoint_label(request.path)
            maximum = sizing.maximum
            translated = sizing.translated
            return self.context.asked(self, label, translated, upstream_model, go, maximum, log)
        return go(None)

    def _exchange(
        self,
        request: Request,
        request_id: str,
        sent: _Sent | None,
        log: dict[str, Any],
        decoded: Decoded,
        upstream_model: str | None,
        translation: dict[str, Any],
        routed: Routed | None,
        pending: list[str],
        problem: str | None,
        sizing: Sizing | None,
        counted: Count | None,
    ) -> Response | Turn:
        """The exchange of a ``/v1/messages`` request, its preflight counted (*counted*: the
        tokenizer endpoint's count or its fallback; ``None``: the estimate)."""
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
            log[_SLOT] = True  # released when the exchange's line is logged
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
        request: Request,
        body: dict[str, Any],
        routed: Routed,
        log: dict[str, Any],
        place: Callable[[str, Sizing | None, Count | None], Response | Turn],
    ) -> Response | Turn | Placement:
        """A routed turn: sent as balancing picks when it cannot come near the window of any
        upstream of its route, else placed on one it fits (tpx.gateway.context.placement)."""
        alias = self.context.resolve(body["model"])
        route = alias[1] if alias is not None else self.settings.route(body["model"])
        label = endpoint_label(request.path)
        routing = self.settings.routing
        assert routing is not None
        size = len(request.body)
        placement = placing(
            self.context, self, routing, routed, body, size, route, label, log, place
        )
        if placement is None:  # fits everywhere: the pool balances
            return place(routed.rule.upstreams[0], None, None)
        return placement

    def _placed(
        self,
        request: Request,
        request_id: str,
        sent: _Sent | None,
        log: dict[str, Any],
        decoded: Decoded,
        routed: Routed,
        pending: list[str],
        problem: str | None,
        name: str,
        sizing: Sizing | None,
        counted: Count | None,
    ) -> Response | Turn:
        """The exchange of a routed turn framed for upstream *name*."""
        routing = self.settings.routing
        assert routing is not None
        upstream = routing.upstream(name)
        model = upstream.model_for(routed.requested)
        routed.upstream = name
        routed.framed = (model, upstream.profile.name, upstream.family)
        log["upstream"] = name
        if model is not None:
            log["upstream_model"] = model
        signer = family_signer(self.settings.signer, upstream.family)
        translation = {"profile": upstream.profile, "thinking_secret": signer}
        return self._exchange(
            request, request_id, sent, log, decoded, model, translation, routed, pending,
            problem, sizing, counted,
        )  # fmt: skip

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
        model = upstream.model_for(requested or body["model"])
        framed = (model, upstream.profile.name, upstream.family)
        routed = Routed(rule, body, requested or body["model"], upstream.name, framed)
        signer = family_signer(self.settings.signer, upstream.family)
        return routed, model, {"profile": upstream.profile, "thinking_secret": signer}

    def _context_sizing(
        self, body: dict[str, Any], upstream_model: str | None, size: int
    ) -> Sizing | None:
        """What the preflight (TPX) counts against, ``None`` when nothing is counted: only a
        body that may come near its window is (tpx.gateway.context.preflight)."""
        alias = self.context.resolve(body["model"])
        route = alias[1] if alias is not None else self.settings.route(body["model"])
        return self.context.sizing(body, upstream_model, size, route)

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

    def _observer(self, actions: list[str], trace: list[dict[str, Any]] | None) -> Any:
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

    # -- count_tokens / models -------------------------------------------------------------

    def _count(self, request: Request, request_id: str) -> Response | Forward | Asked | Placement:
        body: dict[str, Any] = self._decode(request, count_tokens=True).value
        body.pop("stream", None)
        upstream_model = self._route(body)
        if self.settings.provider is Provider.ANTHROPIC:
            headers = [("content-type", JSON), ("anthropic-version", "2023-06-01")]
            beta = request.headers.get("anthropic-beta")
            if beta:
                headers.append(("anthropic-beta", beta))
            call = UpstreamCall("POST", COUNT, tuple(headers), orjson.dumps(body))
            return Forward(self, request_id, call)
        if self.settings.provider is Provider.NONE:
            raise Refusal("no upstream credentials configured", status=401)
        unsign_ids(body, self.settings.id_keys)
        body.setdefault("max_tokens", 1)
        try:
            translated = request_to_openai(
                body,
                model=upstream_model,
                profile=self.settings.profile,
                secret=self.settings.signer,
            ).body
        except (ProtocolError, UnsupportedError) as error:
            raise Refusal(error.message) from None

        def answer(count: Count) -> Response:
            return json_response(200, orjson.dumps({"input_tokens": count.tokens}), request_id)

        routing = self.settings.routing
        if routing is not None and self.context.active:  # counted as its route's upstream
            rule = route(
                routing, facts_of(body, request.headers, len(request.body), routing.options)
            )
            requested = upstream_model or body["model"]
            label = endpoint_label(request.path)
            placement = counting(self.context, self, routing, rule, requested, body, label, answer)
            if placement is not None:
                return placement

        if self.context.tokenizer is not None:  # exact: the upstream's tokenizer endpoint
            label = endpoint_label(request.path)
            return self.context.asked(self, label, translated, upstream_model, answer, None)
        # counting stops past the largest window: a count above it is the count so far
        return answer(Count(self.context.count(translated, self.context.ceiling()), exact=False))

    def _models(self, request: Request, request_id: str) -> Response | Forward:
        if self.settings.provider is Provider.ANTHROPIC:
            path = MODELS + (f"?{request.query}" if request.query else "")
            call = UpstreamCall("GET", path, (("anthropic-version", "2023-06-01"),), b"")
            return Forward(self, request_id, call)
        names = self.context.models()
        data = [
            {"type": "model", "id": n, "display_name": n, "created_at": "1970-01-01T00:00:00Z"}
            for n in names
        ]
        for alias, target in self.context.aliases.items():  # for Claude Code's /model picker
            window = self.context.window(target).tokens
            shown = f"{target} via tpx ({window}-token window)"
            data.append(
                {
                    "type": "model",
                    "id": alias,
                    "display_name": shown,
                    "created_at": "1970-01-01T00:00:00Z",
                }
            )
            names.append(alias)
        body = {
            "data": data,
            "has_more": False,
            "first_id": names[0] if names else None,
            "last_id": names[-1] if names else None,
        }
        return json_response(200, orjson.dumps(body), request_id)

    # -- logging -----------------------------------------------------------------------------

    def _take_slot(self) -> bool:
        """One more exchange in flight, if fewer than ``limits.max_in_flight`` are."""
        with self._slots:
            if self._in_flight >= self.settings.limits.max_in_flight:
                return False
            self._in_flight += 1
            return True

    @property
    def in_flight(self) -> int:
        """/v1/messages exchanges in flight (sent upstream, their line not yet logged)."""
        return self._in_flight

    def log(self, record: dict[str, Any], *, failed: bool) -> None:
        if record.pop(_SLOT, False):  # the exchange ended: its slot is free
            with self._slots:
                self._in_flight -= 1
        if self.monitor is not None:  # the exchange ended: its conversation too
            self.monitor.close(record["request_id"])
        trace = record.pop("#trace", None)
        if trace is not None and self.settings.trace_dir is not None:
            path = self.settings.trace_dir / f"{record['request_id']}.jsonl"
            try:  # a trace that cannot be written never breaks the exchange nor its line
                path.write_bytes(b"".join(orjson.dumps(step) + b"\n" for step in trace))
            except OSError as exc:
                record["trace_error"] = exc.strerror or type(exc).__name__
        code = record.get("error")
        if failed and isinstance(code, str) and code.startswith("MODEL_"):
            self.metrics.errors.labels(code).inc()
        if logger.isEnabledFor(logging.INFO):
            logger.info("%s", orjson.dumps(_redacted(record, self.secrets.redact)).decode())


def _route_of(path: str) -> str:
    """The route a request path names (a trailing ``/`` dropped)."""
    return path.rstrip("/") or "/"


def _too_many_containers(body: bytes, limit: int) -> bool:
    """Does *body* hold more than *limit* ``{`` and ``[`` (an upper bound of its JSON objects
    and arrays: brackets inside strings count too)? A container takes two bytes at least,
    so a body of up to ``2 * limit`` bytes is not scanned (Claude Code's turns are not)."""
    if len(body) <= 2 * limit:
        return False
    opens = body.count(b"{")
    return opens > limit or opens + body.count(b"[") > limit


@attrs.frozen
class _Sent:
    """A ``/v1/messages`` body as the client sent it, read once at the boundary
    (:meth:`Gateway.handle`, ``--monitor``): its parse (the core reuses it while the body
    it handles is these very bytes) and its history's obligations (the tool_use ids of the
    last assistant turn), which the monitor's ``Resume`` takes."""

    body: bytes
    decoded: Decoded | None
    obligations: frozenset[str]
    answers: tuple[str, ...] = ()
    """the tool_result ids of its last user turn, in order, repeats kept"""
    opening: str | None = None
    """its conversation, as the monitor names it (:func:`tpx.gateway.history.opening`)"""

    @classmethod
    def read(cls, body: bytes, reader: BodyReader) -> _Sent:
        try:
            decoded = reader.read(body)
        except orjson.JSONDecodeError:
            return cls(b"", None, frozenset())  # not reused: the core refuses it
        value = decoded.value
        messages = value.get("messages") if isinstance(value, dict) else None
        obligations: frozenset[str] = frozenset()
        answers: tuple[str, ...] = ()
        opening: str | None = None
        if isinstance(messages, list):
            with contextlib.suppress(KeyError, TypeError):  # ill-formed: the core refuses it
                obligations = frozenset(history.pending_ids(messages))
                answers = tuple(history.answer_ids(messages))
            opening = history.opening(value)
        return cls(body, decoded, obligations, answers, opening)


#: The most characters a log field keeps (a client's model name, say): a longer one is cut,
#: the cut marked, before it is redacted, so a line costs the same whatever a client sent.
LOG_FIELD_LIMIT = 256
#: The same for the bodies ``--log-bodies`` writes.
LOG_BODY_LIMIT = 16384
_BODIES = frozenset({"request_body", "response_body"})


def _redacted(value: Any, redact: Callable[[str], str], limit: int = LOG_FIELD_LIMIT) -> Any:
    """*value* (a log record: the gateway's own keys and shallow values) with every string
    value cut to *limit* characters (the bodies to :data:`LOG_BODY_LIMIT`), then redacted
    (a secret cut short is redacted too: :func:`tpx.errors.redact`). Values only: the keys
    are the gateway's constants, and a credential made of words (``...-upstream-...``)
    would otherwise cut them up (``upstream_status``) and make every line pay the full
    redaction."""
    if isinstance(value, str):
        return redact(value if len(value) <= limit else value[:limit] + _safe.CUT)
    if isinstance(value, dict):
        return {
            k: _redacted(v, redact, LOG_BODY_LIMIT if k in _BODIES else limit)
            for k, v in value.items()
        }
    if isinstance(value, list | tuple):
        return [_redacted(v, redact, limit) for v in value]
    return value
