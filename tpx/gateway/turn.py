"""One ``POST /v1/messages`` exchange of the gateway (:class:`Turn`) and an ANTHROPIC
pass-through (:class:`Forward`); see :mod:`tpx.gateway.core` for the protocol."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterable, Mapping
from typing import Any, Protocol

import orjson

from tpx import _safe
from tpx.errors import ModelError, NetworkError, holds_secret
from tpx.gateway.context.gate import ContextGate
from tpx.gateway.context.placement import Placement
from tpx.gateway.dispatch import Plan
from tpx.gateway.monitoring import LiveMonitor, SpecViolationError
from tpx.gateway.redaction import Secrets
from tpx.gateway.routing import Routed, UpstreamConfig, family_signer
from tpx.gateway.settings import Settings
from tpx.gateway.wire import (
    SSE_HEADERS,
    Response,
    UpstreamCall,
    endpoint_label,
    error_response,
    json_response,
    model_error_response,
)
from tpx.transport.exchange import Exchange, OutboundRequest, Provider
from tpx.transport.translate.ids import CALLER_ID_PREFIX, sign_caller_id
from tpx.transport.translate.profiles import get_profile
from tpx.transport.translate.signing import signer_for
from tpx.transport.translate.stream import serialize_event

__all__ = ["Conversation", "Forward", "Host", "Turn"]


class Host(Protocol):
    """What a turn needs of the gateway that made it (:class:`tpx.gateway.core.Gateway`):
    its settings, secrets and monitor, a counter, the log line and the redactor."""

    @property
    def settings(self) -> Settings: ...

    @property
    def secrets(self) -> Secrets: ...

    @property
    def monitor(self) -> LiveMonitor | None: ...

    @property
    def context(self) -> ContextGate: ...

    def count(self, endpoint: str, status: int) -> None: ...

    def log(self, record: dict[str, Any], *, failed: bool) -> None: ...

    def redact(self, text: str) -> str: ...


class Conversation(Exchange):
    """An exchange resumed at ``idle`` with the obligations the request's history carries.

    *prepared*: every secret of the gateway (the thinking secret included) with its forms
    and scrubber built once at boot, in place of ``secrets=``, which an
    :class:`~tpx.transport.exchange.Exchange` renders anew each time (~0.1 ms a request). Pass the
    thinking secret as its signer then (``thinking_secret=settings.signer``; a str would
    be rendered again). A credential fetched while the request is in flight (a token
    command run again after a 401) joins them: :meth:`join`.
    """

    __slots__ = ("_prepared",)

    def __init__(
        self,
        provider: Provider,
        pending: Iterable[str],
        *,
        prepared: Secrets | None = None,
        **kwargs: Any,
    ) -> None:
        if prepared is not None and (
            "secrets" in kwargs or isinstance(kwargs.get("thinking_secret"), str)
        ):
            raise TypeError("prepared= replaces secrets= and a str thinking_secret=")
        super().__init__(provider, **kwargs)
        self._pending = frozenset(pending)
        self._prepared = prepared
        if prepared is not None:  # what Exchange.__init__ derives from the secrets
            self._secrets = prepared.forms
            self._scrub = prepared.scrubber

    def join(self, current: Secrets) -> None:
        """Scrub replies and withhold errors with the forms of *current* too, from now on
        (the stream being read included): a fresh credential is caught in this very reply."""
        if current is self._prepared:
            return
        self._prepared = current
        known = set(self._secrets)
        fresh = tuple(form for form in current.forms if form not in known)
        if not fresh:
            return
        self._secrets = tuple(sorted({*known, *fresh}, key=lambda f: (-len(f), f)))
        self._scrub = self._scrub.joined(fresh)
        if self._stream is not None:
            self._stream.rescrub(self._scrub)

    def reframe(
        self,
        request: Mapping[str, Any],
        *,
        model: str | None,
        profile: Any,
        thinking_secret: Any,
    ) -> OutboundRequest:
        """The request sent (``CallerSend``) framed again for another upstream: its model,
        profile and thinking signer. Only before any reply (the failover of
        :mod:`tpx.gateway.dispatch`); no spec step: the exchange stays in ``req`` with the
        same obligations (the tool ids on the wire do not depend on the upstream)."""
        if self._phase != "req" or self._stream is not None or self._delivered is not None:
            raise RuntimeError("an exchange is framed again only before any reply")
        self._model = model
        self._profile = get_profile(profile)
        self._signer = signer_for(thinking_secret)
        outbound, wire_ids, wire_model = self._frame(request, self._streaming)
        if frozenset(wire_ids) != self._wire_ids:
            raise RuntimeError("the tool ids on the wire changed with the upstream")
        self._wire_list = tuple(wire_ids)
        self._wire_model = wire_model
        self._outbound = outbound
        return outbound


#: The name the live monitor knows the gateway's one upstream by (its attempt steps).
UPSTREAM = "upstream"


class Turn:
    """One ``POST /v1/messages`` exchange (see the module docstring for the protocol)."""

    def __init__(
        self,
        gateway: Host,
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
        self._stopped_by: ModelError | None = None  #: the monitor's stop (--monitor)
        self.routed: Routed | None = None  #: its route ([[upstreams]]; tpx.gateway.routing)
        self.plan: Plan | None = None  #: its attempts over the route (tpx.gateway.pool)
        #: the upstreams it was checked against (``[[upstreams]]``, near a window): a
        #: failover goes only to one it fits (tpx.gateway.context.placement)
        self.placement: Placement | None = None
        #: the pool reported its attempts to the monitor (``--monitor``; tpx.gateway.reports)
        self.reported = False

    @property
    def complete(self) -> bool:
        """The stream produced ``message_stop`` (held back for :meth:`finish`)."""
        return self._terminal is not None

    @property
    def over(self) -> bool:
        """The exchange ended (delivered or failed): no byte follows what went out."""
        return self.exchange.phase != "req"

    @property
    def error(self) -> ModelError | None:
        return self.exchange.last_error

    def upstream_status(self, status: int) -> None:
        self._log["upstream_status"] = status

    def annotate(self, key: str, value: Any) -> None:
        """One more field of the exchange's log line."""
        self._log[key] = value

    def target(self, upstream: UpstreamConfig, *, again: bool = False) -> None:
        """Send this turn to *upstream* of its route (balancing, or a failover before any
        reply): framed again when its model, profile or thinking family differ from the
        current framing (thinking another family produced is then dropped, never sent as
        this one's reasoning), or *again* (its ``max_tokens`` clamped for that upstream)."""
        routed = self.routed
        assert routed is not None
        assert isinstance(self.exchange, Conversation)
        model = upstream.model_for(routed.requested)
        routed.upstream = upstream.name
        self._log["upstream"] = upstream.name
        if model is not None:
            self._log["upstream_model"] = model
        key = (model, upstream.profile, upstream.family)
        if key == routed.framed and not again:
            return
        signer = family_signer(self.gateway.settings.signer, upstream.family)
        outbound = self.exchange.reframe(
            routed.body, model=model, profile=upstream.profile, thinking_secret=signer
        )
        routed.framed = key
        self.call = UpstreamCall(
            outbound.method, outbound.path, tuple(outbound.headers), outbound.body, self.streaming
        )

    def _upstream_steps(self, *, stream: bool) -> None:
        """``--monitor``: the upstream answered, so the request's attempt reached it
        (``NewRequest``, ``UpstreamAccept``: the one upstream, unless the pool reported its
        attempts already); a stream that begins sends the client its first byte
        (``FirstByte``). Raises SpecViolationError."""
        monitor = self.gateway.monitor
        if monitor is None:
            return
        if not self.reported:
            monitor.answered(self.request_id, UPSTREAM, stream=stream)
        elif stream:
            monitor.first_byte(self.request_id)

    # -- non-streaming -----------------------------------------------------------

    def reply(self, status: int, headers: Mapping[str, str], body: bytes) -> Response:
        """``ProviderReply`` + ``Deliver`` (or ``ProviderFail``): the client's response."""
        self.upstream_status(status)
        self._join()
        try:
            self._upstream_steps(stream=False)
            self.exchange.receive(status, headers, body)
            message = self.exchange.deliver()
        except ModelError as error:  # ProviderFail, or the monitor stopped a step
            return self.error_response(error, self._too_long(status, body))
        self._sign_message(message)
        self._usage(message.get("usage"))
        data = orjson.dumps(message)
        if self.gateway.settings.log_bodies:
            self._log["response_body"] = data.decode()  # redacted in Gateway.log
        return json_response(200, data, self.request_id)

    def _join(self) -> None:
        """The upstream answered: the credential it was sent (a token command may have run
        again for it) is one of the secrets this exchange scrubs."""
        if isinstance(self.exchange, Conversation):
            self.exchange.join(self.gateway.secrets)

    def error_response(
        self, error: ModelError | None = None, too_long: str | None = None
    ) -> Response:
        """The client's error response (*too_long*: an upstream context error, in the
        Messages wording, :meth:`_too_long`)."""
        error = error or self._stopped_by or self.exchange.last_error
        assert error is not None
        self.failed = True
        self._log["error"] = error.code
        if too_long is not None and error is not self._stopped_by:
            self._log["context_error"] = True
            response = error_response(400, "invalid_request_error", too_long, self.request_id)
        else:
            response = model_error_response(error, self.request_id)
        self.status = response.status
        return response

    # -- streaming -----------------------------------------------------------------

    def start(self, status: int, headers: Mapping[str, str], body: bytes = b"") -> Response | None:
        """The upstream's status and headers (*body*: a non-2xx reply's body). ``None``:
        the stream begins (send :data:`SSE_HEADERS`); else the error response."""
        self.upstream_status(status)
        self._join()
        try:
            self.exchange.receive_stream_start(status, headers, body)
            self._upstream_steps(stream=self.exchange.phase == "req")
        except ModelError as error:
            return self.error_response(error, self._too_long(status, body))
        return None

    def out(self, data: bytes) -> bytes | Response | None:
        """What goes to the client for *data* from :meth:`feed` / :meth:`end` /
        :meth:`fail`: the bytes; the error response when the turn failed before any byte went
        out (then nothing else follows); ``None`` for nothing yet."""
        if data:
            return data
        if self.failed and not self.started:
            return self.error_response()
        return None

    def headers(self) -> tuple[tuple[str, str], ...]:
        return (*SSE_HEADERS, ("request-id", self.request_id))

    def feed(self, chunk: bytes) -> bytes:
        """SSE bytes for the client from the next upstream bytes (the terminal event is
        held back for :meth:`finish`; b"" when an error must go out as a response)."""
        if self.complete or self.exchange.phase != "req":
            return b""
        try:
            return self._hand(self.exchange.feed(chunk))
        except SpecViolationError as stop:  # the monitor stopped a step (tpx serve --monitor)
            return self._stopped(stop)

    def end(self) -> bytes:
        """The upstream body ended."""
        ex = self.exchange
        events: list[dict[str, Any]] = []
        try:
            if ex.phase == "req" and not ex.stream_complete:
                events += ex.flush()
                if ex.phase == "req" and not ex.stream_complete:
                    events += ex.end_stream()  # ended early: ProviderFail
        except SpecViolationError as stop:  # the monitor stopped a step
            return self._stopped(stop)
        return self._hand(events)

    def finish(self) -> bytes:
        """The client is about to take ``message_stop``: ``ProviderReply`` + ``Deliver``."""
        assert self._terminal is not None
        ex = self.exchange
        try:
            tail = ex.end_stream()
            message = ex.deliver() if ex.phase == "resp" else None
        except SpecViolationError as stop:  # the monitor stopped ProviderReply or Deliver
            self._stopped(stop)
            return self._render([stop.body()])
        if message is not None:
            self._usage(message.get("usage"))
            tail = [self._terminal]
        else:
            self._failed()
        return self._render(tail)

    def fail(self, error: ModelError) -> bytes:
        """A transport failure while the upstream body was read (``ProviderFail``)."""
        if self.exchange.phase != "req":
            return b""
        try:
            failure = self.exchange.fail(error)
        except SpecViolationError as stop:  # the monitor stopped the step
            failure = stop
        self._failed()
        return self._render([failure.body()]) if self.started else b""

    def abandon(self) -> None:
        """The client went away: ``ClientGone`` if the exchange is still in flight (the
        exchange's ``ProviderFail``; the monitor is told the client left)."""
        if self.exchange.phase == "req":
            monitor = self.gateway.monitor
            if monitor is not None:
                monitor.client_gone(self.request_id)
            with contextlib.suppress(SpecViolationError):  # a stop of the monitor: logged already
                self.exchange.fail(NetworkError("the client disconnected before the reply ended"))
            self._log["client_gone"] = True
            self._failed()

    def _stopped(self, stop: SpecViolationError) -> bytes:
        """The monitor stopped a step: the turn fails closed. Returns the error event when
        bytes went out already (b"": the error goes out as the HTTP response)."""
        self._stopped_by = stop
        self.failed = True
        self._log["error"] = stop.code
        return self._render([stop.body()]) if self.started else b""

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
            elif event.get("type") == "error":
                event = self._too_long_event(event)
            if event.get("type") == "message_delta":
                self._usage(event.get("usage"))
            parts.append(serialize_event(event))
        self.started = True
        return b"".join(parts)

    # -- context errors ----------------------------------------------------------------

    def _too_long(self, status: int, body: bytes) -> str | None:
        """An upstream error reply that says the request did not fit its context window:
        the Messages wording (``prompt is too long: N tokens > M maximum``, which Claude
        Code compacts on), else ``None``."""
        if status < 400 or not body:
            return None
        context = self._log.get("context")
        counted = context.get("input_tokens") if isinstance(context, dict) else None
        window = context.get("window") if isinstance(context, dict) else None
        return self.gateway.context.rewrite(body, counted, window)

    def _too_long_event(self, event: dict[str, Any]) -> dict[str, Any]:
        """A stream ``error`` event saying the request did not fit: in the Messages wording."""
        error = event.get("error")
        message = error.get("message") if isinstance(error, Mapping) else None
        if not isinstance(message, str):
            return event
        too_long = self._too_long(400, message.encode())
        if too_long is None:
            return event
        self._log["context_error"] = True
        return {**event, "error": {"type": "invalid_request_error", "message": too_long}}

    # -- ids, usage, log --------------------------------------------------------------

    def _signed(self, tool_id: str) -> str:
        if tool_id.startswith(CALLER_ID_PREFIX):
            try:
                settings = self.gateway.settings
                return sign_caller_id(tool_id, settings.secret, ring=settings.id_keys)
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
        self.gateway.count("messages", self.status)
        self.gateway.log(self._log, failed=self.failed)


