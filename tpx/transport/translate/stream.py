"""Streaming: SSE parsing, Chat Completions chunks -> Messages stream events, accumulation.

Sans-I/O (no httpx2): bytes in any chunking go in, Messages stream events (dicts) come out.

Pieces
------
:class:`SSEParser`
    Incremental ``text/event-stream`` parser for both providers: lines may split across
    reads anywhere (inside a ``\\r\\n`` too), ``\\r\\n`` / ``\\n`` / ``\\r`` line ends,
    ``:`` comments, multi-line ``data:`` joined with ``\\n``, a leading BOM, ``event:`` /
    ``id:`` fields. At :meth:`SSEParser.close` an event whose lines were all terminated
    but that lacks its closing blank line is still dispatched (servers that end with
    ``data: [DONE]\\n``); an unterminated last line is dropped (a cut-off read).
:class:`OpenAIStreamTranslator`
    Chat Completions chunks (``data: {...}`` ... ``data: [DONE]``) -> Messages events:
    ``message_start``; ``thinking`` (from ``reasoning_content`` or ``reasoning``:
    live ``thinking_delta`` events, closed by one ``signature_delta`` carrying the MAC
    of the block's whole text, as the non-streaming path signs it; ``secret=`` as
    there) and ``text`` blocks streamed live; ``tool_use`` blocks; ``message_delta``
    (stop reason, cumulative usage); ``message_stop``.
:class:`AnthropicStreamReader`
    Native Messages streams: events pass through unchanged (``ping`` and unknown types
    included), but are parsed and shape-checked so the exchange learns the tool_use ids;
    an ``event: error`` raises the mapped :class:`~tpx.errors.ModelError`.
:class:`MessageAccumulator`
    Folds Messages stream events into the final Messages response body.
:func:`serialize_event`
    ``event: <type>\\ndata: <json>\\n\\n``.

Tool calls (the strategy that never misattributes fragments)
------------------------------------------------------------
Messages content blocks cannot interleave, while Chat Completions tool-call fragments
can. Tool calls are therefore *buffered* and each ``tool_use`` block is emitted whole
(``content_block_start``, its argument fragments as one or more ``input_json_delta``,
``content_block_stop``) when the choice's ``finish_reason`` arrives (or at ``[DONE]`` if
none came), after every text/thinking block. Fragments are assembled by key:

* a fragment with ``index`` belongs to the latest call at that index, unless it carries
  a non-empty ``id`` different from that call's (Ollama: parallel calls all at
  ``index: 0`` with different ids -> separate calls), or a ``function.name`` while that
  call already has a name and complete JSON arguments (same-id parallel calls); a
  different name on an incomplete call is a name fragment (concatenated), the same name
  a repetition (ignored);
* a fragment without ``index`` (Gemini: id ``""``, whole arguments in one chunk) starts
  a new call when it carries a name, else continues the latest index-less call;
* legacy ``delta.function_call`` is one call (as in the non-streaming path).

Every call's arguments are validated with the non-streaming :func:`parse_arguments`
before any tool block is emitted: not JSON / not an object -> ``ProtocolError``
(MODEL_PROTOCOL); empty or blank -> ``{}`` (one ``input_json_delta`` of ``"{}"``); an
object (llama.cpp) -> its JSON. Caller ids use the same reversible encoding and nonce as
the non-streaming path (:func:`to_caller_id`), positions in order of first appearance,
so a streamed response and the non-streamed response with the same content (and nonce)
give the same Messages content. ``stop_reason`` / ``usage`` come from the same helpers
(:func:`stop_reason`, :func:`usage_to_messages`): ``finish_reason: "stop"`` with tool
calls is ``tool_use``; usage is taken from the last chunk carrying one (with
``stream_options.include_usage`` a final chunk with ``choices: []``).

Choices: only the choice with ``index`` 0 (or without ``index``) is translated, as in the
non-streaming path; a choice with another index is dropped with a warning
(:attr:`OpenAIStreamTranslator.warnings`, once per stream). ``"choices": null`` and
``"delta": null`` are malformed (``ProtocolError``); a chunk without a ``choices`` key
(a usage-only chunk) or a choice without a ``delta`` key carries no content.

``message_start`` carries zero usage (Chat Completions reports usage at the end); the
``message_delta`` carries the full usage (input, output, cache) and the accumulator
merges it, as the Anthropic SDK does.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

import attrs
import orjson

from tpx import _safe
from tpx._safe import quote
from tpx.errors import (
    HTTPStatusError,
    ModelError,
    OverloadedError,
    ProtocolError,
    RateLimitedError,
    TimeoutError,
    UnauthorizedError,
)
from tpx.transport.translate.ids import new_nonce, to_caller_id
from tpx.transport.translate.profiles import Profile, get_profile
from tpx.transport.translate.response import (
    check_nonce,
    error_message,
    is_first_choice,
    message_id_of,
    parse_arguments,
    reasoning_text,
    stop_reason,
    usage_to_messages,
)
from tpx.transport.translate.signing import ThinkingSigner, signer_for

__all__ = [
    "DEFAULT_MAX_LINE",
    "AnthropicStreamReader",
    "MessageAccumulator",
    "OpenAIStreamTranslator",
    "SSEEvent",
    "SSEParser",
    "error_from_event",
    "serialize_event",
]

#: Longest SSE line buffered before the stream is declared malformed (bytes).
DEFAULT_MAX_LINE = 16 * 1024 * 1024

_EOL = re.compile(rb"\r\n|\r|\n")
_BOM = b"\xef\xbb\xbf"
_TOOL_ID = re.compile(r"[a-zA-Z0-9_-]+").fullmatch
_JSON_INPUT_BLOCKS = frozenset({"tool_use", "server_tool_use", "mcp_tool_use"})
_NO_DELTA: Mapping[str, Any] = {}  # a choice without a delta key (never mutated)


def _bad(message: str) -> ProtocolError:
    return ProtocolError(f"malformed stream: {message}")


# --------------------------------------------------------------------------
# SSE
# --------------------------------------------------------------------------


@attrs.frozen
class SSEEvent:
    """One dispatched server-sent event (``event`` defaults to ``"message"``)."""

    data: str
    event: str = "message"
    id: str | None = None


class SSEParser:
    """Incremental SSE parser: :meth:`feed` bytes in any chunking, :meth:`close` at EOF."""

    __slots__ = ("_buf", "_data", "_event", "_id", "_max_line", "_started", "truncated")

    def __init__(self, *, max_line: int = DEFAULT_MAX_LINE) -> None:
        self._buf = bytearray()
        self._data: list[str] = []
        self._event = ""
        self._id: str | None = None
        self._started = False
        self._max_line = max_line
        #: Set by :meth:`close` when the body ended inside a line (a cut-off read).
        self.truncated = False

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        """The events completed by *chunk*. Raises ProtocolError for an over-long line."""
        buf = self._buf
        buf += chunk
        events: list[SSEEvent] = []
        start = 0
        end = len(buf)
        while True:
            match = _EOL.search(buf, start)
            if match is None:
                break
            if (
                match.end() == end
                and buf[match.start()] == 0x0D
                and match.end() - match.start() == 1
            ):
                break  # a lone trailing \r: the \n may be in the next read
            self._line(bytes(buf[start : match.start()]), events)
            start = match.end()
        del buf[:start]
        if len(buf) > self._max_line:
            raise _bad(f"an SSE line longer than {self._max_line} bytes")
        return events

    def close(self) -> list[SSEEvent]:
        """End of body: flush what is complete (see the module docstring)."""
        events: list[SSEEvent] = []
        if self._buf.endswith(b"\r"):
            self._line(bytes(self._buf[:-1]), events)
        elif self._buf:
            self.truncated = True
        self._buf.clear()
        if not self.truncated:
            self._dispatch(events)
        return events

    def _line(self, line: bytes, events: list[SSEEvent]) -> None:
        if not self._started:
            self._started = True
            if line.startswith(_BOM):
                line = line[len(_BOM) :]
        if not line:
            self._dispatch(events)
            return
        if line[0] == 0x3A:  # ":" comment
            return
        raw_field, colon, raw_value = line.partition(b":")
        if colon and raw_value.startswith(b" "):
            raw_value = raw_value[1:]
        field = raw_field.decode("utf-8", "replace")
        value = raw_value.decode("utf-8", "replace")
        if field == "data":
            self._data.append(value)
        elif field == "event":
            self._event = value
        elif field == "id" and "\0" not in value:
            self._id = value
        # "retry" and unknown fields are ignored, as the SSE standard says.

    def _dispatch(self, events: list[SSEEvent]) -> None:
        if self._data:
            events.append(SSEEvent("\n".join(self._data), self._event or "message", self._id))
        self._data = []
        self._event = ""


def serialize_event(event: Mapping[str, Any]) -> bytes:
    """One Messages stream event as SSE bytes: ``event: <type>\\ndata: <json>\\n\\n``."""
    kind = event.get("type")
    if not isinstance(kind, str) or not kind or any(c in kind for c in "\r\n"):
        raise ValueError(f"a stream event needs a one-line string type, got {quote(kind)}")
    return b"event: " + kind.encode() + b"\ndata: " + orjson.dumps(event) + b"\n\n"


def _decode_json(event: SSEEvent) -> dict[str, Any]:
    problem: str | None = None
    try:
        value = _safe.loads(event.data)
    except _safe.DepthError as exc:
        problem = str(exc)
    except ValueError:  # the text is quoted (bounded, cut marked) for redaction to see
        problem = f"event data is not JSON: {quote(event.data)}"
    if problem is not None:
        raise _bad(problem)
    if not isinstance(value, dict):
        raise _bad("event data is not a JSON object")
    return value


_ERROR_CLASSES: dict[str, tuple[type[ModelError], int]] = {
    "authentication_error": (UnauthorizedError, 401),
    "permission_error": (UnauthorizedError, 403),
    "rate_limit_error": (RateLimitedError, 429),
    "overloaded_error": (OverloadedError, 529),
    "timeout_error": (TimeoutError, 504),
}


def error_from_event(body: Mapping[str, Any], provider: str | None = None) -> ModelError:
    """The :class:`ModelError` for a provider's in-stream error event (either API's shape).

    Messages error types map as their HTTP statuses do (overloaded -> OverloadedError,
    rate_limit -> RateLimitedError, authentication/permission -> UnauthorizedError,
    timeout -> TimeoutError); anything else is an :class:`HTTPStatusError` (500) whose
    ``error_type`` is the provider's when that is one of the Messages API's error types,
    else ``api_error`` (:func:`tpx.errors.messages_error_type`).
    """
    error = body.get("error")
    kind = error.get("type") if isinstance(error, Mapping) else None
    message = error_message(body) or "the provider reported an error in the stream"
    who = provider or "provider"
    text = f"{who} sent an error event: {message}"
    if isinstance(kind, str) and kind in _ERROR_CLASSES:
        cls, status = _ERROR_CLASSES[kind]
        return cls(text, status=status, error_type=kind, provider=provider)
    error_type = kind if isinstance(kind, str) and kind else "api_error"
    return HTTPStatusError(text, status=500, error_type=error_type, provider=provider)


# --------------------------------------------------------------------------
# Accumulation (Messages events -> Messages body)
# --------------------------------------------------------------------------


class MessageAccumulator:
    """Folds Messages stream events into the final Messages body, checking their order.

    Raises :class:`~tpx.errors.ProtocolError` for an event out of place (a block before
    ``message_start``, a delta for a block that is not open, a tool_use id that is not
    a valid or unique Messages id, tool input that is not a JSON object, ...).
    ``ping`` and unknown event types are ignored.
    """

    __slots__ = ("_json", "_message", "_open", "complete", "tool_use_ids")

    def __init__(self) -> None:
        self._message: dict[str, Any] | None = None
        self._open: int | None = None
        self._json: list[str] = []
        self.complete = False
        self.tool_use_ids: list[str] = []

    @property
    def started(self) -> bool:
        return self._message is not None

    def message(self) -> dict[str, Any]:
        """The body accumulated so far (the final body once :attr:`complete`)."""
        if self._message is None:
            raise _bad("no message_start yet")
        return self._message

    def add_all(self, events: Iterable[Mapping[str, Any]]) -> MessageAccumulator:
        for event in events:
            self.add(event)
        return self

    def add(self, event: Mapping[str, Any]) -> None:
        kind = event.get("type")
        if self.complete and kind not in ("ping",):
            raise _bad(f"{quote(kind)} after message_stop")
        if kind == "message_start":
            self._start(event)
        elif kind in ("content_block_start", "content_block_delta", "content_block_stop"):
            content = self.message()["content"]
            index = event.get("index")
            if not isinstance(index, int) or isinstance(index, bool):
                raise _bad(f"{kind} without an integer index")
            if kind == "content_block_start":
                self._block_start(content, index, event.get("content_block"))
            elif index != self._open:
                raise _bad(f"{kind} for block {index}, but the open block is {self._open}")
            elif kind == "content_block_delta":
                self._delta(content[index], event.get("delta"))
            else:
                self._block_stop(content[index])
        elif kind == "message_delta":
            self._message_delta(event)
        elif kind == "message_stop":
            self.message()
            if self._open is not None:
                raise _bad("message_stop while a content block is open")
            self.complete = True

    def _start(self, event: Mapping[str, Any]) -> None:
        if self._message is not None:
            raise _bad("a second message_start")
        message = event.get("message")
        if not isinstance(message, Mapping):
            raise _bad("message_start without a message")
        if message.get("type") != "message" or message.get("role") != "assistant":
            raise _bad("message_start's message is not an assistant message")
        content = message.get("content")
        if not isinstance(content, list):
            raise _bad("message_start's content is not a list")
        usage = message.get("usage")
        self._message = {
            **message,
            "content": [dict(b) if isinstance(b, Mapping) else b for b in content],
            "usage": dict(usage) if isinstance(usage, Mapping) else {},
        }

    def _block_start(self, content: list[Any], index: int, block: Any) -> None:
        if self._open is not None:
            raise _bad(f"block {index} started while block {self._open} is open")
        if index != len(content):
            raise _bad(f"block {index} started, expected block {len(content)}")
        if not isinstance(block, Mapping) or not isinstance(block.get("type"), str):
            raise _bad(f"block {index} without a typed content_block")
        block = dict(block)
        if block["type"] == "tool_use":
            tool_id = block.get("id")
            if not isinstance(tool_id, str) or _TOOL_ID(tool_id) is None:
                raise _bad(f"tool_use block with invalid id {quote(tool_id)}")
            if tool_id in self.tool_use_ids:
                raise _bad(f"duplicated tool_use id {tool_id}")
            if not isinstance(block.get("name"), str):
                raise _bad(f"tool_use block {tool_id} without a name")
            self.tool_use_ids.append(tool_id)
        content.append(block)
        self._open = index
        self._json = []

    def _delta(self, block: dict[str, Any], delta: Any) -> None:
        if not isinstance(delta, Mapping):
            raise _bad("content_block_delta without a delta")
        kind = delta.get("type")
        block_type = block["type"]
        if kind == "text_delta" and block_type == "text":
            block["text"] = _string(block.get("text")) + _string(delta.get("text"))
        elif kind == "input_json_delta" and block_type in _JSON_INPUT_BLOCKS:
            self._json.append(_string(delta.get("partial_json")))
        elif kind == "thinking_delta" and block_type == "thinking":
            block["thinking"] = _string(block.get("thinking")) + _string(delta.get("thinking"))
        elif kind == "signature_delta" and block_type == "thinking":
            block["signature"] = _string(delta.get("signature"))
        elif kind == "citations_delta" and block_type == "text":
            citations = block.get("citations") or []
            block["citations"] = [*citations, delta.get("citation")]
        else:
            raise _bad(f"{quote(kind)} delta for a {quote(block_type)} block")

    def _block_stop(self, block: dict[str, Any]) -> None:
        if block["type"] in _JSON_INPUT_BLOCKS and self._json:
            text = "".join(self._json)
            value: Any = {}
            if text.strip():
                problem: str | None = None
                try:
                    value = _safe.loads(text)
                except ValueError as exc:  # not JSON, or nested deeper than the depth rule
                    problem = str(exc) if isinstance(exc, _safe.DepthError) else "not valid JSON"
                if problem is not None:
                    raise _bad(f"tool input of {quote(block.get('id'))} is {problem}")
            if not isinstance(value, dict):
                raise _bad(f"tool input of {quote(block.get('id'))} is not a JSON object")
            block["input"] = value
        elif block["type"] in _JSON_INPUT_BLOCKS and not isinstance(block.get("input"), Mapping):
            raise _bad(f"tool input of {quote(block.get('id'))} is not a JSON object")
        self._open = None
        self._json = []

    def _message_delta(self, event: Mapping[str, Any]) -> None:
        message = self.message()
        if self._open is not None:
            raise _bad("message_delta while a content block is open")
        delta = event.get("delta")
        if not isinstance(delta, Mapping):
            raise _bad("message_delta without a delta")
        for key in ("stop_reason", "stop_sequence"):
            if key in delta:
                message[key] = delta[key]
        usage = event.get("usage")
        if isinstance(usage, Mapping):
            for key, value in usage.items():
                if value is not None:
                    message["usage"][key] = value


def _string(value: Any) -> str:
    if not isinstance(value, str):
        raise _bad("a delta field that is not a string")
    return value


# --------------------------------------------------------------------------
# Native Messages streams
# --------------------------------------------------------------------------


class AnthropicStreamReader:
    """Pass-through for native Messages streams that still parses and checks each event."""

    __slots__ = ("_acc", "_parser", "provider")

    def __init__(self, *, provider: str | None = "ANTHROPIC") -> None:
        self._parser = SSEParser()
        self._acc = MessageAccumulator()
        self.provider = provider

    @property
    def complete(self) -> bool:
        """``message_stop`` was seen."""
        return self._acc.complete

    @property
    def tool_ids(self) -> list[str]:
        """tool_use ids emitted so far (what the caller receives, unchanged)."""
        return list(self._acc.tool_use_ids)

    wire_ids = tool_ids

    def message(self) -> dict[str, Any]:
        return self._acc.message()

    def on_event(self, event: SSEEvent) -> list[dict[str, Any]]:
        """The caller's events for one SSE event (nothing after ``message_stop``)."""
        if self._acc.complete:
            return []
        body = _decode_json(event)
        kind = body.get("type")
        if not isinstance(kind, str) or not kind or "\n" in kind or "\r" in kind:
            raise _bad("event data without a one-line string type")
        if event.event not in ("message", kind):
            raise _bad(f"event name {quote(event.event)} differs from its data type {quote(kind)}")
        if kind == "error":
            raise error_from_event(body, self.provider)
        self._acc.add(body)
        return [body]

    def feed(self, chunk: bytes) -> list[dict[str, Any]]:
        """Convenience: :class:`SSEParser` + :meth:`on_event`."""
        return [out for ev in self._parser.feed(chunk) for out in self.on_event(ev)]

    def close(self) -> list[dict[str, Any]]:
        """End of body. Raises ProtocolError unless ``message_stop`` was seen."""
        out = [out for ev in self._parser.close() for out in self.on_event(ev)]
        if not self.complete:
            raise _bad("the stream ended before message_stop")
        return out


