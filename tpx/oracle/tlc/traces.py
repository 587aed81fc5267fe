"""Trace validation with TLC: is each recorded trace a behaviour of the spec? (one run)."""

from __future__ import annotations

import contextlib
import re
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

import attrs

from tpx.errors import (
    SpecConfigError,
    TLCConfigError,
    TLCCrashError,
)
from tpx.oracle.tlc.cfg import ModelConfig, StrPath, _strip_comments
from tpx.oracle.tlc.graph import parse_dot
from tpx.oracle.tlc.modules import _STRING, module_name, read_module
from tpx.oracle.tlc.runner import load_model, run_model
from tpx.oracle.tlc.values import format_value
from tpx.oracle.tlc.verdict import _definitions
from tpx.oracle.values import ModelValue, Record, TLAValue

__all__ = ["STUTTER_LABELS", "TRACE_MODULE", "TraceVerdict", "check_traces"]


@attrs.frozen
class TraceVerdict:
    accepted: bool
    failed_step: int | None
    """``None`` if accepted; else the 0-based index of the first recorded state the spec
    cannot reproduce (0: not an initial state; l: the step from state l-1 to state l)."""
    mislabelled: bool = False
    """The state at ``failed_step`` is reachable, but not by the action its label names
    (for state 0: the label is neither ``"Init"`` nor absent)."""
    failed_property: str | None = None
    """The cfg invariant the state at ``failed_step`` violates, or the action property the
    step into it violates (``None``: the failure is Init / Next / a label)."""


_SPEC_FORMULA = r"^{name}\s*==\s*([A-Za-z_]\w*)\s*/\\\s*\[\]\[\s*([A-Za-z_]\w*)\s*\]_"


def _init_next(model: ModelConfig, source: str) -> tuple[str, str]:
    if model.init and model.next:
        return model.init, model.next
    if model.specification:
        m = re.search(_SPEC_FORMULA.format(name=re.escape(model.specification)), source, re.M)
        if m is not None:
            return m.group(1), m.group(2)
        raise TLCConfigError(
            f"cannot find `{model.specification} == Init /\\ [][Next]_vars` in the spec"
        )
    raise TLCConfigError("the cfg names neither SPECIFICATION nor INIT/NEXT")


_ACTION_PROPERTY = r"^{name}\s*==\s*\[\]\[\s*(.+?)\s*\]_(\w+|<<[^>]*>>)\s*$"


def _action_of(prop: str, source: str) -> tuple[str, str]:
    """``Prop == [][A]_v`` -> (A, v): the action properties a finite trace can be judged by."""
    text = _STRING.sub('""', source)
    with contextlib.suppress(SpecConfigError):
        text = _strip_comments(text)
    m = re.search(_ACTION_PROPERTY.format(name=re.escape(prop)), text, re.M)
    if m is None:
        raise TLCConfigError(
            f"PROPERTY {prop}: trace checking judges action properties written "
            f"`{prop} == [][A]_v` only; this one is not"
        )
    return m.group(1), m.group(2)


def _model_values(v: object, acc: set[str]) -> None:
    if isinstance(v, ModelValue):
        acc.add(v.name)
    elif isinstance(v, frozenset | tuple | list):
        for x in v:
            _model_values(x, acc)
    elif isinstance(v, Mapping):
        for k, x in v.items():
            _model_values(k, acc)
            _model_values(x, acc)


TRACE_MODULE = "TpxTraceCheck"


def _trace_rows(traces: Sequence[Sequence[Mapping[str, TLAValue]]]) -> list[str]:
    """Each trace as a TLA+ tuple of records; a state TLA+ cannot express (a model value
    whose name is no identifier, a float, ...) is a :class:`~tpx.oracle.itf.TraceFormatError`."""
    from tpx.oracle.itf import TraceFormatError

    rows = []
    for t, tr in enumerate(traces):
        states = []
        for i, state in enumerate(tr, 1):
            try:
                states.append(format_value(Record(dict(state))))
            except (TypeError, ValueError) as exc:
                raise TraceFormatError(
                    f"trace {t + 1}, state {i} cannot be written as TLA+ for TLC: {exc}"
                ) from exc
        rows.append("<<" + ", ".join(states) + ">>")
    return rows


