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

This module reads a request: its route, method and key (a refusal before the body is read:
:meth:`Gateway.preflight`), its size, its body, its model route and its pairing, and answers
``count_tokens``, ``/v1/models`` and the log line; what a read ``/v1/messages`` request
becomes (its exchange framed for an upstream, the context-window preflight, the in-flight
slot, the monitor's ``Resume``) is :mod:`tpx.gateway.exchanges`'.

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

import functools
import logging
import os
import secrets
from collections.abc import Callable, Mapping
from typing import Any

import orjson

from tpx import _safe
from tpx.errors import ProtocolError, UnsupportedError
from tpx.gateway.bodies import BodyReader, Decoded
from tpx.gateway.context.asked import Asked, Count
from tpx.gateway.context.gate import ContextGate
from tpx.gateway.context.placement import Placement, counting
from tpx.gateway.exchanges import Exchanges, Read, Sent
from tpx.gateway.history import (
    Refusal,
    pairing_problem,
    pending_ids,
    unsign_ids,
    validate_request,
)
from tpx.gateway.metrics import CONTENT_TYPE, Metrics
from tpx.gateway.monitoring import LiveMonitor
from tpx.gateway.redaction import Secrets, prepared
from tpx.gateway.routing import Routed, facts_of, route
from tpx.gateway.settings import Settings
from tpx.gateway.turn import Forward, Turn
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
    new_request_id,
)
from tpx.transport.exchange import Provider
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
os.register_at_fork(after_in_child=lambda: globals().update(_PID=os.getpid()))


class Gateway(Exchanges):
    """The sans-I/O gateway (one per process; holds no per-conversation state). What it
    does with a ``/v1/messages`` request once read is :class:`~tpx.gateway.exchanges.Exchanges`'."""

    def __init__(self, settings: Settings, *, metrics: Metrics | None = None) -> None:
        super().__init__()
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
            sent = Sent.read(request.body, self.bodies) if self.monitor is not None else None
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
        self, request: Request, *, count_tokens: bool = False, sent: Sent | None = None
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
        model_route = alias[1] if alias is not None else self.settings.route(body["model"])
        ceiling = model_route.max_tokens if model_route is not None else None
        current = body.get("max_tokens")
        if ceiling is not None and isinstance(current, int) and current > ceiling:
            body["max_tokens"] = ceiling
        target = model_route.model if model_route is not None and model_route.model else None
        if alias is not None:
            target = alias[0]
        if self.settings.provider is Provider.TPX:
            return target or self.settings.model
        if target is not None:
            body["model"] = target
        return None

    def _messages(
        self, request: Request, request_id: str, sent: Sent | None = None
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
        read = Read(request, request_id, sent, log, decoded, pending, problem)
        if routed is not None:  # [[upstreams]]: each upstream its window and count
            return self._placement(read, routed, functools.partial(self._placed, read, routed))
        sizing = self._context_sizing(body, upstream_model, len(request.body))
        go = functools.partial(self._exchange, read, upstream_model, translation, routed, sizing)
        if sizing is not None and self.context.tokenizer is not None:  # the upstream's counts
            label = endpoint_label(request.path)
            maximum = sizing.maximum
            translated = sizing.translated
            return self.context.asked(self, label, translated, upstream_model, go, maximum, log)
        return go(None)

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

    def log(self, record: dict[str, Any], *, failed: bool) -> None:
        self._free_slot(record)  # the exchange ended: its slot (if it held one) is free
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
        out = {}
        for k, v in value.items():
            kind = v.__class__
            if kind is str:  # most of a line's values: cut and redacted here, no call
                cap = LOG_BODY_LIMIT if k in _BODIES else limit
                out[k] = redact(v if len(v) <= cap else v[:cap] + _safe.CUT)
            elif kind is int or kind is bool or kind is float or v is None:
                out[k] = v
            else:
                out[k] = _redacted(v, redact, LOG_BODY_LIMIT if k in _BODIES else limit)
        return out
    if isinstance(value, list | tuple):
        return [_redacted(v, redact, limit) for v in value]
    return value
