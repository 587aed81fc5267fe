"""Trace validation: is an implementation's recorded behaviour a behaviour of the spec?

Any implementation of the transport can log its 12 spec variables after every step
and have the log checked here, by the Python mirror (:func:`check_trace`) or by TLC
(:func:`check_trace_tlc`), from the command line with ``tpx check-trace``.

Input files (:func:`load_trace` tells them apart by content):

* an ITF trace (see :mod:`tpx.oracle.itf`), e.g. one written by :func:`tpx.oracle.itf.dump_itf`;
* JSON lines: one JSON object per line, one line per observed state, in order.
  Keys are the spec's 12 variable names; keys starting with ``#`` are ignored
  (comments, timestamps), except ``"#action"``, the implementation's name for the
  step that produced the state, which, when present, must be one of the spec
  actions that explain the step: ``"Init"`` on the first state; on a state that
  repeats its predecessor also ``"stutter"`` (or TLC's ``"Stuttering"``). Blank
  lines are skipped; a value nested deeper than :data:`MAX_NESTING` is refused. Values::

    hasKey, hasToken                      JSON boolean
    turn                                  JSON integer
    phase, wireShape, gotShape,           JSON string ("idle"/"req"/"resp",
      lastOutcome                         "messages"/"openai", "none"/"ok"/"err")
    provider                              JSON string naming the provider model value
                                          ("ANTHROPIC", "TPX", "NONE", as the cfg names them)
    pending, reqIds, wireIds, emitted     JSON list of strings naming tool ids ("t1", ...),
                                          any order, no duplicates

  The variable decides which strings are model values: ``provider`` and the
  elements of the four id sets are read as model values, the other strings as
  TLA+ strings. (ITF-tagged values such as ``{"#set": [...]}`` are accepted too.)

A trace is accepted when its first state satisfies ``Init``, every next state is a
successor under ``Next`` (or repeats its predecessor: a stuttering step, which
``[][Next]_vars`` allows), every state satisfies the cfg's invariants
(:data:`tpx.oracle.model.INVARIANTS`) and every step ``SelectionStable``. Per state, the
checks run in this order: the invariants (``TypeOK`` first), then
``SelectionStable`` on the step into it, then ``Init`` / ``Next``, then the
``#action`` claim (``"Action"``); the first failure rejects the trace and names
the 1-based state index. The TLC path judges claims and stuttering the same way
(its generated module constrains each claimed step to the claimed action).
A file that is no trace at all (unreadable, not UTF-8, not JSON, a state that
does not assign exactly the 12 variables) is a :class:`~tpx.oracle.itf.TraceFormatError`.
"""

from __future__ import annotations

import itertools
import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs

from tpx.oracle.itf import TraceFormatError, decode_value, from_itf
from tpx.oracle.model import (
    INVARIANTS,
    TRANSPORT,
    VARS,
    Config,
    Init,
    Next,
    SelectionStable,
    State,
    TypeOK,
)
from tpx.oracle.model.state import Outcomes, Phases, Shapes
from tpx.oracle.tlc.cfg import StrPath
from tpx.oracle.tlc.traces import STUTTER_LABELS
from tpx.oracle.values import ModelValue

__all__ = [
    "DEFAULT_CFG",
    "DEFAULT_SPEC",
    "TraceReport",
    "check_trace",
    "check_trace_tlc",
    "check_traces_tlc",
    "coerce_state",
    "load_trace",
    "parse_json_lines",
    "validate_trace",
]

#: The spec shipped inside the package (the repo's spec/ copy), wherever tpx runs.
DEFAULT_SPEC = TRANSPORT.spec_path
DEFAULT_CFG = TRANSPORT.cfg_path

_BOOL_VARS = frozenset({"hasKey", "hasToken"})
_INT_VARS = frozenset({"turn"})
_STR_VARS = frozenset({"phase", "wireShape", "gotShape", "lastOutcome"})
_MV_VARS = frozenset({"provider"})
_SET_VARS = frozenset({"pending", "reqIds", "wireIds", "emitted"})

#: What each invariant demands, for the rejection message.
_INVARIANT_HINTS: dict[str, tuple[tuple[str, ...], str]] = {
    "ShapeInv": (("gotShape",), "the caller must only ever be handed Messages-shaped bodies"),
    "SelectionInv": (
        ("hasKey", "hasToken", "provider"),
        "provider must be Select(hasKey, hasToken): key -> ANTHROPIC, else token -> TPX, else NONE",
    ),
    "BoundedInv": (("turn",), "turn must not exceed MaxTurns"),
}


