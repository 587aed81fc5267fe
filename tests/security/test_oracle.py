"""The redactor is no oracle: guess-and-see through every echo a client can reach.

An upstream whose errors quote the request (a 404 naming the model asked for, a 400 or an
in-stream error quoting the user's text, a count_tokens 404) hands a client's guess back
through the gateway. Were the gateway to redact parts of such a text, each guess would
come back whole or with ``[REDACTED]`` where it matched a secret: a few thousand requests
recover the upstream token. The rule (tpx.errors): the text is shown whole or withheld
whole, and only a whole secret withholds it. So every reply here is checked against the
reply to a *twin* guess of the same length that matches nothing: once the guess is put
back in place of its twin, the two replies are the same, for guesses made of true pieces
of the secrets (runs, prefixes cut with ``...``) and random ones alike.

The fast run takes a few hundred guesses; the slow one (``-m slow``) 10,000 per channel.
"""

from __future__ import annotations

import random
import re
import string
from collections.abc import Callable, Iterator
from typing import Any

import httpx2
import orjson
import pytest

import tpx.errors
from tests.gateway.conftest import make_settings
from tpx.gateway.core import Gateway
from tpx.gateway.settings import Credential
from tpx.gateway.upstream import SyncUpstream
from tpx.sdk import GatewayTransport

_ALPHABET = string.ascii_letters + string.digits
_RNG = random.Random(20260101)
TOKEN = "sk-proj-" + "".join(_RNG.choice(_ALPHABET) for _ in range(48))
KEY = "sk-ant-api03-" + "".join(_RNG.choice(_ALPHABET + "-_") for _ in range(48))
THINKING = "".join(_RNG.choice("0123456789abcdef") for _ in range(64))
GATEWAY_KEY = "gw-" + "".join(_RNG.choice(_ALPHABET) for _ in range(29))
#: what a twin guess is made of: no secret holds it
_TWIN = "~"


def _echo_text(body: dict[str, Any]) -> str:
    content = body["messages"][0]["content"]
    return content if isinstance(content, str) else str(content[0]["text"])


def _openai_upstream(request: httpx2.Request) -> httpx2.Response:
    """An OpenAI-compatible upstream that quotes the request in its errors."""
    body = orjson.loads(request.content)
    text = _echo_text(body)
    if text.startswith("ECHO400 "):
        message = f"Invalid 'messages[0].content': {text[8:]!r} is not allowed"
        return httpx2.Response(400, json={"error": {"message": message, "type": "invalid"}})
    if text.startswith("MIDSTREAM "):
        chunk = {
            "id": "c1",
            "object": "chat.completion.chunk",
            "model": "m",
            "choices": [
                {"index": 0, "delta": {"role": "assistant", "content": "ok"}, "finish_reason": None}
            ],
        }
        error = {"error": {"message": f"content filter tripped on {text[10:]}"}}
        sse = b"data: " + orjson.dumps(chunk) + b"\n\ndata: " + orjson.dumps(error) + b"\n\n"
        return httpx2.Response(200, headers={"content-type": "text/event-stream"}, content=sse)
    message = f"The model `{body['model']}` does not exist or you do not have access to it."
    return httpx2.Response(404, json={"error": {"message": message, "type": "invalid_request"}})


def _anthropic_upstream(request: httpx2.Request) -> httpx2.Response:
    """An Anthropic upstream that quotes the request in its errors."""
    body = orjson.loads(request.content)
    if request.url.path.endswith("/count_tokens"):
        message = f"model: {body['model']}"
        error = {"type": "error", "error": {"type": "not_found_error", "message": message}}
        return httpx2.Response(404, json=error)
    text = _echo_text(body)
    if text.startswith("ECHO400 "):
        error = {"type": "invalid_request_error", "message": f"messages.0: {text[8:]}"}
        return httpx2.Response(400, json={"type": "error", "error": error})
    if text.startswith("MIDSTREAM "):
        start = {
            "type": "message_start",
            "message": {
                "id": "msg_1",
                "type": "message",
                "role": "assistant",
                "model": "m",
                "content": [],
                "stop_reason": None,
                "stop_sequence": None,
                "usage": {"input_tokens": 1, "output_tokens": 0},
            },
        }
        error = {
            "type": "error",
            "error": {"type": "invalid_request_error", "message": f"refused: {text[10:]}"},
        }
        sse = (
            b"event: message_start\ndata: " + orjson.dumps(start) + b"\n\n"
            b"event: error\ndata: " + orjson.dumps(error) + b"\n\n"
        )
        return httpx2.Response(200, headers={"content-type": "text/event-stream"}, content=sse)
    error = {"type": "not_found_error", "message": f"model: {body['model']}"}
    return httpx2.Response(404, json={"type": "error", "error": error})


def gateway_client(provider: str) -> httpx2.Client:
    """A client of the gateway core in-process, its upstream one of the echoing fakes."""
    credential = Credential(TOKEN if provider == "TPX" else KEY)
    settings = make_settings(
        provider, credential=credential, gateway_key=GATEWAY_KEY, thinking_secret=THINKING
    )
    fake = _openai_upstream if provider == "TPX" else _anthropic_upstream
    upstream = SyncUpstream(settings, transport=httpx2.MockTransport(fake))
    transport = GatewayTransport(Gateway(settings), upstream)
    return httpx2.Client(transport=transport, base_url="http://tpx.in-process")


_IDS = re.compile(r"\b(req|msg|toolu)_[A-Za-z0-9_-]+")

#: how a channel puts a guess into a request: (path, body)
Channel = Callable[[str], tuple[str, dict[str, Any]]]


