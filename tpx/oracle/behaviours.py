"""The behaviours of a state graph: the paths a replay takes through a spec's reachable
states.

A :class:`~tpx.oracle.tlc.StateGraph` (TLC's dump, or a Python mirror's graph) minus its
Halted self-loops is a DAG; a complete behaviour runs from an initial state to a state
whose only step is Halted, and takes that Halted step.

* :func:`complete_behaviours` enumerates every complete behaviour
  (:func:`count_complete_behaviours` counts them without listing them);
* :func:`edge_cover` picks a minimum set of complete behaviours covering every edge
  (min-flow), :func:`edge_cover_certificate` proves it minimum and
  :func:`edge_cover_lower_bound` is a quick bound;
* :func:`behaviour_from_trace` labels a simulated trace with the transport mirror's
  actions;
* :class:`Coverage` counts what replays covered of one graph.

The conformance replays (``conformance/``) and ``tpx audit`` (:mod:`tpx.audit`) both
replay these behaviours.
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import Any

import attrs

from tpx.oracle.model import Config, Next, State
from tpx.oracle.tlc import StateGraph
from tpx.oracle.values import Record

__all__ = [
    "Behaviour",
    "Coverage",
    "Edge",
    "behaviour_from_trace",
    "complete_behaviours",
    "count_complete_behaviours",
    "edge_cover",
    "edge_cover_certificate",
    "edge_cover_lower_bound",
]

Edge = tuple[Record, Record, str]


@attrs.frozen
class Behaviour:
    """A behaviour: its initial state, then (action, state) steps; ``enabled[i]`` is the set
    of actions enabled in state *i* (0: the initial state)."""

    init: Record
    steps: tuple[tuple[str, Record], ...]
    enabled: tuple[frozenset[str], ...]

    def edges(self) -> Iterable[Edge]:
        prev = self.init
        for action, state in self.steps:
            yield prev, state, action
            prev = state

    def states(self) -> tuple[Record, ...]:
        return (self.init, *(s for _, s in self.steps))


@attrs.frozen
class _Dag:
    succ: dict[int, list[tuple[str, int]]]
    pred: dict[int, list[tuple[str, int]]]
    terminals: frozenset[int]
    enabled: dict[int, frozenset[str]]
    order: list[int]  # topological


def _dag(graph: StateGraph) -> _Dag:
    succ: dict[int, list[tuple[str, int]]] = defaultdict(list)
    pred: dict[int, list[tuple[str, int]]] = defaultdict(list)
    enabled: dict[int, set[str]] = defaultdict(set)
    for a, b, label in sorted(graph.edges):
        enabled[a].add(label)
        if label == "Halted" and a == b:
            continue
        succ[a].append((label, b))
        pred[b].append((label, a))
    terminals = frozenset(fp for fp in graph.states if not succ[fp] and "Halted" in enabled[fp])
    stuck = [fp for fp in graph.states if not succ[fp] and fp not in terminals]
    if stuck:
        raise ValueError(f"{len(stuck)} states have no step at all (deadlock)")
    # Kahn's algorithm; a cycle other than Halted's self-loops is an error.
    indeg = {fp: len(pred[fp]) for fp in graph.states}
    order = [fp for fp in sorted(graph.states) if indeg[fp] == 0]
    i = 0
    while i < len(order):
        for _, b in succ[order[i]]:
            indeg[b] -= 1
            if indeg[b] == 0:
                order.append(b)
        i += 1
    if len(order) != len(graph.states):
        raise ValueError("the graph minus the Halted self-loops is not a DAG")
    return _Dag(
        succ=dict(succ),
        pred=dict(pred),
        terminals=terminals,
        enabled={fp: frozenset(v) for fp, v in enabled.items()},
        order=order,
    )


def _behaviour(graph: StateGraph, dag: _Dag, path: Sequence[tuple[str, int]]) -> Behaviour:
    """*path*: the initial fp (label ignored) then (label, fp) steps, ending at a terminal."""
    fps = [fp for _, fp in path]
    steps = [(label, graph.states[fp]) for label, fp in path[1:]]
    steps.append(("Halted", graph.states[fps[-1]]))
    enabled = tuple(dag.enabled.get(fp, frozenset()) for fp in fps)
    return Behaviour(
        init=graph.states[fps[0]],
        steps=tuple(steps),
        enabled=(*enabled, enabled[-1]),
    )


def complete_behaviours(graph: StateGraph) -> list[Behaviour]:
    """Every complete behaviour of *graph*, in a deterministic order."""
    dag = _dag(graph)
    out: list[Behaviour] = []

    def walk(path: list[tuple[str, int]]) -> None:
        fp = path[-1][1]
        if fp in dag.terminals:
            out.append(_behaviour(graph, dag, path))
            return
        for label, b in dag.succ[fp]:
            path.append((label, b))
            walk(path)
            path.pop()

    for fp in sorted(graph.initial):
        walk([("Init", fp)])
    return out


def count_complete_behaviours(graph: StateGraph) -> int:
    dag = _dag(graph)
    ways: dict[int, int] = {}
    for fp in reversed(dag.order):
        ways[fp] = 1 if fp in dag.terminals else sum(ways[b] for _, b in dag.succ[fp])
    return sum(ways[fp] for fp in graph.initial)


def edge_cover_lower_bound(graph: StateGraph) -> int:
    """A lower bound on the number of complete behaviours covering every edge.

    A set of edges no behaviour can take twice (an antichain) needs one behaviour per
    edge. Every behaviour takes at most one step out of each (turn, phase) class, and
    exactly one turn-ending step per turn; the largest such class is the bound.
    """
    classes: dict[tuple[str, int, str], int] = defaultdict(int)
    for a, b, label in graph.edges:
        if label == "Halted":
            continue
        s, t = graph.states[a], graph.states[b]
        classes[("from", s["turn"], s["phase"])] += 1
        if t["turn"] != s["turn"]:
            classes[("ends", s["turn"], "")] += 1
    halted = sum(1 for a, b, label in graph.edges if label == "Halted")
    return max([halted, *classes.values()])


def edge_cover(graph: StateGraph) -> list[Behaviour]:
    """A minimum set of complete behaviours covering every edge of *graph*."""
    return _min_cover(graph)[0]


def edge_cover_certificate(graph: StateGraph) -> frozenset[tuple[int, int, str]]:
    """Edges no behaviour can take two of, as many as :func:`edge_cover` has behaviours.

    The minimum cut of the cancelling flow: every edge crossing it goes the same way and
    none comes back, so a behaviour crosses it at most once, and any edge cover needs one
    behaviour per crossing edge. Its size equal to the cover's proves the cover minimum.
    """
    return _min_cover(graph)[1]


def _min_cover(
    graph: StateGraph,
) -> tuple[list[Behaviour], frozenset[tuple[int, int, str]]]:
    """A minimum edge cover by complete behaviours, and its certificate.

    Minimum flow with a lower bound of 1 on every edge (the graph minus the Halted
    self-loops is a DAG; a super source feeds the initial states, the terminal states
    drain into a super sink): start from a feasible flow, cancel as much as possible with
    a maximum flow from sink to source in the residual network (Dinic), then decompose
    the remaining flow into source-to-sink paths. Every Halted self-loop is covered too,
    since every terminal state has an edge into it.
    """
    dag = _dag(graph)
    fps = list(dag.order)
    ix = {fp: i for i, fp in enumerate(fps)}
    n = len(fps)
    src, snk = n, n + 1
    edges = [(ix[a], ix[b], label) for a in fps for label, b in dag.succ.get(a, [])]
    out_e: list[list[int]] = [[] for _ in range(n)]
    in_e: list[list[int]] = [[] for _ in range(n)]
    for k, (a, b, _) in enumerate(edges):
        out_e[a].append(k)
        in_e[b].append(k)
    flow = [1] * len(edges)
    source = [0] * n
    sink = [0] * n
    # 1. a feasible flow: balance every node along a fixed path to a terminal / from a root
    for v in range(n):
        bal = len(in_e[v]) - len(out_e[v])
        if not in_e[v]:
            source[v] += len(out_e[v])
            bal = 0
        if not out_e[v]:
            sink[v] += len(in_e[v])
            bal = 0
        cur = v
        if bal > 0:
            while out_e[cur]:
                k = out_e[cur][0]
                flow[k] += bal
                cur = edges[k][1]
            sink[cur] += bal
        elif bal < 0:
            while in_e[cur]:
                k = in_e[cur][0]
                flow[k] -= bal
                cur = edges[k][0]
            source[cur] -= bal
    # 2. cancel: max flow from snk to src; arcs (to, cap) with paired reverse arcs
    big = 1 << 60
    head: list[list[int]] = [[] for _ in range(n + 2)]
    to: list[int] = []
    cap: list[int] = []

    def arc(u: int, v: int, c: int) -> int:
        head[u].append(len(to))
        to.append(v)
        cap.append(c)
        head[v].append(len(to))
        to.append(u)
        cap.append(0)
        return len(to) - 2

    cancel = [arc(b, a, flow[k] - 1) for k, (a, b, _) in enumerate(edges)]
    add = [arc(a, b, big) for (a, b, _) in edges]
    src_arcs = {v: arc(v, src, source[v]) for v in range(n) if source[v]}
    {v: arc(snk, v, sink[v]) for v in range(n) if sink[v]}
    initial_cap = list(cap)
    while True:
        level = [-1] * (n + 2)
        level[snk] = 0
        queue = [snk]
        for u in queue:
            for a in head[u]:
                if cap[a] > 0 and level[to[a]] < 0:
                    level[to[a]] = level[u] + 1
                    queue.append(to[a])
        if level[src] < 0:
            break
        it = [0] * (n + 2)
        while True:  # one augmenting path at a time (iterative DFS)
            path: list[int] = []
            u = snk
            while u != src:
                while it[u] < len(head[u]):
                    a = head[u][it[u]]
                    if cap[a] > 0 and level[to[a]] == level[u] + 1:
                        break
                    it[u] += 1
                if it[u] == len(head[u]):
                    if u == snk:
                        break
                    level[u] = -1  # dead end
                    a = path.pop()
                    u = to[a ^ 1]
                    it[u] += 1
                    continue
                a = head[u][it[u]]
                path.append(a)
                u = to[a]
            if u != src:
                break
            push = min(cap[a] for a in path)
            for a in path:
                cap[a] -= push
                cap[a ^ 1] += push
    reach = {snk}
    queue = [snk]
    for u in queue:
        for a in head[u]:
            if cap[a] > 0 and to[a] not in reach:
                reach.add(to[a])
                queue.append(to[a])
    antichain = frozenset(
        (fps[a], fps[b], label) for a, b, label in edges if a not in reach and b in reach
    )
    used = [initial_cap[a] - cap[a] for a in range(len(cap))]
    for k in range(len(edges)):
        flow[k] -= used[cancel[k]] - used[add[k]]
    for v, a in src_arcs.items():
        source[v] -= used[a]
    # 3. decompose into paths
    nxt = [list(ks) for ks in out_e]
    out: list[Behaviour] = []
    for root in range(n):
        while source[root] > 0:
            source[root] -= 1
            path_fp: list[tuple[str, int]] = [("Init", fps[root])]
            cur = root
            while nxt[cur]:
                while flow[nxt[cur][-1]] == 0:
                    nxt[cur].pop()
                k = nxt[cur][-1]
                flow[k] -= 1
                path_fp.append((edges[k][2], fps[edges[k][1]]))
                cur = edges[k][1]
                if not nxt[cur] or all(flow[j] == 0 for j in nxt[cur]):
                    break
            out.append(_behaviour(graph, dag, path_fp))
    assert all(f == 0 for f in flow), "flow decomposition left flow behind"
    return out, antichain


def behaviour_from_trace(trace: Sequence[Record], config: Config) -> Behaviour:
    """Label a simulated trace with the mirror's actions (a stuttering step is Halted)."""
    states = [State.from_record(r) for r in trace]

    def enabled(s: State) -> frozenset[str]:
        return frozenset(name for name, _ in Next(s, config))

    steps: list[tuple[str, Record]] = []
    for s, t in itertools.pairwise(states):
        labels = sorted({name for name, u in Next(s, config) if u == t})
        if not labels:
            raise ValueError(f"no action of the mirror explains the step {s} -> {t}")
        steps.append((labels[0], t.as_record()))
    return Behaviour(
        init=states[0].as_record(),
        steps=tuple(steps),
        enabled=tuple(enabled(s) for s in states),
    )


@attrs.define
class Coverage:
    """What replays covered of one graph."""

    name: str
    states_total: int
    edges_total: int
    behaviours_total: int
    states: set[Record] = attrs.field(factory=set)
    edges: set[Edge] = attrs.field(factory=set)
    behaviours: int = 0

    def add(self, behaviour: Behaviour) -> None:
        self.behaviours += 1
        self.states.update(behaviour.states())
        self.edges.update(behaviour.edges())

    def summary(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "states": [len(self.states), self.states_total],
            "edges": [len(self.edges), self.edges_total],
            "behaviours": [self.behaviours, self.behaviours_total],
        }
