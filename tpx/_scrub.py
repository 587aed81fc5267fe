"""Credential echoes in successful replies: removed before a caller sees them.

A provider may echo the credential it was sent (a debugging proxy, a hostile server).
Error texts are withheld or redacted where they are built (:mod:`tpx.errors`); this is
the rule for the bodies and stream events tpx *delivers*, and it matches what the caller
will decode, not the bytes on the wire:

* every form in :func:`tpx.errors.secret_forms` (and its JSON-escaped spelling) is
  replaced by ``[REDACTED]`` in the reply's text before it is parsed;
* when that text holds an escape that can spell a character of a form (``\\uXXXX`` and a
  surrogate pair spell any character, ``\\\\`` a backslash, which a tool call's arguments,
  JSON inside a string, decode escapes with; ``\\/``, ``\\"``, ... their own character when
  a form has it: a secret may be spelled in any mix of escaped characters) every string and
  key of the parsed value is cleaned too, and so is the delivered body after translation
  (the ``input`` a tool call's arguments decode to is checked). Without such an escape every
  character of a decoded string stands in the text as itself, so a form in a decoded string
  stands in the text too, where it was already replaced (:meth:`Scrubber.spelled`);
* a stream's text, thinking and tool-argument deltas go through a :class:`DeltaScrubber`:
  the text a block has so far (its ``partial_json`` read as the JSON the caller will
  decode) is cleaned, and the end that could still begin a form (at most the longest
  form less one character, plus an unfinished escape) is held back until the next delta
  or the block's end, so a secret split across deltas is caught whole, in every spelling
  it is caught in within one delta (base64, URL-encoding, ``\\uXXXX``, ``repr``, ...).

A credential that changes mid-request (a token command run again after a 401) joins the
scrubber of that request: :meth:`Scrubber.joined`.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Iterable
from typing import Any

import orjson

__all__ = ["DeltaScrubber", "Scrubber"]

_REDACTED = "[REDACTED]"
_REDACTED_BYTES = _REDACTED.encode()
#: Which field of a ``content_block_delta`` carries text the caller reads, by delta type.
_DELTA_FIELDS = {
    "text_delta": "text",
    "thinking_delta": "thinking",
    "input_json_delta": "partial_json",
}
#: A JSON escape: complete (``\\uXXXX``, ``\\x``) or unfinished at the end of the text.
_ESCAPE = re.compile(r"\\(?:u[0-9a-fA-F]{4}|u[0-9a-fA-F]{0,3}\Z|\Z|[^u])", re.DOTALL)
_ANCHOR = 8
_NOTHING = ("", "")
_SIMPLE = {'"': '"', "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}


class Scrubber:
    """Removes the given secret forms from reply text and parsed values."""

    __slots__ = (
        "_anchors",
        "_byte_anchors",
        "_byte_pairs",
        "_bytes",
        "_escapes",
        "_forms",
        "_pairs",
        "_plain",
        "_tails",
        "_text",
        "_text_escapes",
    )

    def __init__(self, forms: Iterable[str]) -> None:
        """*forms*: every form to remove (:func:`tpx.errors.secret_forms`); a stream's
        deltas are held back for each of them, and for its JSON-escaped spelling."""
        self._forms = tuple(f for f in forms if f)
        text: set[str] = set()
        for form in self._forms:
            text.add(form)
            text.add(json.dumps(form)[1:-1])
        ordered = sorted((t for t in text if t), key=lambda t: (-len(t), t))
        self._text = tuple(ordered)
        self._bytes = tuple(t.encode("utf-8", "surrogatepass") for t in ordered)
        # Each form's first characters: a form can only stand where they do, and searching
        # for a few short anchors is much cheaper than for every (long) form.
        self._anchors = frozenset(t[:_ANCHOR] for t in ordered)
        self._byte_anchors = frozenset(t[:_ANCHOR] for t in self._bytes)
        # (anchor, form), longest form first: the search order, each anchor cut once
        self._pairs = tuple((t[:_ANCHOR], t) for t in ordered)
        self._byte_pairs = tuple((t[:_ANCHOR], t) for t in self._bytes)
        # what a stream's deltas are held back for: every spelling matched within a delta
        self._plain = self._text
        self._tails: _Tails | None = None  # built when a stream first needs it
        # The escapes that can spell a character of a form (see :meth:`spelled`): ``\\u``
        # (any character), ``\\\\`` (a backslash: also what makes an escape in JSON read
        # from inside a string, a tool call's arguments), and each short escape whose
        # character stands in a form (or in its escaped spelling).
        chars = set("".join(ordered))
        letters = "u\\" + "".join(sorted(k for k, c in _SIMPLE.items() if c in chars and k != "\\"))
        self._text_escapes = re.compile("\\\\[" + re.escape(letters) + "]")
        self._escapes = re.compile(self._text_escapes.pattern.encode())

    def __bool__(self) -> bool:
        return bool(self._text)

    def joined(self, forms: Iterable[str]) -> Scrubber:
        """A scrubber for these forms and *forms* too (a credential fetched mid-request)."""
        return Scrubber((*self._forms, *forms))

    def reply(self, data: bytes) -> tuple[bytes, bool]:
        """*data* without the forms; ``True`` when the parsed value needs :meth:`value`
        (the text holds an escape that may spell a form: :meth:`spelled`)."""
        present = {anchor for anchor in self._byte_anchors if anchor in data}
        if present:
            for anchor, form in self._byte_pairs:
                if anchor in present and form in data:
                    data = data.replace(form, _REDACTED_BYTES)
        return data, b"\\" in data and self.spelled(data)

    def text(self, data: str) -> tuple[str, bool]:
        """:meth:`reply` for text."""
        return self.clean(data), "\\" in data and self.spelled(data)

    def spelled(self, data: bytes | str) -> bool:
        """Whether JSON text *data* holds an escape that can spell a character of a form.

        When it holds none, each character of a string it decodes to is either written as
        itself in *data* or comes from an escape whose character is in no form: a form in a
        decoded string is then made of characters written as themselves, one after the
        other, so it stands in *data* as it is, where :meth:`reply` / :meth:`text` replaced
        it. A tool call's arguments (JSON read from inside a decoded string) hold a
        backslash only when *data* holds ``\\\\`` or ``\\u``: without them, what the
        arguments decode to are pieces of a decoded string, clean too. Any ``\\`` followed
        by one of these characters counts (``\\\\"`` too, an escaped backslash then a
        quote): a false alarm only costs the walk."""
        if isinstance(data, bytes):
            return self._escapes.search(data) is not None
        return self._text_escapes.search(data) is not None

    def clean(self, text: str) -> str:
        """*text* (a decoded string) without the forms (longest first)."""
        present = {anchor for anchor in self._anchors if anchor in text}
        if present:
            for anchor, form in self._pairs:
                if anchor in present and form in text:
                    text = text.replace(form, _REDACTED)
        return text

    _clean = clean

    def dirty(self, value: Any) -> bool:
        """Whether a string or key of *value* (parsed JSON) holds a form: one serialization
        and a search per form, at C speed (a form with a quote, a backslash or a control
        character is found by its JSON-escaped spelling)."""
        try:
            data = orjson.dumps(value)
        except (TypeError, orjson.JSONEncodeError):  # not plain JSON: the slow walk decides
            return self._walk_finds(value)
        present = {anchor for anchor in self._byte_anchors if anchor in data}
        if present:
            for anchor, form in self._byte_pairs:
                if anchor in present and form in data:
                    return True
        return False

    def _walk_finds(self, value: Any) -> bool:
        pending: list[Any] = [value]
        while pending:
            item = pending.pop()
            if item.__class__ is str:
                if self._clean(item) != item:
                    return True
            elif isinstance(item, dict):
                pending.extend(item.keys())
                pending.extend(item.values())
            elif isinstance(item, list | tuple):
                pending.extend(item)
        return False

    def value(self, value: Any) -> Any:
        """*value* (parsed JSON) with every string and key cleaned, without recursion.
        Returns *value* itself when nothing was found."""
        if not self._text or not self.dirty(value):
            return value
        return self._rebuild(value)

    def _rebuild(self, value: Any) -> Any:
        # Iterative copy: (source, target) pairs; containers are filled after creation.
        if value.__class__ is str:
            return self._clean(value)
        root: Any = {} if value.__class__ is dict else [] if value.__class__ is list else value
        work: list[tuple[Any, Any]] = [(value, root)] if root is not value else []
        while work:
            source, target = work.pop()
            pairs = source.items() if source.__class__ is dict else enumerate(source)
            for key, item in pairs:
                if item.__class__ is dict or item.__class__ is list:
                    copy: Any = {} if item.__class__ is dict else []
                    work.append((item, copy))
                elif item.__class__ is str:
                    copy = self._clean(item)
                else:
                    copy = item
                if target.__class__ is dict:
                    target[self._clean(key) if key.__class__ is str else key] = copy
                else:
                    target.append(copy)
        return root

    # -- deltas ------------------------------------------------------------------------

    def _held(self, decoded: str) -> int:
        """How many characters at the end of *decoded* could begin a secret (fewer than
        the longest has)."""
        if not self._plain:
            return 0
        if self._tails is None:
            self._tails = _tails(self._plain)
        pairs, starts = self._tails
        size = len(decoded)
        window = max(0, size - len(self._plain[0]) + 1)
        # A start of 2 characters or more begins with one of the pairs: the leftmost place
        # where an end of *decoded* is a start (the longest such end) is the least, over the
        # pairs, of the first place the pair stands whose end is one (found at C speed).
        leftmost = size
        for pair in pairs:
            at = decoded.find(pair, window, leftmost + 1)
            while at != -1:
                if decoded[at:] in starts:
                    leftmost = at
                    break
                at = decoded.find(pair, at + 1, leftmost + 1)
        if leftmost < size:
            return size - leftmost
        return 1 if decoded[-1:] in starts else 0  # a start one character long

    def _spans(self, held: str, text: str) -> bool:
        """Whether a secret starts in *held* (the end of the text so far that could begin
        one: its start is one of held's ends) and stands whole in *text* (held + delta)."""
        if self._tails is None:
            self._tails = _tails(self._plain)
        starts = self._tails[1]
        for position in range(len(held)):
            for form in starts.get(held[position:], ()):
                if text.startswith(form, position):
                    return True
        return False

    def split(self, held: str, text: str, *, json_text: bool = False) -> tuple[str, str]:
        """(what may go out now, what to hold back) for the text a block has so far: what
        was *held* back, then a delta's *text* (cleaned with its event already).

        *json_text*: the text is JSON the caller will decode (``partial_json``): forms are
        looked for in its decoded view, and an unfinished escape is held back too.
        """
        text = held + text
        if not json_text or "\\" not in text:
            if held and self._spans(held, text):  # a form across the boundary
                text = self.clean(text)
            keep = self._held(text)
            return (text[: len(text) - keep], text[len(text) - keep :]) if keep else (text, "")
        text = self._clean_json(text)
        decoded, offsets, unfinished = _decode(text)
        cut = offsets[len(decoded) - self._held(decoded)]
        if unfinished is not None:
            cut = min(cut, unfinished)
        return text[:cut], text[cut:]

    def _clean_json(self, text: str) -> str:
        text = self.clean(text)
        decoded, offsets, _ = _decode(text)
        spans: list[tuple[int, int]] = []
        for form in self._text:
            start = decoded.find(form)
            while start != -1:
                spans.append((offsets[start], offsets[start + len(form)]))
                start = decoded.find(form, start + len(form))
        if not spans:
            return text
        spans.sort()
        pieces: list[str] = []
        position = 0
        for start, end in spans:
            if end <= position:
                continue
            pieces.append(text[position : max(start, position)])
            pieces.append(_REDACTED)
            position = end
        pieces.append(text[position:])
        return "".join(pieces)


_Tails = tuple[tuple[str, ...], dict[str, tuple[str, ...]]]


@functools.lru_cache(maxsize=16)
def _tails(forms: tuple[str, ...]) -> _Tails:
    """(the forms' first two characters, every proper start of a form with the forms it
    begins)."""
    pairs = sorted({form[:2] for form in forms if len(form) > 2})
    starts: dict[str, list[str]] = {}
    for form in forms:
        for size in range(1, len(form)):
            starts.setdefault(form[:size], []).append(form)
    return tuple(pairs), {start: tuple(found) for start, found in starts.items()}


def _decode(text: str) -> tuple[str, list[int], int | None]:
    """The decoded view of JSON text: (decoded, the offset in *text* of each decoded
    character and of the end, where an unfinished escape or lone high surrogate at the
    end starts, if any). An escape JSON does not know is read as its characters."""
    pieces: list[str] = []
    offsets: list[int] = []
    position = 0
    unfinished: int | None = None
    high: tuple[int, int] | None = None  # a high surrogate not yet paired: (its offset, code)
    for match in _ESCAPE.finditer(text):
        start, end = match.span()
        if start > position:
            if high is not None:
                pieces.append("\ufffd")
                offsets.append(high[0])
                high = None
            pieces.append(text[position:start])
            offsets.extend(range(position, start))
        position = end
        escape = match.group()
        if end == len(text) and (len(escape) == 1 or (escape[1] == "u" and len(escape) < 6)):
            unfinished = start if high is None else high[0]
            high = None
            break
        char = _SIMPLE.get(escape[1]) if escape[1] != "u" else chr(int(escape[2:], 16))
        if char is None:  # not a JSON escape: its characters as they are
            pieces.append(escape)
            offsets.extend(range(start, end))
            continue
        code = ord(char)
        if high is not None:
            if 0xDC00 <= code <= 0xDFFF:
                pieces.append(chr(0x10000 + ((high[1] - 0xD800) << 10) + (code - 0xDC00)))
                offsets.append(high[0])
                high = None
                continue
            pieces.append("\ufffd")
            offsets.append(high[0])
            high = None
        if 0xD800 <= code <= 0xDBFF:
            high = (start, code)
            continue
        pieces.append(char)
        offsets.append(start)
    else:
        if high is not None:
            if position == len(text):
                unfinished = high[0]  # its low half may come with the next delta
            else:
                pieces.append("\ufffd")
                offsets.append(high[0])
        if position < len(text):
            pieces.append(text[position:])
            offsets.extend(range(position, len(text)))
            position = len(text)
    decoded = "".join(pieces)
    offsets.append(unfinished if unfinished is not None else len(text))
    return decoded, offsets, unfinished


class DeltaScrubber:
    """One stream's deltas through a :class:`Scrubber`, each block's end held back while
    it could begin a secret (see the module docstring). :meth:`events` takes the Messages
    events of one read and returns those to deliver."""

    __slots__ = ("_held", "scrub")

    def __init__(self, scrub: Scrubber) -> None:
        self.scrub = scrub
        self._held: dict[Any, tuple[str, str]] = {}  # block index -> (delta type, text held)

    def events(self, produced: list[dict[str, Any]]) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        held, scrub = self._held, self.scrub
        for event in produced:
            kind = event.get("type")
            if kind == "content_block_delta":
                delta = event.get("delta")
                kind = delta.get("type") if delta.__class__ is dict else None
                field = _DELTA_FIELDS.get(kind) if kind.__class__ is str else None
                if field is not None and delta.__class__ is dict:
                    text = delta.get(field)
                    if text.__class__ is str:
                        index = event.get("index")
                        before = held.pop(index, _NOTHING)[1] if held else ""
                        json_text = field == "partial_json"
                        if not before and not (json_text and "\\" in text):
                            # what split("", text) does for a text to read as it is (JSON
                            # without an escape reads as itself): hold back its end that
                            # could begin a form, the rest goes out
                            keep_size = scrub._held(text)
                            if not keep_size:
                                out.append(event)  # the common case: as it came
                                continue
                            cut = len(text) - keep_size
                            ready, keep = text[:cut], text[cut:]
                        else:
                            ready, keep = scrub.split(before, text, json_text=json_text)
                        if keep:
                            self._held[index] = (delta["type"], keep)
                        if not keep and not before and ready == text:
                            out.append(event)  # as it came: nothing held, nothing found
                        elif ready or not keep:
                            out.append({**event, "delta": {**delta, field: ready}})
                        continue
            elif kind == "content_block_stop":
                self._release(event.get("index"), out)
            elif kind in ("message_delta", "message_stop"):
                for index in list(self._held):
                    self._release(index, out)
            out.append(event)
        return out

    def _release(self, index: Any, out: list[dict[str, Any]]) -> None:
        held = self._held.pop(index, None)
        if held is None:
            return
        kind, text = held
        field = _DELTA_FIELDS[kind]
        out.append(
            {"type": "content_block_delta", "index": index, "delta": {"type": kind, field: text}}
        )
