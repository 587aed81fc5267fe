"""Chat Completions response -> Messages response (see the package docstring for the table)."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from typing import Any, NoReturn

import orjson

from tpx import _safe
from tpx._safe import quote
from tpx.errors import ProtocolError
from tpx.transport.translate._result import Translation
from tpx.transport.translate.ids import NONCE_BITS, new_nonce, to_caller_id
from tpx.transport.translate.ids import RAW_FOREIGN_ID as _RAW_OK
from tpx.transport.translate.profiles import Profile, get_profile
from tpx.transport.translate.signing import PROCESS_SIGNER, ThinkingSigner, signer_for

__all__ = [
    "check_nonce",
    "error_message",
    "is_first_choice",
    "message_id_of",
    "parse_arguments",
    "reasoning_text",
    "response_to_messages",
    "stable_message_id",
    "stop_reason",
    "translate_response",
    "usage_to_messages",
]

_loads = orjson.loads
_may_be_deep = _safe.bytes_may_be_too_deep
_parsed_too_deep = _safe.parsed_too_deep
#: Arguments texts at most this long cannot nest deeper than the depth rule allows.
_SHALLOW = 2 * _safe.MAX_DEPTH
#: ``"tpxr<position>-"`` for the first positions: the fast path formats no int per call.
_RAW_HEADS = tuple(f"tpxr{position}-" for position in range(64))
# Key-ordered templates of the fast path's output, copied (never mutated) then filled in:
# a copy plus a few stores is cheaper than building the dicts key by key.
_BODY_TEMPLATE: dict[str, Any] = {
    "id": None,
    "type": "message",
    "role": "assistant",
    "model": None,
    "content": None,
    "stop_reason": None,
    "stop_sequence": None,
    "usage": None,
}
_USAGE_TEMPLATE: dict[str, Any] = {
    "input_tokens": 0,
    "output_tokens": 0,
    "cache_read_input_tokens": 0,
    "cache_creation_input_tokens": 0,
}
_getrandbits = NONCE_BITS
_JSONDecodeError = orjson.JSONDecodeError

_FINISH = {
    "stop": "end_turn",
    "length": "max_tokens",
    "tool_calls": "tool_use",
    "function_call": "tool_use",
    "content_filter": "refusal",
}


def _bad(message: str) -> NoReturn:
    raise ProtocolError(f"not a Chat Completions response: {message}")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def is_first_choice(choice: Mapping[str, Any]) -> bool:
    """*choice* is the one tpx uses: ``index`` the integer 0 (not ``false`` / ``0.0``), or
    no / a null ``index`` (some servers omit it)."""
    index = choice.get("index")
    return index is None or (index.__class__ is int and index == 0)


def first_choice(choices: list[Any], warnings: list[str]) -> dict[str, Any]:
    """The choice with ``index`` 0 (:func:`is_first_choice`), whatever its position; the
    others are dropped with a warning. None -> ProtocolError."""
    chosen: dict[str, Any] | None = None
    for position, choice in enumerate(choices):
        if choice.__class__ is not dict:
            _bad(f"choices[{position}] must be an object")
        if chosen is None and is_first_choice(choice):
            chosen = choice
    if chosen is None:
        _bad("no choice with index 0")
    if len(choices) > 1:
        warnings.append(f"{len(choices) - 1} extra choice(s) dropped; only choice 0 is used")
    return chosen


def error_message(body: Mapping[str, Any]) -> str | None:
    """The provider's message if *body* is an error body (OpenAI, vLLM or Messages shape)."""
    error = body.get("error")
    if isinstance(error, Mapping):
        message = error.get("message")
        kind = error.get("type") or error.get("code")
        text = message if isinstance(message, str) else orjson.dumps(error).decode()
        return f"{kind}: {text}" if isinstance(kind, str) and kind else text
    if isinstance(error, str):
        return error
    if body.get("object") == "error" or body.get("type") == "error":
        message = body.get("message")
        return message if isinstance(message, str) else orjson.dumps(dict(body)).decode()
    return None


