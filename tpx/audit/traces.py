"""A failure's ITF trace: the failing conversation's observed states, which ``tpx
check-trace --spec spec/TpxGateway.tla`` reads (the gateway monitor's per-conversation
variables) and rejects.

The observed states come from the abstraction (:class:`tpx.audit.abstraction.Observer`),
one after every step; :func:`conversation_trace` keeps the steps of one conversation
(the others' are stutters of it) and its variables, ids written ``c.t``.
:func:`gateway_trace` keeps every conversation's, interleaved, each step named with its
conversation (``CallerSend(c1)``), after those of conversations of earlier behaviours (named
by their keys): the trace of a NoCrossPairing failure, where check-trace must see which
conversation an id came from. The audit's abstraction is stricter than the replay's in three
places, all read from the same bytes:

* a body handed to the client that breaks the Messages grammar (or an error answer that is
  not Messages-shaped) is not of the shape ``"messages"``: the step's ``gotShape`` is
  ``"openai"``, the shape of what it is not (so ShapeInv fails at that step);
* an id that travels bound to another call, or a result answering another call than its id
  names, is not the id it spells: it is written ``c.t~`` (so PairingInv fails: the ids
  handed over, or carried upstream, are not the obligations);
* another conversation's id that the conversation's bytes name (a pairing refusal listing
  it as an obligation) is among the step's obligations (so NoCrossPairing fails).

:func:`judge` gives the trace as observed when check-trace rejects it for the failing
check's property, else the trace with the failing step read the stricter way (when that is
rejected for the property, or the observed one is accepted: the replay's abstraction saw
no departure in the spec's variables there).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from tpx.oracle.itf import to_itf
from tpx.oracle.tracecheck import TraceReport
from tpx.oracle.tracecheck_gateway import check_gateway_trace
from tpx.oracle.values import ModelValue, Record

__all__ = ["VARS", "conversation_trace", "gateway_trace", "judge"]

#: the per-conversation variables ``tpx check-trace`` reads for the gateway spec
VARS = (
    "provider",
    "hasKey",
    "hasToken",
    "turn",
    "phase",
    "pending",
    "reqIds",
    "wireShape",
    "wireIds",
    "emitted",
    "gotShape",
    "lastOutcome",
    "retryable",
)
_IDS = ("pending", "reqIds", "wireIds", "emitted")


#: a conversation's name in a trace (its ids are written ``NAME.t``)
Names = Mapping[ModelValue, str]


def _conv_name(c: Any, names: Names) -> str:
    """*c* as a trace names it: by *names*, else its own name (one of another behaviour, which
    the abstraction writes ``?KEY``: its key)."""
    if isinstance(c, ModelValue) and c in names:
        return names[c]
    text = str(c)
    return text[1:] if text.startswith("?") and len(text) > 1 else text


def _id(value: Any, names: Names) -> str:
    if isinstance(value, tuple) and len(value) == 2:
        return f"{_conv_name(value[0], names)}.{value[1]}"
    return str(value)


def _name(value: Any) -> Any:
    return value.name if isinstance(value, ModelValue) else value


def _snap(record: Record, conv: ModelValue, names: Names) -> dict[str, Any]:
    """*conv*'s variables in *record* (a state of the whole gateway)."""
    snap: dict[str, Any] = {
        "provider": _name(record["provider"]),
        "hasKey": record["hasKey"],
        "hasToken": record["hasToken"],
    }
    for name in VARS[3:]:
        value = record[name][conv]
        if name in _IDS:
            value = frozenset(_id(i, names) for i in value)
        snap[name] = _name(value)
    return snap


def conversation_trace(
    states: Sequence[tuple[str, Record]], conv: ModelValue
) -> list[tuple[str, dict[str, Any]]]:
    """``(action, variables)`` of *conv*'s steps: ``Init`` and every step labelled
    ``Action(conv)``."""
    return _one(states, conv, {})


#: a conversation of an earlier behaviour: its behaviour's states, the conversation there,
#: and its name in a trace (its key)
Earlier = tuple[Sequence[tuple[str, Record]], ModelValue, str]


def gateway_trace(
    states: Sequence[tuple[str, Record]], earlier: Sequence[Earlier] = ()
) -> list[tuple[str, dict[str, Any]]]:
    """Every conversation's steps interleaved, as ``tpx check-trace`` reads several
    conversations: the steps of each *earlier* conversation first (``Init(KEY)``, then
    ``Action(KEY)``: conversations the same gateway served before, whose ids the failing step
    names), then ``Init(c)`` of each conversation of *states* and each of their steps
    ``Action(c)`` with *c*'s variables after it."""
    out: list[tuple[str, dict[str, Any]]] = []
    for past, conv, name in earlier:
        for action, snap in _one(past, conv, {conv: name}):
            out.append((f"{action}({name})", snap))
    if not states:
        return out
    _, first = states[0]
    convs = sorted(first["turn"], key=lambda c: c.name)
    out += [(f"Init({c.name})", _snap(first, c, {})) for c in convs]
    for label, record in states[1:]:
        _, _, who = label.partition("(")
        conv = ModelValue(who.rstrip(")"))
        if who and conv in convs:
            out.append((label, _snap(record, conv, {})))
    return out


def _one(
    states: Sequence[tuple[str, Record]], conv: ModelValue, names: Names
) -> list[tuple[str, dict[str, Any]]]:
    out: list[tuple[str, dict[str, Any]]] = []
    for label, record in states:
        action, _, who = label.partition("(")
        if out and who.rstrip(")") != conv.name:
            continue
        out.append(("Init" if not out else action, _snap(record, conv, names)))
    return out


def _bend(step: dict[str, Any], prop: str, foreign: frozenset[str]) -> dict[str, Any]:
    """The failing step read the stricter way for *prop* (see the module's docs)."""
    step = dict(step)
    if prop == "NoCrossPairing":
        step["pending"] = step["pending"] | foreign
    elif prop == "ShapeInv":
        step["gotShape"] = "openai"
    elif prop == "PairingInv":
        field = "pending" if step["phase"] == "idle" else "wireIds"
        ids = sorted(step[field])
        bent = {f"{i}~" for i in ids[:1]} or {"?.unbound~"}
        step[field] = frozenset(ids[1:]) | bent
    return step


def _verdict(trace: list[tuple[str, dict[str, Any]]]) -> TraceReport:
    return check_gateway_trace([s for _, s in trace], [a for a, _ in trace])


def judge(
    trace: list[tuple[str, dict[str, Any]]],
    prop: str,
    description: str,
    foreign: Iterable[tuple[Any, Any]] = (),
) -> tuple[dict[str, Any], TraceReport]:
    """The ITF document of *trace* and check-trace's verdict on it: as observed, or, when
    that is accepted and *prop* is ShapeInv / PairingInv / NoCrossPairing, with its last
    step bent (*foreign*: the other conversations' ids the failing step's bytes name)."""
    report = _verdict(trace)
    bendable = ("ShapeInv", "PairingInv", "NoCrossPairing")
    if prop in bendable and len(trace) > 1 and report.failed_property != prop:
        ids = frozenset(_id(i, {}) for i in foreign)
        bent = [*trace[:-1], (trace[-1][0], _bend(trace[-1][1], prop, ids))]
        bent_report = _verdict(bent)
        if bent_report.failed_property == prop or report.accepted:
            trace, report = bent, bent_report
    doc = to_itf(
        [(a, Record(s)) for a, s in trace],
        vars=VARS,
        source="tpx audit",
        description=description,
    )
    return doc, report


def states_of(doc: Mapping[str, Any]) -> int:
    return len(doc.get("states", ()))
