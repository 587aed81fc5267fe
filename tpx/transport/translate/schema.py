"""JSON Schema sanitizing for a profile (tool ``parameters``, structured-output schemas).

Walks a schema by its grammar, so property *names* are never mistaken for keywords:
maps of schemas (``properties``, ``patternProperties``, ``$defs``, ``definitions``,
``dependentSchemas``), schema-valued keywords (``items``, ``additionalProperties``,
``not``, ``propertyNames``, ``contains``, ``if``/``then``/``else``, ...) and lists of
schemas (``anyOf``, ``oneOf``, ``allOf``, ``prefixItems``) are recursed into; every
other keyword's value (``enum``, ``default``, ``required``, ``const`` ...) is data and
kept as is. The input is never mutated; a profile that keeps everything gets the same
object back.

Sanitized schemas are cached by content (their canonical JSON bytes, per profile; a
bounded LRU): a client sends the same 24 tool schemas every turn, and walking them in
Python each time would cost several times the JSON parse. Cached results are shared
between translations, so a translated body's ``parameters`` must be treated as
read-only (they could already be the caller's own objects for a profile that keeps
everything).

With ``profile.openapi_subset`` (Gemini, ``generic``): ``const: v`` -> ``enum: [v]``
and a ``type`` list (``["string", "null"]``) -> one ``type`` + ``nullable: true``
(several non-null types -> ``anyOf`` of each), as OpenAPI 3.0 writes them.
"""

from __future__ import annotations

import functools
from typing import Any

import orjson

from tpx.transport.translate.profiles import Profile

__all__ = ["sanitize_schema"]

_SCHEMA_MAPS = frozenset(
    {"properties", "patternProperties", "$defs", "definitions", "dependentSchemas"}
)
_SCHEMA_VALUES = frozenset(
    {
        "items",
        "additionalProperties",
        "additionalItems",
        "not",
        "propertyNames",
        "contains",
        "if",
        "then",
        "else",
        "unevaluatedProperties",
        "unevaluatedItems",
    }
)
_SCHEMA_LISTS = frozenset({"anyOf", "oneOf", "allOf", "prefixItems"})


def sanitize_schema(schema: Any, profile: Profile) -> Any:
    """*schema* as *profile*'s server accepts it (see the module docstring)."""
    if profile.schema_keep is None and not profile.schema_drop and not profile.openapi_subset:
        return schema
    if schema.__class__ is not dict:
        return schema
    try:
        key = orjson.dumps(schema)
    except TypeError:  # not JSON (the dict entry point): no cache
        return _walk(schema, profile.schema_keep, profile.schema_drop, profile.openapi_subset)
    return _cached(key, profile)


@functools.lru_cache(maxsize=1024)
def _cached(key: bytes, profile: Profile) -> Any:
    return _walk(
        orjson.loads(key), profile.schema_keep, profile.schema_drop, profile.openapi_subset
    )


def _walk(schema: Any, keep: frozenset[str] | None, drop: frozenset[str], subset: bool) -> Any:
    if schema.__class__ is not dict:
        return schema  # booleans (true / false schemas) and malformed values pass through
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if subset:
            if key == "const":
                key, value = "enum", [value]
            elif key == "enum" and "const" in schema:
                continue  # const is the narrower of the two: its one-value enum is kept
            elif key == "type" and value.__class__ is list:
                _types(value, out)
                continue
        if (keep is not None and key not in keep) or key in drop:
            continue
        if key in _SCHEMA_MAPS and value.__class__ is dict:
            value = {name: _walk(sub, keep, drop, subset) for name, sub in value.items()}
        elif key in _SCHEMA_VALUES:
            if value.__class__ is list:  # draft-4 tuple items
                value = [_walk(sub, keep, drop, subset) for sub in value]
            else:
                value = _walk(value, keep, drop, subset)
        elif key in _SCHEMA_LISTS and value.__class__ is list:
            value = [_walk(sub, keep, drop, subset) for sub in value]
        out[key] = value
    return out


def _types(types: list[Any], out: dict[str, Any]) -> None:
    """A JSON Schema ``type`` list in OpenAPI 3.0 form, into *out*."""
    named = [t for t in types if t != "null"]
    if len(named) == 1:
        out["type"] = named[0]
    elif named:
        out["anyOf"] = [{"type": t} for t in named]
    if len(named) != len(types):
        out["nullable"] = True