#: Labels that claim a stuttering step (the mirror's name, and TLC's).
STUTTER_LABELS = frozenset({"stutter", "Stuttering"})


def _spec_actions(source: str, nxt: str) -> list[str]:
    """The parameterless definitions of the module that the definition of *nxt* names: the
    actions a trace label may claim (e.g. the seed's seven ``Next`` disjuncts)."""
    defs = _definitions(source)
    lines = source.splitlines()
    names = {name for name, _, _ in defs}
    for name, start, end in defs:
        if name == nxt:
            body = "\n".join(lines[start - 1 : end]).split("==", 1)[1]
            with contextlib.suppress(SpecConfigError):
                body = _strip_comments(body)
            used = re.findall(r"[A-Za-z_]\w*", _STRING.sub('""', body))
            plain = {n for n in names if re.search(rf"^{re.escape(n)}\s*==", source, re.M)}
            return sorted({n for n in used if n in plain and n != nxt})
    return []


def _label_codes(
    traces: Sequence[Sequence[object]],
    actions: Sequence[Sequence[str | None] | None] | None,
    known: Sequence[str],
) -> list[str]:
    """Each trace's labels as a TLA+ tuple of codes: 0 none, 1 ``Init``, 2 a stuttering step,
    3.. the *known* actions in order, -1 anything else."""
    code = {"Init": 1, **dict.fromkeys(STUTTER_LABELS, 2)}
    code.update({name: i for i, name in enumerate(known, 3)})
    rows = []
    for t, tr in enumerate(traces):
        labels = actions[t] if actions is not None else None
        if labels is None:
            labels = [None] * len(tr)
        if len(labels) != len(tr):
            raise ValueError(f"trace {t + 1}: {len(labels)} labels for {len(tr)} states")
        rows.append(
            "<<" + ", ".join(str(0 if a is None else code.get(a, -1)) for a in labels) + ">>"
        )
    return rows


