"""Read and write the TLA+ values TLC prints.

:func:`parse_value` reads one value as TLC 2.15 prints it (in ``-tool`` state
messages, ``-dump dot`` labels and ``-simulate`` trace files);
:func:`format_value` writes a Python value back as TLA+ source TLC accepts
(the module that uses it must EXTEND ``Integers`` for negative numbers and
``TLC`` for ``:>`` / ``@@``). :func:`parse_state` reads a state block of
``/\\ var = value`` lines into a :class:`~tpx.oracle.values.Record` keyed by variable
name.

Mapping (see :mod:`tpx.oracle.values`): ``TRUE``/``FALSE`` -> bool, integers -> int,
strings -> str, bare identifiers -> :class:`~tpx.oracle.values.ModelValue`,
``{..}`` and ``a..b`` -> frozenset, ``<<..>>`` -> tuple, ``[f |-> v]`` ->
:class:`~tpx.oracle.values.Record`, ``(k :> v @@ ..)`` -> :class:`~tpx.oracle.values.Function`.
"""

from __future__ import annotations

import re
from typing import Any

from tpx.oracle.values import Function, ModelValue, Record, TLAValue

__all__ = ["TLAValueSyntaxError", "format_value", "parse_state", "parse_value"]


class TLAValueSyntaxError(ValueError):
    """Text that is not a TLA+ value as TLC prints it."""


_TOKEN = re.compile(
    r"""
    (?P<ws>\s+)
  | (?P<string>"(?:[^"\\]|\\.)*")
  | (?P<int>-?\d+)
  | (?P<ident>[A-Za-z_][A-Za-z0-9_]*)
  | (?P<punct><<|>>|\|->|:>|@@|\.\.|[{}\[\](),])
    """,
    re.VERBOSE | re.DOTALL,
)

_ESCAPES = {'"': '"', "\\": "\\", "n": "\n", "t": "\t", "r": "\r", "f": "\f"}
_UNESCAPES = {v: "\\" + k for k, v in _ESCAPES.items()}
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_KEYWORDS = frozenset({"TRUE", "FALSE"})


def _tokenize(text: str) -> list[tuple[str, str, int]]:
    tokens: list[tuple[str, str, int]] = []
    pos = 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None:
            raise TLAValueSyntaxError(
                f"unexpected character {text[pos]!r} at offset {pos} in {_excerpt(text)}"
            )
        kind = m.lastgroup
        assert kind is not None
        if kind != "ws":
            tokens.append((kind, m.group(), pos))
        pos = m.end()
    return tokens


def _excerpt(text: str) -> str:
    return repr(text if len(text) <= 80 else text[:77] + "...")


def _unescape(body: str) -> str:
    out: list[str] = []
    i = 0
    while i < len(body):
        ch = body[i]
        if ch == "\\":
            nxt = body[i + 1]
            if nxt not in _ESCAPES:
                raise TLAValueSyntaxError(f"unknown string escape \\{nxt}")
            out.append(_ESCAPES[nxt])
            i += 2
        else:
            out.append(ch)
            i += 1
    return "".join(out)


class _Parser:
    def __init__(
        self, text: str, tokens: list[tuple[str, str, int]] | None = None, start: int = 0
    ) -> None:
        self.text = text
        self.tokens = _tokenize(text) if tokens is None else tokens
        self.i = start

    def _peek(self, ahead: int = 0) -> tuple[str, str, int] | None:
        j = self.i + ahead
        return self.tokens[j] if j < len(self.tokens) else None

    def _next(self) -> tuple[str, str, int]:
        tok = self._peek()
        if tok is None:
            raise TLAValueSyntaxError(f"unexpected end of value in {_excerpt(self.text)}")
        self.i += 1
        return tok

    def _expect(self, value: str) -> None:
        kind, text, pos = self._next()
        if text != value or kind not in ("punct",):
            raise TLAValueSyntaxError(
                f"expected {value!r} but found {text!r} at offset {pos} in {_excerpt(self.text)}"
            )

    def _at(self, value: str) -> bool:
        tok = self._peek()
        return tok is not None and tok[0] == "punct" and tok[1] == value

    def parse_all(self) -> TLAValue:
        value: TLAValue = self.value()
        tok = self._peek()
        if tok is not None:
            raise TLAValueSyntaxError(
                f"unexpected {tok[1]!r} after the value at offset {tok[2]} in {_excerpt(self.text)}"
            )
        return value

    def value(self) -> Any:
        kind, text, pos = self._next()
        if kind == "int":
            if self._at(".."):
                self.i += 1
                hi_kind, hi, hi_pos = self._next()
                if hi_kind != "int":
                    raise TLAValueSyntaxError(f"expected an integer after '..' at offset {hi_pos}")
                return frozenset(range(int(text), int(hi) + 1))
            return int(text)
        if kind == "string":
            return _unescape(text[1:-1])
        if kind == "ident":
            if text == "TRUE":
                return True
            if text == "FALSE":
                return False
            return ModelValue(text)
        if text == "{":
            return frozenset(self._items("}"))
        if text == "<<":
            return tuple(self._items(">>"))
        if text == "[":
            return self._record()
        if text == "(":
            return self._function()
        raise TLAValueSyntaxError(f"unexpected {text!r} at offset {pos} in {_excerpt(self.text)}")

    def _items(self, close: str) -> list[Any]:
        items: list[Any] = []
        if self._at(close):
            self.i += 1
            return items
        while True:
            items.append(self.value())
            if self._at(","):
                self.i += 1
                continue
            self._expect(close)
            return items

    def _record(self) -> Record:
        fields: dict[str, Any] = {}
        while True:
            kind, name, pos = self._next()
            if kind != "ident":
                raise TLAValueSyntaxError(
                    f"expected a record field name at offset {pos} in {_excerpt(self.text)}"
                )
            self._expect("|->")
            fields[name] = self.value()
            if self._at(","):
                self.i += 1
                continue
            self._expect("]")
            return Record(fields)

    def _function(self) -> Function:
        pairs: dict[Any, Any] = {}
        while True:
            key = self.value()
            self._expect(":>")
            pairs[key] = self.value()
            if self._at("@@"):
                self.i += 1
                continue
            self._expect(")")
            return Function(pairs)


