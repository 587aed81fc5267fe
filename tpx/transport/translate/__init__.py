"""Messages <-> Chat Completions translation (requests out, responses back), streaming too.

Entry points
------------
``request_to_openai(request, *, model=None, profile=None, secret=None) -> Translation``
    Messages request (a decoded dict) -> Chat Completions request.
``response_to_messages(response, *, model=None, nonce=None, profile=None, secret=None)``
    Chat Completions response -> Messages response (a ``Translation``).
``request_bytes_to_openai(data, *, model=None, warnings=None, profile=None, secret=None)``
``response_bytes_to_messages(data, *, model=None, warnings=None, nonce=None, profile=None,
secret=None)``
    The hot path: JSON bytes in, JSON bytes out (orjson). Same output as the dict
    functions; warnings are appended to *warnings* when a list is given.

*profile* (a name or a :class:`Profile`; default ``generic``) says which kind of
upstream the request is for -- ``openai``, ``vllm``, ``sglang``, ``ollama``,
``llama.cpp``, ``deepseek``, ``gemini``, ``openrouter``, ``generic`` -- see
:mod:`tpx.transport.translate.profiles` (what each server accepts, as data) and
:mod:`tpx.transport.translate.options` (the decisions that depend on it). *secret* (a string,
bytes or a :class:`ThinkingSigner`; default: random per process) signs the thinking
blocks made from the upstream's reasoning and verifies them when they come back
(:mod:`tpx.transport.translate.signing`). The transport takes both from ``boot(profile=...,
thinking_secret=...)`` or ``TPX_PROFILE`` / ``TPX_THINKING_SECRET``. HTTP headers
(``anthropic-beta``, ``anthropic-version``, ``x-app`` ...) play no part in
translation: a beta only makes the Messages API accept a field, and every field is
decided below on its own.
``tool_use_ids`` / ``tool_result_ids`` / ``tool_ids_in_request`` (pairing.py) and the
id codec (ids.py: ``to_caller_id``, ``to_foreign_id``, ``decode_caller_id``, ``wire_id``).

Streaming (stream.py, sans-I/O like the rest; re-exported here)
    ``SSEParser`` (incremental ``text/event-stream`` parser: bytes in any chunking ->
    ``SSEEvent``), ``OpenAIStreamTranslator`` (Chat Completions chunks -> Messages stream
    events: ``message_start``, live text / thinking blocks, whole ``tool_use`` blocks,
    ``message_delta``, ``message_stop``), ``AnthropicStreamReader`` (native Messages
    streams passed through, parsed and checked), ``MessageAccumulator`` (Messages events ->
    the final Messages body) and ``serialize_event`` (an event -> ``event:``/``data:``
    bytes). A streamed response and the same response non-streamed give the same
    Messages content; the tool-call assembly rules are the docstring of
    :mod:`tpx.transport.translate.stream`.

``Translation.warnings`` lists every feature dropped on the way (one message each).
Errors: a malformed caller request raises :class:`tpx.errors.ProtocolError` with
status 400 / ``invalid_request_error``; a well-formed feature that cannot be carried
raises :class:`tpx.errors.UnsupportedError` (400); a provider body that is not a chat
completion (error bodies included, carrying the provider's message) raises
:class:`tpx.errors.ProtocolError` (502). ``PairingError`` is left to the exchange machine.

Request mapping (Messages -> Chat Completions)
----------------------------------------------
=================================  =================================================
Messages                           Chat Completions
=================================  =================================================
``model`` (``model=`` kwarg wins)  ``model``
``system`` string / text blocks    first message ``role: system``; one block -> the
                                   string, several -> a list of text parts (no
                                   separator is invented); empty -> omitted
``role: "system"`` inside          by ``profile.system``: ``anywhere`` (openai) -> a
``messages`` (string or text       system message in place; ``first`` (gemini,
blocks; Claude Code's mid-         deepseek) -> appended to the first system message;
conversation system beta)          ``user`` (the rest) -> ``<system-message>...
                                   </system-message>`` text in the user turn there
                                   (merged with its neighbours); between a tool_use
                                   and its tool_result -> 400
``document`` (base64 PDF)          ``file`` part (``file_data`` data URL, ``filename``
                                   = title) where ``profile.file_parts`` (openai,
                                   openrouter); else its text extracted with pypdf as
                                   ``<document title=..>text</document>`` + warning;
                                   text / content sources -> that tagged text; inside
                                   a tool_result -> text in the tool message
user ``text`` / ``image`` blocks   ``role: user``; one text -> string, otherwise parts;
                                   image base64 -> ``image_url`` data URL
                                   ``data:<media_type>;base64,<data>``; url -> ``url``
assistant ``text``                 ``content`` (same one-string / parts rule)
assistant ``tool_use``             ``tool_calls[]``: id decoded (ids.py), ``input`` ->
                                   JSON text ``arguments``
user ``tool_result``               one ``role: tool`` message per call with
                                   ``tool_call_id`` = exactly the provider's id
                                   (decoded); string or text-block content
``is_error: true``                 content prefixed ``"[tool error] "`` (just
                                   ``"[tool error]"`` when empty) -- visible to the model;
                                   only ``true`` / ``false`` / absent / ``null`` are
                                   accepted (``0``, ``1``, ``"true"`` -> 400)
images inside a ``tool_result``    moved, in place, into the user message that follows
                                   the tool messages (every profile: tool messages
                                   carry text only), with a warning; the tool message
                                   says ``[N image(s) from this tool result follow in
                                   the next user message]``
ordering                           the assistant message with tool_calls is followed at
                                   once by its tool messages, in the calls' order, then
                                   the user's other blocks (text, images) in their
                                   original order as one user message
consecutive user messages after    one user turn (the Messages API merges them): when
an assistant turn with tool_use    the first leaves calls unanswered, the whole run is
                                   merged -- tool messages first, as above, then the
                                   run's other blocks in order as one user message;
                                   else each message is translated on its own (a
                                   tool_result answering a call twice -> 400)
``tools`` (custom)                 ``{"type": "function", "function": {name,
                                   description, parameters=input_schema, strict}}``,
                                   the schema sanitized for the profile
                                   (:mod:`tpx.transport.translate.schema`: gemini / generic keep
                                   an OpenAPI 3.0 allow-list, ``const`` -> ``enum``;
                                   llama.cpp / ollama / deepseek / openrouter drop
                                   ``$schema``; openai / vllm / sglang: as is);
                                   ``tools: []`` -> no ``tools``
``tool_choice`` auto/any/tool/none ``"auto"`` / ``"required"`` / ``{"type":
                                   "function", "function": {"name"}}`` / ``"none"``
``disable_parallel_tool_use``      ``parallel_tool_calls: false``
``stop_sequences``                 ``stop`` (empty list -> omitted; more than 4 are
                                   all sent -- OpenAI takes at most 4, other servers
                                   more -- with a warning; an empty string -> 400)
``temperature``, ``top_p``         unchanged (not rescaled)
``max_tokens`` (required, as in     ``profile.token_field``: ``max_completion_tokens``
the Messages API; missing -> 400)  (openai) or ``max_tokens``; clamped (warning) only
                                   above a profile's ``max_tokens_ceiling`` (none set)
``metadata.user_id``               ``user``; longer than ``profile.user_max`` (64) ->
                                   ``tpx-`` + SHA-256 hex, cut to fit; gemini (no
                                   ``user``) -> dropped with a warning
``thinking`` (enabled / adaptive   the profile's reasoning control
/ disabled), ``output_config.      (:mod:`tpx.transport.translate.options`): ``reasoning_effort``
effort``                           (openai, ollama, gemini), ``reasoning: {effort}``
                                   (openrouter), ``chat_template_kwargs.
                                   enable_thinking`` (vllm, sglang, llama.cpp),
                                   ``thinking: {type}`` + ``reasoning_effort``
                                   (deepseek), none (generic: warning); budget ->
                                   effort: < 4096 low, < 16384 medium, else high
``output_config.format`` /         ``response_format: {"type": "json_schema",
``output_format`` (json_schema)    "json_schema": {"name": "output", "schema"}}``
                                   (schema sanitized); deepseek / generic:
                                   ``json_object`` + the schema in the system message
``context_management``             applied by tpx: ``clear_thinking_20251015`` drops
                                   the thinking of all but the ``keep`` last thinking
                                   turns (``"all"``: none); ``clear_tool_uses``:
                                   warning, not applied
``cache_control`` (anywhere)       dropped silently (caching never changes a reply)
``stream: true``                   ``stream: true`` + ``stream_options.include_usage``
thinking block whose signature     ``profile.reasoning_back`` on that assistant message
tpx verifies (a MAC over its       (``reasoning_content``: deepseek -- required in tool
text with the thinking secret)     turns --, vllm, sglang, llama.cpp; ``reasoning``:
                                   ollama, openrouter; openai / gemini / generic: not
                                   sent); cleared by context_management: not sent
=================================  =================================================

Dropped with a warning: ``top_k``; ``service_tier``; ``inference_geo``; ``speed``;
``diagnostics``; ``user_profile_id``; ``workspace_id``; ``citations`` on text blocks;
``metadata`` keys other than ``user_id``; tool fields other than name, description,
input_schema, strict, type, cache_control; thinking blocks without a valid tpx
signature (another provider's, another secret's, edited: never forwarded as the
model's own reasoning); ``redacted_thinking`` (encrypted for another provider);
thinking blocks in user turns; what a profile cannot say (thinking on a profile
without reasoning control, an effort on an on/off switch, "disabled" where it cannot
be turned off); ``tool_choice`` auto / any when there are no tools; empty text
blocks and messages left empty by that (never sent: providers reject them). A
trailing assistant message (prefill) is sent as is, with a warning that the
provider may start a new turn instead of continuing it.

Refused with ``UnsupportedError``: server tools (any tool ``type`` other than
``custom``); ``search_result``, server-tool / MCP / container blocks; documents from
a URL or a file id (tpx fetches nothing), base64 documents other than PDF, a PDF
pypdf cannot read or without extractable text; images in assistant messages; image
sources other than base64 / url; request fields ``mcp_servers``, ``container``;
``output_config`` keys other than effort / format, output formats other than
``json_schema``; ``context_management`` edits other than clear_thinking /
clear_tool_uses; any unknown request field or block type (it could be a newer
feature; guessing would be a silent mistranslation).

Refused with ``ProtocolError`` (400): a body that is not an object; no ``messages``
list; a bad role; a missing ``content``; a tool_result whose id is not a tool_use of
the assistant turn just before it; a tool_use answered twice or not answered (the
Messages API rejects both too); duplicate tool_use ids in one turn; wrong value types;
no ``max_tokens``; a ``tool_choice`` naming a tool the request does not declare;
NaN or Infinity in a tool_use ``input``, ``temperature`` or ``top_p`` (JSON has no such
numbers; orjson would silently write ``null``); a conversation left empty once empty
messages are dropped (Chat Completions providers reject ``"messages": []``).

Response mapping (Chat Completions -> Messages)
-----------------------------------------------
=================================  =================================================
Chat Completions                   Messages
=================================  =================================================
the choice with ``index: 0``       the message; ``type: message``, ``role: assistant``
(by index, not position; no /
null ``index`` counts as 0; the
others dropped with a warning;
none -> ProtocolError)
``reasoning_content`` (DeepSeek,    first, a ``thinking`` block with ``signature`` =
llama.cpp, SGLang) or              ``"tpx1."`` + base64url(HMAC-SHA256) of its text
``reasoning`` (vLLM >= 0.26,       with the thinking secret, so it can go back
Ollama, OpenRouter)                (above); streamed live as ``thinking_delta`` and
                                   closed by one ``signature_delta``
``content`` (string or text parts) ``text`` blocks (empty ones are not emitted; an
                                   empty reply is ``content: []``)
``refusal``                        a ``text`` block with the refusal, and
                                   ``stop_reason: refusal`` (unless there are tool calls)
``tool_calls[i]``                  ``tool_use`` with id ``to_caller_id(id, i, nonce)``
                                   (one fresh nonce per translated response);
                                   ``arguments`` JSON text -> ``input``; an object
                                   (llama.cpp) is taken as is; ``""``/blank/missing ->
                                   ``{}``; invalid JSON or a non-object -> ProtocolError
legacy ``function_call``           one ``tool_use`` (id missing, position 0)
``finish_reason`` stop             ``end_turn``; ``stop_sequence`` (+ the string) when
                                   the choice's ``stop_reason`` (vLLM) or
                                   ``matched_stop`` (SGLang) is a string
length / content_filter            ``max_tokens`` / ``refusal``
tool_calls / function_call         ``tool_use``; any response carrying tool calls is
                                   ``tool_use`` whatever ``finish_reason`` says; without
                                   calls -> ``end_turn`` with a warning
null / unknown                     ``end_turn`` with a warning
``usage``                          ``input_tokens = prompt_tokens - cached``,
                                   ``cache_read_input_tokens = prompt_tokens_details.
                                   cached_tokens``, ``output_tokens =
                                   completion_tokens``, ``cache_creation_input_tokens =
                                   0`` (not reported by OpenAI); missing -> zeros + warning;
                                   a negative or non-integer count -> ProtocolError
                                   (streams too)
``id``                             kept; missing/empty -> ``msg_tpx_`` + 32 hex of the
                                   SHA-256 of the body's canonical (sorted-key) JSON
``model`` (``model=`` kwarg wins)  ``model``; neither -> ``"unknown"`` + warning
=================================  =================================================

Not a chat completion (not an object, ``choices`` missing / empty / not a list, a
message that is not an object, wrong types) -> ProtocolError. An error body in
OpenAI (``{"error": {...}}``), vLLM (``{"object": "error", ...}``) or Messages
(``{"type": "error", ...}``) shape -> ProtocolError carrying the provider's message.

Tool ids
--------
See :mod:`tpx.transport.translate.ids`: caller ids are a reversible, table-free encoding
``tpx<kind><position>-<nonce>_<payload>`` of the provider's id, the call's position
and a 12-hex-digit nonce drawn once per translated response (decoding ignores it),
so empty, missing, duplicated, non-alphabet or huge foreign ids all map one-to-one
and go back byte for byte, and caller ids stay unique across the whole conversation
even when a provider reuses the same id at the same position in every turn (the
Messages API rejects a history with two tool_use blocks of one id). Translating the
same response twice gives different caller ids; ``nonce=`` on the response entry
points fixes it (tests, replays). Legacy ids without a nonce
(``tpx<kind><position>_<payload>``) still decode. Ids that are not ours
(``toolu_...``) pass through unchanged.
"""

