"""Scripted OpenAI-compatible upstreams for the HTTP failover replay: several named
loopback HTTP/1.1 servers on plain asyncio streams, each request held until the replay
says what its upstream does with it.

A request belongs to the conversation whose tag ``[conv:KEY]`` its body carries; each
arrival (:class:`Arrival`) is queued for that conversation, whichever upstream got it, and
its upstream then does what the replay scripts, one :class:`Act` at a time:

* ``refuse`` -- a status (429, 529, 5xx or a 4xx) with an OpenAI error body, and a
  ``retry-after`` when given; the request was not taken;
* ``take`` -- ``200`` headers (an event stream or chunked JSON), the body held back: the
  upstream took the request and is generating;
* ``first`` -- a streamed reply's first event; ``reply`` -- the rest of the reply, complete;
* ``fail`` -- a reply that went wrong after it was taken: an error event ending a stream,
  a JSON body that is not a completion;
* ``drop`` -- the connection closed at once, the request read and nothing answered (a
  connection lost after the request was written);
* ``hold`` (no act) -- nothing; the gateway may close it (its client left, its timeout).

``GET /v1/models`` is the recovery probe: refused with ``503`` unless the replay allowed
that upstream one healthy answer (:meth:`ScriptedUpstream.allow_probe`).

Everything an upstream saw is kept on its arrivals (what it answered, whether the
gateway closed the request first), so the replay's abstraction reads the upstream side
from here alone.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import re
from typing import Any

import attrs
import orjson

__all__ = ["Act", "Arrival", "PoolUpstreams", "ScriptedUpstream"]

_TAG = re.compile(rb"\[conv:([A-Za-z0-9]+)\]")
_ERROR = orjson.dumps({"error": {"message": "scripted", "type": "server_error"}})


def _chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
    body = {
        "id": "chatcmpl-f",
        "object": "chat.completion.chunk",
        "created": 0,
        "model": "m",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    return b"data: " + orjson.dumps(body) + b"\n\n"


FIRST_EVENT = _chunk({"role": "assistant", "content": "reply"})
REST_EVENTS = _chunk({"content": " done"}) + _chunk({}, "stop") + b"data: [DONE]\n\n"
ERROR_EVENT = b"data: " + _ERROR + b"\n\n"
COMPLETION = orjson.dumps(
    {
        "id": "chatcmpl-f",
        "object": "chat.completion",
        "created": 0,
        "model": "m",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "reply done"},
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5},
    }
)


@attrs.frozen
class Act:
    """What an upstream does next with a held request (module doc)."""

    kind: str
    status: int = 0
    retry_after: str | None = None


@attrs.define(eq=False)
class Arrival:
    """One request an upstream got, and what became of it."""

    upstream: str
    key: str
    seq: int
    stream: bool
    acts: asyncio.Queue[Act] = attrs.field(factory=asyncio.Queue)
    #: what it answered: a status (``refuse``, ``take``), ``drop``, or None (nothing yet)
    status: int | None = None
    retry_after: str | None = None
    dropped: bool = False
    first: bool = False  #: a streamed reply's first event went out
    complete: bool = False  #: the whole reply went out
    failed: bool = False  #: a taken reply went wrong (``fail``)
    closed: bool = False  #: the gateway closed the request first
    done: asyncio.Event = attrs.field(factory=asyncio.Event)
    #: set after each act is carried out
    acted: asyncio.Event = attrs.field(factory=asyncio.Event)

    @property
    def taken(self) -> bool:
        """The upstream took it: 200 headers went out, or it was read and dropped."""
        return self.status == 200 or self.dropped

    @property
    def open(self) -> bool:
        return not self.done.is_set()


class ScriptedUpstream:
    """One named upstream: a listening socket and its requests."""

    def __init__(self, name: str, pool: PoolUpstreams) -> None:
        self.name = name
        self.pool = pool
        self.probes_ok = 0  #: healthy probe answers allowed
        self.probed = asyncio.Event()  #: set when a healthy probe answer went out
        self.probes = 0
        self._server: asyncio.Server | None = None
        self.port = 0

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def allow_probe(self) -> asyncio.Event:
        """The next probe is answered healthy; the event is set once it was."""
        self.probes_ok += 1
        self.probed = asyncio.Event()
        return self.probed

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 5)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                method, path, _ = lines[0].split(" ", 2)
                headers = {
                    k.strip().lower(): v.strip()
                    for k, _, v in (line.partition(":") for line in lines[1:] if line)
                }
                body = await reader.readexactly(int(headers.get("content-length", "0")))
                if method == "GET":
                    if not await self._probe(writer):
                        return
                    continue
                if not await self._request(path, body, reader, writer):
                    return
        except (
            asyncio.IncompleteReadError,
            ConnectionError,
            ValueError,
            asyncio.LimitOverrunError,
        ):
            pass
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _probe(self, writer: asyncio.StreamWriter) -> bool:
        self.probes += 1
        if self.probes_ok > 0:
            self.probes_ok -= 1
            await _respond(writer, 200, b'{"object": "list", "data": [{"id": "m"}]}')
            self.probed.set()
        else:
            await _respond(writer, 503, _ERROR)
        return True

    async def _request(
        self, path: str, body: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> bool:
        """Serve one POST; whether the connection stays open."""
        match = _TAG.search(body)
        if match is None:
            self.pool.strays.append(body)
            await _respond(writer, 400, _ERROR)
            return True
        try:
            stream = orjson.loads(body).get("stream") is True
        except orjson.JSONDecodeError:
            stream = False
        ex = Arrival(self.name, match.group(1).decode(), next(self.pool.seq), stream)
        self.pool.arrived(ex)
        gone = asyncio.ensure_future(reader.read(1))  # b"": the gateway closed it
        try:
            return await self._script(ex, writer, gone)
        finally:
            gone.cancel()
            with contextlib.suppress(BaseException):
                await gone
            ex.done.set()
            ex.acted.set()

    async def _script(
        self, ex: Arrival, writer: asyncio.StreamWriter, gone: asyncio.Future[bytes]
    ) -> bool:
        while True:
            act_wait = asyncio.ensure_future(ex.acts.get())
            waits: set[asyncio.Future[Any]] = {act_wait, gone}
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
            if not act_wait.done():
                act_wait.cancel()
                ex.closed = True
                return False
            act = act_wait.result()
            keep = await self._act(ex, act, writer)
            ex.acted.set()
            if keep is not None:
                return keep

    async def _act(self, ex: Arrival, act: Act, writer: asyncio.StreamWriter) -> bool | None:
        """Carry *act* out; ``None``: the request goes on, else whether the connection stays."""
        if act.kind == "refuse":
            ex.status, ex.retry_after = act.status, act.retry_after
            extra = {} if act.retry_after is None else {"retry-after": act.retry_after}
            await _respond(writer, act.status, _ERROR, extra)
            return True
        if act.kind == "drop":
            ex.dropped = True
            return False
        if act.kind == "take":
            ex.status = 200
            kind = b"text/event-stream" if ex.stream else b"application/json"
            writer.write(
                b"HTTP/1.1 200 OK\r\ncontent-type: " + kind + b"\r\n"
                b"transfer-encoding: chunked\r\n\r\n"
            )
            await writer.drain()
            return None
        if act.kind == "first":
            ex.first = True
            await _body_chunk(writer, FIRST_EVENT)
            return None
        if act.kind == "reply":
            data = (b"" if ex.first else FIRST_EVENT) + REST_EVENTS if ex.stream else COMPLETION
            await _body_chunk(writer, data)
            await _body_chunk(writer, b"")
            ex.complete = True
            return True
        if act.kind == "fail":
            ex.failed = True
            await _body_chunk(writer, ERROR_EVENT if ex.stream else b"<html>not a reply</html>")
            await _body_chunk(writer, b"")
            return True
        raise ValueError(f"no act {act.kind!r}")


async def _respond(
    writer: asyncio.StreamWriter, status: int, body: bytes, extra: dict[str, str] | None = None
) -> None:
    head = f"HTTP/1.1 {status} X\r\ncontent-type: application/json\r\n"
    head += f"content-length: {len(body)}\r\n"
    for k, v in (extra or {}).items():
        head += f"{k}: {v}\r\n"
    writer.write(head.encode() + b"\r\n" + body)
    await writer.drain()


async def _body_chunk(writer: asyncio.StreamWriter, data: bytes) -> None:
    writer.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
    await writer.drain()


class PoolUpstreams:
    """The named upstreams of one replay (start them on its event loop)."""

    def __init__(self, names: tuple[str, ...]) -> None:
        self.seq = itertools.count(1)
        self.strays: list[bytes] = []
        self.upstreams = {n: ScriptedUpstream(n, self) for n in names}
        self._queues: dict[str, asyncio.Queue[Arrival]] = {}
        #: every arrival, per conversation key, in order
        self.arrivals: dict[str, list[Arrival]] = {}

    async def start(self) -> None:
        for u in self.upstreams.values():
            await u.start()

    async def close(self) -> None:
        for u in self.upstreams.values():
            await u.close()

    def queue(self, key: str) -> asyncio.Queue[Arrival]:
        q = self._queues.get(key)
        if q is None:
            q = self._queues[key] = asyncio.Queue()
        return q

    def arrived(self, ex: Arrival) -> None:
        self.arrivals.setdefault(ex.key, []).append(ex)
        self.queue(ex.key).put_nowait(ex)

    def forget(self, key: str) -> None:
        self._queues.pop(key, None)
        self.arrivals.pop(key, None)
