"""tpx.transport.translate.schema: JSON Schema sanitizing by profile."""

from __future__ import annotations

import copy
from typing import Any

import attrs

from tpx.transport.translate import PROFILES
from tpx.transport.translate.schema import sanitize_schema

SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "properties": {
        "type": {"type": ["string", "null"], "format": "uri"},
        "items": {"type": "array", "items": {"const": 1}, "maxItems": 3},
        "map": {"type": "object", "propertyNames": {"pattern": "^a"}, "additionalProperties": {}},
        "n": {"type": ["integer", "string"], "exclusiveMinimum": 0},
    },
    "required": ["type"],
    "additionalProperties": False,
}


def test_a_profile_that_keeps_everything_returns_the_same_object() -> None:
    assert sanitize_schema(SCHEMA, PROFILES["openai"]) is SCHEMA


def test_dropping_only_the_meta_schema() -> None:
    got = sanitize_schema(SCHEMA, PROFILES["deepseek"])
    assert got == {k: v for k, v in SCHEMA.items() if k != "$schema"}


def test_openapi_subset_and_no_mutation() -> None:
    before = copy.deepcopy(SCHEMA)
    got = sanitize_schema(SCHEMA, PROFILES["gemini"])
    assert before == SCHEMA
    assert got == {
        "type": "object",
        "properties": {
            "type": {"type": "string", "nullable": True},
            "items": {"type": "array", "items": {"enum": [1]}, "maxItems": 3},
            "map": {"type": "object"},
            "n": {"anyOf": [{"type": "integer"}, {"type": "string"}]},
        },
        "required": ["type"],
    }


def test_const_beside_enum_keeps_one_enum() -> None:
    profile = attrs.evolve(PROFILES["generic"], schema_keep=None)
    assert sanitize_schema({"const": "a", "enum": ["a", "b"]}, profile) == {"enum": ["a"]}
    assert sanitize_schema({"enum": ["a", "b"], "const": "a"}, profile) == {"enum": ["a"]}
    assert sanitize_schema(True, profile) is True
