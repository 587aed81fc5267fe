"""Breadth-first exploration of the spec's state graph, reporting what TLC reports.

:func:`explore` walks the readable :class:`~tpx.oracle.model.state.State` objects
with the action functions of :mod:`tpx.oracle.model.actions`; it can keep the whole
labelled graph (for comparison with TLC's ``-dump dot``) and it returns a
shortest counterexample on any violation, in the runner's trace format
(a list of ``(action, state-record)`` steps, the first one ``"Init"``).

Figures follow TLC's conventions: *initial* counts the initial states,
*generated* counts the initial states plus every successor every action
produced from every distinct state (duplicates and Halted's stuttering
self-loops included), *distinct* the reachable states, and *depth* the
number of BFS levels (the initial states are level 1).

The fast path, :func:`tpx.oracle.model.packed.explore_packed`, computes the same
figures on bit-packed states with numpy; a test proves the two agree.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping
from typing import Protocol, TypeVar

import attrs

from tpx.oracle.model.actions import Init, Next
from tpx.oracle.model.invariants import INVARIANTS, Invariant, SelectionStable
from tpx.oracle.model.state import Config, State
from tpx.oracle.tlc.verdict import TraceStep, Verdict
from tpx.oracle.values import Record

__all__ = ["ExploreResult", "Graph", "Progress", "ProgressFn", "Verdict", "bfs", "explore"]

#: TLC's exit codes for the same outcomes.
EXIT_CODES: dict[str, int] = {"ok": 0, "deadlock": 11, "invariant": 12, "action_property": 13}


@attrs.frozen
class Graph:
    """The reachable state graph, as TLC's ``-dump dot,actionlabels`` shows it."""

    initial: frozenset[Record]
    states: frozenset[Record]
    edges: frozenset[tuple[Record, Record, str]]


@attrs.frozen
class ExploreResult:
    verdict: Verdict
    initial: int
    generated: int
    distinct: int
    depth: int
    duration_s: float
    trace: tuple[TraceStep, ...] = ()
    graph: Graph | None = None

    @property
    def ok(self) -> bool:
        return self.verdict.kind == "ok"

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self.verdict.kind]


@attrs.frozen
class Progress:
    """Where an exploration stands (TLC's progress line: depth, generated, distinct, queue)."""

    depth: int
    generated: int
    distinct: int
    queue: int


ProgressFn = Callable[[Progress], None]
"""Called now and then during an exploration (every few thousand states, or per level)."""

#: States the readable explorer expands between two progress calls.
PROGRESS_EVERY = 4096

NextFn = Callable[[State, Config], Iterable[tuple[str, State]]]
InitFn = Callable[[Config], Iterable[State]]
StepProperty = Callable[[State, State], bool]


def explore(
    config: Config,
    *,
    check_deadlock: bool = True,
    keep_graph: bool = False,
    init: InitFn = Init,
    next: NextFn = Next,
    invariants: Iterable[tuple[str, Invariant]] = INVARIANTS,
    properties: Iterable[tuple[str, StepProperty]] = (("SelectionStable", SelectionStable),),
    on_progress: ProgressFn | None = None,
) -> ExploreResult:
    """Explore every reachable state; stop at the first violation, as TLC does.

    *init*, *next*, *invariants* and *properties* default to the spec's; tests
    pass seeded-bug variants to prove the checks catch them.
    """
    return bfs(
        config,
        check_deadlock=check_deadlock,
        keep_graph=keep_graph,
        init=init,
        next=next,
        invariants=invariants,
        properties=properties,
        on_progress=on_progress,
    )


class Explorable(Protocol, Hashable):
    """What :func:`bfs` needs of a state: hashable, and readable as TLC prints it."""

    def as_record(self) -> Record: ...


S = TypeVar("S", bound=Explorable)
C = TypeVar("C")


def bfs(
    config: C,
    *,
    check_deadlock: bool,
    keep_graph: bool,
    init: Callable[[C], Iterable[S]],
    next: Callable[[S, C], Iterable[tuple[str, S]]],
    invariants: Iterable[tuple[str, Callable[[S, C], bool]]],
    properties: Iterable[tuple[str, Callable[[S, S], bool]]],
    on_progress: ProgressFn | None = None,
) -> ExploreResult:
    """The breadth-first search behind :func:`explore`, for any spec mirrored the same way
    (states with ``as_record``, ``init(config)``, ``next(state, config)`` yielding
    ``(action, successor)``, named invariants and step properties): the gateway's mirror
    uses it too."""
    start = time.perf_counter()
    invariants = tuple(invariants)
    properties = tuple(properties)
    parent: dict[S, tuple[S, str] | None] = {}
    level: dict[S, int] = {}
    queue: deque[S] = deque()
    edges: set[tuple[Record, Record, str]] = set()
    initial: list[S] = []
    generated = 0
    depth = 0

    def finish(verdict: Verdict, at: S | None) -> ExploreResult:
        graph = None
        if keep_graph:
            graph = Graph(
                initial=frozenset(s.as_record() for s in initial),
                states=frozenset(s.as_record() for s in parent),
                edges=frozenset(edges),
            )
        return ExploreResult(
            verdict=verdict,
            initial=len(initial),
            generated=generated,
            distinct=len(parent),
            depth=depth,
            duration_s=time.perf_counter() - start,
            trace=_trace(parent, at) if at is not None else (),
            graph=graph,
        )

    def violated(s: S) -> str | None:
        for name, inv in invariants:
            if not inv(s, config):
                return name
        return None

    for s in init(config):
        generated += 1
        if s in parent:
            continue
        parent[s] = None
        level[s] = 1
        initial.append(s)
        depth = 1
        if (name := violated(s)) is not None:
            return finish(Verdict("invariant", name), s)
        queue.append(s)

    expanded = 0
    while queue:
        s = queue.popleft()
        expanded += 1
        if on_progress is not None and expanded % PROGRESS_EVERY == 0:
            on_progress(Progress(level[s], generated, len(parent), len(queue)))
        successors = 0
        for action, t in next(s, config):
            successors += 1
            generated += 1
            if keep_graph:
                edges.add((s.as_record(), t.as_record(), action))
            # As TLC does: a new state's invariants first, then the step's properties.
            if t not in parent:
                parent[t] = (s, action)
                level[t] = level[s] + 1
                depth = max(depth, level[t])
                if (name := violated(t)) is not None:
                    return finish(Verdict("invariant", name), t)
                queue.append(t)
            for pname, prop in properties:
                if not prop(s, t):
                    # The counterexample is the path to s plus the offending step.
                    result = finish(Verdict("action_property", pname), s)
                    return attrs.evolve(
                        result, trace=(*result.trace, TraceStep(action, t.as_record()))
                    )
        if successors == 0 and check_deadlock:
            return finish(Verdict("deadlock"), s)
    return finish(Verdict("ok"), None)


def _trace(parent: Mapping[S, tuple[S, str] | None], at: S) -> tuple[TraceStep, ...]:
    steps: list[TraceStep] = []
    cur: S | None = at
    while cur is not None:
        link = parent[cur]
        steps.append(TraceStep(link[1] if link else "Init", cur.as_record()))
        cur = link[0] if link else None
    return tuple(reversed(steps))


def reachable(config: Config) -> Iterator[State]:
    """Every reachable state of the spec, in BFS order."""
    seen: set[State] = set()
    queue: deque[State] = deque()
    for s in Init(config):
        if s not in seen:
            seen.add(s)
            queue.append(s)
    while queue:
        s = queue.popleft()
        yield s
        for _, t in Next(s, config):
            if t not in seen:
                seen.add(t)
                queue.append(t)
