"""The reply scrubber matches what the client decodes: no spelling of the upstream token
reaches it, whichever way the upstream writes it.

Each case is an upstream that echoes the token it was sent in a successful reply, written
so that the raw bytes never hold it as such: a legal ``\\/`` escape inside it, ``\\uXXXX``
escapes inside a tool call's arguments (JSON inside a string), the token split across two
deltas (at every point), and, through the gateway, a token fetched anew after a 401 (a
token command). Both providers, streamed and not, the sync and async library paths. The
check decodes what the client got the way a client does (every SSE event's JSON, each
block's text and ``partial_json`` put together and parsed) and looks for the token there.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx2
import orjson
import pytest

import tpx._scrub
import tpx.gateway.turn
import tpx.transport
from tests.gateway.conftest import make_settings
from tpx.gateway.core import Gateway
from tpx.gateway.settings import Credential
from tpx.gateway.upstream import SyncUpstream
from tpx.sdk import GatewayTransport

#: a token with a slash (OAuth tokens are base64: ``/`` and ``+`` are theirs)
TOKEN = "sk-proj-Ab/cdEFgh+ijKLmnopQRstuvWXyz0123456789abcdefghijkl"
#: what a token command gives the second time: nothing in common with the first
FRESH = "ya29.Zq8rT3vLw0pN5xKcHm2JfYb7UdRg4EaiSo6Wt1Ve9Bn"
ANTHROPIC_URL = "http://anthropic.test"
TPX_URL = "http://upstream.test/v1"
REQUEST: dict[str, Any] = {
    "model": "m",
    "max_tokens": 16,
    "messages": [{"role": "user", "content": "hi"}],
}
Reply = Callable[[httpx2.Request], httpx2.Response]


def slashed(text: str) -> str:
    """*text* as JSON string content, every ``/`` written ``\\/`` (legal JSON)."""
    return orjson.dumps(text).decode()[1:-1].replace("/", "\\/")


def escaped(text: str) -> str:
    """*text* as JSON string content with its first character ``\\u``-escaped."""
    return f"\\u{ord(text[0]):04x}" + orjson.dumps(text[1:]).decode()[1:-1]


# -- upstream bodies, written as raw JSON text so the escapes stay as the upstream put them


def openai_text(raw_text: str) -> bytes:
    return (
        '{"id":"c1","object":"chat.completion","model":"m","choices":[{"index":0,'
        '"message":{"role":"assistant","content":"' + raw_text + '"},"finish_reason":"stop"}],'
        '"usage":{"prompt_tokens":1,"completion_tokens":1}}'
    ).encode()


def openai_tool(raw_arguments: str) -> bytes:
    return (
        '{"id":"c1","object":"chat.completion","model":"m","choices":[{"index":0,'
        '"message":{"role":"assistant","content":null,"tool_calls":[{"id":"call_1",'
        '"type":"function","function":{"name":"run","arguments":"' + raw_arguments + '"}}]},'
        '"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":1,"completion_tokens":1}}'
    ).encode()


def _chunk(raw_delta: str, finish: str | None = None) -> bytes:
    end = "null" if finish is None else f'"{finish}"'
    return (
        'data: {"id":"c1","object":"chat.completion.chunk","model":"m","choices":[{"index":0,'
        '"delta":{' + raw_delta + '},"finish_reason":' + end + "}]}\n\n"
    ).encode()


def openai_text_stream(*raw_pieces: str) -> bytes:
    parts = [_chunk('"role":"assistant","content":""')]
    parts += [_chunk('"content":"' + piece + '"') for piece in raw_pieces]
    return b"".join([*parts, _chunk("", "stop"), b"data: [DONE]\n\n"])


def openai_tool_stream(*raw_pieces: str) -> bytes:
    head = '"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"run",'
    parts = [_chunk('"role":"assistant","content":null,' + head + '"arguments":""}}]')]
    parts += [
        _chunk('"tool_calls":[{"index":0,"function":{"arguments":"' + piece + '"}}]')
        for piece in raw_pieces
    ]
    return b"".join([*parts, _chunk("", "tool_calls"), b"data: [DONE]\n\n"])


def _message(raw_content: str, stop: str) -> str:
    return (
        '{"id":"msg_1","type":"message","role":"assistant","model":"m","content":['
        + raw_content
        + '],"stop_reason":"'
        + stop
        + '","stop_sequence":null,"usage":{"input_tokens":1,"output_tokens":1}}'
    )


def anthropic_text(raw_text: str) -> bytes:
    return _message('{"type":"text","text":"' + raw_text + '"}', "end_turn").encode()


def anthropic_tool(raw_input: str) -> bytes:
    block = '{"type":"tool_use","id":"toolu_1","name":"run","input":' + raw_input + "}"
    return _message(block, "tool_use").encode()


def _event(name: str, raw_data: str) -> bytes:
    return f"event: {name}\ndata: {raw_data}\n\n".encode()


def anthropic_stream(kind: str, *raw_pieces: str) -> bytes:
    if kind == "text":
        block, delta, field, stop = '{"type":"text","text":""}', "text_delta", "text", "end_turn"
    else:
        block = '{"type":"tool_use","id":"toolu_1","name":"run","input":{}}'
        delta, field, stop = "input_json_delta", "partial_json", "tool_use"
    start = _message("", "end_turn").replace('"stop_reason":"end_turn"', '"stop_reason":null')
    parts = [
        _event("message_start", '{"type":"message_start","message":' + start + "}"),
        _event(
            "content_block_start",
            '{"type":"content_block_start","index":0,"content_block":' + block + "}",
        ),
    ]
    parts += [
        _event(
            "content_block_delta",
            '{"type":"content_block_delta","index":0,"delta":'
            '{"type":"' + delta + '","' + field + '":"' + piece + '"}}',
        )
        for piece in raw_pieces
    ]
    parts += [
        _event("content_block_stop", '{"type":"content_block_stop","index":0}'),
        _event(
            "message_delta",
            '{"type":"message_delta","delta":{"stop_reason":"'
            + stop
            + '","stop_sequence":null},"usage":{"output_tokens":1}}',
        ),
        _event("message_stop", '{"type":"message_stop"}'),
    ]
    return b"".join(parts)


# -- what the client decodes


def decoded_stream(data: bytes) -> str:
    """Every string the client reads from an SSE body, decoded: each event's JSON, and each
    block's text and partial_json put together (the partial_json parsed as JSON)."""
    seen: list[str] = []
    texts: dict[int, list[str]] = {}
    jsons: dict[int, list[str]] = {}
    for line in data.decode().splitlines():
        if not line.startswith("data: "):
            continue
        event = orjson.loads(line[6:])
        seen.append(orjson.dumps(event).decode())
        delta = event.get("delta") if event.get("type") == "content_block_delta" else None
        if isinstance(delta, dict):
            if "text" in delta:
                texts.setdefault(event["index"], []).append(delta["text"])
            if "partial_json" in delta:
                jsons.setdefault(event["index"], []).append(delta["partial_json"])
    seen += ["".join(parts) for parts in texts.values()]
    seen += [orjson.dumps(orjson.loads("".join(parts))).decode() for parts in jsons.values()]
    return "\n".join(seen)


