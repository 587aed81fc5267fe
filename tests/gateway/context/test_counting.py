"""The token estimate against a real model tokenizer on the recorded client bodies: never
under it, and at most the stated 20% over (docs/context.md; benchmarks/context_counts.py)."""

from __future__ import annotations

from benchmarks.context_counts import ratios
from tpx.gateway.context.counting import MARGIN, estimate_tokens
from tpx.gateway.tokens import count_openai_request

#: The stated bound: estimate / real tokenizer, on the recorded bodies.
LOW, HIGH = 1.0, 1.2


def test_the_estimate_leans_to_overcount_within_the_stated_bound() -> None:
    rows = ratios()
    assert len(rows) >= 30
    for name, raw, estimate, real in rows:
        assert LOW <= estimate / real <= HIGH, name
        assert estimate >= raw


def test_the_estimate_is_the_cl100k_count_with_its_margin() -> None:
    body = {"messages": [{"role": "user", "content": "word " * 500}]}
    assert estimate_tokens(body) == -(-count_openai_request(body) * MARGIN // 1)
    assert estimate_tokens(body) > count_openai_request(body)
