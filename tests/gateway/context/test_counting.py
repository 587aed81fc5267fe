"""The token estimate against real model tokenizers (every family the benchmark measures) on
the recorded client bodies: never under any of their counts, text or through the fake upstreams'
tokenizer endpoints, and at most the stated 25% over on the bodies that can come near a window
(docs/context.md; benchmarks/context_counts.py)."""

from __future__ import annotations

import pytest

from benchmarks.context_counts import ENDPOINT_PROFILES, NEAR, endpoint_ratios, ratios
from benchmarks.tokenizer_families import FAMILIES
from tpx.gateway.context.counting import ALLOWANCE, MARGIN, estimate_tokens
from tpx.gateway.tokens import count_openai_request

#: The stated bound: estimate / a real tokenizer's count, text, bodies of NEAR tokens or more.
LOW, HIGH = 1.0, 1.25


@pytest.mark.parametrize("family", FAMILIES)
def test_the_estimate_leans_to_overcount_within_the_stated_bound(family: str) -> None:
    rows = ratios(family)
    assert len(rows) >= 30
    for name, raw, estimate, real in rows:
        assert estimate >= real, name
        if real >= NEAR:
            assert estimate <= HIGH * real, name
        assert estimate >= raw


@pytest.mark.parametrize("family", FAMILIES)
def test_the_estimate_is_within_the_stated_bound_of_the_endpoints_count(family: str) -> None:
    rows = endpoint_ratios(family)
    assert len(rows) >= 30 * len(ENDPOINT_PROFILES)
    assert {profile for profile, *_ in rows} == set(ENDPOINT_PROFILES)
    for profile, name, images, estimate, endpoint in rows:
        assert estimate >= endpoint, (profile, name)  # an image: a flat 765 tokens, over
        if not images and endpoint >= NEAR:
            assert estimate <= HIGH * endpoint, (profile, name)


def test_the_estimate_is_the_cl100k_count_with_its_margin() -> None:
    body = {"messages": [{"role": "user", "content": "word " * 500}]}
    raw = count_openai_request(body)
    assert estimate_tokens(body) == -(-raw * MARGIN // 1) + ALLOWANCE
    assert estimate_tokens(body, margin=1.05) == -(-raw * 1.05 // 1) + ALLOWANCE
    assert estimate_tokens(body) > raw


def test_a_long_text_is_tokenized_once_and_a_huge_one_never_kept() -> None:
    from tpx.gateway import tokens

    tokens._kept.cache_clear()
    text = "the same system prompt " * 200
    exact = 3 + 3 + tokens._count(text)
    for _ in range(2):  # a new string of the same text each time, as each request brings
        assert (
            count_openai_request({"messages": [{"role": "system", "content": "".join(text)}]})
            == exact
        )
    assert tokens._kept.cache_info().hits == 1
    huge = "word " * (tokens.KEEP_UP_TO // 5 + 1)
    assert count_openai_request({"messages": [{"role": "user", "content": huge}]}) > 0
    assert tokens._kept.cache_info().currsize == 1