@attrs.frozen
class TraceReport:
    """The verdict on one recorded trace.

    ``steps`` names, per accepted state, the action(s) that explain it (``"Init"``
    first; ``"A|B"`` when several actions do; ``"stutter"`` for a repeated state);
    the TLC path leaves it empty (TLC's trace run does not name actions).
    ``failed_step`` is the 1-based index of the first rejected state,
    ``failed_property`` the check it fails (an invariant name, ``"SelectionStable"``,
    ``"Init"``, ``"Next"`` or ``"Action"`` for a wrong ``#action`` claim).
    """

    accepted: bool
    steps: list[str]
    failed_step: int | None = None
    failed_property: str | None = None
    message: str = ""

    def __str__(self) -> str:
        if self.accepted:
            return f"ACCEPTED ({self.message})"
        return f"REJECTED at step {self.failed_step} ({self.failed_property}): {self.message}"


# --------------------------------------------------------------------------- values


def _show(v: object) -> str:
    from tpx.oracle.tlc.values import format_value

    try:
        return format_value(v)
    except (TypeError, ValueError):
        # not expressible in TLA+ (e.g. an id that is no identifier): show it readably
        if isinstance(v, frozenset):
            return "{" + ", ".join(sorted(_show(x) for x in v)) + "}"
        if isinstance(v, ModelValue):
            return json.dumps(v.name)
        return repr(v)


def validate_trace(states: Sequence[Mapping[str, Any]]) -> None:
    """Raise :class:`~tpx.oracle.itf.TraceFormatError` unless *states* is a non-empty trace whose
    every state assigns exactly the spec's variables (keys starting with ``#`` aside)."""
    if not states:
        raise TraceFormatError("the trace has no states")
    for i, raw in enumerate(states, 1):
        names = {k for k in raw if not k.startswith("#")}
        if names != set(VARS):
            raise TraceFormatError(
                f"state {i}: expected the variables {list(VARS)}; missing "
                f"{sorted(set(VARS) - names)}, unknown {sorted(names - set(VARS))}"
            )


def coerce_state(raw: Mapping[str, Any], config: Config, index: int) -> tuple[State, str | None]:
    """The :class:`State` a recorded state denotes, and a type problem (or ``None``).

    Strings stand for model values where the variable holds model values (see the
    module docstring); lists and tuples stand for sets. Raises
    :class:`~tpx.oracle.itf.TraceFormatError` if variables are missing or unknown.
    """
    try:
        validate_trace([raw])
    except TraceFormatError as exc:
        raise TraceFormatError(f"state {index}: {str(exc).split(': ', 1)[1]}") from None
    values: dict[str, Any] = {}
    problem: str | None = None

    def bad(name: str, why: str) -> None:
        nonlocal problem
        if problem is None:
            problem = f"{name} = {_raw(raw[name])} {why}"

    for name in VARS:
        v = raw[name]
        if name in _MV_VARS:
            if isinstance(v, str):
                v = _model_value(v)
            elif not _is_model_value(v):
                bad(name, "is not a provider name")
                v = config.NONE
        elif name in _SET_VARS:
            if isinstance(v, list | tuple | set | frozenset):
                items = [_model_value(x) if isinstance(x, str) else x for x in v]
                if not all(_is_model_value(x) for x in items):
                    bad(name, "is not a set of tool ids")
                    items = []
                elif len(set(items)) != len(items):
                    dups = sorted({x.name for x in items if items.count(x) > 1})
                    bad(name, f"lists {', '.join(dups)} more than once (a set of ids)")
                v = frozenset(items)
            else:
                bad(name, "is not a set of tool ids")
                v = frozenset()
        elif name in _STR_VARS:
            if not isinstance(v, str):
                bad(name, "is not a string")
                v = ""
        elif name in _INT_VARS:
            if isinstance(v, bool) or not isinstance(v, int):
                bad(name, "is not an integer")
                v = -1
        elif not isinstance(v, bool):
            bad(name, "is not a boolean")
            v = False
        values[name] = v
    return State(**values), problem


