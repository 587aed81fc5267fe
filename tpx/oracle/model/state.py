"""The spec's constants and its 12 variables, one-for-one.

=====================================  ==========================================
spec/TpxTransport.tla                  here
=====================================  ==========================================
CONSTANTS ToolIds, MaxTurns            :class:`Config` ``ToolIds``, ``MaxTurns``
CONSTANTS ANTHROPIC, TPX, NONE         :class:`Config` ``ANTHROPIC``, ``TPX``, ``NONE``
Providers, Shapes, Phases, Outcomes    :meth:`Config.Providers`, :data:`Shapes`, ...
VARIABLES hasKey ... lastOutcome       :class:`State` (same names, same order)
vars                                   :data:`VARS` / :meth:`State.vars`
Select(k, t)                           :meth:`Config.Select`
NativeShape(p)                         :meth:`Config.NativeShape`
=====================================  ==========================================

Model values stay :class:`~tpx.oracle.values.ModelValue` (never strings), sets are
frozensets, so :meth:`State.as_record` is exactly what TLC prints, parsed.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import attrs

from tpx.errors import SpecConfigError
from tpx.oracle.model.common import Outcomes, Phases, Shapes, SpecState, variables_of
from tpx.oracle.values import ModelValue

__all__ = ["VARS", "Config", "Outcomes", "Phases", "Shapes", "State"]


#: The spec's ``vars`` tuple, in the spec's order.
VARS: tuple[str, ...] = (
    "hasKey",
    "hasToken",
    "provider",
    "turn",
    "phase",
    "pending",
    "reqIds",
    "wireShape",
    "wireIds",
    "emitted",
    "gotShape",
    "lastOutcome",
)


def _tool_ids(value: Any) -> frozenset[ModelValue]:
    # a set, as the cfg gives it; not a number (``ToolIds = 3``), string or tuple
    if not isinstance(value, frozenset | set):
        raise SpecConfigError(
            f"ToolIds must be a set of model values such as {{t1, t2}}, got {value!r}"
        )
    ids = frozenset(value)
    if not all(isinstance(i, ModelValue) for i in ids):
        raise SpecConfigError(f"ToolIds must be a set of model values, got {value!r}")
    return ids


def _max_turns(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise SpecConfigError(f"MaxTurns must be a natural number, got {value!r}")
    return value


@attrs.frozen
class Config:
    """The spec's CONSTANTS, as a TLC cfg assigns them."""

    ToolIds: frozenset[ModelValue] = attrs.field(converter=_tool_ids)
    MaxTurns: int = attrs.field(converter=_max_turns)
    ANTHROPIC: ModelValue = ModelValue("ANTHROPIC")
    TPX: ModelValue = ModelValue("TPX")
    NONE: ModelValue = ModelValue("NONE")

    @classmethod
    def of(cls, tool_ids: int | list[str] | tuple[str, ...], max_turns: int) -> Config:
        """Convenience: ``Config.of(2, 3)`` is ToolIds = {t1, t2}, MaxTurns = 3."""
        names = [f"t{i}" for i in range(1, tool_ids + 1)] if isinstance(tool_ids, int) else tool_ids
        return cls(frozenset(ModelValue(n) for n in names), max_turns)

    @classmethod
    def from_constants(cls, constants: dict[str, Any]) -> Config:
        missing = {"ToolIds", "MaxTurns"} - constants.keys()
        if missing:
            raise SpecConfigError(f"cfg does not assign constant(s) {sorted(missing)}")
        extra: dict[str, ModelValue] = {}
        for name in ("ANTHROPIC", "TPX", "NONE"):
            v = constants.get(name, ModelValue(name))
            if not isinstance(v, ModelValue):
                raise SpecConfigError(f"{name} must be a model value, got {v!r}")
            extra[name] = v
        if len(set(extra.values())) != 3:
            raise SpecConfigError("ANTHROPIC, TPX and NONE must be distinct model values")
        return cls(constants["ToolIds"], constants["MaxTurns"], **extra)

    @classmethod
    def from_cfg(cls, path: str | os.PathLike[str]) -> Config:
        """Read the constants from the same .cfg file TLC reads."""
        from tpx.oracle.tlc.cfg import load_cfg

        return cls.from_constants(dict(load_cfg(Path(path)).constants))

    @property
    def Providers(self) -> frozenset[ModelValue]:
        return frozenset({self.ANTHROPIC, self.TPX, self.NONE})

    def Select(self, k: bool, t: bool) -> ModelValue:
        """``Select(k, t) == IF k THEN ANTHROPIC ELSE IF t THEN TPX ELSE NONE``"""
        return self.ANTHROPIC if k else self.TPX if t else self.NONE

    def NativeShape(self, p: ModelValue) -> str:
        """``NativeShape(p) == IF p = TPX THEN "openai" ELSE "messages"``"""
        return "openai" if p == self.TPX else "messages"


@attrs.frozen
class State(SpecState):
    """One state of the spec: the 12 VARIABLES, with the spec's names."""

    hasKey: bool  # static API key present at boot
    hasToken: bool  # OAuth bearer token present at boot
    provider: ModelValue  # provider chosen at net init, fixed for the boot
    turn: int  # completed exchanges
    phase: str  # where the current exchange is
    pending: frozenset[ModelValue]  # tool_use ids the model emitted, awaiting tool_result
    reqIds: frozenset[ModelValue]  # tool_result ids in the caller's outbound request
    wireShape: str  # protocol shape of the body currently on the wire
    wireIds: frozenset[ModelValue]  # tool ids carried by the body on the wire
    emitted: frozenset[ModelValue]  # ids the provider actually emitted
    gotShape: str  # shape of the last body handed back to the caller
    lastOutcome: str  # result of the last completed exchange

    @classmethod
    def from_record(cls, record: Any) -> State:
        """Build a State from a mapping of the 12 variable names (e.g. parsed TLC output)."""
        return cls(**variables_of(record, VARS))