from __future__ import annotations

import gc
from typing import Any, NoReturn

import orjson

from tpx import _safe
from tpx.errors import ProtocolError
from tpx.transport.translate._result import Translation
from tpx.transport.translate.ids import decode_caller_id, to_caller_id, to_foreign_id, wire_id
from tpx.transport.translate.pairing import tool_ids_in_request, tool_result_ids, tool_use_ids
from tpx.transport.translate.profiles import DEFAULT_PROFILE, PROFILES, Profile, get_profile
from tpx.transport.translate.request import (
    REASONING_SIGNATURE,
    TOOL_ERROR_PREFIX,
    new_state,
    request_to_openai,
    translate_request,
)
from tpx.transport.translate.response import (
    _fast_response,
    check_nonce,
    error_message,
    parse_arguments,
    response_to_messages,
    stop_reason,
    translate_response,
    usage_to_messages,
)
from tpx.transport.translate.signing import ThinkingSigner, signer_for
from tpx.transport.translate.stream import (
    AnthropicStreamReader,
    MessageAccumulator,
    OpenAIStreamTranslator,
    SSEEvent,
    SSEParser,
    serialize_event,
)

__all__ = [
    "DEFAULT_PROFILE",
    "PROFILES",
    "REASONING_SIGNATURE",
    "TOOL_ERROR_PREFIX",
    "AnthropicStreamReader",
    "MessageAccumulator",
    "OpenAIStreamTranslator",
    "Profile",
    "SSEEvent",
    "SSEParser",
    "ThinkingSigner",
    "Translation",
    "decode_caller_id",
    "error_message",
    "get_profile",
    "parse_arguments",
    "request_bytes_to_openai",
    "request_to_openai",
    "response_bytes_to_messages",
    "response_to_messages",
    "serialize_event",
    "stop_reason",
    "to_caller_id",
    "to_foreign_id",
    "tool_ids_in_request",
    "tool_result_ids",
    "tool_use_ids",
    "usage_to_messages",
    "wire_id",
]

