"""Breadth-first exploration of the gateway spec, reporting TLC's figures.

The same search as the seed's (:func:`tpx.oracle.model.explore.bfs`), on the gateway's states,
actions, invariants and step properties; figures follow TLC's conventions (see
:mod:`tpx.oracle.model.explore`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from tpx.oracle.model.explore import ExploreResult, ProgressFn, bfs
from tpx.oracle.model.gateway.actions import Init, Next
from tpx.oracle.model.gateway.invariants import INVARIANTS, PROPERTIES, Invariant
from tpx.oracle.model.gateway.state import Config, State

__all__ = ["explore"]


def explore(
    config: Config,
    *,
    check_deadlock: bool = True,
    keep_graph: bool = False,
    init: Callable[[Config], Iterable[State]] = Init,
    next: Callable[[State, Config], Iterable[tuple[str, State]]] = Next,
    invariants: Iterable[tuple[str, Invariant]] = INVARIANTS,
    properties: Iterable[tuple[str, Callable[[State, State], bool]]] = PROPERTIES,
    on_progress: ProgressFn | None = None,
) -> ExploreResult:
    """Explore every reachable state of the gateway spec; stop at the first violation,
    as TLC does. Tests pass seeded-bug variants of *init*, *next*, ... to prove the
    checks catch them."""
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
