"""Messages request -> Chat Completions request (see the package docstring for the table)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, NoReturn

import attrs
import orjson

from tpx import _safe
from tpx._safe import quote
from tpx.errors import ProtocolError, UnsupportedError
from tpx.transport.translate._result import Translation
from tpx.transport.translate.documents import document_part
from tpx.transport.translate.ids import RAW_ENCODED_ID as _RAW_ENCODED
from tpx.transport.translate.ids import wire_id
from tpx.transport.translate.options import (
    SYSTEM_CLOSE,
    SYSTEM_OPEN,
    apply_options,
    fold_system,
    merge_user_runs,
    system_text,
    thinking_cleared,
    user_value,
)
from tpx.transport.translate.profiles import DEFAULT_PROFILE, Profile, get_profile
from tpx.transport.translate.signing import PROCESS_SIGNER, ThinkingSigner, signer_for
from tpx.transport.translate.signing import SIGNATURE_PREFIX as REASONING_SIGNATURE
from tpx.transport.translate.tools import tool_choice, translate_tools

__all__ = [
    "REASONING_SIGNATURE",
    "TOOL_ERROR_PREFIX",
    "request_to_openai",
    "translate_checked",
    "translate_request",
]

#: Prefix that carries ``is_error: true`` of a tool_result into the tool message text.
TOOL_ERROR_PREFIX = "[tool error]"

# Top-level request fields dropped with a warning: (field, reason).
_DROPPED_FIELDS = {
    "top_k": "top_k has no Chat Completions equivalent",
    "service_tier": "service_tier values do not map onto the provider's tiers",
    "inference_geo": "inference_geo has no Chat Completions equivalent",
    "speed": "speed has no Chat Completions equivalent",
    "diagnostics": "prompt-cache diagnostics have no Chat Completions equivalent",
    "user_profile_id": "user_profile_id has no Chat Completions equivalent",
    "workspace_id": "workspace_id has no Chat Completions equivalent",
}
# Top-level request fields refused: they change what the model can do.
_REFUSED_FIELDS = {
    "mcp_servers": "MCP servers",
    "container": "code-execution containers",
}
_HANDLED_FIELDS = frozenset(
    {
        "cache_control",  # dropped silently: caching never changes a reply's meaning
        "thinking",
        "output_config",
        "output_format",
        "context_management",
        "model",
        "messages",
        "system",
        "tools",
        "tool_choice",
        "stop_sequences",
        "temperature",
        "top_p",
        "max_tokens",
        "metadata",
        "stream",
    }
)
# Block types that exist in the Messages API but have no Chat Completions form.
_UNSUPPORTED_BLOCKS = frozenset(
    {
        "search_result",
        "server_tool_use",
        "web_search_tool_result",
        "web_fetch_tool_result",
        "code_execution_tool_result",
        "bash_code_execution_tool_result",
        "text_editor_code_execution_tool_result",
        "tool_search_tool_result",
        "mcp_tool_use",
        "mcp_tool_result",
        "container_upload",
    }
)
_MISSING = object()
_dumps = orjson.dumps
_CITATIONS_WARNING = "citations on text blocks dropped"
_FOREIGN_THINKING_WARNING = (
    "thinking blocks without a valid tpx signature dropped (another provider's, another "
    "secret's, or edited): never forwarded as the model's own reasoning"
)
_TOOL_IMAGE_WARNING = (
    "images in a tool_result moved to a user message after the tool messages "
    "(Chat Completions tool messages carry text only)"
)
#: The longest tool_use ``arguments`` text a plain message may carry: a JSON text of n
#: characters nests at most n / 2 deep, and a tool input sits 5 levels down (request,
#: messages, message, content, block), so these inputs keep the request within
#: ``_safe.MAX_DEPTH``. A *plain* message: exactly ``role`` + ``content``; content a
#: string or blocks that are exactly ``{type: text, text}``, ``{type, id, name, input}``
#: (tool_use, input no longer than this once serialized) or tool_result ``{type,
#: tool_use_id, content[, is_error]}`` with string content or one plain text block.
#: Everything a plain message holds is read (and type-checked) by the walk, so such
#: messages nest at most 7 levels besides the inputs.
PLAIN_ARGUMENTS = 2 * (_safe.MAX_DEPTH - 5)

#: caller id -> wire id (:func:`tpx.transport.translate.ids.wire_id`, a pure function) for ids
#: translated before: a client resends its whole history every turn, so nearly every
#: tool_use id of a request was decoded for the one before. Bounded (emptied when full;
#: long ids are not kept); dict reads and writes are atomic, so threads may share it.
_WIRE_MEMO: dict[str, str] = {}
_WIRE_MEMO_SIZE = 4096
_WIRE_MEMO_ID_LENGTH = 256


def _memo_wire_id(caller_id: str) -> str:
    """:func:`wire_id` of a non-empty caller id, remembered (see ``_WIRE_MEMO``)."""
    raw = _RAW_ENCODED(caller_id)
    wire = raw[1] if raw is not None else wire_id(caller_id)
    if len(caller_id) <= _WIRE_MEMO_ID_LENGTH:
        if len(_WIRE_MEMO) >= _WIRE_MEMO_SIZE:
            _WIRE_MEMO.clear()
        _WIRE_MEMO[caller_id] = wire
    return wire


#: OpenAI's limit on ``stop``; other OpenAI-compatible servers take more, so more are sent.
OPENAI_MAX_STOP = 4


def _bad(message: str) -> NoReturn:
    """Raise the error for a malformed caller request (HTTP 400)."""
    raise ProtocolError(
        f"invalid Messages request: {message}", status=400, error_type="invalid_request_error"
    )


class _Unanswered(ProtocolError):
    """A user message leaves tool_use ids of the assistant turn before it unanswered.

    The 400 the caller gets, unless the next messages are user messages too: the Messages
    API merges consecutive user messages into one turn, so the translator then retries
    with the merged run. ``tools_at``: where this message's output starts in the
    Chat Completions messages (everything from there on is dropped before the retry).
    """

    def __init__(self, message: str, tools_at: int) -> None:
        super().__init__(
            f"invalid Messages request: {message}", status=400, error_type="invalid_request_error"
        )
        self.tools_at = tools_at


def _unsupported(message: str) -> NoReturn:
    raise UnsupportedError(f"cannot translate to Chat Completions: {message}")


def _text_content(parts: list[dict[str, Any]]) -> str | list[dict[str, Any]]:
    """One text part -> the string itself; anything else -> the list of parts."""
    if len(parts) == 1 and parts[0]["type"] == "text":
        text: str = parts[0]["text"]
        return text
    return parts


def _image_part(block: Mapping[str, Any]) -> dict[str, Any]:
    source = block.get("source")
    if not isinstance(source, dict):
        _bad("image block without a source object")
    kind = source.get("type")
    if kind == "base64":
        media_type = source.get("media_type")
        data = source.get("data")
        if not isinstance(media_type, str) or not isinstance(data, str) or not data:
            _bad("base64 image source needs string media_type and non-empty data")
        url = f"data:{media_type};base64,{data}"
    elif kind == "url":
        url_value = source.get("url")
        if not isinstance(url_value, str) or not url_value:
            _bad("url image source needs a non-empty url")
        url = url_value
    else:
        _unsupported(f"image source of type {quote(kind)} (only base64 and url are carried)")
    return {"type": "image_url", "image_url": {"url": url}}


def _wire_id(caller_id: Any, where: str) -> str:
    if not isinstance(caller_id, str) or not caller_id:
        _bad(f"{where} needs a non-empty string id")
    return wire_id(caller_id)


class _State:
    __slots__ = (
        "cleared",
        "folded",
        "plain",
        "profile",
        "signer",
        "tagged_system",
        "tools_key",
        "warnings",
    )

    def __init__(
        self, profile: Profile = DEFAULT_PROFILE, signer: ThinkingSigner = PROCESS_SIGNER
    ) -> None:
        self.warnings: list[str] = []
        self.profile = profile
        self.signer = signer
        #: indices of the assistant messages whose thinking context_management clears
        self.cleared: frozenset[int] = frozenset()
        #: mid-conversation system texts folded into the first system message
        self.folded: list[str] = []
        #: a mid-conversation system message became a user message (merge pass needed)
        self.tagged_system = False
        #: every message the walk read was *plain* (see ``PLAIN_DEPTH``): the messages
        #: nest at most MAX_DEPTH deep without a depth check; cleared by anything else
        self.plain = True
        #: ``orjson.dumps(request["tools"])`` when the caller has it already (bytes path)
        self.tools_key: bytes | None = None

    def warn(self, message: str) -> None:
        if message not in self.warnings:
            self.warnings.append(message)


def _tool_message(
    block: Mapping[str, Any], wire: str, extra_parts: list[dict[str, Any]], st: _State
) -> dict[str, Any]:
    """A ``role: tool`` message for one tool_result; its images go to *extra_parts*."""
    content = block.get("content")
    is_error = block.get("is_error")
    if content.__class__ is str and (is_error is None or is_error is False):
        return {"role": "tool", "tool_call_id": wire, "content": content}
    parts: list[dict[str, Any]]
    if content is None:
        parts = []
    elif isinstance(content, str):
        parts = [{"type": "text", "text": content}] if content else []
    elif isinstance(content, list):
        parts = []
        images = 0
        for inner in content:
            if not isinstance(inner, dict):
                _bad("tool_result content blocks must be objects")
            kind = inner.get("type")
            if kind == "text":
                text = inner.get("text")
                if not isinstance(text, str):
                    _bad("text block without a string text")
                if text:
                    parts.append({"type": "text", "text": text})
            elif kind == "image":
                extra_parts.append(_image_part(inner))
                images += 1
            elif kind == "document":  # tool messages carry text only: always its text
                parts.append(document_part(inner, _text_only(st.profile), st.warn))
            elif kind.__class__ is str and kind in _UNSUPPORTED_BLOCKS:
                _unsupported(f"{kind} blocks inside a tool_result")
            else:
                _unsupported(f"unknown tool_result content block type {quote(kind)}")
        if images:
            st.warn(_TOOL_IMAGE_WARNING)
            parts.append(
                {
                    "type": "text",
                    "text": f"[{images} image(s) from this tool result follow in the next "
                    "user message]",
                }
            )
    else:
        _bad("tool_result content must be a string or a list of blocks")
    if is_error is True:
        if parts and parts[0]["type"] == "text":
            parts[0] = {"type": "text", "text": f"{TOOL_ERROR_PREFIX} {parts[0]['text']}"}
        else:
            parts.insert(0, {"type": "text", "text": TOOL_ERROR_PREFIX})
    elif is_error is not None and is_error is not False:  # 0 == False, but is not a bool
        _bad("tool_result is_error must be a boolean")
    return {"role": "tool", "tool_call_id": wire, "content": _text_content(parts) if parts else ""}


def _non_finite(value: Any) -> bool:
    """*value* holds a float NaN or Infinity somewhere (JSON has no such numbers)."""
    if value.__class__ is float:
        return not math.isfinite(value)
    if isinstance(value, dict):
        return any(_non_finite(v) for v in value.values())
    if isinstance(value, list | tuple):
        return any(_non_finite(v) for v in value)
    return isinstance(value, float) and not math.isfinite(value)


def _refuse_non_finite_inputs(request: Mapping[str, Any]) -> None:
    """Refuse NaN / Infinity in a tool_use input (orjson would write ``null``, silently).

    Only the dict entry point needs this, once the request translated (so its shape is
    known good): JSON bytes cannot hold such numbers (``orjson.loads`` refuses them), so
    the bytes hot path pays nothing.
    """
    for message in request["messages"]:
        content = message["content"]
        if message["role"] == "assistant" and content.__class__ is list:
            for block in content:
                if block.get("type") == "tool_use" and _non_finite(block["input"]):
                    _bad(f"tool_use {quote(block['id'])}: input holds NaN or Infinity (not JSON)")


def _tool_use_slow(block: dict[str, Any]) -> NoReturn:
    """Raise the precise error for a tool_use block the fast path rejected."""
    caller_id = block.get("id", "")
    _wire_id(caller_id, "tool_use")
    name = block.get("name")
    if not isinstance(name, str) or not name:
        _bad("tool_use needs a non-empty string name")
    _bad(f"tool_use {quote(caller_id)}: input must be an object")


def _assistant(content: Any, out: list[dict[str, Any]], st: _State, index: int) -> dict[str, str]:
    """Append the assistant message; return its tool calls' caller id -> wire id, in order."""
    callers: dict[str, str] = {}
    if content.__class__ is str:
        if content:
            out.append({"role": "assistant", "content": content})
        else:
            st.warn(f"messages[{index}]: empty assistant message dropped")
        return callers
    if content.__class__ is not list:
        _bad(f"messages[{index}].content must be a string or a list of blocks")
    # The common turn has at most one text: it is kept as a string (``first``) and the
    # list of parts is only built from a second text on; ``reasoning`` is rare, built lazily.
    first: str | None = None
    parts: list[dict[str, Any]] | None = None
    calls: list[dict[str, Any]] = []
    reasoning: list[str] | None = None
    for block in content:
        if block.__class__ is not dict:
            _bad(f"messages[{index}].content blocks must be objects")
        kind = block.get("type")
        if kind == "tool_use":
            try:  # subscripts (cheaper than .get); a missing field: the precise error
                caller_id = block["id"]
                name = block["name"]
                tool_input = block["input"]
            except KeyError:
                _tool_use_slow(block)
            if (
                caller_id.__class__ is not str
                or name.__class__ is not str
                or tool_input.__class__ is not dict
                or not caller_id
                or not name
            ):
                _tool_use_slow(block)
            if caller_id in callers:
                _bad(f"messages[{index}]: tool_use ids must be unique")
            wire = _WIRE_MEMO.get(caller_id)
            if wire is None:
                wire = _memo_wire_id(caller_id)
            try:
                arguments = _dumps(tool_input).decode()
            except TypeError as exc:
                _bad(f"tool_use {quote(caller_id)}: input is not JSON-serialisable ({exc})")
            if len(block) != 4 or len(arguments) > PLAIN_ARGUMENTS:
                st.plain = False
            calls.append(
                {
                    "id": wire,
                    "type": "function",
                    "function": {"name": name, "arguments": arguments},
                }
            )
            callers[caller_id] = wire
        elif kind == "text":
            text = block.get("text")
            if text.__class__ is not str:
                _bad("text block without a string text")
            if len(block) != 2:
                st.plain = False
            if text:
                if first is None:
                    first = text
                elif parts is None:
                    parts = [{"type": "text", "text": first}, {"type": "text", "text": text}]
                else:
                    parts.append({"type": "text", "text": text})
            if block.get("citations"):
                st.warn(_CITATIONS_WARNING)
        elif kind == "thinking":
            st.plain = False
            thought = block.get("thinking")
            if thought.__class__ is not str:
                _bad("thinking block without a string thinking")
            if not st.signer.verify(thought, block.get("signature")):
                st.warn(_FOREIGN_THINKING_WARNING)
            elif thought and index not in st.cleared and st.profile.reasoning_back:
                if reasoning is None:
                    reasoning = [thought]
                else:
                    reasoning.append(thought)
        elif kind == "redacted_thinking":
            st.plain = False
            st.warn("redacted_thinking blocks dropped: encrypted for another provider")
        elif kind == "image":
            _unsupported("images in assistant messages")
        elif kind.__class__ is str and kind in _UNSUPPORTED_BLOCKS:
            _unsupported(f"{kind} blocks")
        else:
            _unsupported(f"unknown content block type {quote(kind)} in an assistant message")
    if first is None and not calls:
        if reasoning:
            field: Any = st.profile.reasoning_back  # set whenever reasoning is collected
            out.append({"role": "assistant", "content": "", field: "".join(reasoning)})
        else:
            st.warn(f"messages[{index}]: assistant message with nothing to carry dropped")
        return callers
    message: dict[str, Any] = {"role": "assistant"}
    if first is not None:
        message["content"] = first if parts is None else parts
    if calls:
        message["tool_calls"] = calls
    if reasoning:
        back: Any = st.profile.reasoning_back  # set whenever reasoning is collected
        message[back] = "".join(reasoning)
    out.append(message)
    return callers


