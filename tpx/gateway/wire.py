"""What the gateway core takes and gives: requests, responses, upstream calls, error bodies."""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from typing import Any

import attrs
import orjson

from tpx.errors import ModelError, UnauthorizedError
from tpx.transport.exchange import ExchangeSnapshot

__all__ = [
    "JSON",
    "PING",
    "SSE_HEADERS",
    "Request",
    "Response",
    "UpstreamCall",
    "endpoint_label",
    "error_body",
    "error_response",
    "json_response",
    "model_error_response",
    "new_request_id",
    "snapshot_record",
]

JSON = "application/json"
SSE_HEADERS = (
    ("content-type", "text/event-stream; charset=utf-8"),
    ("cache-control", "no-cache"),
    ("x-accel-buffering", "no"),
)
PING = b'event: ping\ndata: {"type":"ping"}\n\n'
MESSAGES = "/v1/messages"
COUNT = "/v1/messages/count_tokens"
MODELS = "/v1/models"


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
    #: seconds each phase (connect, write, read) may take; ``None``: the upstream's limits
    timeout: float | None = None
    #: its latency goes to ``tpx_gateway_upstream_latency_seconds`` (the tokenizer
    #: endpoint's does not: :mod:`tpx.gateway.context.asked`)
    latency: bool = True


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


def json_response(status: int, body: bytes, request_id: str, *extra: tuple[str, str]) -> Response:
    return Response(status, (("content-type", JSON), ("request-id", request_id), *extra), body)


def error_response(status: int, error_type: str, message: str, request_id: str) -> Response:
    return json_response(status, error_body(error_type, message, request_id), request_id)


def model_error_response(error: ModelError, request_id: str) -> Response:
    """The client's response for an exchange that failed upstream."""
    status, error_type = error.status, error.error_type
    if isinstance(error, UnauthorizedError):  # the upstream refused the GATEWAY's credential
        status, error_type = 502, "api_error"
    if not 400 <= status < 600:
        status, error_type = 502, "api_error"
    body = error.body()
    body["error"]["type"] = error_type
    body["request_id"] = request_id
    extra: list[tuple[str, str]] = []
    if error.retry_after is not None:
        extra.append(("retry-after", str(max(0, round(error.retry_after)))))
    return json_response(status, orjson.dumps(body), request_id, *extra)


def snapshot_record(snapshot: ExchangeSnapshot) -> dict[str, Any]:
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
    MESSAGES: "messages",
    COUNT: "count_tokens",
    MODELS: "models",
}


def endpoint_label(path: str) -> str:
    return _ENDPOINTS.get(path.split("?", 1)[0].rstrip("/") or "/", "other")
