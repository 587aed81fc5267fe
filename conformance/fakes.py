"""Fake providers and a fake caller for replaying spec behaviours through the real transport.

Abstract tool ids (the spec's ``ToolIds``, e.g. ``t1``) are *planted in content*, never
carried by the code under test's id mapping:

* every tool call the fake provider emits carries ``"probe": "tpx-abstract:<id>"`` in its
  ``input`` (Messages) / ``arguments`` (Chat Completions);
* the fake caller answers each tool_use it was handed with a tool_result whose content is
  ``"tpx-abstract:<id> ..."``, ``<id>`` read from that tool_use's input;
* foreign ids are chosen by the fake provider, which keeps its own table
  foreign id -> abstract id (:attr:`FakeProvider.table`); styles vary (OpenAI ``call_...``,
  Mistral-like 9 alphanumerics, ids with spaces, Anthropic ``toolu_...``) and are unique
  for the whole boot, so the table is unambiguous.

A fake provider answers in its native shape (:data:`MESSAGES` or :data:`OPENAI`) with any
chosen subset of abstract ids (:meth:`FakeProvider.plan_reply`) or injects a failure
(:meth:`FakeProvider.plan_fail`, one of :data:`FAILURE_KINDS`).

A request with ``"stream": true`` is answered in the provider's native *streaming* shape
(``text/event-stream``, served piece by piece; :data:`STREAM_LAYOUTS` varies how):

* MESSAGES: ``message_start``, ``ping``, a text block, one ``tool_use`` block per id whose
  ``input_json_delta`` fragments split the planted ``tpx-abstract:<id>`` across events,
  ``message_delta`` (stop reason, usage), ``message_stop``;
* OPENAI: Chat Completions chunks (``data: {...}``): role and text, tool-call fragments
  (id, name, then arguments split across chunks, the calls' fragments interleaved in some
  layouts), a ``finish_reason`` chunk, a usage chunk (``choices: []``), ``data: [DONE]``.

Streamed requests can fail in every way a plain one can (before the first byte) and
also mid-stream (:data:`MID_STREAM_FAILURE_KINDS`: the connection drops after some
chunks, an ``event: error``, a malformed chunk, the body ends before ``[DONE]`` /
``message_stop``); :data:`STREAM_FAILURE_KINDS` is all of them. The ids of a good stream
become :attr:`FakeProvider.emitted` just before its terminal event is served, and
:attr:`FakeProvider.served` is every byte of the last streamed body served so far. It
serves in-process
(:meth:`FakeProvider.handle`, an ``httpx2.MockTransport`` handler; :func:`mock_client`
routes by host) or on a real loopback socket (:class:`LoopbackServer`).
"""

from __future__ import annotations

import hashlib
import http.server
import itertools
import re
import socket
import ssl
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, Literal

import attrs
import httpx2
import orjson

from tpx import errors

__all__ = [
    "ANTHROPIC_URL",
    "EXPECTED_ERROR",
    "FAILURE_KINDS",
    "ID_STYLES",
    "KEY",
    "LOOPBACK_FAILURE_KINDS",
    "MARK",
    "MESSAGES",
    "MID_STREAM_FAILURE_KINDS",
    "OPENAI",
    "STREAM_FAILURE_KINDS",
    "STREAM_LAYOUTS",
    "TOKEN",
    "TPX_URL",
    "FailureKind",
    "FakeCaller",
    "FakeProvider",
    "LoopbackServer",
    "mock_client",
    "planted_id",
]

Shape = Literal["messages", "openai"]
MESSAGES: Shape = "messages"
OPENAI: Shape = "openai"

KEY = "sk-ant-api03-conformance-KEY"
TOKEN = "oauth-conformance-TOKEN"
ANTHROPIC_URL = "https://anthropic.fake.test"
TPX_URL = "https://tpx.fake.test/v1"

MARK = "tpx-abstract:"
_PLANTED = re.compile(re.escape(MARK) + r"([A-Za-z0-9_?-]+)")

