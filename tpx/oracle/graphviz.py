"""Coverage pictures: the spec's state graph with the covered part highlighted.

:func:`to_dot` writes the reachable graph (a :class:`tpx.oracle.model.Graph`) as graphviz
``dot`` source: covered states filled green and covered steps drawn green and
bold, everything else grey (initial states get a double border). Node labels are
compact: ``provider credentials turn phase lastOutcome`` and the pending ids, e.g.
``TPX -T 1 idle ok`` / ``p={t1}``. :func:`render_coverage` pipes the source into
graphviz's ``dot`` binary, which writes exactly the output file; :func:`coverage_summary`
counts what is covered.

Coverage comes from recorded traces (:func:`covered_by`, :func:`load_covered`):
every state of a trace is a covered state, every pair of consecutive states a
covered step (a repeated state covers the self-loop, e.g. ``Halted``). Steps are
matched by their two states; a step given as ``(from, to, action)`` matches only
that action's edge. Trace files are checked with the mirror first: a trace that
is no behaviour of the spec covers nothing (:func:`read_covered` lists it).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterable, Mapping, Sequence
from itertools import pairwise
from pathlib import Path
from typing import Any

import attrs

from tpx.errors import TpxError
from tpx.oracle.model import Config
from tpx.oracle.model.explore import Graph
from tpx.oracle.values import ModelValue, Record

__all__ = [
    "CoveredTraces",
    "GraphvizError",
    "GraphvizNotFoundError",
    "IllegalTraceError",
    "coverage_summary",
    "covered_by",
    "load_covered",
    "read_covered",
    "render_coverage",
    "state_label",
    "to_dot",
]

COVERED_FILL = "#a5d6a7"
COVERED_LINE = "#2e7d32"
UNCOVERED_FILL = "#eeeeee"
UNCOVERED_LINE = "#b0b0b0"

Edge = tuple[Record, Record] | tuple[Record, Record, str]


class GraphvizError(TpxError):
    """graphviz's ``dot`` failed to render a picture."""


class GraphvizNotFoundError(GraphvizError):
    """graphviz's ``dot`` binary is not installed."""


def _ids(v: Any) -> str:
    names = sorted(x.name if isinstance(x, ModelValue) else str(x) for x in v)
    return "{" + ",".join(names) + "}"


def state_label(s: Mapping[str, Any]) -> str:
    """A compact label: provider, credentials (``K``: key, ``T``: token), turn, phase,
    last outcome; then the pending ids (and the wire's ids mid-exchange)."""
    creds = ("K" if s["hasKey"] else "-") + ("T" if s["hasToken"] else "-")
    head = f"{s['provider']} {creds} {s['turn']} {s['phase']} {s['lastOutcome']}"
    extra = f"p={_ids(s['pending'])}"
    if s["phase"] != "idle":
        extra += f" w={_ids(s['wireIds'])}"
    return f"{head}\\n{extra}"


def _edge_covered(edge: tuple[Record, Record, str], pairs: set[Any], triples: set[Any]) -> bool:
    return edge in triples or edge[:2] in pairs


def _split(covered_edges: Iterable[Edge]) -> tuple[set[Any], set[Any]]:
    pairs: set[Any] = set()
    triples: set[Any] = set()
    for e in covered_edges:
        (triples if len(e) == 3 else pairs).add(tuple(e))
    return pairs, triples


def _key(r: Record) -> str:
    return repr(sorted((k, repr(v)) for k, v in r.items()))


def to_dot(graph: Graph, covered_states: Iterable[Record], covered_edges: Iterable[Edge]) -> str:
    """graphviz ``dot`` source for *graph*, covered states and steps highlighted."""
    states = set(covered_states)
    pairs, triples = _split(covered_edges)
    ids = {s: f"s{i}" for i, s in enumerate(sorted(graph.states, key=_key))}
    lines = [
        "digraph coverage {",
        "  rankdir=TB;",
        '  node [shape=box, style="rounded,filled", fontname="Helvetica", fontsize=9];',
        '  edge [fontname="Helvetica", fontsize=8];',
    ]
    for s in sorted(graph.states, key=_key):
        fill, line = (
            (COVERED_FILL, COVERED_LINE) if s in states else (UNCOVERED_FILL, UNCOVERED_LINE)
        )
        periph = ", peripheries=2" if s in graph.initial else ""
        lines.append(
            f'  {ids[s]} [label="{state_label(s)}", fillcolor="{fill}", color="{line}"{periph}];'
        )
    for a, b, action in sorted(graph.edges, key=lambda e: (ids[e[0]], ids[e[1]], e[2])):
        if _edge_covered((a, b, action), pairs, triples):
            style = f'color="{COVERED_LINE}", fontcolor="{COVERED_LINE}", penwidth=2'
        else:
            style = f'color="{UNCOVERED_LINE}", fontcolor="{UNCOVERED_LINE}"'
        lines.append(f'  {ids[a]} -> {ids[b]} [label="{action}", {style}];')
    lines.append("}")
    return "\n".join(lines) + "\n"