def _single_text(result: Any) -> str | None:
    """The text of a tool_result content that is exactly one plain text block, else None."""
    if result.__class__ is list and len(result) == 1:
        only = result[0]
        if only.__class__ is dict and len(only) == 2 and only.get("type") == "text":
            text = only.get("text")
            if text.__class__ is str:
                return text
    return None


def _user(
    content: Any,
    out: list[dict[str, Any]],
    st: _State,
    index: int | str,
    wire_of: dict[str, str],
) -> None:
    """Append the tool messages answering *callers*, then the user's other content.

    *index* labels errors and warnings (``"3-4"`` for a merged run of user messages).
    """
    if content.__class__ is str:
        if wire_of:
            raise _Unanswered(
                f"messages[{index}] must answer the tool_use ids of the assistant turn before it",
                len(out),
            )
        if content:
            out.append({"role": "user", "content": content})
        else:
            st.warn(f"messages[{index}]: empty user message dropped")
        return
    if content.__class__ is not list:
        _bad(f"messages[{index}].content must be a string or a list of blocks")
    # The user's other blocks (built on first need: most tool turns have none).
    parts: list[dict[str, Any]] | None = None
    # Tool messages answering the calls in the calls' order (the common case) go straight
    # to *out*; ``answers`` (caller id -> tool message) is only built, from those already
    # appended, once a result arrives out of order, and puts them in order at the end.
    tools_at = len(out)
    expected = iter(wire_of)
    answers: dict[str, dict[str, Any]] | None = None
    for block in content:
        if block.__class__ is not dict:
            _bad(f"messages[{index}].content blocks must be objects")
        kind = block.get("type")
        if kind == "tool_result":
            caller_id: str = block.get("tool_use_id", "")
            if answers is None and caller_id.__class__ is str and caller_id == next(expected, None):
                wire = wire_of[caller_id]  # the next call, answered in order: the common case
            else:
                found = wire_of.get(caller_id) if caller_id.__class__ is str else None
                if found is None:
                    _bad(
                        f"messages[{index}]: tool_result {quote(caller_id)} answers no tool_use of "
                        "the assistant turn before it (or one its user turn already answered)"
                    )
                wire = found
                if answers is None:  # out of order
                    # the ones appended so far answer the first calls, in order
                    answers = dict(zip(wire_of, out[tools_at:], strict=False))
                    del out[tools_at:]
                if caller_id in answers:
                    _bad(f"messages[{index}]: tool_use {quote(caller_id)} answered twice")
            result = block.get("content")
            is_error = block.get("is_error")
            message: dict[str, Any]
            if result.__class__ is str and (is_error is None or is_error is False):
                message = {"role": "tool", "tool_call_id": wire, "content": result}
                if len(block) != 3 and (len(block) != 4 or "is_error" not in block):
                    st.plain = False
            else:
                text = None  # == _single_text(result) for a result that is no error, inlined
                if (
                    (is_error is None or is_error is False)
                    and result.__class__ is list
                    and len(result) == 1
                ):
                    only = result[0]
                    if only.__class__ is dict and len(only) == 2 and only.get("type") == "text":
                        text = only.get("text")
                        if text.__class__ is not str:
                            text = None
                if text is not None:
                    message = {"role": "tool", "tool_call_id": wire, "content": text}
                    if len(block) != 3 and (len(block) != 4 or "is_error" not in block):
                        st.plain = False
                else:
                    if parts is None:
                        parts = []
                    message = _tool_message(block, wire, parts, st)
                    if (  # plain: an error result of a string or one plain text block
                        is_error is not True
                        or len(block) != 4
                        or (result.__class__ is not str and _single_text(result) is None)
                    ):
                        st.plain = False
            if answers is None:
                out.append(message)
            else:
                answers[caller_id] = message
        elif kind == "text":
            text = block.get("text")
            if text.__class__ is not str:
                _bad("text block without a string text")
            if len(block) != 2:
                st.plain = False
            if text:
                if parts is None:
                    parts = []
                parts.append({"type": "text", "text": text})
            if block.get("citations"):
                st.warn(_CITATIONS_WARNING)
        elif kind == "image":
            st.plain = False
            if parts is None:
                parts = []
            parts.append(_image_part(block))
        elif kind == "document":
            st.plain = False
            if parts is None:
                parts = []
            parts.append(document_part(block, st.profile, st.warn))
        elif kind in ("thinking", "redacted_thinking"):
            st.plain = False
            st.warn(f"{kind} blocks in user messages dropped")
        elif kind.__class__ is str and kind in _UNSUPPORTED_BLOCKS:
            _unsupported(f"{kind} blocks")
        else:
            _unsupported(f"unknown content block type {quote(kind)} in a user message")
    if answers is None:
        answered = len(out) - tools_at
        if answered != len(wire_of):
            missing = list(wire_of)[answered:]
            raise _Unanswered(
                f"messages[{index}]: tool_use ids without a tool_result: "
                f"[{', '.join(map(quote, missing))}]",
                tools_at,
            )
    else:
        if len(answers) != len(wire_of):
            missing = [caller for caller in wire_of if caller not in answers]
            raise _Unanswered(
                f"messages[{index}]: tool_use ids without a tool_result: "
                f"[{', '.join(map(quote, missing))}]",
                tools_at,
            )
        out.extend(map(answers.__getitem__, wire_of))  # one tool message per call, in order
    if parts:
        out.append({"role": "user", "content": _text_content(parts)})
    elif not wire_of:
        st.warn(f"messages[{index}]: empty user message dropped")


