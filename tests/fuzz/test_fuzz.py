"""Hostile-input fuzzing of both transports (see ``tests/fuzz/strategies.py``).

Oracle, per case: only tpx's documented errors (``tpx.errors.ModelError``) escape;
returned bodies validate as ``anthropic.types.Message`` and streamed events as
``RawMessageStreamEvent`` (or ``ping``, or a final Messages ``error``) in the SDK's
strict JSON mode; the turn advances by exactly one when the request reached the wire
(else not at all); a fresh request afterwards works; the canary credential appears
nowhere (results, errors and their chains, bodies, logs, ``last_error``). And the gateway's
tail cache (``test_fuzz_kept_tail``): a body read through a kept tail is what ``orjson.loads``
makes of it.

``make test`` runs a short derandomized slice; ``make fuzz`` sets ``TPX_FUZZ_EXAMPLES``
(cases per test) and prints the total cases and cases/s.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import httpx2
import orjson
import pydantic
import pytest
from anthropic.types import Message, RawMessageStreamEvent
from anthropic.types.shared import ErrorResponse
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tpx.transport
from tests.fuzz import strategies as fz
from tests.gateway.bodies_oracle import read_as_orjson
from tpx.errors import ModelError
from tpx.gateway.bodies import BodyReader

EXAMPLES = int(os.environ.get("TPX_FUZZ_EXAMPLES", "25"))
FULL = "TPX_FUZZ_EXAMPLES" in os.environ
FUZZ = settings(
    max_examples=EXAMPLES,
    derandomize=not FULL,
    deadline=None,
    database=None,
    suppress_health_check=list(HealthCheck),
)
CASES = {"n": 0}
#: One event loop for every async case (``asyncio.run`` per case costs more than the case).
LOOP = asyncio.Runner()

_EVENT: pydantic.TypeAdapter[Any] = pydantic.TypeAdapter(RawMessageStreamEvent)
GOOD_MESSAGE = orjson.dumps(
    {
        "id": "msg_ok",
        "type": "message",
        "role": "assistant",
        "model": "m",
        "content": [{"type": "text", "text": "fine"}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": 1, "output_tokens": 1},
    }
)
GOOD_COMPLETION = orjson.dumps(
    {
        "id": "c_ok",
        "model": "m",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "fine"},
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1},
    }
)


class _Logs(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


LOGS = _Logs()
logging.getLogger("tpx").addHandler(LOGS)
logging.getLogger("tpx").setLevel(logging.DEBUG)


class Provider:
    """Replies with the drawn reply once (chunked as drawn), then with a good one."""

    def __init__(self, anthropic: bool, status: int, chunks: list[bytes], stream: bool) -> None:
        self.anthropic = anthropic
        self.status = status
        self.chunks = chunks
        self.stream = stream
        self.calls = 0
        self.fresh = False  # set for the request after the case: always a good reply

    def _next(self) -> tuple[int, list[bytes], str]:
        self.calls += 1
        if not self.fresh:
            kind = "text/event-stream" if self.stream and self.status == 200 else "application/json"
            return self.status, self.chunks, kind
        return 200, [GOOD_MESSAGE if self.anthropic else GOOD_COMPLETION], "application/json"

    def sync(self, request: httpx2.Request) -> httpx2.Response:
        status, chunks, kind = self._next()

        def body() -> Iterator[bytes]:
            yield from chunks

        return httpx2.Response(status, headers={"content-type": kind}, content=body())

    async def aio(self, request: httpx2.Request) -> httpx2.Response:
        status, chunks, kind = self._next()

        async def body() -> AsyncIterator[bytes]:
            for chunk in chunks:
                yield chunk

        return httpx2.Response(status, headers={"content-type": kind}, content=body())


def _no_canary(text: str) -> None:
    for form in fz.canary_forms():
        assert form not in text, f"canary form {form!r} leaked in {text[:300]!r}"


def _check_error(error: ModelError) -> None:
    seen: list[BaseException] = []
    current: BaseException | None = error
    while current is not None and current not in seen:
        seen.append(current)
        _no_canary(str(current) + repr(current))
        current = current.__cause__ or current.__context__
    body = error.body()
    ErrorResponse.model_validate_json(orjson.dumps(body), strict=True)
    _no_canary(orjson.dumps(body).decode())


def _check_sse(data: bytes, failed: bool) -> None:
    _no_canary(data.decode("utf-8", "replace"))
    blocks = [b for b in data.split(b"\n\n") if b]
    for position, block in enumerate(blocks):
        lines = block.split(b"\n")
        assert lines[0].startswith(b"event: ")
        assert lines[1].startswith(b"data: ")
        event = orjson.loads(lines[1][len(b"data: ") :])
        assert lines[0][len(b"event: ") :].decode() == event["type"]
        if event["type"] == "error":
            assert failed
            assert position == len(blocks) - 1
            ErrorResponse.model_validate_json(lines[1][6:], strict=True)
        elif event["type"] != "ping":
            _EVENT.validate_json(lines[1][6:], strict=True)


def _run_case(
    anthropic: bool,
    aio: bool,
    stream: bool,
    request: dict[str, Any],
    status: int,
    chunks: list[bytes],
) -> None:
    CASES["n"] += 1
    LOGS.lines.clear()
    provider = Provider(anthropic, status, chunks, stream)
    kwargs: dict[str, Any] = {"env": {}}
    if anthropic:
        kwargs["api_key"] = fz.CANARY
    else:
        kwargs.update(oauth_token=fz.CANARY, tpx_base_url="https://tpx.test")
    result: Any = None
    error: ModelError | None = None

    if aio:
        t: Any = tpx.transport.aboot(transport=httpx2.MockTransport(provider.aio), **kwargs)

        async def go() -> Any:
            if stream:
                return b"".join([c async for c in t.stream(request)])
            return await t.create(request)

        try:
            result = LOOP.run(go())
        except ModelError as exc:
            error = exc
    else:
        t = tpx.transport.boot(transport=httpx2.MockTransport(provider.sync), **kwargs)
        try:
            result = b"".join(t.stream(request)) if stream else t.create(request)
        except ModelError as exc:
            error = exc
    ex = t.exchange
    assert ex.phase == "idle"
    assert ex.turn == provider.calls  # one turn per exchange that reached the wire
    if error is not None:
        _check_error(error)
        assert ex.last_outcome == ("err" if provider.calls else "none")
    if ex.last_error is not None:
        _check_error(ex.last_error)
    if stream and result is not None:
        _check_sse(result, failed=error is not None)
    elif result is not None:
        data = orjson.dumps(result)
        _no_canary(data.decode())
        Message.model_validate_json(data, strict=True)
    for line in LOGS.lines:
        _no_canary(line)
    # a fresh request after any failure works
    provider.fresh = True
    fresh = _fresh_request(result if isinstance(result, dict) else None, ex.pending)
    if aio:
        body = LOOP.run(t.create(fresh))
        LOOP.run(t.aclose())
    else:
        body = t.create(fresh)
        t.close()
    assert body["content"][0]["text"] == "fine"


def _fresh_request(delivered: dict[str, Any] | None, pending: frozenset[str]) -> dict[str, Any]:
    """A plain request; when tool_uses are pending (a streamed or created reply that
    delivered some), the turn that answers them."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": "again"}]
    if pending:
        uses = [{"type": "tool_use", "id": i, "name": "f", "input": {}} for i in sorted(pending)]
        results = [
            {"type": "tool_result", "tool_use_id": i, "content": "ok"} for i in sorted(pending)
        ]
        messages += [{"role": "assistant", "content": uses}, {"role": "user", "content": results}]
    return {"model": "m", "max_tokens": 8, "messages": messages}


