"""What the two mirrors share: the seed's (:mod:`tpx.oracle.model`, ``spec/TpxTransport.tla``) and
the gateway's (:mod:`tpx.oracle.model.gateway`, ``spec/TpxGateway.tla``).

The gateway spec keeps the seed's value domains, ``SUBSET``, its state plumbing (a state
is the ``vars`` tuple, TLC prints it as a record) and its step property SelectionStable;
each mirror imports them from here and names them as its spec does, so both still read
one-for-one with their specs.

==================================  =====================================
both specs                          here
==================================  =====================================
Shapes, Phases, Outcomes            :data:`Shapes`, :data:`Phases`, :data:`Outcomes`
``SUBSET s`` (ProviderReply)        :func:`subsets`
vars, a state as TLC prints it      :class:`SpecState`
CredsUnchanged, SelectionStable     :func:`CredsUnchanged`, :func:`SelectionStable`
==================================  =====================================
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from itertools import chain, combinations
from typing import Any, Protocol, TypeVar, cast

import attrs

from tpx.oracle.values import Record

__all__ = [
    "CredsUnchanged",
    "Outcomes",
    "Phases",
    "SelectionStable",
    "Shapes",
    "SpecState",
    "subsets",
    "variables_of",
]

Shapes = frozenset({"messages", "openai"})
Phases = frozenset({"idle", "req", "resp"})
Outcomes = frozenset({"none", "ok", "err"})

T = TypeVar("T")


def subsets(s: Iterable[T]) -> Iterator[frozenset[T]]:
    """``SUBSET s``, smallest first (each size in sorted order)."""
    items = sorted(s)  # type: ignore[type-var]
    return (
        frozenset(c)
        for c in chain.from_iterable(combinations(items, r) for r in range(len(items) + 1))
    )


class SpecState:
    """A mirror's state (an attrs class whose fields are the spec's VARIABLES, in order)."""

    __slots__ = ()

    def vars(self) -> tuple[Any, ...]:
        """The spec's ``vars`` tuple."""
        return attrs.astuple(cast(attrs.AttrsInstance, self), recurse=False)

    def as_record(self) -> Record:
        """The state as TLC prints it: variable name -> TLA+ value."""
        return Record(attrs.asdict(cast(attrs.AttrsInstance, self), recurse=False))


def variables_of(record: Mapping[str, Any], names: tuple[str, ...]) -> dict[str, Any]:
    """The values of exactly the variables *names* in *record* (e.g. parsed TLC output)."""
    given = set(record)
    if given != set(names):
        raise ValueError(
            f"a state needs exactly the variables {list(names)}; "
            f"missing {sorted(set(names) - given)}, unknown {sorted(given - set(names))}"
        )
    return {n: record[n] for n in names}


class Selection(Protocol):
    """The shared selection: what every state of both specs has."""

    @property
    def hasKey(self) -> bool: ...
    @property
    def hasToken(self) -> bool: ...
    @property
    def provider(self) -> Any: ...


def CredsUnchanged(s: Selection, t: Selection) -> bool:
    """``UNCHANGED <<hasKey, hasToken, provider>>`` on the step s -> t."""
    return (s.hasKey, s.hasToken, s.provider) == (t.hasKey, t.hasToken, t.provider)


def SelectionStable(s: Selection, t: Selection) -> bool:
    """``[][CredsUnchanged]_vars``: every step keeps the credentials (or stutters)."""
    return CredsUnchanged(s, t) or s == t