#: How Claude Code's first system block begins (a per-version, per-entrypoint line).
BILLING_HEADER = "x-anthropic-billing-header:"


def _system(system: Any, out: list[dict[str, Any]], st: _State) -> None:
    if isinstance(system, str):
        if system:
            out.append({"role": "system", "content": system})
        return
    if not isinstance(system, list):
        _bad("system must be a string or a list of text blocks")
    parts: list[dict[str, Any]] = []
    for position, block in enumerate(system):
        if not isinstance(block, dict) or block.get("type") != "text":
            _bad("system blocks must be text blocks")
        text = block.get("text")
        if not isinstance(text, str):
            _bad("text block without a string text")
        if position == 0 and st.profile.drop_billing_header and text.startswith(BILLING_HEADER):
            continue  # varies between versions and requests: it would defeat prefix caches
        if text:
            parts.append({"type": "text", "text": text})
        if block.get("citations"):
            st.warn(_CITATIONS_WARNING)
    if parts:
        out.append({"role": "system", "content": _text_content(parts)})


def _number(value: Any, name: str) -> float | int:
    if isinstance(value, bool) or not isinstance(value, int | float):
        _bad(f"{name} must be a number")
    if isinstance(value, float) and not math.isfinite(value):
        _bad(f"{name} must be a finite number (NaN and Infinity are not JSON)")
    return value


