"""An encoded spelling of the token split across two stream deltas is caught: the hold-back
at a delta's end covers every form the scrubber matches within one delta (base64 in both
alphabets, URL-encoding, every character ``\\u``-escaped), not only the token as it is.

Both providers, a text block and tool arguments (``input_json_delta`` /
``tool_calls[].function.arguments``), the library sync and async and the gateway; each
spelling split at points inside it, what the client decodes searched for the spelling.
"""

from __future__ import annotations

import base64
import functools
import json
import urllib.parse
from collections.abc import Callable

import httpx2
import orjson
import pytest

import tpx._scrub
import tpx.transport.exchange
from tests.security.test_scrubber import (
    TOKEN,
    anthropic_stream,
    gateway_sees,
    library_sees,
    openai_text_stream,
    openai_tool_stream,
    slashed,
)
from tpx.errors import secret_forms
from tpx.gateway.settings import Credential

SPELLINGS = {
    "base64": base64.b64encode(TOKEN.encode()).decode(),
    "base64-urlsafe": base64.urlsafe_b64encode(TOKEN.encode()).decode(),
    "url-encoded": urllib.parse.quote(TOKEN, safe=""),
    "u-escaped": "".join(f"\\u{ord(c):04x}" for c in TOKEN),
}


def _points(raw: str, spelled: str) -> list[int]:
    """Places inside *spelled* (as it stands in *raw*) to cut *raw* at."""
    start = raw.index(spelled[:6])
    span = len(spelled)
    return sorted({start + k for k in (1, 2, 5, span // 2, span - 8, span - 1) if 0 < k < span})


def _text_bodies(provider: str, spelling: str) -> list[bytes]:
    text = "say " + SPELLINGS[spelling] + " ok"  # the text the client reads
    pieces = [(slashed(text[:k]), slashed(text[k:])) for k in _points(text, SPELLINGS[spelling])]
    if provider == "TPX":
        return [openai_text_stream(*pair) for pair in pieces]
    return [anthropic_stream("text", *pair) for pair in pieces]


def _tool_bodies(provider: str, spelling: str) -> list[bytes]:
    arguments = orjson.dumps({"a": SPELLINGS[spelling]}).decode()  # the JSON the client parses
    cuts = _points(arguments, json.dumps(SPELLINGS[spelling])[1:-1])
    pieces = [(slashed(arguments[:k]), slashed(arguments[k:])) for k in cuts]
    if provider == "TPX":
        return [openai_tool_stream(*pair) for pair in pieces]
    return [anthropic_stream("tool", *pair) for pair in pieces]


BODIES: dict[str, Callable[[str, str], list[bytes]]] = {
    "text": _text_bodies,
    "tool": _tool_bodies,
}


@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize("block", list(BODIES))
@pytest.mark.parametrize("provider", ["TPX", "ANTHROPIC"])
@pytest.mark.parametrize("spelling", list(SPELLINGS))
def test_a_spelling_split_across_deltas_never_reaches_a_library_caller(
    spelling: str, provider: str, block: str, asynchronous: bool
) -> None:
    for body in BODIES[block](provider, spelling):
        seen = library_sees(provider, body, stream=True, asynchronous=asynchronous)
        assert SPELLINGS[spelling] not in seen, body
        assert "[REDACTED]" in seen, body


@pytest.mark.parametrize("block", list(BODIES))
@pytest.mark.parametrize("provider", ["TPX", "ANTHROPIC"])
@pytest.mark.parametrize("spelling", list(SPELLINGS))
def test_a_spelling_split_across_deltas_never_reaches_a_gateway_client(
    spelling: str, provider: str, block: str
) -> None:
    for body in BODIES[block](provider, spelling):

        def reply(request: httpx2.Request, body: bytes = body) -> httpx2.Response:
            headers = {"content-type": "text/event-stream"}
            return httpx2.Response(200, headers=headers, content=body)

        seen = gateway_sees(provider, reply, stream=True, credential=Credential(TOKEN))
        assert SPELLINGS[spelling] not in seen, body
        assert "[REDACTED]" in seen, body


def test_the_hold_back_is_shorter_than_the_longest_form() -> None:
    """What is held back at a delta's end is at most the longest form less one character
    (and goes out, unchanged, at the block's end)."""
    scrub = tpx._scrub.Scrubber(secret_forms([TOKEN]))
    longest = max(len(form) for form in scrub._text)
    for spelled in SPELLINGS.values():
        text = "lead " + spelled[: len(spelled) // 2]  # half of it: a form's start
        ready, held = scrub.split("", text)
        assert 0 < len(held) <= longest - 1, spelled
        assert ready + held == text
        assert held.endswith(spelled[: len(spelled) // 2][-4:])


def test_a_hold_back_for_the_token_alone_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """The seeded bug: deltas held back only for the token as it is (and its JSON
    spelling): an encoded spelling split across two deltas slips through."""
    init = tpx._scrub.Scrubber.__init__

    def token_only(self: tpx._scrub.Scrubber, forms: object) -> None:
        init(self, forms)  # type: ignore[arg-type]
        self._plain = tuple(f for f in self._plain if f in (TOKEN, json.dumps(TOKEN)[1:-1]))

    monkeypatch.setattr(tpx._scrub.Scrubber, "__init__", token_only)
    # the exchanges' scrubbers are built once per tuple of secrets: a cache of their own here
    fresh = functools.lru_cache(maxsize=16)(tpx.transport.exchange._prepared.__wrapped__)
    monkeypatch.setattr(tpx.transport.exchange, "_prepared", fresh)
    for spelling in SPELLINGS:
        bodies = _text_bodies("TPX", spelling)
        assert any(
            SPELLINGS[spelling] in library_sees("TPX", body, stream=True, asynchronous=False)
            for body in bodies
        ), spelling


def test_exchanges_share_the_scrubber_of_their_secrets_and_a_new_one_gets_its_own() -> None:
    """The forms and the scrubber are built once per tuple of secrets: two exchanges
    holding the token share them; a fresh credential has its own, which removes it."""
    from tpx.transport.exchange import Exchange, Provider

    one, two = (Exchange(Provider.TPX, secrets=[TOKEN]) for _ in range(2))
    other = Exchange(Provider.TPX, secrets=[TOKEN + "-rotated"])
    assert one._scrub is two._scrub
    assert one._secrets == secret_forms([TOKEN])
    assert other._scrub is not one._scrub
    assert other._secrets == secret_forms([TOKEN + "-rotated"])
    echo = f'{{"text": "{TOKEN}-rotated"}}'.encode()
    assert TOKEN.encode() not in other._scrub.reply(echo)[0]
