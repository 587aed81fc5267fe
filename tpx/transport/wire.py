"""The wire: which provider, the protocol it speaks, and the tool ids its bodies carry.

Pure functions of a body, used by :class:`~tpx.transport.exchange.Exchange`:

* the spec's ``Select(k, t)`` and ``NativeShape(p)`` (:func:`select_provider`,
  :func:`native_shape`) over :class:`Provider`;
* the tool_result ids a Messages request answers (:func:`answered_ids`), the tool ids a Chat
  Completions request or response carries on the wire (:func:`openai_request_tool_ids`,
  :func:`openai_response_tool_ids`);
* how a request's answers match what is pending (:func:`pairing_problem`: ``CallerSend``'s
  guard, read concretely);
* a request body's bytes (:func:`serialize`) and a reply's headers (:func:`reply_headers`).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import orjson

from tpx._safe import quote
from tpx.transport.translate import tool_result_ids
from tpx.transport.translate.response import is_first_choice
from tpx.transport.translate.tools import FrozenJSONList

__all__ = [
    "ANTHROPIC_VERSION",
    "Provider",
    "Shape",
    "answered_ids",
    "native_shape",
    "openai_request_tool_ids",
    "openai_response_tool_ids",
    "pairing_problem",
    "reply_headers",
    "select_provider",
    "serialize",
    "wire_str",
]

#: the ``anthropic-version`` header sent to the Messages API
ANTHROPIC_VERSION = "2023-06-01"

Shape = Literal["messages", "openai"]


class Provider(enum.Enum):
    """The spec's provider constants."""

    ANTHROPIC = "ANTHROPIC"
    TPX = "TPX"
    NONE = "NONE"


def select_provider(has_key: bool, has_token: bool) -> Provider:
    """``Select(k, t)``: key wins, then token, else no provider."""
    if has_key:
        return Provider.ANTHROPIC
    if has_token:
        return Provider.TPX
    return Provider.NONE


def native_shape(provider: Provider) -> Shape:
    """``NativeShape(p)``: the protocol the provider speaks on the wire."""
    return "openai" if provider is Provider.TPX else "messages"


def serialize(body: Mapping[str, Any]) -> bytes:
    """``orjson.dumps(body)``; a member that carries its own JSON text (a
    :class:`~tpx.transport.translate.tools.FrozenJSONList`: tools the gateway parsed once, or their
    translation) is written as that text, not serialized again."""
    for value in body.values():
        if value.__class__ is FrozenJSONList:
            return orjson.dumps(
                {
                    k: orjson.Fragment(v.json) if v.__class__ is FrozenJSONList else v
                    for k, v in body.items()
                }
            )
    return orjson.dumps(body)


def answered_ids(request: Mapping[str, Any]) -> list[str]:
    """The tool_result ids of the request's last user turn (duplicates kept; odd ids shown by
    repr)."""
    return [i if isinstance(i, str) else quote(i) for i in tool_result_ids(request)]


def openai_request_tool_ids(body: Mapping[str, Any]) -> list[str]:
    """``tool_call_id`` of the tool messages after the last assistant message (a trailing
    prefill, an assistant message without tool calls, does not count as that message)."""
    messages = body.get("messages")
    if not isinstance(messages, list):
        return []
    end = len(messages)
    last = messages[-1] if messages else None
    if isinstance(last, Mapping) and last.get("role") == "assistant" and not last.get("tool_calls"):
        end -= 1  # a prefill: the tool results answer the assistant turn before it
    start = 0
    for index, message in enumerate(messages[:end]):
        if isinstance(message, Mapping) and message.get("role") == "assistant":
            start = index + 1
    return [
        str(m.get("tool_call_id"))
        for m in messages[start:end]
        if isinstance(m, Mapping) and m.get("role") == "tool"
    ]


def openai_response_tool_ids(body: Mapping[str, Any]) -> list[str]:
    choices = body.get("choices")
    if not isinstance(choices, list):
        return []
    # the choice the translator uses: index 0, whatever its position
    choice = next((c for c in choices if isinstance(c, Mapping) and is_first_choice(c)), None)
    if choice is None:
        return []
    message = choice.get("message")
    if not isinstance(message, Mapping):
        return []
    calls = message.get("tool_calls")
    if not isinstance(calls, list):
        # a legacy function_call is one call without an id (the translator carries it)
        return [""] if isinstance(message.get("function_call"), Mapping) else []
    return [wire_str(c.get("id")) if isinstance(c, Mapping) else "" for c in calls]


def wire_str(foreign: Any) -> str:
    """A provider's tool-call id as a string; a missing / null id is ``""`` (what the
    translator sends back for it, :func:`tpx.transport.translate.ids.wire_id`)."""
    return "" if foreign is None else str(foreign)


def reply_headers(status: Any, headers: Any) -> Mapping[str, str]:
    """*headers* of a reply (``None``: none); TypeError for a non-int status or non-mapping."""
    if isinstance(status, bool) or not isinstance(status, int):
        raise TypeError(f"status must be an int, got {type(status).__name__}")
    if headers is None:
        return {}
    if not isinstance(headers, Mapping):
        raise TypeError(f"headers must be a mapping or None, got {type(headers).__name__}")
    return headers


def pairing_problem(answered: Sequence[str], pending: frozenset[str]) -> str | None:
    duplicated = sorted({i for i in answered if answered.count(i) > 1})
    missing = sorted(pending - set(answered))
    unknown = sorted(set(answered) - pending)
    problems = []
    if missing:
        problems.append(f"no tool_result for tool_use ids {missing}")
    if duplicated:
        problems.append(f"duplicated tool_result ids {duplicated}")
    if unknown:
        problems.append(f"tool_result ids {unknown} answer no pending tool_use")
    return "; ".join(problems) or None
