"""The fake caller: a Messages client that behaves like a real one.

Every request carries the whole conversation so far -- the system prompt, the tool
definitions, every earlier user turn, every assistant turn it was handed (thinking blocks
included, as the provider gave them) and every earlier tool round -- and then the new user
turn: the tool_results answering the last assistant turn's tool_uses (or a question when
there is nothing to answer).

Some requests end with a prefill (a trailing assistant text), which is not kept in the
history. Tool results vary, drawn from a generator seeded per boot (:meth:`FakeCaller.reset`):
``is_error`` absent, ``false`` or ``true``; content a string or a list with one text
block; a trailing text in the same user message or in a second, consecutive one (the
Messages API merges consecutive user messages into one turn); answers in the calls' order
or reversed (``reverse_answers``).

Failures follow the spec (README, "Retries and restarts"): after ``ProviderFail`` or
``CallerAbort`` nothing is pending, so a caller cannot re-send the same tool_results. It
starts a new turn instead: the unanswered tool round is *folded* into plain text in its
history (the assistant's tool_use blocks and the tool_results of the failed request become
text blocks), so the history stays a valid Messages conversation (no tool_use without its
tool_result) and the next request's last user turn carries no tool_result.

The caller records which fake reply each tool round of its history came from
(:attr:`FakeCaller.rounds`, serials into ``FakeProvider.replies``; ``sent_rounds`` for
the request on the wire): the abstraction checks the ids the provider receives against
the ids that reply emitted.
"""

from __future__ import annotations

import random
from typing import Any, Literal

import attrs

from conformance.shapes import MARK, planted_call_id

__all__ = ["ABORT_STYLES", "AbortStyle", "FakeCaller", "folded"]

AbortStyle = Literal["silent", "partial", "unknown", "duplicate"]
ABORT_STYLES: tuple[AbortStyle, ...] = ("silent", "partial", "unknown", "duplicate")

SYSTEM = "You are a conformance probe."
TOOLS = [
    {
        "name": "probe",
        "description": "Echo a probe.",
        "input_schema": {"type": "object", "properties": {"probe": {"type": "string"}}},
    }
]


def folded(message: dict[str, Any]) -> dict[str, Any]:
    """*message* with its tool_use / tool_result blocks turned into plain text."""
    content = message.get("content")
    if not isinstance(content, list):
        return message
    out: list[Any] = []
    for block in content:
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "tool_use":
            out.append({"type": "text", "text": f"(I called {block.get('name')})"})
        elif kind == "tool_result":
            out.append({"type": "text", "text": "(the tool's output, sent as text)"})
        else:
            out.append(block)
    return {**message, "content": out}


