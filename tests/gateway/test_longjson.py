""":func:`tpx.gateway.longjson.loads` is ``orjson.loads``: the same value for every body,
an error for every body orjson refuses; the windows and slices made small here so that
short bodies take every path (runs cut in slices, escapes and characters at a cut)."""

from __future__ import annotations

import json
import random
from typing import Any

import orjson
import pytest

from tpx.gateway import longjson

#: What strings are made of: escapes, quotes, multi-byte characters, the marker's ``~``.
_ALPHABET = ["a", "b", " ", "\\", '"', "/", "~", "\u00e9", "\u65e5", "\U0001f600", "\n", "\u2028"]


def make_small(monkeypatch: pytest.MonkeyPatch) -> None:
    """Windows of 8 bytes, slices of 37, every body over 64 bytes parsed in steps."""
    monkeypatch.setattr(longjson, "THRESHOLD", 64)
    monkeypatch.setattr(longjson, "WINDOW", 8)
    monkeypatch.setattr(longjson, "SLICE", 37)


@pytest.fixture
def small(monkeypatch: pytest.MonkeyPatch) -> None:
    make_small(monkeypatch)


def _string(rnd: random.Random) -> str:
    size = rnd.choice([0, 1, 5, 20, 60, 200])
    return "".join(rnd.choice(_ALPHABET) for _ in range(size))


def _value(rnd: random.Random, depth: int = 0) -> Any:
    kind = rnd.random()
    if depth > 3 or kind < 0.4:
        return _string(rnd)
    if kind < 0.5:
        return rnd.choice([1, 2.5, None, True, -7, 123456789012])
    if kind < 0.75:
        return [_value(rnd, depth + 1) for _ in range(rnd.randint(0, 4))]
    return {_string(rnd): _value(rnd, depth + 1) for _ in range(rnd.randint(0, 4))}


def _body(rnd: random.Random) -> bytes:
    value = {"model": _string(rnd), "x": _value(rnd)}
    if rnd.random() < 0.5:
        return orjson.dumps(value)
    # escaped spellings (``\uXXXX``, ``\/``, surrogate pairs) and whitespace between tokens
    text = json.dumps(value, ensure_ascii=rnd.random() < 0.5).replace("/", "\\/")
    return text.replace(", ", "," + " " * rnd.randint(0, 40)).encode()


def _outcome(loads: Any, body: bytes) -> tuple[str, Any]:
    try:
        return "value", loads(body)
    except orjson.JSONDecodeError:
        return "error", None


def test_the_value_is_orjsons_for_every_body(small: None, monkeypatch: pytest.MonkeyPatch) -> None:
    rnd = random.Random(19)
    cut = 0
    decode = longjson._decode

    def counting(body: bytes, start: int, end: int) -> str:
        nonlocal cut
        cut += 1
        return decode(body, start, end)

    monkeypatch.setattr(longjson, "_decode", counting)
    for _ in range(3000):
        body = _body(rnd)
        assert _outcome(longjson.loads, body) == _outcome(orjson.loads, body), body
    assert cut > 1000, "runs were cut out and decoded in slices"


def test_a_long_string_after_escaped_quotes_is_cut_in_slices(
    small: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The quotes escaped in earlier strings (``\\"``, ``\\\\\\"``) do not open or close one:
    the long string after them is still found to be one, and decoded in slices."""
    runs: list[tuple[int, int]] = []
    decode = longjson._decode

    def recording(body: bytes, start: int, end: int) -> str:
        runs.append((start, end))
        return decode(body, start, end)

    monkeypatch.setattr(longjson, "_decode", recording)
    for before in ('say \\"hi\\"', 'a \\\\\\" b', 'odd \\"'):
        runs.clear()
        text = "long " * 40
        body = b'{"a":"' + before.encode() + b'","text":"' + text.encode() + b'"}'
        assert longjson.loads(body) == orjson.loads(body)
        assert [body[start:end] for start, end in runs] == [text.encode()], before


def test_a_body_orjson_refuses_is_refused(small: None) -> None:
    rnd = random.Random(7)
    for _ in range(3000):
        body = bytearray(_body(rnd))
        at = rnd.randrange(len(body))
        body[at] = rnd.choice(b'\x01"\\{}:,')
        data = bytes(body)
        assert _outcome(longjson.loads, data)[0] == _outcome(orjson.loads, data)[0], data


def test_a_bad_character_in_a_long_string_is_placed_in_the_body(small: None) -> None:
    body = b'{"model":"m","text":"' + b"a" * 300 + b"\x01" + b"b" * 300 + b'"}'
    with pytest.raises(orjson.JSONDecodeError) as caught:
        longjson.loads(body)
    with pytest.raises(orjson.JSONDecodeError) as expected:
        orjson.loads(body)
    assert caught.value.msg == expected.value.msg
    assert caught.value.pos == expected.value.pos


def test_the_defaults_cut_a_30_mb_string_in_slices(monkeypatch: pytest.MonkeyPatch) -> None:
    text = "\u65e5\u672c " * (10 << 20 >> 2)
    body = orjson.dumps({"model": "m", "messages": [{"role": "user", "content": text}]})
    sizes: list[int] = []
    real = longjson._parse

    def recording(data: bytes) -> Any:
        sizes.append(len(data))
        return real(data)

    monkeypatch.setattr(longjson, "_parse", recording)
    value = longjson.loads(body)
    assert value["messages"][0]["content"] == text
    assert max(sizes) <= longjson.SLICE + 2
