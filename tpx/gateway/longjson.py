"""Parsing a large request body in short steps: no single call holds the interpreter long.

``orjson.loads`` of a whole body is one C call that holds the interpreter (the GIL) until
it is done: about 80 ms for 30 MB of text, during which a thread parsing it keeps the event
loop from running (docs/limits.md). :func:`loads` gives the same value with no call that
long: the long strings of the body (a 30 MB text, a 30 MB model name) are cut out of it,
the rest (the *skeleton*) is parsed by orjson, and each long string is decoded by orjson
in slices of :data:`SLICE` bytes, then put back in its place.

**Finding the long strings.** The body is looked at in windows of :data:`WINDOW` bytes;
a window without a ``"`` lies in one run of bytes without a quote, which is extended to
the quotes around it. Every string of at least ``2 * WINDOW`` bytes holds a whole window,
so its text is found (whole, or between two escaped quotes ``\\"`` in it). Whether a run
is inside a string is the parity of the quotes before it that are not escaped (a JSON
text has backslashes only in strings: a quote after an odd number of them is escaped);
they are counted a slice at a time. A run between tokens (whitespace, a number) is left
where it is.

**Cutting it.** In the skeleton the run is replaced by a marker ``~<nonce>.<n>~`` (a
random nonce per body: a client cannot write it), which becomes part of that string's
value; once the skeleton is parsed the marker is replaced there by the run's text. The
run ends before the backslashes just before its closing quote (they may escape it), so
it starts and ends where an escape does; it is decoded as string content in slices,
each ending where an escape, a surrogate pair and a UTF-8 sequence are whole (orjson
refuses a slice that ends inside one: its end is moved back a byte until it does not).

**Exact.** The skeleton's tokens are the body's, the run's text but a marker, so its
value is the body's with each marker in place of the run's text. The parity only decides
what is cut: a run taken for a string's text that is not one puts the marker between
tokens, where ``~`` is not JSON, and a skeleton that does not parse sends the whole body
to orjson (a body that is not JSON gets orjson's own error). A run that is not valid
string content raises :class:`orjson.JSONDecodeError` at its place in the body.

What stays one call: the skeleton's parse (a body of many strings shorter than
``2 * WINDOW`` each has a skeleton as large as itself) and joining a long string's
slices (a copy: a few ms for 30 MB).
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Iterator
from typing import Any

import orjson

__all__ = ["SLICE", "THRESHOLD", "WINDOW", "loads"]

#: Bodies up to this many bytes are parsed in one call (``orjson.loads``: a few ms).
THRESHOLD = 2 << 20
#: Bytes of a window looked at for a quote (strings of twice this are cut out).
WINDOW = 4096
#: Bytes of a long string decoded per orjson call.
SLICE = 1 << 20
#: How far back a slice's end may move to end where an escape or a character is whole.
_BACK = 16
_parse = orjson.loads  # every parse of this module (a test counts them)
_QUOTE = b'"'
_ESCAPED = b'\\"'


def loads(body: bytes) -> Any:
    """``orjson.loads(body)``, in short steps when *body* is large (see the module)."""
    if len(body) <= THRESHOLD:
        return _parse(body)
    nonce = secrets.token_hex(8)
    parts: list[bytes] = []
    kept: list[tuple[int, int]] = []
    at = 0  # the skeleton has the body up to here
    seen = 0  # the quotes before here are counted
    quotes = 0  # the quotes (not escaped) of body[:seen]
    for start, end, quote in _runs(body):
        quotes += _quotes(body, seen, start)
        seen = quote
        if quotes % 2 == 0:
            continue  # between tokens (whitespace, a number): left as it is
        parts += [body[at:start], f"~{nonce}.{len(kept)}~".encode()]
        kept.append((start, end))
        at = end
    if not kept:
        return _parse(body)
    parts.append(body[at:])
    try:
        value = _parse(b"".join(parts))
    except orjson.JSONDecodeError:
        return _parse(body)  # not JSON: orjson's own error
    # each marker is in a string: each run is string content (or the body is not JSON)
    texts = [_decode(body, start, end) for start, end in kept]
    pattern = re.compile(f"~{nonce}\\.(\\d+)~")
    return _restore(value, nonce, lambda s: pattern.sub(lambda m: texts[int(m[1])], s))


def _runs(body: bytes) -> Iterator[tuple[int, int, int]]:
    """The runs of *body* without a quote that hold a whole window: ``(a, b, q)``, ``a``
    just after a quote, ``q`` at the next quote, ``b`` before the backslashes just before
    it (one may escape it); runs that reach the body's end are left out."""
    size = len(body)
    find = body.find
    at = 0
    while at < size:
        if find(_QUOTE, at, at + WINDOW) >= 0:
            at += WINDOW
            continue
        start = body.rfind(_QUOTE, 0, at) + 1
        if start == 0:
            return  # no quote before it: not inside a JSON object's text
        quote = at + WINDOW
        while quote < size:
            found = find(_QUOTE, quote, quote + WINDOW)
            if found >= 0:
                quote = found
                break
            quote += WINDOW
        else:
            return
        end = _before_backslashes(body, start, quote)
        if end > start:
            yield start, end, quote
        at = quote + 1


