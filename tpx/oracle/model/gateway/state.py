"""The gateway spec's constants and its 26 variables, one-for-one.

=====================================  ==========================================
spec/TpxGateway.tla                    here
=====================================  ==========================================
CONSTANTS Convs, ToolIds, MaxTurns,    :class:`Config` (same names)
MaxInFlight, MaxKeys, GatewayRetry,
Preflight, UpstreamSteps, Upstreams,
MaxAttempts, ANTHROPIC, TPX, NONE
Providers, Shapes, Phases, Outcomes,   :attr:`Config.Providers`, :data:`Shapes`, ...,
Wrong, Requests                        :data:`Wrong`, :data:`Requests`
VARIABLES hasKey ... fwd               :class:`State` (same names, same order)
vars                                   :data:`VARS` / :meth:`State.vars`
Ids(c), AllIds                         :meth:`Config.Ids`, :attr:`Config.AllIds`
Select(k, t)                           :meth:`Config.Select`
NativeShape(p)                         :meth:`Config.NativeShape`
InFlight                               :func:`InFlight`
Keys, Names, Bound, AllRounds          :func:`Keys`, :func:`Names`, :func:`Bound`,
                                       :func:`AllRounds`
Rounds(c), Verifies(c), WrongOf(c)     :func:`Rounds`, :func:`Verifies`, :func:`WrongOf`
Healthy, Route(c)                      :func:`Healthy`, :func:`Route`
[f EXCEPT ![c] = v]                    :func:`EXCEPT`
=====================================  ==========================================

The per-conversation variables are :class:`~tpx.oracle.values.Function` values keyed by the
conversation's model value, a tool id is the pair ``(c, t)`` (TLA+ ``<<c, t>>``), a
binding pair ``<<id, call>>`` the pair of two such ids and a sequence of rounds a tuple
of frozensets of pairs, so :meth:`State.as_record` is exactly what TLC prints, parsed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import attrs

from tpx.errors import SpecConfigError
from tpx.oracle.model.common import Outcomes, Phases, Shapes, SpecState, variables_of
from tpx.oracle.values import Function, ModelValue

__all__ = [
    "EXCEPT",
    "PER_CONVERSATION",
    "UP_VARS",
    "VARS",
    "AllRounds",
    "Bound",
    "Config",
    "Healthy",
    "InFlight",
    "Keys",
    "Names",
    "Outcomes",
    "Pair",
    "Phases",
    "Requests",
    "Rounds",
    "Route",
    "Shapes",
    "State",
    "ToolId",
    "Verifies",
    "Wrong",
    "WrongOf",
]


#: A tool call's id: ``<<c, t>>``, its conversation and a local name in ``ToolIds``.
ToolId = tuple[ModelValue, ModelValue]
#: ``<<id, call>>`` (a call bound to the id the client holds on it) or ``<<id, answered
#: call>>`` (a tool_result under that id answering that call); a call is named by the id
#: its provider emitted it under.
Pair = tuple[ToolId, ToolId]

#: ``Wrong``: how a client's request can be wrong; ``Requests``: what a request was.
Wrong = frozenset({"missing", "unknown", "duplicated", "retired"})
Requests = frozenset({"none", "ok", "long"}) | Wrong

#: The spec's ``vars`` tuple, in the spec's order.
VARS: tuple[str, ...] = (
    "hasKey",
    "hasToken",
    "provider",
    "key",
    "oldest",
    "turn",
    "phase",
    "pending",
    "reqIds",
    "wireShape",
    "wireIds",
    "emitted",
    "gotShape",
    "lastOutcome",
    "retryable",
    "calls",
    "hist",
    "wireRes",
    "request",
    "signedBy",
    "up",
    "health",
    "attempts",
    "reached",
    "gens",
    "fwd",
)

#: The spec's ``upVars``: the upstream attempts of an exchange.
UP_VARS: tuple[str, ...] = VARS[20:]

#: The variables that are functions over ``Convs`` (all but the shared selection, keys and
#: upstream health).
PER_CONVERSATION: tuple[str, ...] = tuple(v for v in VARS[5:] if v != "health")


def _model_values(name: str, value: Any) -> frozenset[ModelValue]:
    if not isinstance(value, frozenset | set) or not all(isinstance(v, ModelValue) for v in value):
        raise SpecConfigError(f"{name} must be a set of model values, got {value!r}")
    return frozenset(value)


def _convs(value: Any) -> tuple[ModelValue, ...]:
    convs = tuple(sorted(_model_values("Convs", value)))
    if not convs:
        raise SpecConfigError("Convs must not be empty")
    return convs


def _tool_ids(value: Any) -> frozenset[ModelValue]:
    return _model_values("ToolIds", value)


def _nat(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise SpecConfigError(f"{name} must be a natural number, got {value!r}")
    return value


def _max_turns(value: Any) -> int:
    return _nat("MaxTurns", value)


def _max_in_flight(value: Any) -> int:
    return _nat("MaxInFlight", value)


def _max_keys(value: Any) -> int:
    keys = _nat("MaxKeys", value)
    if keys < 1:
        raise SpecConfigError(f"MaxKeys must be at least 1, got {value!r}")
    return keys


def _boolean(value: Any, name: str = "GatewayRetry") -> bool:
    if not isinstance(value, bool):
        raise SpecConfigError(f"{name} must be TRUE or FALSE, got {value!r}")
    return value


def _preflight(value: Any) -> bool:
    return _boolean(value, "Preflight")


def _upstream_steps(value: Any) -> bool:
    return _boolean(value, "UpstreamSteps")


def _upstreams(value: Any) -> tuple[ModelValue, ...]:
    ups = tuple(sorted(_model_values("Upstreams", value)))
    if not ups:
        raise SpecConfigError("Upstreams must not be empty")
    return ups


def _max_attempts(value: Any) -> int:
    attempts = _nat("MaxAttempts", value)
    if attempts < 1:
        raise SpecConfigError(f"MaxAttempts must be at least 1, got {value!r}")
    return attempts


@attrs.frozen
class Config:
    """The spec's CONSTANTS, as a TLC cfg assigns them (``Convs`` kept sorted)."""

    Convs: tuple[ModelValue, ...] = attrs.field(converter=_convs)
    ToolIds: frozenset[ModelValue] = attrs.field(converter=_tool_ids)
    MaxTurns: int = attrs.field(converter=_max_turns)
    MaxInFlight: int = attrs.field(converter=_max_in_flight)
    GatewayRetry: bool = attrs.field(converter=_boolean)
    MaxKeys: int = attrs.field(default=1, converter=_max_keys)
    Preflight: bool = attrs.field(default=False, converter=_preflight)
    UpstreamSteps: bool = attrs.field(default=False, converter=_upstream_steps)
    Upstreams: tuple[ModelValue, ...] = attrs.field(
        default=frozenset({ModelValue("u1")}), converter=_upstreams
    )
    MaxAttempts: int = attrs.field(default=1, converter=_max_attempts)
    ANTHROPIC: ModelValue = ModelValue("ANTHROPIC")
    TPX: ModelValue = ModelValue("TPX")
    NONE: ModelValue = ModelValue("NONE")
    _ids: dict[ModelValue, frozenset[ToolId]] = attrs.field(init=False, eq=False, repr=False)
    _all_ids: frozenset[ToolId] = attrs.field(init=False, eq=False, repr=False)

    def __attrs_post_init__(self) -> None:
        ids = {c: frozenset((c, t) for t in self.ToolIds) for c in self.Convs}
        object.__setattr__(self, "_ids", ids)
        object.__setattr__(self, "_all_ids", frozenset().union(*ids.values()))

    @classmethod
    def of(
        cls,
        convs: int,
        tool_ids: int,
        max_turns: int,
        max_in_flight: int | None = None,
        *,
        retry: bool = True,
        max_keys: int = 1,
        preflight: bool = False,
        upstreams: int | None = None,
        max_attempts: int = 1,
    ) -> Config:
        """``Config.of(2, 1, 2)``: Convs = {c1, c2}, ToolIds = {t1}, MaxTurns = 2,
        MaxInFlight = Cardinality(Convs) unless given, GatewayRetry = TRUE unless told,
        MaxKeys = 1 (no rotation) unless given, Preflight as told (FALSE), and with
        *upstreams* given UpstreamSteps = TRUE and Upstreams = {u1, ..} (else {u1}, the
        upstream not modelled), MaxAttempts = *max_attempts*."""
        return cls(
            frozenset(ModelValue(f"c{i}") for i in range(1, convs + 1)),
            frozenset(ModelValue(f"t{i}") for i in range(1, tool_ids + 1)),
            max_turns,
            convs if max_in_flight is None else max_in_flight,
            retry,
            max_keys,
            preflight,
            upstreams is not None,
            frozenset(ModelValue(f"u{i}") for i in range(1, (upstreams or 1) + 1)),
            max_attempts,
        )

    @classmethod
    def from_constants(cls, constants: dict[str, Any]) -> Config:
        names = (
            "Convs",
            "ToolIds",
            "MaxTurns",
            "MaxInFlight",
            "GatewayRetry",
            "MaxKeys",
            "Preflight",
            "UpstreamSteps",
            "Upstreams",
            "MaxAttempts",
        )
        missing = set(names) - constants.keys()
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
        return cls(*(constants[n] for n in names), **extra)

    @classmethod
    def from_cfg(cls, path: str | Path) -> Config:
        """Read the constants from the same .cfg file TLC reads."""
        from tpx.oracle.tlc.cfg import load_cfg

        return cls.from_constants(dict(load_cfg(Path(path)).constants))

    @property
    def Providers(self) -> frozenset[ModelValue]:
        return frozenset({self.ANTHROPIC, self.TPX, self.NONE})

    def Ids(self, c: ModelValue) -> frozenset[ToolId]:
        """``Ids(c) == {<<c, t>> : t \\in ToolIds}``"""
        return self._ids[c]

    @property
    def AllIds(self) -> frozenset[ToolId]:
        """``AllIds == Convs \\X ToolIds``"""
        return self._all_ids

    def Select(self, k: bool, t: bool) -> ModelValue:
        """``Select(k, t) == IF k THEN ANTHROPIC ELSE IF t THEN TPX ELSE NONE``"""
        return self.ANTHROPIC if k else self.TPX if t else self.NONE

    def NativeShape(self, p: ModelValue) -> str:
        """``NativeShape(p) == IF p = TPX THEN "openai" ELSE "messages"``"""
        return "openai" if p == self.TPX else "messages"


