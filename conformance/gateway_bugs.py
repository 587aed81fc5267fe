"""Seeded bugs in the REAL gateway (``tpx serve``), injected by monkeypatching, each one a
step ``spec/TpxGateway.tla`` does not allow, so ``tpx serve --monitor`` must stop it live.

Each :class:`GatewayBug` patches the real code (:mod:`tpx.gateway.core`, the exchange)
the way a plausible bug would change it, and names the property the monitor must report:

* ``ids_leak`` -- a process-wide cache of "the last history's obligations" leaks one
  conversation's tool ids into another's (NoCrossPairing, at the second conversation's
  ``Resume`` while the first is live);
* ``unissued_id`` -- the exchange's pairing check forgets unknown ids, so a worker
  forwards a tool_result for a tool_use id it never issued (PairingInv, at ``CallerSend``);
* ``selection_drift`` -- every second exchange of a worker runs with the other provider,
  as if that worker had re-read different credentials (SelectionStable, at ``Resume``);
* ``retry_dup`` -- a retried turn sends a tool_result twice: the real exchange's own
  framing check refuses it before the wire (a ``ProtocolError`` 400), so the monitor sees
  no illegal step; listed so the tests show which layer stops it.

* ``retry_loses_obligation`` -- a retry de-duplication layer inside the core (patched
  onto ``Gateway._messages``) takes a byte-identical re-send for a turn whose tool round
  already went upstream and drops that round (the tool_use blocks of the last assistant
  turn and the tool_results answering them) before the exchange: the retried turn's
  obligations are lost, its tool_results never reach the provider. Each lossy request is
  self-consistent, but the monitor's ``Resume`` takes the obligations from the request
  bytes as the client sent them (read at :meth:`tpx.gateway.core.Gateway.handle`), so the
  exchange's ``CallerSend`` without their tool_results is an illegal step (``Next``: it
  changes ``pending``, its ``reqIds`` do not answer it); the HTTP conformance replay
  (:mod:`tpx.audit`) stops it at the ``Retry`` step (PairingInv).

Bugs that hand the model another call's output, or lose, repeat or refuse a request:
the HTTP replay catches each by its bytes alone (``Binding``: which call each id, call
and result is about, over every round; ``OneRequest``; ``Refinement``). The live monitor
reads the exchange's id sets, not the binding of ids to calls and results, and never sees
a request the gateway did not run an exchange for: it sees ``results_in_order`` alone (the
refusal of a correct request, from the client's bytes: ``RefusesOnlyWrong``); the others
have ``property`` ``""``:

* ``results_reversed`` -- the core reverses the tool_use_ids of the last turn's
  tool_results before translating: the upstream gets ``("call_A", "output of B")``, plain
  and streamed, both providers (two parallel calls);
* ``ids_permuted`` -- the ids handed to the client (TPX: the signed ones) are rotated among
  a reply's tool_use blocks (a streamed one: among those of one batch of events): each id
  on another call's name and input;
* ``earlier_results_dropped`` -- the pass-through (ANTHROPIC) drops the tool_results of
  every user turn but the last (a history with two tool rounds);
* ``results_in_order`` -- the exchange's pairing check compares the answered ids, unsorted,
  with the sorted obligations: a correct turn answering two calls the other way round is
  refused 400;
* ``resend_on_5xx`` -- the upstream layer sends a request again once when the upstream
  answered 5xx: the upstream receives one client request twice;
* ``session_guard`` -- one ``/v1/messages`` request per Claude Code session at a time:
  a second one while the first is in flight (a session's sub-agents) is answered 500.

``replay`` names the property the HTTP replay reports for each
(``conformance/test_gateway_http_bugs.py``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import attrs
import orjson
import pytest

import tpx.gateway.asgi
import tpx.gateway.core
import tpx.gateway.exchanges
import tpx.gateway.turn
import tpx.gateway.upstream
import tpx.transport.exchange
import tpx.transport.wire
from tpx.gateway.history import pending_ids
from tpx.gateway.turn import Conversation
from tpx.transport.exchange import Provider

__all__ = ["GATEWAY_BUGS", "GatewayBug"]

Patch = Callable[[pytest.MonkeyPatch], None]


@attrs.frozen
class GatewayBug:
    name: str
    property: str
    """the property ``tpx serve --monitor`` names (``""``: not a monitor catch)"""
    patch: Patch
    replay: str = ""
    """the property the HTTP conformance replay names first"""

    @contextmanager
    def active(self) -> Iterator[None]:
        with pytest.MonkeyPatch.context() as mp:
            self.patch(mp)
            yield


def _ids_leak(mp: pytest.MonkeyPatch) -> None:
    real = pending_ids
    last: list[frozenset[str]] = []

    def leaky(messages: list[Any]) -> frozenset[str]:
        mine = frozenset(real(messages))
        leaked = last[-1] if last else frozenset()
        if mine:
            last.append(mine)
        return mine | leaked if mine and leaked != mine else mine

    mp.setattr(tpx.gateway.core, "pending_ids", leaky)


def _unissued_id(mp: pytest.MonkeyPatch) -> None:
    real = tpx.transport.wire.pairing_problem

    def lax(answered: Sequence[str], pending: frozenset[str]) -> str | None:
        return real([i for i in answered if i in pending], pending)

    mp.setattr(tpx.transport.exchange, "pairing_problem", lax)


def _selection_drift(mp: pytest.MonkeyPatch) -> None:
    real = Conversation
    count = [0]

    def drifting(provider: Provider, pending: Any, **kwargs: Any) -> Any:
        count[0] += 1
        if count[0] % 2 == 0:
            other = Provider.ANTHROPIC if provider is Provider.TPX else Provider.TPX
            return real(other, pending, **kwargs)
        return real(provider, pending, **kwargs)

    mp.setattr(tpx.gateway.exchanges, "Conversation", drifting)


def _retry_dup(mp: pytest.MonkeyPatch) -> None:
    real = tpx.transport.exchange.Exchange._frame

    def dup(self: Any, request: Any, streaming: bool) -> Any:
        outbound, wire_ids, model = real(self, request, streaming)
        return outbound, [*wire_ids, *wire_ids[:1]], model

    mp.setattr(tpx.transport.exchange.Exchange, "_frame", dup)


def _drop_tool_round(body: bytes) -> bytes:
    data = orjson.loads(body)
    messages = data.get("messages")
    if not isinstance(messages, list) or len(messages) < 2:
        return body
    user, assistant = messages[-1], messages[-2]
    for message, kind, filler in ((user, "tool_result", "continue"), (assistant, "tool_use", "ok")):
        content = message.get("content")
        if isinstance(content, list):
            kept = [b for b in content if not (isinstance(b, dict) and b.get("type") == kind)]
            message["content"] = kept or [{"type": "text", "text": filler}]
    return orjson.dumps(data)


def _retry_loses_obligation(mp: pytest.MonkeyPatch) -> None:
    real = tpx.gateway.core.Gateway._messages
    seen: set[bytes] = set()

    def lossy(self: Any, request: Any, request_id: str, *rest: Any) -> Any:
        digest = hashlib.sha256(request.body).digest()
        if digest in seen:  # "a retry: its tool round already went upstream"
            request = attrs.evolve(request, body=_drop_tool_round(request.body))
        seen.add(digest)
        return real(self, request, request_id, *rest)

    mp.setattr(tpx.gateway.core.Gateway, "_messages", lossy)


def _rewrite_messages(mp: pytest.MonkeyPatch, rewrite: Callable[[Any, list[Any]], bool]) -> None:
    """Patch ``Gateway._messages`` to hand the exchange a body whose ``messages`` *rewrite*
    changed in place (it says whether it did)."""
    real = tpx.gateway.core.Gateway._messages

    def rewritten(self: Any, request: Any, request_id: str, *rest: Any) -> Any:
        try:
            data = orjson.loads(request.body)
        except orjson.JSONDecodeError:
            return real(self, request, request_id, *rest)
        messages = data.get("messages") if isinstance(data, dict) else None
        if isinstance(messages, list) and rewrite(self, messages):
            request = attrs.evolve(request, body=orjson.dumps(data))
        return real(self, request, request_id, *rest)

    mp.setattr(tpx.gateway.core.Gateway, "_messages", rewritten)


def _results_of(message: Any) -> list[dict[str, Any]]:
    content = message.get("content") if isinstance(message, dict) else None
    if not isinstance(content, list):
        return []
    return [b for b in content if isinstance(b, dict) and b.get("type") == "tool_result"]


def _results_reversed(mp: pytest.MonkeyPatch) -> None:
    def reverse(_: Any, messages: list[Any]) -> bool:
        results = _results_of(messages[-1]) if messages else []
        if len(results) < 2:
            return False
        ids = [b["tool_use_id"] for b in results][::-1]
        for block, i in zip(results, ids, strict=True):
            block["tool_use_id"] = i
        return True

    _rewrite_messages(mp, reverse)


def _earlier_results_dropped(mp: pytest.MonkeyPatch) -> None:
    def drop(gateway: Any, messages: list[Any]) -> bool:
        if gateway.settings.provider is not Provider.ANTHROPIC:
            return False
        dropped = False
        for message in messages[:-1]:
            if message.get("role") == "user" and _results_of(message):
                kept = [b for b in message["content"] if b.get("type") != "tool_result"]
                message["content"] = kept or [{"type": "text", "text": "continue"}]
                dropped = True
        return dropped

    _rewrite_messages(mp, drop)


def _ids_permuted(mp: pytest.MonkeyPatch) -> None:
    real = tpx.gateway.turn.Turn._sign_message

    def rotated(self: Any, message: dict[str, Any]) -> None:
        real(self, message)
        uses = [b for b in message.get("content", []) if b.get("type") == "tool_use"]
        ids = [b["id"] for b in uses]
        for block, i in zip(uses, ids[1:] + ids[:1], strict=True):
            block["id"] = i

    real_render = tpx.gateway.turn.Turn._render

    def rotated_events(self: Any, events: list[dict[str, Any]]) -> bytes:
        starts = [
            k
            for k, e in enumerate(events)
            if e.get("type") == "content_block_start"
            and (e.get("content_block") or {}).get("type") == "tool_use"
        ]
        ids = [events[k]["content_block"]["id"] for k in starts]
        events = list(events)
        for k, i in zip(starts, ids[1:] + ids[:1], strict=True):
            events[k] = {**events[k], "content_block": {**events[k]["content_block"], "id": i}}
        return real_render(self, events)

    mp.setattr(tpx.gateway.turn.Turn, "_sign_message", rotated)
    mp.setattr(tpx.gateway.turn.Turn, "_render", rotated_events)


def _results_in_order(mp: pytest.MonkeyPatch) -> None:
    real = tpx.transport.wire.pairing_problem

    def ordered(answered: Sequence[str], pending: frozenset[str]) -> str | None:
        problem = real(answered, pending)
        if problem is None and list(answered) != sorted(pending):  # meant: sorted(answered)
            return f"tool_result ids {list(answered)} do not answer {sorted(pending)}"
        return problem

    mp.setattr(tpx.transport.exchange, "pairing_problem", ordered)


def _resend_on_5xx(mp: pytest.MonkeyPatch) -> None:
    real = tpx.gateway.upstream.AsyncUpstream.open

    async def resending(self: Any, call: Any) -> Any:
        response = await real(self, call)
        if response.status_code >= 500:  # "a transient upstream failure: try once more"
            await response.aclose()
            response = await real(self, call)
        return response

    mp.setattr(tpx.gateway.upstream.AsyncUpstream, "open", resending)


def _session_guard(mp: pytest.MonkeyPatch) -> None:
    real = tpx.gateway.asgi.GatewayApp.__call__
    busy: set[bytes] = set()

    async def guarded(self: Any, scope: Any, receive: Any, send: Any) -> None:
        session = dict(scope.get("headers") or ()).get(b"x-claude-code-session-id")
        if scope.get("type") != "http" or scope.get("path") != "/v1/messages" or not session:
            await real(self, scope, receive, send)
            return
        if session in busy:  # "one request per session at a time"
            body = b'{"type":"error","error":{"type":"api_error","message":"session busy"}}'
            headers = [(b"content-type", b"application/json")]
            await send({"type": "http.response.start", "status": 500, "headers": headers})
            await send({"type": "http.response.body", "body": body})
            return
        busy.add(session)
        try:
            await real(self, scope, receive, send)
        finally:
            busy.discard(session)

    mp.setattr(tpx.gateway.asgi.GatewayApp, "__call__", guarded)


GATEWAY_BUGS: tuple[GatewayBug, ...] = (
    GatewayBug("ids_leak", "NoCrossPairing", _ids_leak, replay="NoCrossPairing"),
    GatewayBug("unissued_id", "PairingInv", _unissued_id, replay="PairingInv"),
    GatewayBug("selection_drift", "SelectionStable", _selection_drift, replay="SelectionInv"),
    GatewayBug("retry_dup", "", _retry_dup, replay="Refinement"),
    GatewayBug("retry_loses_obligation", "Next", _retry_loses_obligation, replay="PairingInv"),
    GatewayBug("results_reversed", "", _results_reversed, replay="Binding"),
    GatewayBug("ids_permuted", "", _ids_permuted, replay="Binding"),
    GatewayBug("earlier_results_dropped", "", _earlier_results_dropped, replay="Binding"),
    GatewayBug("results_in_order", "RefusesOnlyWrong", _results_in_order, replay="Refinement"),
    GatewayBug("resend_on_5xx", "", _resend_on_5xx, replay="OneRequest"),
    GatewayBug("session_guard", "", _session_guard, replay="Refinement"),
)
