"""State graphs: TLC's ``-dump dot,actionlabels`` file read as a :class:`StateGraph`.

``-dump dot,actionlabels F`` writes every generated transition as its own line
even when two actions lead from the same state to the same successor (checked
"""

from __future__ import annotations

import re
import tempfile
from pathlib import Path

import attrs

from tpx.errors import (
    TLCCrashError,
)
from tpx.oracle.tlc.cfg import ModelConfig, StrPath
from tpx.oracle.tlc.runner import load_model, run_model
from tpx.oracle.tlc.values import TLAValueSyntaxError, parse_state
from tpx.oracle.values import Record

__all__ = ["StateGraph", "dump_graph", "parse_dot"]


@attrs.frozen
class StateGraph:
    """The reachable state graph as dumped by ``-dump dot,actionlabels``."""

    states: dict[int, Record]
    """fingerprint -> state"""
    initial: frozenset[int]
    edges: frozenset[tuple[int, int, str]]
    """(from fingerprint, to fingerprint, action label); stuttering steps are self-loops"""

    def state_set(self) -> frozenset[Record]:
        return frozenset(self.states.values())

    def labelled_edges(self) -> frozenset[tuple[Record, Record, str]]:
        return frozenset((self.states[a], self.states[b], lbl) for a, b, lbl in self.edges)


_DOT_NODE = re.compile(r'^(-?\d+) \[label="((?:[^"\\]|\\.)*)"(,style = filled)?\];?$')
_DOT_EDGE = re.compile(r'^(-?\d+) -> (-?\d+) \[label="((?:[^"\\]|\\.)*)"')


def _dot_unescape(text: str) -> str:
    return re.sub(r"\\(.)", lambda m: "\n" if m.group(1) == "n" else m.group(1), text)


def parse_dot(text: str) -> StateGraph:
    """Parse a TLC ``-dump dot,actionlabels`` file."""
    states: dict[int, Record] = {}
    initial: set[int] = set()
    edges: set[tuple[int, int, str]] = set()
    for line in text.splitlines():
        m = _DOT_EDGE.match(line)
        if m is not None:
            edges.add((int(m.group(1)), int(m.group(2)), _dot_unescape(m.group(3))))
            continue
        m = _DOT_NODE.match(line)
        if m is not None:
            fp = int(m.group(1))
            try:
                states[fp] = parse_state(_dot_unescape(m.group(2)))
            except TLAValueSyntaxError as exc:
                raise TLCCrashError(f"unreadable state in the dot dump: {exc}") from exc
            if m.group(3):
                initial.add(fp)
    return StateGraph(states=states, initial=frozenset(initial), edges=frozenset(edges))


def _graph_model(model: ModelConfig) -> ModelConfig:
    """Same behaviours, nothing to violate: drop invariants and properties."""
    return attrs.evolve(model, invariants=(), properties=(), check_deadlock=False)


def dump_graph(
    spec: StrPath,
    cfg: StrPath | None = None,
    *,
    fp: int = 0,
    workers: int = 1,
    timeout: float | None = None,
) -> StateGraph:
    """The full reachable state graph of *spec* under *cfg* (invariants, properties and
    deadlock checking are switched off so the graph is complete), fingerprints pinned by *fp*."""
    model = _graph_model(load_model(cfg, Path(spec)))
    with tempfile.TemporaryDirectory(prefix="tpx-dot-") as tmp:
        dot = Path(tmp) / "graph.dot"
        result = run_model(Path(spec), model, fp=fp, workers=workers, timeout=timeout, dump_dot=dot)
        if not result.ok:
            raise TLCCrashError(f"state graph dump did not complete: {result.verdict}")
        return parse_dot(dot.read_text(encoding="utf-8"))
