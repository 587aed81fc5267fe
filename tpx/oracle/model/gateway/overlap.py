"""The Python mirror of spec/TpxGatewayOverlap.tla: a second exchange of a conversation (the
fork) while its main exchange is in flight.

The spec EXTENDS TpxGateway: its state is TpxGateway's ``vars`` (here :attr:`OverlapState.main`,
a :class:`~tpx.oracle.model.gateway.state.State`) and the fork's seven variables; every main
step is a TpxGateway action with the fork's variables unchanged, so it is that action's
mirror (:mod:`~tpx.oracle.model.gateway.actions`) on ``main``.

===================================  =================================================
spec/TpxGatewayOverlap.tla           here
===================================  =================================================
CONSTANTS MaxForks                   :class:`OverlapConfig` (TpxGateway's and MaxForks)
VARIABLES fphase ... forks           :class:`OverlapState` (``main``: TpxGateway's vars)
forkVars, overlapVars                :data:`FORK_VARS`, :data:`OVERLAP_VARS`
RoundIds(r)                          :func:`RoundIds`
Whose                                :data:`Whose`
ForkRequests(c)                      :func:`ForkRequests`
OverlapInit                          :func:`OverlapInit`
ForkSend(c)                          :func:`ForkSend`
ForkReply(c)                         :func:`ForkReply`
ForkFail(c)                          :func:`ForkFail`
ForkDeliver(c)                       :func:`ForkDeliver`
OverlapNext                          :data:`FORK_ACTIONS`, :func:`OverlapNext`
ForkTypeOK                           :func:`ForkTypeOK`
OwnReplies                           :func:`OwnReplies`
ForkPairingInv                       :func:`ForkPairingInv`
ForkNoCrossPairing                   :func:`ForkNoCrossPairing`
(the cfg's INVARIANTS, PROPERTY)     :data:`INVARIANTS`, :func:`properties`
===================================  =================================================

TLC names a step by the disjunct of ``OverlapNext`` it took when that disjunct is an
action's name (``ForkSend`` ...); a main step is a conjunction (``CallerSend(c) /\\
UNCHANGED forkVars``), which TLC names after ``OverlapNext`` itself, and so does
:func:`OverlapNext` (:data:`MAIN_STEP`), so the mirror's graph is TLC's, label for label.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import attrs
from attrs import evolve

from tpx.errors import SpecConfigError
from tpx.oracle.model.common import Phases, SpecState, subsets, variables_of
from tpx.oracle.model.explore import ExploreResult, ProgressFn, Verdict, bfs
from tpx.oracle.model.gateway import actions as gw
from tpx.oracle.model.gateway import invariants as gwinv
from tpx.oracle.model.gateway import refinement
from tpx.oracle.model.gateway.state import (
    EXCEPT,
    VARS,
    AllRounds,
    Bound,
    Config,
    Names,
    Pair,
    Rounds,
    State,
    ToolId,
    Verifies,
)
from tpx.oracle.model.registry import MirroredSpec, register
from tpx.oracle.values import Function, ModelValue, Record

__all__ = [
    "FORK_ACTIONS",
    "FORK_VARS",
    "INVARIANTS",
    "MAIN_STEP",
    "OVERLAP",
    "OVERLAP_VARS",
    "ForkDeliver",
    "ForkFail",
    "ForkNoCrossPairing",
    "ForkPairingInv",
    "ForkReply",
    "ForkRequests",
    "ForkSend",
    "ForkTypeOK",
    "OverlapConfig",
    "OverlapInit",
    "OverlapNext",
    "OverlapState",
    "OwnReplies",
    "RoundIds",
    "Whose",
    "explore",
    "properties",
]

#: ``forkVars``, in the spec's order; ``overlapVars == <<vars, forkVars>>``.
FORK_VARS: tuple[str, ...] = ("fphase", "fres", "fwire", "femitted", "fgot", "fgotFor", "forks")
OVERLAP_VARS: tuple[str, ...] = (*VARS, *FORK_VARS)

#: ``Whose == {"none", "main", "fork"}``: whose request a reply answers.
Whose = frozenset({"none", "main", "fork"})

#: The label TLC gives a main step (a disjunct of OverlapNext that is a conjunction).
MAIN_STEP = "OverlapNext"

Rounds_ = tuple[frozenset[Pair], ...]


def _max_forks(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise SpecConfigError(f"MaxForks must be a natural number, got {value!r}")
    return value


@attrs.frozen
class OverlapConfig(Config):
    """TpxGateway's CONSTANTS and ``MaxForks``, as a TLC cfg assigns them."""

    MaxForks: int = attrs.field(default=1, kw_only=True, converter=_max_forks)

    @classmethod
    def from_constants(cls, constants: dict[str, Any]) -> OverlapConfig:
        if "MaxForks" not in constants:
            raise SpecConfigError("cfg does not assign constant(s) ['MaxForks']")
        base = Config.from_constants(constants)  # TpxGateway's, refused as it refuses them
        return cls(
            **{n: constants[n] for n in _GATEWAY_CONSTANTS},
            ANTHROPIC=base.ANTHROPIC,
            TPX=base.TPX,
            NONE=base.NONE,
            MaxForks=constants["MaxForks"],
        )

    @classmethod
    def from_cfg(cls, path: str | Path) -> OverlapConfig:
        """Read the constants from the same .cfg file TLC reads."""
        from tpx.oracle.tlc.cfg import load_cfg

        return cls.from_constants(dict(load_cfg(Path(path)).constants))


