"""The oracle of tpx.gateway.bodies (tests/gateway/test_bodies.py and ``make fuzz``)."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from tpx._safe import parsed_too_deep
from tpx.gateway.bodies import BodyReader, Decoded


def read_as_orjson(reader: BodyReader, body: bytes) -> Decoded | None:
    """``reader.read(body)`` is ``orjson.loads(body)``: the same value (top-level member
    order included) and depth verdict, or the same error (then ``None``)."""
    expected: Any = None
    error: str | None = None
    try:
        expected = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        error = str(exc)
    if error is not None:
        with pytest.raises(orjson.JSONDecodeError) as got:
            reader.read(body)
        assert str(got.value) == error
        return None
    decoded = reader.read(body)
    assert decoded.value == expected
    if isinstance(expected, dict):
        assert list(decoded.value) == list(expected)
    assert decoded.too_deep() == parsed_too_deep(expected)
    return decoded
