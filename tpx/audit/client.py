"""One conversation's real HTTP client (``httpx2.AsyncClient``), as a Messages caller.

It keeps what a real caller keeps: the conversation's history (every turn the gateway
delivered, with its tool_use blocks), the body of its last request (a retry re-sends it
byte for byte), and the outcome of its last exchange as HTTP showed it. The abstraction
reads the spec's client-side variables from here:

* ``pending`` -- the tool_use ids of the history's last assistant turn;
* ``reqIds`` -- the tool_result ids of the last request the gateway did not refuse;
* ``turn`` / ``lastOutcome`` / ``retryable`` -- exchanges ended, how the last one ended
  (200: ok; any error status or a disconnect: err; retryable when the failed request had
  reached the upstream, so the turn may be re-sent as the SDKs do);
* ``gotShape`` -- the shape of the last 200 body it was handed (streamed: the message it
  assembled from the events; a stream ending in an ``error`` event or without
  ``message_stop`` is a failed exchange).

Its bodies are shaped like Claude Code's (:mod:`tpx.audit.claude_code`: the
recorded system prompt, tool list and member order after ``messages``), and it sends the
session header Claude Code sends; the conversations of one behaviour share a session, as
a Claude Code session's sub-agents do. It answers a call with ``output of KEY_T_N``, the
call its tool_use's input names (what a caller executes is the input, whatever the id);
with ``reverse`` set, parallel calls are answered in the reverse order.
"""

from __future__ import annotations

import asyncio
import re
from typing import Any

import attrs
import httpx2
import orjson

from tpx.audit.binding import call_of_input, learn, output_for, request_kind
from tpx.audit.claude_code import recorded_headers, tail_members
from tpx.audit.sse import assemble_messages
from tpx.audit.upstream import UpstreamExchange, conv_tag
from tpx.oracle.values import ModelValue

__all__ = ["ABORT_STYLES", "ConvClient", "Settled"]

#: how a CallerAbort's tool_results fail to answer the history's obligations: an id never
#: issued, one left out, one twice; ``issued`` is the spec's ``unknown`` too, with an id the
#: endpoint did issue, for a call of an earlier round (a check that asks "is this id one
#: of mine", or drops a result it takes for a re-sent one, lets it through)
ABORT_STYLES = ("unknown", "missing", "duplicate")

#: a ``ping`` event, which a Messages stream may carry anywhere (the gateway sends them
#: while the upstream is silent, before ``message_start`` too)
_PING = re.compile(rb"event: ?ping\r?\ndata: ?[^\r\n]*\r?\n\r?\n")

#: a Messages ``tool_result`` / ``tool_use`` block list entry
Block = dict[str, Any]


@attrs.frozen
class Settled:
    """How an exchange ended for the client: an HTTP status and body, or gone (``None``)."""

    status: int | None
    body: bytes
    headers: dict[str, str] = attrs.field(factory=dict)  # lower-case names


