"""The token count the gateway works with: ``count_tokens``, the preflight and the usage.

One function, :func:`estimate_tokens`, over the request as it will go upstream (translated
to Chat Completions): tiktoken's ``cl100k_base`` count (:mod:`tpx.gateway.tokens`) scaled up
by a margin (:data:`MARGIN` unless ``[context] estimate_margin`` says another) plus
:data:`ALLOWANCE`, so that near the window tpx overcounts (compacts a little early) rather
than undercounts (the upstream refuses). The margin is the largest that ``python -m
benchmarks.context_counts`` found needed, on the recorded Claude Code and SDK bodies, over
every real model tokenizer it measures (DeepSeek, Qwen, Mistral's Tekken and SentencePiece
vocabularies), with headroom; the allowance covers a chat template's fixed text on a small
request. docs/context.md has the figures, per tokenizer.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from tpx.gateway.tokens import count_openai_request

__all__ = ["ALLOWANCE", "MARGIN", "estimate_tokens"]

#: The estimate's overcount factor over the cl100k count (the default; ``[context]
#: estimate_margin`` sets another).
MARGIN = 1.20
#: Tokens added to every estimate: a chat template's fixed text, which a factor does not
#: cover on a small request.
ALLOWANCE = 64


def estimate_tokens(
    body: Mapping[str, Any], stop_above: int | None = None, margin: float = MARGIN
) -> int:
    """The input tokens of a Chat Completions request body, leaning to overcount: the cl100k
    count times *margin*, plus :data:`ALLOWANCE`. With *stop_above*, counting stops once the
    estimate so far exceeds it (the result is then a lower bound of the full estimate, and
    still above *stop_above*)."""
    raw_stop = None if stop_above is None else max(int((stop_above - ALLOWANCE) / margin), 0) + 1
    return math.ceil(count_openai_request(body, raw_stop) * margin) + ALLOWANCE
