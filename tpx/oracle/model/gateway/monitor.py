"""An online monitor: every spec step a running gateway takes, checked against the mirror.

Pure (no I/O, no clock, no threads): feed it ``(conversation, action, snapshot)`` events as
the gateway's exchanges take them; :meth:`GatewayMonitor.observe` returns ``None`` for a
step ``spec/TpxGateway.tla`` allows and a :class:`Violation` for the first one it does not,
carrying the conversation's trace up to and including the offending step. The gateway
(``tpx serve --monitor``) logs it, counts it, and fails the request closed.

Events
------
* ``conversation``: any hashable key naming one exchange of a conversation (one spec
  instance). The stateless gateway cannot link requests, so the request id is always a
  safe key: several requests of one conversation at once (a client's retry while the
  first is in flight, a forked history) are several keys resuming with the same history,
  which is legal (see NoCrossPairing below); a longer-lived key works as long as its
  requests do not overlap. :meth:`GatewayMonitor.joins` names the conversation an
  exchange key belongs to (spec/TpxGatewayOverlap.tla: overlapping exchanges of one
  conversation); ids are then owned by conversations, not exchanges. Without it each key
  is a conversation of its own.
* ``action``: ``"Init"`` or ``"Resume"`` to start a conversation, then the spec's
  per-conversation actions (``CallerSend``, ``CallerAbort``, ``NoProvider``,
  ``ProviderReply``, ``ProviderFail``, ``Deliver``, ``ClientGone``, ``Retry``).
  ``Init`` is the spec's initial state; ``Resume`` starts a conversation first seen
  mid-history: an idle state whose ``pending`` are the obligations the request's history
  carries (the gateway's exchanges begin so).
* ``snapshot``: the conversation's variables after the step, as a mapping with the spec's
  names and JSON-style values -- exactly one line of a JSON-lines trace (see
  :mod:`tpx.oracle.tracecheck_gateway`): ``provider`` (``"ANTHROPIC"``/``"TPX"``/``"NONE"``),
  ``turn``, ``phase``, ``pending``/``reqIds``/``wireIds``/``emitted`` (iterables of tool-id
  strings, the ids as the caller sees them), ``wireShape``, ``gotShape``, ``lastOutcome``,
  and optionally ``hasKey``, ``hasToken``, ``retryable`` (derived by the spec when absent).
  :func:`snapshot_of_exchange` turns a :class:`tpx.transport.exchange.ExchangeSnapshot` into one.

Checks, per event, in this order (the first failure is the violation; its ``property``):

1. the invariants of TpxGateway.cfg on the conversation's new state: ``TypeOK``,
   ``ShapeInv``, ``PairingInv``, ``SelectionInv``, ``BoundedInv`` (with the requests in
   flight across all live conversations when ``max_in_flight`` is set), ``NoCrossPairing``
   per conversation (no id another live conversation's provider emitted appears in this
   conversation's variables, and no id another live conversation's history holds is taken
   by this one after it started; histories themselves may share ids: requests of one
   conversation; exchanges :meth:`~GatewayMonitor.joins` put in one conversation share
   every id: ForkNoCrossPairing), ``RetryInv``;
2. ``SelectionStable``: the shared selection is the boot's;
3. ``Next``: the step is the named action of the spec from the conversation's previous
   state (the action's successor, with the emitted ids as ProviderReply's witness);
   ``Init`` for a bad first event or an event of an unknown conversation.

After a violation the conversation is forgotten (its later events are reported as events
of an unknown conversation until it starts again); :meth:`GatewayMonitor.close` forgets a
finished one (call it when the exchange ends, so its ids stop counting as live).

Cost: one step of :mod:`tpx.oracle.model.gateway.conversation` per event (the spec read on one
conversation: its variables as a tuple, the named action's successor computed from its
guard and effect, the invariants on that conversation; O(ids in the step)), the same
verdicts as the whole-gateway mirror (:mod:`~tpx.oracle.model.gateway.actions`,
:mod:`~tpx.oracle.model.gateway.invariants`) on a one-conversation state, which the tests check.
:meth:`GatewayMonitor.observe_exchange` tries two short paths first, which only ever
*accept* (anything else takes the full check above, which finds the violation):

* a live conversation's step (``_accepts``): the exchange snapshot read against the named
  action's successor, variable by variable, without building the observed state; equal
  (and well typed), the LOCAL invariants hold by induction
  (:data:`~tpx.oracle.model.gateway.conversation.LOCAL`), SelectionStable because no action
  changes the selection, BoundedInv is evaluated, and NoCrossPairing is checked on the
  ids the step takes that the conversation did not hold;
* a first event (``_resumes``): Init, or Init but for ``pending`` (how an exchange
  resumes), where every LOCAL invariant holds whatever is pending; BoundedInv,
  SelectionStable and NoCrossPairing are checked.

An id collection is read (validated, mapped ``to_wire``) once per value: the exchange
passes the same ones again, and a request's obligations are the last reply's ids (a
bounded memo; ``to_wire`` is pure). ``tests/oracle/model/gateway/test_gateway_conversation.py``
checks the short paths against the reference monitor on every edge of the four cfgs'
graphs (each step, each step with one variable broken, a new conversation resuming).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Mapping
from collections.abc import Set as AbstractSet
from typing import Any

import attrs

from tpx.oracle.model.gateway.conversation import (
    ACTIONS,
    INVARIANTS,
    LOCAL,
    Context,
    ConvState,
    Ids,
    Init,
    ProviderReply,
    Same,
    SelectionStable,
    idset,
    step,
)
from tpx.oracle.model.gateway.events import (
    KEEPS_OBLIGATIONS,
    BadSnapshot,
    Event,
    ids,
    rendered,
    snapshot_of_exchange,
)
from tpx.oracle.model.gateway.invariants import REFUSABLE

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
_REQUIRED = (*CONVERSATION_VARS, "provider")
_ID_VARS = ("pending", "reqIds", "wireIds", "emitted")
_STARTS = ("Init", "Resume")
_NONE: frozenset[str] = frozenset()
_NO_KEYS: frozenset[Hashable] = frozenset()
_ACTION_NAMES = frozenset({*ACTIONS, "ProviderReply"})
#: The invariants evaluated on a state that is the spec's successor of a checked one.
_NOT_LOCAL = tuple((name, inv) for name, inv in INVARIANTS if name not in LOCAL)
_BIG = 2**62
#: The collection types an exchange snapshot holds its ids in.
_HELD = (frozenset, tuple)
_new = tuple.__new__
#: Credentials (hasKey, hasToken) that select each provider.
_SELECTING = {"ANTHROPIC": (True, False), "TPX": (False, True), "NONE": (False, False)}

#: A failed check: the property and why.
Failure = tuple[str, str]


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


#: How an event's state is read, given the state it starts from: the state, the ids it
#: holds as its own (``None``: every id it names) and whether it reported ``retryable``.
_Parse = Callable[[ConvState], tuple[ConvState, AbstractSet[str] | None, bool]]


#: Id collections of exchange snapshots already read, by value (see :meth:`_read`): the
#: value read and the caller-side ids it holds.
_Reads = dict[Any, tuple[Ids, frozenset[str]]]
#: How many id collections of each kind the monitor remembers.
_READS = 2048


class _Live:
    """A live conversation: its state, its trace, the ids it holds as its own (emitted by
    its provider, or its history's) and those of them its history brought."""

    __slots__ = ("history", "owned", "state", "trace")

    def __init__(self, state: ConvState, trace: list[Event], owned: set[str]) -> None:
        self.state = state
        self.trace = trace
        self.owned = owned
        self.history = frozenset(owned)


def _state_of(
    snapshot: Any,
    has_key: Any,
    has_token: Any,
    provider: str,
    p: tuple[Ids, frozenset[str]],
    r: tuple[Ids, frozenset[str]],
    w: tuple[Ids, frozenset[str]],
    e: tuple[Ids, frozenset[str]],
    retryable: bool,
) -> ConvState:
    """An exchange *snapshot* as a conversation state: its id variables as read (*p*,
    *r*, *w*, *e*: pending, reqIds, wireIds, emitted) and what no exchange reports (the
    selection's credentials, ``retryable``) as given."""
    values = (
        has_key,
        has_token,
        provider,
        snapshot.turn,
        snapshot.phase,
        p[0],
        r[0],
        snapshot.wire_shape,
        w[0],
        e[0],
        snapshot.got_shape,
        snapshot.last_outcome,
        retryable,
    )
    state: ConvState = _new(ConvState, values)
    return state


def _names(state: ConvState) -> set[str]:
    return {*state.pending, *state.reqIds, *state.wireIds, *state.emitted}


class GatewayMonitor:
    """Checks a gateway's per-conversation spec steps as they happen (see the module doc).

        ``provider`` is the boot selection (``"ANTHROPIC"``, ``"TPX"`` or ``"NONE"``);
        ``has_key`` / ``has_token`` the boot credentials' presence when known (then
        SelectionInv is checked against them; never the credentials themselves);
        ``max_in_flight`` the gateway's bound on exchanges in flight (``None``: unbounded);
        ``gateway_retry`` the spec constant GatewayRetry; ``preflight`` the constant Preflight
        (the gateway refuses a request too long for the window: ``PromptTooLong``);
        ``to_wire`` maps a caller-side tool id
    (``pending``, ``reqIds``: what the client sees) to its wire-side id (``wireIds``,
    ``emitted``: what the provider sent), for a gateway whose snapshots hold both (TPX:
    decode the signed caller id to the foreign id; ANTHROPIC: identity); the traces then hold
    wire-side ids throughout (a repeated wire id once per call, see :meth:`_normalize`).
    ``to_wire`` must be a pure function: the monitor remembers the id collections it read
    (:meth:`_read`), not each id (an id is read again only in a collection not seen yet,
    which mostly holds ids not seen yet either).
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
        preflight: bool = False,
    ) -> None:
        if has_key is None or has_token is None:
            # unknown credentials: any pair that selects the provider
            if provider not in _SELECTING:
                raise ValueError(f"provider must be ANTHROPIC, TPX or NONE, got {provider!r}")
            has_key, has_token = _SELECTING[provider]
        self._boot = (has_key, has_token, provider)
        self._provider = provider
        self._max_in_flight = _BIG if max_in_flight is None else max_in_flight
        self._retry = gateway_retry
        self._to_wire = to_wire
        #: the spec's Init at one conversation (it depends on the boot selection only)
        self._preflight = preflight
        alone = Context(
            self._boot, gateway_retry, _BIG, self._max_in_flight, 0, Preflight=preflight
        )
        self._init = Init(alone)
        self._init_stable = SelectionStable(self._init, alone)
        self._init_but_pending = (self._init[:5], self._init[6:])
        #: the provider a snapshot names for :meth:`_resumes_exchange` (Init's, when it is
        #: the boot's: a snapshot naming another one takes the long way)
        self._resume_provider = provider if self._init.provider == provider else None
        self._live: dict[Hashable, _Live] = {}
        #: ids a live conversation took after it started (its provider's): its alone
        self._owner: dict[str, Hashable] = {}
        #: ids live conversations started with (their histories'), by holder: several
        #: requests of one conversation (a retry while the first is in flight, a forked
        #: history) hold the same history at once
        self._shared: dict[str, set[Hashable]] = {}
        #: the conversation each exchange key belongs to (:meth:`joins`; absent: its own)
        self._of: dict[Hashable, Hashable] = {}
        #: the exchange keys that joined each conversation (:meth:`joins`), until forgotten
        self._members: dict[Hashable, set[Hashable]] = {}
        self._contexts: dict[int, Context] = {}  # by the other conversations in flight
        #: the exchange's provider last seen and its name (an enum's ``name`` is a property)
        self._provider_seen: tuple[Any, str] = (None, "")
        #: id collections read, caller-side (mapped ``to_wire``) and wire-side
        self._caller_reads: _Reads = {}
        self._wire_reads: _Reads = {}
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
        return rendered(live.trace) if live is not None else ()

    def close(self, conversation: Hashable) -> tuple[Mapping[str, Any], ...]:
        """Forget a conversation (its exchange ended); returns its trace."""
        live = self._live.get(conversation)
        self.forget(conversation)
        return () if live is None else rendered(live.trace)

    def joins(self, exchange: Hashable, conversation: Hashable) -> None:
        """Exchange key *exchange* (its first event still to come) is an exchange of
        *conversation*: the ids any of that conversation's exchanges hold are all of
        theirs (the same history again, a fork of it, the same ids emitted again), and
        still no other conversation's (spec/TpxGatewayOverlap.tla, ForkNoCrossPairing).
        Forgotten with the exchange."""
        self._of[exchange] = conversation
        members = self._members.get(conversation)
        if members is None:
            self._members[conversation] = {exchange}
        else:
            members.add(exchange)

    def _conversation(self, exchange: Hashable) -> Hashable:
        """The conversation of an exchange key (:meth:`joins`; else the key itself)."""
        return self._of.get(exchange, exchange)

    def _others(self, exchange: Hashable, holders: AbstractSet[Hashable]) -> list[Hashable]:
        """The exchange keys among *holders* of conversations other than *exchange*'s."""
        mine = self._of.get(exchange, exchange)
        of = self._of
        return [h for h in holders if of.get(h, h) != mine]

    def _held_by(self, exchange: Hashable) -> AbstractSet[str]:
        """The ids a live exchange holds as its own (none before its first event)."""
        live = self._live.get(exchange)
        return _NONE if live is None else live.owned

    def forget(self, conversation: Hashable) -> None:
        """:meth:`close` without building the trace."""
        live = self._live.pop(conversation, None)
        siblings: AbstractSet[Hashable] = _NO_KEYS
        whole = self._of.pop(conversation, None)
        if whole is not None:
            members = self._members[whole]
            members.discard(conversation)
            if members:
                siblings = members
            else:
                del self._members[whole]
        if live is None:
            return
        if live.state.phase != "idle":
            self._in_flight -= 1
        owner = self._owner
        for name in live.owned:
            if owner.get(name) == conversation:
                # a sibling exchange holding it keeps it its conversation's
                heir = (
                    next((k for k in siblings if name in self._held_by(k)), None)
                    if siblings
                    else None
                )
                if heir is None:
                    del owner[name]
                else:
                    owner[name] = heir
        shared = self._shared
        for name in live.history:
            holders = shared.get(name)
            if holders is not None:
                holders.discard(conversation)
                if not holders:
                    del shared[name]

    def refuses(
        self, conversation: Hashable, request: str, action: str = "CallerAbort"
    ) -> Violation | None:
        """RefusesOnlyWrong on a refusal (a ``CallerAbort`` or, *action*, a
        ``PromptTooLong`` taken) of *conversation*'s request, read from the request as
        *request* (the spec's ``Requests``, see
        :func:`~tpx.oracle.model.gateway.events.request_kind`; ``"long"``: correct but too
        long for the window): ``None`` when it is wrong or too long, else the violation
        (the conversation's trace up to the refusal)."""
        if request in REFUSABLE:
            return None
        live = self._live.get(conversation)
        trace: list[Event] = [] if live is None else live.trace
        return self._violation(
            conversation,
            trace,
            action,
            "RefusesOnlyWrong",
            f"a correct request that fits ({request!r}: every obligation answered once) "
            "was refused",
        )

    def same_ids(self, a: Iterable[str], b: Iterable[str]) -> bool:
        """Whether two collections of caller-side tool ids name the same ids on the wire
        (mapped ``to_wire``; as they are without it), as sets."""
        to_wire = self._to_wire
        if to_wire is None:
            return {*a} == {*b}
        return {*map(to_wire, a)} == {*map(to_wire, b)}

    def observe(
        self, conversation: Hashable, action: str, snapshot: Mapping[str, Any]
    ) -> Violation | None:
        """Check one step; ``None`` if the spec allows it, else the :class:`Violation`."""
        self.steps += 1
        live = self._live.get(conversation)
        event = {"#action": action, **snapshot}
        try:
            held = self._normalize(event)
        except BadSnapshot as exc:
            trace = [*(live.trace if live else ()), {"#action": action, **snapshot}]
            return self._violation(conversation, trace, action, "TypeOK", str(exc))
        trace = live.trace if live is not None else []
        trace.append(event)  # a violation forgets the conversation: no copy needed

        def parse(base: ConvState) -> tuple[ConvState, AbstractSet[str] | None, bool]:
            return self._observed(base, event), held, "retryable" in event

        return self._event(conversation, live, action, trace, parse)

    def observe_exchange(
        self,
        conversation: Hashable,
        action: str,
        snapshot: Any,
        *,
        obligations: Iterable[str] | None = None,
    ) -> Violation | None:
        """``observe(conversation, action, snapshot_of_exchange(snapshot, action=action,
        obligations=obligations))``, the same check, reading the
        :class:`tpx.transport.exchange.ExchangeSnapshot` directly: its trace event is that mapping,
        built only when the trace is read."""
        live = self._live.get(conversation)
        if live is not None:
            if action not in _STARTS and self._accepts(
                conversation, live, action, snapshot, obligations
            ):
                self.steps += 1
                return None
        elif action == "Resume" and self._resumes_exchange(conversation, snapshot):
            self.steps += 1
            return None
        start = live is None or action in _STARTS
        base = self._init if live is None or start else live.state
        try:
            state, held = self._of_exchange(base, snapshot, action, obligations)
        except BadSnapshot:  # the mapping's way: the same verdict, the same trace
            record = snapshot_of_exchange(snapshot, action=action, obligations=obligations)
            return self.observe(conversation, action, record)
        self.steps += 1
        if live is None and self._resumes(conversation, action, state, held):
            return None
        trace = live.trace if live is not None else []
        trace.append((action, state))
        return self._event(conversation, live, action, trace, lambda _: (state, held, False))

    # -- checking --------------------------------------------------------------------------

    def _violation(
        self,
        conversation: Hashable,
        trace: list[Event],
        action: str,
        prop: str,
        message: str,
    ) -> Violation:
        self.violations += 1
        self.forget(conversation)
        return Violation(conversation, len(trace), action, prop, message, rendered(trace))

    def _context(
        self, conversation: Hashable, others: int, fresh: AbstractSet[str], start: bool = False
    ) -> Context:
        """The rest of the gateway as *conversation* sees it, about to hold the *fresh* ids
        (those it holds already are its own: no other conversation can take them).

        NoCrossPairing per conversation: an id another live conversation took after it
        started (its provider's) is no other's, at a start or later; an id a history brought
        may be in several live conversations' histories at their *start* (requests of one
        conversation at once), but none may take it later (*start* False)."""
        owner, shared, others_of = self._owner, self._shared, self._others
        if (owner or shared) and fresh:
            stolen: list[tuple[str, Hashable]] = []
            for i in fresh:
                if i in owner and others_of(conversation, {owner[i]}):
                    stolen.append((i, owner[i]))
                elif not start and i in shared and (holders := others_of(conversation, shared[i])):
                    stolen.append((i, min(holders, key=repr)))
            if stolen:
                first = min(stolen, key=lambda x: x[0])
                return Context(
                    self._boot,
                    self._retry,
                    _BIG,
                    self._max_in_flight,
                    others,
                    first,
                    Preflight=self._preflight,
                )
        g = self._contexts.get(others)
        if g is None:
            g = Context(
                self._boot,
                self._retry,
                _BIG,
                self._max_in_flight,
                others,
                Preflight=self._preflight,
            )
            self._contexts[others] = g
        return g

    def _observed(self, base: ConvState, snapshot: Mapping[str, Any]) -> ConvState:
        """*base* with every variable the snapshot gives replaced by its value."""
        repeats = self._to_wire is not None  # the wire side is a multiset
        try:
            provider = snapshot["provider"]
            turn, phase = snapshot["turn"], snapshot["phase"]
            pending, req_ids = snapshot["pending"], snapshot["reqIds"]
            wire_shape, wire_ids = snapshot["wireShape"], snapshot["wireIds"]
            emitted, got_shape = snapshot["emitted"], snapshot["gotShape"]
            last_outcome = snapshot["lastOutcome"]
        except KeyError:
            missing = [v for v in _REQUIRED if v not in snapshot]
            raise BadSnapshot(f"the snapshot lacks {missing}") from None
        has_key, has_token = base.hasKey, base.hasToken
        if "hasKey" in snapshot or "hasToken" in snapshot:
            has_key = snapshot.get("hasKey", has_key)
            has_token = snapshot.get("hasToken", has_token)
        elif provider != self._provider:
            # a snapshot without credentials naming another provider: credentials that
            # select it changed (SelectionStable), as far as the snapshot can tell
            has_key, has_token = _SELECTING.get(str(provider), (has_key, has_token))
        return ConvState(
            hasKey=has_key,
            hasToken=has_token,
            provider=provider,
            turn=turn,
            phase=phase,
            pending=ids(pending, "pending", repeats=repeats),
            reqIds=ids(req_ids, "reqIds", repeats=repeats),
            wireShape=wire_shape,
            wireIds=ids(wire_ids, "wireIds", repeats=repeats),
            emitted=ids(emitted, "emitted", repeats=repeats),
            gotShape=got_shape,
            lastOutcome=last_outcome,
            retryable=snapshot.get("retryable", base.retryable),
        )

    def _of_exchange(
        self,
        base: ConvState,
        snapshot: Any,
        action: str,
        obligations: Iterable[str] | None,
    ) -> tuple[ConvState, AbstractSet[str] | None]:
        """:meth:`_observed` and :meth:`_normalize` of :func:`snapshot_of_exchange`'s
        mapping, from the exchange snapshot directly: the state and the ids it holds."""
        pending = snapshot.pending
        if obligations is not None and action in KEEPS_OBLIGATIONS:
            pending = obligations
        req_ids = snapshot.req_ids
        wire_ids = getattr(snapshot, "wire_list", ()) or snapshot.wire_ids
        emitted = getattr(snapshot, "emitted_list", ()) or snapshot.emitted
        caller, wire = self._caller_reads, self._wire_reads
        try:  # the common case: collections read before, a lookup each
            p = caller.get(pending) or self._read(pending, "pending", True)
            r = caller.get(req_ids) or self._read(req_ids, "reqIds", True)
            w = wire.get(wire_ids) or self._read(wire_ids, "wireIds", False)
            e = wire.get(emitted) or self._read(emitted, "emitted", False)
        except TypeError:  # unhashable: read each as given (TypeOK's to judge)
            p = self._read(pending, "pending", True)
            r = self._read(req_ids, "reqIds", True)
            w = self._read(wire_ids, "wireIds", False)
            e = self._read(emitted, "emitted", False)
        provider = self._provider_name(snapshot)
        has_key, has_token = base.hasKey, base.hasToken
        if provider != self._provider:  # credentials that select it changed (see _observed)
            has_key, has_token = _SELECTING.get(provider, (has_key, has_token))
        state = _state_of(snapshot, has_key, has_token, provider, p, r, w, e, base.retryable)
        if self._to_wire is None:
            return state, None
        return state, p[1] | r[1] if r[1] else p[1]

    def _provider_name(self, snapshot: Any) -> str:
        """The name of the snapshot's provider (the last one seen remembered)."""
        seen, name = self._provider_seen
        if snapshot.provider is not seen:
            name = snapshot.provider.name
            self._provider_seen = (snapshot.provider, name)
        return name

    def _read(self, raw: Any, name: str, caller_side: bool) -> tuple[Ids, frozenset[str]]:
        """An id variable of an exchange snapshot: its value (caller-side ids mapped
        ``to_wire``: a set of unique ids; wire-side ids a multiset with ``to_wire``, as
        :meth:`_normalize`) and the caller-side ids it holds. A frozenset or tuple read is
        remembered by value (``to_wire`` is pure): an equal one is not read again."""
        reads = self._caller_reads if caller_side else self._wire_reads
        immutable = type(raw) is frozenset or type(raw) is tuple
        if immutable:
            try:
                hit = reads.get(raw)
            except TypeError:  # unhashable: ids() refuses it
                hit = None
            if hit is not None:
                return hit
        to_wire = self._to_wire
        value = ids(raw, name, repeats=to_wire is not None and not caller_side)
        held: frozenset[str] = _NONE
        if to_wire is not None and caller_side and value:
            held = frozenset(value)
            value = idset([*map(to_wire, value)])
        if immutable:  # every id a string, or none: hashable
            if len(reads) >= _READS:
                reads.clear()  # bounded; amortized O(1) (dropping the oldest is not)
            reads[raw] = (value, held)
        return value, held

    def _normalize(self, event: dict[str, Any]) -> set[str] | None:
        """With ``to_wire``: the caller-side ids the *event* holds (its identities, for
        NoCrossPairing); its ``pending``/``reqIds`` are mapped to wire ids in place.

        Wire ids are not unique: a provider may repeat ``""`` or ``call_0``, or share one id,
        within a response, and the caller-side encodings of those calls stay distinct
        (:mod:`tpx.transport.translate.ids`). So the wire side is a multiset: each of the four id
        variables keeps its repeats (:func:`~tpx.oracle.model.gateway.conversation.idset`), and
        two sides agree iff they carry the same wire ids the same number of times.
        Caller-side ids must still be unique (TypeOK). The trace keeps the wire ids
        (lists, repeats kept)."""
        to_wire = self._to_wire
        if to_wire is None:
            return None
        held: set[str] = set()
        for name in ("pending", "reqIds"):
            if name in event:
                raw = ids(event[name], name)  # caller-side ids are unique
                held.update(raw)
                event[name] = sorted([to_wire(i) for i in raw])
        return held

    def _held(self, state: ConvState, held: AbstractSet[str] | None) -> AbstractSet[str]:
        """The ids whose owner NoCrossPairing checks: the caller-side ids with ``to_wire``
        (wire ids are per upstream response, not global), every id otherwise."""
        return _names(state) if held is None else held

    def _resumes(
        self, conversation: Hashable, action: str, t: ConvState, held: AbstractSet[str] | None
    ) -> bool:
        """A conversation's first event proved legal the short way, and taken: *t* is Init
        (``Resume``: Init but for ``pending``, any ids), where every LOCAL invariant holds
        whatever ``pending`` is (see :data:`~tpx.oracle.model.gateway.conversation.LOCAL`),
        BoundedInv and SelectionStable hold on it, and no id it holds is another live
        conversation's (NoCrossPairing). ``False``: not proved; nothing changed,
        :meth:`_start` decides."""
        head, tail = self._init_but_pending
        if (
            t[6:] != tail
            or t[:5] != head
            or type(t.turn) is not int  # Same: the other numbers are Init's
            or (action != "Resume" and (action != "Init" or t.pending != self._init.pending))
        ):
            return False
        return self._resumed(conversation, action, t, held)

    def _resumed(
        self, conversation: Hashable, action: str, t: ConvState, held: AbstractSet[str] | None
    ) -> bool:
        """:meth:`_resumes` of a *t* that is Init but for ``pending`` (checked)."""
        if (
            not self._init_stable  # SelectionStable: Init's selection is the boot's
            or self._in_flight > self._max_in_flight  # BoundedInv: turn 0, t idle
        ):
            return False
        names = _names(t) if held is None else held
        owner = self._owner
        if names and owner:
            mine = self._conversation(conversation)
            for i in names:
                # another conversation's: a closed conversation's ids are forgotten
                if i in owner and self._conversation(owner[i]) != mine:
                    return False
        self._live[conversation] = _Live(t, [(action, t)], set(names))
        if names:
            shared = self._shared
            for i in names:
                holders = shared.get(i)
                if holders is None:
                    shared[i] = {conversation}
                else:
                    holders.add(conversation)
        return True

    def _resumes_exchange(self, conversation: Hashable, snapshot: Any) -> bool:
        """A first ``Resume`` proved legal the short way, read straight from the exchange
        *snapshot* (:meth:`_of_exchange`, then :meth:`_resumes`): every variable but
        ``pending`` is Init's, the provider the boot's and the other id collections empty as
        an exchange holds them (a frozenset or a tuple; anything else takes the long way,
        which judges it), so the observed state is Init with the snapshot's ``pending``.
        ``False``: not proved; nothing changed."""
        tail = self._init_but_pending[1]
        try:
            turn = snapshot.turn
            if (
                type(turn) is not int
                or turn != 0
                or snapshot.phase != "idle"
                or snapshot.wire_shape != tail[1]
                or snapshot.got_shape != tail[4]
                or snapshot.last_outcome != tail[5]
                or type(snapshot.req_ids) not in _HELD
                or snapshot.req_ids
                or type(wire := snapshot.wire_list or snapshot.wire_ids) not in _HELD
                or wire
                or type(emitted := snapshot.emitted_list or snapshot.emitted) not in _HELD
                or emitted
                or self._provider_name(snapshot) != self._resume_provider
            ):
                return False
            pending = snapshot.pending
            p = self._caller_reads.get(pending) or self._read(pending, "pending", True)
        except (AttributeError, TypeError, BadSnapshot):
            return False
        t: ConvState = _new(ConvState, (*self._init_but_pending[0], p[0], *tail))
        return self._resumed(conversation, "Resume", t, None if self._to_wire is None else p[1])

    def _accepts(
        self,
        conversation: Hashable,
        live: _Live,
        action: str,
        snapshot: Any,
        obligations: Iterable[str] | None,
    ) -> bool:
        """The step of a live conversation proved legal the short way, and taken: the
        exchange *snapshot*, read as :meth:`_of_exchange` reads it, is the well-typed
        successor of the named action (``Next``), so the LOCAL invariants hold on it (see
        :meth:`_verdict`) and so does SelectionStable (no action changes the selection:
        the successor keeps the state's, the boot's); BoundedInv holds on it, and no id it
        holds is another live conversation's (NoCrossPairing). ``False``: not proved;
        nothing changed, :meth:`_step` decides (and finds the violation, if any)."""
        s = live.state
        was_in_flight = s.phase != "idle"
        others = self._in_flight - was_in_flight
        g = self._contexts.get(others) or self._context(conversation, others, _NONE)
        caller, wire = self._caller_reads, self._wire_reads
        try:  # each collection read once (see _read); anything odd: the full check's
            raw = snapshot.emitted_list or snapshot.emitted
            e = wire.get(raw) or self._read(raw, "emitted", False)
            if action == "ProviderReply":  # the successor (None: not enabled)
                expected = ProviderReply(s, g, e[0])
            else:
                act = ACTIONS.get(action)
                expected = None if act is None else act(s, g)
            if expected is None:
                return False
            pending = snapshot.pending
            if obligations is not None and action in KEEPS_OBLIGATIONS:
                pending = obligations
            p = caller.get(pending) or self._read(pending, "pending", True)
            raw = snapshot.req_ids
            r = caller.get(raw) or self._read(raw, "reqIds", True)
            raw = snapshot.wire_list or snapshot.wire_ids
            w = wire.get(raw) or self._read(raw, "wireIds", False)
            seen, provider = self._provider_seen  # _provider_name, inline
            if snapshot.provider is not seen:
                provider = self._provider_name(snapshot)
            turn = snapshot.turn
            # the snapshot as _of_exchange reads it (_state_of, as a plain tuple: equal to
            # the ConvState of the same values), but for what no exchange reports: the
            # selection's credentials and ``retryable`` (the successor's)
            observed: tuple[Any, ...] = (
                expected[0],
                expected[1],
                provider,
                turn,
                snapshot.phase,
                p[0],
                r[0],
                snapshot.wire_shape,
                w[0],
                e[0],
                snapshot.got_shape,
                snapshot.last_outcome,
                expected[12],
            )
        except (AttributeError, TypeError, BadSnapshot):
            return False
        if (
            observed != expected  # variable by variable (provider: the boot's selection)
            or type(turn) is not int  # Same: the other numbers are s's
            # BoundedInv(expected, g), inline: turn <= MaxTurns /\ InFlight <= MaxInFlight
            or turn > g.MaxTurns
            or g.others_in_flight + (expected.phase != "idle") > g.MaxInFlight
        ):
            return False
        owned = live.owned
        if self._to_wire is None:
            names: AbstractSet[str] = _names(expected)
        elif r[1] and not r[1] <= owned:
            names = p[1] | r[1]
        else:
            names = p[1]
        if names and not names <= owned:  # NoCrossPairing: the ids it takes are no other's
            fresh = names - owned
            owner, shared, others_of = self._owner, self._shared, self._others
            for i in fresh:
                if (i in owner and others_of(conversation, {owner[i]})) or (
                    i in shared and others_of(conversation, shared[i])
                ):
                    return False
            for i in fresh:
                owner.setdefault(i, conversation)  # a sibling's stays its
            owned |= fresh
        live.state = expected
        live.trace.append((action, expected))
        self._in_flight += (expected.phase != "idle") - was_in_flight
        return True

    def _verdict(
        self, s: ConvState | None, action: str, t: ConvState, g: Context, retryable: bool
    ) -> tuple[ConvState, Failure | None]:
        """Check the event *action* that took the conversation from *s* (``None``: the
        conversation starts with it) to *t* (``retryable``: the event reported it, else the
        spec's successor says it). Returns *t* as checked and the first failure."""
        expected: ConvState | None = self._init
        invariants = INVARIANTS
        if s is not None:
            expected = step(action, s, g, t.emitted)
            if expected is not None:
                if not retryable and t.retryable is not expected.retryable:
                    t = t._replace(retryable=expected.retryable)
                if Same(t, expected):  # the local invariants hold there (see LOCAL)
                    invariants = _NOT_LOCAL
        for name, invariant in invariants:
            if not invariant(t, g):
                if name == "NoCrossPairing" and g.foreign is not None:
                    one, owner = g.foreign
                    return t, (name, f"{one!r} belongs to conversation {owner!r}")
                return t, (name, f"state {_show(t)}")
        if not SelectionStable(t, g):
            return t, (
                "SelectionStable",
                f"selection (hasKey, hasToken, provider) = "
                f"{(t.hasKey, t.hasToken, t.provider)}, booted with {g.boot}",
            )
        if s is None:
            if action == "Init" and t != expected:
                return t, ("Init", f"{_show(t)} is no initial state")
            if t.phase != "idle":
                return t, ("Init", "a conversation resumes idle")
        elif t != expected:
            why = (
                f"{action} is not enabled in {_show(s)}"
                if expected is None
                else f"{action} leads to {_show(expected)}, observed {_show(t)}"
            )
            return t, ("Next", why)
        return t, None

    def _event(
        self,
        conversation: Hashable,
        live: _Live | None,
        action: str,
        trace: list[Event],
        parse: _Parse,
    ) -> Violation | None:
        try:
            if live is None or action in _STARTS:
                return self._start(conversation, live, action, trace, parse)
            return self._step(conversation, live, action, trace, parse)
        except BadSnapshot as exc:
            return self._violation(conversation, trace, action, "TypeOK", str(exc))

    def _start(
        self,
        conversation: Hashable,
        live: _Live | None,
        action: str,
        trace: list[Event],
        parse: _Parse,
    ) -> Violation | None:
        if action not in _STARTS:
            return self._violation(
                conversation,
                trace,
                action,
                "Init",
                f"{action} of a conversation that has not started (Init or Resume first)",
            )
        if live is not None and live.state.phase != "idle":
            return self._violation(
                conversation, trace, action, "Next", f"{action} while an exchange is in flight"
            )
        if live is not None:  # starts again: still an exchange of its conversation
            whole = self._of.get(conversation)
            self.forget(conversation)
            if whole is not None:
                self.joins(conversation, whole)
        state, held, retryable = parse(self._init)
        owned = self._held(state, held)
        g = self._context(conversation, self._in_flight, owned, start=True)
        state, found = self._verdict(None, action, state, g, retryable)
        if found is not None:
            return self._violation(conversation, trace, action, *found)
        self._live[conversation] = _Live(state, trace, set(owned))
        for name in owned:
            self._shared.setdefault(name, set()).add(conversation)
        return None

    def _step(
        self,
        conversation: Hashable,
        live: _Live,
        action: str,
        trace: list[Event],
        parse: _Parse,
    ) -> Violation | None:
        if action not in _ACTION_NAMES:
            return self._violation(
                conversation, trace, action, "Next", f"{action!r} is no action of the spec"
            )
        s = live.state
        was_in_flight = s.phase != "idle"
        observed, held, retryable = parse(s)
        fresh = self._held(observed, held) - live.owned
        g = self._context(conversation, self._in_flight - was_in_flight, fresh)
        observed, found = self._verdict(s, action, observed, g, retryable)
        if found is not None:
            return self._violation(conversation, trace, action, *found)
        live.state = observed
        live.trace = trace
        self._in_flight += (observed.phase != "idle") - was_in_flight
        if fresh:
            for name in fresh:
                self._owner.setdefault(name, conversation)  # a sibling's stays its
            live.owned |= fresh
        return None


def _show(s: ConvState) -> str:
    """A conversation's variables, readably."""
    parts = []
    for name in ("provider", *CONVERSATION_VARS, "retryable"):
        value = getattr(s, name)
        if name in _ID_VARS and isinstance(value, frozenset | tuple):
            value = sorted(value)
        parts.append(f"{name}={value}")
    return "[" + ", ".join(parts) + "]"
