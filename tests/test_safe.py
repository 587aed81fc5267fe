"""tpx._safe: the depth rule and the bounded formatter never recurse or run long."""

from __future__ import annotations

import threading
import types
from collections.abc import Mapping
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tpx import _safe
from tpx.errors import redact, secret_forms


def _nested(depth: int) -> Any:
    value: Any = 0
    for _ in range(depth):
        value = [value]
    return value


def test_depth_bound_is_exact() -> None:
    assert not _safe.too_deep(_nested(_safe.MAX_DEPTH))
    assert _safe.too_deep(_nested(_safe.MAX_DEPTH + 1))
    assert not _safe.too_deep(0)
    assert _safe.too_deep(_nested(100_000))  # no RecursionError


def test_cyclic_values_are_too_deep() -> None:
    cycle: dict[str, Any] = {}
    cycle["a"] = cycle
    cycle["b"] = cycle
    assert _safe.too_deep(cycle)


def test_loads_refuses_deep_json_without_chaining() -> None:
    data = orjson.dumps(_nested(_safe.MAX_DEPTH))
    assert _safe.loads(data) == _nested(_safe.MAX_DEPTH)
    for text in (b"[" * 129 + b"]" * 129, b"[" * 5000 + b"]" * 5000):
        with pytest.raises(_safe.DepthError) as info:
            _safe.loads(text)
        assert info.value.__context__ is None
    with pytest.raises(_safe.NotJSONError) as bad:
        _safe.loads(b"{secret")
    assert bad.value.__context__ is None


# Strings full of what a cheap bracket count or a careless string skipper trips on.
_TRICKY_TEXT = st.text(alphabet=st.sampled_from("[]{}\"\\'a:,\u00e9\U0001f600"), max_size=12)


def _documents(max_depth: int) -> st.SearchStrategy[Any]:
    """JSON values of every shape, up to about *max_depth* deep, strings included."""
    return st.recursive(
        st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | _TRICKY_TEXT,
        lambda inner: (
            st.lists(inner, max_size=3) | st.dictionaries(_TRICKY_TEXT, inner, max_size=3)
        ),
        max_leaves=max_depth * 3,
    )


@settings(max_examples=300, deadline=None)
@given(value=_documents(12), limit=st.integers(min_value=1, max_value=10), pad=st.integers(0, 2))
def test_loads_depth_verdict_is_exact(value: Any, limit: int, pad: int) -> None:
    """_safe.loads refuses exactly the texts too_deep refuses, for texts short (no check),
    counted, and long (serialized): brackets and escaped quotes inside strings included."""
    data = orjson.dumps(value)
    if pad:  # a long string pushes the text past the count into the exact check
        data = orjson.dumps({"pad": "[{" * (pad * 5000), "v": value})
        value = orjson.loads(data)
    expected = _safe.too_deep(value, limit)
    for text in (data, data.decode()):  # bytes and str alike
        if expected:
            with pytest.raises(_safe.DepthError):
                _safe.loads(text, limit)
        else:
            assert _safe.loads(text, limit) == value
    assert _safe.parsed_too_deep(value, limit) is expected


def _depth(value: Any) -> int:
    """The reference: nesting depth by plain recursion (test values are shallow)."""
    if isinstance(value, Mapping):
        return 1 + max((_depth(v) for v in value.values()), default=0)
    if isinstance(value, list | tuple):
        return 1 + max((_depth(v) for v in value), default=0)
    return 0


def _foreign(value: Any) -> Any:
    """*value* with some containers in types orjson does not write (a read-only Mapping,
    int keys, a big int), some in types it writes (tuples, a dict subclass)."""
    if isinstance(value, dict):
        kind = len(value) % 4
        inner = {k: _foreign(v) for k, v in value.items()}
        if kind == 1:
            return types.MappingProxyType(inner)
        if kind == 2:
            return _Sub(inner)
        if kind == 3:
            return {**{i: v for i, v in enumerate(inner.values())}, "big": 2**70}
        return inner
    if isinstance(value, list):
        items = [_foreign(v) for v in value]
        return tuple(items) if len(items) % 2 else items
    return value


class _Sub(dict[Any, Any]):
    pass


@settings(max_examples=300, deadline=None)
@given(value=_documents(12), limit=st.integers(min_value=1, max_value=12), foreign=st.booleans())
def test_too_deep_agrees_with_the_recursive_depth(value: Any, limit: int, foreign: bool) -> None:
    """The C-speed path (orjson writes the value inside a nest) and the walk give the
    reference's verdict, for JSON values and for containers orjson cannot write."""
    if foreign:
        value = _foreign(value)
    assert _safe.too_deep(value, limit) is (_depth(value) > limit)


def _wrapped(kind: str, depth: int) -> Any:
    value: Any = 0
    for _ in range(depth):
        if kind == "list":
            value = [value]
        elif kind == "tuple":  # orjson writes tuples without counting their depth
            value = (value,)
        elif kind == "proxy":
            value = types.MappingProxyType({"k": value})
        elif kind == "subclass":
            value = _Sub(k=value)
        else:  # int keys: orjson cannot write it at all
            value = {1: value}
    return value


