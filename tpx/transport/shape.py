"""ShapeInv at run time: what tpx hands a caller is a Messages API body or stream event.

Every response body (native ANTHROPIC bodies, translated TPX bodies, bodies assembled
from a stream) goes through :func:`check_message` and every stream event through
:func:`check_event` before the caller sees it; a failure is a
:class:`~tpx.errors.ProtocolError` (the exchange takes ``ProviderFail``). The official
SDK's types (``anthropic.types.Message``, ``RawMessageStreamEvent``) are the test oracle:
what passes here validates there (``model_validate_json(..., strict=True)``); the check
itself is tpx's own (no pydantic at run time), written for speed.

The rule for what the Messages shapes do not know
    * **Unknown fields** of a known object pass through untouched (the Messages API adds
      fields over time and the SDK keeps unknown fields); every field the SDK knows is
      checked against its type.
    * **Content blocks** of types tpx does not model are refused: ``text``, ``thinking``,
      ``redacted_thinking``, ``tool_use`` and ``server_tool_use`` are delivered; any other
      type (server-tool results, container uploads, types added later) is a
      ``ProtocolError``, never a block the caller cannot read.
    * **Stream events** of an unknown type are dropped (the API documents that new event
      types may appear and must be tolerated); an event type that is not a name
      (``[a-z][a-z0-9_]*``) is a ``ProtocolError``. ``ping`` passes.
    * ``tool_use`` / ``server_tool_use`` ids are ``[A-Za-z0-9_-]+`` in full (no trailing
      newline), unique within a message.
"""

from __future__ import annotations

import datetime
import re
from typing import Any, NoReturn

from tpx._safe import quote
from tpx.errors import ProtocolError

__all__ = [
    "BLOCK_TYPES",
    "EVENT_TYPES",
    "STOP_REASONS",
    "check_block",
    "check_event",
    "check_message",
    "event_type",
    "valid_tool_id",
]

STOP_REASONS = frozenset(
    {
        "end_turn",
        "max_tokens",
        "stop_sequence",
        "tool_use",
        "pause_turn",
        "refusal",
        "model_context_window_exceeded",
    }
)
EVENT_TYPES = frozenset(
    {
        "message_start",
        "message_delta",
        "message_stop",
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
        "ping",
    }
)

valid_tool_id = re.compile(r"[A-Za-z0-9_-]+").fullmatch
_EVENT_NAME = re.compile(r"[a-z][a-z0-9_]*").fullmatch


def _bad(message: str) -> NoReturn:
    raise ProtocolError(f"not a Messages body: {message}")


# -- a small type language for the SDK's models ------------------------------------
# ("str",) ("int",) ("dict",) any object, ("datetime",) an ISO 8601 string,
# ("opt", spec) null or absent, ("lit", frozenset), ("list", spec),
# ("obj", required, optional) extra keys allowed, ("union", {type: obj spec}).

_STR = ("str",)
_INT = ("int",)
_DICT = ("dict",)
_OSTR = ("opt", _STR)
_OINT = ("opt", _INT)


def _obj(required: dict[str, Any], optional: dict[str, Any] | None = None) -> tuple[Any, ...]:
    return ("obj", required, optional or {})


def _lit(*values: str) -> tuple[Any, ...]:
    return ("lit", frozenset(values))


def _opt(spec: tuple[Any, ...]) -> tuple[Any, ...]:
    return ("opt", spec)


