"""Deterministic (seeded) agent-like corpus for the translation benchmarks.

* requests: a 10-40 KB system prompt, 14 tools with JSON schemas, and a history of
  1, 20 or 120 tool_use/tool_result turns with 1-3 parallel calls each; results of
  50-400 words, some as text blocks, some with ``is_error``;
* 200 Chat Completions responses with 0-3 tool calls.

Everything is JSON bytes (what the hot path sees).
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import orjson

__all__ = ["HISTORY_TURNS", "request_bytes", "response_set"]

HISTORY_TURNS = (1, 20, 120)

_LINES = (
    "the a file path function return value error test module import class object list dict",
    "string build run check fix patch diff line column token parse read write open close",
    "search replace index cache state model request response tool result input output",
    "async await lock queue thread process signal timeout retry backoff http json schema",
)
_WORDS = [word for line in _LINES for word in line.split()]

_TOOL_NAMES = (
    "read_file",
    "write_file",
    "edit_file",
    "list_dir",
    "glob",
    "grep",
    "run_shell",
    "run_tests",
    "web_fetch",
    "git_diff",
    "git_log",
    "todo_write",
    "ask_user",
    "task",
)


def _words(rng: random.Random, low: int, high: int) -> str:
    return " ".join(rng.choice(_WORDS) for _ in range(rng.randint(low, high)))


def _schema(rng: random.Random) -> dict[str, Any]:
    properties: dict[str, Any] = {}
    for index in range(rng.randint(1, 6)):
        kind = rng.choice(["string", "integer", "boolean", "array"])
        prop: dict[str, Any] = {"type": kind, "description": _words(rng, 5, 25)}
        if kind == "array":
            prop["items"] = {"type": "string"}
        if kind == "string" and rng.random() < 0.3:
            prop["enum"] = [rng.choice(_WORDS) for _ in range(3)]
        properties[f"arg{index}"] = prop
    return {
        "type": "object",
        "properties": properties,
        "required": sorted(properties)[:1],
        "additionalProperties": False,
    }


def _tools(rng: random.Random) -> list[dict[str, Any]]:
    return [
        {"name": name, "description": _words(rng, 20, 120), "input_schema": _schema(rng)}
        for name in _TOOL_NAMES
    ]


def _system(rng: random.Random) -> list[dict[str, Any]] | str:
    target = rng.randint(10_000, 40_000)
    paragraphs: list[str] = []
    size = 0
    while size < target:
        paragraph = _words(rng, 40, 120)
        paragraphs.append(paragraph)
        size += len(paragraph) + 2
    text = "\n\n".join(paragraphs)
    if rng.random() < 0.5:
        return text
    return [{"type": "text", "text": text, "cache_control": {"type": "ephemeral"}}]


def _tool_input(rng: random.Random) -> dict[str, Any]:
    return {
        "path": "/".join(rng.choice(_WORDS) for _ in range(4)) + ".py",
        "query": _words(rng, 2, 10),
        "limit": rng.randint(1, 500),
        "recursive": rng.random() < 0.5,
    }


def _history(rng: random.Random, turns: int) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [{"role": "user", "content": _words(rng, 20, 80)}]
    for turn in range(turns):
        calls = rng.randint(1, 3)
        ids = [f"tpxr{position}_call_{turn}_{position}" for position in range(calls)]
        assistant: list[dict[str, Any]] = []
        if rng.random() < 0.6:
            assistant.append({"type": "text", "text": _words(rng, 5, 60)})
        assistant.extend(
            {
                "type": "tool_use",
                "id": call_id,
                "name": rng.choice(_TOOL_NAMES),
                "input": _tool_input(rng),
            }
            for call_id in ids
        )
        messages.append({"role": "assistant", "content": assistant})
        results: list[dict[str, Any]] = []
        for call_id in ids:
            text = _words(rng, 50, 400)
            result: dict[str, Any] = {"type": "tool_result", "tool_use_id": call_id}
            result["content"] = [{"type": "text", "text": text}] if rng.random() < 0.4 else text
            if rng.random() < 0.1:
                result["is_error"] = True
            results.append(result)
        if rng.random() < 0.15:
            results.append({"type": "text", "text": _words(rng, 3, 30)})
        messages.append({"role": "user", "content": results})
    messages.append({"role": "assistant", "content": [{"type": "text", "text": "Done."}]})
    messages.append({"role": "user", "content": _words(rng, 5, 40)})
    return messages


def request_bytes(turns: int, seed: int = 0) -> bytes:
    """One agent-like Messages request with *turns* tool turns, as JSON bytes."""
    rng = random.Random(seed * 1000 + turns)
    body = {
        "model": "claude-sonnet-4-5",
        "max_tokens": 8192,
        "system": _system(rng),
        "tools": _tools(rng),
        "tool_choice": {"type": "auto"},
        "messages": _history(rng, turns),
        "temperature": 0.7,
        "metadata": {"user_id": "bench-user"},
        "stream": False,
    }
    return orjson.dumps(body)


def _response(rng: random.Random, index: int) -> dict[str, Any]:
    calls = rng.choice([0, 0, 1, 1, 2, 3])
    message: dict[str, Any] = {"role": "assistant", "content": _words(rng, 5, 150)}
    if calls:
        if rng.random() < 0.5:
            message["content"] = None
        message["tool_calls"] = [
            {
                "id": f"call_{rng.getrandbits(64):016x}",
                "type": "function",
                "function": {
                    "name": rng.choice(_TOOL_NAMES),
                    "arguments": orjson.dumps(_tool_input(rng)).decode(),
                },
            }
            for _ in range(calls)
        ]
    prompt = rng.randint(1000, 90_000)
    return {
        "id": f"chatcmpl-{index:06d}",
        "object": "chat.completion",
        "created": 1_700_000_000 + index,
        "model": "tpx-large",
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": "tool_calls" if calls else "stop",
                "logprobs": None,
            }
        ],
        "usage": {
            "prompt_tokens": prompt,
            "completion_tokens": rng.randint(1, 2000),
            "total_tokens": prompt + 2000,
            "prompt_tokens_details": {"cached_tokens": rng.randint(0, prompt)},
        },
    }


def response_set(count: int = 200, seed: int = 0) -> list[bytes]:
    """*count* Chat Completions responses (0-3 tool calls each) as JSON bytes."""
    rng = random.Random(seed)
    return [orjson.dumps(_response(rng, index)) for index in range(count)]


_CLIENTS = Path(__file__).parent.parent / "tests" / "fixtures" / "clients" / "claude-code"


def claude_code_bytes() -> list[bytes]:
    """Every recorded Claude Code turn (``POST /v1/messages``) as the JSON bytes it sent
    (re-serialized from the redacted recording)."""
    found: list[bytes] = []
    for path in sorted(_CLIENTS.rglob("*.json")):
        record = orjson.loads(path.read_bytes())
        if (
            isinstance(record, dict)
            and record.get("method") == "POST"
            and str(record.get("path", "")).startswith("/v1/messages")
            and "count_tokens" not in record["path"]
        ):
            found.append(orjson.dumps(record["body"]))
    return found