@attrs.define(eq=False)
class ConvClient:
    c: ModelValue
    key: str
    http: httpx2.AsyncClient
    stream: bool = False  # its turns ask for a stream; the client reads it whole
    session: str = "session"  # x-claude-code-session-id (shared by a behaviour's conversations)
    reverse: bool = False  # answers parallel calls in the reverse order
    history: list[dict[str, Any]] = attrs.field(factory=list)
    turn: int = 0
    last_outcome: str = "none"
    retryable: bool = False
    sends: int = 0
    last_body: bytes | None = None  # the last request body sent
    sent: dict[str, Any] | None = None  # the request outstanding / last sent
    #: what its last request was (the spec's ``request``): ``none`` before any, ``ok``, or
    #: how its tool_results fail the history's obligations
    request: str = "none"
    accepted: dict[str, Any] | None = None  # the last request the gateway did not refuse
    outstanding: asyncio.Task[httpx2.Response] | None = None
    arrived: UpstreamExchange | None = None  # the upstream exchange of the outstanding request
    delivered: bytes | None = None  # the last 200 body handed over
    received: list[Settled] = attrs.field(factory=list)  # every answer, in order
    #: tool_use ids as this client sees them -> (conversation key, local tool name), read
    #: from the arguments the fake planted
    ids: dict[str, tuple[str, str]] = attrs.field(factory=dict)
    #: every upstream exchange one of its requests started: (that exchange, the body sent)
    forwarded: list[tuple[UpstreamExchange, bytes]] = attrs.field(factory=list)
    #: every message it was handed (a 200), with the upstream exchange it answers
    handed: list[tuple[dict[str, Any], UpstreamExchange | None]] = attrs.field(factory=list)

    # -- what it holds ------------------------------------------------------------------

    def pending(self) -> list[str]:
        """The tool_use ids of the history's last assistant turn, in order."""
        for message in reversed(self.history):
            if message["role"] == "assistant":
                content = message["content"]
                return [b["id"] for b in content if b.get("type") == "tool_use"]
        return []

    @staticmethod
    def results_of(request: dict[str, Any] | None) -> list[str]:
        """The tool_result ids of a request's last (user) message, in order."""
        if request is None:
            return []
        content = request["messages"][-1]["content"]
        if not isinstance(content, list):
            return []
        return [b["tool_use_id"] for b in content if b.get("type") == "tool_result"]

    # -- requests -----------------------------------------------------------------------

    def _first(self, text: str) -> dict[str, Any]:
        return {"role": "user", "content": f"{conv_tag(self.key)} {text}"}

    def _inputs(self) -> dict[str, Any]:
        """The history's tool_use ids -> their inputs."""
        return {
            b["id"]: b.get("input")
            for m in self.history
            if m["role"] == "assistant"
            for b in m["content"]
            if b.get("type") == "tool_use"
        }

    def _results(self, ids: list[str]) -> list[Block]:
        inputs = self._inputs()
        return [
            {
                "type": "tool_result",
                "tool_use_id": i,
                "content": output_for(call_of_input(inputs.get(i)) or f"nothing {i[-12:]}"),
            }
            for i in ids
        ]

    def _body(self, messages: list[dict[str, Any]]) -> bytes:
        body: dict[str, Any] = {"model": "claude-replay", "messages": messages}
        body.update(tail_members(self.stream))
        return orjson.dumps(body)

    def fresh_body(self) -> bytes:
        """A new turn answering every obligation once (a fresh one after a failure words
        its text anew and, with two results or more, answers in the reverse order)."""
        self.sends += 1
        text = f"turn {self.turn} send {self.sends}"
        if not self.history:
            return self._body([self._first(text)])
        ids = self.pending()
        if (self.last_outcome == "err") != self.reverse and len(ids) > 1:
            ids = ids[::-1]
        user = {"role": "user", "content": [*self._results(ids), {"type": "text", "text": text}]}
        return self._body([*self.history, user])

    def earlier(self) -> list[str]:
        """The tool_use ids of the history's assistant turns before the last one: ids the
        endpoint issued to this conversation that are no obligation now."""
        turns = [m for m in self.history if m["role"] == "assistant"][:-1]
        return [b["id"] for m in turns for b in m["content"] if b.get("type") == "tool_use"]

    def bad_body(self, style: str) -> bytes:
        """A turn whose tool_results do not answer the obligations (``style``: an id never
        issued, one obligation left out, one answered twice; ``issued``: an id of an earlier
        round, when the history has one, else one never issued)."""
        self.sends += 1
        ids = self.pending()
        if style == "missing":
            ids = ids[1:]
        elif style == "duplicate":
            ids = [*ids, ids[0]]
        elif style == "issued" and self.earlier():
            ids = [*ids, self.earlier()[0]]
        else:
            ids = [*ids, f"toolu_forged{self.key}"]
        text = {"type": "text", "text": f"turn {self.turn} bad {self.sends}"}
        if not self.history:
            opening: Block = {"type": "text", "text": self._first("bad")["content"]}
            return self._body([{"role": "user", "content": [opening, *self._results(ids), text]}])
        return self._body([*self.history, {"role": "user", "content": [*self._results(ids), text]}])

    def fallback_body(self) -> bytes:
        """Claude Code's retry of a failed stream: the same body without ``stream``."""
        assert self.last_body is not None
        body = orjson.loads(self.last_body)
        body.pop("stream", None)
        return orjson.dumps(body)

    def send(self, body: bytes) -> None:
        assert self.outstanding is None, "one request at a time per conversation"
        self.last_body = body
        self.sent = orjson.loads(body)
        self.request = request_kind(self.results_of(self.sent), self.pending())
        self.arrived = None
        self.retryable = False
        self.outstanding = asyncio.ensure_future(
            self.http.post(
                "/v1/messages",
                content=body,
                headers={
                    "content-type": "application/json",
                    **recorded_headers(),
                    "x-claude-code-session-id": self.session,
                },
            )
        )

    # -- outcomes -----------------------------------------------------------------------

    def settle(self, outcome: Settled) -> None:
        """The outstanding exchange ended with *outcome*."""
        self.outstanding = None
        self.turn += 1
        if outcome.status is not None:
            self.received.append(outcome)
        reply: Any = None
        streamed = self.sent is not None and self.sent.get("stream") is True
        if outcome.status == 200 and streamed:
            # the message assembled from the events; an error event or a stream without
            # message_stop is a failed exchange
            reply = assemble_messages(_PING.sub(b"", outcome.body))
        elif outcome.status == 200:
            try:
                reply = orjson.loads(outcome.body)
            except orjson.JSONDecodeError:
                reply = {}
        if reply is not None:
            self.accepted = self.sent
            self.delivered = orjson.dumps(reply)
            if isinstance(reply, dict):
                self.handed.append((reply, self.arrived))
            self.last_outcome = "ok"
            content = reply.get("content") if isinstance(reply, dict) else None
            if not isinstance(content, list):
                return
            assert self.sent is not None
            self.history = [*self.sent["messages"], {"role": "assistant", "content": content}]
            for block in content:
                if block.get("type") == "tool_use":
                    planted = block.get("input") or {}
                    self.ids[block["id"]] = (str(planted.get("conv")), str(planted.get("tool")))
                    learn(str(block["id"]), call_of_input(planted))
            return
        self.last_outcome = "err"
        if self.arrived is None:  # refused before the wire (400), or no provider (502)
            return
        self.accepted = self.sent
        self.retryable = True  # it failed after reaching the upstream: re-send it
