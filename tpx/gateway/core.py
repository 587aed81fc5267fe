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
* a :class:`Forward`: an ANTHROPIC pass-through (``count_tokens``, ``/v1/models``).

Each turn runs its own :class:`~tpx.exchange.Exchange` (one spec instance per
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

import logging
import secrets
import time
from collections.abc import Iterable, Mapping
from typing import Any

import attrs
import orjson

from tpx.errors import (
    ModelError,
    NetworkError,
    PairingError,
    ProtocolError,
    UnauthorizedError,
    UnsupportedError,
    redact,
    secret_forms,
)
from tpx.exchange import Exchange, ExchangeSnapshot, Provider
from tpx.gateway.history import (
    Refusal,
    pairing_problem,
    pending_ids,
    unsign_ids,
    validate_request,
)
from tpx.gateway.metrics import CONTENT_TYPE, Metrics
from tpx.gateway.settings import Settings
from tpx.translate import request_to_openai
from tpx.translate.ids import CALLER_ID_PREFIX, sign_caller_id
from tpx.translate.stream import serialize_event

__all__ = ["Forward", "Gateway", "Request", "Response", "Turn", "UpstreamCall", "error_body"]

logger = logging.getLogger("tpx.gateway")

JSON = "application/json"
SSE_HEADERS = (
    ("content-type", "text/event-stream; charset=utf-8"),
    ("cache-control", "no-cache"),
    ("x-accel-buffering", "no"),
)
PING = b'event: ping\ndata: {"type":"ping"}\n\n'
_MESSAGES = "/v1/messages"
_COUNT = "/v1/messages/count_tokens"
_MODELS = "/v1/models"


@attrs.frozen
class Request:
    """One HTTP request as the server read it (header names lower-case)."""

    method: str
    path: str
    query: str = ""
    headers: Mapping[str, str] = attrs.field(factory=dict)
    body: bytes = b""


@attrs.frozen
class Response:
    status: int
    headers: tuple[tuple[str, str], ...]
    body: bytes = b""

    def header(self, name: str) -> str | None:
        return next((v for k, v in self.headers if k == name), None)


@attrs.frozen
class UpstreamCall:
    """The upstream request to make, without credentials (path below the base URL)."""

    method: str
    path: str
    headers: tuple[tuple[str, str], ...]
    body: bytes
    stream: bool = False


def new_request_id() -> str:
    return "req_tpx" + secrets.token_hex(12)


def error_body(error_type: str, message: str, request_id: str) -> bytes:
    return orjson.dumps(
        {
            "type": "error",
            "error": {"type": error_type, "message": message},
            "request_id": request_id,
        }
    )


def _json(status: int, body: bytes, request_id: str, *extra: tuple[str, str]) -> Response:
    return Response(status, (("content-type", JSON), ("request-id", request_id), *extra), body)


def _error(status: int, error_type: str, message: str, request_id: str) -> Response:
    return _json(status, error_body(error_type, message, request_id), request_id)


def _model_error(error: ModelError, request_id: str) -> Response:
    """The client's response for an exchange that failed upstream."""
    status, _error_type = error.status, error.error_type
    if isinstance(error, UnauthorizedError):  # the upstream refused the GATEWAY's credential
        status, _error_type = 502, "api_error"
    if not 400 <= status < 600:
        status = 502
    body = error.body()
    body["request_id"] = request_id
    extra: list[tuple[str, str]] = []
    if error.retry_after is not None:
        extra.append(("retry-after", str(max(0, round(error.retry_after)))))
    return _json(status, orjson.dumps(body), request_id, *extra)


def _snapshot(snapshot: ExchangeSnapshot) -> dict[str, Any]:
    """A snapshot as JSON (the spec's variable names; concrete tool ids, not ToolIds)."""
    return {
        "provider": snapshot.provider.name,
        "turn": snapshot.turn,
        "phase": snapshot.phase,
        "pending": sorted(snapshot.pending),
        "reqIds": sorted(snapshot.req_ids),
        "wireShape": snapshot.wire_shape,
        "wireIds": sorted(snapshot.wire_ids),
        "emitted": sorted(snapshot.emitted),
        "gotShape": snapshot.got_shape,
        "lastOutcome": snapshot.last_outcome,
    }


_ENDPOINTS = {
    "/": "root",
    "/healthz": "healthz",
    "/metrics": "metrics",
    _MESSAGES: "messages",
    _COUNT: "count_tokens",
    _MODELS: "models",
}


def _endpoint(path: str) -> str:
    return _ENDPOINTS.get(path.split("?", 1)[0].rstrip("/") or "/", "other")


class _Conversation(Exchange):
    """An exchange resumed at ``idle`` with the obligations the request's history carries."""

    __slots__ = ()

    def __init__(self, provider: Provider, pending: Iterable[str], **kwargs: Any) -> None:
        super().__init__(provider, **kwargs)
        self._pending = frozenset(pending)


class Turn:
    """One ``POST /v1/messages`` exchange (see the module docstring for the protocol)."""

    def __init__(
        self,
        gateway: Gateway,
        request_id: str,
        call: UpstreamCall,
        exchange: Exchange,
        log: dict[str, Any],
    ) -> None:
        self.gateway = gateway
        self.request_id = request_id
        self.call = call
        self.exchange = exchange
        self.streaming = call.stream
        self.started = False  #: some bytes (or the SSE headers) went to the client
        self.status = 200  #: the HTTP status the client gets
        self.failed = False
        self._terminal: dict[str, Any] | None = None
        self._log = log
        self._began = time.perf_counter()
        self._closed = False
        self._sign = gateway.settings.provider is Provider.TPX

    @property
    def complete(self) -> bool:
        """The stream produced ``message_stop`` (held back for :meth:`finish`)."""
        return self._terminal is not None

    @property
    def error(self) -> ModelError | None:
        return self.exchange.last_error

    def upstream_status(self, status: int) -> None:
        self._log["upstream_status"] = status

    # -- non-streaming -----------------------------------------------------------

    def reply(self, status: int, headers: Mapping[str, str], body: bytes) -> Response:
        """``ProviderReply`` + ``Deliver`` (or ``ProviderFail``): the client's response."""
        self.upstream_status(status)
        try:
            self.exchange.receive(status, headers, body)
        except ModelError as error:
            return self.error_response(error)
        message = self.exchange.deliver()
        self._sign_message(message)
        self._usage(message.get("usage"))
        data = orjson.dumps(message)
        if self.gateway.settings.log_bodies:
            self._log["response_body"] = self.gateway.redact(data.decode())
        return _json(200, data, self.request_id)

    def error_response(self, error: ModelError | None = None) -> Response:
        error = error or self.exchange.last_error
        assert error is not None
        self.failed = True
        self._log["error"] = error.code
        response = _model_error(error, self.request_id)
        self.status = response.status
        return response

    # -- streaming -----------------------------------------------------------------

    def start(self, status: int, headers: Mapping[str, str], body: bytes = b"") -> Response | None:
        """The upstream's status and headers (*body*: a non-2xx reply's body). ``None``:
        the stream begins (send :data:`SSE_HEADERS`); else the error response."""
        self.upstream_status(status)
        try:
            self.exchange.receive_stream_start(status, headers, body)
        except ModelError as error:
            return self.error_response(error)
        return None

    def headers(self) -> tuple[tuple[str, str], ...]:
        return (*SSE_HEADERS, ("request-id", self.request_id))

    def feed(self, chunk: bytes) -> bytes:
        """SSE bytes for the client from the next upstream bytes (the terminal event is
        held back for :meth:`finish`; b"" when an error must go out as a response)."""
        if self.complete or self.exchange.phase != "req":
            return b""
        return self._hand(self.exchange.feed(chunk))

    def end(self) -> bytes:
        """The upstream body ended."""
        ex = self.exchange
        events: list[dict[str, Any]] = []
        if ex.phase == "req" and not ex.stream_complete:
            events += ex.flush()
            if ex.phase == "req" and not ex.stream_complete:
                events += ex.end_stream()  # ended early: ProviderFail
        return self._hand(events)

    def finish(self) -> bytes:
        """The client is about to take ``message_stop``: ``ProviderReply`` + ``Deliver``."""
        assert self._terminal is not None
        ex = self.exchange
        tail = ex.end_stream()
        if ex.phase == "resp":
            message = ex.deliver()
            self._usage(message.get("usage"))
            tail = [self._terminal]
        else:
            self._failed()
        return self._render(tail)

    def fail(self, error: ModelError) -> bytes:
        """A transport failure while the upstream body was read (``ProviderFail``)."""
        if self.exchange.phase != "req":
            return b""
        failure = self.exchange.fail(error)
        self._failed()
        return self._render([failure.body()]) if self.started else b""

    def abandon(self) -> None:
        """The client went away: ``ProviderFail`` if the exchange is still in flight."""
        if self.exchange.phase == "req":
            self.exchange.fail(NetworkError("the client disconnected before the reply ended"))
            self._log["client_gone"] = True
            self._failed()

    def _failed(self) -> None:
        self.failed = True
        error = self.exchange.last_error
        if error is not None:
            self._log["error"] = error.code

    def _hand(self, events: list[dict[str, Any]]) -> bytes:
        ex = self.exchange
        if ex.phase == "req" and ex.stream_complete and events and self._terminal is None:
            self._terminal = events[-1]
            events = events[:-1]
        elif ex.phase == "idle":
            self._failed()
            if not self.started and len(events) == 1:
                return b""  # only the error: it goes out as an HTTP error response
        return self._render(events)

    def _render(self, events: list[dict[str, Any]]) -> bytes:
        if not events:
            return b""
        parts = []
        for event in events:
            if self._sign and event.get("type") == "content_block_start":
                event = self._sign_block_event(event)
            if event.get("type") == "message_delta":
                self._usage(event.get("usage"))
            parts.append(serialize_event(event))
        self.started = True
        return b"".join(parts)

    # -- ids, usage, log --------------------------------------------------------------

    def _signed(self, tool_id: str) -> str:
        if tool_id.startswith(CALLER_ID_PREFIX):
            try:
                return sign_caller_id(tool_id, self.gateway.settings.secret)
            except ValueError:
                return tool_id
        return tool_id

    def _sign_message(self, message: dict[str, Any]) -> None:
        if not self._sign:
            return
        for block in message.get("content", []):
            if block.get("type") == "tool_use":
                block["id"] = self._signed(block["id"])

    def _sign_block_event(self, event: dict[str, Any]) -> dict[str, Any]:
        block = event.get("content_block")
        if not isinstance(block, Mapping) or block.get("type") != "tool_use":
            return event
        return {**event, "content_block": {**block, "id": self._signed(block["id"])}}

    def _usage(self, usage: Any) -> None:
        if isinstance(usage, Mapping):
            for key in ("input_tokens", "output_tokens"):
                if isinstance(usage.get(key), int):
                    self._log[key] = usage[key]

    def close(self) -> None:
        """Write the exchange's log line (once)."""
        if self._closed:
            return
        self._closed = True
        self._log["latency_ms"] = round((time.perf_counter() - self._began) * 1000, 3)
        self._log["outcome"] = self.exchange.last_outcome
        self._log["status"] = self.status
        self.gateway.metrics.requests.labels("messages", str(self.status)).inc()
        self.gateway.log(self._log, failed=self.failed)


class Forward:
    """An ANTHROPIC pass-through request (count_tokens, models)."""

    def __init__(self, gateway: Gateway, request_id: str, call: UpstreamCall) -> None:
        self.gateway = gateway
        self.request_id = request_id
        self.call = call

    def respond(self, status: int, headers: Mapping[str, str], body: bytes) -> Response:
        text = self.gateway.redact(body.decode("utf-8", "replace"))
        if status in (401, 403):  # the upstream refused the gateway's credential
            response = _error(502, "api_error", "the upstream refused the gateway", self.request_id)
        else:
            response = _json(status, text.encode(), self.request_id)
        return self._count(response)

    def failed(self, error: ModelError) -> Response:
        return self._count(_model_error(error, self.request_id))

    def _count(self, response: Response) -> Response:
        endpoint = _endpoint(self.call.path)
        self.gateway.metrics.requests.labels(endpoint, str(response.status)).inc()
        return response


class Gateway:
    """The sans-I/O gateway (one per process; holds no per-conversation state)."""

    def __init__(self, settings: Settings, *, metrics: Metrics | None = None) -> None:
        self.settings = settings
        self.metrics = metrics or Metrics()
        self._secrets = secret_forms(settings.secret_values())
        self.ready = True

    def redact(self, text: str) -> str:
        return redact(text, secret_forms(self.settings.secret_values()))

    # -- entry point ---------------------------------------------------------------------

    def handle(self, request: Request) -> Response | Turn | Forward:
        """Answer *request*: a :class:`Response`, or a :class:`Turn` / :class:`Forward`
        that needs the upstream (see the module docstring)."""
        result = self._handle(request)
        if isinstance(result, Response):
            self.metrics.requests.labels(_endpoint(request.path), str(result.status)).inc()
        return result

    def _handle(self, request: Request) -> Response | Turn | Forward:
        request_id = new_request_id()
        path = request.path.rstrip("/") or "/"
        method = request.method.upper()
        try:
            if path == "/":
                if method not in ("GET", "HEAD"):
                    raise Refusal(f"{method} / is not supported", status=405)
                body = b"" if method == "HEAD" else b'{"service":"tpx","status":"ok"}'
                return _json(200, body, request_id)
            if path == "/healthz":
                self._method(method, "GET", path)
                return _json(200, b'{"status":"ok"}', request_id)
            if path == "/metrics":
                self._method(method, "GET", path)
                data = self.metrics.render()
                return Response(
                    200, (("content-type", CONTENT_TYPE), ("request-id", request_id)), data
                )
            if path not in (_MESSAGES, _COUNT, _MODELS):
                raise Refusal(f"Not found: {request.method} {request.path}", status=404)
            self._authenticate(request.headers)
            if path == _MODELS:
                self._method(method, "GET", path)
                return self._models(request, request_id)
            self._method(method, "POST", path)
            if len(request.body) > self.settings.limits.max_body_bytes:
                raise Refusal(
                    f"Request exceeds the maximum size of "
                    f"{self.settings.limits.max_body_bytes} bytes",
                    status=413,
                )
            if path == _COUNT:
                return self._count(request, request_id)
            return self._messages(request, request_id)
        except Refusal as refusal:
            self.metrics.errors.labels(f"GATEWAY_{refusal.status}").inc()
            return _error(refusal.status, refusal.error_type, refusal.message, request_id)

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

    def _decode(self, request: Request, *, count_tokens: bool = False) -> dict[str, Any]:
        try:
            body = orjson.loads(request.body)
        except orjson.JSONDecodeError as exc:
            raise Refusal(f"The request body is not valid JSON: {exc}") from None
        validate_request(body, count_tokens=count_tokens)
        assert isinstance(body, dict)
        return body

    def _route(self, body: dict[str, Any]) -> str | None:
        """Apply the model map: the upstream model for TPX (``None``: the caller's)."""
        route = self.settings.route(body["model"])
        ceiling = route.max_tokens if route is not None else None
        current = body.get("max_tokens")
        if ceiling is not None and isinstance(current, int) and current > ceiling:
            body["max_tokens"] = ceiling
        target = route.model if route is not None and route.model else None
        if self.settings.provider is Provider.TPX:
            return target or self.settings.model
        if target is not None:
            body["model"] = target
        return None

    def _messages(self, request: Request, request_id: str) -> Response | Turn:
        settings = self.settings
        log: dict[str, Any] = {"request_id": request_id, "endpoint": "messages"}
        session = request.headers.get("x-claude-code-session-id")
        if session:
            log["session"] = session[:128]
        try:
            body = self._decode(request)
            log["model"] = body["model"]
            log["stream"] = body.get("stream") is True
            if settings.log_bodies:
                log["request_body"] = self.redact(request.body.decode("utf-8", "replace"))
            upstream_model = self._route(body)
            if upstream_model is not None:
                log["upstream_model"] = upstream_model
            shown = unsign_ids(body, settings.secret) if settings.provider is Provider.TPX else {}
            pending = pending_ids(body["messages"])
            problem = pairing_problem(body["messages"], pending, shown)
        except Refusal as refusal:
            log["error"] = f"GATEWAY_{refusal.status}"
            self.log(log, failed=True)
            raise
        actions: list[str] = []
        log["actions"] = actions
        trace: list[dict[str, Any]] | None = [] if settings.trace_dir is not None else None
        exchange = _Conversation(
            settings.provider,
            pending,
            model=upstream_model,
            secrets=settings.secret_values(),
            observer=self._observer(actions, trace),
        )
        if trace is not None:
            trace.append({"#action": "Resume", **_snapshot(exchange.snapshot())})
            log["#trace"] = trace
        if settings.provider is Provider.NONE:
            error = exchange.no_provider()
            log["error"] = error.code
            self.log(log, failed=True)
            return _model_error(error, request_id)
        try:
            outbound = exchange.send(body)
        except PairingError as error:  # CallerAbort (pending) or refused (nothing pending)
            log["error"] = error.code
            self.log(log, failed=True)
            message = problem or error.message
            return _error(400, "invalid_request_error", message, request_id)
        except (ProtocolError, UnsupportedError) as error:
            log["error"] = error.code
            self.log(log, failed=True)
            return _error(400, "invalid_request_error", error.message, request_id)
        headers = list(outbound.headers)
        if settings.provider is Provider.ANTHROPIC:
            beta = request.headers.get("anthropic-beta")
            if beta:
                headers.append(("anthropic-beta", beta))
        call = UpstreamCall(
            outbound.method, outbound.path, tuple(headers), outbound.body, exchange.streaming
        )
        return Turn(self, request_id, call, exchange, log)

    def _observer(self, actions: list[str], trace: list[dict[str, Any]] | None) -> Any:
        counter = self.metrics.actions

        def observe(action: str, snapshot: ExchangeSnapshot) -> None:
            actions.append(action)
            counter.labels(action).inc()
            if trace is not None:
                trace.append({"#action": action, **_snapshot(snapshot)})

        return observe

    # -- count_tokens / models -------------------------------------------------------------

    def _count(self, request: Request, request_id: str) -> Response | Forward:
        body = self._decode(request, count_tokens=True)
        body.pop("stream", None)
        upstream_model = self._route(body)
        if self.settings.provider is Provider.ANTHROPIC:
            headers = [("content-type", JSON), ("anthropic-version", "2023-06-01")]
            beta = request.headers.get("anthropic-beta")
            if beta:
                headers.append(("anthropic-beta", beta))
            call = UpstreamCall("POST", _COUNT, tuple(headers), orjson.dumps(body))
            return Forward(self, request_id, call)
        if self.settings.provider is Provider.NONE:
            raise Refusal("no upstream credentials configured", status=401)
        from tpx.gateway.tokens import count_openai_request

        unsign_ids(body, self.settings.secret)
        body.setdefault("max_tokens", 1)
        try:
            translated = request_to_openai(body, model=upstream_model).body
        except (ProtocolError, UnsupportedError) as error:
            raise Refusal(error.message) from None
        count = count_openai_request(translated)
        return _json(200, orjson.dumps({"input_tokens": count}), request_id)

    def _models(self, request: Request, request_id: str) -> Response | Forward:
        if self.settings.provider is Provider.ANTHROPIC:
            path = _MODELS + (f"?{request.query}" if request.query else "")
            call = UpstreamCall("GET", path, (("anthropic-version", "2023-06-01"),), b"")
            return Forward(self, request_id, call)
        names: list[str] = []
        for name in [self.settings.model, *(r.model for r in self.settings.routes)]:
            if name and name not in names:
                names.append(name)
        data = [
            {"type": "model", "id": n, "display_name": n, "created_at": "1970-01-01T00:00:00Z"}
            for n in names
        ]
        body = {
            "data": data,
            "has_more": False,
            "first_id": names[0] if names else None,
            "last_id": names[-1] if names else None,
        }
        return _json(200, orjson.dumps(body), request_id)

    # -- logging -----------------------------------------------------------------------------

    def log(self, record: dict[str, Any], *, failed: bool) -> None:
        trace = record.pop("#trace", None)
        if trace is not None and self.settings.trace_dir is not None:
            path = self.settings.trace_dir / f"{record['request_id']}.jsonl"
            path.write_bytes(b"".join(orjson.dumps(step) + b"\n" for step in trace))
        code = record.get("error")
        if failed and isinstance(code, str) and code.startswith("MODEL_"):
            self.metrics.errors.labels(code).inc()
        if logger.isEnabledFor(logging.INFO):
            logger.info("%s", self.redact(orjson.dumps(record).decode()))