def _raw(v: object) -> str:
    """A recorded value as the log wrote it (JSON), else as TLA+."""
    try:
        return json.dumps(v)
    except TypeError:
        return _show(v)


def _model_value(name: str) -> ModelValue:
    return ModelValue(name)


def _is_model_value(v: object) -> bool:
    return isinstance(v, ModelValue)


def _pairing(s: State) -> str:
    """Which conjunct of PairingInv *s* breaks, with the values involved."""
    if s.phase == "req":
        return (
            "on the way out the wire must carry exactly the caller's tool_result ids, which "
            "must answer every pending tool_use (wireIds = reqIds = pending), but "
            f"wireIds = {_show(s.wireIds)}, reqIds = {_show(s.reqIds)}, "
            f"pending = {_show(s.pending)}"
        )
    if s.phase == "resp":
        return (
            "on the way back the wire must carry exactly the ids the provider emitted "
            f"(wireIds = emitted), but wireIds = {_show(s.wireIds)}, "
            f"emitted = {_show(s.emitted)}"
        )
    return (
        "after a delivered response the caller's pending tool_use ids must be exactly the ids "
        f"the provider emitted (pending = emitted), but pending = {_show(s.pending)}, "
        f"emitted = {_show(s.emitted)}"
    )


def _type_errors(s: State, c: Config) -> str:
    """Which variables of *s* are outside their TypeOK domain."""
    ids = _show(c.ToolIds)
    domains: list[tuple[str, bool, str]] = [
        ("provider", s.provider in c.Providers, _show(c.Providers)),
        ("turn", 0 <= s.turn <= c.MaxTurns, f"0..{c.MaxTurns}"),
        ("phase", s.phase in Phases, _show(Phases)),
        ("pending", s.pending <= c.ToolIds, f"SUBSET {ids}"),
        ("reqIds", s.reqIds <= c.ToolIds, f"SUBSET {ids}"),
        ("wireShape", s.wireShape in Shapes, _show(Shapes)),
        ("wireIds", s.wireIds <= c.ToolIds, f"SUBSET {ids}"),
        ("emitted", s.emitted <= c.ToolIds, f"SUBSET {ids}"),
        ("gotShape", s.gotShape in Shapes, _show(Shapes)),
        ("lastOutcome", s.lastOutcome in Outcomes, _show(Outcomes)),
    ]
    return "; ".join(
        f"{n} = {_show(getattr(s, n))} is not in {dom}" for n, ok, dom in domains if not ok
    )


def _diff(observed: State, expected: State) -> list[str]:
    return [
        f"{n}: observed {_show(getattr(observed, n))}, expected {_show(getattr(expected, n))}"
        for n in VARS
        if getattr(observed, n) != getattr(expected, n)
    ]


def _closest(observed: State, candidates: Sequence[tuple[str, State]]) -> tuple[str, list[str]]:
    best = min(candidates, key=lambda c: (len(_diff(observed, c[1])), c[0]))
    return best[0], _diff(observed, best[1])


# --------------------------------------------------------------------------- mirror


