"""The abstraction function of the HTTP replay: the spec's 13 variables, computed from
what the real clients hold and from the bytes on both wires, never from the gateway's
own state (it is another process).

Per conversation *c* (client :class:`~tpx.audit.client.ConvClient`, fake
upstream :class:`~tpx.audit.upstream.Channel`):

=============  ==================================================================
``turn``       exchanges the client saw end (a reply, an error status, a disconnect)
``phase``      ``idle``: no request outstanding; ``resp``: outstanding and the fake's
               well-formed reply went out on the upstream wire; ``req``: otherwise
``pending``    tool_use ids of the client history's last assistant turn
``reqIds``     tool_result ids of the client's last request the gateway did not refuse
``wireShape``  the last body on c's upstream wire (its last request, or the well-formed
               reply to it, plain or a complete event stream): ``openai`` for
               ``/chat/completions`` or a ``choices`` body / chunk stream, ``messages``
               for ``/messages`` or a ``message`` body / event stream; ``messages``
               before any
``wireIds``    ids that body carries: the trailing tool results of a request, the tool
               calls of a reply (``[]`` before any)
``emitted``    the tool call ids of the fake's last well-formed reply to c
``gotShape``   the shape of the last 200 body the client was handed
``lastOutcome`` / ``retryable``  the client's view of its last exchange
``provider``   the provider whose protocol the behaviour's latest upstream request speaks
               (``/chat/completions``: TPX, ``/messages``: ANTHROPIC; before any request:
               the one ``tpx serve`` announced at start-up)
``hasKey`` / ``hasToken``  the credentials the process was started with
=============  ==================================================================

Where the spec binds ids to calls and results (its variables include ``calls``:
:data:`BOUND`), the abstraction also reads, per conversation:

=============  ==================================================================
``calls``      ``<<id, call>>`` of each tool_use of the client history's last assistant
               turn: the id as the client holds it, the call its input names
``hist``       the rounds of tool_results the request behind the last reply the client
               was handed carried upstream: per round, ``<<id, call its content answers>>``
``wireRes``    the same of c's last request on the upstream wire
``request``    the client's last request (``none``, ``ok``, ``missing``, ``unknown``,
               ``duplicated``: its tool_results against the history's obligations)
``signedBy``   ``1`` when an id of the client's history verifies with the gateway's
               secret, else ``0``; and, shared, ``key`` = ``oldest`` = 1 (one key)
=============  ==================================================================

Ids are abstract ``<<c, t>>``: a wire id through its own text (``call_KEY_T_N``), a
client-side id through the wire id it stands for (TPX: the signed id verified with the
gateway's secret and decoded; ANTHROPIC: the id itself); an id of neither kind is
``<<?, id>>`` (TypeOK and PairingInv then fail). :func:`binding_problems` checks which
call each id, call and result is about, over every round of every request and reply
(:mod:`tpx.audit.binding`), and that the upstream got one request per
client request that reached it. Beside the state, :func:`byte_problems`
reads the wires for what a set cannot show: an id listed twice (PairingInv), an id
another conversation's provider emitted anywhere in c's bytes (NoCrossPairing), a
credential header that is not the provider's own (Credential), a failure the client sees
that is not Messages-shaped (ErrorShape); :func:`refusal_problem` checks that a pairing
refusal is a ``400 invalid_request_error`` (Refusal).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import orjson

from tpx.audit import binding
from tpx.audit.client import ConvClient, Settled
from tpx.audit.harness import API_KEY, GATEWAY_SECRET, OAUTH_TOKEN
from tpx.audit.sse import assemble_messages, is_stream, sse_events
from tpx.audit.upstream import WIRE_ID, Channel, UpstreamExchange
from tpx.oracle.model.gateway.state import VARS
from tpx.oracle.values import Function, ModelValue, Record
from tpx.transport.translate.ids import verify_signed_id, wire_id

__all__ = [
    "BOUND",
    "Observer",
    "binding_problems",
    "byte_problems",
    "client_call",
    "credential_problem",
    "error_problem",
    "foreign_call",
    "foreign_ids",
    "refusal_problem",
    "reply_ids",
    "reply_view",
    "request_ids",
    "shape_of",
]

UNKNOWN = ModelValue("?")
#: the spec binds ids to calls and results (its variables ``calls``, ``hist``, ``wireRes``,
#: ``request``, ``signedBy``, ``key``, ``oldest``): the abstraction computes them too
BOUND = "calls" in VARS
#: the spec has upstream attempts (``up``, ``health``, ``attempts``, ``reached``, ``gens``,
#: ``fwd``); the replay's cfgs leave them out (UpstreamSteps = FALSE, Upstreams = {u1}), so
#: they keep their initial values
ATTEMPTS = "up" in VARS


def _json(data: bytes | None) -> Any:
    if data is None:
        return None
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        return None


def shape_of(body: Any) -> str:
    if isinstance(body, dict) and "choices" in body:
        return "openai"
    if isinstance(body, dict) and body.get("type") == "message":
        return "messages"
    return "unparsable"


def _stream_view(data: bytes) -> tuple[str, list[str]] | None:
    """(shape, tool call ids) of a complete event stream: Chat Completions chunks ending
    with ``[DONE]``, or Messages events ending with ``message_stop``."""
    events = sse_events(data)
    if not events:
        return None
    if events[-1] == ("message", "[DONE]"):
        ids: list[str] = []
        for _, text in events[:-1]:
            chunk = _json(text.encode())
            if not isinstance(chunk, dict):
                return None
            for choice in chunk.get("choices") or []:
                for call in (choice.get("delta") or {}).get("tool_calls") or []:
                    if "id" in call:
                        ids.append(str(call["id"]))
        return "openai", ids
    message = assemble_messages(data)
    if message is None:
        return None
    return "messages", [str(b.get("id")) for b in message["content"] if b.get("type") == "tool_use"]


def reply_view(data: bytes | None) -> tuple[str, list[str]] | None:
    """(shape, tool call ids) of a well-formed reply of either provider, plain or streamed;
    ``None`` for anything else."""
    if data is None:
        return None
    if is_stream(data):
        return _stream_view(data)
    body = _json(data)
    shape = shape_of(body)
    if shape == "openai":
        calls = body["choices"][0]["message"].get("tool_calls") or []
        return shape, [str(call.get("id")) for call in calls]
    if shape == "messages":
        return shape, [str(b.get("id")) for b in body["content"] if b.get("type") == "tool_use"]
    return None


def is_reply(ex: UpstreamExchange) -> bool:
    """The fake's answer was a well-formed reply of the provider (the spec's ProviderReply)."""
    return ex.status == 200 and reply_view(ex.response) is not None


def request_ids(ex: UpstreamExchange) -> list[str]:
    """The tool result ids an upstream request carries in its last turn, in order."""
    body = _json(ex.body)
    if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
        return []
    messages = body["messages"]
    if ex.path.endswith("/chat/completions"):  # the tool messages after the last assistant
        out: list[str] = []
        for m in reversed(messages):
            if m.get("role") == "assistant":
                break
            if m.get("role") == "tool":
                out.append(str(m.get("tool_call_id")))
        return out[::-1]
    last = messages[-1] if messages else {}
    content = last.get("content") if last.get("role") == "user" else None
    if not isinstance(content, list):
        return []
    return [str(b.get("tool_use_id")) for b in content if b.get("type") == "tool_result"]


def client_call(raw: str) -> str | None:
    """The call a client-side id names: the wire id it stands for (a signed id verified with
    the gateway's secret, then decoded), read as ``call_KEY_T_N`` / ``toolu_KEY_T_N``."""
    return binding.call_of_id(wire_id(verify_signed_id(raw, GATEWAY_SECRET) or raw))


def foreign_call(raw: str) -> str | None:
    """The call an id another endpoint handed out names, read without its secret: as
    :func:`client_call`, else the wire id its text ends with, else the call it was handed on
    (:func:`tpx.audit.binding.call_of_foreign_id`)."""
    call = client_call(raw)
    return call if call is not None else binding.call_of_foreign_id(raw)


def reply_ids(data: bytes | None) -> list[str]:
    view = reply_view(data)
    return [] if view is None else view[1]


class Observer:
    """The abstraction for one behaviour: its conversations' clients and channels."""

    def __init__(
        self,
        has_key: bool,
        has_token: bool,
        announced: str,
        clients: Mapping[ModelValue, ConvClient],
        channels: Mapping[ModelValue, Channel],
    ) -> None:
        self.has_key = has_key
        self.has_token = has_token
        #: how the ids the client holds are read (:func:`foreign_call`: an endpoint whose
        #: secret the judge does not hold)
        self.reader: binding.IdReader = client_call
        self.announced = ModelValue(announced)
        self.clients = clients
        self.channels = channels
        self.conv_of = {cl.key: c for c, cl in clients.items()}
        #: verdicts on bytes already taken (bytes that never change): (conversation, what,
        #: index) -> problems
        self._judged: dict[tuple[ModelValue, str, int], list[tuple[str, str]]] = {}

    def _abstract(self, key: str, tool: str) -> tuple[ModelValue, ModelValue]:
        c = self.conv_of.get(key)
        return (c if c is not None else ModelValue(f"?{key}"), ModelValue(tool))

    def wire_id(self, raw: str) -> tuple[ModelValue, ModelValue]:
        m = WIRE_ID.fullmatch(raw)
        return self._abstract(m.group(1), m.group(2)) if m else (UNKNOWN, ModelValue(raw))

    def client_id(self, cl: ConvClient, raw: str) -> tuple[ModelValue, ModelValue]:
        call = self.reader(raw)
        m = binding.CALL.fullmatch(call or "")
        return self._abstract(m.group(1), m.group(2)) if m else (UNKNOWN, ModelValue(raw))

    def _latest(self) -> UpstreamExchange | None:
        latest: UpstreamExchange | None = None
        for ch in self.channels.values():
            if ch.exchanges and (latest is None or ch.exchanges[-1].seq > latest.seq):
                latest = ch.exchanges[-1]
        return latest

    def provider(self) -> ModelValue:
        latest = self._latest()
        if latest is None:
            return self.announced
        return ModelValue("TPX" if latest.path.endswith("/chat/completions") else "ANTHROPIC")

    def conversation(self, c: ModelValue) -> dict[str, Any]:
        cl, ch = self.clients[c], self.channels[c]
        phase = "idle"
        if cl.outstanding is not None:
            phase = "resp" if cl.arrived is not None and is_reply(cl.arrived) else "req"
        wire_shape = "messages"
        wire_ids: frozenset[Any] = frozenset()
        emitted: frozenset[Any] = frozenset()
        if ch.exchanges:
            last = ch.exchanges[-1]
            view = reply_view(last.response) if last.status == 200 else None
            if view is not None:
                wire_shape = view[0]
                wire_ids = frozenset(self.wire_id(i) for i in view[1])
            else:
                wire_shape = "openai" if last.path.endswith("/chat/completions") else "messages"
                wire_ids = frozenset(self.wire_id(i) for i in request_ids(last))
        for ex in reversed(ch.exchanges):
            if is_reply(ex):
                emitted = frozenset(self.wire_id(i) for i in reply_ids(ex.response))
                break
        got = "messages" if cl.delivered is None else shape_of(_json(cl.delivered))
        out = {
            "turn": cl.turn,
            "phase": phase,
            "pending": frozenset(self.client_id(cl, i) for i in cl.pending()),
            "reqIds": frozenset(self.client_id(cl, i) for i in ConvClient.results_of(cl.accepted)),
            "wireShape": wire_shape,
            "wireIds": wire_ids,
            "emitted": emitted,
            "gotShape": got,
            "lastOutcome": cl.last_outcome,
            "retryable": cl.retryable,
        }
        if BOUND:
            out.update(self.bound(cl, ch))
        if ATTEMPTS:
            out.update(up=ModelValue("NONE"), attempts=0, reached=False, gens=0, fwd=0)
        return out

    # -- ids bound to calls (the spec's calls, hist, wireRes, request, signedBy) ---------

    def call(self, call: str | None) -> tuple[ModelValue, ModelValue]:
        """A call ``KEY_T_N`` as the spec names it: the id its provider emitted it under."""
        m = binding.CALL.fullmatch(call or "")
        return self._abstract(m.group(1), m.group(2)) if m else (UNKNOWN, ModelValue(str(call)))

    def rounds(self, ex: UpstreamExchange | None) -> tuple[frozenset[Any], ...]:
        """The rounds of tool_results a request carried upstream: per round, the
        ``<<id, answered call>>`` pairs."""
        if ex is None:
            return ()
        view = binding.request_view(_json(ex.body), ex.path.endswith("/chat/completions"))
        rounds = [r.answers for r in view.rounds] + [view.stray] * bool(view.stray)
        return tuple(
            frozenset((self.wire_id(a.id), self.call(a.answers)) for a in answers)
            for answers in rounds
        )

    def bound(self, cl: ConvClient, ch: Channel) -> dict[str, Any]:
        last = [m for m in cl.history if m["role"] == "assistant"][-1:]
        uses = [b for m in last for b in m["content"] if b.get("type") == "tool_use"]
        signed = any(
            verify_signed_id(str(b.get("id")), GATEWAY_SECRET) is not None
            for m in cl.history
            if m["role"] == "assistant"
            for b in m["content"]
            if b.get("type") == "tool_use"
        )
        return {
            "calls": frozenset(
                (
                    self.client_id(cl, str(b.get("id"))),
                    self.call(binding.call_of_input(b.get("input"))),
                )
                for b in uses
            ),
            "hist": self.rounds(cl.handed[-1][1] if cl.handed else None),
            "wireRes": self.rounds(ch.exchanges[-1] if ch.exchanges else None),
            "request": cl.request,
            "signedBy": 1 if signed else 0,
        }

    def state(self) -> Record:
        per = {c: self.conversation(c) for c in self.clients}
        names = next(iter(per.values())).keys()
        record: dict[str, Any] = {
            "hasKey": self.has_key,
            "hasToken": self.has_token,
            "provider": self.provider(),
        }
        if BOUND:  # one signing key, never rotated
            record.update(key=1, oldest=1)
        if ATTEMPTS:  # one upstream, never cooling down
            record["health"] = Function({ModelValue("u1"): True})
        for name in names:
            record[name] = Function({c: per[c][name] for c in per})
        return Record(record)


def _scan(data: bytes, own: str) -> Iterable[str]:
    for m in WIRE_ID.finditer(data.decode("utf-8", "replace")):
        if m.group(1) != own:
            yield m.group(0)


def foreign_ids(obs: Observer, c: ModelValue) -> frozenset[tuple[ModelValue, ModelValue]]:
    """The other conversations' ids *c*'s bytes name: in the answers its client received and
    on its upstream wire (NoCrossPairing's evidence)."""
    cl, ch = obs.clients[c], obs.channels[c]
    data = [a.body for a in cl.received] + [ex.body for ex in ch.exchanges]
    return frozenset(obs.wire_id(raw) for body in data for raw in _scan(body, cl.key))


def credential_problem(ex: UpstreamExchange) -> str | None:
    """Only the provider's own credential travels: the bearer token to the OpenAI-compatible
    upstream, the API key to the Anthropic one."""
    h = ex.headers
    if ex.path.endswith("/chat/completions"):
        ok = h.get("authorization") == f"Bearer {OAUTH_TOKEN}" and "x-api-key" not in h
    else:
        ok = h.get("x-api-key") == API_KEY and "authorization" not in h
    return None if ok else f"{ex.path} carried the credential headers {sorted(h)}"


def _messages_error(body: Any) -> bool:
    error = body.get("error") if isinstance(body, dict) else None
    return (
        isinstance(body, dict)
        and body.get("type") == "error"
        and isinstance(error, dict)
        and isinstance(error.get("type"), str)
        and isinstance(error.get("message"), str)
    )


def error_problem(answer: Settled) -> str | None:
    """Every failure the client sees is Messages-shaped: an error status with a Messages
    error body, or (a stream already under way) a stream whose last event is ``error``."""
    if answer.status == 200:
        if not is_stream(answer.body):
            return None
        events = sse_events(answer.body)
        if events and events[-1][0] == "message_stop":
            return None
        if events and events[-1][0] == "error" and _messages_error(_json(events[-1][1].encode())):
            return None
        return "a stream ended neither with message_stop nor with a Messages error event"
    if not _messages_error(_json(answer.body)):
        return f"a {answer.status} answer whose body is not a Messages error"
    return None


def refusal_problem(answer: Settled | None) -> str | None:
    """A request refused for pairing (CallerAbort) gets ``400 invalid_request_error``."""
    if answer is None or answer.status != 400:
        return f"answered {None if answer is None else answer.status}, not 400"
    body = _json(answer.body)
    if not _messages_error(body) or body["error"]["type"] != "invalid_request_error":
        return "a 400 whose body is not a Messages invalid_request_error"
    return None


def byte_problems(obs: Observer) -> list[tuple[str, str]]:
    """(property, message) for what the bytes show beyond the state."""
    problems: list[tuple[str, str]] = []
    judged = obs._judged  # a request's bytes never change: each judged once
    for c, cl in obs.clients.items():
        ch = obs.channels[c]
        for ex in ch.exchanges:
            key = (c, "bytes", ex.seq)
            if key not in judged:
                judged[key] = _request_bytes(c, cl, ex)
            problems += judged[key]
        for k, answer in enumerate(cl.received):
            key = (c, "answer", k)
            if key not in judged:
                found = []
                bad = error_problem(answer)
                if bad is not None:
                    found.append(("ErrorShape", f"{c}: {bad}"))
                for foreign in _scan(answer.body, cl.key):
                    found.append(("NoCrossPairing", f"{c}: {foreign} in a response to it"))
                judged[key] = found
            problems += judged[key]
    return problems


def _request_bytes(c: ModelValue, cl: ConvClient, ex: UpstreamExchange) -> list[tuple[str, str]]:
    problems = []
    bad = credential_problem(ex)
    if bad is not None:
        problems.append(("Credential", f"{c}: {bad}"))
    ids = request_ids(ex)
    if len(ids) != len(set(ids)):
        problems.append(("PairingInv", f"{c}: a tool result twice on the wire: {ids}"))
    for foreign in _scan(ex.body, cl.key):
        problems.append(("NoCrossPairing", f"{c}: {foreign} on its upstream wire"))
    return problems


def _made(ex: UpstreamExchange) -> binding.ReplyView:
    """The calls of the fake's reply (its own ids name them: the fake plants both)."""
    ids = reply_ids(ex.response) if ex.status == 200 else []
    return binding.ReplyView(
        tuple(binding.Use(i, binding.call_of_id(i), binding.call_of_id(i)) for i in ids)
    )


def _upstream_binding(
    c: ModelValue, ch: Channel, ex: UpstreamExchange, sent: bytes, reader: binding.IdReader
) -> list[tuple[str, str]]:
    openai = ex.path.endswith("/chat/completions")
    up = binding.request_view(_json(ex.body), openai)
    mine = binding.request_view(_json(sent), False, reader)
    where = f"{c}: upstream request #{ex.seq} ({'TPX' if openai else 'ANTHROPIC'})"
    return [("Binding", p) for p in binding.request_problems(up, mine, ch.rounds, where)]


def binding_problems(obs: Observer) -> list[tuple[str, str]]:
    """(property, message): ``Binding`` for every id, call or result about another call than
    it should be, or a round lost, duplicated or invented, on either wire; ``OneRequest``
    for a request on the upstream wire no client request started (one sent twice)."""
    problems: list[tuple[str, str]] = []
    judged = obs._judged
    for c, cl in obs.clients.items():
        ch = obs.channels[c]
        claimed = {ex.seq for ex, _ in cl.forwarded}
        for ex in ch.exchanges:
            if ex.seq not in claimed:
                problems.append(
                    ("OneRequest", f"{c}: upstream request #{ex.seq} started by no client request")
                )
        for k, (ex, sent) in enumerate(cl.forwarded):
            key = (c, "up", k)
            if key not in judged:
                judged[key] = _upstream_binding(c, ch, ex, sent, obs.reader)
            problems += judged[key]
        for k, (message, origin) in enumerate(cl.handed):
            key = (c, "reply", k)
            if key not in judged:
                handed = binding.reply_view(message, obs.reader)
                where = f"{c}: reply {k} handed to the client"
                if origin is None:
                    judged[key] = [("Binding", f"{where} answers no upstream request")]
                else:
                    found = binding.reply_problems(handed, _made(origin), where)
                    judged[key] = [("Binding", p) for p in found]
            problems += judged[key]
    return problems
