"""A TLA+ module's canonical token stream: what the mirror compares a given spec with.

Two modules have the same fingerprint exactly when they have the same tokens between
the ``---- MODULE Name ----`` header and the closing ``====``: comments (``\\*`` to the
end of the line, nested ``(* ... *)``), whitespace and the length of separator lines
(``----``, ``====``) are ignored; everything else, strings included, counts. This is a
lexer, not a parser: it never says a module is well-formed, only whether it is the same
text as another up to layout, which is what "the mirror mirrors this spec" needs.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence

import attrs

__all__ = ["Token", "fingerprint", "first_difference", "tokens"]

_HEADER = re.compile(r"-{4,}\s*MODULE\b")
_TOKEN = re.compile(
    r"""
      (?P<string>"(?:[^"\\\n]|\\.)*")
    | (?P<dashes>-{4,})
    | (?P<equals>={4,})
    | (?P<word>[A-Za-z0-9_]+)
    | (?P<other>\S)
    """,
    re.VERBOSE,
)


@attrs.frozen
class Token:
    text: str
    line: int
    """1-based line of the token in its file."""


def _blank_comments(text: str) -> str:
    """*text* with comments replaced by spaces (newlines kept, so lines keep their numbers).
    An unterminated ``(*`` comment runs to the end of the text."""
    out: list[str] = []
    i, depth, n = 0, 0, len(text)
    while i < n:
        two = text[i : i + 2]
        ch = text[i]
        if two == "(*":
            depth += 1
            out.append("  ")
            i += 2
        elif depth and two == "*)":
            depth -= 1
            out.append("  ")
            i += 2
        elif depth:
            out.append("\n" if ch == "\n" else " ")
            i += 1
        elif ch == '"':
            m = re.compile(r'"(?:[^"\\\n]|\\.)*"?').match(text, i)
            assert m is not None
            out.append(m.group(0))
            i = m.end()
        elif two == "\\*":
            end = text.find("\n", i)
            end = n if end < 0 else end
            out.append(" " * (end - i))
            i = end
        else:
            out.append(ch)
            i += 1
    return "".join(out)


def tokens(source: str) -> list[Token]:
    """The module's tokens, from its header's first dashes to its closing ``====`` (or the
    end of the text when there is none); a text without a module header has none."""
    text = _blank_comments(source)
    head = _HEADER.search(text)
    if head is None:
        return []
    out: list[Token] = []
    line = text.count("\n", 0, head.start()) + 1
    pos = head.start()
    for m in _TOKEN.finditer(text, head.start()):
        line += text.count("\n", pos, m.start())
        pos = m.start()
        kind = m.lastgroup
        word = "----" if kind == "dashes" else "====" if kind == "equals" else m.group(0)
        out.append(Token(word, line))
        if kind == "equals":
            break
    return out


def fingerprint(source: str) -> str:
    """SHA-256 (hex) of the module's canonical token stream."""
    joined = "\x00".join(t.text for t in tokens(source))
    return hashlib.sha256(joined.encode("utf-8")).hexdigest()


def first_difference(given: Sequence[Token], reference: Sequence[Token]) -> tuple[int, int] | None:
    """The lines (given, reference) of the first token where two streams differ; ``None``
    if they are equal. Past the end of a stream its last line (or 1) stands in."""
    for i in range(max(len(given), len(reference))):
        a = given[i] if i < len(given) else None
        b = reference[i] if i < len(reference) else None
        if a is None or b is None or a.text != b.text:
            la = a.line if a is not None else (given[-1].line if given else 1)
            lb = b.line if b is not None else (reference[-1].line if reference else 1)
            return la, lb
    return None
