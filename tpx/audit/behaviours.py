"""The gateway spec's behaviours, from the mirror's reachable graph.

:func:`mirror_graph` turns :func:`tpx.oracle.model.gateway.explore`'s graph (equal to TLC's dump,
see ``tests/oracle/model/gateway``) into a :class:`~tpx.oracle.tlc.StateGraph`, so the seed's
generic
graph code applies unchanged: :func:`tpx.oracle.behaviours.complete_behaviours` (every
behaviour), :func:`tpx.oracle.behaviours.edge_cover` (a minimum edge cover, min-flow) and
:func:`tpx.oracle.behaviours.edge_cover_certificate` (its proof of minimality).

:func:`conversation_of` names the conversation a step belongs to (the one whose ``turn``
or ``phase`` it changes: every per-conversation action changes one of them).

Cfgs: :data:`SMALL` (Convs = {c1, c2}, ToolIds = {t1}, MaxTurns = 1, MaxInFlight = 2; all
behaviours), :data:`RETRY` (one conversation, MaxTurns = 3: all behaviours, among them
retries of turns that carry tool_results, which need three turns), :data:`TWO_TOOLS` (one
conversation, ToolIds = {t1, t2}, MaxTurns = 2: all behaviours, parallel calls answered
in either order), :data:`SHIPPED` (spec/TpxGateway.cfg, as shipped in the package: the edge
cover).
"""

from __future__ import annotations

from typing import Any

import attrs

from tpx.oracle.behaviours import (
    Behaviour,
    complete_behaviours,
    count_complete_behaviours,
    edge_cover,
    edge_cover_certificate,
)
from tpx.oracle.model.gateway import GATEWAY, PER_CONVERSATION, Config, explore
from tpx.oracle.tlc import StateGraph
from tpx.oracle.values import ModelValue, Record

__all__ = [
    "CREDENTIALS",
    "RETRY",
    "SHIPPED",
    "SMALL",
    "TWO_TOOLS",
    "all_behaviours",
    "conversation_of",
    "cover_behaviours",
    "mirror_graph",
    "project",
]

SPEC = GATEWAY.spec_path
#: the spec's provider -> the credentials (hasKey, hasToken) an endpoint of it boots with
CREDENTIALS = {"TPX": (False, True), "ANTHROPIC": (True, False)}
SMALL = Config.of(2, 1, 1, 2)
RETRY = Config.of(1, 1, 3, 1)
TWO_TOOLS = Config.of(1, 2, 2, 1)
#: spec/TpxGateway.cfg; with one id-signing key where the spec has them (``MaxKeys``): the
#: replay cannot rotate a running ``tpx serve``'s key
SHIPPED = Config.from_cfg(SPEC.with_suffix(".cfg"))
if getattr(SHIPPED, "MaxKeys", 1) > 1:
    _ONE_KEY: dict[str, Any] = {
        "Convs": frozenset(SHIPPED.Convs),
        "ToolIds": frozenset(SHIPPED.ToolIds),
        "MaxKeys": 1,
    }
    SHIPPED = attrs.evolve(SHIPPED, **_ONE_KEY)


def mirror_graph(config: Config) -> StateGraph:
    """The reachable graph of the gateway spec under *config* (fingerprints: positions in a
    deterministic order)."""
    result = explore(config, keep_graph=True)
    if not result.ok or result.graph is None:
        raise ValueError(f"the gateway spec does not check under {config}: {result.verdict}")
    g = result.graph
    ix = {s: i for i, s in enumerate(sorted(g.states, key=repr))}
    return StateGraph(
        states={i: s for s, i in ix.items()},
        initial=frozenset(ix[s] for s in g.initial),
        edges=frozenset((ix[a], ix[b], label) for a, b, label in g.edges),
    )


def all_behaviours(graph: StateGraph) -> list[Behaviour]:
    return complete_behaviours(graph)


def cover_behaviours(graph: StateGraph) -> list[Behaviour]:
    return edge_cover(graph)


def conversation_of(before: Record, after: Record, config: Config) -> ModelValue | None:
    """The conversation a step s -> t acts for (``None``: Halted)."""
    moved = [
        c
        for c in config.Convs
        if before["turn"][c] != after["turn"][c] or before["phase"][c] != after["phase"][c]
    ]
    if not moved:
        return None
    if len(moved) != 1:
        raise ValueError(f"a step moves {len(moved)} conversations")
    return moved[0]


def project(state: Record, c: ModelValue) -> dict[str, object]:
    """Conversation *c*'s variables (and the shared ones), with the spec's names."""
    out: dict[str, object] = {n: state[n] for n in ("hasKey", "hasToken", "provider")}
    out.update({n: state[n][c] for n in PER_CONVERSATION})
    return out


__all__ += ["count_complete_behaviours", "edge_cover_certificate"]
