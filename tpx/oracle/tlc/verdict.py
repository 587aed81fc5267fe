"""Read a complete TLC ``-tool`` output and exit code as a :class:`CheckResult`.

Message codes confirmed and used:

====  =====================================================================
2262  version banner
2187  BFS start (fp, seed, workers); 2188 simulation start
2220  SANY start; 2219 SANY end; 3002 "Parsing or semantic analysis failed."
2185  starting; 2189 computing initial states; 2269 "Computed N initial states"
2190  "Finished computing initial states: N distinct states generated"
2200  BFS progress "Progress(D) at ...: G states generated ..., N distinct ..."
2209  simulation progress (same text, distinct/queue printed as -1)
2193  "Model checking completed. No error has been found."
2199  final "G states generated, N distinct states found, Q states left on queue."
2194  "The depth of the complete state graph search is D."
2268  outdegree; 2186 "Finished in ..." (TLC ran to its end)
2107  "Invariant X is violated by the initial state:" + the state in the body
2110  "Invariant X is violated."
2112  "Action property X is violated."
2114  "Deadlock reached."
2116  "Temporal properties were violated." (no property name)
2121  "The behavior up to this point is:"; 2264 "... constitutes a counter-example:"
2217  a trace state "N: <Name line L, col C to line L2, col C2 of module M>" or
      "1: <Initial predicate>", then ``/\\ var = value`` lines
2218  "N: Stuttering"; 2122 "N: Back to state: <...>" (lasso)
2192  / 2267 temporal checking start / end
1000  "TLC threw an unexpected exception" (spec evaluation error, or wraps 5006)
5006  cfg syntax error "TLC found an error in the configuration file at line N"
2229  cfg names an undefined operator (e.g. ``CHECK_DEADLOCK`` after PROPERTY)
2103  evaluation error location stack
1102  unrecognized command-line option
====  =====================================================================

Exit codes confirmed: 0 no error; 11 deadlock; 12 invariant (safety) violation,
also when the initial state violates it (2107); 13 action property (e.g.
``[][CredsUnchanged]_vars``) and temporal property violations; 75 evaluation
error while checking (1000 + trace); 150 spec parse/semantic error (3002);
151 cfg semantic error (2229); 255 uncaught exception, including the cfg syntax
error (1000 wrapping 5006) and a reused ``-metadir`` timestamp directory; 1 bad
command-line option (1102).

"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Literal, NamedTuple

import attrs

from tpx.errors import (
    TLCConfigError,
    TLCCrashError,
)
from tpx.oracle.tlc.messages import ToolMessage, _int, parse_tool_output
from tpx.oracle.tlc.values import parse_state
from tpx.oracle.values import Record

__all__ = ["CheckResult", "TraceStep", "Verdict", "interpret_output"]


VerdictKind = Literal["ok", "invariant", "action_property", "temporal", "deadlock", "error"]


@attrs.frozen
class Verdict:
    kind: VerdictKind
    property: str | None = None
    """The violated invariant / action property (TLC names no temporal property)."""
    message: str | None = None
    """TLC's own text for the verdict (the error text for ``error``)."""

    def __str__(self) -> str:
        if self.kind == "invariant":
            return f"invariant {self.property} violated"
        if self.kind == "action_property":
            return f"action property {self.property} violated"
        if self.kind == "temporal":
            return "temporal properties violated"
        if self.kind == "error":
            return f"error: {self.message}"
        return self.kind


class TraceStep(NamedTuple):
    """One step of a behaviour: ``(action, state)``, unpackable like a pair."""

    action: str
    """The spec's action name ("Init" for the initial state, "Stuttering" for 2218)."""
    state: Record


@attrs.frozen
class CheckResult:
    verdict: Verdict
    initial: int | None
    generated: int | None
    distinct: int | None
    depth: int | None
    duration_s: float
    exit_code: int
    trace: tuple[TraceStep, ...] = ()
    back_to: int | None = None
    """For a lasso counterexample (2122): the 1-based trace index it loops back to."""
    output: str = attrs.field(default="", repr=False)

    @property
    def ok(self) -> bool:
        return self.verdict.kind == "ok"


