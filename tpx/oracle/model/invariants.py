"""The spec's invariants as named predicates, and SelectionStable on a step.

==================  =====================================================
spec                here
==================  =====================================================
TypeOK              :func:`TypeOK`
ShapeInv            :func:`ShapeInv`
PairingInv          :func:`PairingInv`
SelectionInv        :func:`SelectionInv`
BoundedInv          :func:`BoundedInv`
SelectionStable     :func:`SelectionStable` (``[][CredsUnchanged]_vars``,
                    checked on every step ``s -> t``)
==================  =====================================================
"""

from __future__ import annotations

from collections.abc import Callable

from tpx.oracle.model.common import CredsUnchanged, SelectionStable
from tpx.oracle.model.state import Config, Outcomes, Phases, Shapes, State

__all__ = [
    "INVARIANTS",
    "BoundedInv",
    "CredsUnchanged",
    "PairingInv",
    "SelectionInv",
    "SelectionStable",
    "ShapeInv",
    "TypeOK",
]

Invariant = Callable[[State, Config], bool]


def TypeOK(s: State, c: Config) -> bool:
    return (
        isinstance(s.hasKey, bool)
        and isinstance(s.hasToken, bool)
        and s.provider in c.Providers
        and isinstance(s.turn, int)
        and not isinstance(s.turn, bool)
        and 0 <= s.turn <= c.MaxTurns
        and s.phase in Phases
        and s.pending <= c.ToolIds
        and s.reqIds <= c.ToolIds
        and s.wireShape in Shapes
        and s.wireIds <= c.ToolIds
        and s.emitted <= c.ToolIds
        and s.gotShape in Shapes
        and s.lastOutcome in Outcomes
    )


def ShapeInv(s: State, c: Config) -> bool:
    return s.gotShape == "messages"


def PairingInv(s: State, c: Config) -> bool:
    return (
        (s.phase != "req" or (s.wireIds == s.reqIds and s.reqIds == s.pending))
        and (s.phase != "resp" or s.wireIds == s.emitted)
        and (not (s.phase == "idle" and s.lastOutcome == "ok") or s.pending == s.emitted)
    )


def SelectionInv(s: State, c: Config) -> bool:
    return s.provider == c.Select(s.hasKey, s.hasToken)


def BoundedInv(s: State, c: Config) -> bool:
    return s.turn <= c.MaxTurns


#: The cfg's INVARIANTS, in its order.
INVARIANTS: tuple[tuple[str, Invariant], ...] = (
    ("TypeOK", TypeOK),
    ("ShapeInv", ShapeInv),
    ("PairingInv", PairingInv),
    ("SelectionInv", SelectionInv),
    ("BoundedInv", BoundedInv),
)