def coverage_summary(
    graph: Graph, covered_states: Iterable[Record], covered_edges: Iterable[Edge]
) -> str:
    """``"states 109/361 (30.2%), edges 157/574 (27.4%)"``: graph elements covered."""
    states = set(covered_states)
    pairs, triples = _split(covered_edges)
    n_states = sum(1 for s in graph.states if s in states)
    n_edges = sum(1 for e in graph.edges if _edge_covered(e, pairs, triples))

    def pct(n: int, total: int) -> str:
        return f"{n}/{total} ({100.0 * n / total if total else 100.0:.1f}%)"

    return f"states {pct(n_states, len(graph.states))}, edges {pct(n_edges, len(graph.edges))}"


def render_coverage(
    graph: Graph,
    covered_states: Iterable[Record],
    covered_edges: Iterable[Edge],
    out: str | os.PathLike[str],
    fmt: str = "svg",
    *,
    dot: str | None = None,
) -> Path:
    """Write the coverage picture to *out* in *fmt* (any ``dot -T`` format; ``"dot"``
    writes only the source). Only *out* is written (the source goes to ``dot`` on stdin).

    Raises :class:`GraphvizNotFoundError` when the ``dot`` binary is missing.
    """
    out = Path(out)
    source = to_dot(graph, covered_states, covered_edges)
    if fmt == "dot":
        out.write_text(source, encoding="utf-8")
        return out
    exe = dot or shutil.which("dot")
    if exe is None or not Path(exe).exists():
        raise GraphvizNotFoundError(
            "graphviz's `dot` binary is not on PATH; install graphviz "
            "(`sudo apt-get install graphviz`, or `make graphviz` as root) to draw coverage "
            "pictures, or write the dot source with --format dot"
        )
    try:
        proc = subprocess.run(
            [exe, f"-T{fmt}", "-o", str(out)],
            input=source,
            capture_output=True,
            text=True,
            check=False,
        )
    except OSError as exc:
        raise GraphvizError(f"cannot run {exe}: {exc}") from exc
    if proc.returncode != 0:
        raise GraphvizError(f"dot -T{fmt} failed ({proc.returncode}): {proc.stderr.strip()}")
    return out


def covered_by(traces: Iterable[Sequence[Record]]) -> tuple[set[Record], set[Edge]]:
    """The states and steps (as ``(from, to)`` pairs) the traces visit."""
    states: set[Record] = set()
    edges: set[Edge] = set()
    for trace in traces:
        states.update(trace)
        edges.update(pairwise(trace))
    return states, edges


@attrs.frozen
class CoveredTraces:
    """What trace files cover (:func:`read_covered`): only traces the mirror accepts count."""

    states: set[Record]
    edges: set[Edge]
    accepted: tuple[Path, ...]
    rejected: tuple[tuple[Path, str], ...]
    """(file, verdict) of each trace that is no behaviour of the spec"""
    unreadable: tuple[tuple[Path, str], ...]
    """(file, why) of each file that is no trace at all"""


class IllegalTraceError(TpxError):
    """A trace given as coverage is no behaviour of the spec (or cannot be read)."""


def read_covered(paths: Iterable[str | os.PathLike[str]], config: Config) -> CoveredTraces:
    """Coverage from trace files (ITF or JSON lines, see :mod:`tpx.oracle.tracecheck`). Each trace
    is
    first checked with the mirror (:func:`tpx.oracle.tracecheck.check_trace`, claimed actions
    included); a rejected or unreadable file covers nothing and is listed instead."""
    from tpx.oracle.itf import TraceFormatError
    from tpx.oracle.tracecheck import check_trace, coerce_state, load_trace

    traces: list[list[Record]] = []
    accepted: list[Path] = []
    rejected: list[tuple[Path, str]] = []
    unreadable: list[tuple[Path, str]] = []
    for path in paths:
        try:
            raw, actions = load_trace(path)
            report = check_trace(raw, config, actions=actions)
        except TraceFormatError as exc:
            unreadable.append((Path(path), str(exc)))
            continue
        if not report.accepted:
            rejected.append((Path(path), str(report)))
            continue
        accepted.append(Path(path))
        traces.append([coerce_state(s, config, i)[0].as_record() for i, s in enumerate(raw, 1)])
    states, edges = covered_by(traces)
    return CoveredTraces(states, edges, tuple(accepted), tuple(rejected), tuple(unreadable))


def load_covered(
    paths: Iterable[str | os.PathLike[str]], config: Config
) -> tuple[set[Record], set[Edge]]:
    """The states and steps the trace files cover (see :func:`read_covered`); raises
    :class:`IllegalTraceError` naming the first file that is rejected or unreadable."""
    covered = read_covered(paths, config)
    for path, why in (*covered.unreadable, *covered.rejected):
        raise IllegalTraceError(f"{path}: {why}")
    return covered.states, covered.edges
