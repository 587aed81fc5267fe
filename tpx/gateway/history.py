"""A request's own obligations, read from its history (no state between requests).

The spec's ``pending`` for a gateway request is the set of tool_use ids of the LAST
assistant turn of the request's history (the run of consecutive assistant messages right
before the last run of user messages); the last user turn's tool_results must answer
exactly those (``CallerSend``), otherwise the request is refused before the wire
(``CallerAbort``) with the Messages API's own wording.

TPX ids the gateway issued carry a MAC (:func:`tpx.transport.translate.ids.sign_caller_id`):
:func:`unsign_ids` checks every ``tpx``-encoded id of the history and replaces it, in
place, with the unsigned id the translator decodes. An id in the ``tpx`` encoding without
a valid MAC was not issued by this gateway (or one sharing its secret, or one whose
key it still lists in ``TPX_GATEWAY_SECRET``) and is refused;
ids in any other form (e.g. Anthropic's ``toolu_...``) pass through untouched.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tpx.transport.translate.ids import CALLER_ID_PREFIX, decode_caller_id, verify_signed_id

__all__ = [
    "Opening",
    "Refusal",
    "answer_ids",
    "asked",
    "last_turns",
    "opening",
    "pairing_problem",
    "unsign_ids",
    "validate_request",
]


class Refusal(Exception):
    """A request refused before anything happened (rendered as a Messages error body)."""

    def __init__(self, message: str, *, status: int = 400, error_type: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.error_type = error_type or _TYPE_BY_STATUS.get(status, "invalid_request_error")


_TYPE_BY_STATUS = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    405: "invalid_request_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    529: "overloaded_error",
}


def _role(message: Any) -> Any:
    if type(message) is dict:  # what JSON decodes to: no ABC check
        return message.get("role")
    return message.get("role") if isinstance(message, Mapping) else None


def validate_request(body: Any, *, count_tokens: bool = False) -> None:
    """The shape checks the Messages API makes first (types of the top-level fields)."""
    if not isinstance(body, dict):
        raise Refusal("The request body is not a JSON object")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise Refusal(
            "model: Field required" if model is None else "model: Input should be a string"
        )
    if not count_tokens:
        max_tokens = body.get("max_tokens")
        if max_tokens is None:
            raise Refusal("max_tokens: Field required")
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
            raise Refusal("max_tokens: Input should be a valid integer greater than 0")
        if "stream" in body and not isinstance(body["stream"], bool):
            raise Refusal("stream: Input should be a valid boolean")
    messages = body.get("messages")
    if not isinstance(messages, list):
        raise Refusal(
            "messages: Field required"
            if messages is None
            else "messages: Input should be a valid list"
        )
    for index, message in enumerate(messages):
        if not isinstance(message, Mapping):
            raise Refusal(f"messages.{index}: Input should be a valid dictionary")
        if message.get("role") not in ("user", "assistant", "system"):
            raise Refusal(f"messages.{index}.role: Input should be 'user' or 'assistant'")
        content = message.get("content")
        if not isinstance(content, str | list):
            raise Refusal(f"messages.{index}.content: Input should be a valid string or list")
        if isinstance(content, list):
            for j, block in enumerate(content):
                if not isinstance(block, Mapping) or not isinstance(block.get("type"), str):
                    raise Refusal(f"messages.{index}.content.{j}: Input should be a valid block")
                kind = block["type"]
                if kind == "tool_use" and not isinstance(block.get("id"), str):
                    raise Refusal(f"messages.{index}.content.{j}.id: Input should be a string")
                if kind == "tool_result" and not isinstance(block.get("tool_use_id"), str):
                    raise Refusal(
                        f"messages.{index}.content.{j}.tool_use_id: Input should be a string"
                    )


def _blocks(message: Any) -> list[Any]:
    if type(message) is dict:  # what JSON decodes to: no ABC check
        content = message.get("content")
    else:
        content = message.get("content") if isinstance(message, Mapping) else None
    return content if isinstance(content, list) else []


def last_turns(messages: list[Any]) -> tuple[int | None, int, int]:
    """``(assistant_index, user_start, user_end)``: the last user turn is
    ``messages[user_start:user_end]``, and the assistant turn before it (``role: "system"``
    messages in between skipped) ends at ``assistant_index`` (``None``: there is none)."""
    end = len(messages)
    while end and _role(messages[end - 1]) != "user":
        end -= 1
    start = end
    while start and _role(messages[start - 1]) == "user":
        start -= 1
    before = start - 1
    while before >= 0 and _role(messages[before]) == "system":  # mid-conversation system text
        before -= 1
    return (before if before >= 0 and _role(messages[before]) == "assistant" else None), start, end


def pending_ids(messages: list[Any]) -> list[str]:
    """The tool_use ids of the last assistant turn (the run of assistant messages before
    the last user turn), in order."""
    assistant, _, _ = last_turns(messages)
    return _tool_uses(messages, assistant)


def answer_ids(messages: list[Any]) -> list[str]:
    """The ``tool_use_id`` of every ``tool_result`` of the last user turn, in order, repeats
    kept (what the client answered; ill-formed blocks skipped: validation refuses them)."""
    _, start, end = last_turns(messages)
    return _tool_results(messages, start, end)


def asked(messages: list[Any]) -> tuple[list[str], list[str]]:
    """``(pending_ids(messages), answer_ids(messages))``, the last turns found once."""
    assistant, start, end = last_turns(messages)
    return _tool_uses(messages, assistant), _tool_results(messages, start, end)


def _tool_uses(messages: list[Any], assistant: int | None) -> list[str]:
    """The tool_use ids of the assistant turn ending at *assistant*, in order."""
    if assistant is None:
        return []
    first = assistant
    while first and _role(messages[first - 1]) == "assistant":
        first -= 1
    return [
        block["id"]
        for message in messages[first : assistant + 1]
        for block in _blocks(message)
        if (type(block) is dict or isinstance(block, Mapping)) and block.get("type") == "tool_use"
    ]


def _tool_results(messages: list[Any], start: int, end: int) -> list[str]:
    """The ``tool_use_id`` of every well-formed ``tool_result`` of ``messages[start:end]``."""
    return [
        block["tool_use_id"]
        for message in messages[start:end]
        for block in _blocks(message)
        if (type(block) is dict or isinstance(block, Mapping))
        and block.get("type") == "tool_result"
        and type(block.get("tool_use_id")) is str
    ]


def pairing_problem(
    messages: list[Any], pending: list[str], shown: Mapping[str, str]
) -> str | None:
    """The Messages API's error text when the last user turn does not answer *pending*
    exactly (``None`` when it does). *shown* maps an id to the form the caller sent."""
    assistant, start, end = last_turns(messages)
    seen: set[str] = set()
    wanted = set(pending)
    for index in range(start, end):
        for j, block in enumerate(_blocks(messages[index])):
            if not isinstance(block, Mapping) or block.get("type") != "tool_result":
                continue
            tool_id = block["tool_use_id"]
            if tool_id in seen:
                return (
                    f"messages.{index}.content.{j}: each tool_use must have a single result. "
                    f"Found multiple `tool_result` blocks with id: {shown.get(tool_id, tool_id)}"
                )
            seen.add(tool_id)
            if tool_id not in wanted:
                return (
                    f"messages.{index}.content.{j}: unexpected `tool_use_id` found in "
                    f"`tool_result` blocks: {shown.get(tool_id, tool_id)}. Each `tool_result` "
                    "block must have a corresponding `tool_use` block in the previous message."
                )
    missing = [i for i in pending if i not in seen]
    if missing and end > start:
        names = ", ".join(shown.get(i, i) for i in missing)
        return (
            f"messages.{assistant}: `tool_use` ids were found without `tool_result` blocks "
            f"immediately after: {names}. Each `tool_use` block must have a corresponding "
            "`tool_result` block in the next message."
        )
    return None


def unsign_ids(body: dict[str, Any], key: bytes | tuple[bytes, ...]) -> dict[str, str]:
    """Replace every signed tpx id of *body*'s history by its unsigned form, in place. *key*:
    the gateway's key, or its key ring (the current key first, then those being retired:
    ``Settings.id_keys``).

    Returns ``{unsigned: signed}`` (to show the caller its own ids in errors). Raises
    :class:`Refusal` for an id in the tpx encoding that this gateway did not issue.
    """
    shown: dict[str, str] = {}
    for index, message in enumerate(body["messages"]):
        for j, block in enumerate(_blocks(message)):
            if not isinstance(block, dict):
                continue
            kind = block.get("type")
            field = "id" if kind == "tool_use" else "tool_use_id" if kind == "tool_result" else None
            if field is None:
                continue
            value = block[field]
            if not value.startswith(CALLER_ID_PREFIX):
                continue
            unsigned = verify_signed_id(value, key)
            if unsigned is None:
                if decode_caller_id(value) is None and not _looks_signed(value):
                    continue  # not the tpx encoding at all: passes through
                raise Refusal(
                    f"messages.{index}.content.{j}.{field}: `{value}` is not a tool_use id "
                    "this gateway issued"
                )
            block[field] = unsigned
            shown[unsigned] = value
    return shown


def _looks_signed(value: str) -> bool:
    # tpx KIND POS - NONCE - MAC _ ...: a signed shape whose MAC did not verify
    head, sep, _ = value.partition("_")
    parts = head.split("-")
    return bool(sep) and len(parts) == 3 and len(parts[1]) == 12 and len(parts[2]) == 20


def _texts(content: Any) -> tuple[str, ...]:
    """The text of a ``system`` or message ``content``: the string, or each block's text
    (a block without one: its type)."""
    if isinstance(content, str):
        return (content,)
    if not isinstance(content, list):
        return ()
    return tuple(
        [
            b["text"] if isinstance(b.get("text"), str) else str(b.get("type"))
            for b in content
            if isinstance(b, dict)
        ]
    )


class Opening(tuple[int, tuple[str, ...], tuple[str, ...]]):
    """What names a request's conversation (``tpx serve --monitor``): the texts of its
    opening, the system prompt's and the first message's (:func:`opening`), after their
    lengths. Two openings are equal when those texts are, exactly (a tuple's equality:
    the lengths first); nothing is digested, so two different openings are never taken for
    one, and no text is read past its length until two openings with the same lengths are
    compared (the monitor compares conversations only when an id is held by two exchanges
    at once). The hash is the lengths': equal openings hash alike, and a client aiming many
    openings at one hash only makes the exchanges in flight with it compare their texts."""

    __slots__ = ()

    def __hash__(self) -> int:
        return self[0]


def opening(body: Mapping[str, Any]) -> Opening:
    """What names a request's conversation (``tpx serve --monitor``): its opening, the
    system prompt's text and the first message's. Every request of one conversation starts
    so, the same history again or a fork of it (docs/gateway.md, "Overlapping requests");
    ``cache_control`` and the blocks' other fields are left out, since a client moves them
    between the requests of one conversation. Read once: the texts are kept (str is
    immutable), not hashed (:class:`Opening`)."""
    messages = body.get("messages")
    message = messages[0] if isinstance(messages, list) and messages else None
    system = body.get("system")
    content = message.get("content") if isinstance(message, dict) else None
    texts: tuple[str, ...]
    first: tuple[str, ...]
    if type(content) is str and (system is None or type(system) is str):  # _texts, inline
        texts, first = () if system is None else (system,), (content,)
    else:
        texts, first = _texts(system), _texts(content)
    last = (len(texts[-1]) if texts else -1, len(first[-1]) if first else -1)
    return tuple.__new__(Opening, (hash((len(texts), len(first), *last)), texts, first))
