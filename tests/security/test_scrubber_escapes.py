"""The scrubber walks a parsed reply only when its text holds an escape that can spell a
character of a form (``Scrubber.spelled``): a reply whose text holds none (a tool call's
arguments with ``\\"`` in them, say) is not walked, and nothing of a secret gets through.

Property: whatever mix of spellings a secret takes in a reply's text (each character as
itself, ``\\u``-escaped or short-escaped; other escapes around it; in a tool call's arguments,
JSON inside a string, one level further down), either the scrubber walks the parsed value
or no string of it (nor of the arguments it decodes to) holds a form. A seeded bug (a
scrubber that does not count ``\\/``) is caught by the same check.
"""

from __future__ import annotations

import json
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tpx._scrub import Scrubber
from tpx.errors import secret_forms

#: Characters a secret may hold: the ones JSON has short escapes for among them.
_ALPHABET = st.sampled_from(list('ab09-_/+."\\\n\té'))
_SHORT = {'"': '\\"', "\\": "\\\\", "/": "\\/", "\n": "\\n", "\t": "\\t", "\b": "\\b"}


def _spell(text: str, choices: list[int]) -> str:
    """*text* as the inside of a JSON string, character by character: 0 as itself (when
    JSON allows it), 1 ``\\u``-escaped, 2 short-escaped (when it has one)."""
    out = []
    for i, char in enumerate(text):
        choice = choices[i % len(choices)] if choices else 0
        plain = json.dumps(char, ensure_ascii=False)[1:-1]
        if choice == 1:
            out.append(f"\\u{ord(char):04x}")
        elif choice == 2 and char in _SHORT:
            out.append(_SHORT[char])
        else:
            out.append(plain)
    return "".join(out)


def leaks(scrub: Scrubber, data: bytes) -> bool:
    """Whether a form reaches a caller of *data* (a reply's text) when the scrubber walks
    only what :meth:`Scrubber.reply` flags: in a string of the parsed value, or in what a
    string of it decodes to as JSON (a tool call's arguments)."""
    cleaned, walk = scrub.reply(data)
    if walk:
        return False  # walked: Scrubber.value cleans every string
    try:
        value = orjson.loads(cleaned)
    except orjson.JSONDecodeError:
        return False  # a replacement cut an escape: the reply is refused as not JSON
    if scrub.dirty(value):
        return True
    pending: list[Any] = [value]
    while pending:
        item = pending.pop()
        if isinstance(item, dict):
            pending.extend(item.values())
        elif isinstance(item, list):
            pending.extend(item)
        elif isinstance(item, str):
            try:
                inner = orjson.loads(item)
            except orjson.JSONDecodeError:
                continue
            if scrub.dirty(inner):
                return True
    return False


def _reply(secret: str, choices: list[int], noise: str, nested: list[int]) -> bytes:
    """A reply's text: the secret spelled in a text field, and in tool arguments."""
    arguments = '{"command": "' + _spell(noise, [2]) + _spell(secret, nested) + '"}'
    text = (
        '{"content": "'
        + _spell(noise + "x", [2])
        + _spell(secret, choices)
        + '", "arguments": "'
        + _spell(arguments, [0, 2])
        + '"}'
    )
    return text.encode()


@settings(max_examples=400, deadline=None)
@given(
    secret=st.text(_ALPHABET, min_size=8, max_size=16),
    choices=st.lists(st.integers(0, 2), max_size=6),
    noise=st.text(st.sampled_from(list('ab"/\\')), max_size=4),
    nested=st.lists(st.integers(0, 2), max_size=4),
)
def test_a_reply_that_is_not_walked_holds_no_form(
    secret: str, choices: list[int], noise: str, nested: list[int]
) -> None:
    scrub = Scrubber(secret_forms([secret]))
    assert not leaks(scrub, _reply(secret, choices, noise, nested))


def test_a_quote_escape_alone_is_not_walked_and_the_secret_is_still_replaced() -> None:
    secret = "tpx-e2e-gateway-key"
    scrub = Scrubber(secret_forms([secret]))
    data = orjson.dumps({"arguments": json.dumps({"command": "echo " + secret})})
    assert b'\\"' in data
    cleaned, walk = scrub.reply(data)
    assert not walk
    assert secret.encode() not in cleaned
    assert not leaks(scrub, data)
    # an escape that spells a character of a form is walked
    assert scrub.reply(b'{"a": "\\u0074"}')[1]
    assert scrub.reply(b'{"a": "\\\\"}')[1]
    assert scrub.text('{"a": "\\\\"}')[1]
    assert not scrub.text('{"a": "\\""}')[1]


def test_a_slash_escape_is_walked_when_a_form_has_a_slash() -> None:
    scrub = Scrubber(secret_forms(["ab/cd-0123456789"]))
    assert scrub.reply(b'{"a": "\\/"}')[1]
    assert scrub.text('{"a": "\\/"}')[1]
    assert not Scrubber(secret_forms(["abcd-0123456789"])).reply(b'{"a": "\\/"}')[1]


def test_a_scrubber_that_does_not_count_the_slash_escape_is_caught(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    secret = "ab/cd-0123456789"
    data = _reply(secret, [0, 2], "", [0])  # the slash spelled \/ in the text field
    assert not leaks(Scrubber(secret_forms([secret])), data)

    def blind(self: Scrubber, data: bytes | str) -> bool:  # the seeded bug
        text = data.decode() if isinstance(data, bytes) else data
        return "\\u" in text or "\\\\" in text

    monkeypatch.setattr(Scrubber, "spelled", blind)
    assert leaks(Scrubber(secret_forms([secret])), data)