FailureKind = Literal[
    "connect",
    "tls",
    "timeout",
    "http401",
    "http429",
    "http500",
    "http529",
    "non_json",
    "shape",
    "drop",
    "error_event",
    "malformed",
    "no_done",
]
#: Every failure a plain provider exchange can end in, in the order replays cycle through them.
FAILURE_KINDS: tuple[FailureKind, ...] = (
    "connect",
    "tls",
    "timeout",
    "http401",
    "http429",
    "http500",
    "http529",
    "non_json",
    "shape",
)
#: Failures in the middle of a streamed reply (streamed requests only): the connection
#: drops after some chunks, an ``event: error``, a malformed chunk, no ``[DONE]`` /
#: ``message_stop`` before the body ends.
MID_STREAM_FAILURE_KINDS: tuple[FailureKind, ...] = ("drop", "error_event", "malformed", "no_done")
#: Every failure a streamed exchange can end in.
STREAM_FAILURE_KINDS: tuple[FailureKind, ...] = FAILURE_KINDS + MID_STREAM_FAILURE_KINDS
#: The kinds a loopback socket can produce (``connect`` there is a reset without reply).
LOOPBACK_FAILURE_KINDS: tuple[FailureKind, ...] = (
    "connect",
    "http401",
    "http429",
    "http500",
    "http529",
    "non_json",
    "shape",
)
#: The ModelError each failure kind must surface as.
EXPECTED_ERROR: dict[FailureKind, type[errors.ModelError]] = {
    "connect": errors.NetworkError,
    "tls": errors.TLSError,
    "timeout": errors.TimeoutError,
    "http401": errors.UnauthorizedError,
    "http429": errors.RateLimitedError,
    "http500": errors.HTTPStatusError,
    "http529": errors.OverloadedError,
    "non_json": errors.ProtocolError,
    "shape": errors.ProtocolError,
    "drop": errors.NetworkError,
    "error_event": errors.OverloadedError,
    "malformed": errors.ProtocolError,
    "no_done": errors.ProtocolError,
}

#: How a streamed body is cut into the pieces the fake serves: one SSE event per piece,
#: pieces of 7 bytes (lines split anywhere, inside the planted marker too), everything
#: in one piece. Tool-call fragments of parallel calls are interleaved when the layout
#: index is odd (OPENAI).
STREAM_LAYOUTS: tuple[str, ...] = ("events", "bytes7", "whole")

IdStyle = Literal["openai", "mistral", "spaces", "anthropic"]
ID_STYLES: dict[Shape, tuple[IdStyle, ...]] = {
    MESSAGES: ("anthropic",),  # Messages ids must match ^[a-zA-Z0-9_-]+$
    OPENAI: ("openai", "mistral", "spaces"),
}

_ALNUM = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"


def planted_id(value: Any) -> str | None:
    """The abstract id planted in a tool input / arguments / tool_result content, if any."""
    if isinstance(value, bytes | bytearray):
        value = value.decode("utf-8", "replace")
    if not isinstance(value, str):
        value = orjson.dumps(value, default=str).decode()
    found = _PLANTED.findall(value)
    return found[0] if len(found) == 1 else ("?" if found else None)


def _alnum(seed: str, n: int) -> str:
    digest = hashlib.blake2b(seed.encode(), digest_size=32).digest()
    return "".join(_ALNUM[b % len(_ALNUM)] for b in digest[:n])


# --------------------------------------------------------------------------- providers


@attrs.define
class _Fault(Exception):
    """A transport-level failure to inject (no HTTP response)."""

    kind: FailureKind


@attrs.define
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes
    stream: Iterator[bytes] | None = None
    """a streamed body, served piece by piece (raises :class:`_Fault` for a dropped
    connection); ``body`` is then empty"""


_SSE_HEADERS = {"content-type": "text/event-stream; charset=utf-8", "cache-control": "no-cache"}


def _is_stream_request(body: bytes) -> bool:
    try:
        decoded = orjson.loads(body)
    except orjson.JSONDecodeError:
        return False
    return isinstance(decoded, dict) and decoded.get("stream") is True


