"""The token estimate against a real model tokenizer on the recorded client bodies: never
under it, and at most the stated 20% over; against the fake upstream's tokenizer endpoints,
through count_tokens, within the stated bound (docs/context.md; benchmarks/context_counts.py)."""

from __future__ import annotations

from benchmarks.context_counts import ENDPOINT_PROFILES, endpoint_ratios, ratios
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


def test_the_estimate_is_within_the_stated_bound_of_the_endpoints_count() -> None:
    rows = endpoint_ratios()
    assert len(rows) >= 30 * len(ENDPOINT_PROFILES)
    assert {profile for profile, *_ in rows} == set(ENDPOINT_PROFILES)
    for profile, name, images, estimate, endpoint in rows:
        if images:  # an image counts a flat 765 tokens: over what a server counts for these
            assert estimate >= endpoint, (profile, name)
        else:  # text only: from 20% under to 30% over (0.80 .. 1.30)
            assert 5 * estimate >= 4 * endpoint, (profile, name)
            assert 10 * estimate <= 13 * endpoint, (profile, name)


def test_the_estimate_is_the_cl100k_count_with_its_margin() -> None:
    body = {"messages": [{"role": "user", "content": "word " * 500}]}
    assert estimate_tokens(body) == -(-count_openai_request(body) * MARGIN // 1)
    assert estimate_tokens(body) > count_openai_request(body)


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