def parse_arguments(raw: Any, position: int = 0, name: str = "") -> dict[str, Any]:
    """A tool call's ``arguments`` as an object.

    A JSON string holding an object, an already-parsed object (llama.cpp), and the
    empty / all-blank string or a missing value (no-parameter tools) are accepted;
    anything else raises :class:`~tpx.errors.ProtocolError` -- never a guess.
    *position* and *name* only label the error message.
    """
    call = f"{position} ({name})"
    if raw.__class__ is str:
        if not raw or raw.isspace():
            return {}
        problem: str | None = None
        try:
            value = _safe.loads(raw)
        except ValueError as exc:  # not JSON, or nested deeper than the depth rule
            problem = str(exc)
        if problem is not None:
            raise ProtocolError(f"tool call {call}: arguments are not valid JSON ({problem})")
        if value.__class__ is not dict:
            raise ProtocolError(
                f"tool call {call}: arguments must be a JSON object, got {type(value).__name__}"
            )
        return value
    if isinstance(raw, dict):
        return raw
    if raw is None:
        return {}
    raise ProtocolError(f"tool call {call}: arguments must be a JSON string or an object")


def stop_reason(
    choice: Mapping[str, Any], has_tool_calls: bool, refused: bool, warnings: list[str]
) -> tuple[str, str | None]:
    """Messages ``(stop_reason, stop_sequence)`` for a choice (a chunk's choice works too)."""
    if has_tool_calls:
        return "tool_use", None
    finish = choice.get("finish_reason")
    if refused:
        return "refusal", None
    if finish == "stop":
        matched = choice.get("stop_reason")  # vLLM: the stop string (or a token id)
        if not isinstance(matched, str):
            matched = choice.get("matched_stop")  # SGLang
        if isinstance(matched, str) and matched:
            return "stop_sequence", matched
        return "end_turn", None
    mapped = _FINISH.get(finish) if isinstance(finish, str) else None
    if mapped is None:
        warnings.append(f"unknown finish_reason {quote(finish)} reported as end_turn")
        return "end_turn", None
    if mapped == "tool_use":
        warnings.append(f"finish_reason {quote(finish)} without tool calls reported as end_turn")
        return "end_turn", None
    return mapped, None


def usage_to_messages(usage: Any, warnings: list[str]) -> dict[str, Any]:
    """Messages ``usage`` from Chat Completions ``usage`` (missing -> zeros, with a warning)."""
    if usage is None:
        warnings.append("the response carried no usage; zeros reported")
        return {
            "input_tokens": 0,
            "output_tokens": 0,
            "cache_read_input_tokens": 0,
            "cache_creation_input_tokens": 0,
        }
    if not isinstance(usage, Mapping):
        _bad("usage must be an object")
    prompt = usage.get("prompt_tokens", 0)
    completion = usage.get("completion_tokens", 0)
    details = usage.get("prompt_tokens_details")
    cached = details.get("cached_tokens") if isinstance(details, Mapping) else None
    if cached is None:
        cached = 0
    if not (_is_int(prompt) and _is_int(completion) and _is_int(cached)):
        _bad("usage token counts must be integers")
    if prompt < 0 or completion < 0 or cached < 0:
        _bad("usage token counts must not be negative")
    return {
        "input_tokens": max(prompt - cached, 0),
        "output_tokens": completion,
        "cache_read_input_tokens": cached,
        "cache_creation_input_tokens": 0,
    }


_MESSAGE_ID = re.compile(r"[A-Za-z0-9_-]{1,200}")


def message_id_of(response: Mapping[str, Any]) -> str:
    """The Messages id of a completion (or its first chunk): ``msg_`` + the provider's id
    (``chatcmpl-1`` -> ``msg_chatcmpl-1``; one already of the ``msg_`` form is kept), or,
    for a missing id or one of other characters, :func:`stable_message_id`."""
    raw = response.get("id")
    if raw.__class__ is not str or _MESSAGE_ID.fullmatch(raw) is None:
        return stable_message_id(response)
    return raw if raw.startswith("msg_") else "msg_" + raw


def stable_message_id(response: Mapping[str, Any]) -> str:
    """A stable Messages id for a response without one: a hash of its canonical JSON."""
    try:
        canonical = orjson.dumps(response, default=quote, option=orjson.OPT_SORT_KEYS)
    except TypeError:  # nested deeper than orjson writes: never repr (it recurses)
        canonical = quote(response).encode()
    return "msg_tpx_" + hashlib.sha256(canonical).hexdigest()[:32]


def _text_blocks(content: Any, blocks: list[dict[str, Any]]) -> None:
    if isinstance(content, str):
        if content:
            blocks.append({"type": "text", "text": content})
    elif isinstance(content, list):
        for part in content:
            if not isinstance(part, Mapping) or part.get("type") != "text":
                _bad("message content parts must be text parts")
            text = part.get("text")
            if not isinstance(text, str):
                _bad("a text part needs a string text")
            if text:
                blocks.append({"type": "text", "text": text})
    elif content is not None:
        _bad("message content must be a string, a list of text parts or null")