# --------------------------------------------------------------------------
# Chat Completions streams
# --------------------------------------------------------------------------


@attrs.define
class _Call:
    position: int
    id: str | None
    name: str = ""
    parts: list[str] = attrs.field(factory=list)
    obj: dict[str, Any] | None = None

    def complete(self) -> bool:
        if self.obj is not None:
            return True
        text = "".join(self.parts)
        if not text.strip():
            return False
        try:
            return isinstance(orjson.loads(text), dict)
        except orjson.JSONDecodeError:
            return False


class OpenAIStreamTranslator:
    """Chat Completions stream -> Messages stream events (see the module docstring).

    *model* overrides the chunks' model (as in :func:`response_to_messages`);
    *default_model* is used when the chunks name none. *nonce* fixes the tool-id nonce
    (12 lowercase hex digits); by default a fresh one is drawn.
    """

    def __init__(
        self,
        *,
        model: str | None = None,
        default_model: str | None = None,
        nonce: str | None = None,
        provider: str | None = "TPX",
        profile: str | Profile | None = None,
        secret: str | bytes | ThinkingSigner | None = None,
    ) -> None:
        check_nonce(nonce)
        get_profile(profile)  # validated; streams are read alike for every profile
        self._signer = signer_for(secret)
        self._thinking: list[str] = []
        self.nonce = nonce or new_nonce()
        self.provider = provider
        self.warnings: list[str] = []
        self._model = model
        self._default_model = default_model
        self._parser = SSEParser()
        self._started = False
        self._done = False
        self._open: str | None = None
        self._next_index = 0
        self._calls: list[_Call] = []
        self._by_key: dict[Any, _Call] = {}
        self._tools_emitted = False
        self._finish: dict[str, Any] | None = None
        self._usage: Any = None
        self._refused = False
        self._warned: set[str] = set()
        self.tool_ids: list[str] = []
        self.wire_ids: list[str | None] = []

    @property
    def complete(self) -> bool:
        """``data: [DONE]`` was seen (``message_stop`` emitted)."""
        return self._done

    # -- entry points ------------------------------------------------------------

    def feed(self, chunk: bytes) -> list[dict[str, Any]]:
        """Convenience: :class:`SSEParser` + :meth:`on_event`."""
        return [out for ev in self._parser.feed(chunk) for out in self.on_event(ev)]

    def close(self) -> list[dict[str, Any]]:
        """End of body. Raises ProtocolError unless ``[DONE]`` was seen."""
        out = [out for ev in self._parser.close() for out in self.on_event(ev)]
        if not self._done:
            raise _bad("the stream ended without data: [DONE]")
        return out

    def on_event(self, event: SSEEvent) -> list[dict[str, Any]]:
        """The Messages events for one SSE event (nothing after ``[DONE]``)."""
        if self._done:
            return []
        if event.data.strip() == "[DONE]":
            return self._end()
        body = _decode_json(event)
        if event.event == "error":
            raise error_from_event(body, self.provider)
        return self.on_chunk(body)

    def on_chunk(self, chunk: Mapping[str, Any]) -> list[dict[str, Any]]:
        """The Messages events for one decoded ``chat.completion.chunk``."""
        if self._done:
            return []
        choices = chunk.get("choices")
        if "error" in chunk and not choices:
            raise ProtocolError(
                f"the provider returned an error in the stream: {error_message(chunk)}",
                provider=self.provider,
            )
        out: list[dict[str, Any]] = []
        if not self._started:
            out.append(self._message_start(chunk))
        usage = chunk.get("usage")
        if usage is not None:
            self._usage = usage
        if choices is None:
            if "choices" in chunk:
                raise _bad("choices is null")
            return out
        if not isinstance(choices, list):
            raise _bad("choices is not a list")
        for choice in choices:
            if not isinstance(choice, Mapping):
                raise _bad("a choice is not an object")
            if not is_first_choice(choice):
                self._warn_once("extra choice(s) dropped; only choice 0 is used")
                continue
            self._choice(choice, out)
        return out

    # -- pieces --------------------------------------------------------------------

    def _warn_once(self, message: str) -> None:
        if message not in self._warned:
            self._warned.add(message)
            self.warnings.append(message)

    def _message_start(self, chunk: Mapping[str, Any]) -> dict[str, Any]:
        self._started = True
        message_id = message_id_of(chunk)
        name = self._model
        if name is None:
            name = chunk.get("model")
            if not isinstance(name, str) or not name:
                name = self._default_model
        if not isinstance(name, str) or not name:
            self.warnings.append("the response named no model; 'unknown' reported")
            name = "unknown"
        return {
            "type": "message_start",
            "message": {
                "id": message_id,
                "type": "message",
                "role": "assistant",
                "model": name,
                "content": [],
                "stop_reason": None,
                "stop_sequence": None,
                "usage": {"input_tokens": 0, "output_tokens": 0},
            },
        }

    def _choice(self, choice: Mapping[str, Any], out: list[dict[str, Any]]) -> None:
        delta = choice.get("delta", _NO_DELTA)
        if not isinstance(delta, Mapping):
            raise _bad("choice 0's delta is " + ("null" if delta is None else "not an object"))
        try:
            reasoning = reasoning_text(delta, "delta")
        except ProtocolError:
            raise _bad("delta reasoning is not a string") from None
        if reasoning is not None:
            self._live("thinking", reasoning, out)
        content = delta.get("content")
        if isinstance(content, str):
            if content:
                self._live("text", content, out)
        elif isinstance(content, list):
            for part in content:
                if not isinstance(part, Mapping) or part.get("type") != "text":
                    raise _bad("delta content parts must be text parts")
                text = part.get("text")
                if not isinstance(text, str):
                    raise _bad("a text part needs a string text")
                if text:
                    self._live("text", text, out)
        elif content is not None:
            raise _bad("delta content must be a string, a list of text parts or null")
        refusal = delta.get("refusal")
        if refusal is not None:
            if not isinstance(refusal, str):
                raise _bad("refusal is not a string")
            if refusal:
                self._refused = True
                self._live("refusal", refusal, out)
        calls = delta.get("tool_calls")
        if calls is not None:
            if not isinstance(calls, list):
                raise _bad("delta.tool_calls is not a list")
            for call in calls:
                self._tool_delta(call)
        legacy = delta.get("function_call")
        if legacy is not None:
            if not isinstance(legacy, Mapping):
                raise _bad("delta.function_call is not an object")
            self._tool_delta({"function": legacy}, key="function_call")
        finish = choice.get("finish_reason")
        if finish is not None:
            self._finish = {
                "finish_reason": finish,
                "stop_reason": choice.get("stop_reason"),
                "matched_stop": choice.get("matched_stop"),
            }
            self._emit_tools(out)

    def _close_live(self, out: list[dict[str, Any]]) -> None:
        if self._open is None:
            return
        index = self._next_index - 1
        if self._open == "thinking":
            out.append(
                {
                    "type": "content_block_delta",
                    "index": index,
                    "delta": {
                        "type": "signature_delta",
                        "signature": self._signer.sign("".join(self._thinking)),
                    },
                }
            )
        out.append({"type": "content_block_stop", "index": index})
        self._open = None

    def _live(self, kind: str, text: str, out: list[dict[str, Any]]) -> None:
        if self._open != kind:
            self._close_live(out)
            block: dict[str, Any]
            if kind == "thinking":
                block = {"type": "thinking", "thinking": "", "signature": ""}
            else:
                block = {"type": "text", "text": ""}
            out.append(
                {"type": "content_block_start", "index": self._next_index, "content_block": block}
            )
            self._next_index += 1
            self._open = kind
            if kind == "thinking":
                self._thinking = []  # the signature covers this block's text only
        if kind == "thinking":
            self._thinking.append(text)
        delta = (
            {"type": "thinking_delta", "thinking": text}
            if kind == "thinking"
            else {"type": "text_delta", "text": text}
        )
        out.append({"type": "content_block_delta", "index": self._next_index - 1, "delta": delta})

    def _tool_delta(self, fragment: Any, key: Any = None) -> None:
        if not isinstance(fragment, Mapping):
            raise _bad("a tool_calls fragment is not an object")
        if self._tools_emitted:
            raise _bad("a tool call fragment after finish_reason")
        if key is None:
            index = fragment.get("index")
            if index is not None and (not isinstance(index, int) or isinstance(index, bool)):
                raise _bad("tool_calls[].index is not an integer")
            key = ("index", index)
        kind = fragment.get("type")
        if kind is not None and kind != "function":
            raise _bad(f"tool call of unsupported type {quote(kind)}")
        foreign = fragment.get("id")
        if foreign is not None and not isinstance(foreign, str):
            raise _bad("tool_calls[].id is not a string")
        function = fragment.get("function")
        if function is None:
            function = {}
        if not isinstance(function, Mapping):
            raise _bad("tool_calls[].function is not an object")
        name = function.get("name")
        if name is not None and not isinstance(name, str):
            raise _bad("tool_calls[].function.name is not a string")
        current = self._by_key.get(key)
        keyless = key == ("index", None)
        new = current is None
        if current is not None:
            if foreign and foreign != current.id and (current.id is not None or current.name):
                new = True  # Ollama: same index, a different id
            elif name and current.name:
                new = keyless or current.complete()  # Gemini / same-id parallel calls
        if new:
            current = _Call(len(self._calls), foreign)
            self._calls.append(current)
            self._by_key[key] = current
        assert current is not None
        if foreign and current.id is None:
            current.id = foreign
        if name and name != current.name:
            current.name = name if not current.name else current.name + name
        arguments = function.get("arguments")
        if isinstance(arguments, str):
            if current.obj is not None and arguments.strip():
                raise _bad(f"tool call {current.position}: text arguments after an object")
            current.parts.append(arguments)
        elif isinstance(arguments, dict):
            if "".join(current.parts).strip() or current.obj is not None:
                raise _bad(f"tool call {current.position}: arguments given twice")
            current.obj = arguments
        elif arguments is not None:
            raise _bad(f"tool call {current.position}: arguments must be a string or an object")

    def _emit_tools(self, out: list[dict[str, Any]]) -> None:
        if self._tools_emitted:
            return
        # Validate every call before emitting any block.
        planned: list[tuple[str, str, list[str]]] = []
        for call in self._calls:
            if not call.name:
                raise _bad(f"tool call {call.position} has no function name")
            raw: Any = call.obj if call.obj is not None else "".join(call.parts)
            parse_arguments(raw, call.position, call.name)  # ProtocolError when not an object
            if call.obj is not None:
                fragments = [orjson.dumps(call.obj).decode()]
            elif not raw.strip():
                fragments = ["{}"]
            else:
                fragments = [p for p in call.parts if p]
            caller_id = to_caller_id(call.id, call.position, self.nonce)
            planned.append((caller_id, call.name, fragments))
        self._close_live(out)
        self._tools_emitted = True
        for call, (caller_id, name, fragments) in zip(self._calls, planned, strict=True):
            index = self._next_index
            self._next_index += 1
            out.append(
                {
                    "type": "content_block_start",
                    "index": index,
                    "content_block": {
                        "type": "tool_use",
                        "id": caller_id,
                        "name": name,
                        "input": {},
                    },
                }
            )
            for fragment in fragments:
                out.append(
                    {
                        "type": "content_block_delta",
                        "index": index,
                        "delta": {"type": "input_json_delta", "partial_json": fragment},
                    }
                )
            out.append({"type": "content_block_stop", "index": index})
            self.tool_ids.append(caller_id)
            self.wire_ids.append(call.id)

    def _end(self) -> list[dict[str, Any]]:
        if not self._started:
            raise _bad("data: [DONE] before any chunk")
        out: list[dict[str, Any]] = []
        self._emit_tools(out)
        self._close_live(out)
        choice = self._finish
        if choice is None:
            self.warnings.append("the stream carried no finish_reason")
            choice = {"finish_reason": None}
        reason, sequence = stop_reason(choice, bool(self._calls), self._refused, self.warnings)
        usage = usage_to_messages(self._usage, self.warnings)
        out.append(
            {
                "type": "message_delta",
                "delta": {"stop_reason": reason, "stop_sequence": sequence},
                "usage": usage,
            }
        )
        out.append({"type": "message_stop"})
        self._done = True
        return out