@attrs.define(eq=False)
class FakeProvider:
    """A provider speaking *shape* natively; replies as planned, one plan per request.

    ``table`` maps every foreign id it ever emitted to its abstract id; ``emitted`` is the
    abstract ids of its last *good* reply (the spec's pre-translation truth) and
    ``good_reply`` that reply's bytes (a whole stream for a streamed one); ``received``
    every request body it got; ``served`` the bytes of the last streamed body served so
    far; ``layout`` picks the :data:`STREAM_LAYOUTS` entry (and interleaving) of streams.
    """

    shape: Shape
    id_style: IdStyle = "anthropic"
    reverse: bool = False
    layout: int = 0
    served: bytearray = attrs.field(factory=bytearray)
    table: dict[str, str] = attrs.field(factory=dict)
    received: list[bytes] = attrs.field(factory=list)
    received_headers: list[dict[str, str]] = attrs.field(factory=list)
    emitted: tuple[str, ...] = ()
    good_reply: bytes | None = None
    last_good: bool = False
    _plan: tuple[str, Any] | None = None
    _counter: int = 0

    def reset(
        self, *, id_style: IdStyle | None = None, reverse: bool = False, layout: int = 0
    ) -> None:
        """A new boot: forget everything."""
        if id_style is not None:
            if id_style not in ID_STYLES[self.shape]:
                raise ValueError(f"{id_style} ids are not valid for a {self.shape} provider")
            self.id_style = id_style
        self.reverse = reverse
        self.layout = layout
        self.served = bytearray()
        self.table = {}
        self.received = []
        self.received_headers = []
        self.emitted = ()
        self.good_reply = None
        self.last_good = False
        self._plan = None

    def plan_reply(self, ids: Sequence[str]) -> None:
        self._plan = ("reply", tuple(ids))

    def plan_fail(self, kind: FailureKind) -> None:
        if kind not in STREAM_FAILURE_KINDS:
            raise ValueError(f"unknown failure kind {kind!r}")
        self._plan = ("fail", kind)

    # -- ids and bodies ------------------------------------------------------------

    def _foreign_id(self) -> str:
        self._counter += 1
        seed = f"{self.shape}:{self._counter}"
        if self.id_style == "anthropic":
            return "toolu_" + _alnum(seed, 24)
        if self.id_style == "openai":
            return "call_" + _alnum(seed, 24)
        if self.id_style == "mistral":
            return _alnum(seed, 9)
        return f"call {self._counter} {_alnum(seed, 4)}"

    def native_reply(self, ids: Sequence[str]) -> bytes:
        """A good reply emitting *ids* (abstract) as tool calls; records them in the table."""
        calls = self._calls(ids)
        if self.shape == MESSAGES:
            return _messages_reply(calls)
        return _openai_reply(calls)

    def _calls(self, ids: Sequence[str]) -> list[tuple[str, str]]:
        calls = []
        for aid in reversed(ids) if self.reverse else ids:
            fid = self._foreign_id()
            self.table[fid] = aid
            calls.append((fid, aid))
        return calls

    def stream_events(self, ids: Sequence[str]) -> list[bytes]:
        """A good streamed reply emitting *ids* as tool calls: its SSE events, in order
        (the last one is the terminal event); records the ids in the table."""
        calls = self._calls(ids)
        if self.shape == MESSAGES:
            return _messages_stream(calls)
        return _openai_stream(calls, interleave=bool(self.layout % 2))

    def pieces(self, events: Sequence[bytes]) -> list[bytes]:
        """*events* cut into the pieces served (see :data:`STREAM_LAYOUTS`)."""
        layout = STREAM_LAYOUTS[self.layout % len(STREAM_LAYOUTS)]
        if layout == "events":
            return list(events)
        data = b"".join(events)
        if layout == "whole":
            return [data]
        return [data[i : i + 7] for i in range(0, len(data), 7)]

    def failing_stream(self, kind: FailureKind) -> tuple[list[bytes], FailureKind | None]:
        """The events of a stream failing as *kind* (a mid-stream kind) and the fault to
        raise after them (``drop``), from a stream that would have emitted t1 and t2."""
        events = self.stream_events(("t1", "t2"))
        half = len(events) // 2
        if kind == "drop":
            return events[: 2 * len(events) // 3], "drop"
        if kind == "error_event":
            error = {"type": "overloaded_error", "message": "fake overloaded mid-stream"}
            body = {"type": "error", "error": error} if self.shape == MESSAGES else {"error": error}
            return [*events[:half], _sse("error", body)], None
        if kind == "malformed":
            bad = (
                b'event: content_block_delta\ndata: {"type": "content_block_delta", "ind\n\n'
                if self.shape == MESSAGES
                else b'data: {"id": "chatcmpl-fake", "choices": [{"index": 0, "delta": {\n\n'
            )
            return [*events[:half], bad, *events[half:]], None
        if kind == "no_done":
            return events[:-1], None
        raise ValueError(f"{kind} is not a mid-stream failure")

    def _serve(
        self, pieces: Sequence[bytes], ids: tuple[str, ...] | None, fault: FailureKind | None
    ) -> Iterator[bytes]:
        """Serve *pieces*; a good stream's ids (*ids*) become ``emitted`` just before its
        terminal piece goes out; then raise *fault*, if any."""
        for i, piece in enumerate(pieces):
            if ids is not None and i == len(pieces) - 1:
                self.emitted = ids
                self.good_reply = b"".join(pieces)
                self.last_good = True
            self.served += piece
            yield piece
        if fault is not None:
            raise _Fault(fault)

    def error_body(self, status: int) -> bytes:
        kinds = {401: "authentication_error", 429: "rate_limit_error", 500: "api_error"}
        kind = kinds.get(status, "overloaded_error")
        if self.shape == MESSAGES:
            return orjson.dumps(
                {"type": "error", "error": {"type": kind, "message": "fake says no"}}
            )
        return orjson.dumps({"error": {"message": "fake says no", "type": kind, "code": status}})

    def answer(self, headers: Mapping[str, str], body: bytes) -> Answer:
        """The reply to one request (raises :class:`_Fault` for transport-level failures)."""
        self.received.append(body)
        self.received_headers.append({k.lower(): v for k, v in headers.items()})
        plan, self._plan = self._plan, None
        self.last_good = False
        streamed = _is_stream_request(body)
        self.served = bytearray()
        if plan is None:
            raise AssertionError("the fake provider was called without a plan")
        if plan[0] == "reply":
            if streamed:
                pieces = self.pieces(self.stream_events(plan[1]))
                return Answer(200, dict(_SSE_HEADERS), b"", self._serve(pieces, plan[1], None))
            reply = self.native_reply(plan[1])
            self.emitted = plan[1]
            self.good_reply = reply
            self.last_good = True
            return Answer(200, {"content-type": "application/json"}, reply)
        kind: FailureKind = plan[1]
        if kind in MID_STREAM_FAILURE_KINDS:
            if not streamed:
                raise AssertionError(f"a {kind} failure needs a streamed request")
            events, fault = self.failing_stream(kind)
            return Answer(
                200, dict(_SSE_HEADERS), b"", self._serve(self.pieces(events), None, fault)
            )
        if kind in ("connect", "tls", "timeout"):
            raise _Fault(kind)
        if kind.startswith("http"):
            status = int(kind[4:])
            extra = {"retry-after": "7"} if status in (429, 529) else {}
            return Answer(
                status, {"content-type": "application/json", **extra}, self.error_body(status)
            )
        if kind == "non_json":
            return Answer(200, {"content-type": "text/html"}, b"<html>upstream hiccup</html>")
        other = FakeProvider(OPENAI if self.shape == MESSAGES else MESSAGES)
        other.id_style = ID_STYLES[other.shape][0]
        if streamed:  # the other provider's stream
            pieces = self.pieces(other.stream_events(()))
            return Answer(200, dict(_SSE_HEADERS), b"", self._serve(pieces, None, None))
        return Answer(200, {"content-type": "application/json"}, other.native_reply(()))

    def handle(self, request: httpx2.Request) -> httpx2.Response:
        """``httpx2.MockTransport`` handler."""
        try:
            ans = self.answer(request.headers, request.read())
        except _Fault as fault:
            if fault.kind == "connect":
                raise httpx2.ConnectError(
                    "[Errno 111] Connection refused", request=request
                ) from None
            if fault.kind == "tls":
                cause = ssl.SSLCertVerificationError(1, "[SSL: CERTIFICATE_VERIFY_FAILED]")
                raise httpx2.ConnectError("TLS handshake failed", request=request) from cause
            raise httpx2.ReadTimeout("The read operation timed out", request=request) from None
        if ans.stream is not None:
            return httpx2.Response(ans.status, headers=ans.headers, stream=_Pieces(ans.stream))
        return httpx2.Response(ans.status, headers=ans.headers, content=ans.body)


class _Pieces(httpx2.SyncByteStream):
    """A streamed body for ``httpx2.MockTransport``: a dropped connection is a ReadError."""

    def __init__(self, pieces: Iterator[bytes]) -> None:
        self._pieces = pieces

    def __iter__(self) -> Iterator[bytes]:
        try:
            yield from self._pieces
        except _Fault:
            raise httpx2.ReadError("[Errno 104] Connection reset by peer") from None

    def close(self) -> None:
        close = getattr(self._pieces, "close", None)
        if close is not None:
            close()


def _sse(event: str | None, data: Any) -> bytes:
    payload = data if isinstance(data, str) else orjson.dumps(data).decode()
    return (f"event: {event}\n" if event else "").encode() + f"data: {payload}\n\n".encode()


def _split_arguments(aid: str) -> list[str]:
    """The tool arguments planting *aid*, in three fragments cut inside the marker."""
    text = orjson.dumps({"probe": MARK + aid}).decode()
    return [text[:7], text[7:18], text[18:]]


def _messages_stream(calls: Sequence[tuple[str, str]]) -> list[bytes]:
    message: dict[str, Any] = {
        "id": "msg_fake",
        "type": "message",
        "role": "assistant",
        "model": "claude-fake",
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {"input_tokens": 5, "output_tokens": 1},
    }
    events = [
        _sse("message_start", {"type": "message_start", "message": message}),
        _sse("ping", {"type": "ping"}),
        _sse(
            "content_block_start",
            {
                "type": "content_block_start",
                "index": 0,
                "content_block": {"type": "text", "text": ""},
            },
        ),
    ]
    for text in ("prob", "ing"):
        delta = {"type": "text_delta", "text": text}
        events.append(
            _sse("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": delta})
        )
    events.append(_sse("content_block_stop", {"type": "content_block_stop", "index": 0}))
    for index, (fid, aid) in enumerate(calls, start=1):
        block = {"type": "tool_use", "id": fid, "name": "probe", "input": {}}
        events.append(
            _sse(
                "content_block_start",
                {"type": "content_block_start", "index": index, "content_block": block},
            )
        )
        for part in _split_arguments(aid):
            delta = {"type": "input_json_delta", "partial_json": part}
            events.append(
                _sse(
                    "content_block_delta",
                    {"type": "content_block_delta", "index": index, "delta": delta},
                )
            )
        events.append(_sse("content_block_stop", {"type": "content_block_stop", "index": index}))
    events.append(
        _sse(
            "message_delta",
            {
                "type": "message_delta",
                "delta": {
                    "stop_reason": "tool_use" if calls else "end_turn",
                    "stop_sequence": None,
                },
                "usage": {"output_tokens": 3},
            },
        )
    )
    events.append(_sse("message_stop", {"type": "message_stop"}))
    return events