def _quotes(body: bytes, start: int, end: int) -> int:
    """The quotes of ``body[start:end]`` that are not escaped (a backslash is only ever
    in a string, so for a JSON text: the quotes that open or close one), a slice at a
    time; *start* is not inside an escape."""
    count = 0
    for at in range(start, end, SLICE):
        stop = min(at + SLICE, end)
        count += body.count(_QUOTE, at, stop)
        # each backslash-quote: an escaped quote when its backslashes are odd in number
        found = body.find(_ESCAPED, at, stop + 1 if stop < end else stop)
        while found >= 0:
            count -= (found + 1 - _before_backslashes(body, start, found + 1)) % 2
            found = body.find(_ESCAPED, found + 1, stop + 1 if stop < end else stop)
    return count


def _before_backslashes(body: bytes, start: int, end: int) -> int:
    """Where the backslashes just before *end* begin (one may escape the quote at *end*:
    the run ends before them all), looked at :data:`WINDOW` bytes at a time."""
    while end > start:
        chunk = body[max(start, end - WINDOW) : end]
        rest = chunk.rstrip(b"\\")
        end -= len(chunk) - len(rest)
        if rest:
            break
    return end


def _decode(body: bytes, start: int, end: int) -> str:
    """The string content ``body[start:end]`` decoded in slices of :data:`SLICE` bytes."""
    pieces: list[str] = []
    at = start
    while at < end:
        text, at = _slice(body, at, min(at + SLICE, end), end)
        pieces.append(text)
    return "".join(pieces)


def _slice(body: bytes, start: int, stop: int, end: int) -> tuple[str, int]:
    """``body[start:q]`` decoded as string content, for the largest ``q <= stop`` (moved
    back at most :data:`_BACK` bytes) where it is whole; *start* is where a token begins.
    None whole: the text is not string content (:class:`orjson.JSONDecodeError`)."""
    last: orjson.JSONDecodeError | None = None
    for q in range(stop, max(start, stop - _BACK), -1):
        if q < end and 0x80 <= body[q] < 0xC0:
            continue  # inside a UTF-8 sequence
        try:
            return _parse(b'"' + body[start:q] + b'"'), q
        except orjson.JSONDecodeError as error:
            last = error
    if last is None:  # a few bytes, none where a character starts
        try:
            _parse(b'"' + body[start:stop] + b'"')
        except orjson.JSONDecodeError as error:
            last = error
    assert last is not None
    raise _error(body, start, last)


def _error(body: bytes, start: int, error: orjson.JSONDecodeError) -> orjson.JSONDecodeError:
    """*error*, raised by a slice parsed from *start*, at its place in *body* (its
    position in characters, as orjson counts them)."""
    before = body[:start].decode("utf-8", "replace")
    return orjson.JSONDecodeError(error.msg, before, len(before) + max(error.pos - 1, 0))


def _restore(value: Any, nonce: str, put: Any) -> Any:
    """*value* with every string holding *nonce* replaced by ``put(string)`` (keys too);
    iterative, in place where a container can be changed in place."""
    if value.__class__ is str:
        return put(value) if nonce in value else value
    stack: list[Any] = [value]
    while stack:
        node = stack.pop()
        if node.__class__ is dict:
            if any(nonce in key for key in node):
                items = [(put(k) if nonce in k else k, v) for k, v in node.items()]
                node.clear()
                node.update(items)
            for key, item in node.items():
                if item.__class__ is str:
                    if nonce in item:
                        node[key] = put(item)
                elif item.__class__ is dict or item.__class__ is list:
                    stack.append(item)
        elif node.__class__ is list:
            for index, item in enumerate(node):
                if item.__class__ is str:
                    if nonce in item:
                        node[index] = put(item)
                elif item.__class__ is dict or item.__class__ is list:
                    stack.append(item)
    return value