_CITATION = (
    "union",
    {
        "char_location": _obj(
            {"cited_text": _STR, "document_index": _INT, "end_char_index": _INT,
             "start_char_index": _INT},
            {"document_title": _OSTR, "file_id": _OSTR},
        ),
        "page_location": _obj(
            {"cited_text": _STR, "document_index": _INT, "end_page_number": _INT,
             "start_page_number": _INT},
            {"document_title": _OSTR, "file_id": _OSTR},
        ),
        "content_block_location": _obj(
            {"cited_text": _STR, "document_index": _INT, "end_block_index": _INT,
             "start_block_index": _INT},
            {"document_title": _OSTR, "file_id": _OSTR},
        ),
        "web_search_result_location": _obj(
            {"cited_text": _STR, "encrypted_index": _STR, "url": _STR}, {"title": _OSTR}
        ),
        "search_result_location": _obj(
            {"cited_text": _STR, "end_block_index": _INT, "search_result_index": _INT,
             "source": _STR, "start_block_index": _INT},
            {"title": _OSTR},
        ),
    },
)  # fmt: skip
_CALLER = _opt(
    (
        "union",
        {
            "direct": _obj({}),
            "code_execution_20250825": _obj({"tool_id": _STR}),
            "code_execution_20260120": _obj({"tool_id": _STR}),
        },
    )
)
_SERVER_TOOLS = _lit(
    "web_search",
    "web_fetch",
    "code_execution",
    "bash_code_execution",
    "text_editor_code_execution",
    "tool_search_tool_regex",
    "tool_search_tool_bm25",
)
_BLOCKS: dict[str, tuple[Any, ...]] = {
    "text": _obj({"text": _STR}, {"citations": _opt(("list", _CITATION))}),
    "thinking": _obj({"signature": _STR, "thinking": _STR}),
    "redacted_thinking": _obj({"data": _STR}),
    "tool_use": _obj(
        {"id": _STR, "input": _DICT, "name": _STR}, {"caller": _CALLER, "toolset_name": _OSTR}
    ),
    "server_tool_use": _obj(
        {"id": _STR, "input": _DICT, "name": _SERVER_TOOLS}, {"caller": _CALLER}
    ),
}
BLOCK_TYPES = frozenset(_BLOCKS)
_SERVER_TOOL_USAGE = _opt(_obj({"web_fetch_requests": _INT, "web_search_requests": _INT}))
_OUTPUT_DETAILS = _opt(_obj({"thinking_tokens": _INT}))
_USAGE = _obj(
    {"input_tokens": _INT, "output_tokens": _INT},
    {
        "cache_creation": _opt(
            _obj({"ephemeral_1h_input_tokens": _INT, "ephemeral_5m_input_tokens": _INT})
        ),
        "cache_creation_input_tokens": _OINT,
        "cache_read_input_tokens": _OINT,
        "inference_geo": _OSTR,
        "output_tokens_details": _OUTPUT_DETAILS,
        "server_tool_use": _SERVER_TOOL_USAGE,
        "service_tier": _opt(_lit("standard", "priority", "batch")),
        "speed": _opt(_lit("standard", "fast")),
    },
)
_DELTA_USAGE = _obj(
    {"output_tokens": _INT},
    {
        "cache_creation_input_tokens": _OINT,
        "cache_read_input_tokens": _OINT,
        "input_tokens": _OINT,
        "output_tokens_details": _OUTPUT_DETAILS,
        "server_tool_use": _SERVER_TOOL_USAGE,
    },
)
_CONTAINER = _opt(
    _obj(
        {"id": _STR, "expires_at": ("datetime",)},
        {"skills": _opt(("list", _obj({"skill_id": _STR, "type": _STR, "version": _STR})))},
    )
)
_STOP_DETAILS = _opt(
    _obj(
        {"type": _lit("refusal")},
        {
            "category": _opt(
                _lit("cyber", "bio", "frontier_llm", "reasoning_extraction", "general_harms")
            ),
            "explanation": _OSTR,
        },
    )
)
#: Known optional top-level fields of a Message, besides the ones checked by hand.
_MESSAGE_OPTIONAL = {
    "container": _CONTAINER,
    "stop_details": _STOP_DETAILS,
    "diagnostics": ("null",),
}
_DELTAS = (
    "union",
    {
        "text_delta": _obj({"text": _STR}),
        "input_json_delta": _obj({"partial_json": _STR}),
        "citations_delta": _obj({"citation": _CITATION}),
        "thinking_delta": _obj({"thinking": _STR}),
        "signature_delta": _obj({"signature": _STR}),
    },
)
_MESSAGE_DELTA = _obj(
    {},
    {
        "container": _CONTAINER,
        "stop_details": _STOP_DETAILS,
        "stop_reason": _opt(("lit", STOP_REASONS)),
        "stop_sequence": _OSTR,
    },
)


