"""The token count the gateway works with: ``count_tokens``, the preflight and the usage.

One function, :func:`estimate_tokens`, over the request as it will go upstream (translated
to Chat Completions): tiktoken's ``cl100k_base`` count (:mod:`tpx.gateway.tokens`) scaled up
by :data:`MARGIN`, so that near the window tpx overcounts (compacts a little early) rather
than undercounts (the upstream refuses). The margin is what ``python -m
benchmarks.context_counts`` measured on the recorded Claude Code and SDK bodies against a real
model tokenizer (DeepSeek V4's); see docs/context.md for the figures.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from tpx.gateway.tokens import count_openai_request

__all__ = ["MARGIN", "estimate_tokens"]

#: The estimate's overcount factor over the cl100k count.
MARGIN = 1.10


def estimate_tokens(body: Mapping[str, Any], stop_above: int | None = None) -> int:
    """The input tokens of a Chat Completions request body, leaning to overcount. With
    *stop_above*, counting stops once the estimate so far exceeds it (the result is then a
    lower bound of the full estimate, and still above *stop_above*)."""
    raw_stop = None if stop_above is None else int(stop_above / MARGIN) + 1
    return math.ceil(count_openai_request(body, raw_stop) * MARGIN)