def _tool_use(call: Any, position: int, nonce: str) -> dict[str, Any]:
    if call.__class__ is not dict:
        _bad(f"tool_calls[{position}] must be an object")
    kind = call.get("type")
    if kind is not None and kind != "function":
        _bad(f"tool_calls[{position}] has unsupported type {quote(kind)}")
    function = call.get("function")
    if function.__class__ is not dict:
        _bad(f"tool_calls[{position}].function must be an object")
    foreign = call.get("id")
    if foreign is not None and foreign.__class__ is not str:
        _bad(f"tool_calls[{position}].id must be a string")
    name = function.get("name")
    if name.__class__ is not str or not name:
        _bad(f"tool_calls[{position}].function.name must be a non-empty string")
    return {
        "type": "tool_use",
        "id": to_caller_id(foreign, position, nonce),
        "name": name,
        "input": parse_arguments(function.get("arguments"), position, name),
    }


def _fast_response(response: Any, model: str | None, nonce: str | None) -> dict[str, Any] | None:
    """The common case of :func:`translate_response`, or ``None`` to take the general path.

    Taken only for a body that needs no warning and raises no error: one choice, a message
    of exactly ``role`` + ``content`` (+ a non-empty ``tool_calls``), string or null content,
    well-formed function calls with JSON-object arguments, ``finish_reason: stop`` without a
    stop string (or tool calls), non-negative integer usage, a string id and model.
    Everything else -- including every error -- returns ``None`` before any side effect, and
    the general path then produces exactly what it always did. Subscripts (``KeyError`` ->
    ``None``) instead of ``.get`` keep it cheap.
    """
    try:
        choices = response["choices"]
        if choices.__class__ is not list or len(choices) != 1:
            return None
        choice = choices[0]
        if choice.__class__ is not dict:
            return None
        index = choice["index"]
        if index.__class__ is not int or index != 0:
            return None  # the general path tells a null index from the rest
        message = choice["message"]
        if message.__class__ is not dict or "role" not in message:
            return None
        content = message["content"]
        blocks: list[dict[str, Any]]
        if content.__class__ is str:
            blocks = [{"type": "text", "text": content}] if content else []
        elif content is None:
            blocks = []
        else:
            return None
        if len(message) == 2:
            if choice["finish_reason"] != "stop" or (
                # == .get(...) is not None, without two method calls
                ("stop_reason" in choice and choice["stop_reason"] is not None)
                or ("matched_stop" in choice and choice["matched_stop"] is not None)
            ):
                return None
            reason = "end_turn"
        else:
            calls = message["tool_calls"]
            if len(message) != 3 or calls.__class__ is not list or not calls:
                return None
            if nonce is None:  # == new_nonce(), faster than formatting the int
                nonce = _getrandbits(48).to_bytes(6).hex()  # big-endian by default
            position = -1
            for call in calls:
                position += 1  # cheaper than enumerate() for 1-3 calls
                if call.__class__ is not dict or call["type"] != "function":
                    return None
                function = call["function"]
                foreign = call["id"]
                if function.__class__ is not dict or foreign.__class__ is not str:
                    return None
                name = function["name"]
                raw = function["arguments"]
                if name.__class__ is not str or not name or raw.__class__ is not str:
                    return None
                arguments = _loads(raw)
                if arguments.__class__ is not dict:
                    return None
                if len(raw) > _SHALLOW and _may_be_deep(raw) and _parsed_too_deep(arguments):
                    return None  # the general path refuses it
                # An ASCII identifier ([A-Za-z_][A-Za-z0-9_]*, e.g. OpenAI's call_...) is
                # raw-able; the cheaper test first, the exact one for everything else.
                if (foreign.isascii() and foreign.isidentifier()) or _RAW_OK(foreign) is not None:
                    caller_id = f"{_RAW_HEADS[position]}{nonce}_{foreign}"  # IndexError past 63
                else:
                    caller_id = to_caller_id(foreign, position, nonce)
                blocks.append(
                    {"type": "tool_use", "id": caller_id, "name": name, "input": arguments}
                )
            reason = "tool_use"
        raw_usage = response["usage"]
        if raw_usage.__class__ is not dict:
            return None
        prompt = raw_usage["prompt_tokens"]
        completion = raw_usage["completion_tokens"]
        cached = 0  # == the .get chain of the general path, without method calls
        if "prompt_tokens_details" in raw_usage:
            details = raw_usage["prompt_tokens_details"]
            if details.__class__ is dict and "cached_tokens" in details:
                cached = details["cached_tokens"]
                if cached is None:
                    cached = 0
        message_id = response["id"]
        name = model if model is not None else response["model"]
    except (KeyError, IndexError, _JSONDecodeError):
        return None
    if (
        prompt.__class__ is not int
        or completion.__class__ is not int
        or cached.__class__ is not int
        or prompt < 0  # a negative count: the general path refuses it
        or completion < 0
        or cached < 0
        or message_id.__class__ is not str
        or not message_id
        or name.__class__ is not str
        or not name
    ):
        return None
    body = _BODY_TEMPLATE.copy()
    body["id"] = message_id if message_id.startswith("msg_") else message_id_of(response)
    body["model"] = name
    body["content"] = blocks
    body["stop_reason"] = reason
    usage = body["usage"] = _USAGE_TEMPLATE.copy()
    usage["input_tokens"] = prompt - cached if prompt > cached else 0
    usage["output_tokens"] = completion
    usage["cache_read_input_tokens"] = cached
    return body


