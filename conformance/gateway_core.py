"""Conformance through the gateway core: real conversations, in-process, against the fakes.

A :class:`GatewayRig` runs the sans-I/O :class:`~tpx.gateway.core.Gateway` (``tpx serve``'s
core, with ``--monitor``: every exchange's spec steps are checked live by the gateway
spec's mirror) behind :class:`tpx.sdk.GatewayTransport` (no socket, no thread), with the
conformance :class:`~conformance.fakes.FakeProvider` as the upstream (every foreign-id
style and stream shape it draws) and the conformance :class:`~conformance.caller.FakeCaller`
as the client (the whole history every turn, ``is_error`` both ways, prefills).
:meth:`GatewayRig.turn` plays one turn of a conversation and returns every way it left
the spec or the Messages API's contract (empty: it conforms):

* ``reply`` -- the caller gets a 200 Messages body (or a complete Messages stream) whose
  text, tools, stop reason and planted tool ids are the reply's (``Content``,
  ``StopReason``); every tool_use id it gets is one this gateway signed (TPX) or the
  provider's own (ANTHROPIC); the upstream request carries every tool round of the
  history back under the ids the provider emitted, byte for byte and in order, with the
  caller's ``is_error`` (``WireIds``, ``IsError``, ``PairingInv``: the checks of
  :mod:`conformance.abstraction` on the wire body), and exactly the upstream's own
  credential (``Credential``: never the gateway key);
* ``fail`` -- the upstream fails (every kind of :data:`~conformance.fakes.FAILURE_KINDS`, and
  mid-stream ones when streamed): the caller gets the Messages error the failure means (its
  status, type and ``retry-after``), or, once the stream began, an ``error`` event and no
  ``message_stop``; the same request sent again then succeeds (the gateway's
  ``GatewayRetry``: a failed turn leaves nothing behind);
* ``abort`` -- the caller's tool_results do not answer the last assistant turn (missing,
  unknown, duplicated, none): a 400 ``invalid_request_error`` in the Messages API's words,
  and the upstream is never called (``CallerAbort``).

Every turn also checks the gateway's own record of it (its log line: the spec actions the
exchange took, its outcome, the HTTP status sent) and that the monitor saw no violation.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any, Literal

import attrs
import httpx2
import orjson

from conformance.abstraction import (
    _content_problems,
    _credential_problem,
    _request_problems,
    assemble_messages,
    sse_events,
    wire_pairs,
)
from conformance.caller import AbortStyle, FakeCaller
from conformance.fakes import (
    ANTHROPIC_URL,
    ID_STYLES,
    KEY,
    MESSAGES,
    OPENAI,
    TOKEN,
    TPX_URL,
    FailureKind,
    FakeProvider,
)
from tpx.gateway.bodies import BodyReader
from tpx.gateway.core import Gateway
from tpx.gateway.settings import Credential, Settings
from tpx.gateway.upstream import SyncUpstream
from tpx.sdk import GatewayTransport
from tpx.transport.exchange import Provider
from tpx.transport.translate.ids import CALLER_ID_PREFIX, verify_signed_id

__all__ = [
    "GATEWAY_KEY",
    "SECRET",
    "UPSTREAM_ERROR",
    "GatewayRig",
    "TurnResult",
    "log_records",
]

GATEWAY_KEY = "conformance-gateway-KEY"
SECRET = b"conformance-gateway-secret"
AUTH = {"x-api-key": GATEWAY_KEY}

#: What the caller must get for each upstream failure before the first byte: the HTTP
#: status and the Messages error type (the Messages API's own mapping; an upstream that
#: refuses the GATEWAY's credential is the gateway's fault: 502), and ``retry-after``.
UPSTREAM_ERROR: dict[FailureKind, tuple[int, str, str | None]] = {
    "connect": (502, "api_error", None),
    "tls": (502, "api_error", None),
    "timeout": (504, "timeout_error", None),
    "http401": (502, "api_error", None),
    "http429": (429, "rate_limit_error", "7"),
    "http500": (500, "api_error", None),
    "http529": (529, "overloaded_error", "7"),
    "non_json": (502, "api_error", None),
    "shape": (502, "api_error", None),
    "bad_tool_call": (502, "api_error", None),
    # mid-stream failures, when the stream had not begun for the caller
    "drop": (502, "api_error", None),
    "error_event": (529, "overloaded_error", None),
    "malformed": (502, "api_error", None),
    "no_done": (502, "api_error", None),
    "bad_delta": (502, "api_error", None),
}

Kind = Literal["reply", "fail", "abort"]


@attrs.frozen
class TurnResult:
    kind: Kind
    status: int
    problems: tuple[str, ...]


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[dict[str, Any]] = []

    def emit(self, record: logging.LogRecord) -> None:
        try:
            line = orjson.loads(record.getMessage())
        except orjson.JSONDecodeError:
            return
        if isinstance(line, dict) and line.get("endpoint") == "messages":
            self.lines.append(line)


@contextmanager
def log_records() -> Iterator[list[dict[str, Any]]]:
    """The gateway's log lines of ``/v1/messages`` exchanges while the block runs."""
    handler = _Records()
    logger = logging.getLogger("tpx.gateway")
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield handler.lines
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


