"""The Messages API's rules, as pure checks on the bytes a client receives.

Each function takes what came back (a body, a stream, an error answer) and returns
problems as ``(check, message)`` pairs, empty when the bytes keep the rule:

* :func:`message_problems` -- a Messages reply body: its types (``type``, ``role``,
  ``content`` blocks, ``stop_reason``, ``usage``), the id of the ``msg_`` form
  (``MessageId``), and the usage as whole non-negative counts (``Usage``);
* :func:`stream_problems` -- a Messages event stream, event by event: one
  ``message_start`` first, then each block opened, given deltas of its own kind and
  closed, at indices 0, 1, ... with no block left open and none interleaved, one
  ``message_delta``, one ``message_stop`` last (``ping`` anywhere; an ``error`` event
  ends a failed stream); ``input_json_delta`` fragments joining to a JSON object
  (``ShapeInv``); returns the message a client assembles from it too;
* :func:`error_problems` -- an error answer: ``{"type": "error", "error": {"type",
  "message"}}`` with a Messages error type that fits the HTTP status the SDKs map to
  their exception classes (``ErrorShape``);
* :func:`usage_problems` -- the usage a client was handed against what the upstream
  reported (``Usage``);
* :func:`count_tokens_problems`, :func:`models_problems` -- ``POST
  /v1/messages/count_tokens`` and ``GET /v1/models``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import orjson

from tpx.audit.sse import sse_events

__all__ = [
    "ERROR_TYPES",
    "MESSAGE_ID",
    "PROMPT_TOO_LONG",
    "Problem",
    "count_tokens_problems",
    "error_problems",
    "message_problems",
    "models_problems",
    "stream_problems",
    "usage_of",
    "usage_problems",
]

#: (check, message)
Problem = tuple[str, str]

#: the form of a Messages id: ``msg_`` and at least one letter, digit, ``_`` or ``-``
MESSAGE_ID = re.compile(r"msg_[A-Za-z0-9_-]+")
#: what Claude Code looks for in a 400 to compact its context (case-insensitive)
PROMPT_TOO_LONG = re.compile(r"prompt is too long", re.IGNORECASE)
#: the Messages API's error types, and the HTTP statuses each may come with
ERROR_TYPES: dict[str, tuple[int, ...]] = {
    "invalid_request_error": (400, 405, 409, 422),
    "authentication_error": (401,),
    "permission_error": (403,),
    "not_found_error": (404,),
    "request_too_large": (413,),
    "rate_limit_error": (429,),
    "api_error": (500, 502, 504),
    "overloaded_error": (503, 529),
    "timeout_error": (504,),
}
_STOP_REASONS = {"end_turn", "max_tokens", "stop_sequence", "tool_use", "pause_turn", "refusal"}
_BLOCK_DELTAS = {
    "text": ("text_delta", "citations_delta"),
    "tool_use": ("input_json_delta",),
    "server_tool_use": ("input_json_delta",),
    "thinking": ("thinking_delta", "signature_delta"),
    "redacted_thinking": (),
}


def _json(data: bytes | str) -> Any:
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        return None


def _usage_problems(usage: Any, where: str) -> list[Problem]:
    if not isinstance(usage, Mapping):
        return [("Usage", f"{where}: usage is {usage!r}, not an object")]
    problems = []
    for name in ("input_tokens", "output_tokens"):
        value = usage.get(name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            problems.append(("Usage", f"{where}: usage.{name} is {value!r}, not a count"))
    return problems


def _id_problem(message_id: Any, where: str) -> list[Problem]:
    if isinstance(message_id, str) and MESSAGE_ID.fullmatch(message_id):
        return []
    return [("MessageId", f"{where}: the message id {message_id!r} is not of the msg_ form")]


def _block_problems(block: Any, where: str) -> list[Problem]:
    if not isinstance(block, Mapping) or block.get("type") not in _BLOCK_DELTAS:
        return [("ShapeInv", f"{where}: {_short(block)} is no content block")]
    kind = block["type"]
    if kind == "text" and not isinstance(block.get("text"), str):
        return [("ShapeInv", f"{where}: a text block without a string text")]
    if kind == "tool_use":
        if not isinstance(block.get("id"), str) or not block["id"]:
            return [("ShapeInv", f"{where}: a tool_use block without an id")]
        if not isinstance(block.get("name"), str) or not isinstance(block.get("input"), Mapping):
            return [("ShapeInv", f"{where}: a tool_use block without a name or an object input")]
    return []


def message_problems(body: Any, where: str = "the reply") -> list[Problem]:
    """A Messages reply body (a decoded JSON value)."""
    if not isinstance(body, Mapping) or body.get("type") != "message":
        return [("ShapeInv", f"{where}: {_short(body)} is not a Messages message")]
    problems: list[Problem] = []
    if body.get("role") != "assistant":
        problems.append(("ShapeInv", f"{where}: role {body.get('role')!r}, not 'assistant'"))
    if not isinstance(body.get("model"), str):
        problems.append(("ShapeInv", f"{where}: no model name"))
    content = body.get("content")
    if not isinstance(content, list):
        problems.append(("ShapeInv", f"{where}: content is not a list"))
        content = []
    for k, block in enumerate(content):
        problems += _block_problems(block, f"{where}, block {k}")
    ids = [b.get("id") for b in content if isinstance(b, Mapping) and b.get("type") == "tool_use"]
    if len(ids) != len(set(map(str, ids))):
        problems.append(("PairingInv", f"{where}: a tool_use id twice: {ids}"))
    if body.get("stop_reason") not in _STOP_REASONS:
        problems.append(("ShapeInv", f"{where}: stop_reason {body.get('stop_reason')!r}"))
    if ids and body.get("stop_reason") != "tool_use":
        problems.append(
            ("ShapeInv", f"{where}: tool_use blocks with stop_reason {body.get('stop_reason')!r}")
        )
    problems += _id_problem(body.get("id"), where)
    problems += _usage_problems(body.get("usage"), where)
    return problems


def stream_problems(
    data: bytes, where: str = "the stream"
) -> tuple[list[Problem], dict[str, Any] | None]:
    """A Messages event stream: the problems, and the message a client assembles (``None``
    when the stream ended with an ``error`` event or broke off: a failed exchange)."""
    problems: list[Problem] = []

    def bad(n: int, text: str, check: str = "ShapeInv") -> None:
        problems.append((check, f"{where}, event {n}: {text}"))

    message: dict[str, Any] | None = None
    usage: dict[str, Any] = {}
    open_block: int | None = None
    partial: list[str] = []
    stopped = delta_seen = False
    failed = False
    for n, (name, text) in enumerate(sse_events(data)):
        if name == "ping":
            continue
        event = _json(text)
        if not isinstance(event, Mapping) or event.get("type") != name:
            bad(n, f"event {name!r} whose data is not a {name!r} object: {_short(text)}")
            break
        if stopped:
            bad(n, f"{name} after message_stop")
            break
        if name == "error":
            failed = True
            if not isinstance(event.get("error"), Mapping):
                bad(n, "an error event without an error object", "ErrorShape")
            break
        if name == "message_start":
            if message is not None:
                bad(n, "a second message_start")
                break
            start = event.get("message")
            if not isinstance(start, Mapping) or start.get("type") != "message":
                bad(n, "message_start without a message")
                break
            message = {**start, "content": []}
            problems.extend(_id_problem(start.get("id"), f"{where}, message_start"))
            problems.extend(_usage_problems(start.get("usage"), f"{where}, message_start"))
            usage = dict(start.get("usage") or {})
            continue
        if message is None:
            bad(n, f"{name} before message_start")
            break
        index = event.get("index")
        content = message["content"]
        if name == "content_block_start":
            block = event.get("content_block")
            if open_block is not None:
                bad(n, f"block {index} opened while block {open_block} is open")
            if index != len(content) or delta_seen:
                bad(n, f"block index {index!r}, the next is {len(content)}")
                break
            if not isinstance(block, Mapping) or block.get("type") not in _BLOCK_DELTAS:
                bad(n, f"content_block_start of {_short(block)}")
                break
            if block.get("type") == "tool_use" and block.get("input") not in ({}, None):
                bad(n, "a tool_use block opened with a non-empty input")
            content.append(dict(block))
            open_block, partial = index, []
        elif name == "content_block_delta":
            delta = event.get("delta")
            if index != open_block or not isinstance(delta, Mapping):
                bad(n, f"a delta for block {index!r}; the open block is {open_block!r}")
                break
            block = content[index]
            if delta.get("type") not in _BLOCK_DELTAS[block["type"]]:
                bad(n, f"a {delta.get('type')!r} in a {block['type']} block")
                break
            if delta["type"] == "text_delta":
                block["text"] = str(block.get("text", "")) + str(delta.get("text", ""))
            elif delta["type"] == "thinking_delta":
                block["thinking"] = str(block.get("thinking", "")) + str(delta.get("thinking", ""))
            elif delta["type"] == "signature_delta":
                block["signature"] = str(delta.get("signature", ""))
            elif delta["type"] == "input_json_delta":
                if not isinstance(delta.get("partial_json"), str):
                    bad(n, "an input_json_delta without a string partial_json")
                    break
                partial.append(delta["partial_json"])
        elif name == "content_block_stop":
            if index != open_block:
                bad(n, f"content_block_stop of block {index!r}; the open block is {open_block!r}")
                break
            block = content[index]
            if block["type"] in ("tool_use", "server_tool_use"):
                joined = "".join(partial)
                value = _json(joined) if joined else {}
                if not isinstance(value, Mapping):
                    bad(n, f"the input_json_delta fragments join to {_short(joined)}")
                    break
                block["input"] = dict(value)
            open_block = None
        elif name == "message_delta":
            if open_block is not None:
                bad(n, f"message_delta while block {open_block} is open")
            if delta_seen:
                bad(n, "a second message_delta")
            delta_seen = True
            message.update(event.get("delta") or {})
            more = event.get("usage")
            if not isinstance(more, Mapping):
                bad(n, "a message_delta without usage", "Usage")
            else:
                usage.update(more)
        elif name == "message_stop":
            if not delta_seen:
                bad(n, "message_stop without a message_delta")
            stopped = True
        else:
            bad(n, f"an event of unknown type {name!r}")
            break
    if failed:
        return problems, None
    if not stopped or message is None:
        if not problems:
            problems.append(("ShapeInv", f"{where}: no message_stop"))
        return problems, None
    message["usage"] = usage
    problems += [
        (c, m)
        for c, m in message_problems(message, f"{where} (assembled)")
        if c not in ("MessageId",) and not (c == "Usage" and "message_start" in m)
    ]
    return problems, message


def usage_of(message: Mapping[str, Any]) -> tuple[Any, Any]:
    usage = message.get("usage")
    if not isinstance(usage, Mapping):
        return None, None
    return usage.get("input_tokens"), usage.get("output_tokens")


def usage_problems(
    message: Mapping[str, Any], prompt: int, completion: int, where: str
) -> list[Problem]:
    """The usage handed to the client against the upstream's ``prompt_tokens`` /
    ``completion_tokens`` (input, cache reads and cache writes add up to the prompt)."""
    usage = message.get("usage")
    if not isinstance(usage, Mapping):
        return []  # message_problems says so
    parts = [usage.get(k) or 0 for k in ("input_tokens", "cache_read_input_tokens")]
    parts.append(usage.get("cache_creation_input_tokens") or 0)
    if not all(isinstance(p, int) for p in parts):
        return []
    got_in, got_out = sum(parts), usage.get("output_tokens")
    if (got_in, got_out) != (prompt, completion):
        return [
            (
                "Usage",
                f"{where}: usage in/out {got_in}/{got_out}, the upstream reported "
                f"{prompt}/{completion}",
            )
        ]
    return []


def error_problems(status: int, body: bytes, where: str) -> list[Problem]:
    """An error answer (*status* >= 400): Messages-shaped, with a type fitting *status*."""
    value = _json(body)
    error = value.get("error") if isinstance(value, Mapping) else None
    if (
        not isinstance(value, Mapping)
        or value.get("type") != "error"
        or not isinstance(error, Mapping)
        or not isinstance(error.get("type"), str)
        or not isinstance(error.get("message"), str)
    ):
        return [("ErrorShape", f"{where}: a {status} whose body is {_short(body)}")]
    kind = error["type"]
    if kind not in ERROR_TYPES:
        return [("ErrorShape", f"{where}: error type {kind!r} is none of the Messages API's")]
    if status not in ERROR_TYPES[kind] and not (kind == "api_error" and status >= 500):
        return [("ErrorShape", f"{where}: a {status} of type {kind!r}")]
    return []


def count_tokens_problems(status: int, body: bytes) -> list[Problem]:
    """``POST /v1/messages/count_tokens``: ``{"input_tokens": N}``, or a Messages error."""
    if status != 200:
        return [(c, m) for c, m in error_problems(status, body, "count_tokens")]
    value = _json(body)
    tokens = value.get("input_tokens") if isinstance(value, Mapping) else None
    if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 0:
        return [("CountTokens", f"count_tokens answered {_short(body)}: no input_tokens count")]
    return []


def models_problems(status: int, body: bytes) -> list[Problem]:
    """``GET /v1/models``: a page of ``{"type": "model", "id", "display_name",
    "created_at"}`` with ``has_more``, ``first_id``, ``last_id``; or a Messages error."""
    if status != 200:
        return [(c, m) for c, m in error_problems(status, body, "/v1/models")]
    value = _json(body)
    data = value.get("data") if isinstance(value, Mapping) else None
    if not isinstance(data, list) or not isinstance(value.get("has_more"), bool):
        return [("Models", f"/v1/models answered {_short(body)}: no data list and has_more")]
    problems: list[Problem] = []
    for k, model in enumerate(data):
        if (
            not isinstance(model, Mapping)
            or model.get("type") != "model"
            or not all(isinstance(model.get(f), str) for f in ("id", "display_name", "created_at"))
        ):
            problems.append(("Models", f"/v1/models entry {k}: {_short(model)}"))
    ids = [m.get("id") for m in data if isinstance(m, Mapping)]
    if ids and (value.get("first_id"), value.get("last_id")) != (ids[0], ids[-1]):
        problems.append(("Models", "/v1/models: first_id / last_id are not the page's ends"))
    return problems


def _short(value: Any, limit: int = 120) -> str:
    text = value.decode("utf-8", "replace") if isinstance(value, bytes) else repr(value)
    return text if len(text) <= limit else text[:limit] + "..."