def _is_user(message: Any) -> bool:
    return message.__class__ is dict and message.get("role") == "user"


def _user_run_end(messages: list[Any], start: int) -> int:
    """One past the last message of the run of consecutive user messages at *start*."""
    end = start + 1
    while end < len(messages) and _is_user(messages[end]):
        end += 1
    return end


def _merged_content(messages: list[Any], start: int, end: int) -> list[Any]:
    """The content blocks of user messages ``start..end-1`` as one turn, in order (the
    Messages API merges consecutive user messages); string content becomes a text block."""
    blocks: list[Any] = []
    for index in range(start, end):
        content = messages[index].get("content", _MISSING)
        if content is _MISSING:
            _bad(f"messages[{index}] has no content")
        if content.__class__ is str:
            if content:
                blocks.append({"type": "text", "text": content})
        elif content.__class__ is list:
            blocks.extend(content)
        else:
            _bad(f"messages[{index}].content must be a string or a list of blocks")
    return blocks


def translate_request(request: Any, model: str | None, st: _State) -> dict[str, Any]:
    """Translate a decoded Messages request into a Chat Completions body."""
    if not isinstance(request, dict):
        if not isinstance(request, Mapping):
            _bad("the body must be a JSON object")
        request = dict(request)
    for key in request:
        if key not in _HANDLED_FIELDS:
            if key in _DROPPED_FIELDS:
                st.warn(f"{key} dropped: {_DROPPED_FIELDS[key]}")
            elif key in _REFUSED_FIELDS:
                _unsupported(f"{_REFUSED_FIELDS[key]} ({quote(key)})")
            else:
                _unsupported(f"unknown request field {quote(key)}")
    name = model if model is not None else request.get("model")
    if not isinstance(name, str) or not name:
        _bad("model must be a non-empty string")
    body: dict[str, Any] = {"model": name}
    messages = request.get("messages")
    if not isinstance(messages, list):
        _bad("messages must be a list")
    if "context_management" in request:
        st.cleared = thinking_cleared(request, messages, st.warn)
    out: list[dict[str, Any]] = []
    if "system" in request:
        _system(request["system"], out, st)
    placement = st.profile.system
    no_calls: dict[str, str] = {}  # shared by the turns without calls; never mutated
    callers = no_calls
    last = len(messages) - 1
    entries = enumerate(messages)
    for index, message in entries:
        if message.__class__ is not dict:
            _bad(f"messages[{index}] must be an object")
        role = message.get("role")
        content = message.get("content", _MISSING)
        if content is _MISSING:
            _bad(f"messages[{index}] has no content")
        if len(message) != 2:
            st.plain = False
        if role == "user":
            try:
                _user(content, out, st, index, callers)
            except _Unanswered as unanswered:
                # Consecutive user messages are one turn (the Messages API merges them):
                # the rest of the run may hold the missing tool_results. Retry with the
                # whole run as one message (no cost unless a message leaves calls open).
                end = _user_run_end(messages, index)
                if end == index + 1:
                    raise
                del out[unanswered.tools_at :]
                st.plain = False
                merged = _merged_content(messages, index, end)
                _user(merged, out, st, f"{index}-{end - 1}", callers)
                for _ in range(end - index - 1):
                    next(entries)  # merged above
            callers = no_calls
        elif role == "assistant":
            if callers:
                _bad(f"messages[{index - 1}]: tool_use ids without a tool_result")
            callers = _assistant(content, out, st, index)
            if index == last:
                if callers:
                    _bad("the last assistant message has tool_use blocks without tool_results")
                st.warn(
                    "a trailing assistant message (prefill) is sent as a complete turn; "
                    "the provider may not continue it"
                )
        elif role == "system":
            st.plain = False
            if callers:
                _bad(f"messages[{index}]: a system message between tool_use and tool_result")
            text = system_text(content, index)
            if not text:
                st.warn(f"messages[{index}]: empty system message dropped")
            elif placement == "anywhere":
                out.append({"role": "system", "content": text})
            elif placement == "first":
                st.folded.append(text)
            else:
                out.append({"role": "user", "content": f"{SYSTEM_OPEN}{text}{SYSTEM_CLOSE}"})
                st.tagged_system = True
        else:
            _bad(
                f"messages[{index}].role must be 'user', 'assistant' or 'system', not {quote(role)}"
            )
    if not any(message["role"] != "system" for message in out):  # stops at the first
        _bad(
            "no message left to send: the conversation is empty once empty messages are "
            "dropped (Chat Completions providers reject a request without messages)"
        )
    if st.tagged_system:
        out = merge_user_runs(out)
    extra_system = apply_options(request, body, st.profile, st.warn)
    if extra_system is not None:
        st.folded.append(extra_system)
    fold_system(out, st.folded)
    body["messages"] = out
    if "tools" in request:
        tools = translate_tools(request["tools"], st.profile, st.warn, st.tools_key)
        if tools:
            body["tools"] = tools
    else:
        tools = []
    if "tool_choice" in request:
        tool_choice(request["tool_choice"], body, tools, st.warn)
    max_tokens = request.get("max_tokens")
    if max_tokens.__class__ is not int or max_tokens < 1:
        if "max_tokens" not in request:
            _bad("max_tokens is required (the Messages API requires it)")
        _bad("max_tokens must be a positive integer")
    ceiling = st.profile.max_tokens_ceiling
    if ceiling is not None and max_tokens > ceiling:
        st.warn(
            f"max_tokens {max_tokens} clamped to {ceiling}: the most profile "
            f"{st.profile.name!r} accepts"
        )
        max_tokens = ceiling
    body[st.profile.token_field] = max_tokens
    if "temperature" in request:
        body["temperature"] = _number(request["temperature"], "temperature")
    if "top_p" in request:
        body["top_p"] = _number(request["top_p"], "top_p")
    if "stop_sequences" in request:
        stops = request["stop_sequences"]
        if not isinstance(stops, list) or not all(isinstance(s, str) for s in stops):
            _bad("stop_sequences must be a list of strings")
        if not all(stops):
            _bad("stop_sequences must not contain empty strings")
        if len(stops) > OPENAI_MAX_STOP:
            st.warn(
                f"stop_sequences has {len(stops)} entries: OpenAI accepts at most "
                f"{OPENAI_MAX_STOP} (all are sent; other OpenAI-compatible servers take more)"
            )
        if stops:
            body["stop"] = list(stops)
    if "metadata" in request:
        metadata = request["metadata"]
        if not isinstance(metadata, dict):
            _bad("metadata must be an object")
        for key, value in metadata.items():
            if key == "user_id":
                if value is not None:
                    if not isinstance(value, str):
                        _bad("metadata.user_id must be a string")
                    if st.profile.user_field:
                        body["user"] = user_value(value, st.profile)
                    else:
                        st.warn(
                            f"metadata.user_id dropped: profile {st.profile.name!r} has no user"
                        )
            else:
                st.warn(f"metadata.{key} dropped: no Chat Completions equivalent")
    if "stream" in request:
        stream = request["stream"]
        if not isinstance(stream, bool):
            _bad("stream must be a boolean")
        if stream:
            body["stream"] = True
            body["stream_options"] = {"include_usage": True}
    return body


