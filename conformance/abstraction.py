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

Streamed exchanges (the bodies are ``text/event-stream`` bytes) are read with this
module's own SSE reader, never the code under test's: :func:`classify` tells a Messages
event stream (``event: <type>`` lines whose data carry the same ``type``) from a Chat
Completions chunk stream (``data: {chunk}`` ... ``data: [DONE]``), :func:`stream_pairs`
assembles the tool calls of a streamed wire body (fragments joined per block / per
``index``) with their planted ids, and :func:`assemble_messages` folds the events the
caller received into the message the caller holds (``None`` when they are not a complete
Messages stream). For a streamed delivery :func:`observe` takes the caller's raw bytes as
``delivered``: ``gotShape`` is their shape and ``pending`` comes from the tool_use blocks
of the message assembled from them.

Sets cannot show duplicates, so :func:`observe` also reports multiset problems (an id twice
on the wire or in a delivered body) as ``PairingInv`` problems, and keeps the four id
variables as multisets too (:attr:`Observation.ids`: one entry per id occurrence it saw).
:meth:`Observation.json_line` writes those lists into a ``tpx check-trace`` JSON line, so
a recording keeps the duplicates a set-valued state would lose and the trace checker
rejects them (``TypeOK``: an id set lists an id twice).

Concrete observations beside the spec's 12 variables (:attr:`Observation.concrete`; a
mismatch is a problem naming a concrete property, which :mod:`conformance.replay` reports
like a violated invariant):

* ``WireIds`` -- every tool round of a request on the wire (the whole history: each
  assistant turn with tool calls and the results after it, :func:`request_rounds`) is
  read against the reply it answers (the caller records which: ``rounds``, serials into
  ``FakeProvider.replies``): the call ids the provider gets back must equal, byte for
  byte and in the calls' order, the ids it emitted (a missing / null id comes back as
  ``""``); over Chat Completions the tool messages follow the calls' order, over
  Messages the caller's. The abstract ids still come from planted content, so a result
  under the wrong id is a ``PairingInv`` problem; the delivered tool_use blocks keep the
  calls' order. ``toolCallIds`` holds the answered ids as the provider received them.