@pytest.fixture(scope="module", autouse=True)
def _close_loop() -> Iterator[None]:
    yield
    LOOP.close()


@st.composite
def case(draw: st.DrawFn, stream: bool, anthropic: bool) -> tuple[dict[str, Any], int, list[bytes]]:
    request = draw(fz.caller_request())
    status, chunks = draw(fz.reply(stream, anthropic))
    return request, status, chunks


def _fuzz(anthropic: bool, aio: bool, stream: bool) -> Any:
    @FUZZ
    @given(case(stream, anthropic))
    def run(drawn: tuple[dict[str, Any], int, list[bytes]]) -> None:
        _run_case(anthropic, aio, stream, *drawn)

    return run


@pytest.mark.parametrize("stream", [False, True], ids=["create", "stream"])
@pytest.mark.parametrize("aio", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize("anthropic", [True, False], ids=["ANTHROPIC", "TPX"])
def test_fuzz_transport(
    anthropic: bool, aio: bool, stream: bool, record_property: Callable[[str, object], None]
) -> None:
    before = CASES["n"]
    _fuzz(anthropic, aio, stream)()
    record_property("fuzz_cases", CASES["n"] - before)  # summed by conftest (xdist too)


# -- the gateway's tail cache (tpx.gateway.bodies) ----------------------------------------------


def test_fuzz_kept_tail(record_property: Callable[[str, object], None]) -> None:
    """A body read through a kept tail is what ``orjson.loads`` makes of it (value, member
    order, depth verdict) or fails with orjson's own error: valid heads, heads cut or with
    bytes inserted or removed, heads that are not objects, keys in head and tail."""
    before = CASES["n"]

    @FUZZ
    @given(fz.json_member_runs())
    def run(drawn: tuple[bytes, list[bytes], bytes]) -> None:
        first, heads, tail = drawn
        reader = BodyReader(min_body=0, min_tail=0)
        read_as_orjson(reader, first)
        read_as_orjson(reader, first)
        for head in heads:
            CASES["n"] += 1
            read_as_orjson(reader, head + tail)

    run()
    record_property("fuzz_cases", CASES["n"] - before)
