"""The wire shapes the fake providers answer in: every foreign-id style and stream shape the
translator claims to handle (module docstring of :mod:`tpx.transport.translate.stream` and
:mod:`tpx.transport.translate.ids`), drawn per reply from a seeded generator.

Foreign-id styles (:data:`ID_STYLES`): Messages ids are always ``toolu_...`` (the Messages
API requires ``^[a-zA-Z0-9_-]+$``); Chat Completions providers vary:

* ``openai`` ``call_<24 alnum>``, ``mistral`` 9 alphanumerics, ``spaces`` ids with spaces
  (not valid caller ids: base64-encoded by the translator) -- unique for the whole boot;
* ``missing`` (no ``id`` key), ``null`` (``"id": null``), ``empty`` (``""``, Gemini) -- the
  provider gets ``""`` back;
* ``repeated`` ``call_<position>`` in every response (servers counting per response);
* ``shared`` one id for all the calls of a response (and a new one per response).

Chat Completions stream shapes (:data:`OPENAI_STREAM_SHAPES`): ``indexed`` (id and name,
then the arguments in three fragments cut inside the planted marker, call after call),
``interleaved`` (the same, the calls' fragments interleaved), ``ollama`` (every call whole
at ``index: 0``; only with distinct non-empty ids, the one way to tell Ollama's calls
apart), ``gemini`` (every call whole, no ``index``), ``mixed`` (even positions indexed,
odd ones whole without ``index``). Flags drawn independently (:data:`OPENAI_FLAGS`):
``empty_first`` (the first call's arguments are ``""``: its abstract id is planted in its
*name*, ``probe__<id>``), ``no_finish`` (no ``finish_reason`` chunk at all),
``done_no_blank`` (the body ends ``data: [DONE]\\n`` without its blank line),
``thinking`` (``reasoning_content`` before the text), ``finish_stop`` (``"stop"`` instead
of ``"tool_calls"`` with calls, Gemini), ``length`` (no calls: ``"length"``, so
``max_tokens``). Messages streams draw ``thinking``, ``no_text``, ``empty_first``,
``done_no_blank`` and ``max_tokens``. Plain (non-streamed) replies draw the flags that
apply to a JSON body.

Every reply is recorded as a :class:`Reply`: its calls in order (foreign id as emitted,
abstract id) and the stop reason the caller must be handed.
"""

from __future__ import annotations

import hashlib
import itertools
import random
import re
from collections.abc import Sequence
from typing import Any, Literal

import attrs
import orjson

__all__ = [
    "ID_STYLES",
    "MARK",
    "MESSAGES",
    "MESSAGES_FLAGS",
    "NAME_MARK",
    "OPENAI",
    "OPENAI_FLAGS",
    "OPENAI_STREAM_SHAPES",
    "Call",
    "IdStyle",
    "Reply",
    "Shape",
    "bad_reply",
    "draw_reply",
    "messages_reply",
    "messages_stream",
    "openai_reply",
    "openai_stream",
    "planted_call_id",
    "planted_id",
    "sse",
]

Shape = Literal["messages", "openai"]
MESSAGES: Shape = "messages"
OPENAI: Shape = "openai"

MARK = "tpx-abstract:"
#: The name of a call whose arguments are empty: ``probe__<abstract id>``.
NAME_MARK = "probe__"
_PLANTED = re.compile(re.escape(MARK) + r"([A-Za-z0-9_?-]+)")
_NAMED = re.compile(re.escape(NAME_MARK) + r"([A-Za-z0-9_-]+)").fullmatch

IdStyle = Literal[
    "openai", "mistral", "spaces", "missing", "null", "empty", "repeated", "shared", "anthropic"
]
ID_STYLES: dict[Shape, tuple[IdStyle, ...]] = {
    MESSAGES: ("anthropic",),  # Messages ids must match ^[a-zA-Z0-9_-]+$
    OPENAI: ("openai", "mistral", "spaces", "missing", "null", "empty", "repeated", "shared"),
}
#: Styles whose ids tell the calls of one response apart (Ollama's index-0 shape needs it).
_DISTINCT: frozenset[str] = frozenset({"openai", "mistral", "spaces", "repeated"})
#: Styles whose ids are unique for a whole boot (``table`` maps them back unambiguously).
UNIQUE_STYLES: frozenset[str] = frozenset({"openai", "mistral", "spaces", "anthropic"})

