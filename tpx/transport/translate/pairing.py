"""Tool-id helpers for the exchange machine (pairing tool_use with tool_result).

All ids here are *caller* ids (what the Messages caller sees); nothing is decoded.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tpx.errors import ProtocolError

__all__ = ["tool_ids_in_request", "tool_result_ids", "tool_use_ids"]


_NO_MESSAGES = "a Messages request needs a messages list"


def _blocks(content: Any) -> list[Any]:
    return content if isinstance(content, list) else []


def _id(block: Mapping[str, Any], key: str) -> str:
    value = block.get(key)
    if not isinstance(value, str):
        raise ProtocolError(
            f"a {block.get('type')} block needs a string {key}",
            status=400,
            error_type="invalid_request_error",
        )
    return value


def tool_use_ids(messages_response: Mapping[str, Any]) -> list[str]:
    """Ids of the tool_use blocks of a Messages response, in order."""
    content = messages_response.get("content")
    if not isinstance(content, list):
        raise ProtocolError("a Messages response needs a content list")
    return [
        _id(block, "id")
        for block in content
        if isinstance(block, Mapping) and block.get("type") == "tool_use"
    ]


def tool_result_ids(messages_request: Mapping[str, Any]) -> list[str]:
    """Ids of the tool_result blocks of the LAST user turn, in order, duplicates kept.

    The last user turn is the last run of consecutive user messages (the Messages API
    merges consecutive user messages into one turn): usually just the last user message,
    but ``[..., assistant, user [tool_result...], user "and more"]`` answers the tool_uses
    with the results of both. A turn without tool_result blocks (or with string content)
    gives ``[]``; so does a request without user messages.
    """
    messages = messages_request.get("messages")
    if not isinstance(messages, list):
        raise ProtocolError(
            "a Messages request needs a messages list",
            status=400,
            error_type="invalid_request_error",
        )
    end = len(messages)
    while end and not _is_user(messages[end - 1]):
        end -= 1
    start = end
    while start and _is_user(messages[start - 1]):
        start -= 1
    return [
        _id(block, "tool_use_id")
        for message in messages[start:end]
        for block in _blocks(message.get("content"))
        if isinstance(block, Mapping) and block.get("type") == "tool_result"
    ]


def _is_user(message: Any) -> bool:
    return isinstance(message, Mapping) and message.get("role") == "user"


def tool_ids_in_request(messages_request: Mapping[str, Any]) -> tuple[list[str], list[str]]:
    """``(tool_use ids, tool_result ids)`` over the whole history, in order, duplicates kept."""
    messages = messages_request.get("messages")
    if not isinstance(messages, list):
        raise ProtocolError(
            "a Messages request needs a messages list",
            status=400,
            error_type="invalid_request_error",
        )
    uses: list[str] = []
    results: list[str] = []
    for message in messages:
        if not isinstance(message, Mapping):
            continue
        for block in _blocks(message.get("content")):
            if not isinstance(block, Mapping):
                continue
            kind = block.get("type")
            if kind == "tool_use":
                uses.append(_id(block, "id"))
            elif kind == "tool_result":
                results.append(_id(block, "tool_use_id"))
    return uses, results