def reasoning_text(message: Mapping[str, Any], where: str = "message") -> str | None:
    """The reasoning text of a reply message or delta: ``reasoning_content`` (DeepSeek,
    llama.cpp, SGLang, older vLLM) or ``reasoning`` (vLLM >= 0.26, Ollama, OpenRouter)."""
    for field in ("reasoning_content", "reasoning"):
        value = message.get(field)
        if value is not None:
            if value.__class__ is not str:
                raise ProtocolError(
                    f"not a Chat Completions response: {where}.{field} must be a string"
                )
            if value:
                return value
    return None


def translate_response(
    response: Any,
    model: str | None,
    warnings: list[str],
    nonce: str | None = None,
    signer: ThinkingSigner = PROCESS_SIGNER,
) -> dict[str, Any]:
    """Translate a decoded Chat Completions response into a Messages response body.

    *nonce* is the per-response tool-id nonce (:func:`tpx.transport.translate.ids.new_nonce`);
    ``None`` draws a fresh one when the response has tool calls.
    """
    if response.__class__ is dict:
        body = _fast_response(response, model, nonce)
        if body is not None:
            return body
    elif not isinstance(response, Mapping):
        _bad("the body must be a JSON object")
    else:
        response = dict(response)
    choices = response.get("choices")
    if choices.__class__ is not list or not choices:
        provider_message = error_message(response)
        if provider_message is not None:
            raise ProtocolError(f"the provider returned an error: {provider_message}")
        _bad("choices must be a non-empty list")
    choice = first_choice(choices, warnings)
    message = choice.get("message")
    if message.__class__ is not dict:
        _bad("choice 0's message must be an object")
    blocks: list[dict[str, Any]] = []
    reasoning = reasoning_text(message)
    if reasoning is not None:
        blocks.append(
            {"type": "thinking", "thinking": reasoning, "signature": signer.sign(reasoning)}
        )
    content = message.get("content")
    if content.__class__ is str:
        if content:
            blocks.append({"type": "text", "text": content})
    elif content is not None:
        _text_blocks(content, blocks)
    refusal = message.get("refusal")
    refused = False
    if refusal is not None:
        if refusal.__class__ is not str:
            _bad("refusal must be a string")
        if refusal:
            blocks.append({"type": "text", "text": refusal})
            refused = True
    calls = message.get("tool_calls")
    has_calls = False
    if calls:
        if calls.__class__ is not list:
            _bad("tool_calls must be a list")
        position = 0
        if nonce is None:
            nonce = "%012x" % _getrandbits(48)  # noqa: UP031 (fastest)
        for call in calls:  # inlined _tool_use: the hot path
            if call.__class__ is not dict:
                _bad(f"tool_calls[{position}] must be an object")
            function = call.get("function")
            foreign = call.get("id")
            kind = call.get("type")
            if (
                function.__class__ is not dict
                or (kind is not None and kind != "function")
                or (foreign is not None and foreign.__class__ is not str)
            ):
                blocks.append(_tool_use(call, position, nonce))  # raises the precise error
                position += 1
                continue
            name = function.get("name")
            if name.__class__ is not str or not name:
                _bad(f"tool_calls[{position}].function.name must be a non-empty string")
            raw = function.get("arguments")
            arguments: Any = None
            if raw.__class__ is str:
                try:
                    arguments = _loads(raw)
                except _JSONDecodeError:
                    arguments = None
                if _may_be_deep(raw) and _parsed_too_deep(arguments):
                    arguments = None  # parse_arguments refuses it
            if arguments.__class__ is not dict:
                arguments = parse_arguments(raw, position, name)
            if foreign.__class__ is str and _RAW_OK(foreign) is not None:
                caller_id = f"tpxr{position}-{nonce}_{foreign}"
            else:
                caller_id = to_caller_id(foreign, position, nonce)
            blocks.append({"type": "tool_use", "id": caller_id, "name": name, "input": arguments})
            position += 1
        has_calls = True
    elif calls is not None and calls.__class__ is not list:
        _bad("tool_calls must be a list")
    if not has_calls:
        legacy = message.get("function_call")
        if legacy is not None:
            if legacy.__class__ is not dict:
                _bad("function_call must be an object")
            blocks.append(_tool_use({"function": legacy}, 0, nonce or new_nonce()))
            has_calls = True
    if has_calls:
        reason: str = "tool_use"
        sequence: str | None = None
    elif (
        not refused
        and choice.get("finish_reason") == "stop"
        and choice.get("stop_reason") is None
        and choice.get("matched_stop") is None
    ):
        reason, sequence = "end_turn", None
    else:
        reason, sequence = stop_reason(choice, has_calls, refused, warnings)
    raw_usage = response.get("usage")
    usage: dict[str, Any] | None = None
    if raw_usage.__class__ is dict:  # inlined fast path of usage_to_messages
        prompt = raw_usage.get("prompt_tokens", 0)
        completion = raw_usage.get("completion_tokens", 0)
        details = raw_usage.get("prompt_tokens_details")
        cached = details.get("cached_tokens") if details.__class__ is dict else None
        if cached is None:
            cached = 0
        if (
            prompt.__class__ is int
            and completion.__class__ is int
            and cached.__class__ is int
            and prompt >= 0  # else usage_to_messages refuses it
            and completion >= 0
            and cached >= 0
        ):
            usage = {
                "input_tokens": prompt - cached if prompt > cached else 0,
                "output_tokens": completion,
                "cache_read_input_tokens": cached,
                "cache_creation_input_tokens": 0,
            }
    if usage is None:
        usage = usage_to_messages(raw_usage, warnings)
    message_id = message_id_of(response)
    name = model if model is not None else response.get("model")
    if name.__class__ is not str or not name:
        warnings.append("the response named no model; 'unknown' reported")
        name = "unknown"
    return {
        "id": message_id,
        "type": "message",
        "role": "assistant",
        "model": name,
        "content": blocks,
        "stop_reason": reason,
        "stop_sequence": sequence,
        "usage": usage,
    }