@attrs.define
class FakeCaller:
    """A Messages caller keeping the whole conversation (see the module docstring).

    ``obligations`` are the tool_use blocks of the last delivered body (cleared when an
    exchange ends in an error); ``sent`` is the last request the transport accepted.
    """

    reverse_answers: bool = False
    seed: int = 0
    history: list[dict[str, Any]] = attrs.field(factory=list)
    rounds: list[int] = attrs.field(factory=list)
    """the serial of the fake reply behind each tool round of ``history``, in order (-1:
    not known)"""
    sent_rounds: tuple[int, ...] = ()
    """``rounds`` of the request on the wire (its last one: the round it answers)"""
    obligations: list[dict[str, Any]] = attrs.field(factory=list)
    last_delivered: dict[str, Any] | None = None
    last_stream: bytes | None = None
    """the bytes of the last delivery when it was a stream (``None``: a plain body)"""
    delivered_serial: int | None = None
    """the serial of the fake reply behind the last delivered body"""
    sent: dict[str, Any] | None = None
    _tail: list[dict[str, Any]] = attrs.field(factory=list)
    _tail_sent: bool = False
    _turn: int = 0
    _rng: random.Random = attrs.field(factory=random.Random)

    def reset(self, *, reverse_answers: bool = False, seed: int = 0) -> None:
        self.reverse_answers = reverse_answers
        self.seed = seed
        self._rng.seed(f"caller:{seed}")
        self.history = []
        self.rounds = []
        self.sent_rounds = ()
        self.obligations = []
        self.last_delivered = None
        self.last_stream = None
        self.delivered_serial = None
        self.sent = None
        self._tail = []
        self._tail_sent = False
        self._turn = 0

    def _request(self, tail: list[dict[str, Any]]) -> dict[str, Any]:
        self._turn += 1
        self._tail = tail
        self._tail_sent = False
        # sometimes a prefill: a trailing assistant text the reply continues (not kept in
        # the history; the last user turn is still the one before it)
        prefill = (
            [{"role": "assistant", "content": [{"type": "text", "text": "Sure,"}]}]
            if self._rng.random() < 0.15
            else []
        )
        return {  # in Claude Code's order: what follows the messages is the same every turn
            "model": "claude-fake",
            "messages": [*self.history, *tail, *prefill],
            "system": SYSTEM,
            "tools": TOOLS,
            "max_tokens": 64,
        }

    def _result(self, tool_use: dict[str, Any]) -> dict[str, Any]:
        aid = planted_call_id(tool_use.get("name"), tool_use.get("input"))
        text = f"{MARK}{aid if aid is not None else '?'} done"
        block: dict[str, Any] = {"type": "tool_result", "tool_use_id": tool_use.get("id")}
        block["content"] = text if self._rng.random() < 0.5 else [{"type": "text", "text": text}]
        error = self._rng.choice((None, False, True))
        if error is not None:
            block["is_error"] = error
        return block

    def _answer(self, results: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The new user turn carrying *results* (and, drawn, a trailing text)."""
        if not results:
            return [
                {"role": "user", "content": [{"type": "text", "text": f"question {self._turn}"}]}
            ]
        extra = self._rng.choice(("none", "same", "next"))
        note = {"type": "text", "text": "go on"}
        if extra == "same":
            return [{"role": "user", "content": [*results, note]}]
        if extra == "next":
            return [
                {"role": "user", "content": results},
                {"role": "user", "content": [note]},
            ]
        return [{"role": "user", "content": results}]

    def request(self) -> dict[str, Any]:
        """A request answering every obligation with exactly one tool_result (CallerSend)."""
        uses = list(reversed(self.obligations)) if self.reverse_answers else self.obligations
        return self._request(self._answer([self._result(u) for u in uses]))

    def bad_request(self, style: AbortStyle) -> dict[str, Any]:
        """A request whose tool_results do not answer the obligations (CallerAbort)."""
        results = [self._result(u) for u in self.obligations]
        if style == "partial":
            results = results[1:]
        elif style == "unknown":
            unknown = {"id": "toolu_not_pending_01", "name": "probe", "input": {"probe": "x"}}
            results = [*results, self._result(unknown)]
        elif style == "duplicate" and results:
            results = [results[0], *results]
        elif style == "silent" or not results:
            results = []
        content: list[dict[str, Any]] = [*results, {"type": "text", "text": "cannot run tools"}]
        return self._request([{"role": "user", "content": content}])

    def accepted(self, request: dict[str, Any]) -> None:
        """The transport put *request* on the wire."""
        self.sent = request
        self.sent_rounds = tuple(self.rounds)
        self._tail_sent = True

    def delivered(self, body: dict[str, Any], serial: int | None = None) -> None:
        """The exchange delivered *body*, the fake's reply number *serial*."""
        self.last_stream = None
        self._take(body, serial)

    def delivered_stream(
        self, data: bytes, assembled: dict[str, Any] | None, serial: int | None = None
    ) -> None:
        """A streamed exchange completed: *data* the bytes received, *assembled* the
        message the caller assembled from them (``None``: not a Messages stream)."""
        self._take(assembled if assembled is not None else {}, serial)
        self.last_stream = data

    def _take(self, body: dict[str, Any], serial: int | None) -> None:
        self.last_delivered = body
        self.delivered_serial = serial
        content = body.get("content")
        blocks = content if isinstance(content, list) and content else []
        self.obligations = [
            b for b in blocks if isinstance(b, dict) and b.get("type") == "tool_use"
        ]
        turn = blocks or [{"type": "text", "text": "(nothing)"}]
        self.history += [*self._tail, {"role": "assistant", "content": turn}]
        self._tail, self._tail_sent = [], False
        if self.obligations:
            self.rounds.append(-1 if serial is None else serial)

    def failed(self) -> None:
        """The exchange ended in an error: nothing is pending any more. The unanswered
        tool round, if any, is folded into text; the failed request's turn is kept as text
        (or, when it never went out, replaced by a note)."""
        if self.obligations:
            last = max(i for i, m in enumerate(self.history) if m.get("role") == "assistant")
            self.history[last] = folded(self.history[last])
            if self.rounds:
                self.rounds.pop()
        if self._tail_sent:
            self.history += [folded(m) for m in self._tail]
        elif self._tail:
            self.history.append(
                {"role": "user", "content": [{"type": "text", "text": "(could not go on)"}]}
            )
        self._tail, self._tail_sent = [], False
        self.obligations = []
