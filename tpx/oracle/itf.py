"""Traces in the Informal Trace Format (ITF), the JSON trace format of Apalache and Quint.

A trace document is one JSON object::

    {
      "#meta":  {"format": "ITF", "format-description": "...", "source": "...",
                 "description": "...", "model-values": "..."},
      "vars":   ["hasKey", "hasToken", ...],
      "states": [
        {"#meta": {"index": 0, "action": "Init"}, "hasKey": false, ...},
        {"#meta": {"index": 1, "action": "CallerSend"}, ...}
      ]
    }

Values (see :mod:`tpx.oracle.values` for the Python side):

=============================  ==============================================
TLA+ / Python                  ITF JSON
=============================  ==============================================
``TRUE`` / ``bool``            ``true`` / ``false``
``42`` / ``int``               ``{"#bigint": "42"}`` (written); a JSON integer
                               number is also read
``"text"`` / ``str``           ``"text"``
``{a, b}`` / ``frozenset``     ``{"#set": [a, b]}`` (elements in a fixed order)
``<<a, b>>`` / ``tuple``       ``{"#tup": [a, b]}`` (written); a JSON list (an ITF
                               sequence) is also read as a tuple
``[f |-> v]`` / ``Record``     ``{"f": v}``
``(k :> v)`` / ``Function``    ``{"#map": [[k, v], ...]}``
model value ``t1``             ``{"#unserializable": "t1"}``
=============================  ==============================================

Model values: ITF has no model values. Writing them as plain strings would make
the model value ``TPX`` indistinguishable from the string ``"TPX"``, so tpx writes a
model value as ITF's opaque value ``{"#unserializable": NAME}`` whose text is the
name TLC prints, and reads every ``#unserializable`` back as the
:class:`~tpx.oracle.values.ModelValue` of that name. The convention is recorded in the
document's ``#meta`` under ``"model-values"``. (Other tools' traces that spell
model values as strings are still usable: :mod:`tpx.oracle.tracecheck` interprets
strings by variable.)

The action that produced each state is recorded in the state's ``#meta`` as
``"action"`` (``"Init"`` for the first state), and read back by :func:`from_itf`
(``None`` when a state's ``#meta`` names no action). Malformed documents raise
:class:`TraceFormatError` naming the offending state index.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from tpx.errors import TpxError
from tpx.oracle.model.state import VARS
from tpx.oracle.values import Function, ModelValue, Record

__all__ = [
    "FORMAT_DESCRIPTION",
    "MODEL_VALUE_CONVENTION",
    "TraceFormatError",
    "decode_value",
    "dump_itf",
    "encode_value",
    "from_itf",
    "load_itf",
    "to_itf",
]

FORMAT_DESCRIPTION = "https://apalache-mc.org/docs/adr/015adr-trace.html"
MODEL_VALUE_CONVENTION = (
    'a TLC model value NAME is written {"#unserializable": "NAME"}; strings are JSON strings'
)

Step = tuple[str | None, Record]


class TraceFormatError(TpxError, ValueError):
    """A trace document (ITF or JSON lines) that cannot be read."""


# --------------------------------------------------------------------------- values


def encode_value(v: object) -> Any:
    """The ITF JSON form of a TLA+ value (raises ``TypeError`` for anything else)."""
    if isinstance(v, bool | str):
        return v
    if isinstance(v, int):
        return {"#bigint": str(v)}
    if isinstance(v, ModelValue):
        return {"#unserializable": v.name}
    if isinstance(v, frozenset | set):
        items = [encode_value(x) for x in v]
        items.sort(key=_sort_key)
        return {"#set": items}
    if isinstance(v, tuple | list):
        return {"#tup": [encode_value(x) for x in v]}
    if isinstance(v, Record):
        out: dict[str, Any] = {}
        for key in sorted(v):
            if not isinstance(key, str) or key.startswith("#"):
                raise TypeError(f"record field {key!r} cannot be written in ITF")
            out[key] = encode_value(v[key])
        return out
    if isinstance(v, Function):
        pairs = [[encode_value(k), encode_value(x)] for k, x in v.items()]
        pairs.sort(key=lambda p: _sort_key(p[0]))
        return {"#map": pairs}
    raise TypeError(f"cannot write {type(v).__name__} {v!r} as an ITF value")


def _sort_key(encoded: Any) -> str:
    return json.dumps(encoded, sort_keys=True, ensure_ascii=False)


def decode_value(j: Any, *, where: str = "value") -> Any:
    """The TLA+ value of an ITF JSON value; *where* names it in error messages."""
    if isinstance(j, bool | str):
        return j
    if isinstance(j, int):
        return j
    if isinstance(j, list):
        return tuple(decode_value(x, where=f"{where}[{i}]") for i, x in enumerate(j))
    if isinstance(j, dict):
        tags = [k for k in j if isinstance(k, str) and k.startswith("#")]
        if not tags:
            return Record({k: decode_value(x, where=f"{where}.{k}") for k, x in j.items()})
        if len(j) != 1:
            raise TraceFormatError(
                f"{where}: a tagged ITF value has exactly one key, got {list(j)}"
            )
        tag = tags[0]
        body = j[tag]
        if tag == "#bigint":
            if not isinstance(body, str):
                raise TraceFormatError(f"{where}: #bigint needs a string of digits, got {body!r}")
            try:
                return int(body)
            except ValueError:
                raise TraceFormatError(
                    f"{where}: #bigint needs a string of digits, got {body!r}"
                ) from None
        if tag == "#unserializable":
            if not isinstance(body, str) or not body:
                raise TraceFormatError(f"{where}: #unserializable needs a name, got {body!r}")
            return ModelValue(body)
        if tag in ("#set", "#tup", "#map") and not isinstance(body, list):
            raise TraceFormatError(f"{where}: {tag} needs a JSON list, got {body!r}")
        if tag == "#set":
            return frozenset(decode_value(x, where=f"{where}#set[{i}]") for i, x in enumerate(body))
        if tag == "#tup":
            return tuple(decode_value(x, where=f"{where}#tup[{i}]") for i, x in enumerate(body))
        if tag == "#map":
            pairs: dict[Any, Any] = {}
            for i, pair in enumerate(body):
                if not isinstance(pair, list) or len(pair) != 2:
                    raise TraceFormatError(
                        f"{where}: #map entry {i} must be a [key, value] pair, got {pair!r}"
                    )
                key = decode_value(pair[0], where=f"{where}#map[{i}].key")
                pairs[key] = decode_value(pair[1], where=f"{where}#map[{i}].value")
            return Function(pairs)
        raise TraceFormatError(f"{where}: unknown ITF tag {tag!r}")
    if j is None:
        raise TraceFormatError(f"{where}: null is not an ITF value")
    raise TraceFormatError(f"{where}: {type(j).__name__} {j!r} is not an ITF value")


# --------------------------------------------------------------------------- traces


def to_itf(
    trace: Iterable[tuple[str | None, Mapping[str, Any]] | Mapping[str, Any]],
    *,
    vars: Sequence[str] = VARS,
    actions: Sequence[str | None] | None = None,
    source: str | None = None,
    description: str | None = None,
) -> dict[str, Any]:
    """The ITF document of a trace.

    *trace* holds ``(action, state)`` steps (the runner's and explorer's trace
    format, ``"Init"`` first) or bare states. *actions*, when given, overrides the
    action names (one per state, ``None`` for none). Each state must assign exactly
    *vars*.
    """
    steps: list[tuple[str | None, Mapping[str, Any]]] = [
        (None, step) if isinstance(step, Mapping) else (step[0], step[1]) for step in trace
    ]
    if actions is not None:
        if len(actions) != len(steps):
            raise ValueError(f"{len(actions)} action names for {len(steps)} states")
        steps = [(a, s) for a, (_, s) in zip(actions, steps, strict=True)]
    meta: dict[str, Any] = {
        "format": "ITF",
        "format-description": FORMAT_DESCRIPTION,
        "model-values": MODEL_VALUE_CONVENTION,
    }
    if source is not None:
        meta["source"] = source
    meta["description"] = description or "Created by tpx"
    states: list[dict[str, Any]] = []
    want = list(vars)
    for i, (action, state) in enumerate(steps):
        if set(state) != set(want):
            raise ValueError(
                f"state {i}: expected the variables {want}; missing "
                f"{sorted(set(want) - set(state))}, unknown {sorted(set(state) - set(want))}"
            )
        smeta: dict[str, Any] = {"index": i}
        if action is not None:
            smeta["action"] = action
        entry: dict[str, Any] = {"#meta": smeta}
        for name in want:
            entry[name] = encode_value(state[name])
        states.append(entry)
    return {"#meta": meta, "vars": want, "states": states}


def from_itf(doc: Any) -> list[Step]:
    """The ``(action, state)`` steps of an ITF document (action ``None`` where unrecorded).

    Raises :class:`TraceFormatError` naming the offending state index.
    """
    if not isinstance(doc, dict):
        raise TraceFormatError(f"an ITF trace is a JSON object, got {type(doc).__name__}")
    names = doc.get("vars")
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise TraceFormatError('an ITF trace needs "vars": a list of variable names')
    if len(set(names)) != len(names):
        raise TraceFormatError(f'"vars" names a variable twice: {names}')
    states = doc.get("states")
    if not isinstance(states, list):
        raise TraceFormatError('an ITF trace needs "states": a list of states')
    if not states:
        raise TraceFormatError("the ITF trace has no states")
    steps: list[Step] = []
    want = set(names)
    for i, entry in enumerate(states):
        if not isinstance(entry, dict):
            raise TraceFormatError(f"state {i}: a state is a JSON object, got {entry!r}")
        meta = entry.get("#meta", {})
        if not isinstance(meta, dict):
            raise TraceFormatError(f"state {i}: #meta must be a JSON object")
        action = meta.get("action")
        if action is not None and not isinstance(action, str):
            raise TraceFormatError(f"state {i}: #meta.action must be a string, got {action!r}")
        have = {k for k in entry if not k.startswith("#")}
        if have != want:
            raise TraceFormatError(
                f"state {i}: expected the variables {names}; missing "
                f"{sorted(want - have)}, unknown {sorted(have - want)}"
            )
        try:
            values = {n: decode_value(entry[n], where=f"state {i}, variable {n}") for n in names}
        except RecursionError:
            raise TraceFormatError(f"state {i}: a value nested too deeply to read") from None
        steps.append((action, Record(values)))
    return steps


def dump_itf(
    path: str | os.PathLike[str],
    trace: Iterable[tuple[str | None, Mapping[str, Any]] | Mapping[str, Any]],
    *,
    vars: Sequence[str] = VARS,
    actions: Sequence[str | None] | None = None,
    source: str | None = None,
    description: str | None = None,
) -> None:
    """Write *trace* as an ITF file (see :func:`to_itf`)."""
    doc = to_itf(trace, vars=vars, actions=actions, source=source, description=description)
    Path(path).write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")


def load_itf(path: str | os.PathLike[str]) -> list[Step]:
    """Read an ITF file (see :func:`from_itf`); errors name the file."""
    p = Path(path)
    try:
        doc = json.loads(p.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise TraceFormatError(f"{p}: not JSON: {exc}") from exc
    except UnicodeDecodeError as exc:
        raise TraceFormatError(f"{p}: not UTF-8 text (byte {exc.start}: {exc.reason})") from None
    except RecursionError:
        raise TraceFormatError(f"{p}: JSON nested too deeply to read") from None
    except OSError as exc:
        raise TraceFormatError(f"cannot read {p}: {exc.strerror or exc}") from None
    try:
        return from_itf(doc)
    except TraceFormatError as exc:
        raise TraceFormatError(f"{p}: {exc}") from exc