def _check(value: Any, spec: tuple[Any, ...], path: str) -> None:
    kind = spec[0]
    if kind == "str":
        if value.__class__ is not str:
            _bad(f"{path} must be a string")
    elif kind == "int":
        if value.__class__ is not int:
            _bad(f"{path} must be an integer")
    elif kind == "dict":
        if value.__class__ is not dict:
            _bad(f"{path} must be an object")
    elif kind == "null":
        if value is not None:
            _bad(f"{path} is not modelled by tpx and must be null")
    elif kind == "opt":
        if value is not None:
            _check(value, spec[1], path)
    elif kind == "lit":
        if value.__class__ is not str or value not in spec[1]:
            _bad(f"{path} is {quote(value)}, not one of {sorted(spec[1])}")
    elif kind == "list":
        if value.__class__ is not list:
            _bad(f"{path} must be a list")
        for index, item in enumerate(value):
            _check(item, spec[1], f"{path}[{index}]")
    elif kind == "obj":
        _check_fields(value, spec[1], spec[2], path)
    elif kind == "union":
        if value.__class__ is not dict:
            _bad(f"{path} must be an object")
        tag = value.get("type")
        member = spec[1].get(tag) if tag.__class__ is str else None
        if member is None:
            _bad(f"{path}.type is {quote(tag)}, not one of {sorted(spec[1])}")
        _check_fields(value, member[1], member[2], path)
    elif kind == "datetime":
        if value.__class__ is not str or not _is_datetime(value):
            _bad(f"{path} must be an ISO 8601 date-time")
    else:  # pragma: no cover - the table above is all there is
        raise AssertionError(kind)


def _check_fields(
    value: Any, required: dict[str, Any], optional: dict[str, Any], path: str
) -> None:
    if value.__class__ is not dict:
        _bad(f"{path} must be an object")
    for name, spec in required.items():
        if name not in value:
            _bad(f"{path}.{name} is missing")
        _check(value[name], spec, f"{path}.{name}")
    for name, spec in optional.items():
        if name in value:
            _check(value[name], spec, f"{path}.{name}")


def _is_datetime(text: str) -> bool:
    try:
        datetime.datetime.fromisoformat(text)
    except ValueError:
        return False
    return True


# -- the public checks -----------------------------------------------------------


def check_block(block: Any, path: str = "content_block") -> None:
    """One content block (see the module docstring for the rule)."""
    if block.__class__ is not dict:
        _bad(f"{path} must be an object")
    kind = block.get("type")
    if kind.__class__ is not str:
        _bad(f"{path} without a type (its type is {quote(kind)}, not a string)")
    if kind == "text" and len(block) == 2:  # the common case, checked by hand
        if block.get("text").__class__ is not str:
            _bad(f"{path}.text must be a string")
        return
    spec = _BLOCKS.get(kind)
    if spec is None:
        _bad(f"{path} has type {quote(kind)}, which tpx does not deliver")
    _check_fields(block, spec[1], spec[2], path)
    if (kind == "tool_use" or kind == "server_tool_use") and not _is_tool_id(block["id"]):
        _bad(f"{path} is a {kind} block with an invalid id {quote(block['id'])}")


def _is_tool_id(text: str) -> bool:
    """``valid_tool_id(text)`` for a str, cheaper for the usual ids: an ASCII identifier
    once ``-`` reads as ``_`` is made of ``[A-Za-z0-9_-]`` only; anything else (a leading
    digit or dash, say) is left to the regular expression."""
    if text.isascii() and (text.isidentifier() or text.replace("-", "_").isidentifier()):
        return True
    return valid_tool_id(text) is not None


def check_message(body: Any) -> list[str]:
    """Validate a Messages ``Message`` (a body, or ``message_start``'s message); return
    its tool_use ids (in order). Raises :class:`~tpx.errors.ProtocolError` naming the
    first problem.

    The common body is recognised by a fast path of subscripts and class tests: eight
    fields, each of the eight core names read by subscript (``KeyError``: the full check),
    are exactly the core fields; a block of two (four) fields whose names all read is
    exactly a text (tool_use) block; integer token counts. Anything else, valid or not,
    goes through the full check (which the fast path never contradicts).
    """
    if body.__class__ is dict and len(body) == 8:
        try:
            if (
                body["type"] != "message"
                or body["role"] != "assistant"
                or body["id"].__class__ is not str
                or body["model"].__class__ is not str
            ):
                return _check_message(body)
            stop = body["stop_reason"]
            sequence = body["stop_sequence"]
            usage = body["usage"]
            content = body["content"]
            if (
                (stop is not None and (stop.__class__ is not str or stop not in STOP_REASONS))
                or (sequence is not None and sequence.__class__ is not str)
                or usage.__class__ is not dict
                or content.__class__ is not list
                or usage["input_tokens"].__class__ is not int
                or usage["output_tokens"].__class__ is not int
            ):
                return _check_message(body)
            counts = len(usage)
            if counts != 2 and (
                counts != 4
                or usage["cache_read_input_tokens"].__class__ is not int
                or usage["cache_creation_input_tokens"].__class__ is not int
            ):
                return _check_message(body)  # other usage fields, or null counts
            ids: list[str] = []
            for block in content:
                if block.__class__ is not dict:
                    return _check_message(body)
                kind = block["type"]
                if kind == "text":
                    if len(block) != 2 or block["text"].__class__ is not str:
                        return _check_message(body)
                elif kind == "tool_use":
                    tool_id = block["id"]
                    if (
                        len(block) != 4
                        or tool_id.__class__ is not str
                        or block["name"].__class__ is not str
                        or block["input"].__class__ is not dict
                        or not _is_tool_id(tool_id)
                    ):
                        return _check_message(body)
                    ids.append(tool_id)
                else:
                    return _check_message(body)
        except KeyError:
            return _check_message(body)
        if len(ids) > 1 and len(set(ids)) != len(ids):
            return _check_message(body)
        return ids
    return _check_message(body)


