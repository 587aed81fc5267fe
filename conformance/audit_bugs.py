"""Seeded bugs in the real gateway for the checks of ``tpx audit`` that the spec's
variables do not hold: each is a plausible way a Messages endpoint gets the API's rules
wrong (bugs reported against the peers are of these kinds), patched into ``tpx serve`` like the
bugs of :mod:`conformance.gateway_bugs`; ``replay`` names the audit's check that must
fail (``tests/audit/test_audit_bugs.py``):

* ``message_id_kept`` -- the upstream's ``chatcmpl-...`` id handed on as the message id;
* ``usage_zeroed`` -- the reply's ``input_tokens`` reported as 0;
* ``block_index_gap`` -- a streamed tool_use block opened at the next index but one;
* ``empty_tool_input`` -- a tool_use handed over with the input ``{}`` (a streamed one: its
  ``input_json_delta`` fragments dropped);
* ``retry_after_dropped`` -- an upstream 429 / 529 relayed without its ``retry-after``;
* ``context_unworded`` -- an upstream context overflow relayed in the upstream's words,
  not the Messages API's ``prompt is too long``;
* ``retry_refused`` -- a body re-sent after a 5xx answered 409, as a de-duplication layer
  would;
* ``refusal_as_500`` -- a turn whose tool_results do not answer its calls refused with a
  500 ``api_error`` (the client's SDK retries it) instead of a 400;
* ``stale_result_dropped`` -- a tool_result for a call of an earlier round (an id this
  gateway did issue, which is no obligation now) is dropped from the turn, taken for a
  re-sent result, and the turn goes on instead of being refused (an id never issued is
  still refused: only a result for an issued id shows it);
* ``count_tokens_renamed`` -- ``count_tokens`` answers ``{"tokens": N}``;
* ``models_unpaged`` -- ``/v1/models`` answers a bare list of names;
* ``upstream_kept`` -- a client that leaves mid-turn is not noticed: the upstream request
  stays open, generating for nobody, until the upstream ends it (the audit waits
  ``CLOSE_S`` for the close, then fails ``Refinement`` at ``ClientGone``).
"""

from __future__ import annotations

import asyncio
import hashlib
from typing import Any

import attrs
import orjson
import pytest

import tpx.errors
import tpx.gateway.asgi
import tpx.gateway.core
import tpx.gateway.history
import tpx.gateway.turn
import tpx.gateway.wire
from conformance.gateway_bugs import GatewayBug, _rewrite_messages
from tpx.gateway.history import Refusal
from tpx.gateway.wire import Response

__all__ = ["AUDIT_BUGS"]


def _on_messages(mp: pytest.MonkeyPatch, change: Any) -> None:
    """*change(message)* on every plain reply, before it goes out."""
    real = tpx.gateway.turn.Turn._sign_message

    def sign(self: Any, message: dict[str, Any]) -> None:
        real(self, message)
        change(message)

    mp.setattr(tpx.gateway.turn.Turn, "_sign_message", sign)


def _on_events(mp: pytest.MonkeyPatch, change: Any) -> None:
    """*change(events)* -> events, on every batch of stream events before it goes out."""
    real = tpx.gateway.turn.Turn._render

    def render(self: Any, events: list[dict[str, Any]]) -> bytes:
        return real(self, change(events))

    mp.setattr(tpx.gateway.turn.Turn, "_render", render)


def _message_id_kept(mp: pytest.MonkeyPatch) -> None:
    def plain(message: dict[str, Any]) -> None:
        message["id"] = "chatcmpl-" + str(message["id"]).removeprefix("msg_")

    def events(batch: list[dict[str, Any]]) -> list[dict[str, Any]]:
        for e in batch:
            if e.get("type") == "message_start":
                e["message"]["id"] = "chatcmpl-" + str(e["message"]["id"]).removeprefix("msg_")
        return batch

    _on_messages(mp, plain)
    _on_events(mp, events)


def _usage_zeroed(mp: pytest.MonkeyPatch) -> None:
    def plain(message: dict[str, Any]) -> None:
        message["usage"]["input_tokens"] = 0

    def events(batch: list[dict[str, Any]]) -> list[dict[str, Any]]:
        for e in batch:
            usage = e.get("usage") or (e.get("message") or {}).get("usage")
            if isinstance(usage, dict) and "input_tokens" in usage:
                usage["input_tokens"] = 0
        return batch

    _on_messages(mp, plain)
    _on_events(mp, events)


def _block_index_gap(mp: pytest.MonkeyPatch) -> None:
    def events(batch: list[dict[str, Any]]) -> list[dict[str, Any]]:
        for e in batch:
            if e.get("type", "").startswith("content_block") and e.get("index", 0) >= 1:
                e["index"] += 1
        return batch

    _on_events(mp, events)