def _usage(data: bytes, streamed: bool, *, deltas_only: bool = False) -> dict[str, int]:
    """The token counts the caller was told (a stream: message_start's, then each
    message_delta's, the later winning; *deltas_only*: message_delta's alone, what the
    gateway logs of a stream that then failed)."""
    found: list[Any] = []
    if streamed:
        for name, payload in sse_events(data):
            event = orjson.loads(payload)
            if name == "message_start" and not deltas_only:
                found.append(event.get("message", {}).get("usage"))
            elif name == "message_delta":
                found.append(event.get("usage"))
    else:
        found.append(orjson.loads(data).get("usage"))
    out: dict[str, int] = {}
    for usage in found:
        if isinstance(usage, Mapping):
            out.update(
                {
                    k: v
                    for k in ("input_tokens", "output_tokens")
                    if isinstance(v := usage.get(k), int)
                }
            )
    return out


def settings_for(provider: Provider, **changes: Any) -> Settings:
    """A gateway in front of the conformance fake of *provider* (``--monitor`` on)."""
    if provider is Provider.TPX:
        base = Settings(
            provider=Provider.TPX,
            base_url=TPX_URL,
            credential=Credential(TOKEN),
            secret=SECRET,
            gateway_key=GATEWAY_KEY,
            monitor=True,
        )
    else:
        base = Settings(
            provider=Provider.ANTHROPIC,
            base_url=ANTHROPIC_URL,
            credential=Credential(KEY),
            secret=SECRET,
            gateway_key=GATEWAY_KEY,
            monitor=True,
        )
    return attrs.evolve(base, **changes)


