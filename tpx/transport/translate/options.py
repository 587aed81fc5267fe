"""Request options real clients send, decided per profile: reasoning, structured output,
context management, mid-conversation system messages, ``metadata.user_id``.

Reasoning (``thinking`` + ``output_config.effort``)
    The wanted state: ``thinking.type`` ``enabled`` / ``adaptive`` -> on, ``disabled``
    -> off; an ``output_config.effort`` without ``thinking`` -> on at that effort;
    neither -> nothing is sent (the server's default). The effort: ``output_config.
    effort`` if given, else from ``budget_tokens``: below 4,096 -> ``low``, below
    16,384 -> ``medium``, else ``high`` (Claude Code's 31,999 -> ``high``); adaptive
    without effort -> none (the server's default effort). An effort the server does not
    name maps to the highest level it names not above it (:meth:`Profile.effort`).
    Then by ``profile.reasoning``: ``reasoning_effort`` (on: the effort, if any; off:
    ``profile.disable_effort``), ``reasoning_object`` (``reasoning: {"effort": e}`` or
    ``{"enabled": true}``; off: ``{"effort": "none"}``), ``enable_thinking``
    (``chat_template_kwargs: {"enable_thinking": bool}``; an effort cannot be said:
    warning), ``deepseek`` (``thinking: {"type": "enabled"|"disabled"}`` +
    ``reasoning_effort``), ``none`` (warning: thinking cannot be asked for). What a
    profile cannot say is a warning, never an error.
Structured output (``output_config.format`` / legacy ``output_format``)
    ``{"type": "json_schema", "schema": S}`` -> ``response_format: {"type":
    "json_schema", "json_schema": {"name": "output", "schema": S'}}`` with S sanitized
    for the profile; ``json_object`` profiles get ``{"type": "json_object"}`` and the
    schema as text appended to the first system message (warning).
Context management
    ``clear_thinking_20251015`` is applied by tpx: with ``keep: "all"`` nothing is
    cleared; with ``keep: {"type": "thinking_turns", "value": N}`` (default N = 1)
    the thinking of all but the last N assistant turns that hold thinking is dropped
    before it could go back as reasoning. ``clear_tool_uses_20250919``: warning, not
    applied (the whole history is sent). Any other edit -> UnsupportedError.
Mid-conversation ``role: "system"`` messages (string or text blocks)
    By ``profile.system``: ``anywhere`` -> a system message in place; ``first`` ->
    appended to the first system message (created if there is none); ``user`` ->
    ``<system-message>...</system-message>`` text in a user message at that place,
    merged with the user messages next to it (one user turn).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from typing import Any, NoReturn

import orjson

from tpx._safe import quote
from tpx.errors import ProtocolError, UnsupportedError
from tpx.transport.translate.profiles import Profile
from tpx.transport.translate.schema import sanitize_schema

__all__ = [
    "BUDGET_LOW",
    "BUDGET_MEDIUM",
    "apply_options",
    "budget_effort",
    "fold_system",
    "merge_user_runs",
    "system_text",
    "thinking_cleared",
    "user_value",
]

#: ``budget_tokens`` below this asks for ``low`` effort.
BUDGET_LOW = 4096
#: ``budget_tokens`` below this (and not below :data:`BUDGET_LOW`) asks for ``medium``.
BUDGET_MEDIUM = 16384
_ANTHROPIC_EFFORTS = frozenset({"low", "medium", "high", "xhigh", "max"})
_OUTPUT_CONFIG_KEYS = frozenset({"effort", "format"})
SYSTEM_OPEN = "<system-message>"
SYSTEM_CLOSE = "</system-message>"


def _bad(message: str) -> NoReturn:
    raise ProtocolError(
        f"invalid Messages request: {message}", status=400, error_type="invalid_request_error"
    )


def _unsupported(message: str) -> NoReturn:
    raise UnsupportedError(f"cannot translate to Chat Completions: {message}")


def budget_effort(budget: int) -> str:
    """The effort a thinking ``budget_tokens`` asks for (thresholds above)."""
    if budget < BUDGET_LOW:
        return "low"
    if budget < BUDGET_MEDIUM:
        return "medium"
    return "high"


def _reasoning_wanted(request: Mapping[str, Any]) -> tuple[bool | None, str | None]:
    """(on / off / not asked, effort) from ``thinking`` and ``output_config.effort``."""
    on: bool | None = None
    effort: str | None = None
    thinking = request.get("thinking")
    if thinking is not None:
        if not isinstance(thinking, Mapping):
            _bad("thinking must be an object")
        kind = thinking.get("type")
        if kind == "disabled":
            on = False
        elif kind == "adaptive":
            on = True
        elif kind == "enabled":
            budget = thinking.get("budget_tokens")
            if budget.__class__ is not int or budget < 1:
                _bad("thinking.budget_tokens must be a positive integer")
            on, effort = True, budget_effort(budget)
        else:
            _bad(f"unknown thinking type {quote(kind)}")
    config = request.get("output_config")
    if isinstance(config, Mapping) and config.get("effort") is not None:
        wanted = config["effort"]
        if wanted not in _ANTHROPIC_EFFORTS:
            _bad(f"unknown output_config.effort {quote(wanted)}")
        effort = wanted
        if on is None:
            on = True
    return on, effort


def _reasoning(
    request: Mapping[str, Any], body: dict[str, Any], profile: Profile, warn: Callable[[str], None]
) -> None:
    on, effort = _reasoning_wanted(request)
    if on is None:
        return
    control = profile.reasoning
    mapped = profile.effort(effort) if effort is not None else None
    if control == "reasoning_effort":
        if on and mapped is not None:
            body["reasoning_effort"] = mapped
        elif not on:
            if profile.disable_effort is not None:
                body["reasoning_effort"] = profile.disable_effort
            else:
                warn(f"thinking disabled: profile {profile.name!r} cannot turn reasoning off")
    elif control == "reasoning_object":
        if on:
            body["reasoning"] = {"effort": mapped} if mapped is not None else {"enabled": True}
        else:
            body["reasoning"] = {"effort": profile.disable_effort or "none"}
    elif control == "enable_thinking":
        body["chat_template_kwargs"] = {"enable_thinking": on}
        if on and effort is not None:
            warn(
                f"reasoning effort {quote(effort)} dropped: profile {profile.name!r} switches "
                "thinking on or off only"
            )
    elif control == "deepseek":
        body["thinking"] = {"type": "enabled" if on else "disabled"}
        if on and mapped is not None:
            body["reasoning_effort"] = mapped
    else:
        warn(f"thinking / effort dropped: profile {profile.name!r} has no reasoning control")


def _format(
    request: Mapping[str, Any],
    body: dict[str, Any],
    profile: Profile,
    warn: Callable[[str], None],
) -> str | None:
    """Set ``response_format``; return schema text for the system message (json_object)."""
    config = request.get("output_config")
    spec = config.get("format") if isinstance(config, Mapping) else None
    legacy = request.get("output_format")
    if spec is None:
        spec = legacy
    elif legacy is not None:
        _bad("output_format and output_config.format are both given")
    if spec is None:
        return None
    if not isinstance(spec, Mapping) or spec.get("type") != "json_schema":
        _unsupported("output formats other than json_schema")
    schema = spec.get("schema")
    if not isinstance(schema, Mapping):
        _bad("output format json_schema needs a schema object")
    if profile.structured == "json_schema":
        body["response_format"] = {
            "type": "json_schema",
            "json_schema": {"name": "output", "schema": sanitize_schema(dict(schema), profile)},
        }
        return None
    body["response_format"] = {"type": "json_object"}
    warn(
        f"structured output as json_object: profile {profile.name!r} has no json_schema "
        "response_format; the schema is given to the model in the system message"
    )
    return (
        "Respond with one JSON object that matches this JSON Schema:\n"
        + orjson.dumps(schema).decode()
    )


def user_value(user_id: str, profile: Profile) -> str:
    """``metadata.user_id`` as the ``user`` field: as is, or hashed when too long."""
    if len(user_id) <= profile.user_max:
        return user_id
    digest = hashlib.sha256(user_id.encode("utf-8", "surrogatepass")).hexdigest()
    return ("tpx-" + digest)[: profile.user_max]


def apply_options(
    request: Mapping[str, Any], body: dict[str, Any], profile: Profile, warn: Callable[[str], None]
) -> str | None:
    """Reasoning and structured output into *body*; returns system text to append."""
    config = request.get("output_config")
    if config is not None:
        if not isinstance(config, Mapping):
            _bad("output_config must be an object")
        for key in config:
            if key not in _OUTPUT_CONFIG_KEYS:
                _unsupported(f"unknown output_config field {quote(key)}")
    _reasoning(request, body, profile, warn)
    return _format(request, body, profile, warn)


def thinking_cleared(
    request: Mapping[str, Any], messages: list[Any], warn: Callable[[str], None]
) -> frozenset[int]:
    """Indices of the assistant messages whose thinking ``context_management`` clears."""
    management = request.get("context_management")
    if management is None:
        return frozenset()
    if not isinstance(management, Mapping):
        _bad("context_management must be an object")
    edits = management.get("edits", [])
    if not isinstance(edits, list):
        _bad("context_management.edits must be a list")
    for key in management:
        if key != "edits":
            _unsupported(f"unknown context_management field {quote(key)}")
    cleared: frozenset[int] = frozenset()
    for edit in edits:
        if not isinstance(edit, Mapping):
            _bad("context_management edits must be objects")
        kind = edit.get("type")
        if kind == "clear_tool_uses_20250919":
            warn(
                "context_management clear_tool_uses not applied: the whole history is sent "
                "(the upstream sees more context, not less)"
            )
        elif kind == "clear_thinking_20251015":
            keep = edit.get("keep", {"type": "thinking_turns", "value": 1})
            if keep == "all":
                continue
            if (
                not isinstance(keep, Mapping)
                or keep.get("type") != "thinking_turns"
                or keep.get("value").__class__ is not int
                or keep["value"] < 0
            ):
                _bad("clear_thinking keep must be 'all' or {type: thinking_turns, value: N}")
            with_thinking = [
                index
                for index, message in enumerate(messages)
                if isinstance(message, Mapping)
                and message.get("role") == "assistant"
                and isinstance(message.get("content"), list)
                and any(
                    isinstance(b, Mapping) and b.get("type") in ("thinking", "redacted_thinking")
                    for b in message["content"]
                )
            ]
            kept = len(with_thinking) - keep["value"]
            cleared = cleared | frozenset(with_thinking[: max(kept, 0)])
        else:
            _unsupported(f"context_management edit {quote(kind)}")
    return cleared


def system_text(content: Any, index: int) -> str:
    """The text of a mid-conversation system message (string or text blocks)."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        _bad(f"messages[{index}].content must be a string or a list of blocks")
    texts: list[str] = []
    for block in content:
        if not isinstance(block, Mapping) or block.get("type") != "text":
            _bad(f"messages[{index}]: a system message holds text blocks only")
        text = block.get("text")
        if not isinstance(text, str):
            _bad("text block without a string text")
        texts.append(text)
    return "\n\n".join(texts)


def _parts(content: Any) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    return list(content)


def fold_system(out: list[dict[str, Any]], texts: list[str]) -> None:
    """Append *texts* to the first system message of *out* (creating one if needed)."""
    if not texts:
        return
    extra = [{"type": "text", "text": text} for text in texts]
    if out and out[0].get("role") == "system":
        parts = _parts(out[0]["content"]) + extra
        out[0] = {"role": "system", "content": parts[0]["text"] if len(parts) == 1 else parts}
    else:
        out.insert(0, {"role": "system", "content": extra[0]["text"] if len(extra) == 1 else extra})


def merge_user_runs(out: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """*out* with each run of consecutive ``role: user`` messages merged into one."""
    merged: list[dict[str, Any]] = []
    for message in out:
        if merged and message.get("role") == "user" and merged[-1].get("role") == "user":
            parts = _parts(merged[-1]["content"]) + _parts(message["content"])
            merged[-1] = {"role": "user", "content": parts}
        else:
            merged.append(message)
    return merged