def request_to_openai(
    request: Mapping[str, Any],
    *,
    model: str | None = None,
    profile: str | Profile | None = None,
    secret: str | bytes | ThinkingSigner | None = None,
) -> Translation:
    """Translate a Messages request into a Chat Completions request.

    *model* overrides the request's ``model``. *profile* names the upstream kind
    (:mod:`tpx.transport.translate.profiles`; default ``generic``); *secret* is the thinking
    secret that verifies thinking blocks coming back (:mod:`tpx.transport.translate.signing`;
    default: the per-process one). Raises :class:`~tpx.errors.ProtocolError`
    (status 400) for a malformed request and :class:`~tpx.errors.UnsupportedError` for a
    feature that cannot be carried.
    """
    if _safe.too_deep(request):
        _bad(f"the request nests deeper than {_safe.MAX_DEPTH} levels")
    return translate_checked(request, model=model, profile=profile, secret=secret)


def translate_checked(
    request: Mapping[str, Any],
    *,
    model: str | None = None,
    profile: str | Profile | None = None,
    secret: str | bytes | ThinkingSigner | None = None,
) -> Translation:
    """:func:`request_to_openai` for a request its caller has already held to the depth
    rule (:func:`tpx._safe.too_deep`): the exchange checks every request at
    ``CallerSend`` and translates it at once, so the walk is not done twice."""
    st = _State(get_profile(profile), signer_for(secret))
    body = translate_request(request, model, st)
    _refuse_non_finite_inputs(request)
    return Translation(body, tuple(st.warnings))


def new_state(
    profile: str | Profile | None = None, secret: str | bytes | ThinkingSigner | None = None
) -> _State:
    """A fresh translation state (for the bytes-level entry point)."""
    return _State(get_profile(profile), signer_for(secret))


def _text_only(profile: Profile) -> Profile:
    """*profile* without file parts (for documents inside tool messages)."""
    if not profile.file_parts:
        return profile
    return attrs.evolve(profile, file_parts=False)