def _check_message(body: Any) -> list[str]:
    if body.__class__ is not dict:
        _bad("the message is not a JSON object")
    if body.get("type") != "message":
        _bad(f"type is {quote(body.get('type'))}, expected 'message'")
    if body.get("role") != "assistant":
        _bad(f"role is {quote(body.get('role'))}, expected 'assistant'")
    content = body.get("content")
    if content.__class__ is not list:
        _bad("content is not a list")
    ids: list[str] = []
    position = -1
    for block in content:
        position += 1
        check_block(block, f"content[{position}]")
        if block["type"] == "tool_use":
            ids.append(block["id"])
    if len(ids) > 1 and len(set(ids)) != len(ids):
        duplicated = sorted({i for i in ids if ids.count(i) > 1})
        _bad(f"duplicated tool_use ids [{', '.join(map(quote, duplicated))}]")
    if body.get("id").__class__ is not str:
        _bad("id must be a string")
    if body.get("model").__class__ is not str:
        _bad("model must be a string")
    stop = body.get("stop_reason")
    if stop is not None and (stop.__class__ is not str or stop not in STOP_REASONS):
        _bad(f"stop_reason is {quote(stop)}, not a Messages stop reason")
    sequence = body.get("stop_sequence")
    if sequence is not None and sequence.__class__ is not str:
        _bad("stop_sequence must be a string or null")
    usage = body.get("usage")
    if (
        usage.__class__ is not dict
        or usage.get("input_tokens").__class__ is not int
        or usage.get("output_tokens").__class__ is not int
    ):
        _bad("usage needs integer input_tokens and output_tokens")
    if len(usage) > 2:
        _check_fields(usage, {}, _USAGE[2], "usage")
    for name, spec in _MESSAGE_OPTIONAL.items():
        if name in body:
            _check(body[name], spec, f"message.{name}")
    return ids


def event_type(event: Any) -> str | None:
    """The type of a stream event tpx may hand over, ``None`` for one to drop (an unknown
    but well-formed type). ProtocolError for an event without a name-like type."""
    if event.__class__ is not dict:
        _bad("a stream event is not a JSON object")
    kind = event.get("type")
    if kind.__class__ is not str or _EVENT_NAME(kind) is None:
        _bad(f"a stream event's type is {quote(kind)}, not an event name")
    return kind if kind in EVENT_TYPES else None


def check_event(event: Any) -> bool:
    """Validate one Messages stream event. ``False``: an unknown event type, to drop
    (see the module docstring); ProtocolError when the event is malformed."""
    kind = event_type(event)
    if kind is None:
        return False
    if kind == "content_block_delta":
        if event.get("index").__class__ is not int:
            _bad("content_block_delta.index must be an integer")
        _check(event.get("delta"), _DELTAS, "content_block_delta.delta")
    elif kind == "content_block_start":
        if event.get("index").__class__ is not int:
            _bad("content_block_start.index must be an integer")
        check_block(event.get("content_block"), "content_block_start.content_block")
    elif kind == "content_block_stop":
        if event.get("index").__class__ is not int:
            _bad("content_block_stop.index must be an integer")
    elif kind == "message_start":
        check_message(event.get("message"))
    elif kind == "message_delta":
        if "delta" not in event:
            _bad("message_delta.delta is missing")
        _check(event["delta"], _MESSAGE_DELTA, "message_delta.delta")
        if "usage" not in event:
            _bad("message_delta.usage is missing")
        _check(event["usage"], _DELTA_USAGE, "message_delta.usage")
    return True
