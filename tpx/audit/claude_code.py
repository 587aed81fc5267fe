"""Request bodies shaped like Claude Code's, for the HTTP replay.

Claude Code sends, on every turn of a session, the same members after ``messages``: a
long system prompt, its tool list, ``metadata``, ``max_tokens``, ``thinking``, ... byte
for byte. The replay's clients do the same: :func:`tail_members` takes them from a
recorded Claude Code turn (:data:`RECORDING`, shipped in the package as
``tpx/audit/data/claude-code-2.1.197-turn.json``: a copy of the repository's
``tests/fixtures/clients/claude-code/2.1.197/tour/003-post-v1-messages.json``; in the
recorded member order), with the recorded tool list cut to a few tools and the fake
upstream's own tool (:data:`TOOL`) added, so every body is far above the gateway's
tail-cache threshold (:data:`tpx.gateway.bodies.MIN_BODY`) and its tail is one the cache
keeps: every replay goes through the cache's reuse path, counted by
``tpx_conformance_tail_cache_hits`` (see :mod:`tpx.audit.serve`).
"""

from __future__ import annotations

import functools
import json
from importlib import resources
from importlib.resources.abc import Traversable
from typing import Any

__all__ = ["HEADERS", "RECORDING", "TOOL", "recorded_headers", "tail_members"]

#: the recorded turn, as package data
RECORDING: Traversable = resources.files("tpx.audit") / "data" / "claude-code-2.1.197-turn.json"
#: the recorded tools kept (the whole list is 64 KB; these keep the body near 14 KB)
KEPT_TOOLS = ("Bash", "Read", "Edit", "Write")
#: the tool the fake upstream calls: its input names the call (see the upstream's docs)
TOOL: dict[str, Any] = {
    "name": "lookup",
    "description": "Look a value up; the input names the call.",
    "input_schema": {
        "type": "object",
        "properties": {
            "conv": {"type": "string"},
            "tool": {"type": "string"},
            "call": {"type": "string"},
        },
        "required": ["conv", "tool", "call"],
    },
}
#: the headers of the recorded turn a gateway may read (the session id is the replay's)
HEADERS = ("anthropic-beta", "x-app", "user-agent")


@functools.cache
def _recorded() -> dict[str, Any]:
    record: dict[str, Any] = json.loads(RECORDING.read_text(encoding="utf-8"))
    return record


def tail_members(stream: bool) -> dict[str, Any]:
    """The members after ``messages``, in the recorded order (``stream`` as given)."""
    body = _recorded()["body"]
    names = list(body)
    out: dict[str, Any] = {}
    for name in names[names.index("messages") + 1 :]:
        value = body[name]
        if name == "tools":
            value = [t for t in value if t["name"] in KEPT_TOOLS] + [TOOL]
        if name == "stream":
            if not stream:
                continue
            value = True
        out[name] = value
    if stream and "stream" not in out:
        out["stream"] = True
    return out


def recorded_headers() -> dict[str, str]:
    """The recorded turn's headers named in :data:`HEADERS` (as Claude Code sent them)."""
    headers = {k.lower(): v for k, v in _recorded()["headers"].items()}
    return {k: headers[k] for k in HEADERS if k in headers}
