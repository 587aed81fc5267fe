"""The gateway spec's invariants as named predicates, and SelectionStable on a step.

==================  =====================================================
spec                here
==================  =====================================================
TypeOK              :func:`TypeOK`
ShapeInv            :func:`ShapeInv`
PairingInv          :func:`PairingInv`
SelectionInv        :func:`SelectionInv`
BoundedInv          :func:`BoundedInv`
NoCrossPairing      :func:`NoCrossPairing`
RetryInv            :func:`RetryInv`
OneGeneration       :func:`OneGeneration`
NoDuplicateDelivery :func:`NoDuplicateDelivery`
CredsUnchanged      :func:`CredsUnchanged`
SelectionStable     :func:`SelectionStable` (``[][CredsUnchanged]_vars``,
                    checked on every step ``s -> t``)
RefusesOnlyWrong    :func:`RefusesOnlyWrong` (on every step ``s -> t``)
SendsOnlyCorrect    :func:`SendsOnlyCorrect` (on every step ``s -> t``)
FailoverBefore-     :func:`FailoverBeforeFirstByte` (on every step ``s -> t``)
FirstByte
==================  =====================================================
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tpx.oracle.model.common import CredsUnchanged, SelectionStable
from tpx.oracle.model.gateway.state import (
    AllRounds,
    Bound,
    Config,
    InFlight,
    Keys,
    Names,
    Outcomes,
    Phases,
    Requests,
    Rounds,
    Shapes,
    State,
    Verifies,
    Wrong,
)
from tpx.oracle.values import Function

__all__ = [
    "INVARIANTS",
    "BoundedInv",
    "CredsUnchanged",
    "FailoverBeforeFirstByte",
    "NoCrossPairing",
    "NoDuplicateDelivery",
    "OneGeneration",
    "PairingInv",
    "RefusesOnlyWrong",
    "RetryInv",
    "SelectionInv",
    "SelectionStable",
    "SendsOnlyCorrect",
    "ShapeInv",
    "TypeOK",
]

Invariant = Callable[[State, Config], bool]


def _fn(f: Any, cfg: Config, ok: Callable[[Any], bool]) -> bool:
    """``f \\in [Convs -> S]`` with ``ok`` testing membership in S."""
    return isinstance(f, Function) and set(f) == set(cfg.Convs) and all(ok(v) for v in f.values())


def TypeOK(s: State, cfg: Config) -> bool:
    def nat(v: Any) -> bool:
        return isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= cfg.MaxTurns

    def ids(v: Any) -> bool:
        return isinstance(v, frozenset) and v <= cfg.AllIds

    def pairs(v: Any) -> bool:
        return isinstance(v, frozenset) and all(
            isinstance(p, tuple) and len(p) == 2 and p[0] in cfg.AllIds and p[1] in cfg.AllIds
            for p in v
        )

    def rounds(v: Any) -> bool:
        return isinstance(v, tuple) and all(pairs(r) for r in v)

    def key(v: Any) -> bool:
        return isinstance(v, int) and not isinstance(v, bool)

    def count(v: Any) -> bool:
        return key(v) and v >= 0

    def health(f: Any) -> bool:
        return (
            isinstance(f, Function)
            and set(f) == set(cfg.Upstreams)
            and all(isinstance(v, bool) for v in f.values())
        )

    return (
        isinstance(s.hasKey, bool)
        and isinstance(s.hasToken, bool)
        and s.provider in cfg.Providers
        and key(s.key)
        and 1 <= s.key <= cfg.MaxKeys
        and key(s.oldest)
        and 1 <= s.oldest <= s.key
        and _fn(s.turn, cfg, nat)
        and _fn(s.phase, cfg, lambda v: v in Phases)
        and _fn(s.pending, cfg, ids)
        and _fn(s.reqIds, cfg, ids)
        and _fn(s.wireShape, cfg, lambda v: v in Shapes)
        and _fn(s.wireIds, cfg, ids)
        and _fn(s.emitted, cfg, ids)
        and _fn(s.gotShape, cfg, lambda v: v in Shapes)
        and _fn(s.lastOutcome, cfg, lambda v: v in Outcomes)
        and _fn(s.retryable, cfg, lambda v: isinstance(v, bool))
        and _fn(s.calls, cfg, pairs)
        and _fn(s.hist, cfg, rounds)
        and _fn(s.wireRes, cfg, rounds)
        and _fn(s.request, cfg, lambda v: v in Requests)
        and _fn(s.signedBy, cfg, lambda v: key(v) and 0 <= v <= cfg.MaxKeys)
        and _fn(s.up, cfg, lambda v: v in cfg.Upstreams or v == cfg.NONE)
        and health(s.health)
        and _fn(s.attempts, cfg, lambda v: key(v) and 0 <= v <= cfg.MaxAttempts)
        and _fn(s.reached, cfg, lambda v: isinstance(v, bool))
        and _fn(s.gens, cfg, count)
        and _fn(s.fwd, cfg, count)
    )


def ShapeInv(s: State, cfg: Config) -> bool:
    return all(s.gotShape[c] == "messages" for c in cfg.Convs)


def PairingInv(s: State, cfg: Config) -> bool:
    return all(
        s.pending[c] == Keys(s.calls[c])
        and Bound(s.calls[c])
        and Bound(AllRounds(s.hist[c]))
        and Bound(AllRounds(s.wireRes[c]))
        and (
            s.phase[c] != "req"
            or (
                s.wireIds[c] == s.reqIds[c]
                and s.reqIds[c] == s.pending[c]
                and s.wireRes[c] == Rounds(s, c)
            )
        )
        and (s.phase[c] != "resp" or s.wireIds[c] == s.emitted[c])
        and (
            not (s.phase[c] == "idle" and s.lastOutcome[c] == "ok") or s.pending[c] == s.emitted[c]
        )
        for c in cfg.Convs
    )


def SelectionInv(s: State, cfg: Config) -> bool:
    return s.provider == cfg.Select(s.hasKey, s.hasToken)


def BoundedInv(s: State, cfg: Config) -> bool:
    return all(s.turn[c] <= cfg.MaxTurns for c in cfg.Convs) and InFlight(s) <= cfg.MaxInFlight


def NoCrossPairing(s: State, cfg: Config) -> bool:
    return all(
        not (
            cfg.Ids(d)
            & (
                s.pending[c]
                | s.reqIds[c]
                | s.wireIds[c]
                | s.emitted[c]
                | Names(s.calls[c])
                | Names(AllRounds(s.hist[c]))
                | Names(AllRounds(s.wireRes[c]))
            )
        )
        for c in cfg.Convs
        for d in cfg.Convs
        if c != d
    )


def RetryInv(s: State, cfg: Config) -> bool:
    return all(not s.retryable[c] or s.pending[c] == s.reqIds[c] for c in cfg.Convs)


def OneGeneration(s: State, cfg: Config) -> bool:
    return all(s.gens[c] <= 1 for c in cfg.Convs)


def NoDuplicateDelivery(s: State, cfg: Config) -> bool:
    return all(s.fwd[c] <= 1 for c in cfg.Convs)


#: What a refusal may refuse: a wrong request, or a correct one too long for the window.
REFUSABLE = Wrong | {"long"}


def RefusesOnlyWrong(s: State, t: State) -> bool:
    """``[][\\A c : (phase[c] = "idle" /\\ (hasKey \\/ hasToken) /\\ turn'[c] = turn[c] + 1)
    => request'[c] \\in Wrong \\cup {"long"}]_vars`` on the step s -> t: a refusal refuses a
    wrong or a too-long request."""
    return s == t or all(
        not (s.phase[c] == "idle" and (s.hasKey or s.hasToken) and t.turn[c] == s.turn[c] + 1)
        or t.request[c] in REFUSABLE
        for c in s.phase
    )


def SendsOnlyCorrect(s: State, t: State) -> bool:
    """``[][\\A c : (phase[c] = "idle" /\\ phase'[c] = "req") => (request'[c] = "ok" /\\
    Verifies(c))]_vars`` on the step s -> t: only a correct request reaches the upstream."""
    return s == t or all(
        not (s.phase[c] == "idle" and t.phase[c] == "req")
        or (t.request[c] == "ok" and Verifies(s, c))
        for c in s.phase
    )


def FailoverBeforeFirstByte(s: State, t: State) -> bool:
    """``[][\\A c : (phase[c] = "req" /\\ up'[c] # up[c]) => fwd[c] = 0]_vars`` on the step
    s -> t: a request moves to another upstream only before a reply's first byte."""
    return s == t or all(
        not (s.phase[c] == "req" and t.up[c] != s.up[c]) or s.fwd[c] == 0 for c in s.phase
    )


#: The cfg's INVARIANTS, in its order.
INVARIANTS: tuple[tuple[str, Invariant], ...] = (
    ("TypeOK", TypeOK),
    ("ShapeInv", ShapeInv),
    ("PairingInv", PairingInv),
    ("SelectionInv", SelectionInv),
    ("BoundedInv", BoundedInv),
    ("NoCrossPairing", NoCrossPairing),
    ("RetryInv", RetryInv),
    ("OneGeneration", OneGeneration),
    ("NoDuplicateDelivery", NoDuplicateDelivery),
)

#: The cfg's PROPERTY list (step properties), in its order.
PROPERTIES: tuple[tuple[str, Callable[[State, State], bool]], ...] = (
    ("SelectionStable", SelectionStable),
    ("RefusesOnlyWrong", RefusesOnlyWrong),
    ("SendsOnlyCorrect", SendsOnlyCorrect),
    ("FailoverBeforeFirstByte", FailoverBeforeFirstByte),
)
