"""What real clients always send that has a harmless meaning for a TPX upstream.

Claude Code sends ``context_management: {"edits": [{"type": "clear_thinking_20251015",
"keep": "all"}]}`` and ``output_config: {"effort": "high"}`` on every turn. The translator
refuses both (they *can* change what the model does), so the gateway removes them first
when -- and only when -- they cannot change the exchange for a Chat Completions upstream:

* ``context_management`` whose edits are all ``clear_thinking_*`` with ``keep: "all"``:
  keeping every thinking turn clears nothing;
* ``output_config.effort``: a reasoning-effort hint with no Chat Completions field;
* ``role: "system"`` messages inside ``messages`` (Claude Code puts its ~6 KB context
  there, right after the first user message): their text is appended to the top-level
  ``system`` (many Chat Completions servers take system text only at the start).

Anything else (other context edits, ``output_config.format`` structured output) stays in
the request and the translator refuses it as before. Each removal is reported.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["relax_for_chat_completions"]


def relax_for_chat_completions(body: dict[str, Any]) -> list[str]:
    """Remove the harmless client fields from *body* in place; the names removed."""
    removed: list[str] = []
    management = body.get("context_management")
    if isinstance(management, Mapping):
        edits = management.get("edits")
        if (
            isinstance(edits, list)
            and set(management) <= {"edits"}
            and all(
                isinstance(e, Mapping)
                and str(e.get("type", "")).startswith("clear_thinking_")
                and e.get("keep") == "all"
                for e in edits
            )
        ):
            del body["context_management"]
            removed.append("context_management")
    config = body.get("output_config")
    if isinstance(config, Mapping) and "effort" in config:
        rest = {k: v for k, v in config.items() if k != "effort"}
        if rest:
            body["output_config"] = rest
        else:
            del body["output_config"]
        removed.append("output_config.effort")
    removed += _fold_system_messages(body)
    return removed


def _texts(content: Any) -> list[dict[str, Any]] | None:
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    if isinstance(content, list) and all(
        isinstance(b, Mapping) and b.get("type") == "text" and isinstance(b.get("text"), str)
        for b in content
    ):
        return [{"type": "text", "text": b["text"]} for b in content if b["text"]]
    return None  # not plain text: left for the translator to refuse


def _fold_system_messages(body: dict[str, Any]) -> list[str]:
    messages = body.get("messages")
    if not isinstance(messages, list):
        return []
    folded: list[dict[str, Any]] = []
    kept: list[Any] = []
    names: list[str] = []
    for index, message in enumerate(messages):
        if isinstance(message, Mapping) and message.get("role") == "system":
            texts = _texts(message.get("content"))
            if texts is not None:
                folded += texts
                names.append(f"messages.{index}(system)")
                continue
        kept.append(message)
    if not names:
        return []
    system = body.get("system")
    head = _texts(system) if system is not None else []
    if head is None:
        return []  # a system the translator will judge: leave everything as it was
    body["system"] = head + folded
    body["messages"] = kept
    return names