@attrs.frozen
class State(SpecState):
    """One state of the gateway spec: the 26 VARIABLES, with the spec's names.

    ``turn`` ... ``signedBy`` and ``up`` ... ``fwd`` but ``health`` are functions over
    ``Convs``, ``health`` over ``Upstreams`` (:class:`~tpx.oracle.values.Function`)."""

    hasKey: bool  # static API key present at boot (shared)
    hasToken: bool  # OAuth bearer token present at boot (shared)
    provider: ModelValue  # provider chosen at boot, shared by all conversations
    key: int  # the key new ids are signed with (shared)
    oldest: int  # the oldest key still accepted (shared)
    turn: Function  # [Convs -> Nat] completed exchanges
    phase: Function  # [Convs -> Phases]
    pending: Function  # [Convs -> ids] the history's obligations
    reqIds: Function  # [Convs -> ids] tool_result ids in the last request
    wireShape: Function  # [Convs -> Shapes] shape of the body on the wire
    wireIds: Function  # [Convs -> ids] tool ids that body carries
    emitted: Function  # [Convs -> ids] ids the conversation's provider last emitted
    gotShape: Function  # [Convs -> Shapes] shape of the last body handed to the client
    lastOutcome: Function  # [Convs -> Outcomes]
    retryable: Function  # [Convs -> BOOLEAN] the last exchange failed: re-send allowed
    calls: Function  # [Convs -> pairs] <<id, call>> of the history's last assistant turn
    hist: Function  # [Convs -> Seq(pairs)] the history's answered rounds
    wireRes: Function  # [Convs -> Seq(pairs)] the rounds the last request carried upstream
    request: Function  # [Convs -> Requests] what the client's last request was
    signedBy: Function  # [Convs -> 0..MaxKeys] the oldest key that signed a history id
    up: Function  # [Convs -> Upstreams \cup {NONE}] the upstream of the current attempt
    health: Function  # [Upstreams -> BOOLEAN] the upstream is in use (shared)
    attempts: Function  # [Convs -> 0..MaxAttempts] attempts of the current client request
    reached: Function  # [Convs -> BOOLEAN] the current attempt reached its upstream
    gens: Function  # [Convs -> Nat] generations the current client request started
    fwd: Function  # [Convs -> Nat] replies whose first byte reached the client

    @classmethod
    def from_record(cls, record: Any) -> State:
        """Build a State from a mapping of the 26 variable names (e.g. parsed TLC output)."""
        variables = variables_of(record, VARS)
        for name in (*PER_CONVERSATION, "health"):
            if not isinstance(variables[name], Function):
                raise ValueError(f"{name} must be a function over Convs, got {record[name]!r}")
        return cls(**variables)