def _openai_stream(calls: Sequence[tuple[str, str]], *, interleave: bool) -> list[bytes]:
    def chunk(delta: dict[str, Any] | None, finish: str | None = None, **extra: Any) -> bytes:
        body: dict[str, Any] = {
            "id": "chatcmpl-fake",
            "object": "chat.completion.chunk",
            "created": 0,
            "model": "tpx-fake",
            "choices": []
            if delta is None
            else [{"index": 0, "delta": delta, "finish_reason": finish}],
            **extra,
        }
        return _sse(None, body)

    events = [chunk({"role": "assistant", "content": "prob"}), chunk({"content": "ing"})]
    per_call: list[list[dict[str, Any]]] = []
    for index, (fid, aid) in enumerate(calls):
        fragments: list[dict[str, Any]] = [
            {
                "index": index,
                "id": fid,
                "type": "function",
                "function": {"name": "probe", "arguments": ""},
            }
        ]
        fragments += [
            {"index": index, "function": {"arguments": part}} for part in _split_arguments(aid)
        ]
        per_call.append(fragments)
    if interleave:
        order = [f for group in itertools.zip_longest(*per_call) for f in group if f is not None]
    else:
        order = [f for fragments in per_call for f in fragments]
    events += [chunk({"tool_calls": [fragment]}) for fragment in order]
    events.append(chunk({}, "tool_calls" if calls else "stop"))
    usage = {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8}
    events.append(chunk(None, usage=usage))
    events.append(_sse(None, "[DONE]"))
    return events