OPENAI_STREAM_SHAPES: tuple[str, ...] = ("indexed", "interleaved", "ollama", "gemini", "mixed")
OPENAI_FLAGS: tuple[str, ...] = (
    "empty_first",
    "no_finish",
    "done_no_blank",
    "thinking",
    "finish_stop",
    "length",
    "anonymous",
    "legacy",
    "split_head",
    "crlf",
    "cr",
    "refusal",
)
MESSAGES_FLAGS: tuple[str, ...] = (
    "thinking",
    "no_text",
    "empty_first",
    "done_no_blank",
    "max_tokens",
    "crlf",
    "cr",
)
_PLAIN_OPENAI_FLAGS = frozenset(
    {"empty_first", "thinking", "finish_stop", "length", "anonymous", "legacy"}
)
_PLAIN_MESSAGES_FLAGS = frozenset({"thinking", "no_text", "empty_first", "max_tokens"})

_ALNUM = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"


def planted_id(value: Any) -> str | None:
    """The abstract id planted in a tool input / arguments / tool_result content, if any."""
    if isinstance(value, bytes | bytearray):
        value = value.decode("utf-8", "replace")
    if not isinstance(value, str):
        value = orjson.dumps(value, default=str).decode()
    found = _PLANTED.findall(value)
    return found[0] if len(found) == 1 else ("?" if found else None)


def planted_call_id(name: Any, arguments: Any) -> str | None:
    """The abstract id of a tool call / tool_use: planted in its arguments, or (a call
    with empty arguments) in its name."""
    found = planted_id(arguments)
    if found is not None:
        return found
    named = _NAMED(name) if isinstance(name, str) else None
    return named[1] if named is not None else None


def alnum(seed: str, n: int) -> str:
    digest = hashlib.blake2b(seed.encode(), digest_size=32).digest()
    return "".join(_ALNUM[b % len(_ALNUM)] for b in digest[:n])


@attrs.frozen
class Call:
    """One tool call as emitted: *foreign* its id on the wire (``None``: none at all)."""

    foreign: str | None
    aid: str
    empty_args: bool = False
    bad_args: bool = False
    """arguments that are JSON but no object (a reply the exchange must refuse)"""

    @property
    def name(self) -> str:
        return NAME_MARK + self.aid if self.empty_args else "probe"

    @property
    def wire_id(self) -> str:
        """What the provider must get back in ``tool_call_id`` / ``tool_use_id``."""
        return "" if self.foreign is None else self.foreign

    @property
    def arguments(self) -> str:
        if self.bad_args:
            return orjson.dumps(["not", "an", "object", MARK + self.aid]).decode()
        return "" if self.empty_args else orjson.dumps({"probe": MARK + self.aid}).decode()

    @property
    def input(self) -> dict[str, Any]:
        return {} if self.empty_args else {"probe": MARK + self.aid}


@attrs.frozen
class Reply:
    """One reply the fake provider served: its calls in order, the stop reason the caller
    must be handed, the shape and flags drawn (for the report)."""

    calls: tuple[Call, ...]
    stop_reason: str
    shape: str
    flags: frozenset[str]
    id_style: str
    streamed: bool
    text: str = "probing"
    """the text the caller must be handed"""


def draw_reply(
    rng: random.Random,
    provider: Shape,
    id_style: str,
    ids: Sequence[str],
    *,
    streamed: bool,
    counter: itertools.count[int],
) -> Reply:
    """A reply emitting the abstract *ids* (in this order), its shape drawn from *rng*."""
    flags = {
        f for f in (OPENAI_FLAGS if provider == OPENAI else MESSAGES_FLAGS) if rng.random() < 0.3
    }
    if not streamed:
        flags &= _PLAIN_OPENAI_FLAGS if provider == OPENAI else _PLAIN_MESSAGES_FLAGS
    if len(ids) != 1:
        flags.discard("legacy")  # delta.function_call carries exactly one call
    if ids:
        flags.discard("refusal")  # a refusal calls no tool
    calls: list[Call] = []
    shared = None
    for position, aid in enumerate(ids):
        n = next(counter)
        seed = f"{provider}:{n}"
        foreign: str | None
        if id_style == "anthropic":
            foreign = "toolu_" + alnum(seed, 24)
        elif id_style == "openai":
            foreign = "call_" + alnum(seed, 24)
        elif id_style == "mistral":
            foreign = alnum(seed, 9)
        elif id_style == "spaces":
            foreign = f"call {n} {alnum(seed, 4)}"
        elif id_style in ("missing", "null"):
            foreign = None
        elif id_style == "empty":
            foreign = ""
        elif id_style == "repeated":
            foreign = f"call_{position}"
        else:  # shared
            shared = shared or f"fc_{alnum(seed, 8)}"
            foreign = shared
        if "legacy" in flags:
            foreign = None  # a legacy function_call has no id
        calls.append(Call(foreign, aid, empty_args=position == 0 and "empty_first" in flags))
    shape = "json"
    if streamed and provider == OPENAI:
        shapes = [s for s in OPENAI_STREAM_SHAPES if s != "ollama" or id_style in _DISTINCT]
        shape = rng.choice(shapes)
    elif streamed:
        shape = "events"
    truncated = (
        "length" in flags and "no_finish" not in flags
        if provider == OPENAI
        else "max_tokens" in flags
    )
    if calls:
        stop = "tool_use"
    elif "refusal" in flags:
        stop = "refusal"
    elif truncated:
        stop = "max_tokens"
    else:
        stop = "end_turn"
    if provider == MESSAGES:
        text = "" if "no_text" in flags and calls else "probing"
    else:
        text = "" if calls and not streamed else "probing"
        if "refusal" in flags:
            text += "I cannot."
    return Reply(tuple(calls), stop, shape, frozenset(flags), id_style, streamed, text)


