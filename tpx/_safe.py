"""Hostile-input limits shared by every part of tpx that parses, prints or serializes.

One depth rule
    JSON nesting deeper than :data:`MAX_DEPTH` levels (the document's top level counts 1)
    is refused wherever data enters tpx: provider bodies and stream events, tool-call
    arguments, caller requests (tool inputs and schemas included). Provider-side it is a
    :class:`~tpx.errors.ProtocolError` (502), caller-side a 400 ``invalid_request_error``.
    The bound keeps every value tpx later writes back (a translated body nests at most a
    few levels deeper than what it came from) well inside what ``orjson.dumps`` can write
    (254 levels) and every check here is iterative: no input ever makes tpx recurse.

One formatter
    :func:`quote` renders any value for an error or warning message: bounded in length,
    never recursive (containers are shown by type and size only), cut with
    :data:`CUT` so redaction can tell a cut (see :func:`tpx.errors.redact`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

__all__ = [
    "CUT",
    "MAX_DEPTH",
    "QUOTE_LIMIT",
    "DepthError",
    "NotJSONError",
    "loads",
    "parsed_too_deep",
    "quote",
    "serialized_within",
    "too_deep",
]

#: Deepest JSON nesting tpx accepts (a top-level object with a list inside is depth 2).
MAX_DEPTH = 128
#: Characters of a string :func:`quote` shows before cutting it.
QUOTE_LIMIT = 80
#: Marks the place where :func:`quote` (or any tpx message) cut a text.
CUT = "\u2026"

_SCALARS = frozenset({str, int, float, bool, type(None)})


class NotJSONError(ValueError):
    """Text that is not JSON (the parser's message, without the text itself)."""


class DepthError(ValueError):
    """A value nests deeper than :data:`MAX_DEPTH`."""

    def __init__(self, limit: int = MAX_DEPTH) -> None:
        super().__init__(f"JSON nested deeper than {limit} levels")
        self.limit = limit


def too_deep(value: Any, limit: int = MAX_DEPTH) -> bool:
    """*value* (dicts / mappings, lists / tuples) nests deeper than *limit* levels.

    Level by level, each container visited once per level (a cyclic value is simply too
    deep), no recursion. JSON's own types are told apart by class (cheap); only other
    types pay for an ``isinstance`` check.
    """
    level: list[Any] = [value] if isinstance(value, Mapping | list | tuple) else []
    depth = 0
    while level:
        depth += 1
        if depth > limit:
            return True
        following: dict[int, Any] = {}
        for container in level:
            kind = container.__class__
            if kind is dict:
                items: Any = container.values()
            elif kind is list or kind is tuple:
                items = container
            else:
                items = container.values() if isinstance(container, Mapping) else container
            for item in items:
                kind = item.__class__
                if (kind is dict or kind is list) or (
                    kind not in _SCALARS and isinstance(item, Mapping | list | tuple)
                ):
                    following[id(item)] = item
        level = list(following.values())
    return False


def bytes_may_be_too_deep(data: bytes | str, limit: int = MAX_DEPTH) -> bool:
    """Cheap pre-check: ``False`` proves the JSON text *data* nests at most *limit* deep.

    Exact reasoning: every level of nesting takes one opening and one closing bracket, so
    a text of at most ``2 * limit`` characters cannot nest deeper than *limit*; nor can a
    text with at most *limit* opening brackets (strings included: a bracket in a string
    only makes the count larger). The length test costs nothing; the count is one pass
    per bracket kind, done only for short texts (a long text goes straight to the exact
    check, :func:`loads`, which costs about as much as counting would).
    """
    size = len(data)
    if size <= 2 * limit:
        return False
    if size > _COUNT_BELOW:
        return True
    if isinstance(data, str):
        return data.count("[") + data.count("{") > limit
    return data.count(b"[") + data.count(b"{") > limit


def loads(data: bytes | str, limit: int = MAX_DEPTH) -> Any:
    """``orjson.loads`` under the depth rule.

    Raises :class:`NotJSONError` for text that is not JSON and :class:`DepthError` for
    JSON nested deeper than *limit* (both ``ValueError``, neither chained to the parser's
    exception, which holds the whole text).
    """
    failure: str | None = None
    try:
        value = orjson.loads(data)
    except orjson.JSONDecodeError as exc:  # its .doc holds the whole text: not kept
        failure = str(exc)
    if failure is not None:  # raised outside the handler: nothing chained
        if "depth limit" in failure:  # deeper than orjson's own bound (1024)
            raise DepthError(limit)
        raise NotJSONError(failure)
    # A text of at most 2 * limit characters cannot nest deeper (bytes_may_be_too_deep).
    if (
        len(data) > 2 * limit
        and bytes_may_be_too_deep(data, limit)
        and parsed_too_deep(value, limit)
    ):
        raise DepthError(limit)
    return value


#: orjson.dumps writes at most this many nested levels (it raises beyond).
_ORJSON_DEPTH = 254
#: Texts at least this long skip the bracket count: serializing the parsed value (the
#: exact check) costs about what two counts over the text would.
_COUNT_BELOW = 16_384


def _nest(levels: int) -> tuple[list[Any], list[Any]]:
    """(outer, inner): *levels* nested lists, the innermost (*inner*) holding ``None``."""
    inner: list[Any] = [None]
    outer = inner
    for _ in range(levels - 1):
        outer = [outer]
    return outer, inner


#: Ready-made nests, by limit (one per concurrent caller: ``list.pop`` and ``append`` are
#: atomic, so a thread never shares a nest; an empty pool makes a new one).
_NESTS: dict[int, list[tuple[list[Any], list[Any]]]] = {}


def _nested_dumps(value: Any, levels: int) -> bytes | None:
    """``orjson.dumps`` of *value* inside *levels* nested lists; ``None`` if it fails."""
    pool = _NESTS.get(levels)
    if pool is None:
        pool = _NESTS.setdefault(levels, [])
    try:
        outer, inner = pool.pop()
    except IndexError:
        outer, inner = _nest(levels)
    inner[0] = value
    try:
        return orjson.dumps(outer)
    except TypeError:
        return None
    finally:
        inner[0] = None  # the pool keeps no reference to a caller's value
        pool.append((outer, inner))


def serialized_within(value: Any, limit: int = MAX_DEPTH) -> bytes | None:
    """``orjson.dumps(value)`` for a value as orjson parses it (dicts with str keys,
    lists, str, int, float, bool, None), or ``None`` when it nests deeper than *limit*:
    serialized inside ``254 - limit`` nested lists (depth *limit* lands exactly on
    orjson's own bound), it fails iff it is too deep. *limit* below orjson's bound.
    Not for values of other types (``dumps`` could fail for another reason and it would
    read as too deep)."""
    levels = _ORJSON_DEPTH - limit
    if levels <= 0:
        raise ValueError(f"limit {limit} is not below orjson's bound ({_ORJSON_DEPTH})")
    text = _nested_dumps(value, levels)
    return None if text is None else text[levels:-levels]


def parsed_too_deep(value: Any, limit: int = MAX_DEPTH) -> bool:
    """:func:`too_deep` for a value as orjson parses it, at C speed (see
    :func:`serialized_within`; the plain walk for a limit at or past orjson's bound)."""
    if limit >= _ORJSON_DEPTH:
        return too_deep(value, limit)
    return _nested_dumps(value, _ORJSON_DEPTH - limit) is None


def quote(value: Any, limit: int = QUOTE_LIMIT) -> str:
    """*value* for a message: strings and numbers as ``repr`` (strings cut to *limit*
    characters, the cut marked with :data:`CUT` inside the quotes), anything else by its
    type (and size), never by its content. Never raises, never recurses."""
    kind = value.__class__
    if kind is str:
        cut = len(value) > limit
        text = repr(value[:limit] if cut else value)
        return text[:-1] + CUT + text[-1] if cut else text
    if value is None or kind is bool:
        return repr(value)
    if kind is int:
        text = str(value) if -(10**30) < value < 10**30 else "a very large integer"
        return text
    if kind is float:
        return repr(value)
    if isinstance(value, Mapping):
        return f"an object ({_size(value)} keys)"
    if isinstance(value, list | tuple):
        return f"an array ({_size(value)} items)"
    return f"a value of type {kind.__name__}"


def _size(value: Any) -> str:
    try:
        return str(len(value))
    except Exception:  # a hostile Mapping's __len__
        return "?"
