"""Hypothesis strategies for the TLA+ values TLC prints (see :mod:`tpx.oracle.values`)."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from tpx.oracle.values import Function, ModelValue, Record

__all__ = ["identifiers", "model_values", "tla_strings", "tla_values"]

_RESERVED = frozenset({"TRUE", "FALSE"})

identifiers: st.SearchStrategy[str] = st.from_regex(
    r"[A-Za-z_][A-Za-z0-9_]{0,7}", fullmatch=True
).filter(lambda s: s not in _RESERVED and not s.replace("_", "").isdigit() and not s[0].isdigit())
"""TLA+ identifiers usable as record fields and model value names."""

model_values: st.SearchStrategy[ModelValue] = identifiers.map(ModelValue)

tla_strings: st.SearchStrategy[str] = st.text(
    alphabet=st.sampled_from([chr(c) for c in range(0x20, 0x7F)] + ["\n", "\t", "\r", "\f"]),
    max_size=12,
)
"""Strings TLA+ can write: printable ASCII plus the escapable control characters."""

# Scalars of one kind: Python merges True with 1 in sets, so sets and
# function domains are kept homogeneous (TLC cannot compare mixed kinds anyway).
_scalar_kinds: list[st.SearchStrategy[Any]] = [
    st.booleans(),
    st.integers(min_value=-(2**31), max_value=2**31 - 1),
    tla_strings,
    model_values,
]
_keys = st.one_of(*_scalar_kinds[1:])


def _compound(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    sets = st.one_of(*(st.frozensets(k, max_size=4) for k in _scalar_kinds)) | st.frozensets(
        st.frozensets(st.integers(-3, 3), max_size=3), max_size=3
    )
    tuples = st.lists(children, max_size=4).map(tuple)
    records = st.dictionaries(identifiers, children, min_size=1, max_size=4).map(Record)
    functions = st.one_of(
        *(
            st.dictionaries(k, children, min_size=1, max_size=3).map(Function)
            for k in _scalar_kinds[1:]
        )
    )
    return sets | tuples | records | functions


tla_values: st.SearchStrategy[Any] = st.recursive(
    st.one_of(*_scalar_kinds), _compound, max_leaves=12
)
"""Any TLA+ value TLC can print (no empty records; empty functions print as <<>>)."""