def parse_value(text: str) -> TLAValue:
    """Parse one TLA+ value as TLC prints it.

    Raises :class:`TLAValueSyntaxError` (a ``ValueError``) on anything else.
    """
    result: TLAValue = _Parser(text).parse_all()
    return result


_STATE_LINE = re.compile(r"^(?:/\\\s*)?([A-Za-z_][A-Za-z0-9_]*)\s*=\s?", re.MULTILINE)


def parse_state(text: str) -> Record:
    """Parse a TLC state block into a Record keyed by variable name.

    The block is a sequence of ``/\\ var = value`` lines (a value may span
    lines); a single-variable spec prints ``var = value`` without ``/\\``.
    Variables come in no fixed order.
    """
    lines = [ln for ln in text.splitlines() if ln.strip()]
    chunks: list[tuple[str, list[str]]] = []
    for line in lines:
        m = _STATE_LINE.match(line)
        if m is not None and (line.startswith("/\\") or not chunks):
            chunks.append((m.group(1), [line[m.end() :]]))
        elif chunks:
            chunks[-1][1].append(line)
        else:
            raise TLAValueSyntaxError(f"not a state line: {line!r}")
    state: dict[str, Any] = {}
    for name, parts in chunks:
        if name in state:
            raise TLAValueSyntaxError(f"variable {name!r} appears twice in the state")
        state[name] = parse_value("\n".join(parts))
    return Record(state)


def _format_str(s: str) -> str:
    out: list[str] = []
    for ch in s:
        if ch in _UNESCAPES:
            out.append(_UNESCAPES[ch])
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            raise ValueError(f"TLA+ strings cannot carry the control character {ch!r}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def format_value(v: object) -> str:
    """Write *v* as TLA+ source that TLC reads back to the same value.

    Set elements, record fields and function keys are written in a
    deterministic (sorted-by-text) order.
    """
    if isinstance(v, bool):
        return "TRUE" if v else "FALSE"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, str):
        return _format_str(v)
    if isinstance(v, ModelValue):
        if not _IDENT.match(v.name) or v.name in _KEYWORDS:
            raise ValueError(f"model value name {v.name!r} is not a TLA+ identifier")
        return v.name
    if isinstance(v, frozenset | set):
        return "{" + ", ".join(sorted(format_value(x) for x in v)) + "}"
    if isinstance(v, tuple | list):
        return "<<" + ", ".join(format_value(x) for x in v) + ">>"
    if isinstance(v, Record):
        if not v:
            raise ValueError("TLA+ has no empty record")
        fields = []
        for key in sorted(v):
            if not isinstance(key, str) or not _IDENT.match(key):
                raise ValueError(f"record field {key!r} is not a TLA+ identifier")
            fields.append(f"{key} |-> {format_value(v[key])}")
        return "[" + ", ".join(fields) + "]"
    if isinstance(v, Function):
        if not v:
            return "<<>>"
        pairs = sorted((format_value(k), format_value(x)) for k, x in v.items())
        return "(" + " @@ ".join(f"{k} :> {x}" for k, x in pairs) + ")"
    raise TypeError(f"cannot write {type(v).__name__} {v!r} as a TLA+ value")


def _parse_tokens(
    text: str, tokens: list[tuple[str, str, int]], start: int
) -> tuple[TLAValue, int]:
    """Parse one value from pre-made tokens (for the cfg reader); return it and the next index."""
    parser = _Parser(text, tokens, start)
    value: TLAValue = parser.value()
    return value, parser.i
