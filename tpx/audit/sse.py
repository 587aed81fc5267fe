"""Server-sent events as a Messages client reads them, independent of tpx's own stream code.

* :func:`is_stream` -- the bytes are an event stream, not a JSON document;
* :func:`sse_events` -- (event name, data) of every complete event (a minimal SSE reader);
* :func:`json_events` -- the same with each event's data parsed as JSON (``"[DONE]"`` as
  is, ``None`` for data that is not JSON);
* :func:`assemble_messages` -- the Messages body a client assembles from a complete,
  well-ordered Messages event stream.

``tpx audit`` reads every answer with these; the conformance replays share them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

__all__ = ["assemble_messages", "is_stream", "json_events", "sse_events"]


def is_stream(body: Any) -> bool:
    """*body* is server-sent-event bytes (a streamed body), not a JSON document."""
    if not isinstance(body, bytes | bytearray):
        return False
    head = bytes(body[:64]).lstrip(b"\xef\xbb\xbf").lstrip()
    return head.startswith((b"event:", b"data:", b":"))


def sse_events(data: bytes) -> list[tuple[str, str]]:
    """(event name, data) of every complete event in *data* (a minimal SSE reader: ``\n``,
    ``\r\n`` or ``\r`` line ends, comments, multi-line data; name ``"message"`` when
    absent). An event not closed by a blank line is not complete and is left out."""
    text = bytes(data).decode("utf-8", "replace").replace("\r\n", "\n").replace("\r", "\n")
    events: list[tuple[str, str]] = []
    name, lines = "", list[str]()
    for line in text.split("\n")[:-1]:  # the last piece is not a terminated line
        if not line:
            if lines:
                events.append((name or "message", "\n".join(lines)))
            name, lines = "", []
            continue
        if line.startswith(":"):
            continue
        field, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if field == "data":
            lines.append(value)
        elif field == "event":
            name = value
    return events


def json_events(data: bytes) -> list[tuple[str, Any]]:
    """(event name, the data parsed as JSON) of every complete event in *data*: ``"[DONE]"``
    as is, ``None`` for data that is not JSON."""
    out: list[tuple[str, Any]] = []
    for name, payload in sse_events(data):
        if payload.strip() == "[DONE]":
            out.append((name, "[DONE]"))
            continue
        try:
            out.append((name, orjson.loads(payload)))
        except orjson.JSONDecodeError:
            out.append((name, None))
    return out


def assemble_messages(data: bytes) -> dict[str, Any] | None:
    """The Messages body a caller assembles from the stream *data*, or ``None`` unless it
    is a complete, well-ordered Messages event stream (``message_start`` ...
    ``message_stop``; tool inputs from their joined ``input_json_delta`` fragments)."""
    message: dict[str, Any] | None = None
    partial: dict[int, list[str]] = {}
    for name, body in json_events(data):
        if not isinstance(body, Mapping) or body.get("type") != name:
            return None
        kind = name
        if kind == "message_start" and message is None:
            message = {**body["message"], "content": list(body["message"].get("content") or [])}
        elif message is None or kind == "error":
            return None
        elif kind == "content_block_start":
            if body.get("index") != len(message["content"]):
                return None
            block = dict(body.get("content_block") or {})
            message["content"].append(block)
            if block.get("type") == "tool_use":
                partial[body["index"]] = []
        elif kind == "content_block_delta":
            index, delta = body.get("index"), body.get("delta") or {}
            if not isinstance(index, int) or not 0 <= index < len(message["content"]):
                return None
            block = message["content"][index]
            if delta.get("type") == "text_delta":
                block["text"] = str(block.get("text", "")) + str(delta.get("text", ""))
            elif delta.get("type") == "thinking_delta":
                block["thinking"] = str(block.get("thinking", "")) + str(delta.get("thinking", ""))
            elif delta.get("type") == "signature_delta":
                block["signature"] = str(delta.get("signature", ""))
            elif delta.get("type") == "input_json_delta" and index in partial:
                partial[index].append(str(delta.get("partial_json", "")))
        elif kind == "content_block_stop":
            index = body.get("index")
            if index in partial:
                text = "".join(partial.pop(index))
                try:
                    message["content"][index]["input"] = orjson.loads(text) if text else {}
                except orjson.JSONDecodeError:
                    return None
        elif kind == "message_delta":
            message.update(body.get("delta") or {})
        elif kind == "message_stop":
            return message if not partial else None
    return None