_loads = orjson.loads  # module-level names: one lookup less per call on the hot path
_dumps = orjson.dumps
_JSONDecodeError = orjson.JSONDecodeError
_may_be_deep = _safe.bytes_may_be_too_deep
_parsed_too_deep = _safe.parsed_too_deep
_serialized_within = _safe.serialized_within
#: Texts at most this long cannot nest deeper than the depth rule allows.
_SHORT = 2 * _safe.MAX_DEPTH
_NOT_JSON = object()


def request_bytes_to_openai(
    data: bytes,
    *,
    model: str | None = None,
    warnings: list[str] | None = None,
    profile: str | Profile | None = None,
    secret: str | bytes | ThinkingSigner | None = None,
) -> bytes:
    """JSON Messages request -> JSON Chat Completions request (see :func:`request_to_openai`).

    The cyclic garbage collector is paused for the duration of this one call and restored
    to its previous state on return or on an exception (a caller that had it disabled
    keeps it disabled). ``gc.disable`` is process-wide: while a translation runs, other
    threads do not trigger cyclic collections either (reference counting still frees
    everything as usual); the pause never outlasts the call.
    """
    # Why: a long history parses into a tree of thousands of containers, and the walk
    # allocates ~1,000 more, enough to trigger generation-0 collections that traverse the
    # freshly parsed tree for nothing -- neither orjson nor the walk makes reference cycles,
    # so there is nothing for the collector to find (and anything cyclic made meanwhile,
    # say an exception's traceback, is still collected after the pause). No output changes.
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        st = None
        try:
            request: Any = _loads(data)
        except _JSONDecodeError:
            request = _NOT_JSON
        if request is _NOT_JSON or len(data) <= _SHORT:  # short: cannot nest too deep
            if request is _NOT_JSON:
                _refuse_request_text(data)
        elif request.__class__ is not dict:
            _check_request_depth(request)
        else:
            # Everything but the messages is checked before any of it is read (schemas are
            # walked); the tools apart, their text is the tools cache's key. The messages
            # are checked after the walk, and only if it found one not plain.
            tools = request.get("tools")
            tools_key = None
            rest = {**request, "messages": None}
            if tools.__class__ is list and tools:
                tools_key = _serialized_within(tools, _safe.MAX_DEPTH - 1)  # tools: level 2
                if tools_key is None:
                    _refuse_too_deep()
                rest["tools"] = None
            system = request.get("system")
            if system.__class__ is str:  # a string is a leaf: the (long) text needs no check
                rest["system"] = None
            elif system.__class__ is list:  # the same depth without the texts
                rest["system"] = [_textless(block) for block in system]
            if _parsed_too_deep(rest):
                _refuse_too_deep()
            st = new_state(profile, secret)
            st.tools_key = tools_key
            failed = False
            try:
                body = translate_request(request, model, st)
            except Exception:
                failed = True  # a malformed request may also be too deep: that error wins
            if failed:
                _check_request_depth(request)
                st = None  # not too deep: the translation's own error, raised afresh below
            elif not st.plain and _parsed_too_deep(request["messages"], _safe.MAX_DEPTH - 1):
                _refuse_too_deep()
        if st is None:
            st = new_state(profile, secret)
            body = translate_request(request, model, st)
        if warnings is not None:
            warnings.extend(st.warnings)
        return orjson.dumps(body)
    finally:
        if was_enabled:
            gc.enable()