def _messages_reply(calls: Sequence[tuple[str, str]]) -> bytes:
    content: list[dict[str, Any]] = [{"type": "text", "text": "probing"}]
    content += [
        {"type": "tool_use", "id": fid, "name": "probe", "input": {"probe": MARK + aid}}
        for fid, aid in calls
    ]
    return orjson.dumps(
        {
            "id": "msg_fake",
            "type": "message",
            "role": "assistant",
            "model": "claude-fake",
            "content": content,
            "stop_reason": "tool_use" if calls else "end_turn",
            "stop_sequence": None,
            "usage": {"input_tokens": 5, "output_tokens": 3},
        }
    )


def _openai_reply(calls: Sequence[tuple[str, str]]) -> bytes:
    message: dict[str, Any] = {"role": "assistant", "content": None if calls else "probing"}
    if calls:
        message["tool_calls"] = [
            {
                "id": fid,
                "type": "function",
                "function": {
                    "name": "probe",
                    "arguments": orjson.dumps({"probe": MARK + aid}).decode(),
                },
            }
            for fid, aid in calls
        ]
    return orjson.dumps(
        {
            "id": "chatcmpl-fake",
            "object": "chat.completion",
            "model": "tpx-fake",
            "choices": [
                {"index": 0, "message": message, "finish_reason": "tool_calls" if calls else "stop"}
            ],
            "usage": {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8},
        }
    )