_FINAL = re.compile(
    r"([\d,]+) states generated, ([\d,]+) distinct states found, (-?[\d,]+) states left"
)
_LOCATION = re.compile(
    r"<(\w+) line (\d+), col (\d+) to line (\d+), col (\d+) of module (\w+)>", re.DOTALL
)
_DEF = re.compile(r"^([A-Za-z_]\w*)\s*(?:\([^)]*\))?\s*==", re.MULTILINE)


def _definitions(source: str) -> list[tuple[str, int, int]]:
    """Top-level definitions of a module as (name, first line, last line)."""
    lines = source.splitlines()
    starts = [(m.group(1), source.count("\n", 0, m.start()) + 1) for m in _DEF.finditer(source)]
    # any other column-1 text (a new section, VARIABLES, the module end) also ends a definition
    boundaries = sorted(
        {i + 1 for i, ln in enumerate(lines) if ln[:1].strip() and not ln.startswith("\\*")}
        | {s for _, s in starts}
    )
    out = []
    for name, start in starts:
        nxt = next((b for b in boundaries if b > start), len(lines) + 1)
        out.append((name, start, nxt - 1))
    return out


def _action_name(label: str, sources: Mapping[str, str]) -> str:
    """Map ``<X line L, col C to line L2, col C2 of module M>`` to the operator defining it."""
    if "Initial predicate" in label:
        return "Init"
    m = _LOCATION.search(label)
    if m is None:
        return label.strip().strip("<>")
    printed, l1, l2, module = m.group(1), int(m.group(2)), int(m.group(4)), m.group(6)
    source = sources.get(module)
    if source is not None:
        best: tuple[str, int] | None = None
        for name, start, end in _definitions(source):
            if start <= l1 and l2 <= end and (best is None or start > best[1]):
                best = (name, start)
        if best is not None:
            return best[0]
    return printed


def _trace_from(
    messages: Sequence[ToolMessage], sources: Mapping[str, str]
) -> tuple[tuple[TraceStep, ...], int | None]:
    steps: list[TraceStep] = []
    back_to: int | None = None
    for msg in messages:
        if msg.code == 2217:
            head, _, body = msg.text.partition("\n")
            label = head.split(":", 1)[1] if ":" in head else head
            # a label may wrap across lines; the state starts at the first var line
            while not _LOCATION.search(label) and "Initial predicate" not in label and body:
                extra, _, body = body.partition("\n")
                label += "\n" + extra
            steps.append(TraceStep(_action_name(label, sources), parse_state(body)))
        elif msg.code == 2218 and steps:
            steps.append(TraceStep("Stuttering", steps[-1].state))
        elif msg.code == 2122:
            m = re.match(r"\s*(\d+): Back to state", msg.text)
            if m is not None:
                back_to = int(m.group(1))
                idx = back_to - 1
                state = steps[idx].state if 0 <= idx < len(steps) else Record()
                steps.append(TraceStep(_action_name(msg.text, sources), state))
    return tuple(steps), back_to


def _sany_text(plain: Sequence[str]) -> str:
    keep = [
        ln
        for ln in plain
        if ln.strip() and not ln.startswith(("Parsing file", "Semantic processing of module"))
    ]
    return "\n".join(keep).strip()


#: Severity-1 messages that are not errors: the headers of a counterexample.
_NOT_ERRORS = frozenset({2121, 2264})


def _error_texts(messages: Sequence[ToolMessage]) -> list[str]:
    """The text of every error message (severity 1, or 2: a TLC bug), outermost first; a
    nested message's text is already part of its parent's."""
    out: list[str] = []
    for msg in messages:
        if msg.severity in (1, 2) and msg.code not in _NOT_ERRORS:
            if msg.text.strip():
                out.append(msg.text.strip())
        else:
            out.extend(_error_texts(msg.children))
    return out


def _join(texts: Sequence[str]) -> str:
    """*texts* one per line, leaving out any already contained in an earlier one."""
    kept: list[str] = []
    for text in texts:
        if not any(text in k for k in kept):
            kept.append(text)
    return "\n".join(kept)


