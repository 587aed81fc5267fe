"""Redaction: a secret's forms, and the two ways a text is kept free of them.

:func:`secret_forms` renders each secret in every spelling it may take in a text.
:func:`withheld` (with :func:`holds_secret`) keeps a text whole or replaces it whole, for a
provider's text a client will see; :func:`redact` removes every piece of a secret, for a
text only the secret's holder reads. :mod:`tpx.errors` states when each applies and
re-exports them; docs/threat-model.md says why.
"""

from __future__ import annotations

import base64
import collections
import functools
import json
import re
import urllib.parse
from collections.abc import Iterable

__all__ = ["WITHHELD", "holds_secret", "redact", "secret_forms", "withheld"]

_REDACTED = "[REDACTED]"
#: What stands in place of a provider's text that held a whole secret (see the module docstring).
WITHHELD = _REDACTED
#: Fewest characters of a secret's start that :func:`redact` removes before a cut marker.
_MIN_PARTIAL = 4
#: Fewest consecutive characters of a secret that :func:`redact` removes anywhere.
_MIN_FRAGMENT = 8
_CUT_MARKERS = ("\u2026", "...")
_STEP = 4
_PROBE = _MIN_FRAGMENT - _STEP + 1  # a _MIN_FRAGMENT run holds a _PROBE piece at a _STEP multiple


class _Starts:
    """An Aho-Corasick automaton over the forms (goto, fail, depth): the state it reaches
    on a text is the longest end of that text that begins a form, found in one pass."""

    __slots__ = ("_depth", "_fail", "_goto")

    def __init__(self, forms: tuple[str, ...]) -> None:
        goto: list[dict[str, int]] = [{}]
        depth = [0]
        for form in forms:
            state = 0
            for char in form:
                following = goto[state].get(char)
                if following is None:
                    goto.append({})
                    depth.append(depth[state] + 1)
                    following = goto[state][char] = len(goto) - 1
                state = following
        fail = [0] * len(goto)
        queue = collections.deque(goto[0].values())
        while queue:
            state = queue.popleft()
            for char, following in goto[state].items():
                queue.append(following)
                back = fail[state]
                while back and char not in goto[back]:
                    back = fail[back]
                target = goto[back].get(char, 0)
                fail[following] = target if target != following else 0
        self._goto, self._fail, self._depth = goto, fail, depth

    def depth(self, text: str) -> int:
        """The length of the longest end of *text* that begins a form."""
        goto, fail, state = self._goto, self._fail, 0
        for char in text:
            while state and char not in goto[state]:
                state = fail[state]
            state = goto[state].get(char, 0)
        return self._depth[state]

    def depths(self, text: str, ends: list[int]) -> list[int]:
        """:meth:`depth` of ``text[:end]`` for each of *ends* (ascending), in one pass."""
        goto, fail, depth, state = self._goto, self._fail, self._depth, 0
        out: list[int] = []
        position = 0
        for end in ends:
            for char in text[position:end]:
                while state and char not in goto[state]:
                    state = fail[state]
                state = goto[state].get(char, 0)
            position = end
            out.append(depth[state])
        return out


@functools.lru_cache(maxsize=16)
def _starts(forms: tuple[str, ...]) -> _Starts:
    return _Starts(forms)