def EXCEPT(f: Function, c: ModelValue, v: Any) -> Function:
    """``[f EXCEPT ![c] = v]``"""
    items = dict(f.items())
    items[c] = v
    return Function(items)


def InFlight(s: State) -> int:
    """``InFlight == Cardinality({c \\in Convs : phase[c] # "idle"})``"""
    return sum(1 for p in s.phase.values() if p != "idle")


def Keys(P: frozenset[Pair]) -> frozenset[ToolId]:
    """``Keys(P) == {p[1] : p \\in P}``"""
    return frozenset(i for i, _ in P)


def Names(P: frozenset[Pair]) -> frozenset[ToolId]:
    """``Names(P) == {p[1] : p \\in P} \\cup {p[2] : p \\in P}``"""
    return frozenset(i for i, _ in P) | frozenset(k for _, k in P)


def Bound(P: frozenset[Pair]) -> bool:
    """``Bound(P) == \\A p \\in P : p[1] = p[2]``"""
    return all(i == k for i, k in P)


def AllRounds(rounds: tuple[frozenset[Pair], ...]) -> frozenset[Pair]:
    """``AllRounds(s) == UNION {s[r] : r \\in 1..Len(s)}``"""
    return frozenset().union(*rounds)


def Rounds(s: State, c: ModelValue) -> tuple[frozenset[Pair], ...]:
    """``Rounds(c) == IF calls[c] = {} THEN hist[c] ELSE Append(hist[c], calls[c])``"""
    calls: frozenset[Pair] = s.calls[c]
    rounds: tuple[frozenset[Pair], ...] = s.hist[c]
    return rounds if not calls else (*rounds, calls)


def Verifies(s: State, c: ModelValue) -> bool:
    """``Verifies(c) == signedBy[c] = 0 \\/ signedBy[c] >= oldest``"""
    signed: int = s.signedBy[c]
    return signed == 0 or signed >= s.oldest


def WrongOf(s: State, c: ModelValue) -> frozenset[str]:
    """``WrongOf(c)``: the wrong requests c's client can send."""
    if not Verifies(s, c):
        return frozenset({"retired"})
    return frozenset({"unknown", "missing", "duplicated"} if s.pending[c] else {"unknown"})


def Healthy(s: State, cfg: Config) -> frozenset[ModelValue]:
    """``Healthy == IF \\E u \\in Upstreams : health[u] THEN {u \\in Upstreams :
    health[u]} ELSE Upstreams``"""
    healthy = frozenset(u for u in cfg.Upstreams if s.health[u])
    return healthy or frozenset(cfg.Upstreams)


def Route(s: State, c: ModelValue, cfg: Config) -> frozenset[ModelValue]:
    """``Route(c) == IF UpstreamSteps THEN Healthy ELSE {up[c]}``"""
    return Healthy(s, cfg) if cfg.UpstreamSteps else frozenset({s.up[c]})
