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

A retry that *loses* an obligation spans two requests; the live monitor keys
conversations by request id and sees each request's history whole, so it cannot be seeded
as one request's illegal step (see the README: the conformance replay over HTTP is the
check for it, not yet built).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import attrs
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


GATEWAY_BUGS: tuple[GatewayBug, ...] = (
    GatewayBug("ids_leak", "NoCrossPairing", _ids_leak),
    GatewayBug("unissued_id", "PairingInv", _unissued_id),
    GatewayBug("selection_drift", "SelectionStable", _selection_drift),
    GatewayBug("retry_dup", "", _retry_dup),
)