class _Patterns:
    """What :func:`redact` looks for, derived once from a tuple of secret forms.

    Every test is a set lookup, so a text costs a constant per character however long the
    secrets are: ``probes`` (the 5-character pieces of the long forms) are looked up at
    every 4th position, and only around a hit are the 8-character ``windows`` looked up
    (an 8-character run starting at ``s`` holds the 5 characters at the first multiple of
    4 from ``s``); ``short`` forms are replaced whole; a cut marker is checked against
    ``tails`` (the last 4 characters of every proper prefix of a form) before the
    automaton of the forms' starts (:class:`_Starts`) measures the start it ends.
    """

    __slots__ = ("forms", "longest", "probes", "short", "tails", "windows")

    def __init__(self, forms: tuple[str, ...]) -> None:
        self.forms = forms
        long = [f for f in forms if len(f) >= _MIN_FRAGMENT]
        self.windows = frozenset(
            f[i : i + _MIN_FRAGMENT] for f in long for i in range(len(f) - _MIN_FRAGMENT + 1)
        )
        self.probes = frozenset(w[i : i + _PROBE] for w in self.windows for i in range(_STEP))
        self.short = tuple(
            sorted({f for f in forms if len(f) < _MIN_FRAGMENT}, key=lambda f: (-len(f), f))
        )
        self.tails = frozenset(
            f[k - _MIN_PARTIAL : k] for f in forms for k in range(_MIN_PARTIAL, len(f))
        )
        self.longest = max((len(f) for f in forms), default=0)

    def may_change(self, text: str) -> bool:
        """False only when :meth:`apply` would return *text* unchanged."""
        for marker in _CUT_MARKERS:
            if marker in text:
                return True
        for form in self.short:
            if form in text:
                return True
        probes = self.probes
        return any(text[i : i + _PROBE] in probes for i in range(0, len(text) - _PROBE + 1, _STEP))

    def apply(self, text: str) -> str:
        text = self._fragments(text)
        for form in self.short:
            if form in text:
                text = text.replace(form, _REDACTED)
        for marker in _CUT_MARKERS:
            if marker in text:
                text = self._cuts(text, marker)
        return text

    def _fragments(self, text: str) -> str:
        probes, windows, size = self.probes, self.windows, len(text)
        hits = [q for q in range(0, size - _PROBE + 1, _STEP) if text[q : q + _PROBE] in probes]
        if not hits:
            return text
        spans: list[tuple[int, int]] = []
        for q in hits:
            for s in range(max(0, q - _STEP + 1), min(q, size - _MIN_FRAGMENT) + 1):
                if text[s : s + _MIN_FRAGMENT] in windows:
                    spans.append((s, s + _MIN_FRAGMENT))
        return _replaced(text, spans)

    def _cuts(self, text: str, marker: str) -> str:
        """A secret's start (at least :data:`_MIN_PARTIAL` characters) right before
        *marker*: the longest one, found by the automaton of the forms' starts."""
        tails = self.tails
        ends: list[int] = []
        position = text.find(marker)
        while position != -1:
            if text[position - _MIN_PARTIAL : position] in tails:
                ends.append(position)
            position = text.find(marker, position + len(marker))
        if not ends:
            return text
        starts = _starts(self.forms)
        spans: list[tuple[int, int]] = []
        if len(ends) * self.longest > len(text):  # dense: one pass over the whole text
            depths = starts.depths(text, ends)
        else:  # sparse: the window before each end (no start is longer than a form)
            depths = [starts.depth(text[max(0, end - self.longest) : end]) for end in ends]
        for end, depth in zip(ends, depths, strict=True):
            size = min(depth, self.longest - 1)
            if size >= _MIN_PARTIAL:
                spans.append((end - size, end))
        return _replaced(text, spans)


def _replaced(text: str, spans: list[tuple[int, int]]) -> str:
    """*text* with the union of *spans* (sorted by start) each replaced by ``[REDACTED]``."""
    if not spans:
        return text
    pieces: list[str] = []
    position = 0
    run_start, run_end = spans[0]
    for start, end in spans[1:]:
        if start <= run_end:
            run_end = max(run_end, end)
            continue
        pieces.append(text[position:run_start])
        pieces.append(_REDACTED)
        position = run_end
        run_start, run_end = start, end
    pieces.append(text[position:run_start])
    pieces.append(_REDACTED)
    pieces.append(text[run_end:])
    return "".join(pieces)


@functools.lru_cache(maxsize=64)
def _patterns(forms: tuple[str, ...]) -> _Patterns:
    return _Patterns(forms)