def _trace_module(
    spec_module: str,
    init: str,
    nxt: str,
    traces: Sequence[Sequence[Mapping[str, TLAValue]]],
    rows: Sequence[str],
    extra_constants: Sequence[str],
    *,
    labels: Sequence[str],
    known: Sequence[str],
    stuttering: bool,
    invariants: Sequence[str] = (),
    properties: Sequence[tuple[str, str]] = (),
) -> str:
    variables = sorted({name for tr in traces for state in tr for name in state})
    consts = f"CONSTANTS {', '.join(extra_constants)}\n" if extra_constants else ""
    unchanged = f"UNCHANGED <<{', '.join(variables)}>>"

    def match(primed: str, index: str) -> str:
        return " /\\ ".join(f"{v}{primed} = tpxTraces[tpxTr][{index}].{v}" for v in variables)

    cases = "".join(f"\n      [] c = {i} -> {name}" for i, name in enumerate(known, 3))
    step = f"({nxt} \\/ {unchanged})" if stuttering else nxt
    inv_cases = "".join(f"\n      [] ~({name}) -> {i}" for i, name in enumerate(invariants, 1))
    prop_cases = "".join(
        f"\n      [] ~([{a}]_{v}) -> {i}" for i, (a, v) in enumerate(properties, 1)
    )
    # Probe modes judge every recorded state by the invariants ("inv") and every recorded
    # step by the action properties ("prop") on their own, whether or not the trace gets
    # there under Next: the mirror's order (invariants, then properties, then Next).
    probes = ""
    probe_next = ""
    if invariants:
        probes += (
            '    \\/ /\\ tpxMode = "inv"\n'
            "       /\\ tpxTr \\in 1..Len(tpxTraces)\n"
            "       /\\ tpxStep \\in 1..Len(tpxTraces[tpxTr])\n"
            f"       /\\ {match('', 'tpxStep')}\n"
            "       /\\ tpxBad = FALSE\n"
            "       /\\ tpxFail = TpxInvFail\n"
        )
    if properties:
        probes += (
            '    \\/ /\\ tpxMode = "prop"\n'
            "       /\\ tpxTr \\in 1..Len(tpxTraces)\n"
            "       /\\ tpxStep \\in 1..(Len(tpxTraces[tpxTr]) - 1)\n"
            f"       /\\ {match('', 'tpxStep')}\n"
            "       /\\ tpxBad = FALSE\n"
            "       /\\ tpxFail = 0\n"
        )
        probe_next = (
            '    \\/ /\\ tpxMode = "prop" /\\ ~tpxBad\n'
            "       /\\ tpxStep' = tpxStep + 1 /\\ tpxTr' = tpxTr /\\ tpxMode' = tpxMode\n"
            f"       /\\ {match(chr(39), 'tpxStep + 1')}\n"
            "       /\\ tpxBad' = TRUE\n"
            "       /\\ tpxFail' = TpxPropFail\n"
        )
    return (
        f"---- MODULE {TRACE_MODULE} ----\n"
        f"EXTENDS {spec_module}, Integers, Sequences, TLC\n"
        f"{consts}"
        "VARIABLES tpxStep, tpxTr, tpxBad, tpxMode, tpxFail\n"
        f"tpxTraces == <<{', '.join(rows)}>>\n"
        f"tpxLabels == <<{', '.join(labels)}>>\n"
        "TpxLabelled(c) ==\n"
        "    CASE c = 0 -> TRUE\n"
        f"      [] c = 2 -> {unchanged}"
        f"{cases}\n"
        "      [] OTHER -> FALSE\n"
        f"TpxInvFail ==\n    CASE FALSE -> 0{inv_cases}\n      [] OTHER -> 0\n"
        f"TpxPropFail ==\n    CASE FALSE -> 0{prop_cases}\n      [] OTHER -> 0\n"
        "TraceInit ==\n"
        '    \\/ /\\ tpxMode = "trace"\n'
        "       /\\ tpxFail = 0\n"
        "       /\\ tpxTr \\in 1..Len(tpxTraces)\n"
        "       /\\ tpxStep = 1\n"
        f"       /\\ {init}\n"
        f"       /\\ {match('', '1')}\n"
        "       /\\ tpxBad = (tpxLabels[tpxTr][1] \\notin {0, 1})\n"
        f"{probes}"
        "TraceNext ==\n"
        "    \\/ /\\ tpxMode = \"trace\" /\\ tpxMode' = tpxMode /\\ tpxFail' = 0\n"
        "       /\\ ~tpxBad\n"
        "       /\\ tpxStep < Len(tpxTraces[tpxTr])\n"
        "       /\\ tpxStep' = tpxStep + 1\n"
        "       /\\ tpxTr' = tpxTr\n"
        f"       /\\ {step}\n"
        f"       /\\ {match(chr(39), 'tpxStep + 1')}\n"
        "       /\\ tpxBad' = ~TpxLabelled(tpxLabels[tpxTr][tpxStep + 1])\n"
        f"{probe_next}"
        "====\n"
    )