_GATEWAY_CONSTANTS = (
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


@attrs.frozen
class OverlapState(SpecState):
    """One state of the overlap spec: TpxGateway's 26 variables (``main``) and the fork's
    seven, functions over ``Convs``."""

    main: State  # TpxGateway's vars: the main exchange and the conversation's history
    fphase: Function  # [Convs -> Phases] where c's fork exchange is
    fres: Function  # [Convs -> Seq(pairs)] the rounds the fork's request carried upstream
    fwire: Function  # [Convs -> ids] the ids its request answers, then those of its reply
    femitted: Function  # [Convs -> ids] ids the provider emitted for the fork's request
    fgot: Function  # [Convs -> ids] tool_use ids of the reply handed to the fork's client
    fgotFor: Function  # [Convs -> Whose] whose request that reply answers
    forks: Function  # [Convs -> 0..MaxForks] fork exchanges c started

    def vars(self) -> tuple[Any, ...]:
        """``overlapVars``, flat: TpxGateway's vars, then forkVars."""
        return (*self.main.vars(), *(getattr(self, v) for v in FORK_VARS))

    def as_record(self) -> Record:
        return Record({**self.main.as_record(), **{v: getattr(self, v) for v in FORK_VARS}})

    @classmethod
    def from_record(cls, record: Any) -> OverlapState:
        """Build a state from a mapping of the 33 variable names (e.g. parsed TLC output)."""
        variables = variables_of(record, OVERLAP_VARS)
        main = State.from_record({v: variables[v] for v in VARS})
        return cls(main, **{v: variables[v] for v in FORK_VARS})


def RoundIds(r: frozenset[Pair]) -> frozenset[ToolId]:
    """``RoundIds(r) == {p[1] : p \\in r}``"""
    return frozenset(i for i, _ in r)


def ForkRequests(s: State, c: ModelValue) -> frozenset[tuple[Rounds_, frozenset[ToolId]]]:
    """``ForkRequests(c)``: c's history again, its rounds cut after round k answering
    round k's calls, or the empty history (a set: equal requests are one)."""
    rounds = Rounds(s, c)
    return frozenset(
        {
            (rounds, s.pending[c]),
            *((rounds[:k], RoundIds(rounds[k - 1])) for k in range(1, len(rounds) + 1)),
            ((), frozenset()),
        }
    )


def _all(cfg: Config, v: object) -> Function:
    """``[c \\in Convs |-> v]``"""
    return Function(dict.fromkeys(cfg.Convs, v))


def OverlapInit(cfg: OverlapConfig) -> Iterator[OverlapState]:
    for s in gw.Init(cfg):
        yield OverlapState(
            s,
            fphase=_all(cfg, "idle"),
            fres=_all(cfg, ()),
            fwire=_all(cfg, frozenset()),
            femitted=_all(cfg, frozenset()),
            fgot=_all(cfg, frozenset()),
            fgotFor=_all(cfg, "none"),
            forks=_all(cfg, 0),
        )


def ForkSend(s: OverlapState, c: ModelValue, cfg: OverlapConfig) -> Iterator[OverlapState]:
    if (
        s.main.phase[c] != "idle"
        and s.fphase[c] == "idle"
        and s.forks[c] < cfg.MaxForks
        and Verifies(s.main, c)
    ):
        for rounds, ids in sorted(ForkRequests(s.main, c), key=repr):
            yield evolve(
                s,
                fres=EXCEPT(s.fres, c, rounds),
                fwire=EXCEPT(s.fwire, c, ids),
                fphase=EXCEPT(s.fphase, c, "req"),
                forks=EXCEPT(s.forks, c, s.forks[c] + 1),
                femitted=EXCEPT(s.femitted, c, frozenset()),
                fgot=EXCEPT(s.fgot, c, frozenset()),
                fgotFor=EXCEPT(s.fgotFor, c, "none"),
            )


def ForkReply(s: OverlapState, c: ModelValue, cfg: OverlapConfig) -> Iterator[OverlapState]:
    if s.fphase[c] == "req":
        for ids in subsets(cfg.Ids(c)):
            yield evolve(
                s,
                femitted=EXCEPT(s.femitted, c, ids),
                fwire=EXCEPT(s.fwire, c, ids),
                fphase=EXCEPT(s.fphase, c, "resp"),
            )


def ForkFail(s: OverlapState, c: ModelValue, cfg: OverlapConfig) -> Iterator[OverlapState]:
    if s.fphase[c] == "req":
        yield evolve(
            s,
            fphase=EXCEPT(s.fphase, c, "idle"),
            fgot=EXCEPT(s.fgot, c, frozenset()),
            fgotFor=EXCEPT(s.fgotFor, c, "none"),
        )


def ForkDeliver(s: OverlapState, c: ModelValue, cfg: OverlapConfig) -> Iterator[OverlapState]:
    if s.fphase[c] == "resp":
        yield evolve(
            s,
            fgot=EXCEPT(s.fgot, c, s.fwire[c]),
            fgotFor=EXCEPT(s.fgotFor, c, "fork"),
            fphase=EXCEPT(s.fphase, c, "idle"),
        )


ForkAction = Callable[[OverlapState, ModelValue, OverlapConfig], Iterator[OverlapState]]

#: The fork's disjuncts of ``OverlapNext``, in the spec's order, by name.
FORK_ACTIONS: tuple[tuple[str, ForkAction], ...] = (
    ("ForkSend", ForkSend),
    ("ForkReply", ForkReply),
    ("ForkFail", ForkFail),
    ("ForkDeliver", ForkDeliver),
)


def OverlapNext(s: OverlapState, cfg: OverlapConfig) -> Iterator[tuple[str, OverlapState]]:
    """Every (label, successor) ``OverlapNext`` allows: each TpxGateway step on ``main``
    with forkVars unchanged (labelled :data:`MAIN_STEP`, as TLC does), and the fork's."""
    for c in cfg.Convs:
        for _, action in gw.ACTIONS:
            for t in action(s.main, c, cfg):
                yield MAIN_STEP, evolve(s, main=t)
        for name, fork in FORK_ACTIONS:
            for u in fork(s, c, cfg):
                yield name, u
    for shared in (gw.Rotate, gw.Recover, gw.Halted):
        for t in shared(s.main, cfg):
            yield MAIN_STEP, evolve(s, main=t)


# -- invariants and properties ---------------------------------------------------------------


def ForkTypeOK(s: OverlapState, cfg: OverlapConfig) -> bool:
    def fn(f: Any, ok: Callable[[Any], bool]) -> bool:
        return isinstance(f, Function) and set(f) == set(cfg.Convs) and all(map(ok, f.values()))

    def ids(v: Any) -> bool:
        return isinstance(v, frozenset) and v <= cfg.AllIds

    def rounds(v: Any) -> bool:
        return isinstance(v, tuple) and all(
            isinstance(r, frozenset)
            and all(isinstance(p, tuple) and len(p) == 2 and set(p) <= cfg.AllIds for p in r)
            for r in v
        )

    def count(v: Any) -> bool:
        return isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= cfg.MaxForks

    return (
        fn(s.fphase, lambda v: v in Phases)
        and fn(s.fres, rounds)
        and fn(s.fwire, ids)
        and fn(s.femitted, ids)
        and fn(s.fgot, ids)
        and fn(s.fgotFor, lambda v: v in Whose)
        and fn(s.forks, count)
    )


def OwnReplies(s: OverlapState, cfg: OverlapConfig) -> bool:
    return all(
        s.fgotFor[c] in {"none", "fork"} and (s.fgotFor[c] != "fork" or s.fgot[c] == s.femitted[c])
        for c in cfg.Convs
    )


def ForkPairingInv(s: OverlapState, cfg: OverlapConfig) -> bool:
    return all(
        Bound(AllRounds(s.fres[c]))
        and (s.fphase[c] != "req" or s.fwire[c] <= Names(AllRounds(s.fres[c])))
        and (s.fphase[c] != "resp" or s.fwire[c] == s.femitted[c])
        for c in cfg.Convs
    )


def ForkNoCrossPairing(s: OverlapState, cfg: OverlapConfig) -> bool:
    return all(
        not (cfg.Ids(d) & (s.fwire[c] | s.femitted[c] | s.fgot[c] | Names(AllRounds(s.fres[c]))))
        for c in cfg.Convs
        for d in cfg.Convs
        if c != d
    )


Invariant = Callable[[OverlapState, OverlapConfig], bool]


def _on_main(invariant: gwinv.Invariant) -> Invariant:
    """A TpxGateway invariant, which reads TpxGateway's variables only."""

    def on_main(s: OverlapState, cfg: OverlapConfig) -> bool:
        return invariant(s.main, cfg)

    return on_main


#: The cfgs' INVARIANTS, in their order: TpxGateway's (on ``main``), then the fork's.
INVARIANTS: tuple[tuple[str, Invariant], ...] = (
    *((name, _on_main(inv)) for name, inv in gwinv.INVARIANTS),
    ("ForkTypeOK", ForkTypeOK),
    ("OwnReplies", OwnReplies),
    ("ForkPairingInv", ForkPairingInv),
    ("ForkNoCrossPairing", ForkNoCrossPairing),
)

StepProperty = Callable[[OverlapState, OverlapState], bool]


def properties(cfg: OverlapConfig) -> tuple[tuple[str, StepProperty], ...]:
    """The PROPERTY names the mirror checks, each on a step ``s -> t``: TpxGateway's step
    properties, ``Refinement`` and ``RefinementUpToErrors`` (their ``[][...]_vars``
    conjuncts; a fork step leaves ``vars`` unchanged: a stutter of them), on ``main``."""
    found: list[tuple[str, Callable[[State, State], bool]]] = list(gwinv.PROPERTIES)
    found.append(("Refinement", lambda s, t: refinement.RefinementStep(s, t, cfg)))
    found.append(
        ("RefinementUpToErrors", lambda s, t: refinement.RefinementUpToErrorsStep(s, t, cfg))
    )

    def on_main(prop: Callable[[State, State], bool]) -> StepProperty:
        return lambda s, t: prop(s.main, t.main)

    return tuple((name, on_main(prop)) for name, prop in found)


#: The step properties with a conjunct on the initial states (``\\A c : Seed(c)!Init``).
_INIT_CONJUNCT = frozenset({"Refinement", "RefinementUpToErrors"})


def explore(
    config: OverlapConfig,
    *,
    check_deadlock: bool = True,
    keep_graph: bool = False,
    init: Callable[[OverlapConfig], Iterable[OverlapState]] = OverlapInit,
    next: Callable[[OverlapState, OverlapConfig], Iterable[tuple[str, OverlapState]]] = (
        OverlapNext
    ),
    invariants: Iterable[str] | None = None,
    checked: Iterable[str] | None = None,
    on_progress: ProgressFn | None = None,
) -> ExploreResult:
    """Explore every reachable state of the overlap spec, as TLC does (stopping at the first
    violation), checking the INVARIANTS named in *invariants* and the PROPERTY names in
    *checked* (``None``: what TpxGatewayOverlap.cfg names). Tests pass a mutant's *next*."""
    wanted = _CFG_INVARIANTS if invariants is None else frozenset(invariants)
    props = _CFG_PROPERTIES if checked is None else frozenset(checked)
    steps = [(n, p) for n, p in properties(config) if n in props]
    for name in sorted(props & _INIT_CONJUNCT):
        if not all(refinement.RefinementInit(s.main, config) for s in init(config)):
            result = bfs(
                config,
                check_deadlock=False,
                keep_graph=False,
                init=init,
                next=lambda s, c: (),
                invariants=(),
                properties=(),
            )
            return attrs.evolve(result, verdict=Verdict("action_property", name))
    return bfs(
        config,
        check_deadlock=check_deadlock,
        keep_graph=keep_graph,
        init=init,
        next=next,
        invariants=[(n, inv) for n, inv in INVARIANTS if n in wanted],
        properties=steps,
        on_progress=on_progress,
    )


#: What spec/TpxGatewayOverlap.cfg checks.
_CFG_INVARIANTS = frozenset(n for n, _ in INVARIANTS)
_CFG_PROPERTIES = frozenset({*(n for n, _ in gwinv.PROPERTIES), "RefinementUpToErrors"})


#: spec/TpxGatewayOverlap.tla, as shipped in tpx/oracle/specs and implemented by this module.
OVERLAP = register(
    MirroredSpec(
        "TpxGatewayOverlap",
        invariants=tuple(name for name, _ in INVARIANTS),
        properties=(*(n for n, _ in gwinv.PROPERTIES), "Refinement", "RefinementUpToErrors"),
        specifications=("OverlapSpec",),
        init="OverlapInit",
        next="OverlapNext",
    )
)
