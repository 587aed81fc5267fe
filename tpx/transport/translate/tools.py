"""Messages ``tools`` / ``tool_choice`` -> Chat Completions ``tools`` / ``tool_choice``.

Custom tools become ``{"type": "function", "function": {name, description, parameters,
strict}}`` with the schema sanitized for the profile (:mod:`tpx.transport.translate.schema`);
server tools are refused. See the package docstring for the table.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, NoReturn

import orjson

from tpx._safe import quote
from tpx.errors import ProtocolError, UnsupportedError
from tpx.transport.translate.profiles import Profile
from tpx.transport.translate.schema import sanitize_schema

__all__ = ["FrozenJSONList", "tool_choice", "translate_tools"]


class FrozenJSONList(list[Any]):
    """A list that never changes and carries its own JSON text (``orjson.dumps`` of it).

    What the gateway shares between requests (:mod:`tpx.gateway.bodies`): a client's
    ``tools``, parsed once, and their translation. :func:`translate_tools` takes the text
    as its cache key (no serialization), and :meth:`tpx.transport.exchange.Exchange.send` writes
    the text as it is (``orjson.Fragment``). Every list method that would change it
    raises ``TypeError`` (its items are shared read-only too: nothing in tpx writes to a
    request's tools).
    """

    __slots__ = ("json",)

    def __init__(self, items: Any, json: bytes) -> None:
        super().__init__(items)
        self.json = json

    def _frozen(self, *args: Any, **kwargs: Any) -> Any:
        raise TypeError("a FrozenJSONList cannot be changed")

    append = extend = insert = pop = remove = clear = sort = reverse = _frozen
    __setitem__ = __delitem__ = __iadd__ = __imul__ = _frozen

    def __reduce__(self) -> Any:  # copies (copy, pickle) are plain lists
        return (list, (list(self),))


_dumps = orjson.dumps


def _bad(message: str) -> NoReturn:
    raise ProtocolError(
        f"invalid Messages request: {message}", status=400, error_type="invalid_request_error"
    )


def _unsupported(message: str) -> NoReturn:
    raise UnsupportedError(f"cannot translate to Chat Completions: {message}")


_TOOL_KEYS = frozenset({"name", "description", "input_schema", "type", "strict", "cache_control"})


def translate_tools(
    tools: Any, profile: Profile, warn: Callable[[str], None], key: bytes | None = None
) -> list[dict[str, Any]]:
    """The translated tools; cached by content (a client sends the same tools every turn).

    Only for profiles that rewrite schemas (for the others the walk is cheaper than the
    key): a hit costs one ``orjson.dumps`` of the list instead of a Python walk over every
    schema; the cached function objects are shared between translations (read-only).
    *key*: ``orjson.dumps(tools)``, when the caller made it already. A
    :class:`FrozenJSONList` (any profile) is looked up by its text and translated into
    one.
    """
    if tools.__class__ is FrozenJSONList:
        result, warnings, text = _lookup(tools.json, profile)
        for warning in warnings:
            warn(warning)
        return FrozenJSONList(result, text)
    if (
        tools.__class__ is list
        and tools
        and (profile.schema_keep is not None or profile.schema_drop or profile.openapi_subset)
    ):
        if key is None:
            try:
                key = _dumps(tools)
            except TypeError:  # not JSON (the dict entry point): translated uncached
                return _translate_tools(tools, profile, warn)
        result, warnings, _ = _lookup(key, profile)
        for warning in warnings:
            warn(warning)
        return list(result)
    return _translate_tools(tools, profile, warn)


def _lookup(key: bytes, profile: Profile) -> _Translated:
    for recent_key, recent_profile, hit in _RECENT:  # bytes ==: no hashing of the key
        if recent_profile is profile and recent_key == key:
            return hit
    hit = _cached_tools(key, profile)
    _remember((key, profile, hit))
    return hit


#: the translated tools, the warnings, the translation's JSON text
_Translated = tuple[tuple[dict[str, Any], ...], tuple[str, ...], bytes]
#: The last few (key, profile, translation) looked up: compared by ``==`` (lengths first,
#: then a memcmp) before the LRU, which hashes the whole key. Replaced, never mutated.
_RECENT: tuple[tuple[bytes, Profile, _Translated], ...] = ()
_RECENT_SIZE = 4


def _remember(entry: tuple[bytes, Profile, _Translated]) -> None:
    global _RECENT
    _RECENT = (entry, *_RECENT[: _RECENT_SIZE - 1])


@functools.lru_cache(maxsize=64)
def _cached_tools(key: bytes, profile: Profile) -> _Translated:
    warnings: list[str] = []
    result = _translate_tools(orjson.loads(key), profile, warnings.append)
    return tuple(result), tuple(dict.fromkeys(warnings)), orjson.dumps(result)


def _translate_tools(
    tools: Any, profile: Profile, warn: Callable[[str], None]
) -> list[dict[str, Any]]:
    if not isinstance(tools, list):
        _bad("tools must be a list")
    result: list[dict[str, Any]] = []
    for tool in tools:
        if not isinstance(tool, dict):
            _bad("tools entries must be objects")
        kind = tool.get("type")
        if kind is not None and kind != "custom":
            _unsupported(f"server tool {quote(kind)} (only custom tools are carried)")
        name = tool.get("name")
        if not isinstance(name, str) or not name:
            _bad("a tool needs a non-empty string name")
        schema = tool.get("input_schema")
        if not isinstance(schema, dict):
            _bad(f"tool {quote(name)}: input_schema must be an object")
        function: dict[str, Any] = {"name": name}
        description = tool.get("description")
        if description is not None:
            if not isinstance(description, str):
                _bad(f"tool {quote(name)}: description must be a string")
            function["description"] = description
        function["parameters"] = sanitize_schema(schema, profile)
        strict = tool.get("strict")
        if strict is not None:
            if not isinstance(strict, bool):
                _bad(f"tool {quote(name)}: strict must be a boolean")
            function["strict"] = strict
        for key in tool:
            if key not in _TOOL_KEYS:
                warn(f"tool field {quote(key)} dropped: no Chat Completions equivalent")
        result.append({"type": "function", "function": function})
    return result


def tool_choice(
    choice: Any, out: dict[str, Any], tools: list[dict[str, Any]], warn: Callable[[str], None]
) -> None:
    """``tool_choice`` (+ ``disable_parallel_tool_use``) into *out*."""
    if not isinstance(choice, dict):
        _bad("tool_choice must be an object")
    kind = choice.get("type")
    value: Any
    if kind == "auto":
        value = "auto"
    elif kind == "any":
        value = "required"
    elif kind == "none":
        value = "none"
    elif kind == "tool":
        name = choice.get("name")
        if not isinstance(name, str) or not name:
            _bad("tool_choice of type tool needs a name")
        if all(tool["function"]["name"] != name for tool in tools):
            _bad(f"tool_choice names the tool {quote(name)}, which the request does not declare")
        value = {"type": "function", "function": {"name": name}}
    else:
        _bad(f"unknown tool_choice type {quote(kind)}")
    if not tools:
        if kind != "none":
            warn("tool_choice dropped: the request has no tools")
        return
    out["tool_choice"] = value
    parallel = choice.get("disable_parallel_tool_use")
    if parallel is True and kind != "none":
        out["parallel_tool_calls"] = False
    elif parallel not in (None, False, True):
        _bad("disable_parallel_tool_use must be a boolean")
