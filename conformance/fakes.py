"""Fake providers for replaying spec behaviours through the real transport (the fake
caller lives in :mod:`conformance.caller`, the wire shapes in :mod:`conformance.shapes`).

Abstract tool ids (the spec's ``ToolIds``, e.g. ``t1``) are *planted in content*, never
carried by the code under test's id mapping:

* every tool call the fake provider emits carries ``"probe": "tpx-abstract:<id>"`` in its
  ``input`` (Messages) / ``arguments`` (Chat Completions), or, when its arguments are
  empty, is named ``probe__<id>``;
* the fake caller answers each tool_use it was handed with a tool_result whose content is
  ``"tpx-abstract:<id> ..."``, ``<id>`` read from that tool_use;
* foreign ids are chosen by the fake provider, in every style the translator claims to
  handle (:data:`~conformance.shapes.ID_STYLES`: boot-unique ``call_...``, Mistral-like,
  with spaces; missing, null, empty, ``call_0`` in every response, one id shared by a
  response's calls; Anthropic ``toolu_...``). Since ids may repeat, the provider records
  every good reply (:attr:`FakeProvider.replies`: each call's foreign id in order) and the
  abstraction checks a request's ids against the reply each of its tool rounds answers.

A fake provider answers in its native shape (:data:`MESSAGES` or :data:`OPENAI`) with any
chosen subset of abstract ids (:meth:`FakeProvider.plan_reply`) or injects a failure
(:meth:`FakeProvider.plan_fail`, one of :data:`FAILURE_KINDS`). The reply's shape (stream
shape, thinking, empty first arguments, no ``finish_reason``, ``[DONE]`` without its blank
line, ...) is drawn per reply from a generator seeded per boot
(:meth:`FakeProvider.reset`, ``seed``); :attr:`FakeProvider.drawn` counts what was drawn.

A request with ``"stream": true`` is answered in the provider's native *streaming* shape
(``text/event-stream``, served piece by piece; :data:`STREAM_LAYOUTS` varies how).
Streamed requests can fail in every way a plain one can (before the first byte) and
also mid-stream (:data:`MID_STREAM_FAILURE_KINDS`: the connection drops after some
chunks, an ``event: error``, a malformed chunk, the body ends before ``[DONE]`` /
``message_stop``, the caller closes the stream early); :data:`STREAM_FAILURE_KINDS` is
all of them. A good stream's reply is recorded just before its terminal event is served,
and :attr:`FakeProvider.served` is every byte of the last streamed body served so far. It
serves in-process (:meth:`FakeProvider.handle`, an ``httpx2.MockTransport`` handler;
:func:`mock_client` routes by host) or on a real loopback socket (:class:`LoopbackServer`).
"""

from __future__ import annotations

import http.server
import itertools
import random
import socket
import ssl
import threading
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, Literal

import attrs
import httpx2
import orjson

from conformance.caller import ABORT_STYLES, AbortStyle, FakeCaller
from conformance.shapes import (
    ID_STYLES,
    MARK,
    MESSAGES,
    OPENAI,
    IdStyle,
    Reply,
    Shape,
    bad_reply,
    draw_reply,
    messages_reply,
    messages_stream,
    openai_reply,
    openai_stream,
    planted_call_id,
    planted_id,
    sse,
)
from tpx import errors

__all__ = [
    "ABORT_STYLES",
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
    "AbortStyle",
    "FailureKind",
    "FakeCaller",
    "FakeProvider",
    "LoopbackServer",
    "mock_client",
    "planted_call_id",
    "planted_id",
]


KEY = "sk-ant-api03-conformance-KEY"
TOKEN = "oauth-conformance-TOKEN"
ANTHROPIC_URL = "https://anthropic.fake.test"
TPX_URL = "https://tpx.fake.test/v1"


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
    "bad_tool_call",
    "drop",
    "error_event",
    "malformed",
    "no_done",
    "caller_close",
    "bad_delta",
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
    "bad_tool_call",
)
#: Failures in the middle of a streamed reply (streamed requests only): the connection
#: drops after some chunks, an ``event: error``, a malformed chunk, no ``[DONE]`` /
#: ``message_stop`` before the body ends, the caller closes the stream before
#: ``message_stop`` (a whole good stream was served; ProviderFail all the same).
MID_STREAM_FAILURE_KINDS: tuple[FailureKind, ...] = (
    "drop",
    "error_event",
    "malformed",
    "no_done",
    "caller_close",
    "bad_delta",
)
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
    "bad_tool_call": errors.ProtocolError,
    "drop": errors.NetworkError,
    "error_event": errors.OverloadedError,
    "malformed": errors.ProtocolError,
    "no_done": errors.ProtocolError,
    "caller_close": errors.NetworkError,
    "bad_delta": errors.ProtocolError,
}