* ``IsError`` -- each tool result's ``is_error`` as the provider got it (Messages: the
  field; Chat Completions: the tool message's text starting ``[tool error]``) equals what
  the caller sent (``isError``: the last round's, as received).
* ``StopReason`` -- the delivered message's ``stop_reason`` is the one the reply means
  (``tool_use`` with calls; otherwise ``end_turn``, or ``max_tokens`` for a truncated
  reply) (``stopReason``).
* ``Content`` -- the delivered message says what the reply said: its text, its thinking
  (with a signature), the tools' names in order, a non-empty message id and model.
* ``Credential`` -- the provider got exactly its own credential: the key as ``x-api-key``
  (ANTHROPIC) or the token as ``Authorization: Bearer`` (TPX), never the other header
  (``credential``: the credential headers it got).

They are not part of a ``tpx check-trace`` recording (:meth:`Observation.json_line`
writes the spec's variables only).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import attrs
import orjson

from conformance.fakes import KEY, TOKEN, FakeProvider, planted_call_id, planted_id
from conformance.shapes import Reply
from tpx.audit.sse import assemble_messages, is_stream, json_events, sse_events
from tpx.oracle.model import Config, State
from tpx.oracle.values import ModelValue
from tpx.transport import Transport
from tpx.transport.exchange import Provider

__all__ = [
    "ID_VARS",
    "Observation",
    "Wire",
    "assemble_messages",
    "classify",
    "is_stream",
    "observe",
    "sse_events",
    "stream_pairs",
    "wire_pairs",
]

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


_MESSAGES_EVENTS = frozenset(
    {
        "message_start",
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
        "ping",
        "error",
    }
)


def _classify_stream(data: bytes) -> str:
    messages_marks = 0
    openai_marks = 0
    for name, body in json_events(data):
        if body == "[DONE]":
            openai_marks += 1
        elif isinstance(body, Mapping):
            kind = body.get("type")
            if kind in _MESSAGES_EVENTS and name == kind:
                messages_marks += 1
            elif body.get("object") == "chat.completion.chunk" or "choices" in body:
                openai_marks += 1
    if messages_marks and not openai_marks:
        return "messages"
    if openai_marks and not messages_marks:
        return "openai"
    return UNKNOWN_SHAPE


def stream_pairs(data: bytes, shape: str) -> list[tuple[str, str | None]]:
    """(foreign id, planted abstract id) of every tool call a streamed body carries, in
    order: Messages ``tool_use`` blocks with their ``input_json_delta`` fragments joined,
    or Chat Completions tool-call fragments: a fragment carrying ``type`` starts a call
    (every shape the fakes serve sends it once per call, in its first fragment: indexed,
    all at ``index: 0``, without ``index``; a legacy ``function_call`` starts with its
    name), the others continue the call last started at their ``index`` (or the last
    one), names and arguments joined. A missing / null id reads ``""``
    (what the provider must get back)."""
    calls: list[list[Any]] = []  # [id, name, [argument parts]]
    by_index: dict[Any, list[Any]] = {}
    current: list[Any] | None
    for _, body in json_events(data):
        if not isinstance(body, Mapping):
            continue
        if shape == "messages":
            kind, index = body.get("type"), body.get("index")
            block = body.get("content_block")
            delta = body.get("delta")
            if kind == "content_block_start" and isinstance(block, Mapping):
                if block.get("type") == "tool_use":
                    by_index[index] = [str(block.get("id")), block.get("name"), []]
                    calls.append(by_index[index])
            elif kind == "content_block_delta" and index in by_index and isinstance(delta, Mapping):
                by_index[index][2].append(str(delta.get("partial_json", "")))
            continue
        for choice in body.get("choices") or []:
            delta = choice.get("delta") if isinstance(choice, Mapping) else None
            fragments = list((delta or {}).get("tool_calls") or [])
            legacy = (delta or {}).get("function_call")
            if isinstance(legacy, Mapping):  # one call, no id, no index
                fragments.append({"index": "legacy", "function": legacy, "legacy": True})
            for call in fragments:
                fn = call.get("function") or {}
                key = call.get("index")
                if "type" in call or (call.get("legacy") and "name" in fn):
                    current = [call.get("id") or "", "", []]
                    calls.append(current)
                    by_index[key] = current
                else:
                    current = by_index.get(key) or (calls[-1] if calls else None)
                    if current is None:
                        continue
                current[1] += str(fn.get("name") or "")
                current[2].append(str(fn.get("arguments") or ""))
    return [(str(fid), planted_call_id(name, "".join(parts))) for fid, name, parts in calls]


def classify(body: Any) -> str:
    """``"messages"`` or ``"openai"`` by structure (requests, responses and streamed
    bodies: Messages event streams / Chat Completions chunk streams), else ``"unknown"``."""
    if is_stream(body):
        return _classify_stream(body)
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


def _call_id(value: Any) -> str:
    """An id as the provider gets it back: a missing / null one reads ``""``."""
    return "" if value is None else str(value)


def _last_user_run(msgs: list[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    end = len(msgs)
    while end and msgs[end - 1].get("role") != "user":
        end -= 1
    start = end
    while start and msgs[start - 1].get("role") == "user":
        start -= 1
    return msgs[start:end]


def wire_pairs(body: Mapping[str, Any], shape: str) -> list[tuple[str, str | None]]:
    """(foreign id, planted abstract id) of every tool id a wire body carries.

    Requests: the tool results answering the last assistant turn (Messages: those of the
    last run of consecutive user messages, one turn for the Messages API); replies: the
    tool calls. A call's abstract id is planted in its arguments, or in its name
    (:func:`~conformance.shapes.planted_call_id`).
    """
    pairs: list[tuple[str, str | None]] = []
    if shape == "messages" and body.get("type") == "message":
        for block in body.get("content") or []:
            if isinstance(block, Mapping) and block.get("type") == "tool_use":
                pairs.append(
                    (str(block.get("id")), planted_call_id(block.get("name"), block.get("input")))
                )
        return pairs
    if shape == "openai" and "choices" in body:
        choices = body.get("choices") or [{}]
        message = choices[0].get("message") or {}
        legacy = message.get("function_call")
        if isinstance(legacy, Mapping):
            pairs.append(("", planted_call_id(legacy.get("name"), legacy.get("arguments"))))
        for call in message.get("tool_calls") or []:
            fn = call.get("function") or {}
            pairs.append(
                (_call_id(call.get("id")), planted_call_id(fn.get("name"), fn.get("arguments")))
            )
        return pairs
    msgs = [m for m in body.get("messages") or [] if isinstance(m, Mapping)]
    if shape == "messages":
        for message in _last_user_run(msgs):
            content = message.get("content")
            for block in content if isinstance(content, list) else []:
                if isinstance(block, Mapping) and block.get("type") == "tool_result":
                    pairs.append(
                        (str(block.get("tool_use_id")), planted_id(_text_of(block.get("content"))))
                    )
        return pairs
    if msgs and msgs[-1].get("role") == "assistant" and not msgs[-1].get("tool_calls"):
        msgs = msgs[:-1]  # a prefill: the results answer the assistant turn before it
    start = 0
    for i, m in enumerate(msgs):
        if m.get("role") == "assistant":
            start = i + 1
    for m in msgs[start:]:
        if m.get("role") == "tool":
            pairs.append((str(m.get("tool_call_id")), planted_id(_text_of(m.get("content")))))
    return pairs


#: How ``is_error: true`` travels over Chat Completions: the tool message's text starts so.
TOOL_ERROR_PREFIX = "[tool error]"


@attrs.frozen
class Round:
    """One tool round of a request body: the calls of an assistant turn (id on the wire,
    planted abstract id), in order, and the tool results answering them (id, planted
    abstract id, ``is_error``), in the order the body carries them."""

    calls: tuple[tuple[str, str | None], ...]
    results: tuple[tuple[str, str | None, bool], ...]


def request_rounds(body: Mapping[str, Any], shape: str) -> list[Round]:
    """Every tool round of a request *body* (an assistant turn with tool calls and the tool
    results after it), in order; results with no assistant turn with calls before them
    form a round without calls."""
    rounds: list[Round] = []
    calls: list[tuple[str, str | None]] | None = None
    results: list[tuple[str, str | None, bool]] = []

    def close() -> None:
        nonlocal calls, results
        if calls is not None or results:
            rounds.append(Round(tuple(calls or ()), tuple(results)))
        calls, results = None, []

    for m in body.get("messages") or []:
        if not isinstance(m, Mapping):
            continue
        role, content = m.get("role"), m.get("content")
        if role == "assistant":
            close()
            found: list[tuple[str, str | None]] = []
            if shape == "messages":
                for b in content if isinstance(content, list) else []:
                    if isinstance(b, Mapping) and b.get("type") == "tool_use":
                        found.append(
                            (str(b.get("id")), planted_call_id(b.get("name"), b.get("input")))
                        )
            else:
                for c in m.get("tool_calls") or []:
                    fn = c.get("function") or {} if isinstance(c, Mapping) else {}
                    found.append(
                        (
                            _call_id(c.get("id")),
                            planted_call_id(fn.get("name"), fn.get("arguments")),
                        )
                    )
            calls = found or None
        elif shape == "messages" and role == "user":
            for b in content if isinstance(content, list) else []:
                if isinstance(b, Mapping) and b.get("type") == "tool_result":
                    text = _text_of(b.get("content"))
                    results.append(
                        (str(b.get("tool_use_id")), planted_id(text), b.get("is_error") is True)
                    )
        elif shape == "openai" and role == "tool":
            text = _text_of(content)
            results.append(
                (str(m.get("tool_call_id")), planted_id(text), text.startswith(TOOL_ERROR_PREFIX))
            )
    close()
    return rounds


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
    concrete: Mapping[str, Any] = attrs.field(factory=dict, eq=False)
    """the concrete observations beside the spec's variables (see the module docstring)"""

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


def _request_problems(
    body: Mapping[str, Any],
    shape: str,
    fake: FakeProvider,
    sent: Mapping[str, Any] | None,
    rounds: Sequence[int],
) -> tuple[list[str], dict[str, str]]:
    """Problems of a request on the wire, read against the replies its tool rounds answer
    (*rounds*: serials into ``fake.replies``), and the id each answered abstract id must
    travel under (the last round's)."""
    problems: list[str] = []
    everything = request_rounds(body, shape)
    wire_rounds = [r for r in everything if r.calls]
    for r in everything:
        if not r.calls:
            answered = [a for _, a, _ in r.results]
            problems.append(f"PairingInv: tool results for {answered} follow no tool call")
    caller_rounds = [r for r in request_rounds(sent, "messages") if r.calls] if sent else []
    replies = [fake.replies[s] if 0 <= s < len(fake.replies) else None for s in rounds]
    if len(wire_rounds) != len(replies):
        problems.append(
            f"WireIds: the provider got {len(wire_rounds)} tool rounds, the caller's "
            f"history holds {len(replies)}"
        )
    expected: dict[str, str] = {}
    for k, (wr, reply) in enumerate(zip(wire_rounds, replies, strict=False)):
        if reply is None:
            problems.append(f"WireIds: tool round {k} answers no reply the provider served")
            continue
        want_ids = [c.wire_id for c in reply.calls]
        want_aids = [c.aid for c in reply.calls]
        got_ids = [i for i, _ in wr.calls]
        got_aids = [a for _, a in wr.calls]
        if got_aids != want_aids:
            problems.append(
                f"WireIds: tool round {k}: the assistant turn carries the calls {got_aids}, "
                f"the provider emitted {want_aids} (in this order)"
            )
        elif got_ids != want_ids:
            problems.append(
                f"WireIds: tool round {k}: call ids {got_ids!r} went back to the provider, "
                f"which emitted {want_ids!r}"
            )
        by_aid = {c.aid: c.wire_id for c in reply.calls}
        expected = by_aid
        for rid, raid, _ in wr.results:
            if raid not in by_aid:
                problems.append(
                    f"PairingInv: tool round {k}: a tool result answers {raid}, "
                    "which the reply never emitted"
                )
            elif rid != by_aid[raid]:
                problems.append(
                    f"PairingInv: tool round {k}: the tool result for {raid} went back under "
                    f"id {rid!r}; the provider emitted {by_aid[raid]!r} for that call"
                )
        res_aids = [a for _, a, _ in wr.results]
        caller = caller_rounds[k] if k < len(caller_rounds) else None
        caller_aids = [a for _, a, _ in caller.results] if caller is not None else want_aids
        order = want_aids if shape == "openai" else caller_aids
        if sorted(map(str, res_aids)) != sorted(map(str, want_aids)):
            problems.append(
                f"PairingInv: tool round {k}: the results answer {res_aids}, "
                f"the calls were {want_aids}"
            )
        elif res_aids != order:
            problems.append(
                f"WireIds: tool round {k}: the tool results go out as {res_aids}, "
                f"not in the order {order}"
            )
        if caller is not None:
            errs = {a: e for _, a, e in caller.results}
            for _, raid, rerr in wr.results:
                if raid in errs and errs[raid] != rerr:
                    problems.append(
                        f"IsError: tool round {k}: the result for {raid} reached the provider "
                        f"with is_error={rerr}, the caller sent is_error={errs[raid]}"
                    )
    return problems, expected


def _content_problems(message: Mapping[str, Any], reply: Reply) -> list[str]:
    """What the caller was handed against what the reply said (``Content``): the text, the
    thinking (signed), the tools' names in order, a non-empty message id and model."""
    problems: list[str] = []
    blocks = [b for b in message.get("content") or [] if isinstance(b, Mapping)]
    text = "".join(str(b.get("text", "")) for b in blocks if b.get("type") == "text")
    if text != reply.text:
        problems.append(f"Content: the caller got the text {text!r}, the reply said {reply.text!r}")
    thinking = [b for b in blocks if b.get("type") == "thinking"]
    said = ["pondering"] if "thinking" in reply.flags else []
    if [b.get("thinking") for b in thinking] != said or not all(
        isinstance(b.get("signature"), str) and b.get("signature") for b in thinking
    ):
        problems.append(f"Content: the caller got the thinking {thinking!r}, the reply {said}")
    names = [b.get("name") for b in blocks if b.get("type") == "tool_use"]
    if names != [c.name for c in reply.calls]:
        want = [c.name for c in reply.calls]
        problems.append(f"Content: the caller got the tools {names}, the reply called {want}")
    for field in ("id", "model"):
        value = message.get(field)
        if not isinstance(value, str) or not value:
            problems.append(f"Content: the caller's message has no {field} ({value!r})")
    return problems


def _credential_problem(provider: Provider, headers: Mapping[str, str]) -> str | None:
    if provider is Provider.ANTHROPIC and (
        headers.get("x-api-key") != KEY or "authorization" in headers
    ):
        return "Credential: the Messages provider did not get exactly the key as x-api-key"
    if provider is Provider.TPX and (
        headers.get("authorization") != f"Bearer {TOKEN}" or "x-api-key" in headers
    ):
        return "Credential: the TPX provider did not get exactly the token as a Bearer"
    return None


def observe(
    transport: Transport,
    *,
    has_key: bool,
    has_token: bool,
    config: Config,
    wire: Wire,
    fake: FakeProvider | None,
    sent: Mapping[str, Any] | None,
    delivered: Mapping[str, Any] | bytes | None,
    rounds: Sequence[int] | None = None,
    delivered_serial: int | None = None,
) -> Observation:
    """The spec state the real system is in, and the concrete observations beside it (see
    the module docstring). *delivered* is the last body handed to the caller, or the bytes
    of the last stream it received; *rounds* the serials (into ``fake.replies``) of the
    replies whose tool rounds the request on the wire carries (``None``: not known, the
    foreign ids are then read through ``fake.table``); *delivered_serial* the reply behind
    the delivered body."""
    problems: list[str] = []
    concrete: dict[str, Any] = {}
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
        if wire_shape == UNKNOWN_SHAPE:
            pairs = []
        elif is_stream(wire.body):
            pairs = stream_pairs(wire.body, wire_shape)
        else:
            pairs = wire_pairs(orjson.loads(wire.body), wire_shape)
        good: list[str] = []
        if wire.kind == "reply":
            good = [aid or "?" for _, aid in pairs]
        elif fake is not None and rounds is not None and wire_shape != UNKNOWN_SHAPE:
            found, expected = _request_problems(
                orjson.loads(wire.body), wire_shape, fake, sent, rounds
            )
            problems += found
            good = [aid for fid, aid in pairs if aid in expected and expected[aid] == fid]
            concrete["toolCallIds"] = [fid for fid, _ in pairs]
            concrete["isError"] = [
                e
                for r in request_rounds(orjson.loads(wire.body), wire_shape)[-1:]
                for *_, e in r.results
            ]
        else:
            table = fake.table if fake is not None else {}
            for fid, aid in pairs:
                mapped = table.get(fid)
                if mapped is None:
                    problems.append(f"PairingInv: foreign id {fid!r} on the wire was never emitted")
                elif aid != mapped:
                    problems.append(
                        f"PairingInv: the tool result under foreign id {fid!r} (emitted for "
                        f"{mapped}) answers {aid}"
                    )
                else:
                    good.append(mapped)
        if dup := _dups(good):
            problems.append(f"PairingInv: ids {dup} carried more than once by the wire {wire.kind}")
        wire_ids = good
    if fake is not None and fake.received_headers:
        headers = fake.received_headers[-1]
        concrete["credential"] = sorted(h for h in ("x-api-key", "authorization") if h in headers)
        if problem := _credential_problem(transport.provider, headers):
            problems.append(problem)

    # caller's last sent request
    req_ids: list[str] = []
    if sent is not None:
        req_ids = [aid or "?" for _, aid in wire_pairs(sent, "messages")]
        if dup := _dups(req_ids):
            problems.append(f"PairingInv: the caller's request answers {dup} more than once")
        history_ids = [i for r in request_rounds(sent, "messages") for i, _ in r.calls]
        if dup := _dups(history_ids):
            problems.append(
                f"PairingInv: the caller's history holds tool_use ids {dup} twice "
                "(the Messages API rejects it): the ids it was handed were not unique"
            )

    # what the caller was handed
    got_shape = "messages"
    by_caller_id: dict[str, str] = {}
    # pending as a multiset: every tool_use of the delivered body the caller still owes an
    # answer for (a tool_use handed over twice counts twice), plus any pending caller id
    # the delivered body does not carry
    pending: list[str] = []
    if delivered is not None:
        got_shape = classify(delivered)
        assembled: Mapping[str, Any] | None = None
        if isinstance(delivered, bytes | bytearray):  # a streamed delivery: the caller's bytes
            assembled = assemble_messages(delivered) if got_shape == "messages" else None
            if got_shape == "messages" and assembled is None:
                got_shape = UNKNOWN_SHAPE
                problems.append("ShapeInv: the caller's stream is no complete Messages stream")
        else:
            assembled = delivered
        if got_shape == "messages" and assembled is not None:
            pairs = wire_pairs(assembled, "messages")
            ids = [cid for cid, _ in pairs]
            planted = [aid or "?" for _, aid in pairs]
            if dup := _dups(ids):
                problems.append(f"PairingInv: tool_use ids {dup} handed to the caller twice")
            if dup := _dups(planted):
                problems.append(f"PairingInv: tool ids {dup} handed to the caller twice")
            by_caller_id = {cid: aid or "?" for cid, aid in pairs}
            pending = [aid or "?" for cid, aid in pairs if cid in ex.pending]
            concrete["stopReason"] = assembled.get("stop_reason")
            if fake is not None and delivered_serial is not None:
                reply = (
                    fake.replies[delivered_serial]
                    if 0 <= delivered_serial < len(fake.replies)
                    else None
                )
                want = [c.aid for c in reply.calls] if reply is not None else []
                if reply is not None and assembled.get("stop_reason") != reply.stop_reason:
                    problems.append(
                        f"StopReason: the caller was handed stop_reason "
                        f"{assembled.get('stop_reason')!r}, the reply means {reply.stop_reason!r}"
                    )
                if sorted(planted) == sorted(want) and planted != want:
                    problems.append(
                        f"WireIds: the caller was handed the calls {planted}, emitted as {want}"
                    )
                if reply is not None:
                    problems += _content_problems(assembled, reply)
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
    return Observation(
        state,
        tuple(problems),
        {k: tuple(sorted(v)) for k, v in multisets.items()},
        concrete,
    )
