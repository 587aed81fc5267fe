"""Which result answers which call: the HTTP replay's binding observations and their judge.

The fake upstream makes every tool call a call of its own, ``KEY_T_N``, and names it in
the call's wire id and in its input; the client answers a call with the content ``output
of KEY_T_N`` (the call its tool_use's input names). So on both wires every id, every
call and every result says which call it is about, and this module reads, from bytes
only:

* per request (the client's, and each one that reached the upstream: TPX's translated
  Chat Completions, ANTHROPIC's pass-through Messages), every round of its history
  (:class:`Round`: an assistant turn's tool calls and the results that follow it): for
  each call, the call its id names and the call its name/input names (:class:`Use`); for
  each result, the call its id names and the call its content answers (:class:`Answer`);
* per reply (the fake's, and the one the client was handed): the ids, each with the call
  it names and the call its name/input names.

What the spec's variables would hold maps on directly: :meth:`RequestView.spec` gives a
request's rounds as TLA+-like values (per round, the set of ``<<id, call>>`` of its calls
and the set of ``<<id, call answered>>`` of its results, ids and calls abstracted to
``<<c, t>>``), :meth:`ReplyView.spec` a reply's ``<<id, call>>`` set.

The judge (:func:`round_problems`, :func:`request_problems`, :func:`reply_problems`),
property ``Binding``: every result answers the call its id names, every call is the call
its id names, every call of a round is answered exactly once and nothing else is
(nothing lost, duplicated or invented), the upstream request carries the client's rounds
one for one (same calls in the same order, the same results), each round the calls of
one reply the fake made (in emission order, none twice); every id handed to the client
names the call the upstream made under it, in the reply's order.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs
import orjson

__all__ = [
    "CALL",
    "Answer",
    "ReplyView",
    "RequestView",
    "Round",
    "Use",
    "call_of_input",
    "reply_problems",
    "reply_view",
    "request_kind",
    "request_problems",
    "request_view",
    "round_problems",
]

#: a call the fake made: conversation key, local tool name, the channel's counter
CALL = re.compile(r"([A-Za-z0-9]+)_(t[0-9]+)_([0-9]+)")
_ID = re.compile(r"(?:call|toolu)_((?:[A-Za-z0-9]+)_(?:t[0-9]+)_(?:[0-9]+))")
_OUTPUT = re.compile(r"output of ([A-Za-z0-9]+_t[0-9]+_[0-9]+)")

#: reads the call an id names (``None``: it names none)
IdReader = Callable[[str], "str | None"]


def call_of_id(raw: str) -> str | None:
    """The call a wire id names (``call_KEY_T_N`` / ``toolu_KEY_T_N``)."""
    m = _ID.fullmatch(raw)
    return m.group(1) if m else None


#: a wire id at the end of an id an endpoint made of it (a signed id, a prefixed one)
_ID_TAIL = re.compile(r"(?:call|toolu)_([A-Za-z0-9]+_t[0-9]+_[0-9]+)$")
#: ids an endpoint minted itself -> the call they were handed on (:func:`learn`)
_LEARNED: dict[str, str] = {}


def learn(raw: str, call: str | None) -> None:
    """*raw*, an id the client was handed that names no call by its text, stands for
    *call*, the call its input names in the reply that handed it over."""
    if call is not None and call_of_foreign_id(raw) is None:
        _LEARNED[raw] = call


def call_of_foreign_id(raw: str) -> str | None:
    """The call an id another gateway made names: the wire id its text ends with (a signed
    id whose secret the judge does not hold, a prefixed id), else the call it was handed on
    when it was minted (:func:`learn`)."""
    m = _ID_TAIL.search(raw)
    return m.group(1) if m else _LEARNED.get(raw)


def call_of_input(value: Any) -> str | None:
    """The call a tool call's input (a dict, or its JSON text) names."""
    if isinstance(value, str):
        try:
            value = orjson.loads(value)
        except orjson.JSONDecodeError:
            return None
    call = value.get("call") if isinstance(value, Mapping) else None
    return call if isinstance(call, str) and CALL.fullmatch(call) else None


def call_of_output(content: Any) -> str | None:
    """The call a result's content answers (one ``output of KEY_T_N``, however wrapped)."""
    text = content if isinstance(content, str) else orjson.dumps(content).decode()
    found = set(_OUTPUT.findall(text))
    return found.pop() if len(found) == 1 else None


