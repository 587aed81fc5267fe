"""Python representations of the TLA+ values TLC prints.

=====================  ==========================================
TLA+                   Python
=====================  ==========================================
TRUE / FALSE           bool
42                     int
"text"                 str
model value ``t1``     :class:`ModelValue` (never equal to a str)
{a, b}                 frozenset
<<a, b>>               tuple
[f |-> 1]              :class:`Record`
(a :> 1 @@ b :> 2)     :class:`Function`
=====================  ==========================================
"""

from __future__ import annotations

from collections.abc import ItemsView, Iterator, KeysView, Mapping, ValuesView
from typing import Any, TypeAlias

import attrs

__all__ = ["Function", "ModelValue", "Record", "TLAValue"]


@attrs.frozen(order=True, repr=False)
class ModelValue:
    """A TLC model value: an uninterpreted constant, distinct from every string."""

    name: str

    def __repr__(self) -> str:
        return self.name

    def __str__(self) -> str:
        return self.name


class _FrozenMapping(Mapping[Any, Any]):
    """An immutable, hashable mapping (base of Record and Function)."""

    __slots__ = ("_hash", "_items")

    def __init__(self, items: Mapping[Any, Any] | None = None, /, **kw: Any) -> None:
        data = dict(items or {})
        data.update(kw)
        self._items: dict[Any, Any] = data
        self._hash: int | None = None

    def __getitem__(self, key: Any) -> Any:
        return self._items[key]

    def __iter__(self) -> Iterator[Any]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    # dict speed for the Mapping mixins (the mirrors read these in every step)
    def __contains__(self, key: object) -> bool:
        return key in self._items

    def keys(self) -> KeysView[Any]:
        return self._items.keys()

    def values(self) -> ValuesView[Any]:
        return self._items.values()

    def items(self) -> ItemsView[Any, Any]:
        return self._items.items()

    def __hash__(self) -> int:
        if self._hash is None:
            self._hash = hash((type(self).__name__, frozenset(self._items.items())))
        return self._hash

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        assert isinstance(other, _FrozenMapping)
        return self._items == other._items

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._items!r})"


class Record(_FrozenMapping):
    """A TLA+ record ``[field |-> value, ...]`` keyed by field name."""

    __slots__ = ()


class Function(_FrozenMapping):
    """A TLA+ function written ``(k1 :> v1 @@ k2 :> v2)``."""

    __slots__ = ()


TLAValue: TypeAlias = (
    bool | int | str | ModelValue | frozenset[Any] | tuple[Any, ...] | Record | Function
)
