"""``claude-`` aliases of the configured upstream models, for Claude Code's model picker.

Claude Code's discovery (``CLAUDE_CODE_ENABLE_GATEWAY_MODEL_DISCOVERY=1``) reads
``GET /v1/models`` and keeps only ids that start with ``claude`` or ``anthropic``. The
gateway lists each configured upstream model (``TPX_MODEL`` and every ``[[models]]``
``model``) as ``claude-tpx-<name>`` (the name lower-cased, every run of other characters
than letters and digits made one ``-``), its display name saying what it is
(``Qwen/Qwen3-8B via tpx (32768-token window)``). A request naming an alias goes to that
model, with the ``[[models]]`` entry naming that model (its ``max_tokens`` ceiling and
``context_window``) applied.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

__all__ = ["PREFIX", "alias_of", "aliases"]

PREFIX = "claude-tpx-"
_OTHER = re.compile(r"[^a-z0-9]+")


def alias_of(model: str) -> str:
    """The alias Claude Code's picker shows for upstream *model*."""
    return PREFIX + (_OTHER.sub("-", model.lower()).strip("-") or "model")


def aliases(models: Iterable[str]) -> Mapping[str, str]:
    """alias -> upstream model, for *models* in order (the first of two with one alias wins)."""
    table: dict[str, str] = {}
    for model in models:
        table.setdefault(alias_of(model), model)
    return table