def check_trace(
    states: Sequence[Mapping[str, Any]],
    config: Config,
    *,
    actions: Sequence[str | None] | None = None,
    invariants: Sequence[str] | None = None,
    properties: Sequence[str] | None = None,
) -> TraceReport:
    """Check a recorded trace against the spec with the Python mirror.

    *invariants* / *properties* name the checks to run (a cfg's INVARIANT and PROPERTY
    lists; default: all the spec's, i.e. :data:`tpx.oracle.model.INVARIANTS` and
    ``SelectionStable``); a trace that breaks only an unnamed one is accepted, as TLC
    would accept it.

    *states* are mappings of the 12 variables (a :class:`~tpx.oracle.values.Record` from
    ITF, or a parsed JSON line). *actions*, if given, holds the implementation's
    claimed action per state (``None``: no claim): the first state's claim must be
    ``"Init"``, a later one must name one of the actions that explain the step (or be
    ``"stutter"`` / ``"Stuttering"`` when the state repeats its predecessor); a wrong
    claim rejects the state as ``"Action"``, after the Init / Next check.
    Raises :class:`~tpx.oracle.itf.TraceFormatError` for an empty trace or a state that
    does not assign exactly the spec's variables.
    """
    validate_trace(states)
    if actions is not None and len(actions) != len(states):
        raise ValueError(f"{len(actions)} action claims for {len(states)} states")
    steps: list[str] = []
    prev: State | None = None
    checked = [(n, f) for n, f in INVARIANTS if invariants is None or n in invariants]
    stable = properties is None or "SelectionStable" in properties

    def reject(i: int, prop: str, message: str) -> TraceReport:
        return TraceReport(False, steps, i, prop, message)

    for i, raw in enumerate(states, 1):
        state, problem = coerce_state(raw, config, i)
        if problem is not None:
            return reject(i, "TypeOK", f"state {i}: {problem}")
        for name, inv in checked:
            if not inv(state, config):
                if name == "TypeOK":
                    return reject(
                        i, name, f"state {i} violates TypeOK: {_type_errors(state, config)}"
                    )
                if name == "PairingInv":
                    return reject(i, name, f"state {i} violates PairingInv: {_pairing(state)}")
                involved, why = _INVARIANT_HINTS.get(name, ((), ""))
                shown = ", ".join(f"{n} = {_show(getattr(state, n))}" for n in involved)
                return reject(i, name, f"state {i} violates {name} ({shown}): {why}")
        if prev is None:
            inits = [("Init", s) for s in Init(config)]
            if state not in {s for _, s in inits}:
                _, diff = _closest(state, inits)
                return reject(
                    i,
                    "Init",
                    f"state 1 is not an initial state; the closest initial state differs in "
                    f"{'; '.join(diff)}",
                )
            claim = actions[0] if actions is not None else None
            if claim is not None and claim != "Init":
                return reject(
                    1,
                    "Action",
                    f"state 1 is recorded as {claim} but only Init explains a first state",
                )
            steps.append("Init")
        else:
            if stable and not SelectionStable(prev, state):
                changed = [
                    f"{n}: {_show(getattr(prev, n))} -> {_show(getattr(state, n))}"
                    for n in ("hasKey", "hasToken", "provider")
                    if getattr(prev, n) != getattr(state, n)
                ]
                return reject(
                    i,
                    "SelectionStable",
                    f"step {i - 1} -> {i} changes the boot selection ({'; '.join(changed)}); "
                    "credentials and provider must stay fixed for the boot",
                )
            successors = list(Next(prev, config))
            explaining = sorted({a for a, t in successors if t == state})
            if not explaining and state == prev:
                explaining = ["stutter"]
            if not explaining:
                if not successors:
                    return reject(
                        i,
                        "Next",
                        f"state {i - 1} has no successor under Next, yet the trace goes on",
                    )
                action, diff = _closest(state, successors)
                enabled = ", ".join(sorted({a for a, _ in successors}))
                return reject(
                    i,
                    "Next",
                    f"state {i} is no successor of state {i - 1} under Next (enabled: {enabled}); "
                    f"the closest legal successor ({action}) differs in {'; '.join(diff)}",
                )
            claim = actions[i - 1] if actions is not None else None
            if claim in STUTTER_LABELS and state == prev:
                pass  # a stuttering step claimed as one
            elif claim is not None and claim not in explaining:
                return reject(
                    i,
                    "Action",
                    f"step {i - 1} -> {i} is recorded as {claim} but only "
                    f"{' or '.join(explaining)} explains it",
                )
            steps.append("|".join(explaining))
        prev = state
    return TraceReport(True, steps, None, None, f"{len(states)} states")


# --------------------------------------------------------------------------- TLC


