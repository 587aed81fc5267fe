"""Seeded bugs of overlapping requests of one conversation (``spec/TpxGatewayOverlap.tla``):
several requests of one conversation in flight at once, the same history again or a fork
of it. ``tests/gateway/test_monitoring_overlap.py`` runs each against a live
``tpx serve --monitor`` and shows its live test catches it:

* ``overlap_500`` -- the monitor keys id ownership by request, not by conversation (each
  request a conversation of its own, :meth:`GatewayMonitor.joins` never called): a fork
  from an earlier point of a conversation, whose provider emits again the ids a later
  request of it holds, is answered 500 NoCrossPairing though the spec allows it;
* ``crossed_reply`` -- a coalescing layer in front of the gateway takes requests of one
  conversation in flight at once for retries of one request: a later one waits for the
  first one's reply and is handed it (OwnReplies). Its id sets are legal ones of the
  conversation, so the monitor cannot see it; the live test does, by the reply's bytes
  (the fake upstream's reply answers the very request it got).
"""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
import pytest

import tpx.gateway.asgi
from conformance.gateway_bugs import GatewayBug
from tests.gateway.conftest import request_body
from tpx.gateway.history import Opening, opening
from tpx.oracle.model.gateway.monitor import GatewayMonitor

__all__ = ["OVERLAP_BUGS"]


def _overlap_500(mp: pytest.MonkeyPatch) -> None:
    def alone(self: GatewayMonitor, exchange: Any, conversation: Any) -> None:
        """Every request its own conversation: ids owned per request id."""

    mp.setattr(GatewayMonitor, "joins", alone)


def _crossed_reply(mp: pytest.MonkeyPatch) -> None:
    real = tpx.gateway.asgi.GatewayApp.__call__
    first: dict[Opening, asyncio.Future[list[Any]]] = {}

    async def coalescing(self: Any, scope: Any, receive: Any, send: Any) -> None:
        if scope.get("type") != "http" or scope.get("path") != "/v1/messages":
            await real(self, scope, receive, send)
            return
        body = await request_body(receive)
        key = opening(orjson.loads(body))
        running = first.get(key)
        if running is not None:  # "a retry of the request in flight: it gets that reply"
            for message in await asyncio.shield(running):
                await send(message)
            return
        replied: list[Any] = []
        done = asyncio.get_running_loop().create_future()
        first[key] = done
        given = [False]

        async def again() -> Any:
            if given[0]:
                return await receive()
            given[0] = True
            return {"type": "http.request", "body": body, "more_body": False}

        async def recorded(message: Any) -> None:
            replied.append(message)
            await send(message)

        try:
            await real(self, scope, again, recorded)
        finally:
            del first[key]
            done.set_result(replied)

    mp.setattr(tpx.gateway.asgi.GatewayApp, "__call__", coalescing)


OVERLAP_BUGS: tuple[GatewayBug, ...] = (
    GatewayBug("overlap_500", "NoCrossPairing", _overlap_500),
    GatewayBug("crossed_reply", "", _crossed_reply),
)