def decoded_body(body: Any) -> str:
    return orjson.dumps(body).decode()


# -- the library, both providers, sync and async


def _boot(provider: str, reply: Reply, asynchronous: bool) -> Any:
    boot = tpx.transport.aboot if asynchronous else tpx.transport.boot
    kwargs: dict[str, Any] = (
        {"api_key": TOKEN, "anthropic_base_url": ANTHROPIC_URL}
        if provider == "ANTHROPIC"
        else {"oauth_token": TOKEN, "tpx_base_url": TPX_URL}
    )
    return boot(env={}, transport=httpx2.MockTransport(reply), **kwargs)


def library_sees(provider: str, body: bytes, *, stream: bool, asynchronous: bool) -> str:
    """What a library caller decodes from a reply whose body is *body*."""
    content_type = "text/event-stream" if stream else "application/json"

    def reply(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(200, headers={"content-type": content_type}, content=body)

    if not asynchronous:
        with _boot(provider, reply, False) as transport:
            if stream:
                return decoded_stream(b"".join(transport.stream(REQUEST)))
            return decoded_body(transport.create(REQUEST))

    async def run() -> str:
        async with _boot(provider, reply, True) as transport:
            if stream:
                return decoded_stream(b"".join([part async for part in transport.stream(REQUEST)]))
            return decoded_body(await transport.create(REQUEST))

    return asyncio.run(run())


def _split_points(raw: str) -> list[int]:
    start = raw.index(slashed(TOKEN)[:4])
    return [start + k for k in (1, 2, 7, 8, 9, 20, 40, len(TOKEN) - 1)]


CASES: dict[str, tuple[str, bool, Callable[[], list[bytes]]]] = {
    # name: (provider, streamed, bodies)
    "tpx-text-slash": ("TPX", False, lambda: [openai_text("echo " + slashed(TOKEN))]),
    "tpx-text-slash-stream": ("TPX", True, lambda: [openai_text_stream("a " + slashed(TOKEN))]),
    "anthropic-text-slash": ("ANTHROPIC", False, lambda: [anthropic_text(slashed(TOKEN))]),
    "anthropic-text-slash-stream": (
        "ANTHROPIC",
        True,
        lambda: [anthropic_stream("text", "x" + slashed(TOKEN))],
    ),
    "tpx-arguments-escaped": (
        "TPX",
        False,
        lambda: [openai_tool(slashed('{"a":"') + slashed(escaped(TOKEN)) + slashed('"}'))],
    ),
    "tpx-arguments-escaped-stream": (
        "TPX",
        True,
        lambda: [openai_tool_stream(slashed('{"a":"'), slashed(escaped(TOKEN)), slashed('"}'))],
    ),
    "anthropic-input-escaped": (
        "ANTHROPIC",
        False,
        lambda: [anthropic_tool('{"a":"' + escaped(TOKEN) + '"}')],
    ),
    "anthropic-input-escaped-stream": (
        "ANTHROPIC",
        True,
        lambda: [
            anthropic_stream("tool", slashed('{"a":"'), slashed(escaped(TOKEN)), slashed('"}'))
        ],
    ),
    "tpx-text-split": (
        "TPX",
        True,
        lambda: [
            openai_text_stream(("say " + TOKEN)[:k], ("say " + TOKEN)[k:] + " ok")
            for k in _split_points("say " + TOKEN)
        ],
    ),
    "anthropic-text-split": (
        "ANTHROPIC",
        True,
        lambda: [
            anthropic_stream("text", ("say " + TOKEN)[:k], ("say " + TOKEN)[k:])
            for k in _split_points("say " + TOKEN)
        ],
    ),
    "tpx-arguments-split": (
        "TPX",
        True,
        lambda: [
            openai_tool_stream(
                slashed(('{"a":"' + TOKEN)[:k]), slashed(('{"a":"' + TOKEN)[k:] + '"}')
            )
            for k in _split_points('{"a":"' + TOKEN)
        ],
    ),
    "anthropic-input-split": (
        "ANTHROPIC",
        True,
        lambda: [
            anthropic_stream(
                "tool", slashed(('{"a":"' + TOKEN)[:k]), slashed(('{"a":"' + TOKEN)[k:] + '"}')
            )
            for k in _split_points('{"a":"' + TOKEN)
        ],
    ),
}


@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_no_spelling_of_the_token_reaches_a_library_caller(case: str, asynchronous: bool) -> None:
    provider, stream, bodies = CASES[case]
    for body in bodies():
        seen = library_sees(provider, body, stream=stream, asynchronous=asynchronous)
        assert TOKEN not in seen, (case, body)
        assert "[REDACTED]" in seen, (case, body)


def test_a_clean_stream_is_delivered_unchanged() -> None:
    """Nothing changes for a reply without a secret: the same text, the same tool input,
    whatever the deltas' boundaries (a delta's end that could begin the token is held
    back, then released)."""
    pieces = ["plain ", "text s", "k-pro", "ject done"]
    seen = library_sees("TPX", openai_text_stream(*pieces), stream=True, asynchronous=False)
    assert "plain text sk-project done" in seen
    arguments = [slashed('{"a":"s'), slashed('k-x\\u00e9"}')]
    seen = library_sees(
        "ANTHROPIC", anthropic_stream("tool", *arguments), stream=True, asynchronous=False
    )
    assert '{"a":"sk-x\u00e9"}' in seen


# -- the gateway: the same through tpx serve's core, and a token fetched after a 401


def gateway_sees(provider: str, reply: Reply, *, stream: bool, **changes: Any) -> str:
    settings = make_settings(provider, **changes)
    upstream = SyncUpstream(settings, transport=httpx2.MockTransport(reply))
    transport = GatewayTransport(Gateway(settings), upstream)
    with httpx2.Client(transport=transport, base_url="http://tpx.in-process") as client:
        body = {**REQUEST, "stream": True} if stream else REQUEST
        response = client.post("/v1/messages", json=body)
        data = response.read()
    if response.headers["content-type"].startswith("text/event-stream"):
        return decoded_stream(data)
    return decoded_body(orjson.loads(data))


@pytest.mark.parametrize("case", sorted(CASES))
def test_no_spelling_of_the_token_reaches_a_gateway_client(case: str) -> None:
    provider, stream, bodies = CASES[case]
    for body in bodies():
        content_type = "text/event-stream" if stream else "application/json"

        def reply(
            request: httpx2.Request, body: bytes = body, content_type: str = content_type
        ) -> httpx2.Response:
            return httpx2.Response(200, headers={"content-type": content_type}, content=body)

        seen = gateway_sees(provider, reply, stream=stream, credential=Credential(TOKEN))
        assert TOKEN not in seen, (case, body)


def _token_command(tmp_path: Path) -> Credential:
    counter = tmp_path / "n"
    script = tmp_path / "token.py"
    script.write_text(
        "import pathlib\n"
        f"p = pathlib.Path({str(counter)!r})\n"
        "n = int(p.read_text()) + 1 if p.exists() else 1\n"
        "p.write_text(str(n))\n"
        f"print({TOKEN!r} if n == 1 else {FRESH!r})\n"
    )
    return Credential.from_command(f"{sys.executable} {script}", ttl=300.0)


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
@pytest.mark.parametrize("status", [200, 500, 401])
def test_a_token_fetched_after_a_401_joins_the_scrubber(
    tmp_path: Path, status: int, stream: bool
) -> None:
    fresh = FRESH
    sent: list[str] = []

    def reply(request: httpx2.Request) -> httpx2.Response:
        sent.append(request.headers["authorization"])
        if request.headers["authorization"] == f"Bearer {TOKEN}":
            return httpx2.Response(401, json={"error": {"message": "expired"}})
        if status != 200:
            return httpx2.Response(status, json={"error": {"message": f"bad token {fresh}"}})
        if stream:
            body = openai_text_stream("your token: ", fresh[:20], fresh[20:])
            return httpx2.Response(200, headers={"content-type": "text/event-stream"}, content=body)
        return httpx2.Response(200, content=openai_text("your token: " + fresh))

    seen = gateway_sees("TPX", reply, stream=stream, credential=_token_command(tmp_path))
    assert sent == [f"Bearer {TOKEN}", f"Bearer {fresh}"]  # the refresh did happen
    assert fresh not in seen
    assert "[REDACTED]" in seen


# -- seeded bugs: each rule taken away, the checks above find the token


def _leaks(case: str) -> bool:
    provider, stream, bodies = CASES[case]
    return any(
        TOKEN in library_sees(provider, body, stream=stream, asynchronous=False)
        for body in bodies()
    )


def test_a_scrubber_that_reads_only_the_wire_spelling_is_caught(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The seeded bug: parsed values never looked at (only the bytes on the wire are
    searched): a ``\\/`` inside the token, escapes inside tool arguments slip through."""
    monkeypatch.setattr(tpx._scrub.Scrubber, "dirty", lambda self, value: False)
    assert _leaks("tpx-text-slash")
    assert _leaks("tpx-arguments-escaped")
    assert not _leaks("tpx-text-split")  # the hold-back works on the deltas still


def test_a_stream_without_the_hold_back_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """The seeded bug: deltas cleaned one by one, nothing held back at their boundaries."""
    monkeypatch.setattr(tpx._scrub.DeltaScrubber, "events", lambda self, produced: produced)
    assert _leaks("tpx-text-split")
    assert _leaks("anthropic-input-split")


def test_a_turn_that_keeps_its_first_scrubber_is_caught(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The seeded bug: the token fetched after a 401 not joining the request's scrubber."""
    monkeypatch.setattr(tpx.gateway.turn.Conversation, "join", lambda self, current: None)

    def reply(request: httpx2.Request) -> httpx2.Response:
        if request.headers["authorization"] == f"Bearer {TOKEN}":
            return httpx2.Response(401, json={"error": {"message": "expired"}})
        return httpx2.Response(200, content=openai_text("your token: " + FRESH))

    seen = gateway_sees("TPX", reply, stream=False, credential=_token_command(tmp_path))
    assert FRESH in seen