def redact(text: str, secrets: Iterable[str | None]) -> str:
    """Return *text* with every non-empty secret replaced by ``[REDACTED]``: for logs and
    errors the caller alone sees, never for a text a client's input may have reached.

    Every run of at least :data:`_MIN_FRAGMENT` characters of a secret goes, wherever it
    stands, and a secret cut short (its start, at least :data:`_MIN_PARTIAL` characters,
    right before a cut marker, ``\u2026`` or ``...``) too. Pass :func:`secret_forms` to
    catch escaped and encoded forms. The cost is linear in *text* (a few set lookups per
    4 characters). Which parts are replaced shows which parts match a secret: a text
    that may quote a client goes through :func:`withheld` instead.
    """
    present = tuple(s for s in secrets if s)
    if not present or not text:
        return text
    return _patterns(present).apply(text)


def holds_secret(text: str, forms: Iterable[str | None]) -> bool:
    """Whether a whole form of a secret stands in *text* (no fragments, no cuts)."""
    return any(form and form in text for form in forms)


def withheld(text: str, forms: Iterable[str | None]) -> str:
    """*text* whole, or :data:`WITHHELD` in its place when a whole secret form stands in it.

    For a provider's text a client will see (it may quote the client's own input): only a
    whole form counts, so the reply to a client depends on its input's match with a secret
    only when that input holds the whole secret (see the module docstring).
    """
    return WITHHELD if holds_secret(text, forms) else text


def _base64_forms(raw: bytes) -> set[str]:
    """Base64 (standard and URL-safe) of *raw* at each of the three alignments it may take
    inside a longer encoded text: only the characters that depend on *raw* alone."""
    forms: set[str] = set()
    for offset in range(3):
        padded = b"\0" * offset + raw
        first = -(-8 * offset // 6)  # characters touched by the padding bytes
        last = (len(padded) * 8) // 6  # characters made of whole bits of *raw*
        for encode in (base64.b64encode, base64.urlsafe_b64encode):
            forms.add(encode(padded).decode("ascii")[first:last])
    return forms


def secret_forms(secrets: Iterable[str | None]) -> tuple[str, ...]:
    """Every non-empty secret plus the escaped and encoded forms it takes in a text.

    Exact-string redaction misses a secret shown through ``repr`` of a str (with either
    quote escaped, ``\\'``) or of its bytes (``b'Bearer tok\\nX'``, ``\\xc3\\xa9``),
    ``unicode_escape``, JSON (``\\u00e9``), every character ``\\u``-escaped, base64 (any
    alignment, both alphabets) or URL-encoding; pass the result to :func:`redact` instead
    of the bare secrets. Longest first, so a form is never half-replaced by a shorter one.
    """
    forms: set[str] = set()
    for secret in secrets:
        if not secret:
            continue
        forms.add(secret)
        escaped = secret.encode("unicode_escape").decode("ascii")
        forms.add(escaped)
        forms.add(repr(secret)[1:-1])
        forms.add(escaped.replace("'", "\\'"))
        forms.add(escaped.replace('"', '\\"'))
        forms.add(json.dumps(secret)[1:-1])
        forms.add(json.dumps(secret, ensure_ascii=False)[1:-1])
        for digits in ("04x", "04X"):
            forms.add("".join(f"\\u{ord(c):{digits}}" for c in secret if ord(c) < 0x10000))
        for encoding in ("utf-8", "latin-1"):
            forms.add(repr(secret.encode(encoding, "backslashreplace"))[2:-1])
        raw = secret.encode("utf-8", "surrogatepass")
        forms.update(_base64_forms(raw))
        for quoted in (urllib.parse.quote(secret, safe=""), urllib.parse.quote_plus(secret)):
            forms.add(quoted)
            forms.add(re.sub("%[0-9A-F]{2}", lambda m: m.group().lower(), quoted))
    forms.update([json.dumps(form)[1:-1] for form in forms])  # each form inside JSON text
    return tuple(sorted((f for f in forms if len(f) >= _MIN_PARTIAL), key=lambda f: (-len(f), f)))
