"""The abstraction function: the real transport plus what crossed the wire -> the spec's state.

Nothing here trusts the code under test's own bookkeeping of ids or shapes:

* ``hasKey`` / ``hasToken`` come from the boot inputs, ``provider`` from the transport;
* ``turn`` / ``phase`` / ``lastOutcome`` from the exchange; ``pending`` from the exchange's
  pending caller ids, each mapped to the abstract id planted in the matching tool_use of
  the last body handed to the caller;
* ``wireShape`` / ``wireIds`` from the *bytes* of the body on the wire (the last request
  built, or the provider's last good reply; a failed exchange leaves the request's),
  classified by structure; ids are the fake provider's foreign ids mapped through its own
  table, and a tool result only counts when its content names the same abstract id as the
  table (so a swapped id shows);
* ``reqIds`` from the tool_results of the caller's last request that went on the wire;
* ``emitted`` from the fake provider's record of its last good reply;
* ``gotShape`` from the structure of the last body handed to the caller.

Sets cannot show duplicates, so :func:`observe` also reports multiset problems (an id twice
on the wire or in a delivered body) as ``PairingInv`` problems.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

import attrs
import orjson

from conformance.fakes import FakeProvider, planted_id
from tpx.exchange import Provider
from tpx.model import Config, State
from tpx.transport import Transport
from tpx.values import ModelValue

__all__ = ["Observation", "Wire", "classify", "observe", "wire_pairs"]

UNKNOWN_SHAPE = "unknown"

_OPENAI_ROLES = frozenset({"system", "developer", "tool", "function"})
_MESSAGES_BLOCKS = frozenset(
    {"tool_use", "tool_result", "thinking", "redacted_thinking", "document", "search_result"}
)


@attrs.define
class Wire:
    """What is on the (fake) wire in the spec's sense: the last request body that was built
    and sent, or the provider's last good reply (``kind`` says which)."""

    body: bytes | None = None
    kind: str = "none"  # "request" | "reply" | "none"

    def request(self, body: bytes) -> None:
        self.body, self.kind = body, "request"

    def reply(self, body: bytes) -> None:
        self.body, self.kind = body, "reply"

    def reset(self) -> None:
        self.body, self.kind = None, "none"


def classify(body: Any) -> str:
    """``"messages"`` or ``"openai"`` by structure (requests and responses), else ``"unknown"``."""
    if isinstance(body, bytes | bytearray | str):
        try:
            body = orjson.loads(body)
        except orjson.JSONDecodeError:
            return UNKNOWN_SHAPE
    if not isinstance(body, Mapping):
        return UNKNOWN_SHAPE
    messages_marks = 0
    openai_marks = 0
    # responses
    if "choices" in body or body.get("object") == "chat.completion":
        openai_marks += 1
    if body.get("type") == "message" and isinstance(body.get("content"), list):
        messages_marks += 1
    # requests
    if "system" in body:
        messages_marks += 1
    msgs = body.get("messages")
    if isinstance(msgs, list):
        for m in msgs:
            if not isinstance(m, Mapping):
                continue
            if m.get("role") in _OPENAI_ROLES or "tool_calls" in m or "tool_call_id" in m:
                openai_marks += 1
            content = m.get("content")
            if isinstance(content, list):
                for block in content:
                    if isinstance(block, Mapping) and block.get("type") in _MESSAGES_BLOCKS:
                        messages_marks += 1
    if messages_marks and not openai_marks:
        return "messages"
    if openai_marks and not messages_marks:
        return "openai"
    return UNKNOWN_SHAPE


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(
            str(b.get("text", "")) if isinstance(b, Mapping) else str(b) for b in content
        )
    return "" if content is None else str(content)


