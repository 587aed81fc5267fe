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
  (:mod:`conformance.gateway_http`) stops it at the ``Retry`` step (PairingInv).

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

import tpx.exchange
import tpx.gateway.core
from tpx.exchange import Provider
from tpx.gateway.history import pending_ids
from tpx.gateway.turn import Conversation

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
    real = tpx.exchange._pairing_problem

    def lax(answered: Sequence[str], pending: frozenset[str]) -> str | None:
        return real([i for i in answered if i in pending], pending)

    mp.setattr(tpx.exchange, "_pairing_problem", lax)


def _selection_drift(mp: pytest.MonkeyPatch) -> None:
    real = Conversation
    count = [0]

    def drifting(provider: Provider, pending: Any, **kwargs: Any) -> Any:
        count[0] += 1
        if count[0] % 2 == 0:
            other = Provider.ANTHROPIC if provider is Provider.TPX else Provider.TPX
            return real(other, pending, **kwargs)
        return real(provider, pending, **kwargs)

    mp.setattr(tpx.gateway.core, "Conversation", drifting)


def _retry_dup(mp: pytest.MonkeyPatch) -> None:
    real = tpx.exchange.Exchange._frame

    def dup(self: Any, request: Any, streaming: bool) -> Any:
        outbound, wire_ids, model = real(self, request, streaming)
        return outbound, [*wire_ids, *wire_ids[:1]], model

    mp.setattr(tpx.exchange.Exchange, "_frame", dup)


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


GATEWAY_BUGS: tuple[GatewayBug, ...] = (
    GatewayBug("ids_leak", "NoCrossPairing", _ids_leak, replay="NoCrossPairing"),
    GatewayBug("unissued_id", "PairingInv", _unissued_id, replay="PairingInv"),
    GatewayBug("selection_drift", "SelectionStable", _selection_drift, replay="SelectionInv"),
    GatewayBug("retry_dup", "", _retry_dup, replay="Refinement"),
    GatewayBug("retry_loses_obligation", "Next", _retry_loses_obligation, replay="PairingInv"),
)