#: How a streamed body is cut into the pieces the fake serves: one SSE event per piece,
#: pieces of 7 bytes (lines split anywhere, inside the planted marker too), everything
#: in one piece. Tool-call fragments of parallel calls are interleaved when the layout
#: index is odd (OPENAI).
STREAM_LAYOUTS: tuple[str, ...] = ("events", "bytes7", "whole")

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

    ``replies`` is every good reply it served, in order (:class:`~conformance.shapes.Reply`:
    calls with their foreign ids as emitted, the stop reason the caller must be handed);
    ``emitted`` is the abstract ids of its last *good* reply (the spec's pre-translation
    truth) and ``good_reply`` that reply's bytes (a whole stream for a streamed one);
    ``table`` maps foreign ids to abstract ids (last write wins: only unambiguous for the
    boot-unique styles); ``received`` / ``received_headers`` every request it got;
    ``served`` the bytes of the last streamed body served so far; ``layout`` picks the
    :data:`STREAM_LAYOUTS` entry of streams; ``seed`` seeds the shapes drawn per reply
    (:func:`~conformance.shapes.draw_reply`), ``drawn`` counts what was drawn.
    """

    shape: Shape
    id_style: IdStyle = "anthropic"
    reverse: bool = False
    layout: int = 0
    seed: int = 0
    served: bytearray = attrs.field(factory=bytearray)
    table: dict[str, str] = attrs.field(factory=dict)
    received: list[bytes] = attrs.field(factory=list)
    received_headers: list[dict[str, str]] = attrs.field(factory=list)
    emitted: tuple[str, ...] = ()
    replies: list[Reply] = attrs.field(factory=list)
    good_reply: bytes | None = None
    last_good: bool = False
    drawn: Counter[str] = attrs.field(factory=Counter)
    _plan: tuple[str, Any] | None = None
    _counter: itertools.count[int] = attrs.field(factory=lambda: itertools.count(1))
    _rng: random.Random = attrs.field(factory=random.Random)

    def __attrs_post_init__(self) -> None:
        if self.id_style not in ID_STYLES[self.shape]:
            self.id_style = ID_STYLES[self.shape][0]
        self._rng.seed(f"{self.shape}:{self.seed}")

    def reset(
        self,
        *,
        id_style: IdStyle | None = None,
        reverse: bool = False,
        layout: int = 0,
        seed: int = 0,
    ) -> None:
        """A new boot: forget everything."""
        if id_style is not None:
            if id_style not in ID_STYLES[self.shape]:
                raise ValueError(f"{id_style} ids are not valid for a {self.shape} provider")
            self.id_style = id_style
        self.reverse = reverse
        self.layout = layout
        self.seed = seed
        self._rng.seed(f"{self.shape}:{seed}")
        self.served = bytearray()
        self.table = {}
        self.received = []
        self.received_headers = []
        self.emitted = ()
        self.replies = []
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

    def draw(self, ids: Sequence[str], *, streamed: bool) -> Reply:
        """A reply emitting *ids* (abstract), its shape drawn; records the ids in the table."""
        reply = draw_reply(
            self._rng,
            self.shape,
            self.id_style,
            list(reversed(ids)) if self.reverse else list(ids),
            streamed=streamed,
            counter=self._counter,
        )
        for call in reply.calls:
            if call.foreign is not None:
                self.table[call.foreign] = call.aid
        self.drawn[f"shape:{reply.shape}"] += 1
        for flag in reply.flags:
            self.drawn[f"flag:{flag}"] += 1
        return reply

    def native_reply(self, ids: Sequence[str]) -> bytes:
        """A good reply emitting *ids* (abstract) as tool calls; records them in the table."""
        return self.body_of(self.draw(ids, streamed=False))

    def body_of(self, reply: Reply) -> bytes:
        return messages_reply(reply) if self.shape == MESSAGES else openai_reply(reply)

    def events_of(self, reply: Reply) -> list[bytes]:
        return messages_stream(reply) if self.shape == MESSAGES else openai_stream(reply)

    def stream_events(self, ids: Sequence[str]) -> list[bytes]:
        """A good streamed reply emitting *ids* as tool calls: its SSE events, in order
        (the last one is the terminal event); records the ids in the table."""
        return self.events_of(self.draw(ids, streamed=True))

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
        reply = self.draw(("t1", "t2"), streamed=True)
        if kind == "bad_delta":  # it needs a finish_reason to put a fragment after
            reply = attrs.evolve(reply, flags=reply.flags - {"no_finish"})
        events = self.events_of(reply)
        half = len(events) // 2
        if kind == "drop":
            return events[: 2 * len(events) // 3], "drop"
        if kind == "error_event":
            error = {"type": "overloaded_error", "message": "fake overloaded mid-stream"}
            body = {"type": "error", "error": error} if self.shape == MESSAGES else {"error": error}
            return [*events[:half], sse("error", body)], None
        if kind == "malformed":
            bad = (
                b'event: content_block_delta\ndata: {"type": "content_block_delta", "ind\n\n'
                if self.shape == MESSAGES
                else b'data: {"id": "chatcmpl-fake", "choices": [{"index": 0, "delta": {\n\n'
            )
            return [*events[:half], bad, *events[half:]], None
        if kind == "no_done":
            return events[:-1], None
        if kind == "caller_close":  # a whole good stream: the caller stops reading early
            return events, None
        if kind == "bad_delta":  # a delta of the wrong kind / a fragment after finish_reason
            if self.shape == MESSAGES and self._rng.random() < 0.5:  # an unspeakable type
                at = 0
                bad = sse(None, {"type": "ping\nevent: message_stop"})
            elif self.shape == MESSAGES:  # a delta the first block's type does not take
                at = next(i for i, e in enumerate(events) if b"content_block_start" in e)
                delta = (
                    {"type": "input_json_delta", "partial_json": "{}"}
                    if b'"content_block":{"type":"text"' in events[at]
                    else {"type": "text_delta", "text": "x"}
                )
                bad = sse(
                    "content_block_delta",
                    {"type": "content_block_delta", "index": 0, "delta": delta},
                )
            else:
                at = next(i for i, e in enumerate(events) if b'"finish_reason":"' in e)
                chunk = {
                    "id": "chatcmpl-fake",
                    "object": "chat.completion.chunk",
                    "choices": [
                        {
                            "index": 0,
                            "delta": {"tool_calls": [{"index": 0, "function": {"arguments": "x"}}]},
                            "finish_reason": None,
                        }
                    ],
                }
                bad = sse(None, chunk)
            return [*events[: at + 1], bad, *events[at + 1 :]], None
        raise ValueError(f"{kind} is not a mid-stream failure")

    def _serve(
        self, pieces: Sequence[bytes], reply: Reply | None, fault: FailureKind | None
    ) -> Iterator[bytes]:
        """Serve *pieces*; a good stream's *reply* is recorded (its ids become
        ``emitted``) just before its terminal piece goes out; then raise *fault*, if any."""
        for i, piece in enumerate(pieces):
            if reply is not None and i == len(pieces) - 1:
                self._good(reply, b"".join(pieces))
            self.served += piece
            yield piece
        if fault is not None:
            raise _Fault(fault)

    def _good(self, reply: Reply, body: bytes) -> None:
        self.emitted = tuple(c.aid for c in reply.calls)
        self.replies.append(reply)
        self.good_reply = body
        self.last_good = True

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
            reply = self.draw(plan[1], streamed=streamed)
            if streamed:
                pieces = self.pieces(self.events_of(reply))
                return Answer(200, dict(_SSE_HEADERS), b"", self._serve(pieces, reply, None))
            data = self.body_of(reply)
            self._good(reply, data)
            return Answer(200, {"content-type": "application/json"}, data)
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
        if kind == "bad_tool_call":  # a reply in the provider's own shape, refused
            reply = bad_reply(self.shape, self._counter, streamed=streamed)
            if streamed:
                pieces = self.pieces(self.events_of(reply))
                return Answer(200, dict(_SSE_HEADERS), b"", self._serve(pieces, None, None))
            return Answer(200, {"content-type": "application/json"}, self.body_of(reply))
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
