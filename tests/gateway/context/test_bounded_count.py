"""The preflight's count stops once it passes what the window takes: a huge request is
refused after counting only the start of it, with a refusal whose N is still above M."""

from __future__ import annotations

import re
from typing import Any

import pytest
import tiktoken

from tpx.gateway import tokens
from tpx.gateway.context.counting import estimate_tokens
from tpx.gateway.context.preflight import maximum_input, preflight

from .test_gateway_context import Upstream, body, client, settings


class _Spy:
    """The cl100k encoding, counting the characters it is given."""

    def __init__(self, inner: tiktoken.Encoding) -> None:
        self.inner = inner
        self.characters = 0

    def encode(self, text: str, **kwargs: Any) -> list[int]:
        self.characters += len(text)
        return self.inner.encode(text, **kwargs)


@pytest.fixture
def spy(monkeypatch: pytest.MonkeyPatch) -> _Spy:
    found = _Spy(tokens.encoding())
    monkeypatch.setattr(tokens, "encoding", lambda: found)
    return found


def _huge(characters: int) -> dict[str, Any]:
    text = ("word " * (characters // 5 + 1))[:characters]
    return {"messages": [{"role": "user", "content": text}]}


def test_a_count_with_a_ceiling_stops_early_and_stays_above_it(spy: _Spy) -> None:
    body = _huge(4_000_000)
    maximum = maximum_input(8192, 32000)
    count = estimate_tokens(body, maximum)
    assert count > maximum
    assert spy.characters <= 2 * tokens.PIECE
    verdict = preflight(count, 32000, 8192)
    assert verdict.refusal == f"prompt is too long: {count} tokens > {maximum} maximum"


def test_a_count_without_a_ceiling_reads_every_character(spy: _Spy) -> None:
    body = _huge(300_000)
    full = estimate_tokens(body)
    assert spy.characters == 300_000
    assert estimate_tokens(body, 10**9) == full


def test_a_request_that_fits_is_counted_in_full_with_a_ceiling() -> None:
    body = _huge(200_000)
    full = estimate_tokens(body)
    assert estimate_tokens(body, full) == full


def test_many_messages_stop_at_the_first_past_the_ceiling(spy: _Spy) -> None:
    texts = [f"{i} " + "word " * 20_000 for i in range(50)]
    body = {"messages": [{"role": "user", "content": text} for text in texts]}
    count = estimate_tokens(body, 30_000)
    assert count > 30_000
    assert spy.characters < 10 * 100_000


def test_the_gateway_refuses_a_huge_text_after_counting_its_start(spy: _Spy) -> None:
    upstream = Upstream()
    huge = ("word " * 800_000)[:4_000_000]
    with client(settings(window=200_000), upstream) as http:
        refused = http.post("/v1/messages", json=body(huge, 32_000))
    assert refused.status_code == 400
    message = refused.json()["error"]["message"]
    found = re.fullmatch(r"prompt is too long: (\d+) tokens > (\d+) maximum", message)
    assert found is not None, message
    assert int(found[1]) > int(found[2]) == maximum_input(200_000, 32_000)
    assert upstream.bodies == []
    assert spy.characters < len(huge) // 4  # about 180K tokens of the 800K counted


def test_count_tokens_stops_past_the_largest_window(spy: _Spy) -> None:
    huge = ("word " * 800_000)[:4_000_000]  # about 800K tokens
    with client(settings(window=32_768), Upstream()) as http:
        counted = http.post("/v1/messages/count_tokens", json=body(huge)).json()["input_tokens"]
    assert counted > 200_000  # past the largest window (the 200K default): the count so far
    assert spy.characters < len(huge) // 4
    small = "word " * 1000
    with client(settings(window=32_768), Upstream()) as http:
        exact = http.post("/v1/messages/count_tokens", json=body(small)).json()["input_tokens"]
    assert exact == estimate_tokens({"messages": [{"role": "user", "content": small}]})