def wire_pairs(body: Mapping[str, Any], shape: str) -> list[tuple[str, str | None]]:
    """(foreign id, planted abstract id) of every tool id a wire body carries.

    Requests: the tool results answering the last assistant turn; replies: the tool calls.
    """
    pairs: list[tuple[str, str | None]] = []
    if shape == "messages" and body.get("type") == "message":
        for block in body.get("content") or []:
            if isinstance(block, Mapping) and block.get("type") == "tool_use":
                pairs.append((str(block.get("id")), planted_id(block.get("input"))))
        return pairs
    if shape == "openai" and "choices" in body:
        choices = body.get("choices") or [{}]
        message = choices[0].get("message") or {}
        for call in message.get("tool_calls") or []:
            fn = call.get("function") or {}
            pairs.append((str(call.get("id")), planted_id(fn.get("arguments"))))
        return pairs
    msgs = [m for m in body.get("messages") or [] if isinstance(m, Mapping)]
    if shape == "messages":
        users = [m for m in msgs if m.get("role") == "user"]
        content = users[-1].get("content") if users else None
        for block in content if isinstance(content, list) else []:
            if isinstance(block, Mapping) and block.get("type") == "tool_result":
                pairs.append(
                    (str(block.get("tool_use_id")), planted_id(_text_of(block.get("content"))))
                )
        return pairs
    start = 0
    for i, m in enumerate(msgs):
        if m.get("role") == "assistant":
            start = i + 1
    for m in msgs[start:]:
        if m.get("role") == "tool":
            pairs.append((str(m.get("tool_call_id")), planted_id(_text_of(m.get("content")))))
    return pairs


def _mv(names: Iterable[str]) -> frozenset[ModelValue]:
    return frozenset(ModelValue(n) for n in names)


@attrs.frozen
class Observation:
    state: State
    problems: tuple[str, ...] = ()
    """multiset / consistency problems a set-valued variable cannot show (PairingInv)"""


def _dups(items: Iterable[str]) -> list[str]:
    return sorted(k for k, n in Counter(items).items() if n > 1)


def observe(
    transport: Transport,
    *,
    has_key: bool,
    has_token: bool,
    config: Config,
    wire: Wire,
    fake: FakeProvider | None,
    sent: Mapping[str, Any] | None,
    delivered: Mapping[str, Any] | None,
) -> Observation:
    """The spec state the real system is in (see the module docstring)."""
    problems: list[str] = []
    ex = transport.exchange
    provider = {
        Provider.ANTHROPIC: config.ANTHROPIC,
        Provider.TPX: config.TPX,
        Provider.NONE: config.NONE,
    }[transport.provider]

    # wire
    wire_shape = "messages"
    wire_ids: set[str] = set()
    if wire.body is not None:
        wire_shape = classify(wire.body)
        decoded = orjson.loads(wire.body) if wire_shape != UNKNOWN_SHAPE else {}
        pairs = wire_pairs(decoded, wire_shape) if wire_shape != UNKNOWN_SHAPE else []
        table = fake.table if fake is not None else {}
        good: list[str] = []
        for fid, aid in pairs:
            mapped = table.get(fid)
            if mapped is None:
                problems.append(f"PairingInv: foreign id {fid!r} on the wire was never emitted")
            elif wire.kind == "request" and aid != mapped:
                problems.append(
                    f"PairingInv: the tool result under foreign id {fid!r} (emitted for "
                    f"{mapped}) answers {aid}"
                )
            else:
                good.append(mapped)
        if dup := _dups(good):
            problems.append(f"PairingInv: ids {dup} carried more than once by the wire {wire.kind}")
        wire_ids = set(good)

    # caller's last sent request
    req_ids: set[str] = set()
    if sent is not None:
        answered = [aid or "?" for _, aid in wire_pairs(sent, "messages")]
        if dup := _dups(answered):
            problems.append(f"PairingInv: the caller's request answers {dup} more than once")
        req_ids = set(answered)

    # what the caller was handed
    got_shape = "messages"
    by_caller_id: dict[str, str] = {}
    if delivered is not None:
        got_shape = classify(delivered)
        if got_shape == "messages":
            pairs = wire_pairs(delivered, "messages")
            ids = [cid for cid, _ in pairs]
            planted = [aid or "?" for _, aid in pairs]
            if dup := _dups(ids):
                problems.append(f"PairingInv: tool_use ids {dup} handed to the caller twice")
            if dup := _dups(planted):
                problems.append(f"PairingInv: tool ids {dup} handed to the caller twice")
            by_caller_id = {cid: aid or "?" for cid, aid in pairs}
    pending = {by_caller_id.get(cid, f"?{cid}") for cid in ex.pending}

    emitted: tuple[str, ...] = fake.emitted if fake is not None else ()
    state = State(
        hasKey=has_key,
        hasToken=has_token,
        provider=provider,
        turn=ex.turn,
        phase=ex.phase,
        pending=_mv(pending),
        reqIds=_mv(req_ids),
        wireShape=wire_shape,
        wireIds=_mv(wire_ids),
        emitted=_mv(emitted),
        gotShape=got_shape,
        lastOutcome=ex.last_outcome,
    )
    return Observation(state, tuple(problems))
