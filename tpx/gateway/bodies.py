"""Reading ``/v1/messages`` bodies: the tail a client sends again is parsed once.

Claude Code sends, on every turn of a session, the same members after ``messages``:
``system``, ``tools``, ``metadata``, ``max_tokens``, ``thinking``, ... byte for byte
(the recorded sessions under tests/fixtures/clients repeat them on every turn: 69.6 KB
of a 76.3 KB body). :class:`BodyReader` parses a body in full the first times; once
the same tail has come twice it keeps that tail's parse, and a body ending with it has
only its head parsed (``{"model":...,"messages":[...]`` with a closing ``}``): about
a tenth of the parse.

**Exact.** A body ``B = P + S`` where ``S`` is a kept tail (``,"system":...}``, whose
``{`` + ``S[1:]`` parsed as an object whose members are kept) and ``P + "}"`` parses as a
non-empty object: then ``B`` is a JSON object whose members are ``P``'s followed by
``S``'s. (``P + "}"`` being an object means ``P`` is ``{``, members and whitespace, its
last token ended: ``S`` starts with ``,``, which ends a number or a literal as ``}``
does; ``S`` is ``,``, members, whitespace, ``}``, whitespace.) The result is
``{**head, **tail}``, the very dict ``orjson.loads(B)`` gives, unless a key is in both
(``B``'s last value wins where it stands): such a body is parsed in full. Any other
doubt (the head does not parse, is empty, is not an object) also parses the body in
full, so the error a bad body gets is ``orjson``'s own.

**Depth.** A tail's depth verdict is taken once; a body's is the head's or the tail's
(:meth:`Decoded.too_deep`).

**Shared, read-only.** A kept tail's values are shared by every request that carries it
(and by nothing else: a different tail is parsed anew). The gateway only reads request
bodies (it replaces top-level members: ``{**head, **tail}`` is each request's own dict);
its ``tools`` list is a :class:`~tpx.transport.translate.tools.FrozenJSONList` (mutating it
raises), which also carries its JSON text, so the translator looks its translation up
without serializing it and the exchange writes it without serializing it again.

A body larger than :data:`tpx.gateway.longjson.THRESHOLD` is parsed in short steps
(:func:`tpx.gateway.longjson.loads`: no single call holds the interpreter long), and its
tail is not kept.

Bounded: at most ``capacity`` tails are kept (the least recently used goes). Reusing a
tail makes a request that carries a tail already seen faster than one that does not,
by a fraction of a millisecond: ``[limits] tail_cache = 0`` turns it off where
gateway clients must not learn anything about each other's requests that way.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any

import attrs
import orjson

from tpx._safe import parsed_too_deep
from tpx.gateway import longjson
from tpx.transport.translate.tools import FrozenJSONList

__all__ = ["BodyReader", "Decoded"]

#: Bodies shorter than this are parsed in full without looking for a tail.
MIN_BODY = 4096
#: A tail shorter than this is not worth keeping.
MIN_TAIL = 2048
#: The bytes that index the kept tails (the end of a body).
_PROBE = 32
#: Tails seen once, remembered so as to be kept the second time they come.
_SEEN = 8


_NO = object()


@attrs.frozen
class _Tail:
    text: bytes  #: ``S``: from the comma before its first member to the body's end
    members: dict[str, Any]  #: its parse (never mutated)
    keys: frozenset[str]
    deep: bool  #: its members nest deeper than the depth rule allows


@attrs.frozen
class Decoded:
    """A decoded body (*value*: what ``orjson.loads`` gives) and what its depth needs."""

    value: Any
    tail: _Tail | None = None
    #: ``False``: the body was found shallow enough on the way (the tail was being kept)
    shallow: bool = False

    def too_deep(self) -> bool:
        """:func:`tpx._safe.parsed_too_deep` of :attr:`value` (its members may since have
        been replaced by shallower ones, as the gateway's model map does: a verdict of
        "shallow enough" stays true)."""
        if self.shallow:
            return False
        tail = self.tail
        if tail is None or tail.deep:
            return parsed_too_deep(self.value)
        own = tail.members
        # the members that are not the tail's own (verdict: shallow enough)
        return parsed_too_deep({k: v for k, v in self.value.items() if own.get(k, _NO) is not v})


class BodyReader:
    """``BodyReader(capacity).read(body)``: ``orjson.loads(body)`` (raising as it does),
    with a repeated tail after ``messages`` parsed once (see the module docstring)."""

    def __init__(
        self, capacity: int = 16, *, min_body: int = MIN_BODY, min_tail: int = MIN_TAIL
    ) -> None:
        self.capacity = capacity
        self.min_body = min_body
        self.min_tail = min_tail
        self._tails: OrderedDict[bytes, tuple[_Tail, ...]] = OrderedDict()
        self._count = 0
        self._seen: tuple[bytes, ...] = ()
        self._lock = threading.Lock()  # the in-process sync client may call from threads
        #: bodies whose head alone was parsed (a kept tail), and tails kept so far
        self.hits = 0
        self.kept = 0

    def read(self, body: bytes) -> Decoded:
        if len(body) > longjson.THRESHOLD:  # parsed in short steps, its tail not kept
            return Decoded(longjson.loads(body))
        if self.capacity <= 0 or len(body) < self.min_body:
            return Decoded(orjson.loads(body))
        probe = body[-_PROBE:]
        for tail in self._tails.get(probe, ()):
            decoded = self._reuse(body, tail, probe)
            if decoded is not None:
                return decoded
        value = orjson.loads(body)
        return Decoded(value, shallow=self._learn(body, value))

    def __len__(self) -> int:
        """The tails kept."""
        return self._count

    def _reuse(self, body: bytes, tail: _Tail, probe: bytes) -> Decoded | None:
        size = len(tail.text)
        if len(body) <= size or not body.endswith(tail.text):
            return None
        try:
            head = orjson.loads(body[:-size] + b"}")
        except orjson.JSONDecodeError:
            return None  # parsed in full: the caller gets orjson's own error
        if head.__class__ is not dict or not head or not tail.keys.isdisjoint(head):
            return None
        with self._lock:  # least recently used goes first
            self.hits += 1
            if probe in self._tails:
                self._tails.move_to_end(probe)
        return Decoded({**head, **tail.members}, tail)

    def _learn(self, body: bytes, value: Any) -> bool:
        """Remember *body*'s tail; keep it (parsed) when it came before. ``True``: *value*
        was found shallow enough on the way."""
        if value.__class__ is not dict:
            return False
        names = list(value)
        try:
            first = names.index("messages") + 1
            after = names[first]
        except (ValueError, IndexError):
            return False  # no members after the messages
        start = _tail_start(body, after)
        if start is None or len(body) - start < max(self.min_tail, _PROBE):
            return False
        text = body[start:]
        seen = self._seen
        if text not in seen:  # bytes ==: lengths first, then one memcmp
            self._seen = (text, *seen[: _SEEN - 1])
            return False
        members, tools_text = _members(text, value, names[first:])
        if members is None:
            return False
        tools = members.get("tools")
        if tools.__class__ is list:
            members["tools"] = FrozenJSONList(tools, tools_text or orjson.dumps(tools))
        # the tail's verdict: the body's when that is "shallow enough" (the tail's members
        # are members of this body, or equal to them), the tail's own otherwise
        shallow = not parsed_too_deep(value)
        deep = False if shallow else parsed_too_deep(members)
        assert text[:1] == b","  # _tail_start's needle: the exactness argument needs it
        self._keep(_Tail(text, members, frozenset(members), deep))
        return shallow

    def _keep(self, tail: _Tail) -> None:
        probe = tail.text[-_PROBE:]
        with self._lock:
            self._seen = tuple(t for t in self._seen if t != tail.text)
            self._tails[probe] = (tail, *self._tails.get(probe, ()))
            self._tails.move_to_end(probe)
            self._count += 1
            self.kept += 1
            while self._count > self.capacity:
                oldest, tails = next(iter(self._tails.items()))
                if len(tails) > 1:
                    self._tails[oldest] = tails[:-1]
                else:
                    del self._tails[oldest]
                self._count -= 1


def _members(
    text: bytes, value: dict[str, Any], names: list[str]
) -> tuple[dict[str, Any] | None, bytes | None]:
    """The members of the tail *text* (``,`` members ``}``) of the body *value* was parsed
    from, whose members *names* come after ``messages``; and the text of its ``tools``.

    When *text* is exactly orjson's serialization of those members of *value* (as a
    compact client writes them: Claude Code's does), its parse is those very values (one
    orjson round trip is the identity on what orjson parsed), taken without a second
    parse: about a fifth of its cost. Otherwise (other spacing or escapes, a key that is
    also in the head, a key twice) *text* is parsed. ``None``: not an object with members.
    """
    parts = [orjson.dumps(value[name]) for name in names]
    compact = b",".join(
        orjson.dumps(name) + b":" + part for name, part in zip(names, parts, strict=True)
    )
    if text[1:].rstrip(b" \t\r\n") == compact + b"}":
        members = {name: value[name] for name in names}
        return members, parts[names.index("tools")] if "tools" in members else None
    try:
        parsed = orjson.loads(b"{" + text[1:])
    except orjson.JSONDecodeError:
        return None, None
    if parsed.__class__ is not dict or not parsed:
        return None, None
    return parsed, None


def _tail_start(body: bytes, name: str) -> int | None:
    """Where the member *name* (the one after ``messages``) starts in *body*: the offset
    of its comma, where the body's head is a whole object once ``}`` is added (the first
    few places the text ``,"name":`` occurs are tried; inside a string or deeper down,
    the head does not parse)."""
    needle = b"," + orjson.dumps(name) + b":"
    at = body.find(needle)
    for _ in range(4):
        if at < 0:
            return None
        try:
            head = orjson.loads(body[:at] + b"}")
        except orjson.JSONDecodeError:
            at = body.find(needle, at + 1)
            continue
        return at if head.__class__ is dict and head else None
    return None
