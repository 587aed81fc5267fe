"""The online monitor with every verdict taken by the reference mirror (the oracle).

:class:`ReferenceMonitor` is :class:`~tpx.oracle.model.gateway.monitor.GatewayMonitor` (the same
bookkeeping: live conversations, owners, in-flight count, traces) whose step check is the
whole-gateway mirror's, as the monitor took it before it had a compact path: conversation
``c``'s state as a one-conversation :class:`~tpx.oracle.model.gateway.state.State` (Function
values, ``Convs = {c}``, ``ToolIds`` = the ids the two states name, ``MaxInFlight`` = the
gateway's bound less the other conversations in flight), ``Init`` and the action from
:mod:`tpx.oracle.model.gateway.actions` (every successor generated, ProviderReply's witness the
emitted ids), the :data:`~tpx.oracle.model.gateway.invariants.INVARIANTS` tuple in order, then
SelectionStable, then ``Next`` (the observed state among the successors).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import attrs

from tpx.oracle.model.gateway.actions import ACTIONS, Init, ProviderReplyWith
from tpx.oracle.model.gateway.conversation import Context, ConvState
from tpx.oracle.model.gateway.invariants import INVARIANTS
from tpx.oracle.model.gateway.monitor import GatewayMonitor
from tpx.oracle.model.gateway.state import Config, State, ToolId
from tpx.oracle.values import Function, ModelValue

C = ModelValue("c")
BIG = 2**62
_ACTIONS = dict(ACTIONS)
_ID_VARS = ("pending", "reqIds", "wireIds", "emitted")
_PER_CONVERSATION = (
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
)


def tagged(ids: Iterable[str]) -> frozenset[ToolId]:
    """A multiset of ids as a set of tool ids: the k-th occurrence of ``i`` is ``i#k``."""
    seen: dict[str, int] = {}
    out = set()
    for i in ids:
        k = seen.get(i, 0)
        seen[i] = k + 1
        out.add((C, ModelValue(f"{i}#{k}")))
    return frozenset(out)


def as_state(s: ConvState) -> State:
    """A conversation's state as the one-conversation gateway State (``Convs = {c}``)."""
    fields: dict[str, Any] = {
        "hasKey": s.hasKey,
        "hasToken": s.hasToken,
        "provider": ModelValue(s.provider) if isinstance(s.provider, str) else s.provider,
    }
    for name in _PER_CONVERSATION:
        value = getattr(s, name)
        fields[name] = Function({C: tagged(value) if name in _ID_VARS else value})
    # the binding the monitor does not read: each obligation on its own call, the
    # history's rounds those a correct request carries, the keys never rotated
    pending = fields["pending"][C]
    calls = frozenset((i, i) for i in pending) if isinstance(pending, frozenset) else pending
    rounds = (calls,) if calls and s.phase != "idle" else ()
    fields.update(
        key=1,
        oldest=1,
        calls=Function({C: calls}),
        hist=Function({C: ()}),
        wireRes=Function({C: rounds}),
        request=Function({C: "none" if s.phase == "idle" else "ok"}),
        signedBy=Function({C: 0}),
        # the upstream attempts not modelled (UpstreamSteps = FALSE): their initial values
        up=Function({C: ModelValue("NONE")}),
        health=Function({ModelValue("u1"): True}),
        attempts=Function({C: 0}),
        reached=Function({C: False}),
        gens=Function({C: 0}),
        fwd=Function({C: 0}),
    )
    return State(**fields)


#: The variables the monitor's conversation state holds (the exchange's), in the spec's order.
_VIEW = ("hasKey", "hasToken", "provider", *_PER_CONVERSATION)


def view(s: State) -> tuple[object, ...]:
    """The variables of *s* the monitor checks (the binding and the keys left out: the
    exchange's snapshots do not carry them)."""
    return tuple(getattr(s, name) for name in _VIEW)


def config(g: Context, *states: ConvState) -> Config:
    names = {t for s in states for v in _ID_VARS for _, t in tagged(getattr(s, v))}
    return Config(
        frozenset({C}),
        frozenset(names),
        g.MaxTurns,
        max(g.MaxInFlight - g.others_in_flight, 0),
        g.GatewayRetry,
        Preflight=g.Preflight,
    )


def state_failure(t: State, cfg: Config, g: Context) -> str | None:
    """The first of the cfg's INVARIANTS, then SelectionStable, that *t* violates."""
    for name, invariant in INVARIANTS:
        if name == "NoCrossPairing":
            if g.foreign is not None:  # the ids other live conversations hold
                return name
        elif not invariant(t, cfg):
            return name
    hasKey, hasToken, provider = g.boot
    if (t.hasKey, t.hasToken, t.provider) != (hasKey, hasToken, ModelValue(provider)):
        return "SelectionStable"
    return None


def reference_verdict(
    s: ConvState | None, action: str, t: ConvState, g: Context, retryable: bool
) -> tuple[ConvState, str | None]:
    """The monitor's check of one event by the reference mirror: *t* as checked (its
    ``retryable`` the successor's unless the event gave it) and the failed property
    (``"Next (not enabled)"`` when the action has no successor)."""
    cfg = config(g, t) if s is None else config(g, s, t)
    observed = as_state(t)
    if s is None:
        hasKey, hasToken, _ = g.boot
        (init,) = [i for i in Init(cfg) if (i.hasKey, i.hasToken) == (hasKey, hasToken)]
        failed = state_failure(observed, cfg, g)
        if failed is not None:
            return t, failed
        if action == "Init" and observed != init:
            return t, "Init"
        if observed.phase[C] != "idle":
            return t, "Init"
        return t, None
    before = as_state(s)
    if action == "ProviderReply":
        candidates = list(ProviderReplyWith(before, C, cfg, observed.emitted[C]))
    else:
        candidates = list(_ACTIONS[action](before, C, cfg))
    if candidates and not retryable:
        t = t._replace(retryable=candidates[0].retryable[C])
        observed = attrs.evolve(observed, retryable=candidates[0].retryable)
    failed = state_failure(observed, cfg, g)
    if failed is not None:
        return t, failed
    if view(observed) not in {view(c) for c in candidates}:
        return t, "Next" if candidates else "Next (not enabled)"
    return t, None


class ReferenceMonitor(GatewayMonitor):
    """:class:`GatewayMonitor` judging every event with :func:`reference_verdict` (none
    by the monitor's short paths)."""

    def _resumes(self, *args: Any) -> bool:
        return False

    def _accepts(self, *args: Any) -> bool:
        return False

    def _verdict(
        self, s: ConvState | None, action: str, t: ConvState, g: Context, retryable: bool
    ) -> tuple[ConvState, tuple[str, str] | None]:
        t, failed = reference_verdict(s, action, t, g, retryable)
        if failed is None:
            return t, None
        if failed == "NoCrossPairing" and g.foreign is not None:
            one, owner = g.foreign
            return t, (failed, f"{one!r} belongs to conversation {owner!r}")
        if failed == "Next (not enabled)":
            return t, ("Next", f"{action} is not enabled (reference mirror)")
        return t, (failed, f"(reference mirror) {failed}")
