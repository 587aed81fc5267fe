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
on the wire or in a delivered body) as ``PairingInv`` problems, and keeps the four id
variables as multisets too (:attr:`Observation.ids`: one entry per id occurrence it saw).
:meth:`Observation.json_line` writes those lists into a ``tpx check-trace`` JSON line, so
a recording keeps the duplicates a set-valued state would lose and the trace checker
rejects them (``TypeOK``: an id set lists an id twice).
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

__all__ = ["ID_VARS", "Observation", "Wire", "classify", "observe", "wire_pairs"]

#: The spec variables holding sets of tool ids (kept as multisets by :class:`Observation`).
ID_VARS = ("pending", "reqIds", "wireIds", "emitted")

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
    ids: Mapping[str, tuple[str, ...]] = attrs.field(factory=dict, eq=False)
    """the :data:`ID_VARS` as multisets: every id occurrence observed, sorted, duplicates kept
    (empty: not observed as a multiset, use the state's sets)"""

    def json_line(self, action: str | None = None) -> dict[str, Any]:
        """The state as one ``tpx check-trace`` JSON line: the id variables are lists with one
        entry per occurrence observed (see :attr:`ids`), ``#action`` the step's name."""
        line: dict[str, Any] = {} if action is None else {"#action": action}
        for name, value in self.state.as_record().items():
            if name in ID_VARS:
                line[name] = list(self.ids.get(name, sorted(str(x) for x in value)))
            elif isinstance(value, ModelValue):
                line[name] = value.name
            else:
                line[name] = value
        return line


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
    wire_ids: list[str] = []
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
        wire_ids = good

    # caller's last sent request
    req_ids: list[str] = []
    if sent is not None:
        req_ids = [aid or "?" for _, aid in wire_pairs(sent, "messages")]
        if dup := _dups(req_ids):
            problems.append(f"PairingInv: the caller's request answers {dup} more than once")

    # what the caller was handed
    got_shape = "messages"
    by_caller_id: dict[str, str] = {}
    # pending as a multiset: every tool_use of the delivered body the caller still owes an
    # answer for (a tool_use handed over twice counts twice), plus any pending caller id
    # the delivered body does not carry
    pending: list[str] = []
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
            pending = [aid or "?" for cid, aid in pairs if cid in ex.pending]
    pending += [f"?{cid}" for cid in ex.pending if cid not in by_caller_id]

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
    multisets = {
        "pending": pending,
        "reqIds": req_ids,
        "wireIds": wire_ids,
        "emitted": list(emitted),
    }
    return Observation(state, tuple(problems), {k: tuple(sorted(v)) for k, v in multisets.items()})