def bad_reply(provider: Shape, counter: itertools.count[int], *, streamed: bool) -> Reply:
    """A reply the exchange must refuse (``bad_tool_call``): Messages -- two tool_use blocks
    under one id; Chat Completions -- tool arguments that are JSON but not an object."""
    fid = ("toolu_" if provider == MESSAGES else "call_") + alnum(f"bad:{next(counter)}", 24)
    if provider == MESSAGES:
        calls = (Call(fid, "t1"), Call(fid, "t2"))
    else:
        calls = (Call(fid, "t1"), Call(fid + "x", "t2", bad_args=True))
    shape = ("events" if provider == MESSAGES else "indexed") if streamed else "json"
    return Reply(calls, "tool_use", shape, frozenset(), "bad", streamed)


def sse(event: str | None, data: Any) -> bytes:
    payload = data if isinstance(data, str) else orjson.dumps(data).decode()
    return (f"event: {event}\n" if event else "").encode() + f"data: {payload}\n\n".encode()


def _split(text: str) -> list[str]:
    """*text* (arguments planting an id) in three fragments cut inside the marker."""
    return [text[:7], text[7:18], text[18:]] if text else [""]


def line_ends(reply: Reply, events: list[bytes]) -> list[bytes]:
    """*events* with ``\r\n`` (flag ``crlf``) or ``\r`` (flag ``cr``) line ends."""
    if "crlf" in reply.flags:
        return [e.replace(b"\n", b"\r\n") for e in events]
    if "cr" in reply.flags:
        return [e.replace(b"\n", b"\r") for e in events]
    return events


def _unterminated(event: bytes) -> bytes:
    """*event* without its closing blank line (``data: ...\\n``)."""
    return event[:-1] if event.endswith(b"\n\n") else event


# --------------------------------------------------------------------------- Messages


def messages_reply(reply: Reply) -> bytes:
    content: list[dict[str, Any]] = []
    if "thinking" in reply.flags:
        content.append({"type": "thinking", "thinking": "pondering", "signature": "sig-fake"})
    if "no_text" not in reply.flags or not reply.calls:
        content.append({"type": "text", "text": "probing"})
    content += [
        {"type": "tool_use", "id": c.foreign, "name": c.name, "input": c.input} for c in reply.calls
    ]
    return orjson.dumps(
        {
            "id": "msg_fake",
            "type": "message",
            "role": "assistant",
            "model": "claude-fake",
            "content": content,
            "stop_reason": reply.stop_reason,
            "stop_sequence": None,
            "usage": {"input_tokens": 5, "output_tokens": 3},
        }
    )


def messages_stream(reply: Reply) -> list[bytes]:
    message: dict[str, Any] = {
        "id": "msg_fake",
        "type": "message",
        "role": "assistant",
        "model": "claude-fake",
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {"input_tokens": 5, "output_tokens": 1},
    }
    events = [
        sse("message_start", {"type": "message_start", "message": message}),
        sse("ping", {"type": "ping"}),
    ]
    index = 0

    def block(start: dict[str, Any], deltas: Sequence[dict[str, Any]]) -> None:
        nonlocal index
        events.append(
            sse(
                "content_block_start",
                {"type": "content_block_start", "index": index, "content_block": start},
            )
        )
        for delta in deltas:
            events.append(
                sse(
                    "content_block_delta",
                    {"type": "content_block_delta", "index": index, "delta": delta},
                )
            )
        events.append(sse("content_block_stop", {"type": "content_block_stop", "index": index}))
        index += 1

    if "thinking" in reply.flags:
        block(
            {"type": "thinking", "thinking": "", "signature": ""},
            [
                {"type": "thinking_delta", "thinking": "ponder"},
                {"type": "thinking_delta", "thinking": "ing"},
                {"type": "signature_delta", "signature": "sig-fake"},
            ],
        )
    if "no_text" not in reply.flags or not reply.calls:
        block(
            {"type": "text", "text": ""},
            [{"type": "text_delta", "text": "prob"}, {"type": "text_delta", "text": "ing"}],
        )
    for call in reply.calls:
        parts = [] if call.empty_args else _split(call.arguments)
        block(
            {"type": "tool_use", "id": call.foreign, "name": call.name, "input": {}},
            [{"type": "input_json_delta", "partial_json": p} for p in parts],
        )
    events.append(
        sse(
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": reply.stop_reason, "stop_sequence": None},
                "usage": {"output_tokens": 3},
            },
        )
    )
    stop = sse("message_stop", {"type": "message_stop"})
    events.append(_unterminated(stop) if "done_no_blank" in reply.flags else stop)
    return line_ends(reply, events)