class Forward:
    """An ANTHROPIC pass-through request (count_tokens, models)."""

    def __init__(self, gateway: Host, request_id: str, call: UpstreamCall) -> None:
        self.gateway = gateway
        self.request_id = request_id
        self.call = call

    def respond(self, status: int, headers: Mapping[str, str], body: bytes) -> Response:
        """The upstream's reply passed on whole, or replaced whole (an error) when it holds
        a whole secret, as the client would decode it: never partly redacted, since it may
        quote the client's input (see :mod:`tpx.errors`)."""
        text = body.decode("utf-8", "replace")
        if status in (401, 403):  # the upstream refused the gateway's credential
            response = error_response(
                502, "api_error", "the upstream refused the gateway", self.request_id
            )
        elif self._holds_secret(text):
            response = error_response(
                502, "api_error", "the upstream's reply was withheld", self.request_id
            )
        else:
            response = json_response(status, text.encode(), self.request_id)
        return self._count(response)

    def _holds_secret(self, text: str) -> bool:
        secrets = self.gateway.secrets
        if holds_secret(text, secrets.forms):
            return True
        if "\\" not in text:
            return False
        try:  # an escape may spell a secret: the strings as the client decodes them
            value = _safe.loads(text)
        except ValueError:
            return False
        return secrets.scrubber.dirty(value)

    def failed(self, error: ModelError) -> Response:
        return self._count(model_error_response(error, self.request_id))

    def _count(self, response: Response) -> Response:
        self.gateway.count(endpoint_label(self.call.path), response.status)
        return response
