"""tpx._scrub: credential echoes removed from reply text and parsed values."""

from __future__ import annotations

from typing import Any

from tpx._scrub import Scrubber
from tpx.errors import secret_forms

SECRET = "sk-ant-echo'0123456789abcdef"


def _scrubber() -> Scrubber:
    return Scrubber(secret_forms([SECRET]))


def test_reply_text_is_cleaned_and_escapes_flagged() -> None:
    scrub = _scrubber()
    data, walk = scrub.reply(b'{"a": "x' + SECRET.encode() + b'y"}')
    assert SECRET.encode() not in data
    assert b"[REDACTED]" in data
    assert not walk
    _, walk = scrub.reply(b'{"a": "\\u0041"}')
    assert walk
    text, walk = scrub.text("echo " + SECRET)
    assert text == "echo [REDACTED]"
    assert not walk


def test_values_are_cleaned_everywhere_without_recursion() -> None:
    scrub = _scrubber()
    value: Any = {"k": [SECRET, {"deep": "a" + SECRET}], SECRET: 1, "n": [1, None, True]}
    cleaned = scrub.value(value)
    assert cleaned == {
        "k": ["[REDACTED]", {"deep": "a[REDACTED]"}],
        "[REDACTED]": 1,
        "n": [1, None, True],
    }
    assert SECRET in value["k"]  # the input is not modified
    untouched = {"a": ["b"]}
    assert scrub.value(untouched) is untouched
    nested: Any = SECRET
    for _ in range(10_000):
        nested = [nested]
    out = scrub.value(nested)
    for _ in range(10_000):
        out = out[0]
    assert out == "[REDACTED]"


def test_no_secrets_no_work() -> None:
    assert not Scrubber(())
    assert Scrubber(()).reply(b"abc") == (b"abc", False)