def interpret_output(
    output: str,
    exit_code: int,
    *,
    sources: Mapping[str, str] = {},
    duration_s: float = 0.0,
    stderr: str = "",
) -> CheckResult:
    """Turn a complete ``-tool`` output and exit code into a :class:`CheckResult`.

    Raises :class:`TLCConfigError` when TLC rejected the spec or cfg and
    :class:`TLCCrashError` when it ended abnormally; a violation is a verdict.
    *sources* maps module names to their text (to name actions).
    """
    messages, plain = parse_tool_output(output)
    every = [m for top in messages for m in top.walk()]
    codes = {m.code for m in every}

    def text_of(*wanted: int) -> str:
        return "\n".join(m.text for m in messages if m.code in wanted)

    if exit_code == 150 or 3002 in codes:
        detail = _sany_text(plain) or text_of(3002)
        raise TLCConfigError(f"TLC could not parse the spec (exit {exit_code}):\n{detail}")
    reported = _error_texts(messages)
    if 5006 in codes or 2229 in codes or 1102 in codes or exit_code == 151:
        inner = [m.text for m in every if m.code in (5006, 2229, 1102)]
        detail = _join([*reported, *inner]) or _sany_text(plain)
        raise TLCConfigError(f"TLC rejected the model configuration (exit {exit_code}):\n{detail}")

    initial = generated = distinct = depth = None
    for msg in messages:
        if msg.code == 2190:
            m = re.search(r"([\d,]+) distinct states? generated", msg.text)
            initial = _int(m.group(1)) if m else None
        elif msg.code == 2199:
            m = _FINAL.search(msg.text)
            if m:
                generated, distinct = _int(m.group(1)), _int(m.group(2))
        elif msg.code == 2194:
            m = re.search(r"is (\d+)", msg.text)
            depth = int(m.group(1)) if m else None
    trace, back_to = _trace_from(messages, sources)

    verdict: Verdict | None = None
    for msg in messages:
        first = msg.text.split("\n", 1)[0].strip()
        if msg.code in (2107, 2110) or re.match(r"Invariant \w+ is violated", first):
            name = re.match(r"Invariant (\w+) is violated", first)
            verdict = Verdict("invariant", name.group(1) if name else None, first)
            if msg.code == 2107 and not trace:
                trace = (TraceStep("Init", parse_state(msg.text.split("\n", 1)[1])),)
            break
        if re.match(r"Action property \w+ is violated", first):
            name = re.match(r"Action property (\w+) is violated", first)
            assert name is not None
            verdict = Verdict("action_property", name.group(1), first)
            break
        if msg.code == 2114:
            verdict = Verdict("deadlock", None, first)
            break
        if msg.code == 2116:
            verdict = Verdict("temporal", None, first)
            break
    finished = 2186 in codes
    if verdict is None:
        errors = [m for m in messages if m.severity == 1 and m.code not in (2121, 2264)]
        if exit_code == 0 and not errors and (2193 in codes or finished):
            verdict = Verdict("ok")
        elif errors and finished and exit_code != 255:
            verdict = Verdict("error", None, "\n".join(m.text for m in errors))
    expected = {"ok": (0,), "invariant": (12,), "action_property": (13,), "temporal": (13,)}
    if (
        verdict is None
        or (verdict.kind in expected and exit_code not in expected[verdict.kind])
        or (verdict.kind == "deadlock" and exit_code != 11)
    ):
        tail = "\n".join((plain + [m.text for m in messages])[-8:])
        said = _join(reported)
        raise TLCCrashError(
            f"TLC ended abnormally (exit code {exit_code}).\n"
            + (f"TLC reported:\n{said[-4000:]}\n" if said else "")
            + f"stderr: {stderr.strip()[-2000:] or '(empty)'}\noutput tail:\n{tail[-2000:]}"
        )
    return CheckResult(
        verdict=verdict,
        initial=initial,
        generated=generated,
        distinct=distinct,
        depth=depth,
        duration_s=duration_s,
        exit_code=exit_code,
        trace=trace,
        back_to=back_to,
        output=output,
    )