def check_traces_tlc(
    traces: Sequence[Sequence[Mapping[str, Any]]],
    config: Config | None = None,
    *,
    actions: Sequence[Sequence[str | None] | None] | None = None,
    spec: StrPath = DEFAULT_SPEC,
    cfg: StrPath = DEFAULT_CFG,
    timeout: float | None = None,
) -> list[TraceReport]:
    """Check many traces with TLC in one run (:func:`tpx.oracle.tlc.check_traces`).

    TLC decides whether each trace is a behaviour of ``Spec``: ``Init``, then steps of
    ``[Next]_vars`` (a repeated state is a stuttering step, as in :func:`check_trace`),
    every state satisfying the cfg's INVARIANT(S) and every step its PROPERTY(IES), judged
    in the mirror's order, so both paths name the same failure.
    *actions* holds each trace's claimed actions (as in :func:`check_trace`; ``None``
    for a trace without claims); TLC checks them too, each labelled step against its
    action. Its rejections name ``"Init"`` (state 1), ``"Next"`` or ``"Action"`` (a
    reachable state that its claimed action does not produce).
    States that violate ``TypeOK`` (checked here, before any TLA+ is generated: TLC
    cannot compare, say, a string with an integer, an id list naming an id twice is
    no set, and an id such as ``"?x"`` is no TLA+ model value at all) are cut off, and
    the trace is reported REJECTED as ``TypeOK`` at that state if TLC accepts the
    prefix before it. TLC failing to run raises a :class:`~tpx.errors.TLCError`; a
    trace that is empty or does not assign exactly the spec's variables raises
    :class:`~tpx.oracle.itf.TraceFormatError` before TLC runs (see :func:`validate_trace`).
    """
    from tpx.oracle.tlc import check_traces, load_cfg

    model = load_cfg(cfg)
    config = Config.from_constants(dict(model.constants)) if config is None else config
    if actions is not None and len(actions) != len(traces):
        raise ValueError(f"{len(actions)} action lists for {len(traces)} traces")
    claims: list[list[str | None]] = []
    for t, trace in enumerate(traces):
        validate_trace(trace)
        mine = actions[t] if actions is not None else None
        if mine is not None and len(mine) != len(trace):
            raise ValueError(f"{len(mine)} action claims for {len(trace)} states")
        claims.append(list(mine) if mine is not None else [None] * len(trace))
    jobs: list[tuple[str | None, int | None]] = []
    payload: list[list[Any]] = []
    for trace in traces:
        sent: list[Any] = []
        problem: str | None = None
        bad_at: int | None = None
        for i, raw in enumerate(trace, 1):
            state, problem = coerce_state(raw, config, i)
            if problem is not None:
                problem = f"state {i}: {problem}"
            elif not TypeOK(state, config):
                problem = f"state {i} violates TypeOK: {_type_errors(state, config)}"
            if problem is not None:
                bad_at = i
                break
            sent.append(state.as_record())
        jobs.append((problem, bad_at))
        payload.append(sent)
    sendable = [(p, c[: len(p)]) for p, c in zip(payload, claims, strict=True) if p]
    verdicts = iter(
        check_traces(
            spec,
            cfg,
            [p for p, _ in sendable],
            actions=[c for _, c in sendable],
            stuttering=True,
            timeout=timeout,
            invariants=model.invariants,
            properties=model.properties,
        )
        if sendable
        else []
    )
    reports: list[TraceReport] = []
    for trace, (problem, bad_at), sent, claim in zip(traces, jobs, payload, claims, strict=True):
        if not sent:
            reports.append(TraceReport(False, [], 1, "TypeOK", str(problem)))
            continue
        verdict = next(verdicts)
        if not verdict.accepted:
            assert verdict.failed_step is not None
            at = verdict.failed_step + 1
            if verdict.failed_property in model.invariants:
                prop = verdict.failed_property
                what = f"state {at} violates {prop}"
            elif verdict.failed_property is not None:
                prop = verdict.failed_property
                what = f"step {at - 1} -> {at} violates {prop}"
            elif verdict.mislabelled:
                prop = "Action"
                what = (
                    f"state 1 is recorded as {claim[0]} but only Init explains a first state"
                    if at == 1
                    else f"step {at - 1} -> {at} is recorded as {claim[at - 1]}, "
                    "but that action does not take it"
                )
            elif at == 1:
                prop, what = "Init", "state 1 is not an initial state"
            else:
                prop = "Next"
                what = f"no Next step of the spec leads from state {at - 1} to state {at}"
            reports.append(TraceReport(False, [], at, prop, f"TLC: {what}"))
        elif problem is not None:
            reports.append(TraceReport(False, [], bad_at, "TypeOK", problem))
        else:
            n = len(trace)
            repeats = sum(1 for a, b in itertools.pairwise(sent) if a == b)
            note = f", {repeats} repeated" if repeats else ""
            reports.append(TraceReport(True, [], None, None, f"TLC: {n} states{note}"))
    return reports


