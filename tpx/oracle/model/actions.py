"""Init and the spec's 7 actions as pure functions, side by side with the spec.

Each action takes a :class:`~tpx.oracle.model.state.State` and the
:class:`~tpx.oracle.model.state.Config` and yields every successor state the action
allows (none when it is not enabled). ``attrs.evolve`` with only the primed
variables is the spec's ``UNCHANGED`` for everything else.

====================================  ===================================
spec/TpxTransport.tla                 here
====================================  ===================================
Init                                  :func:`Init`
CallerSend                            :func:`CallerSend`
CallerAbort                           :func:`CallerAbort`
NoProvider                            :func:`NoProvider`
ProviderReply (\\E ids \\in SUBSET)    :func:`ProviderReply`, :func:`subsets`
ProviderFail                          :func:`ProviderFail`
Deliver                               :func:`Deliver`
Halted                                :func:`Halted`
Next                                  :data:`ACTIONS`, :func:`Next`
====================================  ===================================
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from attrs import evolve

from tpx.oracle.model.common import subsets
from tpx.oracle.model.state import Config, State

__all__ = [
    "ACTIONS",
    "CallerAbort",
    "CallerSend",
    "Deliver",
    "Halted",
    "Init",
    "Next",
    "NoProvider",
    "ProviderFail",
    "ProviderReply",
    "subsets",
]

Action = Callable[[State, Config], Iterator[State]]


def Init(c: Config) -> Iterator[State]:
    for hasKey in (False, True):
        for hasToken in (False, True):
            yield State(
                hasKey=hasKey,
                hasToken=hasToken,
                provider=c.Select(hasKey, hasToken),
                turn=0,
                phase="idle",
                pending=frozenset(),
                reqIds=frozenset(),
                wireShape="messages",
                wireIds=frozenset(),
                emitted=frozenset(),
                gotShape="messages",
                lastOutcome="none",
            )


def CallerSend(s: State, c: Config) -> Iterator[State]:
    if s.phase == "idle" and s.turn < c.MaxTurns and s.provider != c.NONE:
        yield evolve(
            s,
            reqIds=s.pending,
            wireShape=c.NativeShape(s.provider),
            wireIds=s.pending,
            phase="req",
        )


def CallerAbort(s: State, c: Config) -> Iterator[State]:
    if s.phase == "idle" and s.turn < c.MaxTurns and s.provider != c.NONE and s.pending:
        yield evolve(s, lastOutcome="err", pending=frozenset(), turn=s.turn + 1)


def NoProvider(s: State, c: Config) -> Iterator[State]:
    if s.phase == "idle" and s.turn < c.MaxTurns and s.provider == c.NONE:
        yield evolve(s, lastOutcome="err", turn=s.turn + 1)


def ProviderReply(s: State, c: Config) -> Iterator[State]:
    if s.phase == "req":
        for ids in subsets(c.ToolIds):
            yield evolve(
                s,
                emitted=ids,
                wireIds=ids,
                wireShape=c.NativeShape(s.provider),
                phase="resp",
            )


def ProviderFail(s: State, c: Config) -> Iterator[State]:
    if s.phase == "req":
        yield evolve(s, lastOutcome="err", pending=frozenset(), phase="idle", turn=s.turn + 1)


def Deliver(s: State, c: Config) -> Iterator[State]:
    if s.phase == "resp":
        yield evolve(
            s,
            gotShape="messages" if s.wireShape == "openai" else s.wireShape,
            pending=s.wireIds,
            lastOutcome="ok",
            phase="idle",
            turn=s.turn + 1,
        )


def Halted(s: State, c: Config) -> Iterator[State]:
    if s.phase == "idle" and s.turn == c.MaxTurns:
        yield s


#: ``Next``: the disjuncts in the spec's order, by name.
ACTIONS: tuple[tuple[str, Action], ...] = (
    ("CallerSend", CallerSend),
    ("CallerAbort", CallerAbort),
    ("NoProvider", NoProvider),
    ("ProviderReply", ProviderReply),
    ("ProviderFail", ProviderFail),
    ("Deliver", Deliver),
    ("Halted", Halted),
)


def Next(s: State, c: Config) -> Iterator[tuple[str, State]]:
    """Every (action name, successor) pair ``Next`` allows from *s*."""
    for name, action in ACTIONS:
        for t in action(s, c):
            yield name, t