def mock_client(anthropic: FakeProvider, tpx: FakeProvider) -> httpx2.Client:
    """One in-process client serving both fakes, routed by host."""
    hosts = {
        httpx2.URL(ANTHROPIC_URL).host: anthropic,
        httpx2.URL(TPX_URL).host: tpx,
    }

    def route(request: httpx2.Request) -> httpx2.Response:
        return hosts[request.url.host].handle(request)

    return httpx2.Client(transport=httpx2.MockTransport(route), timeout=5.0)


# --------------------------------------------------------------------------- loopback


class LoopbackServer:
    """A real HTTP server on 127.0.0.1 (ephemeral port, own thread) serving one fake.

    ``connect`` failures become a connection closed without a reply; ``tls`` and
    ``timeout`` cannot be produced here (see :data:`LOOPBACK_FAILURE_KINDS`). Streamed
    bodies go out in chunked encoding, one flushed HTTP chunk per piece; a ``drop`` closes
    the connection without the last chunk.
    """

    def __init__(self, fake: FakeProvider) -> None:
        self.fake = fake
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def setup(self) -> None:
                super().setup()
                # no Nagle: headers and body go out without waiting for a delayed ACK
                self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length", "0"))
                body = self.rfile.read(length)
                try:
                    ans = outer.fake.answer(dict(self.headers.items()), body)
                except _Fault:
                    self.close_connection = True
                    return  # no reply at all
                self.send_response(ans.status)
                for name, value in ans.headers.items():
                    self.send_header(name, value)
                if ans.stream is None:
                    self.send_header("content-length", str(len(ans.body)))
                    self.end_headers()
                    self.wfile.write(ans.body)
                    return
                self.send_header("transfer-encoding", "chunked")
                self.end_headers()
                try:
                    for piece in ans.stream:  # one HTTP chunk per piece, flushed
                        self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
                        self.wfile.flush()
                except _Fault:
                    self.close_connection = True
                    return  # cut off: no last chunk
                self.wfile.write(b"0\r\n\r\n")

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True
        )

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()

    @classmethod
    @contextmanager
    def serving(cls, fake: FakeProvider) -> Iterator[LoopbackServer]:
        server = cls(fake)
        server.start()
        try:
            yield server
        finally:
            server.stop()


