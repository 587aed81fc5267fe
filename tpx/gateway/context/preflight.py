"""The preflight: does a request fit its model's context window? Pure; no I/O.

A request's input tokens (:mod:`tpx.gateway.context.counting`) plus its ``max_tokens``
against the window:

* everything fits: the request goes as it is;
* the input fits with at least ``min_output`` tokens (or ``max_tokens``, when smaller) left
  for the reply: ``max_tokens`` is lowered to what is left (``clamped``);
* otherwise the request is refused before the wire with the Messages API's
  ``400 invalid_request_error`` ``prompt is too long: N tokens > M maximum``, where M is the
  most input the window takes with that reply room (:func:`maximum_input`); Claude Code
  compacts on it. Counting stops as soon as the count so far passes M, so N is the count up
  to there: a lower bound of the request's tokens that already exceeds M.

Counting costs time (a tokenizer pass over the translated request), so :func:`may_overflow`
tells first, from the body's size alone, whether a request can come near its window: a
cl100k token is at least one byte of the body, the estimate is that count times its margin
(:data:`tpx.gateway.context.counting.MARGIN`, or the configured one) plus its
:data:`~tpx.gateway.context.counting.ALLOWANCE`, and the translation adds at most
:data:`SLACK` tokens of framing. (An image counts a flat 765 tokens: a body of many tiny
images can pass this test and be counted by nobody; the upstream's own error, rewritten,
covers it.)
"""

from __future__ import annotations

import math

import attrs

from tpx.gateway.context.counting import ALLOWANCE, MARGIN
from tpx.transport.translate.overflow import too_long

__all__ = ["SLACK", "Verdict", "maximum_input", "may_overflow", "preflight"]

#: Tokens the translation and a chat template may add beyond the body's bytes.
SLACK = 4096


@attrs.frozen
class Verdict:
    """The preflight's decision: ``refusal`` (the message) or the ``max_tokens`` to send."""

    input_tokens: int
    window: int
    max_tokens: int | None
    clamped: bool = False
    refusal: str | None = None
    #: the most input tokens the window takes with the reply room kept (a refusal's M)
    maximum: int | None = None

    @property
    def refused(self) -> bool:
        return self.refusal is not None


def may_overflow(
    body_bytes: int, max_tokens: int | None, window: int, margin: float = MARGIN
) -> bool:
    """Can a body of *body_bytes* bytes asking for *max_tokens* come near *window*, counted
    with the estimate's *margin*? ``False`` is certain (no need to count); ``True`` means
    count."""
    return math.ceil(body_bytes * margin) + ALLOWANCE + SLACK + (max_tokens or 0) > window


def maximum_input(window: int, max_tokens: int | None, min_output: int = 1024) -> int:
    """The most input tokens *window* takes with the reply room kept (a refusal's M): an
    input above it is refused, so counting may stop once the count passes it."""
    wanted = max_tokens if max_tokens is not None else 0
    keep = max(min(min_output, wanted) if wanted > 0 else min_output, 1)
    return max(window - keep, 0)


def preflight(
    input_tokens: int, max_tokens: int | None, window: int, *, min_output: int = 1024
) -> Verdict:
    """Fit *input_tokens* and *max_tokens* into *window* (see the module docstring)."""
    room = window - input_tokens
    wanted = max_tokens if max_tokens is not None else 0
    if wanted <= room and room > 0:
        return Verdict(input_tokens, window, max_tokens)
    maximum = maximum_input(window, max_tokens, min_output)
    if input_tokens > maximum:
        return Verdict(
            input_tokens,
            window,
            max_tokens,
            refusal=too_long(input_tokens, maximum),
            maximum=maximum,
        )
    return Verdict(input_tokens, window, room, clamped=True)
