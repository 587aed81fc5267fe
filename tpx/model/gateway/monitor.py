"""An online monitor: every spec step a running gateway takes, checked against the mirror.

Pure (no I/O, no clock, no threads): feed it ``(conversation, action, snapshot)`` events as
the gateway's exchanges take them; :meth:`GatewayMonitor.observe` returns ``None`` for a
step ``spec/TpxGateway.tla`` allows and a :class:`Violation` for the first one it does not,
carrying the conversation's trace up to and including the offending step. The gateway
(``tpx serve --monitor``) logs it, counts it, and fails the request closed.

Events
------
* ``conversation``: any hashable key naming one conversation (one spec instance). The
  stateless gateway cannot link requests, so the request id (one exchange per
  conversation) is always a safe key; a longer-lived key works as long as its requests
  do not overlap.
* ``action``: ``"Init"`` or ``"Resume"`` to start a conversation, then the spec's
  per-conversation actions (``CallerSend``, ``CallerAbort``, ``NoProvider``,
  ``ProviderReply``, ``ProviderFail``, ``Deliver``, ``ClientGone``, ``Retry``).
  ``Init`` is the spec's initial state; ``Resume`` starts a conversation first seen
  mid-history: an idle state whose ``pending`` are the obligations the request's history
  carries (the gateway's exchanges begin so).
* ``snapshot``: the conversation's variables after the step, as a mapping with the spec's
  names and JSON-style values -- exactly one line of a JSON-lines trace (see
  :mod:`tpx.tracecheck_gateway`): ``provider`` (``"ANTHROPIC"``/``"TPX"``/``"NONE"``),
  ``turn``, ``phase``, ``pending``/``reqIds``/``wireIds``/``emitted`` (iterables of tool-id
  strings, the ids as the caller sees them), ``wireShape``, ``gotShape``, ``lastOutcome``,
  and optionally ``hasKey``, ``hasToken``, ``retryable`` (derived by the spec when absent).
  :func:`snapshot_of_exchange` turns a :class:`tpx.exchange.ExchangeSnapshot` into one.

Checks, per event, in this order (the first failure is the violation; its ``property``):

1. the invariants of TpxGateway.cfg on the conversation's new state: ``TypeOK``,
   ``ShapeInv``, ``PairingInv``, ``SelectionInv``, ``BoundedInv`` (with the requests in
   flight across all live conversations when ``max_in_flight`` is set), ``NoCrossPairing``
   (no id another live conversation's provider emitted, or its history holds, appears in
   this conversation's variables), ``RetryInv``;
2. ``SelectionStable``: the shared selection is the boot's;
3. ``Next``: the step is the named action of the spec from the conversation's previous
   state (the mirror's action function, with the emitted ids as ProviderReply's witness);
   ``Init`` for a bad first event or an event of an unknown conversation.

After a violation the conversation is forgotten (its later events are reported as events
of an unknown conversation until it starts again); :meth:`GatewayMonitor.close` forgets a
finished one (call it when the exchange ends, so its ids stop counting as live). Cost: one
mirror step on a one-conversation state per event, O(ids in the step).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Mapping
from typing import Any

import attrs

from tpx.model.gateway.actions import ACTIONS, Init, ProviderReplyWith
from tpx.model.gateway.invariants import INVARIANTS
from tpx.model.gateway.state import EXCEPT, Config, State, ToolId
from tpx.values import Function, ModelValue

__all__ = [
    "CONVERSATION_VARS",
    "GatewayMonitor",
    "Violation",
    "snapshot_of_exchange",
]

#: The per-conversation variables an event's snapshot carries (``retryable`` optional).
CONVERSATION_VARS: tuple[str, ...] = (
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
_ID_VARS = ("pending", "reqIds", "wireIds", "emitted")
_STARTS = ("Init", "Resume")
_ACTIONS = dict(ACTIONS)
_BIG = 2**62
#: Credentials (hasKey, hasToken) that select each provider.
_SELECTING = {"ANTHROPIC": (True, False), "TPX": (False, True), "NONE": (False, False)}
#: The conversation as the one-conversation local state names it.
_C = ModelValue("c")


@attrs.frozen
class Violation:
    """The first step of a conversation the spec does not allow."""

    conversation: Hashable
    step: int
    """1-based index of the offending event in the conversation's trace."""
    action: str
    property: str
    """An invariant's name, ``"SelectionStable"``, ``"Next"`` or ``"Init"``."""
    message: str
    trace: tuple[Mapping[str, Any], ...] = attrs.field(repr=False)
    """The conversation's events (``{"#action": ..., **snapshot}``), the offending one last."""

    def __str__(self) -> str:
        return (
            f"conversation {self.conversation!r}, step {self.step} ({self.action}): "
            f"{self.property} violated: {self.message}"
        )