# --------------------------------------------------------------------------- caller

AbortStyle = Literal["silent", "partial", "unknown", "duplicate"]
ABORT_STYLES: tuple[AbortStyle, ...] = ("silent", "partial", "unknown", "duplicate")


@attrs.define
class FakeCaller:
    """A Messages caller. It remembers the last body it was handed and answers its tool_uses.

    ``obligations`` are the tool_use blocks of the last delivered body (cleared when an
    exchange ends in an error); ``sent`` is the last request the transport accepted.
    """

    reverse_answers: bool = False
    obligations: list[dict[str, Any]] = attrs.field(factory=list)
    last_delivered: dict[str, Any] | None = None
    last_stream: bytes | None = None
    """the bytes of the last delivery when it was a stream (``None``: a plain body)"""
    sent: dict[str, Any] | None = None
    _turn: int = 0

    def reset(self, *, reverse_answers: bool = False) -> None:
        self.reverse_answers = reverse_answers
        self.obligations = []
        self.last_delivered = None
        self.last_stream = None
        self.sent = None
        self._turn = 0

    def _base(self, tail: list[dict[str, Any]]) -> dict[str, Any]:
        self._turn += 1
        messages: list[dict[str, Any]] = [
            {"role": "user", "content": [{"type": "text", "text": f"question {self._turn}"}]}
        ]
        if self.last_delivered is not None and self.obligations:
            messages.append({"role": "assistant", "content": self.last_delivered["content"]})
        messages += tail
        return {
            "model": "claude-fake",
            "max_tokens": 64,
            "system": "You are a conformance probe.",
            "tools": [
                {
                    "name": "probe",
                    "description": "Echo a probe.",
                    "input_schema": {"type": "object", "properties": {"probe": {"type": "string"}}},
                }
            ],
            "messages": messages,
        }

    @staticmethod
    def _result(tool_use_id: str, aid: str | None) -> dict[str, Any]:
        return {
            "type": "tool_result",
            "tool_use_id": tool_use_id,
            "content": f"{MARK}{aid if aid is not None else '?'} done",
        }

    def request(self) -> dict[str, Any]:
        """A request answering every obligation with exactly one tool_result (CallerSend)."""
        uses = list(reversed(self.obligations)) if self.reverse_answers else self.obligations
        results = [self._result(u["id"], planted_id(u.get("input"))) for u in uses]
        if not results:
            return self._base([])
        return self._base([{"role": "user", "content": results}])

    def bad_request(self, style: AbortStyle) -> dict[str, Any]:
        """A request whose tool_results do not answer the obligations (CallerAbort)."""
        uses = self.obligations
        results = [self._result(u["id"], planted_id(u.get("input"))) for u in uses]
        if style == "partial":
            results = results[1:]
        elif style == "unknown":
            results = [*results, self._result("toolu_not_pending_01", "x")]
        elif style == "duplicate" and results:
            results = [results[0], *results]
        elif style == "silent" or not results:
            results = []
        content: list[dict[str, Any]] = [*results, {"type": "text", "text": "cannot run tools"}]
        return self._base([{"role": "user", "content": content}])

    def accepted(self, request: dict[str, Any]) -> None:
        """The transport put *request* on the wire."""
        self.sent = request

    def delivered(self, body: dict[str, Any]) -> None:
        self.last_stream = None
        self._take(body)

    def delivered_stream(self, data: bytes, assembled: dict[str, Any] | None) -> None:
        """A streamed exchange completed: *data* the bytes received, *assembled* the
        message the caller assembled from them (``None``: not a Messages stream)."""
        self._take(assembled if assembled is not None else {})
        self.last_stream = data

    def _take(self, body: dict[str, Any]) -> None:
        self.last_delivered = body
        content = body.get("content")
        blocks = content if isinstance(content, list) else []
        self.obligations = [
            b for b in blocks if isinstance(b, dict) and b.get("type") == "tool_use"
        ]

    def failed(self) -> None:
        """The exchange ended in an error: nothing is pending any more."""
        self.obligations = []