def check_traces(
    spec: StrPath,
    cfg: StrPath,
    traces: Sequence[Sequence[Mapping[str, TLAValue]]],
    *,
    actions: Sequence[Sequence[str | None] | None] | None = None,
    stuttering: bool = False,
    timeout: float | None = None,
    invariants: Sequence[str] | None = None,
    properties: Sequence[str] | None = None,
) -> list[TraceVerdict]:
    """Is each recorded trace a behaviour of *spec*? One TLC run for all traces.

    *invariants* and *properties* name the checks to run on the recorded states and steps
    (default: none). Each recorded state is judged by the invariants and each recorded step
    by the action properties (``P == [][A]_v``) on its own, so a trace is rejected at the
    first state that violates one, in the order invariants, properties, Init / Next, label;
    ``failed_property`` names it. Invariants and properties need states that assign every
    variable.

    Explicit step counter technique (TLC 2.15 has no trace-validation support):
    a generated module extends the spec with ``VARIABLES tpxStep, tpxTr, tpxBad``;
    ``TraceInit`` picks a trace and constrains the variables to its first
    state, ``TraceNext`` takes a spec step that lands on the next recorded
    state. A trace is accepted iff its counter reaches ``Len(trace)`` (the
    condition under which ``tpxStep < Len(..)`` would be violated); a trace
    whose counter stops at ``l`` (a deadlock at step ``l``) is rejected at
    step ``l``. Since deadlock ends TLC even with ``-continue``, deadlock
    checking is off and the counters are read from the ``-dump`` of the
    (small) product graph, so one run decides every trace. Variables missing
    from the recorded states are left unconstrained. A state TLA+ cannot express
    raises :class:`~tpx.oracle.itf.TraceFormatError` before TLC runs.

    *actions* optionally labels each trace's states (``None``: no label). A label on the
    first state must be ``"Init"``; on a later state it must name an action (a
    parameterless definition the cfg's next-state relation mentions, e.g. ``Deliver``)
    that takes the step, or ``"stutter"`` / ``"Stuttering"`` for a step that changes no
    recorded variable. The step counter still advances over a step its label does not
    explain, but into a dead end marked ``tpxBad``: the verdict is ``mislabelled`` at that
    step. With *stuttering*, a step that changes no recorded variable is allowed
    (``[Next]_vars``) even where no action takes it.
    """
    if not traces:
        return []
    for i, tr in enumerate(traces):
        if not tr:
            from tpx.oracle.itf import TraceFormatError

            raise TraceFormatError(f"trace {i + 1} is empty")
    if actions is not None and len(actions) != len(traces):
        raise ValueError(f"{len(actions)} label lists for {len(traces)} traces")
    spec = Path(spec)
    model = load_model(cfg, spec)
    source = read_module(spec)
    init, nxt = _init_next(model, source)
    known = _spec_actions(source, nxt)
    labels = _label_codes(traces, actions, known)
    rows = _trace_rows(traces)
    names: set[str] = set()
    for tr in traces:
        for state in tr:
            _model_values(state, names)
    extra = sorted(names - set(model.constants))
    invs = tuple(invariants or ())
    props = tuple(properties or ())
    module = _trace_module(
        module_name(source, spec),
        init,
        nxt,
        traces,
        rows,
        extra,
        labels=labels,
        known=known,
        stuttering=stuttering,
        invariants=invs,
        properties=[_action_of(p, source) for p in props],
    )
    trace_model = ModelConfig(
        init="TraceInit",
        next="TraceNext",
        constants={**model.constants, **{n: ModelValue(n) for n in extra}},
        substitutions=model.substitutions,
        check_deadlock=False,
    )
    with tempfile.TemporaryDirectory(prefix="tpx-trace-") as tmp:
        dot = Path(tmp) / "trace.dot"
        result = run_model(
            spec, trace_model, dump_dot=dot, extra_modules={TRACE_MODULE: module}, timeout=timeout
        )
        if not result.ok:
            raise TLCCrashError(f"trace check run did not complete: {result.verdict}")
        graph = parse_dot(dot.read_text(encoding="utf-8"))
    reached = [0] * len(traces)
    bad: list[set[int]] = [set() for _ in traces]
    # (1-based state, rank, property): rank 0 an invariant, 1 an action property
    probed: list[list[tuple[int, int, str]]] = [[] for _ in traces]
    for state in graph.states.values():
        t, step, mode = state["tpxTr"], state["tpxStep"], state["tpxMode"]
        if mode == "inv":
            if state["tpxFail"]:
                probed[t - 1].append((step, 0, invs[state["tpxFail"] - 1]))
        elif mode == "prop":
            if state["tpxFail"]:  # the step from state step-1 into state step
                probed[t - 1].append((step, 1, props[state["tpxFail"] - 1]))
        elif state["tpxBad"] is True:
            bad[t - 1].add(step)
        else:
            reached[t - 1] = max(reached[t - 1], step)
    verdicts = []
    for i, tr in enumerate(traces):
        first = min(probed[i], default=None)
        if reached[i] == len(tr) and first is None:
            verdicts.append(TraceVerdict(accepted=True, failed_step=None))
        elif first is not None and (reached[i] == len(tr) or first[0] <= reached[i] + 1):
            verdicts.append(
                TraceVerdict(accepted=False, failed_step=first[0] - 1, failed_property=first[2])
            )
        else:
            # a reachable state its label does not explain, right after the last good one
            mislabelled = reached[i] + 1 in bad[i]
            verdicts.append(
                TraceVerdict(accepted=False, failed_step=reached[i], mislabelled=mislabelled)
            )
    return verdicts