def snapshot_of_exchange(
    snapshot: Any, *, action: str | None = None, obligations: Iterable[str] | None = None
) -> dict[str, Any]:
    """A :class:`tpx.exchange.ExchangeSnapshot` as a monitor snapshot (the same JSON-style
    mapping the gateway writes to its traces).

    The gateway runs one seed exchange per request, and the seed's ProviderFail and
    CallerAbort discard the exchange's ``pending``; the conversation's obligations are
    its history's all the same (the gateway spec). Pass the request history's obligations
    as *obligations* with the *action* and, for those two actions, they are the snapshot's
    ``pending``.

    ``wireIds`` / ``emitted`` keep a wire id the provider repeated once per call (the
    snapshot's ``wire_list`` / ``emitted_list``): a monitor with ``to_wire`` counts them
    (see :class:`GatewayMonitor`)."""
    pending = snapshot.pending
    if obligations is not None and action in ("ProviderFail", "CallerAbort"):
        pending = obligations
    return {
        "provider": snapshot.provider.name,
        "turn": snapshot.turn,
        "phase": snapshot.phase,
        "pending": sorted(pending),
        "reqIds": sorted(snapshot.req_ids),
        "wireShape": snapshot.wire_shape,
        # the multisets when the snapshot has them: a provider may repeat a wire id
        "wireIds": sorted(getattr(snapshot, "wire_list", ()) or snapshot.wire_ids),
        "emitted": sorted(getattr(snapshot, "emitted_list", ()) or snapshot.emitted),
        "gotShape": snapshot.got_shape,
        "lastOutcome": snapshot.last_outcome,
    }


class _BadSnapshot(ValueError):
    pass


@attrs.define
class _Live:
    state: State
    trace: list[dict[str, Any]]
    owned: set[str]
    """ids this conversation holds as its own (emitted by its provider, or its history's)"""


def _ids(value: Any, name: str) -> frozenset[ToolId]:
    if isinstance(value, str | bytes) or not isinstance(value, Iterable):
        raise _BadSnapshot(f"{name} must be a list of tool-id strings, got {value!r}")
    items = list(value)
    if not all(isinstance(i, str) for i in items):
        raise _BadSnapshot(f"{name} must be a list of tool-id strings, got {value!r}")
    if len(set(items)) != len(items):
        raise _BadSnapshot(f"{name} lists an id twice: {sorted(items)}")
    return frozenset((_C, ModelValue(i)) for i in items)


def _tagged(value: Any, name: str) -> list[str]:
    """A multiset of wire ids as a set: the k-th occurrence (0-based) of ``i`` is ``i#k``
    (injective: ``k`` is the digits after the last ``#``)."""
    if isinstance(value, str | bytes) or not isinstance(value, Iterable):
        raise _BadSnapshot(f"{name} must be a list of tool-id strings, got {value!r}")
    items = list(value)
    if not all(isinstance(i, str) for i in items):
        raise _BadSnapshot(f"{name} must be a list of tool-id strings, got {value!r}")
    seen: dict[str, int] = {}
    out = []
    for i in sorted(items):
        k = seen.get(i, 0)
        seen[i] = k + 1
        out.append(f"{i}#{k}")
    return out


