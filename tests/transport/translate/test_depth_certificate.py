"""The request bytes path checks depth without serializing plain messages: that shortcut
refuses exactly what the depth rule refuses, wherever the deep value hides."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import orjson
import pytest

from tpx import _safe
from tpx.errors import ModelError
from tpx.transport.translate import request_bytes_to_openai, request_to_openai


def _plain() -> dict[str, Any]:
    """A request of plain messages only (the shortcut applies), with every kind of block."""
    return {
        "model": "m",
        "max_tokens": 8,
        "system": [{"type": "text", "text": "s", "cache_control": {"type": "ephemeral"}}],
        "tools": [{"name": "t", "description": "d", "input_schema": {"type": "object"}}],
        "tool_choice": {"type": "auto"},
        "metadata": {"user_id": "u"},
        "messages": [
            {"role": "user", "content": "hi"},
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": "calling"},
                    {"type": "tool_use", "id": "toolu_1", "name": "t", "input": {"a": [1]}},
                    {"type": "tool_use", "id": "toolu_2", "name": "t", "input": {}},
                    {"type": "tool_use", "id": "toolu_3", "name": "t", "input": {}},
                ],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_1", "content": "r"},
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_2",
                        "content": [{"type": "text", "text": "r"}],
                    },
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_3",
                        "content": "oops",
                        "is_error": True,
                    },
                    {"type": "text", "text": "more"},
                ],
            },
        ],
    }


def _depth(value: Any) -> int:
    depth = 0
    while _safe.too_deep(value, depth):
        depth += 1
    return depth


def _nested(depth: int) -> Any:
    value: Any = {}
    for _ in range(depth - 1):
        value = [value]
    return value


def _containers(value: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[tuple[Any, ...], int]]:
    """(path, level) of every container in *value* (the top level is level 1)."""
    yield path, len(path) + 1
    items = value.items() if isinstance(value, dict) else enumerate(value)
    for key, item in items:
        if isinstance(item, dict | list):
            yield from _containers(item, (*path, key))


def _at(value: Any, path: tuple[Any, ...]) -> Any:
    for key in path:
        value = value[key]
    return value


def _outcome(call: Any) -> Any:
    try:
        return orjson.loads(call())
    except ModelError as exc:
        return (type(exc).__name__, exc.status, exc.message)


def _variants() -> Iterator[tuple[str, dict[str, Any]]]:
    base = _plain()
    for path, level in _containers(base):
        for total in (_safe.MAX_DEPTH, _safe.MAX_DEPTH + 1):
            deep = _nested(total - level)  # so that the request nests exactly `total` deep
            container = _at(base, path)
            label = "/".join(map(str, path)) or "top"
            if isinstance(container, dict):
                added = copy.deepcopy(base)
                _at(added, path)["zz_extra"] = deep
                yield f"{label}+extra@{total}", added
                for key in container:
                    replaced = copy.deepcopy(base)
                    _at(replaced, path)[key] = deep
                    yield f"{label}.{key}@{total}", replaced
            else:
                appended = copy.deepcopy(base)
                _at(appended, path).append(deep)
                yield f"{label}[+]@{total}", appended


@pytest.mark.parametrize(("label", "request_value"), list(_variants()))
def test_deep_values_anywhere_are_refused_exactly(label: str, request_value: Any) -> None:
    data = orjson.dumps(request_value)
    got = _outcome(lambda: request_bytes_to_openai(data))
    if _safe.too_deep(request_value):
        assert got == (
            "ProtocolError",
            400,
            f"invalid Messages request: body is not JSON ({_safe.DepthError()})",
        ), label
    else:  # within the rule: exactly what the dict entry point makes of it
        assert got == _outcome(lambda: orjson.dumps(request_to_openai(request_value).body)), label


def test_the_variants_reach_the_bound_on_both_sides() -> None:
    depths = {_depth(value) for _, value in _variants()}
    assert depths == {_safe.MAX_DEPTH, _safe.MAX_DEPTH + 1}
    assert len(list(_variants())) > 100


def test_plain_requests_skip_the_messages_check(monkeypatch: pytest.MonkeyPatch) -> None:
    """The shortcut is taken (the messages are never serialized for the check) for plain
    messages, and not taken once one message is not plain."""
    from tpx.transport import translate

    checked: list[int] = []
    real = _safe.parsed_too_deep

    def spy(value: Any, limit: int = _safe.MAX_DEPTH) -> bool:
        checked.append(limit)
        return real(value, limit)

    monkeypatch.setattr(translate, "_parsed_too_deep", spy)
    request_bytes_to_openai(orjson.dumps(_plain()))
    assert checked == [_safe.MAX_DEPTH]  # the rest only
    checked.clear()
    odd = _plain()
    odd["messages"][0]["extra"] = 1
    request_bytes_to_openai(orjson.dumps(odd))
    assert checked == [_safe.MAX_DEPTH, _safe.MAX_DEPTH - 1]  # the rest, then the messages


@pytest.mark.parametrize("total", [_safe.MAX_DEPTH, _safe.MAX_DEPTH + 1])
def test_the_shortest_deep_tool_input_is_caught(total: int) -> None:
    """A tool input is a dict 6 levels down; the shortest text of one that reaches *total*
    is ``{"":[[...]]}``: the length bound on plain inputs must still send it to the check."""
    lists: Any = []
    for _ in range(total - 7):  # request, messages, message, content, block, input, list
        lists = [lists]
    request = _plain()
    request["messages"][1]["content"][1]["input"] = {"": lists}
    data = orjson.dumps(request)
    assert _depth(request) == total
    got = _outcome(lambda: request_bytes_to_openai(data))
    if total > _safe.MAX_DEPTH:
        assert got[0] == "ProtocolError"
        assert "nested deeper" in got[2]
    else:
        assert got == _outcome(lambda: orjson.dumps(request_to_openai(request).body))