def check_nonce(nonce: str | None) -> str | None:
    """*nonce* if it is a valid tool-id nonce (or ``None``); else ``ValueError``."""
    if nonce is not None:
        to_caller_id(None, 0, nonce)  # validates
    return nonce


def response_to_messages(
    response: Mapping[str, Any],
    *,
    model: str | None = None,
    nonce: str | None = None,
    profile: str | Profile | None = None,
    secret: str | bytes | ThinkingSigner | None = None,
) -> Translation:
    """Translate a Chat Completions response into a Messages response.

    *model* overrides the response's ``model``. *nonce* fixes the per-response
    tool-id nonce (12 lowercase hex digits; for tests and replays) -- by default
    every translation draws a fresh one, so caller ids never repeat across responses.
    Raises :class:`~tpx.errors.ProtocolError` for anything that is not a chat
    completion (error bodies included, with the provider's message). Reasoning
    (``reasoning_content`` or ``reasoning``) becomes a first ``thinking`` block signed
    with *secret* (:mod:`tpx.transport.translate.signing`); *profile* is accepted for symmetry
    with :func:`~tpx.transport.translate.request_to_openai` (replies read alike for every profile).
    """
    get_profile(profile)
    if _safe.too_deep(response):
        _bad(f"nested deeper than {_safe.MAX_DEPTH} levels")
    return response_checked(response, model=model, nonce=nonce, secret=secret)


def response_checked(
    response: Mapping[str, Any],
    *,
    model: str | None = None,
    nonce: str | None = None,
    secret: str | bytes | ThinkingSigner | None = None,
) -> Translation:
    """:func:`response_to_messages` for a response its caller has already held to the depth
    rule (the exchange reads replies with :func:`tpx._safe.loads`, which checks it), so the
    walk is not done twice."""
    warnings: list[str] = []
    if nonce is not None:
        check_nonce(nonce)
    body = translate_response(response, model, warnings, nonce, signer_for(secret))
    return Translation(body, tuple(warnings))
