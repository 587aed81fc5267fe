"""The gateway spec read on one conversation: what the online monitor steps, compactly.

:mod:`tpx.oracle.model.gateway.monitor` checks one conversation's steps at a time. This module
is ``spec/TpxGateway.tla`` projected onto that conversation ``c``: :class:`ConvState`
holds the 13 variables with the spec's names, each ``f[c]`` of a per-conversation
function as a plain field, so ``[f EXCEPT ![c] = v]`` is ``EXCEPT(s, f=v)`` and
``UNCHANGED`` is every field not replaced. The rest of the gateway enters through
:class:`Context`: the constants, the boot selection, and how many *other* conversations
are in flight (``InFlight`` counts them too) and which ids they hold (NoCrossPairing).

Each action returns the one successor it allows from ``s`` (``None`` when not enabled):
the per-conversation actions are deterministic once ProviderReply's witness ``ids`` is
given, so the monitor checks a step by computing that successor instead of generating
every successor of a whole-gateway state. Tool ids are strings; an id variable is a
frozenset of them, or, when an id repeats, their sorted tuple (:func:`idset`): the
monitor with ``to_wire`` compares the wire side, where a provider may repeat an id, as a
multiset, and the two forms keep equality that of multisets.
``tests/oracle/model/gateway/test_gateway_conversation.py`` proves this module agrees with the
reference mirror (:mod:`~tpx.oracle.model.gateway.actions`,
:mod:`~tpx.oracle.model.gateway.invariants`)
on every edge of the gateway cfgs' state graphs, on every one-conversation state of a
small domain, and on the seeded bugs' steps.

==================================  =====================================
spec/TpxGateway.tla                 here
==================================  =====================================
VARIABLES (at one ``c``)            :class:`ConvState`
CONSTANTS, the other conversations  :class:`Context`
Select, NativeShape, InFlight       :func:`Select`, :func:`NativeShape`, :func:`InFlight`
Init (at one ``c``)                 :func:`Init`
CallerSend(c) ... PromptTooLong(c)  :func:`CallerSend` ... :func:`PromptTooLong`, :data:`ACTIONS`
UpstreamAccept(c) ... FirstByte(c)  stutters at the 13 variables (:data:`UPSTREAM_STEPS`; their
                                    own variables: :mod:`~tpx.oracle.model.gateway.attempts`)
TypeOK ... RetryInv (at one ``c``)  :func:`TypeOK` ... :func:`RetryInv`, :data:`INVARIANTS`
SelectionStable                     :func:`SelectionStable` (against the boot selection)
==================================  =====================================
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any, NamedTuple

__all__ = [
    "ACTIONS",
    "EXCEPT",
    "INVARIANTS",
    "LOCAL",
    "UPSTREAM_STEPS",
    "CallerAbort",
    "CallerSend",
    "ClientGone",
    "Context",
    "ConvState",
    "Deliver",
    "InFlight",
    "Init",
    "NativeShape",
    "NoProvider",
    "PromptTooLong",
    "ProviderFail",
    "ProviderReply",
    "Retry",
    "Same",
    "Select",
    "SelectionStable",
    "Sent",
    "idset",
    "step",
]

#: An id variable's value (see :func:`idset`).
Ids = frozenset[str] | tuple[str, ...]
Providers = frozenset({"ANTHROPIC", "TPX", "NONE"})
Shapes = frozenset({"messages", "openai"})
Phases = frozenset({"idle", "req", "resp"})
Outcomes = frozenset({"none", "ok", "err"})
_NONE: frozenset[str] = frozenset()
_IDS = frozenset({frozenset, tuple})


class ConvState(NamedTuple):
    """One conversation's view of a gateway state: the 13 VARIABLES, ``f[c]`` for each
    per-conversation ``f``. Fields hold what an event reported (TypeOK judges them)."""

    hasKey: Any  # shared, chosen at boot
    hasToken: Any  # shared, chosen at boot
    provider: Any  # shared: "ANTHROPIC", "TPX" or "NONE"
    turn: Any
    phase: Any
    pending: Ids
    reqIds: Ids
    wireShape: Any
    wireIds: Ids
    emitted: Ids
    gotShape: Any
    lastOutcome: Any
    retryable: Any


class Context(NamedTuple):
    """The constants, and the rest of the gateway as conversation ``c`` sees it."""

    boot: tuple[bool, bool, str]
    """``<<hasKey, hasToken, provider>>`` as the gateway booted (SelectionStable)."""
    GatewayRetry: bool
    MaxTurns: int
    MaxInFlight: int
    others_in_flight: int
    """``Cardinality({d \\in Convs \\ {c} : phase[d] # "idle"})``"""
    foreign: tuple[str, Hashable] | None = None
    """An id of this conversation's state that another live conversation holds (its first,
    with that conversation), or ``None``: the part of NoCrossPairing that is not local."""
    verifies: bool = True
    """``Verifies(c)``: every id of the conversation's history is signed by a key still
    accepted (the shared keys and the history's ``signedBy``; the gateway refuses a
    request whose ids do not verify before any step, so its monitor passes ``True``)."""
    Preflight: bool = False
    """The constant Preflight: the gateway refuses a request too long for the upstream's
    window before the wire (PromptTooLong)."""


def idset(ids: Any) -> Ids:
    """A collection of id strings as an id variable's value: a frozenset, or the sorted
    tuple when an id repeats (a multiset; never equal to a set, which has no repeats)."""
    unique = frozenset(ids)
    return unique if len(unique) == len(ids) else tuple(sorted(ids))


def Select(k: bool, t: bool) -> str:
    """``Select(k, t) == IF k THEN ANTHROPIC ELSE IF t THEN TPX ELSE NONE``"""
    return "ANTHROPIC" if k else "TPX" if t else "NONE"


def NativeShape(p: str) -> str:
    """``NativeShape(p) == IF p = TPX THEN "openai" ELSE "messages"``"""
    return "openai" if p == "TPX" else "messages"


def InFlight(s: ConvState, g: Context) -> int:
    """``InFlight``: the other conversations in flight, and this one."""
    return g.others_in_flight + (0 if s.phase == "idle" else 1)


def Init(g: Context) -> ConvState:
    """Init, at ``c``, with the boot's credentials (``provider = Select(hasKey, hasToken)``)."""
    hasKey, hasToken, _ = g.boot
    return ConvState(
        hasKey=hasKey,
        hasToken=hasToken,
        provider=Select(hasKey, hasToken),
        turn=0,
        phase="idle",
        pending=_NONE,
        reqIds=_NONE,
        wireShape="messages",
        wireIds=_NONE,
        emitted=_NONE,
        gotShape="messages",
        lastOutcome="none",
        retryable=False,
    )


# -- the actions at c: the successor, or None when not enabled -----------------------------

_FIELD = {name: i for i, name in enumerate(ConvState._fields)}
_new = tuple.__new__


def EXCEPT(s: ConvState, **changes: Any) -> ConvState:
    """``s`` with the named variables changed (``[f EXCEPT ![c] = v]`` for each ``f=v``; the
    others ``UNCHANGED``): ``s._replace(**changes)``, without its checks (the names are
    this module's own) at a third of its cost."""
    values = [*s]
    for name, value in changes.items():
        values[_FIELD[name]] = value
    result: ConvState = _new(ConvState, values)
    return result


def CallerSend(s: ConvState, g: Context) -> ConvState | None:
    if (
        s.phase == "idle"
        and s.turn < g.MaxTurns
        and s.provider != "NONE"
        and InFlight(s, g) < g.MaxInFlight
        and g.verifies
    ):
        k, t, p, turn, _, pending, _, _, _, emitted, got, last, _ = s
        shape = "openai" if p == "TPX" else "messages"  # NativeShape(provider)
        # EXCEPT(s, reqIds=pending, wireShape=shape, wireIds=pending, phase="req",
        # retryable=FALSE), as one tuple (the monitor's every step)
        return _new(
            ConvState, (k, t, p, turn, "req", pending, pending, shape, pending, emitted, got,
                        last, False)
        )  # fmt: skip
    return None


def CallerAbort(s: ConvState, g: Context) -> ConvState | None:
    if (
        s.phase == "idle"
        and s.turn < g.MaxTurns
        and s.provider != "NONE"
        and (g.GatewayRetry or s.pending)
    ):
        return EXCEPT(
            s,
            lastOutcome="err",
            pending=s.pending if g.GatewayRetry else _NONE,
            turn=s.turn + 1,
            retryable=False,
        )
    return None


def NoProvider(s: ConvState, g: Context) -> ConvState | None:
    if s.phase == "idle" and s.turn < g.MaxTurns and s.provider == "NONE":
        return EXCEPT(s, lastOutcome="err", turn=s.turn + 1)
    return None


def ProviderReply(s: ConvState, g: Context, ids: Ids) -> ConvState | None:
    """ProviderReply(c) with the witness ``ids`` of ``\\E ids \\in SUBSET Ids(c)`` (the ids
    the provider really emitted; any ids of the conversation's own are a subset of Ids(c))."""
    if s.phase == "req":
        k, t, p, turn, _, pending, req, _, _, _, got, last, retryable = s
        shape = "openai" if p == "TPX" else "messages"  # NativeShape(provider)
        # EXCEPT(s, emitted=ids, wireIds=ids, wireShape=shape, phase="resp"), as one tuple
        return _new(
            ConvState, (k, t, p, turn, "resp", pending, req, shape, ids, ids, got, last,
                        retryable)
        )  # fmt: skip
    return None


def _fail(s: ConvState, g: Context) -> ConvState | None:
    """ProviderFail(c) and ClientGone(c): the same guard and effect."""
    if s.phase == "req":
        return EXCEPT(
            s,
            lastOutcome="err",
            pending=s.pending if g.GatewayRetry else _NONE,
            phase="idle",
            turn=s.turn + 1,
            retryable=g.GatewayRetry,
        )
    return None


def ProviderFail(s: ConvState, g: Context) -> ConvState | None:
    return _fail(s, g)


def ClientGone(s: ConvState, g: Context) -> ConvState | None:
    return _fail(s, g)


def Retry(s: ConvState, g: Context) -> ConvState | None:
    if (
        g.GatewayRetry
        and s.retryable
        and s.phase == "idle"
        and s.turn < g.MaxTurns
        and InFlight(s, g) < g.MaxInFlight
        and g.verifies
    ):
        return EXCEPT(
            s, wireShape=NativeShape(s.provider), wireIds=s.reqIds, phase="req", retryable=False
        )
    return None


def Deliver(s: ConvState, g: Context) -> ConvState | None:
    if s.phase == "resp":
        k, t, p, turn, _, _, req, shape, wire, emitted, _, _, retryable = s
        got = "messages" if shape == "openai" else shape
        # EXCEPT(s, gotShape=got, pending=wireIds, lastOutcome="ok", phase="idle",
        # turn=turn + 1), as one tuple
        return _new(
            ConvState, (k, t, p, turn + 1, "idle", wire, req, shape, wire, emitted, got, "ok",
                        retryable)
        )  # fmt: skip
    return None


def PromptTooLong(s: ConvState, g: Context) -> ConvState | None:
    if (
        g.Preflight
        and s.phase == "idle"
        and s.turn < g.MaxTurns
        and s.provider != "NONE"
        and g.verifies
    ):
        return EXCEPT(s, lastOutcome="err", turn=s.turn + 1, retryable=False)
    return None


#: The steps of an exchange's upstream attempts (UpstreamAccept, Resend, Failover,
#: FirstByte): each leaves the 13 variables as they are (a stutter at ``c``); their own
#: variables (``up``, ``attempts``, ``reached``, ``gens``, ``fwd``, ``health``) are
#: :mod:`tpx.oracle.model.gateway.attempts`'.
UPSTREAM_STEPS: tuple[str, ...] = ("UpstreamAccept", "Resend", "Failover", "FirstByte")

#: ``Next``'s per-conversation disjuncts but ProviderReply (it takes a witness) and the
#: upstream steps, by name.
ACTIONS: dict[str, Callable[[ConvState, Context], ConvState | None]] = {
    "CallerSend": CallerSend,
    "CallerAbort": CallerAbort,
    "NoProvider": NoProvider,
    "ProviderFail": ProviderFail,
    "Deliver": Deliver,
    "ClientGone": ClientGone,
    "Retry": Retry,
    "PromptTooLong": PromptTooLong,
}


def step(action: str, s: ConvState, g: Context, emitted: Ids) -> ConvState | None:
    """The successor the named action of ``Next`` takes ``s`` to at ``c`` (ProviderReply's
    witness: the *emitted* ids the step reports), or ``None``: not enabled, or no action."""
    if action == "ProviderReply":
        return ProviderReply(s, g, emitted)
    act = ACTIONS.get(action)
    return None if act is None else act(s, g)


# -- the invariants at c ------------------------------------------------------------------


def TypeOK(s: ConvState, g: Context) -> bool:
    """Each variable in its type. An id variable is an :data:`Ids` of strings (``SUBSET
    AllIds``: the monitor's ids are any strings; it refuses a non-string id before any
    check). Only strings are equal to the strings of a domain; an unhashable value is in
    no domain."""
    turn = s.turn
    try:
        return (
            type(s.hasKey) is bool
            and type(s.hasToken) is bool
            and s.provider in Providers
            and isinstance(turn, int)
            and type(turn) is not bool
            and 0 <= turn <= g.MaxTurns
            and s.phase in Phases
            and type(s.pending) in _IDS
            and type(s.reqIds) in _IDS
            and s.wireShape in Shapes
            and type(s.wireIds) in _IDS
            and type(s.emitted) in _IDS
            and s.gotShape in Shapes
            and s.lastOutcome in Outcomes
            and type(s.retryable) is bool
        )
    except TypeError:
        return False


def ShapeInv(s: ConvState, g: Context) -> bool:
    return bool(s.gotShape == "messages")


def PairingInv(s: ConvState, g: Context) -> bool:
    return (
        (s.phase != "req" or (s.wireIds == s.reqIds and s.reqIds == s.pending))
        and (s.phase != "resp" or s.wireIds == s.emitted)
        and (not (s.phase == "idle" and s.lastOutcome == "ok") or s.pending == s.emitted)
    )


def SelectionInv(s: ConvState, g: Context) -> bool:
    return bool(s.provider == Select(s.hasKey, s.hasToken))


def BoundedInv(s: ConvState, g: Context) -> bool:
    return bool(s.turn <= g.MaxTurns) and InFlight(s, g) <= g.MaxInFlight


def NoCrossPairing(s: ConvState, g: Context) -> bool:
    """No id of this conversation's is another's (the other side: :attr:`Context.foreign`)."""
    return g.foreign is None


def RetryInv(s: ConvState, g: Context) -> bool:
    return not s.retryable or s.pending == s.reqIds


#: The cfg's INVARIANTS at one conversation, in its order.
INVARIANTS: tuple[tuple[str, Callable[[ConvState, Context], bool]], ...] = (
    ("TypeOK", TypeOK),
    ("ShapeInv", ShapeInv),
    ("PairingInv", PairingInv),
    ("SelectionInv", SelectionInv),
    ("BoundedInv", BoundedInv),
    ("NoCrossPairing", NoCrossPairing),
    ("RetryInv", RetryInv),
)

#: The invariants that read conversation ``c``'s values alone. With :func:`Sent`
#: they are inductive for the actions at ``c``: a successor of a state satisfying them
#: satisfies them, whatever the other conversations do (the tests check it on every state
#: of a domain covering each pattern of equal and different id sets). So the monitor, which
#: checks every invariant on a conversation's first (idle) state, need not evaluate these
#: again on a state that :func:`Same` as the spec's successor of the last: there they
#: hold. BoundedInv and NoCrossPairing read the other conversations too: they are
#: evaluated after every step.
LOCAL: frozenset[str] = frozenset({"TypeOK", "ShapeInv", "PairingInv", "SelectionInv", "RetryInv"})


def Same(t: ConvState, expected: ConvState) -> bool:
    """*t* is the well-typed state *expected*: equal, its numbers of the same types
    (Python's ``==`` takes ``1`` for ``True``; strings equal only strings, and the
    monitor's id values are always frozensets or tuples)."""
    return (
        t == expected
        and type(t.hasKey) is bool
        and type(t.hasToken) is bool
        and type(t.turn) is int
        and type(t.retryable) is bool
    )


def Sent(s: ConvState, g: Context) -> bool:
    """An exchange in flight was sent (CallerSend or Retry): its turn is below MaxTurns
    and it is not retryable (the sends clear ``retryable``; only an exchange's failure,
    which ends it, sets it). The strengthening that makes :data:`LOCAL` inductive (Deliver
    adds 1 to ``turn``, keeps ``retryable`` and changes ``pending``). Holds on every idle
    state, so on every first state of a conversation."""
    return s.phase == "idle" or (not s.retryable and s.turn < g.MaxTurns)


def SelectionStable(t: ConvState, g: Context) -> bool:
    """``[][CredsUnchanged]_vars`` on the step into *t*: the selection is the boot's."""
    return (t.hasKey, t.hasToken, t.provider) == g.boot