def _messages(model: str, text: str, stream: bool = False) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": model,
        "max_tokens": 16,
        "messages": [{"role": "user", "content": text}],
    }
    if stream:
        body["stream"] = True
    return body


CHANNELS: dict[str, Channel] = {
    "model": lambda g: ("/v1/messages", _messages(g, "hi")),
    "model-streamed": lambda g: ("/v1/messages", _messages(g, "hi", stream=True)),
    "user-text": lambda g: ("/v1/messages", _messages("m", "ECHO400 " + g)),
    "user-text-streamed": lambda g: ("/v1/messages", _messages("m", "ECHO400 " + g, True)),
    "in-stream-error": lambda g: ("/v1/messages", _messages("m", "MIDSTREAM " + g, True)),
    "count-tokens": lambda g: (
        "/v1/messages/count_tokens",
        {"model": g, "messages": [{"role": "user", "content": "hi"}]},
    ),
}


def observe(client: httpx2.Client, channel: str, guess: str) -> str:
    """Everything the client sees for *guess* (status, headers that are not ids, body),
    with the guess itself written ``<G>`` and the per-request ids blanked."""
    path, body = CHANNELS[channel](guess)
    response = client.post(path, json=body, headers={"x-api-key": GATEWAY_KEY})
    text = response.read().decode()
    seen = f"{response.status_code} {response.headers.get('content-type')}\n{text}"
    # the guess as the client reads it: in JSON (escaped) and, quoted by repr, as is
    for spelling in (orjson.dumps(guess).decode()[1:-1], guess):
        seen = seen.replace(spelling, "<G>")
    return _IDS.sub(r"\1_ID", seen)


def twin(guess: str) -> str:
    return _TWIN * len(guess)


def guesses(count: int, seed: int) -> Iterator[str]:
    """Guesses an attacker would make: true runs and prefixes of each secret (bare, cut with
    ``...`` or ``\u2026``, inside noise), near misses, random strings; never a whole secret."""
    rng = random.Random(seed)
    secrets = (TOKEN, KEY, THINKING, GATEWAY_KEY)
    for n in range(count):
        secret = secrets[n % len(secrets)]
        kind = n // len(secrets) % 5
        if kind == 0:  # a run of 5 to len-1 characters
            size = rng.randrange(5, len(secret))
            start = rng.randrange(0, len(secret) - size + 1)
            guess = secret[start : start + size]
        elif kind == 1:  # a prefix, cut
            guess = secret[: rng.randrange(4, len(secret))] + rng.choice(["...", "\u2026"])
        elif kind == 2:  # a run inside noise
            size = rng.randrange(8, len(secret))
            start = rng.randrange(0, len(secret) - size + 1)
            guess = "x" * rng.randrange(0, 4) + secret[start : start + size] + "-y"
        elif kind == 3:  # a near miss: one character changed
            guess = secret[: rng.randrange(8, len(secret) - 1)] + "~"
        else:
            guess = "".join(rng.choice(_ALPHABET) for _ in range(rng.randrange(4, 60)))
        assert not any(s in guess for s in secrets)
        yield guess


def learns_nothing(provider: str, channel: str, count: int, seed: int = 0) -> list[str]:
    """The guesses whose reply differs from their twin's (empty: the channel is no oracle)."""
    differ: list[str] = []
    with gateway_client(provider) as client:
        for guess in guesses(count, seed):
            if observe(client, channel, guess) != observe(client, channel, twin(guess)):
                differ.append(guess)
    return differ


def _channels(provider: str) -> list[str]:
    # TPX counts tokens itself: no upstream text comes back there
    return [c for c in CHANNELS if not (provider == "TPX" and c == "count-tokens")]


PAIRS = [(p, c) for p in ("TPX", "ANTHROPIC") for c in _channels(p)]


def test_the_echo_channels_do_echo() -> None:
    """The rig is live: every channel hands the guess back to the client (so a redactor
    that cut into it would show), and an error body stays Messages-shaped and typed."""
    for provider, channel in PAIRS:
        with gateway_client(provider) as client:
            seen = observe(client, channel, "plain-guess-0001")
        assert "<G>" in seen, (provider, channel, seen)
        assert '"type":"error"' in seen, (provider, channel, seen)


@pytest.mark.parametrize(("provider", "channel"), PAIRS)
def test_no_guess_learns_anything(provider: str, channel: str) -> None:
    assert learns_nothing(provider, channel, count=60) == []


def test_a_whole_secret_echoed_by_the_upstream_is_withheld_whole() -> None:
    """The one thing that withholds a text: a whole secret in it (here the upstream
    quoting the token it was sent, in the model channel)."""
    with gateway_client("TPX") as client:
        seen = observe(client, "model", TOKEN)
    assert TOKEN not in seen
    assert "does not exist" not in seen  # withheld whole, not cut around the token
    assert "[REDACTED]" in seen


@pytest.mark.slow
@pytest.mark.parametrize(("provider", "channel"), PAIRS)
def test_ten_thousand_guesses_learn_nothing(provider: str, channel: str) -> None:
    assert learns_nothing(provider, channel, count=10_000, seed=1) == []


@pytest.mark.parametrize("provider", ["TPX", "ANTHROPIC"])
def test_a_redactor_that_cuts_into_the_text_is_caught(
    provider: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The seeded bug: a provider's error text redacted piece by piece again (the fragment
    rule on what a client sees). The guess-and-see check finds the guesses it gives away."""
    monkeypatch.setattr(tpx.errors, "withheld", tpx.errors.redact)
    assert learns_nothing(provider, "model", count=20)