class GatewayRig:
    """One gateway process in front of one fake upstream, and one conversation's caller."""

    def __init__(
        self,
        provider: Provider,
        *,
        seed: int = 0,
        streaming: bool = False,
        uncredentialed: bool = False,
        **changes: Any,
    ) -> None:
        """*uncredentialed*: the gateway booted without credentials (provider NONE; the fake
        of *provider* stays unreachable)."""
        self.provider = provider
        self.streaming = streaming
        shape = OPENAI if provider is Provider.TPX else MESSAGES
        styles = ID_STYLES[shape]
        self.fake = FakeProvider(shape, styles[seed % len(styles)])
        self.fake.reset(reverse=bool(seed // 3 % 2), layout=seed // 2, seed=seed)
        self.caller = FakeCaller()
        self.caller.reset(reverse_answers=bool(seed // 2 % 2), seed=seed)
        self.settings = settings_for(provider, **changes)
        if uncredentialed:
            self.settings = attrs.evolve(self.settings, provider=Provider.NONE, credential=None)
        self.gateway = Gateway(self.settings)
        # every replayed request also goes through the tail cache (tpx.gateway.bodies), whose
        # size floors these small bodies would stay under
        self.gateway.bodies = BodyReader(min_body=0, min_tail=0)
        self.upstream = SyncUpstream(
            self.settings, transport=httpx2.MockTransport(self.fake.handle)
        )
        self.client = httpx2.Client(
            transport=GatewayTransport(self.gateway, self.upstream), base_url="http://gateway.test"
        )
        self.session = f"session-7f3a-{seed}"
        self.posts: list[tuple[Mapping[str, Any], httpx2.Response, bytes, Any]] = []
        """every request posted: (body, response, bytes received, the upstream's body)"""

    def close(self) -> None:
        self.client.close()

    def __enter__(self) -> GatewayRig:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- one request -----------------------------------------------------------------

    def post(
        self, body: Mapping[str, Any], headers: Mapping[str, str] = AUTH
    ) -> tuple[int, httpx2.Headers, bytes]:
        """Send *body* to ``/v1/messages`` (as a Claude Code session): the status, headers
        and every byte received."""
        sent = {**headers, "x-claude-code-session-id": self.session}
        received = len(self.fake.received)
        with self.client.stream(
            "POST", "/v1/messages", content=orjson.dumps(body), headers=sent
        ) as response:
            data = b"".join(response.iter_bytes())
        upstream = (
            orjson.loads(self.fake.received[-1]) if len(self.fake.received) > received else None
        )
        self.posts.append((body, response, data, upstream))
        return response.status_code, response.headers, data

    def _request(self, style: AbortStyle | None) -> dict[str, Any]:
        req = self.caller.request() if style is None else self.caller.bad_request(style)
        return {**req, "stream": True} if self.streaming else req

    def violations(self) -> int:
        monitor = self.gateway.monitor
        return 0 if monitor is None else monitor.monitor.violations

    # -- one turn ---------------------------------------------------------------------

    def turn(
        self,
        kind: Kind,
        *,
        ids: tuple[str, ...] = (),
        failure: FailureKind | None = None,
        style: AbortStyle = "silent",
        retry: bool = True,
    ) -> TurnResult:
        """Play one turn (see the module docstring); ``ids``: the abstract ids the reply
        emits; ``failure``: how the upstream fails; ``style``: how the caller aborts."""
        before = self.violations()
        errors_before = self.error_counts()
        posted = len(self.posts)
        with log_records() as lines:
            if kind == "reply":
                status, problems = self._reply(ids)
            elif kind == "fail":
                assert failure is not None
                status, problems = self._fail(failure, retry)
            else:
                status, problems = self._abort(style)
        want = {
            "reply": [["CallerSend", "ProviderReply", "Deliver"]],
            "fail": [["CallerSend", "ProviderFail"]],
            "abort": [["CallerAbort"], []],
        }[kind]
        if kind == "fail" and retry:
            want = [want[0], ["CallerSend", "ProviderReply", "Deliver"]]
        if not lines:
            problems.append("Log: the gateway wrote no line for the exchange")
        elif kind != "fail" or not retry:
            line = lines[-1]
            if line.get("actions") not in want:
                problems.append(f"Log: the exchange took {line.get('actions')}, wanted {want}")
            if line.get("status", status) != status:
                problems.append(f"Log: status {line.get('status')} logged, {status} sent")
            outcome = {"reply": "ok", "fail": "err", "abort": None}[kind]
            if outcome is not None and line.get("outcome") != outcome:
                problems.append(f"Log: outcome {line.get('outcome')!r}, wanted {outcome!r}")
        else:
            got = [line.get("actions") for line in lines]
            if got != want:
                problems.append(f"Log: the exchanges took {got}, wanted {want}")
        if len(lines) == len(self.posts) - posted:
            for line, post in zip(lines, self.posts[posted:], strict=True):
                problems += self._log_problems(line, *post)
        if self.violations() != before:
            problems.append("Monitor: the gateway monitor stopped a step")
        if self.gateway.in_flight != 0:  # the spec's inFlight: every exchange of the turn ended
            problems.append(f"MaxInFlight: {self.gateway.in_flight!r} exchanges left in flight")
        # every failed exchange is counted under its error code (tpx_gateway_errors_total)
        codes = Counter(str(line.get("error")) for line in lines if "error" in line)
        counted = self.error_counts() - errors_before
        if counted != codes:
            problems.append(f"Metrics: errors counted {dict(counted)}, the log says {dict(codes)}")
        return TurnResult(kind, status, tuple(problems))

    def error_counts(self) -> Counter[str]:
        """``tpx_gateway_errors_total`` by code, as ``/metrics`` renders it."""
        counts: Counter[str] = Counter()
        for raw in self.gateway.metrics.render().decode().splitlines():
            if raw.startswith('tpx_gateway_errors_total{code="'):
                code, _, value = raw[len('tpx_gateway_errors_total{code="') :].partition('"} ')
                counts[code] = int(float(value))
        return counts

    def _log_problems(
        self,
        line: Mapping[str, Any],
        body: Mapping[str, Any],
        response: httpx2.Response,
        data: bytes,
        upstream: Any,
    ) -> list[str]:
        """The exchange's log line (README, "Logging") against what crossed the wire."""
        want: dict[str, Any] = {
            "request_id": response.headers.get("request-id"),
            "session": self.session,
            "model": body.get("model"),
            "stream": self.streaming,
        }
        if upstream is not None:  # a Turn: its line says what the caller got
            want["status"] = response.status_code
            want["upstream_status"] = (
                200 if line.get("outcome") == "ok" else line.get("upstream_status")
            )
        if (
            self.provider is Provider.TPX
            and upstream is not None
            and ("upstream_model" in line or upstream.get("model") != body.get("model"))
        ):  # a model the gateway chose is logged
            want["upstream_model"] = upstream.get("model")
        if response.status_code == 200:  # what the caller was told is what was logged
            told = _usage(data, self.streaming, deltas_only=line.get("outcome") != "ok")
            for key, value in told.items():
                if value > 0:
                    want[key] = value
        error = line.get("error")
        problems = []
        if line.get("outcome") == "ok" and error is not None:
            problems.append(f"Log: error {error!r} logged for a delivered exchange")
        elif line.get("outcome") != "ok" and not str(error).startswith("MODEL_"):
            problems.append(f"Log: a failed exchange logged the error {error!r}")
        problems += [
            f"Log: {key} logged as {line.get(key)!r}, wanted {value!r}"
            for key, value in want.items()
            if line.get(key) != value
        ]
        if self.provider is Provider.ANTHROPIC and "upstream_model" in line:
            problems.append("Log: an upstream_model logged for the pass-through")
        latency = line.get("latency_ms")
        if upstream is not None and (not isinstance(latency, int | float) or latency < 0):
            problems.append(f"Log: latency_ms {latency!r}")
        if not isinstance(line.get("pid"), int):
            problems.append(f"Log: pid {line.get('pid')!r}")
        return problems

    def _message(self, status: int, data: bytes) -> tuple[dict[str, Any] | None, list[str]]:
        """The message the caller holds after a 200 (plain body, or its stream assembled)."""
        if status != 200:
            return None, [f"Refinement: the caller got HTTP {status}: {data[:200]!r}"]
        if self.streaming:
            message = assemble_messages(data)
            if message is None:
                return None, ["ShapeInv: the caller's stream is no complete Messages stream"]
            return message, []
        try:
            message = orjson.loads(data)
        except orjson.JSONDecodeError:
            return None, ["ShapeInv: the caller's body is not JSON"]
        if not isinstance(message, dict) or message.get("type") != "message":
            return None, [f"ShapeInv: the caller's body is no Messages message: {data[:200]!r}"]
        return message, []

    def _reply(self, ids: tuple[str, ...]) -> tuple[int, list[str]]:
        req = self._request(None)
        received = len(self.fake.received)
        self.fake.plan_reply(ids)
        self.caller.accepted(req)
        status, _, data = self.post(req)
        problems = self._upstream_problems(req, received)
        message, found = self._message(status, data)
        problems += found
        if message is None:
            self.caller.failed()
            return status, problems
        serial = len(self.fake.replies) - 1
        reply = self.fake.replies[serial]
        problems += _content_problems(message, reply)
        if message.get("stop_reason") != reply.stop_reason:
            problems.append(
                f"StopReason: the caller got {message.get('stop_reason')!r}, "
                f"the reply means {reply.stop_reason!r}"
            )
        pairs = wire_pairs(message, "messages")
        planted = [aid for _, aid in pairs]
        emitted = [c.aid for c in reply.calls]
        if planted != emitted:
            problems.append(f"WireIds: the caller got the calls {planted}, emitted {emitted}")
        caller_ids = [cid for cid, _ in pairs]
        if len(set(caller_ids)) != len(caller_ids):
            problems.append(f"PairingInv: the caller got tool_use ids twice: {caller_ids}")
        for cid, call in zip(caller_ids, reply.calls, strict=False):
            problems += self._id_problems(cid, call.wire_id)
        self.caller.delivered(message, serial)
        return status, problems

    def _id_problems(self, caller_id: str, foreign: str) -> list[str]:
        """A tool_use id handed to the caller: signed by this gateway (TPX; it verifies
        with the gateway's secret), or the provider's own id, byte for byte (ANTHROPIC)."""
        if self.provider is Provider.ANTHROPIC:
            if caller_id != foreign:
                return [f"WireIds: the caller got {caller_id!r} for the provider's {foreign!r}"]
            return []
        if (
            not caller_id.startswith(CALLER_ID_PREFIX)
            or verify_signed_id(caller_id, SECRET) is None
        ):
            return [f"PairingInv: the caller got {caller_id!r}, no id this gateway signed"]
        return []

    def _upstream_problems(self, req: Mapping[str, Any], received: int) -> list[str]:
        """The one request the upstream got for *req*: its tool rounds and credential."""
        if len(self.fake.received) != received + 1:
            return [f"Refinement: the upstream got {len(self.fake.received) - received} requests"]
        body = orjson.loads(self.fake.received[-1])
        shape = OPENAI if self.provider is Provider.TPX else MESSAGES
        problems, _ = _request_problems(body, shape, self.fake, req, self.caller.sent_rounds)
        if problem := _credential_problem(self.provider, self.fake.received_headers[-1]):
            problems.append(problem)
        if GATEWAY_KEY in orjson.dumps(self.fake.received_headers[-1]).decode():
            problems.append("Credential: the gateway's own key went upstream")
        if body.get("stream", False) is not self.streaming:
            problems.append(f"Refinement: the upstream request has stream={body.get('stream')}")
        return problems

    def _fail(self, failure: FailureKind, retry: bool) -> tuple[int, list[str]]:
        req = self._request(None)
        received = len(self.fake.received)
        self.fake.plan_fail(failure)
        self.caller.accepted(req)
        status, headers, data = self.post(req)
        problems = self._upstream_problems(req, received)
        events = sse_events(data) if status == 200 else []
        if status == 200:  # the stream began: it must end in an error event
            if not self.streaming:
                problems.append(f"Refinement: a failed upstream ({failure}) answered 200")
            elif not events or events[-1][0] != "error":
                problems.append(f"Refinement: the failing stream ({failure}) ended {events[-1:]}")
            elif any(name == "message_stop" for name, _ in events):
                problems.append("Refinement: a failing stream handed over message_stop")
        else:
            want = UPSTREAM_ERROR.get(failure)
            error = orjson.loads(data) if data.startswith(b"{") else {}
            got = (status, error.get("error", {}).get("type"), headers.get("retry-after"))
            if want is None or got != want:
                problems.append(
                    f"Refinement: upstream {failure}: the caller got {got}, wanted {want}"
                )
            if error.get("type") != "error" or error.get("request_id") != headers.get("request-id"):
                problems.append(f"Refinement: the error body is no Messages error: {data[:200]!r}")
        if not retry:
            self.caller.failed()
            return status, problems
        # GatewayRetry: the same body again is a fresh turn whose obligations are again its
        # history's (the failed turn left nothing behind)
        received = len(self.fake.received)
        self.fake.plan_reply(("t1",))
        self.caller.accepted(req)
        again, _, data = self.post(req)
        problems += self._upstream_problems(req, received)
        message, found = self._message(again, data)
        problems += [f"GatewayRetry: {p}" for p in found]
        if message is None:
            self.caller.failed()
        else:
            self.caller.delivered(message, len(self.fake.replies) - 1)
        return status, problems

    def _abort(self, style: AbortStyle) -> tuple[int, list[str]]:
        owed = len(self.caller.obligations)
        req = self._request(style)
        received = len(self.fake.received)
        status, _, data = self.post(req)
        problems: list[str] = []
        if len(self.fake.received) != received:
            problems.append("CallerAbort: the upstream was called")
        if owed == 0 and style != "unknown":
            raise ValueError(f"nothing is owed: a {style} request would be a CallerSend")
        if True:
            error = orjson.loads(data) if data.startswith(b"{") else {}
            kind = error.get("error", {}).get("type")
            if status != 400 or kind != "invalid_request_error":
                problems.append(f"CallerAbort ({style}): the caller got {status} {kind}")
            message = str(error.get("error", {}).get("message", ""))
            words = {
                "silent": "without `tool_result` blocks",
                "partial": "without `tool_result` blocks",
                "unknown": "unexpected `tool_use_id`",
                "duplicate": "must have a single result",
            }[style]
            if words not in message:
                problems.append(f"CallerAbort ({style}): the message {message!r} lacks {words!r}")
            shown = self._shown_ids(req)
            if style != "unknown" and not any(i in message for i in shown):
                problems.append(f"CallerAbort ({style}): the message names none of {shown}")
        self.caller.failed()
        return status, problems

    def _shown_ids(self, req: Mapping[str, Any]) -> list[str]:
        """The tool_use ids of the caller's last assistant turn, as the caller holds them."""
        return [b["id"] for b in self.caller.obligations] or [
            cid for cid, _ in wire_pairs(req, "messages")
        ]
