"""The client fixture corpus (tests/fixtures/clients): recorded Claude Code requests and
the bodies the official SDKs build."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

ROOT = Path(__file__).parents[2] / "fixtures" / "clients"


def _is_turn(record: dict[str, Any]) -> bool:
    path = record.get("path", "")
    return (
        record.get("method") == "POST"
        and path.startswith("/v1/messages")
        and "count_tokens" not in path
    )


def client_requests() -> dict[str, dict[str, Any]]:
    """``"<client>/<run>/<file>"`` -> the Messages request body, for every recorded turn."""
    found: dict[str, dict[str, Any]] = {}
    for path in sorted(ROOT.rglob("*.json")):
        if path.name == "manifest.json" or "node_modules" in path.parts:
            continue
        record = json.loads(path.read_text())
        if isinstance(record, dict) and _is_turn(record):
            found[str(path.relative_to(ROOT).with_suffix(""))] = record["body"]
    return found


def claude_code_requests() -> dict[str, dict[str, Any]]:
    """The recorded Claude Code turns only."""
    return {k: v for k, v in client_requests().items() if k.startswith("claude-code/")}