def _textless(block: Any) -> Any:
    """A system block with its string ``text`` as null (a leaf either way: same depth)."""
    if block.__class__ is dict and block.get("text").__class__ is str:
        return {**block, "text": None}
    return block


def _refuse_request_text(data: bytes | str) -> None:
    """Raise the caller's 400 for request bytes that are not JSON or nest too deep."""
    problem: str | None = None
    try:
        _safe.loads(data)
    except ValueError as exc:  # not JSON, or nested deeper than the depth rule
        problem = str(exc)
    if problem is not None:
        raise ProtocolError(
            f"invalid Messages request: body is not JSON ({problem})",
            status=400,
            error_type="invalid_request_error",
        )


def _check_request_depth(request: Any) -> None:
    """Raise the caller's 400 when the parsed *request* nests deeper than the depth rule."""
    if _parsed_too_deep(request):
        _refuse_too_deep()


def _refuse_too_deep() -> NoReturn:
    raise ProtocolError(
        f"invalid Messages request: body is not JSON ({_safe.DepthError()})",
        status=400,
        error_type="invalid_request_error",
    )


def response_bytes_to_messages(
    data: bytes,
    *,
    model: str | None = None,
    warnings: list[str] | None = None,
    nonce: str | None = None,
    profile: str | Profile | None = None,
    secret: str | bytes | ThinkingSigner | None = None,
) -> bytes:
    """JSON Chat Completions response -> JSON Messages response (:func:`response_to_messages`)."""
    if profile is not None:
        get_profile(profile)  # validated; replies are read alike for every profile
    # == _safe.loads(data), inlined for the common short, valid reply (_safe.loads itself
    # only runs again to raise its error)
    try:
        response: Any = _loads(data)
    except _JSONDecodeError:
        response = _NOT_JSON
    if response is _NOT_JSON or (
        len(data) > _SHORT and _may_be_deep(data) and _parsed_too_deep(response)
    ):
        problem: str | None = None
        try:
            response = _safe.loads(data)
        except ValueError as exc:  # not JSON, or nested deeper than the depth rule
            problem = str(exc)
        if problem is not None:
            raise ProtocolError(f"not a Chat Completions response: body is not JSON ({problem})")
    if nonce is not None:
        check_nonce(nonce)
    if response.__class__ is dict:  # the common case, without a detour (no warnings there)
        body = _fast_response(response, model, nonce)
        if body is not None:
            return _dumps(body)
    sink: list[str] = [] if warnings is None else warnings
    return orjson.dumps(translate_response(response, model, sink, nonce, signer_for(secret)))
