"""tpx._safe: the depth rule and the bounded formatter never recurse or run long."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

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