def _names(state: State) -> set[str]:
    return {t.name for v in _ID_VARS for _, t in state.__getattribute__(v)[_C]}


class GatewayMonitor:
    """Checks a gateway's per-conversation spec steps as they happen (see the module doc).

        ``provider`` is the boot selection (``"ANTHROPIC"``, ``"TPX"`` or ``"NONE"``);
        ``has_key`` / ``has_token`` the boot credentials' presence when known (then
        SelectionInv is checked against them; never the credentials themselves);
        ``max_in_flight`` the gateway's bound on exchanges in flight (``None``: unbounded);
        ``gateway_retry`` the spec constant GatewayRetry; ``to_wire`` maps a caller-side tool id
    (``pending``, ``reqIds``: what the client sees) to its wire-side id (``wireIds``,
    ``emitted``: what the provider sent), for a gateway whose snapshots hold both (TPX:
    decode the signed caller id to the foreign id; ANTHROPIC: identity); the traces then hold
    wire-side ids throughout (a repeated wire id once per call, see :meth:`_normalize`).
    Not thread-safe: one per worker (an event loop), or a lock around :meth:`observe`.
    """

    def __init__(
        self,
        *,
        provider: str,
        has_key: bool | None = None,
        has_token: bool | None = None,
        max_in_flight: int | None = None,
        gateway_retry: bool = True,
        to_wire: Callable[[str], str] | None = None,
    ) -> None:
        if has_key is None or has_token is None:
            # unknown credentials: any pair that selects the provider
            if provider not in _SELECTING:
                raise ValueError(f"provider must be ANTHROPIC, TPX or NONE, got {provider!r}")
            has_key, has_token = _SELECTING[provider]
        self._has_key = has_key
        self._has_token = has_token
        self._provider = ModelValue(provider)
        self._max_in_flight = max_in_flight
        self._retry = gateway_retry
        self._to_wire = to_wire
        self._live: dict[Hashable, _Live] = {}
        self._owner: dict[str, Hashable] = {}
        self._in_flight = 0
        self.steps = 0
        """Events checked."""
        self.violations = 0
        """Violations found."""

    # -- public ----------------------------------------------------------------------------

    @property
    def in_flight(self) -> int:
        """Live conversations whose exchange is in flight (phase # "idle")."""
        return self._in_flight

    def conversations(self) -> int:
        """Live (started, not closed) conversations."""
        return len(self._live)

    def trace(self, conversation: Hashable) -> tuple[Mapping[str, Any], ...]:
        """The events of a live conversation, ``{"#action": ..., **snapshot}`` each."""
        live = self._live.get(conversation)
        return tuple(live.trace) if live is not None else ()

    def close(self, conversation: Hashable) -> tuple[Mapping[str, Any], ...]:
        """Forget a conversation (its exchange ended); returns its trace."""
        live = self._live.pop(conversation, None)
        if live is None:
            return ()
        if live.state.phase[_C] != "idle":
            self._in_flight -= 1
        for name in live.owned:
            if self._owner.get(name) == conversation:
                del self._owner[name]
        return tuple(live.trace)

    def observe(
        self, conversation: Hashable, action: str, snapshot: Mapping[str, Any]
    ) -> Violation | None:
        """Check one step; ``None`` if the spec allows it, else the :class:`Violation`."""
        self.steps += 1
        live = self._live.get(conversation)
        try:
            held, snapshot = self._normalize(snapshot)
        except _BadSnapshot as exc:
            trace = [*(live.trace if live else ()), {"#action": action, **snapshot}]
            return self._violation(conversation, trace, action, "TypeOK", str(exc))
        event = {"#action": action, **snapshot}
        trace = [*live.trace, event] if live is not None else [event]
        try:
            if live is None or action in _STARTS:
                verdict = self._start(conversation, live, action, snapshot, trace, held)
            else:
                verdict = self._step(conversation, live, action, snapshot, trace, held)
        except _BadSnapshot as exc:
            verdict = self._violation(conversation, trace, action, "TypeOK", str(exc))
        return verdict

    # -- checking --------------------------------------------------------------------------

    def _violation(
        self,
        conversation: Hashable,
        trace: list[dict[str, Any]],
        action: str,
        prop: str,
        message: str,
    ) -> Violation:
        self.violations += 1
        self.close(conversation)
        return Violation(conversation, len(trace), action, prop, message, tuple(trace))

    def _config(self, names: Iterable[str], others_in_flight: int) -> Config:
        limit = _BIG if self._max_in_flight is None else self._max_in_flight - others_in_flight
        return Config(
            frozenset({_C}),
            frozenset(ModelValue(n) for n in names),
            _BIG,
            max(limit, 0),
            self._retry,
        )

    def _observed(self, base: State, snapshot: Mapping[str, Any]) -> State:
        """*base* with every variable the snapshot gives replaced by its value."""
        missing = [v for v in (*CONVERSATION_VARS, "provider") if v not in snapshot]
        if missing:
            raise _BadSnapshot(f"the snapshot lacks {missing}")
        changes: dict[str, Any] = {}
        for name in CONVERSATION_VARS:
            raw = snapshot[name]
            value = self._id_set(raw, name) if name in _ID_VARS else raw
            changes[name] = EXCEPT(getattr(base, name), _C, value)
        if "retryable" in snapshot:
            changes["retryable"] = EXCEPT(base.retryable, _C, snapshot["retryable"])
        provider = snapshot["provider"]
        changes["provider"] = ModelValue(provider) if isinstance(provider, str) else provider
        if changes["provider"] != self._provider and not (
            "hasKey" in snapshot or "hasToken" in snapshot
        ):
            # a snapshot without credentials naming another provider: credentials that
            # select it changed (SelectionStable), as far as the snapshot can tell
            pair = _SELECTING.get(str(changes["provider"]))
            if pair is not None:
                changes["hasKey"], changes["hasToken"] = pair
        for name in ("hasKey", "hasToken"):
            if name in snapshot:
                changes[name] = snapshot[name]
        return attrs.evolve(base, **changes)

    def _normalize(self, snapshot: Mapping[str, Any]) -> tuple[set[str] | None, dict[str, Any]]:
        """With ``to_wire``: the caller-side ids the snapshot holds (its identities, for
        NoCrossPairing) and the snapshot with ``pending``/``reqIds`` mapped to wire ids.

        Wire ids are not unique: a provider may repeat ``""`` or ``call_0``, or share one id,
        within a response, and the caller-side encodings of those calls stay distinct
        (:mod:`tpx.translate.ids`). So the wire side is a multiset, and each of the four id
        variables becomes its occurrence-tagged set (``id#k`` for the k-th occurrence of
        ``id``, :func:`_tagged`): two sides agree iff they carry the same wire ids the same
        number of times. Caller-side ids must still be unique (TypeOK). The trace keeps the
        untagged wire ids (lists, repeats kept)."""
        out = dict(snapshot)
        if self._to_wire is None:
            return None, out
        held: set[str] = set()
        for name in ("pending", "reqIds"):
            if name in out:
                raw = out[name]
                _ids(raw, name)  # caller-side ids are unique
                held.update(raw)
                out[name] = sorted(self._to_wire(i) for i in raw)
        return held, out

    def _id_set(self, raw: Any, name: str) -> frozenset[ToolId]:
        """An id variable's value: with ``to_wire`` the occurrence-tagged wire ids."""
        return _ids(_tagged(raw, name) if self._to_wire is not None else raw, name)

    def _held(self, state: State, held: set[str] | None) -> set[str]:
        """The ids whose owner NoCrossPairing checks: the caller-side ids with ``to_wire``
        (wire ids are per upstream response, not global), every id otherwise."""
        return _names(state) if held is None else held

    def _check_state(
        self, conversation: Hashable, state: State, cfg: Config, held: set[str]
    ) -> tuple[str, str] | None:
        for name, inv in INVARIANTS:
            if name == "NoCrossPairing":
                for one in sorted(held):
                    owner = self._owner.get(one, conversation)
                    if owner != conversation:
                        return name, f"{one!r} belongs to conversation {owner!r}"
            elif not inv(state, cfg):
                return name, f"state {_show(state)}"
        boot = (self._has_key, self._has_token, self._provider)
        if (state.hasKey, state.hasToken, state.provider) != boot:
            return "SelectionStable", (
                f"selection (hasKey, hasToken, provider) = "
                f"{(state.hasKey, state.hasToken, state.provider)}, booted with {boot}"
            )
        return None

    def _start(
        self,
        conversation: Hashable,
        live: _Live | None,
        action: str,
        snapshot: Mapping[str, Any],
        trace: list[dict[str, Any]],
        held: set[str] | None,
    ) -> Violation | None:
        if action not in _STARTS:
            return self._violation(
                conversation,
                trace,
                action,
                "Init",
                f"{action} of a conversation that has not started (Init or Resume first)",
            )
        if live is not None and live.state.phase[_C] != "idle":
            return self._violation(
                conversation, trace, action, "Next", f"{action} while an exchange is in flight"
            )
        if live is not None:
            self.close(conversation)
        names = {t.name for v in _ID_VARS if v in snapshot for _, t in self._id_set(snapshot[v], v)}
        cfg = self._config(names, self._in_flight)
        (init,) = [
            s for s in Init(cfg) if (s.hasKey, s.hasToken) == (self._has_key, self._has_token)
        ]
        state = self._observed(init, snapshot)
        owned = self._held(state, held)
        found = self._check_state(conversation, state, cfg, owned)
        if found is not None:
            return self._violation(conversation, trace, action, *found)
        if action == "Init" and state != init:
            return self._violation(
                conversation, trace, action, "Init", f"{_show(state)} is no initial state"
            )
        if state.phase[_C] != "idle":
            return self._violation(
                conversation, trace, action, "Init", "a conversation resumes idle"
            )
        self._live[conversation] = _Live(state, trace, owned)
        for name in owned:
            self._owner[name] = conversation
        return None

    def _step(
        self,
        conversation: Hashable,
        live: _Live,
        action: str,
        snapshot: Mapping[str, Any],
        trace: list[dict[str, Any]],
        held: set[str] | None,
    ) -> Violation | None:
        s = live.state
        function = _ACTIONS.get(action)
        if function is None:
            return self._violation(
                conversation, trace, action, "Next", f"{action!r} is no action of the spec"
            )
        was_in_flight = s.phase[_C] != "idle"
        others = self._in_flight - was_in_flight
        observed = self._observed(s, snapshot)
        cfg = self._config(_names(s) | _names(observed), others)
        if action == "ProviderReply":
            candidates = list(ProviderReplyWith(s, _C, cfg, observed.emitted[_C]))
        else:
            candidates = list(function(s, _C, cfg))
        if candidates and "retryable" not in snapshot:
            observed = attrs.evolve(observed, retryable=candidates[0].retryable)
        owned = self._held(observed, held)
        found = self._check_state(conversation, observed, cfg, owned)
        if found is not None:
            return self._violation(conversation, trace, action, *found)
        if observed not in candidates:
            why = (
                f"{action} is not enabled in {_show(s)}"
                if not candidates
                else f"{action} leads to {' or '.join(_show(t) for t in candidates[:3])}, "
                f"observed {_show(observed)}"
            )
            return self._violation(conversation, trace, action, "Next", why)
        live.state = observed
        live.trace = trace
        self._in_flight += (observed.phase[_C] != "idle") - was_in_flight
        for name in owned:
            self._owner[name] = conversation
        live.owned |= owned
        return None


def _show(s: State) -> str:
    """A conversation's variables, readably."""
    parts = []
    for name in ("provider", *CONVERSATION_VARS, "retryable"):
        value = getattr(s, name)
        if isinstance(value, Function):
            value = value[_C]
        if isinstance(value, frozenset):
            value = sorted(t.name for _, t in value)
        parts.append(f"{name}={value}")
    return "[" + ", ".join(parts) + "]"