# --------------------------------------------------------------------------- Chat Completions


def _openai_finish(reply: Reply) -> str:
    if reply.calls:
        if "legacy" in reply.flags:
            return "function_call"
        return "stop" if "finish_stop" in reply.flags else "tool_calls"
    return "length" if "length" in reply.flags else "stop"


def _call_json(call: Call, style: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if call.foreign is not None:
        out["id"] = call.foreign
    elif style == "null":
        out["id"] = None
    out["type"] = "function"
    out["function"] = {"name": call.name, "arguments": call.arguments}
    return out


def openai_reply(reply: Reply) -> bytes:
    message: dict[str, Any] = {"role": "assistant", "content": None if reply.calls else "probing"}
    if "thinking" in reply.flags:
        message["reasoning_content"] = "pondering"
    if reply.calls and "legacy" in reply.flags:
        (call,) = reply.calls
        message["function_call"] = {"name": call.name, "arguments": call.arguments}
    elif reply.calls:
        message["tool_calls"] = [_call_json(c, reply.id_style) for c in reply.calls]
    anonymous = "anonymous" in reply.flags
    return orjson.dumps(
        {
            "id": "" if anonymous else "chatcmpl-fake",
            "object": "chat.completion",
            "model": "" if anonymous else "tpx-fake",
            "choices": [{"index": 0, "message": message, "finish_reason": _openai_finish(reply)}],
            "usage": {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8},
        }
    )


def openai_stream(reply: Reply) -> list[bytes]:
    def chunk(delta: dict[str, Any] | None, finish: str | None = None, **extra: Any) -> bytes:
        body: dict[str, Any] = {
            "id": "" if anonymous else "chatcmpl-fake",
            "object": "chat.completion.chunk",
            "created": 0,
            "model": "" if anonymous else "tpx-fake",
            "choices": []
            if delta is None
            else [{"index": 0, "delta": delta, "finish_reason": finish}],
            **extra,
        }
        return sse(None, body)

    anonymous = "anonymous" in reply.flags
    events: list[bytes] = []
    if "thinking" in reply.flags:
        events.append(chunk({"role": "assistant", "reasoning_content": "ponder"}))
        events.append(chunk({"reasoning_content": "ing"}))
    events += [chunk({"role": "assistant", "content": "prob"}), chunk({"content": "ing"})]
    if "refusal" in reply.flags:
        events.append(chunk({"refusal": "I cannot."}))
    per_call: list[list[dict[str, Any]]] = []
    for position, call in enumerate(reply.calls):
        whole = _call_json(call, reply.id_style)
        if "legacy" in reply.flags:  # delta.function_call: name, then the arguments
            per_call.append(
                [{"function_call": {"name": call.name, "arguments": ""}}]
                + [{"function_call": {"arguments": part}} for part in _split(call.arguments)]
            )
        elif reply.shape == "ollama":
            per_call.append([{"index": 0, **whole}])
        elif reply.shape == "gemini" or (reply.shape == "mixed" and position % 2):
            per_call.append([whole])
        elif "split_head" in reply.flags:  # id and type, then the name in two pieces
            head = {k: v for k, v in whole.items() if k != "function"}
            per_call.append(
                [
                    {**head, "index": position},
                    {"index": position, "function": {"name": call.name[:3]}},
                    {"index": position, "function": {"name": call.name[3:]}},
                ]
                + [
                    {"index": position, "function": {"arguments": part}}
                    for part in _split(call.arguments)
                ]
            )
        else:
            head = {**whole, "index": position, "function": {"name": call.name, "arguments": ""}}
            per_call.append(
                [head]
                + [
                    {"index": position, "function": {"arguments": part}}
                    for part in _split(call.arguments)
                ]
            )
    if reply.shape == "interleaved":
        order = [f for group in itertools.zip_longest(*per_call) for f in group if f is not None]
    else:
        order = [f for fragments in per_call for f in fragments]
    events += [
        chunk(fragment if "function_call" in fragment else {"tool_calls": [fragment]})
        for fragment in order
    ]
    if "no_finish" not in reply.flags:
        events.append(chunk({}, _openai_finish(reply)))
    usage = {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8}
    events.append(chunk(None, usage=usage))
    done = sse(None, "[DONE]")
    events.append(_unterminated(done) if "done_no_blank" in reply.flags else done)
    return line_ends(reply, events)
