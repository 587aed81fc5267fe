"""The scoped pause of the cyclic garbage collector in ``request_bytes_to_openai``."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from typing import Any

import orjson
import pytest

import tpx.transport.translate
from tpx.errors import ProtocolError, UnsupportedError
from tpx.transport.translate import request_bytes_to_openai
from tpx.transport.translate.request import translate_request

_GOOD = orjson.dumps(
    {"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]}
)
# Each one fails at a different stage: JSON parsing, validation, an unsupported feature.
_BAD = {
    "not_json": (b"{not json", ProtocolError),
    "bad_role": (
        orjson.dumps({"model": "m", "messages": [{"role": "x", "content": "a"}]}),
        ProtocolError,
    ),
    "unsupported": (
        orjson.dumps({"model": "m", "messages": [], "mcp_servers": []}),
        UnsupportedError,
    ),
}


@pytest.fixture(autouse=True)
def _restore_gc() -> Iterator[None]:
    """Whatever a test does, leave the collector as it was found."""
    was_enabled = gc.isenabled()
    yield
    if was_enabled:
        gc.enable()
    else:
        gc.disable()


def test_collector_paused_during_the_walk(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[bool] = []

    def spy(request: Any, model: str | None, st: Any) -> dict[str, Any]:
        seen.append(gc.isenabled())
        return translate_request(request, model, st)

    monkeypatch.setattr(tpx.transport.translate, "translate_request", spy)
    gc.enable()
    assert orjson.loads(request_bytes_to_openai(_GOOD))["messages"] == [
        {"role": "user", "content": "hi"}
    ]
    assert seen == [False]
    assert gc.isenabled()


def test_enabled_collector_restored_after_success() -> None:
    gc.enable()
    request_bytes_to_openai(_GOOD)
    assert gc.isenabled()


@pytest.mark.parametrize("case", sorted(_BAD))
def test_enabled_collector_restored_after_an_exception(case: str) -> None:
    data, error = _BAD[case]
    gc.enable()
    with pytest.raises(error):
        request_bytes_to_openai(data)
    assert gc.isenabled()


def test_disabled_collector_stays_disabled() -> None:
    gc.disable()
    request_bytes_to_openai(_GOOD)
    assert not gc.isenabled()
    for data, error in _BAD.values():
        with pytest.raises(error):
            request_bytes_to_openai(data)
        assert not gc.isenabled()
