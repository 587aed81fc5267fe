"""Init and the gateway spec's actions as pure functions, side by side with the spec.

Each per-conversation action takes the :class:`~tpx.oracle.model.gateway.state.State`, the
conversation ``c`` and the :class:`~tpx.oracle.model.gateway.state.Config`, and yields every
successor the action allows (none when it is not enabled). ``attrs.evolve`` with only the
primed variables is the spec's ``UNCHANGED`` for everything else; :func:`EXCEPT` is
``[f EXCEPT ![c] = v]``.

====================================  ===================================
spec/TpxGateway.tla                   here
====================================  ===================================
Init                                  :func:`Init`
CallerSend(c)                         :func:`CallerSend`
CallerAbort(c)                        :func:`CallerAbort`
NoProvider(c)                         :func:`NoProvider`
ProviderReply(c) (SUBSET Ids(c))      :func:`ProviderReply`
ProviderFail(c)                       :func:`ProviderFail`
Deliver(c)                            :func:`Deliver`
ClientGone(c)                         :func:`ClientGone`
Retry(c)                              :func:`Retry`
NewRequest(c)                         :func:`NewRequest`
PromptTooLong(c)                      :func:`PromptTooLong`
UpstreamAccept(c)                     :func:`UpstreamAccept`
Resend(c)                             :func:`Resend`
Failover(c)                           :func:`Failover`
FirstByte(c)                          :func:`FirstByte`
Rotate                                :func:`Rotate`
Recover                               :func:`Recover`
Halted                                :func:`Halted`
Next (\\E c \\in Convs : ...)           :data:`ACTIONS`, :func:`Steps`, :func:`Next`
====================================  ===================================
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from attrs import evolve

from tpx.oracle.model.common import subsets
from tpx.oracle.model.gateway.state import (
    EXCEPT,
    Config,
    InFlight,
    Rounds,
    Route,
    State,
    ToolId,
    Verifies,
    WrongOf,
)
from tpx.oracle.values import Function, ModelValue

__all__ = [
    "ACTIONS",
    "CallerAbort",
    "CallerAbortWith",
    "CallerSend",
    "ClientGone",
    "Deliver",
    "Failover",
    "FirstByte",
    "Halted",
    "Init",
    "NewRequest",
    "Next",
    "NoProvider",
    "PromptTooLong",
    "ProviderFail",
    "ProviderReply",
    "ProviderReplyWith",
    "Recover",
    "Resend",
    "Retry",
    "Rotate",
    "Steps",
    "UpstreamAccept",
]

ConvAction = Callable[[State, ModelValue, Config], Iterator[State]]


def _all(cfg: Config, v: object) -> Function:
    """``[c \\in Convs |-> v]``"""
    return Function(dict.fromkeys(cfg.Convs, v))


def Init(cfg: Config) -> Iterator[State]:
    for hasKey in (False, True):
        for hasToken in (False, True):
            yield State(
                hasKey=hasKey,
                hasToken=hasToken,
                provider=cfg.Select(hasKey, hasToken),
                key=1,
                oldest=1,
                turn=_all(cfg, 0),
                phase=_all(cfg, "idle"),
                pending=_all(cfg, frozenset()),
                reqIds=_all(cfg, frozenset()),
                wireShape=_all(cfg, "messages"),
                wireIds=_all(cfg, frozenset()),
                emitted=_all(cfg, frozenset()),
                gotShape=_all(cfg, "messages"),
                lastOutcome=_all(cfg, "none"),
                retryable=_all(cfg, False),
                calls=_all(cfg, frozenset()),
                hist=_all(cfg, ()),
                wireRes=_all(cfg, ()),
                request=_all(cfg, "none"),
                signedBy=_all(cfg, 0),
                up=_all(cfg, cfg.NONE),
                health=Function(dict.fromkeys(cfg.Upstreams, True)),
                attempts=_all(cfg, 0),
                reached=_all(cfg, False),
                gens=_all(cfg, 0),
                fwd=_all(cfg, 0),
            )


def NewRequest(s: State, c: ModelValue, cfg: Config) -> Iterator[State]:
    """``NewRequest(c)``: *s* with the upstream variables of a new client request's first
    attempt, one state per upstream of ``Route(c)`` (the other variables as in *s*)."""
    for u in sorted(Route(s, c, cfg)):
        yield evolve(
            s,
            up=EXCEPT(s.up, c, u),
            attempts=EXCEPT(s.attempts, c, 1 if cfg.UpstreamSteps else 0),
            reached=EXCEPT(s.reached, c, False),
            gens=EXCEPT(s.gens, c, 0),
            fwd=EXCEPT(s.fwd, c, 0),
        )


def CallerSend(s: State, c: ModelValue, cfg: Config) -> Iterator[State]:
    if (
        s.phase[c] == "idle"
        and s.turn[c] < cfg.MaxTurns
        and s.provider != cfg.NONE
        and InFlight(s) < cfg.MaxInFlight
        and Verifies(s, c)
    ):
        yield from NewRequest(
            evolve(
                s,
                reqIds=EXCEPT(s.reqIds, c, s.pending[c]),
                wireShape=EXCEPT(s.wireShape, c, cfg.NativeShape(s.provider)),
                wireIds=EXCEPT(s.wireIds, c, s.pending[c]),
                wireRes=EXCEPT(s.wireRes, c, Rounds(s, c)),
                request=EXCEPT(s.request, c, "ok"),
                phase=EXCEPT(s.phase, c, "req"),
                retryable=EXCEPT(s.retryable, c, False),
            ),
            c,
            cfg,
        )


def CallerAbort(s: State, c: ModelValue, cfg: Config) -> Iterator[State]:
    if (
        s.phase[c] == "idle"
        and s.turn[c] < cfg.MaxTurns
        and s.provider != cfg.NONE
        and (cfg.GatewayRetry or s.pending[c])
    ):
        for r in sorted(WrongOf(s, c)):
            yield from CallerAbortWith(s, c, cfg, r)


def CallerAbortWith(s: State, c: ModelValue, cfg: Config, r: str) -> Iterator[State]:
    """CallerAbort(c) for one witness *r* of ``\\E r \\in WrongOf(c)`` (the guard is
    :func:`CallerAbort`'s; the monitor passes the request it read)."""
    if (
        s.phase[c] == "idle"
        and s.turn[c] < cfg.MaxTurns
        and s.provider != cfg.NONE
        and (cfg.GatewayRetry or s.pending[c])
        and r in WrongOf(s, c)
    ):
        yield evolve(
            s,
            request=EXCEPT(s.request, c, r),
            lastOutcome=EXCEPT(s.lastOutcome, c, "err"),
            pending=s.pending if cfg.GatewayRetry else EXCEPT(s.pending, c, frozenset()),
            calls=s.calls if cfg.GatewayRetry else EXCEPT(s.calls, c, frozenset()),
            turn=EXCEPT(s.turn, c, s.turn[c] + 1),
            retryable=EXCEPT(s.retryable, c, False),
        )


def NoProvider(s: State, c: ModelValue, cfg: Config) -> Iterator[State]:
    if s.phase[c] == "idle" and s.turn[c] < cfg.MaxTurns and s.provider == cfg.NONE:
        yield evolve(
            s,
            lastOutcome=EXCEPT(s.lastOutcome, c, "err"),
            turn=EXCEPT(s.turn, c, s.turn[c] + 1),
        )


def ProviderReply(s: State, c: ModelValue, cfg: Config) -> Iterator[State]:
    for ids in subsets(cfg.Ids(c)):
        yield from ProviderReplyWith(s, c, cfg, ids)


def ProviderReplyWith(
    s: State, c: ModelValue, cfg: Config, ids: frozenset[ToolId]
) -> Iterator[State]:
    """ProviderReply(c) for one witness of ``\\E ids \\in SUBSET Ids(c)`` (the monitor
    uses it with the ids a provider really emitted instead of enumerating subsets)."""
    if s.phase[c] == "req" and (not cfg.UpstreamSteps or s.reached[c]) and ids <= cfg.Ids(c):
        yield evolve(
            s,
            emitted=EXCEPT(s.emitted, c, ids),
            wireIds=EXCEPT(s.wireIds, c, ids),
            wireShape=EXCEPT(s.wireShape, c, cfg.NativeShape(s.provider)),
            phase=EXCEPT(s.phase, c, "resp"),
        )


def _fail(s: State, c: ModelValue, cfg: Config) -> State:
    """The effect ProviderFail(c) and ClientGone(c) share."""
    return evolve(
        s,
        lastOutcome=EXCEPT(s.lastOutcome, c, "err"),
        pending=s.pending if cfg.GatewayRetry else EXCEPT(s.pending, c, frozenset()),
        calls=s.calls if cfg.GatewayRetry else EXCEPT(s.calls, c, frozenset()),
        phase=EXCEPT(s.phase, c, "idle"),
        turn=EXCEPT(s.turn, c, s.turn[c] + 1),
        retryable=EXCEPT(s.retryable, c, cfg.GatewayRetry),
    )


def ProviderFail(s: State, c: ModelValue, cfg: Config) -> Iterator[State]:
    if s.phase[c] == "req":
        yield _fail(s, c, cfg)


def ClientGone(s: State, c: ModelValue, cfg: Config) -> Iterator[State]:
    if s.phase[c] == "req":
        yield _fail(s, c, cfg)


def Retry(s: State, c: ModelValue, cfg: Config) -> Iterator[State]:
    if (
        cfg.GatewayRetry
        and s.retryable[c]
        and s.phase[c] == "idle"
        and s.turn[c] < cfg.MaxTurns
        and InFlight(s) < cfg.MaxInFlight
        and Verifies(s, c)
    ):
        yield from NewRequest(
            evolve(
                s,
                wireShape=EXCEPT(s.wireShape, c, cfg.NativeShape(s.provider)),
                wireIds=EXCEPT(s.wireIds, c, s.reqIds[c]),
                wireRes=EXCEPT(s.wireRes, c, Rounds(s, c)),
                request=EXCEPT(s.request, c, "ok"),
                phase=EXCEPT(s.phase, c, "req"),
                retryable=EXCEPT(s.retryable, c, False),
            ),
            c,
            cfg,
        )


def Deliver(s: State, c: ModelValue, cfg: Config) -> Iterator[State]:
    if s.phase[c] == "resp":
        shape = s.wireShape[c]
        ids = s.wireIds[c]
        signed = s.signedBy[c]
        yield evolve(
            s,
            gotShape=EXCEPT(s.gotShape, c, "messages" if shape == "openai" else shape),
            pending=EXCEPT(s.pending, c, ids),
            calls=EXCEPT(s.calls, c, frozenset((i, i) for i in ids)),
            hist=EXCEPT(s.hist, c, s.wireRes[c]),
            signedBy=EXCEPT(
                s.signedBy, c, s.key if s.provider == cfg.TPX and ids and signed == 0 else signed
            ),
            lastOutcome=EXCEPT(s.lastOutcome, c, "ok"),
            phase=EXCEPT(s.phase, c, "idle"),
            turn=EXCEPT(s.turn, c, s.turn[c] + 1),
        )


def PromptTooLong(s: State, c: ModelValue, cfg: Config) -> Iterator[State]:
    if (
        cfg.Preflight
        and s.phase[c] == "idle"
        and s.turn[c] < cfg.MaxTurns
        and s.provider != cfg.NONE
        and Verifies(s, c)
    ):
        yield evolve(
            s,
            request=EXCEPT(s.request, c, "long"),
            lastOutcome=EXCEPT(s.lastOutcome, c, "err"),
            turn=EXCEPT(s.turn, c, s.turn[c] + 1),
            retryable=EXCEPT(s.retryable, c, False),
        )


def UpstreamAccept(s: State, c: ModelValue, cfg: Config) -> Iterator[State]:
    if cfg.UpstreamSteps and s.phase[c] == "req" and not s.reached[c]:
        yield evolve(s, reached=EXCEPT(s.reached, c, True), gens=EXCEPT(s.gens, c, s.gens[c] + 1))


def Resend(s: State, c: ModelValue, cfg: Config) -> Iterator[State]:
    if (
        cfg.UpstreamSteps
        and s.phase[c] == "req"
        and not s.reached[c]
        and s.attempts[c] < cfg.MaxAttempts
    ):
        yield evolve(
            s,
            attempts=EXCEPT(s.attempts, c, s.attempts[c] + 1),
            reached=EXCEPT(s.reached, c, False),
        )


def Failover(s: State, c: ModelValue, cfg: Config) -> Iterator[State]:
    if (
        cfg.UpstreamSteps
        and s.phase[c] == "req"
        and s.fwd[c] == 0
        and s.attempts[c] < cfg.MaxAttempts
    ):
        current = s.up[c]
        for u in cfg.Upstreams:
            if u != current and s.health[u]:
                yield evolve(
                    s,
                    up=EXCEPT(s.up, c, u),
                    health=EXCEPT(s.health, current, False),
                    attempts=EXCEPT(s.attempts, c, s.attempts[c] + 1),
                    reached=EXCEPT(s.reached, c, False),
                    gens=EXCEPT(s.gens, c, s.gens[c] - 1 if s.reached[c] else s.gens[c]),
                )


def FirstByte(s: State, c: ModelValue, cfg: Config) -> Iterator[State]:
    if cfg.UpstreamSteps and s.phase[c] == "req" and s.reached[c] and s.fwd[c] == 0:
        yield evolve(s, fwd=EXCEPT(s.fwd, c, s.fwd[c] + 1))


def Rotate(s: State, cfg: Config) -> Iterator[State]:
    if s.provider == cfg.TPX and s.key < cfg.MaxKeys:
        for oldest in range(s.oldest, s.key + 2):
            yield evolve(s, key=s.key + 1, oldest=oldest)


def Recover(s: State, cfg: Config) -> Iterator[State]:
    for u in cfg.Upstreams:
        if not s.health[u]:
            yield evolve(s, health=EXCEPT(s.health, u, True))


def Halted(s: State, cfg: Config) -> Iterator[State]:
    if all(s.phase[c] == "idle" and s.turn[c] == cfg.MaxTurns for c in cfg.Convs):
        yield s


#: ``Next``'s per-conversation disjuncts in the spec's order, by name.
ACTIONS: tuple[tuple[str, ConvAction], ...] = (
    ("CallerSend", CallerSend),
    ("CallerAbort", CallerAbort),
    ("NoProvider", NoProvider),
    ("ProviderReply", ProviderReply),
    ("ProviderFail", ProviderFail),
    ("Deliver", Deliver),
    ("ClientGone", ClientGone),
    ("Retry", Retry),
    ("PromptTooLong", PromptTooLong),
    ("UpstreamAccept", UpstreamAccept),
    ("Resend", Resend),
    ("Failover", Failover),
    ("FirstByte", FirstByte),
)


def Steps(s: State, cfg: Config) -> Iterator[tuple[str, ModelValue | None, State]]:
    """Every (action name, conversation, successor) ``Next`` allows from *s*; the
    conversation is ``None`` for Rotate, Recover and Halted."""
    for c in cfg.Convs:
        for name, action in ACTIONS:
            for t in action(s, c, cfg):
                yield name, c, t
    for t in Rotate(s, cfg):
        yield "Rotate", None, t
    for t in Recover(s, cfg):
        yield "Recover", None, t
    for t in Halted(s, cfg):
        yield "Halted", None, t


def Next(s: State, cfg: Config) -> Iterator[tuple[str, State]]:
    """Every (action name, successor) pair ``Next`` allows from *s*."""
    for name, _, t in Steps(s, cfg):
        yield name, t