@pytest.mark.parametrize("kind", ["list", "tuple", "proxy", "subclass", "int-keys"])
@pytest.mark.parametrize("depth", [_safe.MAX_DEPTH, _safe.MAX_DEPTH + 1])
def test_too_deep_at_the_bound_for_every_container_type(kind: str, depth: int) -> None:
    assert _safe.too_deep(_wrapped(kind, depth)) is (depth > _safe.MAX_DEPTH)


@pytest.mark.parametrize("padding", [0, 100, 20_000])
@pytest.mark.parametrize("depth", [_safe.MAX_DEPTH - 1, _safe.MAX_DEPTH, _safe.MAX_DEPTH + 1])
def test_loads_bound_is_exact_at_max_depth(depth: int, padding: int) -> None:
    """At the real bound, with and without strings of brackets / escaped quotes that a
    count would see: one level more is refused, the bound itself passes."""
    value: Any = {"s": '[{"\\"' * padding}
    for _ in range(depth - 1):
        value = [value, ']}[{\\"']
    data = orjson.dumps(value)
    if depth > _safe.MAX_DEPTH:
        with pytest.raises(_safe.DepthError):
            _safe.loads(data)
    else:
        assert _safe.loads(data) == value


def test_parsed_too_deep_leaves_nothing_behind_and_is_thread_safe() -> None:
    shallow, deep = _nested(_safe.MAX_DEPTH), _nested(_safe.MAX_DEPTH + 1)
    verdicts: list[tuple[bool, bool]] = []

    def work() -> None:
        for _ in range(200):
            verdicts.append((_safe.parsed_too_deep(shallow), _safe.parsed_too_deep(deep)))

    threads = [threading.Thread(target=work) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert set(verdicts) == {(False, True)}
    for outer, inner in _safe._NESTS[254 - _safe.MAX_DEPTH]:  # they hold no caller value
        assert inner == [None]
        assert not _safe.too_deep(outer, 254 - _safe.MAX_DEPTH)
        assert _safe.too_deep(outer, 254 - _safe.MAX_DEPTH - 1)
    assert _safe.parsed_too_deep(_nested(300), 300) is False  # a limit past orjson's


def test_short_texts_are_never_counted_and_long_ones_always_checked() -> None:
    assert not _safe.bytes_may_be_too_deep(b"[" * (2 * _safe.MAX_DEPTH))
    assert _safe.bytes_may_be_too_deep(b"[" * (2 * _safe.MAX_DEPTH + 1))
    assert not _safe.bytes_may_be_too_deep("x" * 10_000)
    assert _safe.bytes_may_be_too_deep(b"x" * 100_000)  # long: left to the exact check


def test_what_passes_the_rule_orjson_writes_back_with_room() -> None:
    # a translated body nests at most a few levels deeper than its parts
    orjson.dumps([[[_nested(_safe.MAX_DEPTH)]]])


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        ("abc", "'abc'"),
        (None, "None"),
        (True, "True"),
        (3, "3"),
        (10**40, "a very large integer"),
        ({"a": 1}, "an object (1 keys)"),
        ([1, 2], "an array (2 items)"),
        (b"x", "a value of type bytes"),
    ],
)
def test_quote(value: Any, shown: str) -> None:
    assert _safe.quote(value) == shown


def test_quote_is_bounded_and_marks_the_cut() -> None:
    text = _safe.quote("x" * 10_000)
    assert len(text) <= _safe.QUOTE_LIMIT + 3
    assert text.endswith(_safe.CUT + "'")
    assert _safe.quote(_nested(100_000)) == "an array (1 items)"


def test_a_secret_cut_by_a_quote_is_redacted() -> None:
    secret = "sk-ant-0123456789abcdefghijklmnopq"
    for prefix in range(0, 80):
        text = _safe.quote("y" * prefix + secret)
        cleaned = redact(text, secret_forms([secret]))
        for size in range(4, len(secret) + 1):
            assert secret[:size] not in cleaned, (prefix, cleaned)


def test_a_secret_broken_up_by_unforeseen_escapes_leaves_no_readable_piece() -> None:
    secret = "sk-canary'Q7fZ9xY2wV4uT6sR8pO1"
    text = "\"{'k': 'sk-canary\\\\'Q7fZ9xY2wV4uT6sR8pO1\\\"'}\""  # repr in JSON in repr
    cleaned = redact(text, secret_forms([secret]))
    assert "Q7fZ9xY2" not in cleaned
    assert "sk-canary" not in cleaned
    assert redact("nothing secret here", secret_forms([secret])) == "nothing secret here"


def test_serialized_within_is_orjson_dumps_or_none() -> None:
    value = {"a": [1, "x]", {"b": None}], "c": "\\"}
    assert _safe.serialized_within(value) == orjson.dumps(value)
    assert _safe.serialized_within(value, 3) == orjson.dumps(value)
    assert _safe.serialized_within(value, 2) is None
    assert _safe.serialized_within(_nested(_safe.MAX_DEPTH)) == orjson.dumps(
        _nested(_safe.MAX_DEPTH)
    )
    assert _safe.serialized_within(_nested(_safe.MAX_DEPTH + 1)) is None
    with pytest.raises(ValueError, match="not below"):
        _safe.serialized_within(value, 254)