def output_for(call: str) -> str:
    """The content a client answers *call* with."""
    return f"output of {call}"


@attrs.frozen
class Use:
    """One tool call: its id as it travels, the call the id names, the call its input names."""

    id: str
    named: str | None
    made: str | None


@attrs.frozen
class Answer:
    """One result: its id, the call the id names, the call its content answers."""

    id: str
    named: str | None
    answers: str | None


@attrs.frozen
class Round:
    uses: tuple[Use, ...]
    answers: tuple[Answer, ...]


def _abstract(call: str | None, conv_of: Mapping[str, Any]) -> tuple[Any, str]:
    m = CALL.fullmatch(call or "")
    if m is None:
        return ("?", str(call))
    return (conv_of.get(m.group(1), f"?{m.group(1)}"), m.group(2))


@attrs.frozen
class RequestView:
    """Every round of one request's history, and results that follow no call."""

    rounds: tuple[Round, ...]
    stray: tuple[Answer, ...] = ()

    def spec(self, conv_of: Mapping[str, Any]) -> tuple[tuple[frozenset[Any], frozenset[Any]], ...]:
        """Per round: {<<id, call>>} of its calls, {<<id, call answered>>} of its results
        (ids and calls as ``<<c, t>>``; *conv_of*: conversation key -> model value)."""
        return tuple(
            (
                frozenset(
                    (_abstract(u.named, conv_of), _abstract(u.made, conv_of)) for u in r.uses
                ),
                frozenset(
                    (_abstract(a.named, conv_of), _abstract(a.answers, conv_of)) for a in r.answers
                ),
            )
            for r in self.rounds
        )


@attrs.frozen
class ReplyView:
    """The tool calls of one reply, in order."""

    uses: tuple[Use, ...]

    def spec(self, conv_of: Mapping[str, Any]) -> frozenset[Any]:
        return frozenset(
            (_abstract(u.named, conv_of), _abstract(u.made, conv_of)) for u in self.uses
        )


def request_view(body: Any, openai: bool, reader: IdReader = call_of_id) -> RequestView:
    """The rounds of a request body (*openai*: Chat Completions, else Messages)."""
    messages = body.get("messages") if isinstance(body, Mapping) else None
    rounds: list[Round] = []
    stray: list[Answer] = []
    uses: list[Use] | None = None
    answers: list[Answer] = []

    def close() -> None:
        nonlocal uses, answers
        if uses is not None:
            rounds.append(Round(tuple(uses), tuple(answers)))
        uses, answers = None, []

    for m in messages if isinstance(messages, list) else []:
        if not isinstance(m, Mapping):
            continue
        role = m.get("role")
        if openai:
            if role == "tool":
                tid = str(m.get("tool_call_id"))
                a = Answer(tid, reader(tid), call_of_output(m.get("content")))
                (answers if uses is not None else stray).append(a)
                continue
            close()
            calls = m.get("tool_calls") if role == "assistant" else None
            if isinstance(calls, list) and calls:
                uses = []
                for call in calls:
                    fn = call.get("function") or {}
                    cid = str(call.get("id"))
                    uses.append(Use(cid, reader(cid), call_of_input(fn.get("arguments"))))
            continue
        content = m.get("content")
        blocks = [b for b in content if isinstance(b, Mapping)] if isinstance(content, list) else []
        if role == "user":
            for b in blocks:
                if b.get("type") == "tool_result":
                    tid = str(b.get("tool_use_id"))
                    a = Answer(tid, reader(tid), call_of_output(b.get("content")))
                    (answers if uses is not None else stray).append(a)
            continue
        close()
        found = [
            Use(str(b.get("id")), reader(str(b.get("id"))), call_of_input(b.get("input")))
            for b in blocks
            if b.get("type") == "tool_use"
        ]
        if found:
            uses = found
    close()
    return RequestView(tuple(rounds), tuple(stray))


