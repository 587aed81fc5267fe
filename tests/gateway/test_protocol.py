"""The server protocol's coalescing transport: one socket write per loop iteration."""

from __future__ import annotations

import asyncio
import socket
from typing import Any

import httpx2
import orjson

from tpx.gateway.asgi import create_app
from tpx.gateway.protocol import CoalescingTransport

from .conftest import make_settings, serving
from .fakes import FakeUpstream


class RecordingTransport:
    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.closed = False
        self.aborted = False

    def write(self, data: bytes) -> None:
        self.writes.append(data)

    def is_closing(self) -> bool:
        return self.closed or self.aborted

    def close(self) -> None:
        self.closed = True

    def abort(self) -> None:
        self.aborted = True

    def get_write_buffer_size(self) -> int:
        return 7

    def get_extra_info(self, name: str) -> Any:
        return ("127.0.0.1", 1) if name == "peername" else None


def test_writes_of_one_iteration_go_out_as_one() -> None:
    async def scenario() -> RecordingTransport:
        raw = RecordingTransport()
        transport = CoalescingTransport(raw, asyncio.get_running_loop())
        transport.write(b"HTTP/1.1 200 OK\r\n\r\n")
        transport.write(bytearray(b"body"))
        transport.write(b"")
        assert raw.writes == []  # nothing yet: the iteration is not over
        assert transport.get_write_buffer_size() == 7 + 23
        await asyncio.sleep(0)
        assert raw.writes == [b"HTTP/1.1 200 OK\r\n\r\nbody"]
        transport.write(b"event: ping\n\n")  # a later event: its own write
        await asyncio.sleep(0)
        assert raw.writes[-1] == b"event: ping\n\n"
        transport.write(b"last")
        transport.close()  # close flushes first
        assert raw.writes[-1] == b"last"
        assert raw.closed
        assert transport.get_extra_info("peername") == ("127.0.0.1", 1)  # delegated
        return raw

    asyncio.run(scenario())


def test_abort_drops_what_was_not_written() -> None:
    async def scenario() -> None:
        raw = RecordingTransport()
        transport = CoalescingTransport(raw, asyncio.get_running_loop())
        transport.write(b"partial")
        transport.abort()
        await asyncio.sleep(0)
        assert raw.writes == []
        assert raw.aborted

    asyncio.run(scenario())


def test_a_reply_arrives_whole_over_a_socket() -> None:
    """Status line, headers and body in the first read (one segment on loopback)."""
    settings = make_settings("TPX")
    fake = FakeUpstream("TPX")
    app = create_app(settings, transport=fake.transport())
    with serving(app) as url:
        host, port = url.removeprefix("http://").split(":")
        body = orjson.dumps(
            {"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": "one"}]}
        )
        request = (
            f"POST /v1/messages HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
            f"content-length: {len(body)}\r\n\r\n"
        ).encode() + body
        with socket.create_connection((host, int(port)), timeout=30) as sock:
            sock.sendall(request)
            first = sock.recv(1 << 20)
        head, _, rest = first.partition(b"\r\n\r\n")
        length = int(
            next(
                line.split(b":")[1]
                for line in head.split(b"\r\n")
                if line.lower().startswith(b"content-length:")
            )
        )
        assert head.startswith(b"HTTP/1.1 200")
        assert len(rest) == length
        assert orjson.loads(rest)["stop_reason"] == "tool_use"
        # and over HTTP as usual
        assert httpx2.get(url + "/healthz").json() == {"status": "ok"}