def check_trace_tlc(
    states: Sequence[Mapping[str, Any]],
    config: Config | None = None,
    *,
    actions: Sequence[str | None] | None = None,
    spec: StrPath = DEFAULT_SPEC,
    cfg: StrPath = DEFAULT_CFG,
    timeout: float | None = None,
) -> TraceReport:
    """One trace through TLC (see :func:`check_traces_tlc`)."""
    return check_traces_tlc(
        [states], config, actions=[actions], spec=spec, cfg=cfg, timeout=timeout
    )[0]


# --------------------------------------------------------------------------- files


#: How deep a JSON value in a trace file may nest. The spec's values nest three levels
#: (an ITF set of model values); deeper input is refused before Python recurses into it.
MAX_NESTING = 100


def _nesting(obj: object) -> int:
    """How deep *obj* (parsed JSON) nests, counted without recursion; stops past the limit."""
    deepest = 0
    todo: list[tuple[object, int]] = [(obj, 1)]
    while todo:
        item, depth = todo.pop()
        deepest = max(deepest, depth)
        if deepest > MAX_NESTING:
            break
        if isinstance(item, dict):
            todo.extend((v, depth + 1) for v in item.values())
        elif isinstance(item, list):
            todo.extend((v, depth + 1) for v in item)
    return deepest


def _loads(text: str, where: str) -> Any:
    """Parse JSON; refuse (as :class:`~tpx.oracle.itf.TraceFormatError`) anything nested deeper than
    :data:`MAX_NESTING`. Raises ``json.JSONDecodeError`` for text that is not JSON."""
    try:
        obj = json.loads(text)
    except RecursionError:
        obj = None
        deep = True
    else:
        deep = _nesting(obj) > MAX_NESTING
    if deep:
        raise TraceFormatError(
            f"{where}: JSON nested deeper than {MAX_NESTING} levels; no trace value is"
        )
    return obj


def parse_json_lines(text: str, *, source: str = "<trace>") -> list[dict[str, Any]]:
    """The states of a JSON-lines trace (see the module docstring), values as written.

    ITF-tagged values (``{"#set": ...}`` etc.) are decoded; everything else is kept for
    :func:`coerce_state`. Errors name the line.
    """
    states: list[dict[str, Any]] = []
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            obj = _loads(line, f"{source}, line {lineno}")
        except json.JSONDecodeError as exc:
            raise TraceFormatError(f"{source}, line {lineno}: not JSON: {exc.msg}") from exc
        if not isinstance(obj, dict):
            raise TraceFormatError(f"{source}, line {lineno}: a state is a JSON object")
        state: dict[str, Any] = {}
        for k, v in obj.items():
            if k == "#action":
                if not isinstance(v, str):
                    raise TraceFormatError(f"{source}, line {lineno}: #action must be a string")
                state[k] = v
            elif not k.startswith("#"):
                try:
                    state[k] = decode_value(v, where=k) if isinstance(v, dict) else v
                except TraceFormatError as exc:
                    raise TraceFormatError(f"{source}, line {lineno}: {exc}") from exc
                if isinstance(state[k], float) or state[k] is None:
                    raise TraceFormatError(
                        f"{source}, line {lineno}: {k} = {v!r} is not a trace value"
                    )
        states.append(state)
    if not states:
        raise TraceFormatError(f"{source}: no states")
    return states


def load_trace(path: str | os.PathLike[str]) -> tuple[list[Mapping[str, Any]], list[str | None]]:
    """The states of a trace file (ITF or JSON lines) and the recorded action per state.

    Every way the file cannot be read (missing, a directory, not UTF-8, not JSON, nested
    absurdly deep, not a trace) is a :class:`~tpx.oracle.itf.TraceFormatError` naming the file.
    """
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise TraceFormatError(
            f"{p}: not UTF-8 text (byte {exc.start}: {exc.reason}); trace files are UTF-8 JSON"
        ) from None
    except OSError as exc:
        raise TraceFormatError(f"cannot read trace file {p}: {exc.strerror or exc}") from None
    try:
        whole = _loads(text, str(p))
    except json.JSONDecodeError:
        whole = None
    if isinstance(whole, dict) and "states" in whole:
        try:
            steps = from_itf(whole)
        except TraceFormatError as exc:
            raise TraceFormatError(f"{p}: {exc}") from exc
        return [s for _, s in steps], [a for a, _ in steps]
    states = parse_json_lines(text, source=str(p))
    actions = [s.pop("#action", None) for s in states]
    return list(states), actions