def _empty_tool_input(mp: pytest.MonkeyPatch) -> None:
    def plain(message: dict[str, Any]) -> None:
        for block in message["content"]:
            if block.get("type") == "tool_use":
                block["input"] = {}

    def events(batch: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [e for e in batch if (e.get("delta") or {}).get("type") != "input_json_delta"]

    _on_messages(mp, plain)
    _on_events(mp, events)


def _retry_after_dropped(mp: pytest.MonkeyPatch) -> None:
    real = tpx.gateway.wire.model_error_response

    def relay(error: Any, request_id: str) -> Any:
        response = real(error, request_id)
        kept = tuple((k, v) for k, v in response.headers if k != "retry-after")
        return attrs.evolve(response, headers=kept)

    mp.setattr(tpx.gateway.turn, "model_error_response", relay)


def _context_unworded(mp: pytest.MonkeyPatch) -> None:
    def relayed(self: Any, status: int, body: bytes) -> str | None:
        return None  # the upstream's own words reach the client

    mp.setattr(tpx.gateway.turn.Turn, "_too_long", relayed)


def _retry_refused(mp: pytest.MonkeyPatch) -> None:
    real = tpx.gateway.asgi.GatewayApp.__call__
    failed: set[bytes] = set()

    async def dedupe(self: Any, scope: Any, receive: Any, send: Any) -> None:
        if scope.get("type") != "http" or scope.get("path") != "/v1/messages":
            await real(self, scope, receive, send)
            return
        parts: list[bytes] = []
        while True:
            message = await receive()
            parts.append(message.get("body", b""))
            if not message.get("more_body", False):
                break
        body = b"".join(parts)
        digest = hashlib.sha256(body).digest()
        if digest in failed:  # "a request seen before"
            error = {"type": "error", "error": {"type": "invalid_request_error", "message": "dup"}}
            await send(
                {
                    "type": "http.response.start",
                    "status": 409,
                    "headers": [(b"content-type", b"application/json")],
                }
            )
            await send({"type": "http.response.body", "body": orjson.dumps(error)})
            return
        replayed = False

        async def again() -> Any:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        async def watch(message: Any) -> None:
            if message.get("type") == "http.response.start" and message.get("status", 0) >= 500:
                failed.add(digest)
            await send(message)

        await real(self, scope, again, watch)

    mp.setattr(tpx.gateway.asgi.GatewayApp, "__call__", dedupe)


def _refusal_as_500(mp: pytest.MonkeyPatch) -> None:
    real = tpx.gateway.history.pairing_problem

    def problem(*args: Any) -> Any:
        found = real(*args)
        if found is not None:
            raise Refusal(f"internal error: {found}", status=500, error_type="api_error")
        return found

    mp.setattr(tpx.gateway.core, "pairing_problem", problem)


def _stale_result_dropped(mp: pytest.MonkeyPatch) -> None:
    def drop(_: Any, messages: list[Any]) -> bool:
        earlier = {
            block.get("id")
            for message in messages[:-2]
            if isinstance(message, dict) and message.get("role") == "assistant"
            for block in message.get("content") or ()
            if isinstance(block, dict) and block.get("type") == "tool_use"
        }
        last = messages[-1] if messages else None
        if not earlier or not isinstance(last, dict) or not isinstance(last.get("content"), list):
            return False
        content = last["content"]
        kept = [
            b
            for b in content
            if not (isinstance(b, dict) and b.get("type") == "tool_result")
            or b.get("tool_use_id") not in earlier
        ]
        last["content"] = kept
        return len(kept) < len(content)

    _rewrite_messages(mp, drop)


def _count_tokens_renamed(mp: pytest.MonkeyPatch) -> None:
    real = tpx.gateway.core.Gateway._count

    def count(self: Any, request: Any, request_id: str) -> Any:
        response = real(self, request, request_id)
        if not isinstance(response, Response) or response.status != 200:
            return response
        tokens = orjson.loads(response.body)["input_tokens"]
        return attrs.evolve(response, body=orjson.dumps({"tokens": tokens}))

    mp.setattr(tpx.gateway.core.Gateway, "_count", count)


def _models_unpaged(mp: pytest.MonkeyPatch) -> None:
    real = tpx.gateway.core.Gateway._models

    def models(self: Any, request: Any, request_id: str) -> Any:
        response = real(self, request, request_id)
        if not isinstance(response, Response) or response.status != 200:
            return response
        names = [m["id"] for m in orjson.loads(response.body)["data"]]
        return attrs.evolve(response, body=orjson.dumps({"models": names}))

    mp.setattr(tpx.gateway.core.Gateway, "_models", models)


class _Unwatched:
    """``asyncio`` as the ASGI app sees it, but the watcher of the client's disconnect
    (its coroutine ``gone``) is never started."""

    def __getattr__(self, name: str) -> Any:
        return getattr(asyncio, name)

    @staticmethod
    def ensure_future(aw: Any) -> Any:
        if getattr(aw, "__name__", "") == "gone":
            aw.close()
            return asyncio.get_running_loop().create_future()
        return asyncio.ensure_future(aw)


def _upstream_kept(mp: pytest.MonkeyPatch) -> None:
    mp.setattr(tpx.gateway.asgi, "asyncio", _Unwatched())


AUDIT_BUGS: tuple[GatewayBug, ...] = (
    GatewayBug("message_id_kept", "", _message_id_kept, replay="MessageId"),
    GatewayBug("usage_zeroed", "", _usage_zeroed, replay="Usage"),
    GatewayBug("block_index_gap", "", _block_index_gap, replay="ShapeInv"),
    GatewayBug("empty_tool_input", "", _empty_tool_input, replay="PairingInv"),
    GatewayBug("retry_after_dropped", "", _retry_after_dropped, replay="ErrorShape"),
    GatewayBug("context_unworded", "", _context_unworded, replay="PromptTooLong"),
    GatewayBug("retry_refused", "", _retry_refused, replay="RetrySafety"),
    GatewayBug("refusal_as_500", "", _refusal_as_500, replay="Refusal"),
    GatewayBug("stale_result_dropped", "", _stale_result_dropped, replay="Refusal"),
    GatewayBug("count_tokens_renamed", "", _count_tokens_renamed, replay="CountTokens"),
    GatewayBug("models_unpaged", "", _models_unpaged, replay="Models"),
    GatewayBug("upstream_kept", "", _upstream_kept, replay="Refinement"),
)
