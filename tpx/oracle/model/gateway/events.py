"""What the gateway monitor reads and records (:mod:`tpx.oracle.model.gateway.monitor`): an
exchange's snapshot as the monitor's mapping (:func:`snapshot_of_exchange`), an id
variable's value read from an event (:func:`ids`), and trace events built when read
(:data:`Seen`, :func:`rendered`)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from typing import Any

from tpx.oracle.model.gateway.conversation import ConvState, Ids

__all__ = [
    "COLLECTIONS",
    "KEEPS_OBLIGATIONS",
    "BadSnapshot",
    "Event",
    "Seen",
    "ids",
    "render",
    "rendered",
    "request_kind",
    "snapshot_of_exchange",
]

#: The actions whose ``pending`` is the history's obligations (see snapshot_of_exchange).
KEEPS_OBLIGATIONS = ("ProviderFail", "ClientGone", "CallerAbort", "PromptTooLong")


def _sorted(ids: Iterable[Any]) -> list[Any]:
    """The ids in order; as they come if they do not sort (not all strings: TypeOK)."""
    items = list(ids)
    try:
        return sorted(items)
    except TypeError:
        return items


def snapshot_of_exchange(
    snapshot: Any, *, action: str | None = None, obligations: Iterable[str] | None = None
) -> dict[str, Any]:
    """A :class:`tpx.transport.exchange.ExchangeSnapshot` as a monitor snapshot (the same JSON-style
    mapping the gateway writes to its traces).

    The gateway runs one seed exchange per request, and the seed's ProviderFail and
    CallerAbort discard the exchange's ``pending``; the conversation's obligations are
    its history's all the same (the gateway spec). Pass the request history's
    obligations as *obligations* with the *action* and, for ProviderFail, ClientGone
    and CallerAbort, they are the snapshot's ``pending``.

    ``wireIds`` / ``emitted`` keep a wire id the provider repeated once per call (the
    snapshot's ``wire_list`` / ``emitted_list``): a monitor with ``to_wire`` counts them
    (see :class:`GatewayMonitor`)."""
    pending = snapshot.pending
    if obligations is not None and action in KEEPS_OBLIGATIONS:
        pending = obligations
    return {
        "provider": snapshot.provider.name,
        "turn": snapshot.turn,
        "phase": snapshot.phase,
        "pending": _sorted(pending),
        "reqIds": _sorted(snapshot.req_ids),
        "wireShape": snapshot.wire_shape,
        # the multisets when the snapshot has them: a provider may repeat a wire id
        "wireIds": _sorted(getattr(snapshot, "wire_list", ()) or snapshot.wire_ids),
        "emitted": _sorted(getattr(snapshot, "emitted_list", ()) or snapshot.emitted),
        "gotShape": snapshot.got_shape,
        "lastOutcome": snapshot.last_outcome,
    }


class BadSnapshot(ValueError):
    """An event's snapshot is not a state of the spec's types (TypeOK)."""


COLLECTIONS = frozenset({list, tuple, frozenset, set})
_NONE: frozenset[str] = frozenset()


def _bad(value: Any, name: str) -> BadSnapshot:
    return BadSnapshot(f"{name} must be a list of tool-id strings, got {value!r}")


def ids(value: Any, name: str, *, repeats: bool = False) -> Ids:
    """An id variable's value (:func:`~tpx.oracle.model.gateway.conversation.idset`): a set, or a
    multiset when *repeats* are allowed. Anything but an iterable of strings is refused
    (TypeOK), and so is a repeated id unless *repeats*."""
    if type(value) not in COLLECTIONS:
        if isinstance(value, str | bytes) or not isinstance(value, Iterable):
            raise _bad(value, name)
        value = list(value)
    if not value:
        return _NONE
    try:
        "".join(value)  # every id a string: join refuses anything else
    except TypeError:
        raise _bad(value, name) from None
    unique = frozenset(value)
    if len(unique) == len(value):
        return unique
    if not repeats:
        raise BadSnapshot(f"{name} lists an id twice: {sorted(value)}")
    return tuple(sorted(value))


#: A trace event of :meth:`GatewayMonitor.observe_exchange`: ``(action, state)``, the mapping
#: :func:`snapshot_of_exchange` makes (ids mapped ``to_wire``) built when read (:func:`render`).
Seen = tuple[str, ConvState]


def render(seen: Seen) -> dict[str, Any]:
    """A :data:`Seen` event as its trace mapping."""
    action, s = seen
    return {
        "#action": action,
        "provider": s.provider,
        "turn": s.turn,
        "phase": s.phase,
        "pending": sorted(s.pending),
        "reqIds": sorted(s.reqIds),
        "wireShape": s.wireShape,
        "wireIds": sorted(s.wireIds),
        "emitted": sorted(s.emitted),
        "gotShape": s.gotShape,
        "lastOutcome": s.lastOutcome,
    }


Event = dict[str, Any] | Seen


def rendered(trace: list[Event]) -> tuple[Mapping[str, Any], ...]:
    return tuple(render(e) if isinstance(e, tuple) else e for e in trace)


def request_kind(
    obligations: AbstractSet[str],
    answers: Sequence[str],
    verifies: Callable[[str], bool] | None = None,
) -> str:
    """What a client's request is, in the spec's ``Requests``: ``"ok"`` when its last user
    turn answers each obligation of its history exactly once; else how it is wrong
    (``Wrong``): an id that does not verify (*verifies*: a gateway that signs the ids it
    hands out) ``"retired"``, an answer twice ``"duplicated"``, an answer for an id that is
    no obligation ``"unknown"``, an obligation unanswered ``"missing"``."""
    if verifies is not None and not all(map(verifies, (*obligations, *answers))):
        return "retired"
    answered = set(answers)
    if len(answered) != len(answers):
        return "duplicated"
    if not answered <= obligations:
        return "unknown"
    return "ok" if answered == obligations else "missing"