def reply_view(message: Any, reader: IdReader = call_of_id) -> ReplyView:
    """The tool calls of a reply: a Messages message or a Chat Completions completion."""
    if isinstance(message, Mapping) and "choices" in message:
        choice = (message.get("choices") or [{}])[0]
        calls = (choice.get("message") or {}).get("tool_calls") or []
        return ReplyView(
            tuple(
                Use(
                    str(c.get("id")),
                    reader(str(c.get("id"))),
                    call_of_input((c.get("function") or {}).get("arguments")),
                )
                for c in calls
            )
        )
    content = message.get("content") if isinstance(message, Mapping) else None
    blocks = content if isinstance(content, list) else []
    return ReplyView(
        tuple(
            Use(str(b.get("id")), reader(str(b.get("id"))), call_of_input(b.get("input")))
            for b in blocks
            if isinstance(b, Mapping) and b.get("type") == "tool_use"
        )
    )


def request_kind(answered: Sequence[str], pending: Sequence[str]) -> str:
    """What a request is, by its last turn's tool_result ids against the history's
    obligations (the spec's ``Requests``): ``ok`` when it answers each exactly once, else
    how it is wrong (``duplicated``, ``unknown``, ``missing``: the first that applies)."""
    if len(set(answered)) != len(answered):
        return "duplicated"
    if not set(answered) <= set(pending):
        return "unknown"
    if set(answered) != set(pending):
        return "missing"
    return "ok"


# -- the judge ---------------------------------------------------------------------------


def round_problems(view: RequestView, where: str) -> list[str]:
    """Within one request: each call is the call its id names, each result answers the call
    its id names, each round's calls are answered once each and by nothing else."""
    problems: list[str] = []
    for k, r in enumerate(view.rounds):
        for u in r.uses:
            if u.named is None or u.named != u.made:
                problems.append(f"{where}, round {k}: the call {u.made} travels under {u.id}")
        for a in r.answers:
            if a.named is None or a.named != a.answers:
                problems.append(
                    f"{where}, round {k}: {a.id} (call {a.named}) carries the output of {a.answers}"
                )
        called = Counter(u.named for u in r.uses)
        answered = Counter(a.named for a in r.answers)
        if answered != called:
            lost = sorted(str(c) for c in called - answered)
            extra = sorted(str(c) for c in answered - called)
            problems.append(
                f"{where}, round {k}: results lost {lost}, duplicated or invented {extra}"
            )
    for a in view.stray:
        problems.append(f"{where}: the result {a.id} (output of {a.answers}) follows no call")
    return problems


def _named(r: Round) -> tuple[tuple[str | None, ...], tuple[str | None, ...]]:
    """A round's calls in order, and the calls its results' ids name (in any order: a
    Chat Completions request lists the tool messages in the calls' order)."""
    return tuple(u.named for u in r.uses), tuple(sorted(str(a.named) for a in r.answers))


def request_problems(
    upstream: RequestView, client: RequestView, emitted: Sequence[tuple[str, ...]], where: str
) -> list[str]:
    """One request that reached the upstream, against the client's request it came from and
    the calls the fake made (*emitted*: every reply's calls, in order)."""
    problems = round_problems(upstream, where)
    if len(upstream.rounds) != len(client.rounds):
        problems.append(
            f"{where}: {len(upstream.rounds)} tool rounds, the client's request has "
            f"{len(client.rounds)}"
        )
    for k, (up, mine) in enumerate(zip(upstream.rounds, client.rounds, strict=False)):
        if _named(up) != _named(mine):
            problems.append(
                f"{where}, round {k}: calls/results {_named(up)}, the client sent {_named(mine)}"
            )
    last = -1
    for k, r in enumerate(upstream.rounds):
        calls = tuple(u.named for u in r.uses)
        made = [i for i, e in enumerate(emitted) if e == calls]
        if not made:
            problems.append(f"{where}, round {k}: the calls {calls} are no reply's the fake made")
        elif made[0] <= last:
            problems.append(f"{where}, round {k}: the reply of {calls} is carried twice or late")
        else:
            last = made[0]
    return problems


def reply_problems(handed: ReplyView, made: ReplyView, where: str) -> list[str]:
    """The calls handed to the client against the reply the upstream made: each id names
    the call the upstream made under it, each call is the one its id names, in order."""
    problems: list[str] = []
    for u in handed.uses:
        if u.named is None or u.named != u.made:
            problems.append(f"{where}: the id {u.id} (call {u.named}) sits on the call {u.made}")
    got = [u.named for u in handed.uses]
    want = [u.named for u in made.uses]
    if got != want:
        problems.append(f"{where}: the client was handed the calls {got}, the upstream made {want}")
    return problems
