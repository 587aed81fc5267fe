"""A failure's ITF trace: the failing conversation's observed states, which ``tpx
check-trace --spec spec/TpxGateway.tla`` reads (the gateway monitor's per-conversation
variables) and rejects.

The observed states come from the abstraction (:class:`tpx.audit.abstraction.Observer`),
one after every step; :func:`conversation_trace` keeps the steps of one conversation
(the others' are stutters of it) and its variables, ids written ``c.t``. The audit's
abstraction is stricter than the replay's in two places, both read from the same bytes:

* a body handed to the client that breaks the Messages grammar (or an error answer that is
  not Messages-shaped) is not of the shape ``"messages"``: the step's ``gotShape`` is
  ``"openai"``, the shape of what it is not (so ShapeInv fails at that step);
* an id that travels bound to another call, or a result answering another call than its id
  names, is not the id it spells: it is written ``c.t~`` (so PairingInv fails: the ids
  handed over, or carried upstream, are not the obligations).

:func:`judge` gives the trace as observed when check-trace rejects it for the failing
check's property, else the trace with the failing step read the stricter way (when that is
rejected for the property, or the observed one is accepted: the replay's abstraction saw
no departure in the spec's variables there).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from tpx.oracle.itf import to_itf
from tpx.oracle.tracecheck import TraceReport
from tpx.oracle.tracecheck_gateway import check_gateway_trace
from tpx.oracle.values import ModelValue, Record

__all__ = ["VARS", "conversation_trace", "judge"]

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


def _id(value: Any) -> str:
    if isinstance(value, tuple) and len(value) == 2:
        return f"{value[0]}.{value[1]}"
    return str(value)


def _name(value: Any) -> Any:
    return value.name if isinstance(value, ModelValue) else value


def conversation_trace(
    states: Sequence[tuple[str, Record]], conv: ModelValue
) -> list[tuple[str, dict[str, Any]]]:
    """``(action, variables)`` of *conv*'s steps: ``Init`` and every step labelled
    ``Action(conv)``."""
    out: list[tuple[str, dict[str, Any]]] = []
    for label, record in states:
        action, _, who = label.partition("(")
        if out and who.rstrip(")") != conv.name:
            continue
        snap: dict[str, Any] = {
            "provider": _name(record["provider"]),
            "hasKey": record["hasKey"],
            "hasToken": record["hasToken"],
        }
        for name in VARS[3:]:
            value = record[name][conv]
            if name in _IDS:
                value = frozenset(_id(i) for i in value)
            snap[name] = _name(value)
        out.append(("Init" if not out else action, snap))
    return out


def _bend(step: dict[str, Any], prop: str) -> dict[str, Any]:
    """The failing step read the stricter way for *prop* (see the module's docs)."""
    step = dict(step)
    if prop == "ShapeInv":
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
    trace: list[tuple[str, dict[str, Any]]], prop: str, description: str
) -> tuple[dict[str, Any], TraceReport]:
    """The ITF document of *trace* and check-trace's verdict on it: as observed, or, when
    that is accepted and *prop* is ShapeInv / PairingInv, with its last step bent."""
    report = _verdict(trace)
    if prop in ("ShapeInv", "PairingInv") and len(trace) > 1 and report.failed_property != prop:
        bent = [*trace[:-1], (trace[-1][0], _bend(trace[-1][1], prop))]
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
