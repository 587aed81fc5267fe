"""The preflight's decision (pure) and the size test that spares counting."""

from __future__ import annotations

import math
import re

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from tpx.gateway.context.counting import ALLOWANCE, MARGIN, estimate_tokens
from tpx.gateway.context.preflight import SLACK, may_overflow, preflight


def test_a_request_that_fits_is_sent_as_it_is() -> None:
    verdict = preflight(1000, 2000, 8192)
    assert (verdict.refused, verdict.clamped, verdict.max_tokens) == (False, False, 2000)


def test_max_tokens_is_clamped_to_what_the_window_leaves() -> None:
    verdict = preflight(6000, 32000, 8192)
    assert (verdict.refused, verdict.clamped, verdict.max_tokens) == (False, True, 2192)


def test_an_input_leaving_too_little_room_is_refused_in_the_messages_wording() -> None:
    verdict = preflight(7500, 32000, 8192, min_output=1024)
    assert verdict.refusal == "prompt is too long: 7500 tokens > 7168 maximum"


def test_an_input_over_the_window_is_refused() -> None:
    verdict = preflight(9000, 100, 8192)
    assert verdict.refusal == "prompt is too long: 9000 tokens > 8092 maximum"


def test_a_small_max_tokens_needs_only_its_own_room() -> None:
    assert not preflight(8000, 100, 8192).refused
    assert preflight(8100, 100, 8192).refusal == "prompt is too long: 8100 tokens > 8092 maximum"


@given(
    tokens=st.integers(0, 300_000),
    wanted=st.one_of(st.none(), st.integers(1, 200_000)),
    window=st.integers(1, 300_000),
    keep=st.integers(1, 8192),
)
def test_what_is_sent_always_fits_and_a_refusal_says_n_greater_than_m(
    tokens: int, wanted: int | None, window: int, keep: int
) -> None:
    verdict = preflight(tokens, wanted, window, min_output=keep)
    if verdict.refused:
        assert verdict.refusal is not None
        found = re.fullmatch(r"prompt is too long: (\d+) tokens > (\d+) maximum", verdict.refusal)
        assert found is not None
        assert int(found.group(1)) == tokens > int(found.group(2))
    else:
        assert tokens + (verdict.max_tokens or 0) <= window
        assert tokens < window
        if verdict.clamped:
            assert wanted is not None
            assert verdict.max_tokens is not None
            assert verdict.max_tokens < wanted


def test_only_a_body_near_its_window_is_counted() -> None:
    assert not may_overflow(50_000, 32_000, 200_000)
    assert may_overflow(50_000, 32_000, 32_768)
    edge = 120_000 + ALLOWANCE + SLACK
    assert may_overflow(100_000, 0, edge - 1)
    assert not may_overflow(100_000, 0, edge)
    assert not may_overflow(100_000, 0, edge - 5000, margin=1.1)


@settings(deadline=None)  # the first example loads the tokenizer
@given(text=st.text(min_size=1, max_size=3000))
def test_a_body_the_size_test_passes_never_counts_over_its_window(text: str) -> None:
    body = {"messages": [{"role": "user", "content": text}]}
    size = len(orjson.dumps(body))
    window = math.ceil(size * MARGIN) + ALLOWANCE + SLACK
    assert not may_overflow(size, 0, window)
    assert estimate_tokens(body) <= window
