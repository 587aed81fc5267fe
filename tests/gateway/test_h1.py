"""tpx.gateway.h1: httpx2 over tpx's HTTP/1.1 transport, against real loopback servers
(a scripted raw server for what a real one would not do, uvicorn for a real one)."""

from __future__ import annotations

import asyncio
import gzip
import socket
import ssl
from collections.abc import AsyncIterator, Callable, Coroutine
from pathlib import Path
from typing import Any

import httpx2
import pytest
import uvicorn
import uvloop

from tpx.gateway.h1 import H1Transport, fast_transport_allowed
from tpx.gateway.upstream import AsyncUpstream

from .conftest import make_settings, request_body
from .test_netio import _certificate

RUNNERS: dict[str, Callable[[Coroutine[Any, Any, Any]], Any]] = {
    "asyncio": asyncio.run,
    "uvloop": uvloop.run,
}

Script = Callable[
    [asyncio.StreamReader, asyncio.StreamWriter, bytes, bytes], Coroutine[Any, Any, bool]
]


class Raw:
    """A scripted HTTP/1.1 server: reads each request (head and content-length body) and
    lets *script* answer it (it returns whether the connection stays open)."""

    def __init__(self, script: Script) -> None:
        self.script = script
        self.peers: list[Any] = []
        self.port = 0
        self.heads: list[bytes] = []

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                self.peers.append(writer.get_extra_info("peername"))
                self.heads.append(head)
                size = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        size = int(line.split(b":", 1)[1])
                body = await reader.readexactly(size)
                if not await self.script(reader, writer, head, body):
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    async def start(self, tls: ssl.SSLContext | None = None) -> asyncio.Server:
        server = await asyncio.start_server(self.handle, "127.0.0.1", 0, ssl=tls)
        self.port = server.sockets[0].getsockname()[1]
        return server

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/"


async def _echo_size(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, head: bytes, body: bytes
) -> bool:
    answer = str(len(body)).encode()
    writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n%s" % (len(answer), answer))
    await writer.drain()
    return True


def _client(
    timeout: float = 10, limits: httpx2.Limits | None = None, verify: Any = True
) -> httpx2.AsyncClient:
    return httpx2.AsyncClient(transport=H1Transport(limits=limits, verify=verify), timeout=timeout)


@pytest.mark.parametrize("loop", sorted(RUNNERS))
def test_round_trips_reuse_one_connection(loop: str) -> None:
    server = Raw(_echo_size)

    async def main() -> list[str]:
        async with await server.start(), _client() as client:
            sizes = [0, 10, 300_000, 5_000_000]  # the last one pauses writing (drain)
            replies = [await client.post(server.url, content=b"x" * n) for n in sizes]
            assert {r.reason_phrase for r in replies} == {"OK"}
            return [r.text for r in replies] + [(await client.get(server.url)).text]

    assert RUNNERS[loop](main()) == ["0", "10", "300000", "5000000", "0"]
    assert len(set(server.peers)) == 1


@pytest.mark.parametrize("loop", sorted(RUNNERS))
def test_a_connection_the_server_closed_is_not_reused(loop: str) -> None:
    async def once(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter, head: bytes, body: bytes
    ) -> bool:
        await _echo_size(reader, writer, head, body)
        return False  # closes without saying so

    server = Raw(once)

    async def main() -> list[int]:
        async with await server.start(), _client() as client:
            codes = []
            transport = client._transport
            assert isinstance(transport, H1Transport)
            for _ in range(3):
                codes.append((await client.post(server.url, content=b"abc")).status_code)
                while any(not c.closed for idle in transport._idle.values() for c in idle):
                    await asyncio.sleep(0.005)  # until the close reached the idle connection
            return codes

    assert RUNNERS[loop](main()) == [200, 200, 200]
    assert len(set(server.peers)) == 3


@pytest.mark.parametrize("loop", sorted(RUNNERS))
def test_connection_close_and_bodies_to_the_end_of_the_connection(loop: str) -> None:
    async def answer(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter, head: bytes, body: bytes
    ) -> bool:
        if b"eof" in head:  # neither content-length nor chunked: the body ends with the close
            writer.write(b"HTTP/1.1 200 OK\r\nconnection: close\r\n\r\nto the very end")
        else:
            writer.write(b"HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: 2\r\n\r\nok")
        await writer.drain()
        return False

    server = Raw(answer)

    async def main() -> list[str]:
        async with await server.start(), _client() as client:
            return [
                (await client.get(server.url + "eof")).text,
                (await client.get(server.url)).text,
                (await client.get(server.url + "eof")).text,
            ]

    assert RUNNERS[loop](main()) == ["to the very end", "ok", "to the very end"]
    assert len(set(server.peers)) == 3


@pytest.mark.parametrize("loop", sorted(RUNNERS))
def test_a_chunked_body_streams_as_it_arrives(loop: str) -> None:
    """The first chunk reaches the caller while the server still holds the rest back."""
    release = asyncio.Event()
    got_first: list[bytes] = []

    async def stream(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter, head: bytes, body: bytes
    ) -> bool:
        writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nfirst\r\n")
        await writer.drain()
        await release.wait()
        writer.write(b"6\r\nsecond\r\n0\r\n\r\n")
        await writer.drain()
        return True

    server = Raw(stream)

    async def main() -> tuple[list[bytes], str]:
        nonlocal release
        release = asyncio.Event()
        async with await server.start(), _client() as client:
            async with client.stream("GET", server.url) as response:
                parts = []
                async for part in response.aiter_raw():
                    parts.append(part)
                    if part == b"first":
                        got_first.append(part)
                        release.set()
            again = (await client.get(server.url)).text  # the connection went back
            return parts, again

    parts, again = RUNNERS[loop](main())
    assert parts == [b"first", b"second"]
    assert got_first == [b"first"]
    assert again == "firstsecond"
    assert len(set(server.peers)) == 1


@pytest.mark.parametrize("loop", sorted(RUNNERS))
def test_errors_are_httpx2_errors(loop: str) -> None:
    async def silent(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter, head: bytes, body: bytes
    ) -> bool:
        if b"garbage" in head:
            writer.write(b"NOT HTTP AT ALL\r\n\r\n")
        elif b"hangup" in head:
            return False
        elif b"half" in head:
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\nonly part")
            await writer.drain()
            return False
        else:
            await asyncio.sleep(30)
        return True

    server = Raw(silent)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed_port = probe.getsockname()[1]

    async def main() -> None:
        async with await server.start(), _client(timeout=0.3) as client:
            with pytest.raises(httpx2.ReadTimeout):
                await client.post(server.url, content=b"abc")
            with pytest.raises(httpx2.ConnectError):
                await client.get(f"http://127.0.0.1:{closed_port}/")
            with pytest.raises(httpx2.RemoteProtocolError):
                await client.get(server.url + "garbage")
            with pytest.raises(httpx2.RemoteProtocolError):
                await client.get(server.url + "hangup")
            with pytest.raises(httpx2.RemoteProtocolError):
                await client.get(server.url + "half")
            with pytest.raises(httpx2.UnsupportedProtocol):
                await client.get("ftp://127.0.0.1/")
            transport = client._transport
            assert isinstance(transport, H1Transport)
            assert transport._open == 0  # every failed connection was let go

    RUNNERS[loop](main())


@pytest.mark.parametrize("loop", sorted(RUNNERS))
def test_a_response_closed_early_does_not_reuse_its_connection(loop: str) -> None:
    async def long(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter, head: bytes, body: bytes
    ) -> bool:
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 8000000\r\n\r\n")
        writer.write(b"z" * 8_000_000)
        try:
            await writer.drain()
        except ConnectionError:
            return False
        return True

    server = Raw(long)

    async def main() -> int:
        async with await server.start(), _client() as client:
            async with client.stream("GET", server.url) as response:
                async for _ in response.aiter_raw():
                    break
            async with client.stream("GET", server.url) as response:
                size = 0
                async for part in response.aiter_raw():
                    size += len(part)
            return size

    assert RUNNERS[loop](main()) == 8_000_000
    assert len(set(server.peers)) == 2


@pytest.mark.parametrize("loop", sorted(RUNNERS))
def test_a_response_left_whole_in_the_buffer_leaves_its_connection_readable(loop: str) -> None:
    """A body one byte over the read-ahead bound arrives whole before the caller reads (so
    its last bytes pause reading) and is closed unread: the connection goes back to the
    pool, and the next response on it is read (not waited for until the timeout)."""
    size = (1 << 20) + 1

    async def big_then_small(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter, head: bytes, body: bytes
    ) -> bool:
        if head.startswith(b"GET /big"):
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n" % size)
            writer.write(b"b" * size)
            await writer.drain()
            return True
        return await _echo_size(reader, writer, head, body)

    server = Raw(big_then_small)

    async def main() -> str:
        async with await server.start(), _client(timeout=5) as client:
            async with client.stream("GET", server.url + "big") as response:
                await asyncio.sleep(0.5)  # every byte arrives, and none is read
                assert response.status_code == 200
            return (await client.post(server.url, content=b"xyz")).text

    assert RUNNERS[loop](main()) == "3"
    assert len(set(server.peers)) == 1  # the same connection, reused


@pytest.mark.parametrize("loop", sorted(RUNNERS))
def test_the_pool_bound_and_its_timeout(loop: str) -> None:
    gate = asyncio.Event()

    async def held(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter, head: bytes, body: bytes
    ) -> bool:
        if b"hold" in head:
            await gate.wait()
        await _echo_size(reader, writer, head, body)
        return True

    server = Raw(held)

    async def main() -> list[str]:
        nonlocal gate
        gate = asyncio.Event()
        limits = httpx2.Limits(max_connections=1, max_keepalive_connections=1)
        async with await server.start(), _client(limits=limits) as client:
            first = asyncio.ensure_future(client.post(server.url + "hold", content=b"1"))
            await asyncio.sleep(0.05)  # the first request holds the only connection
            with pytest.raises(httpx2.PoolTimeout):
                await client.get(server.url, timeout=httpx2.Timeout(10, pool=0.1))
            second = asyncio.ensure_future(client.post(server.url, content=b"22"))
            await asyncio.sleep(0.05)
            assert not second.done()  # waits for the connection
            gate.set()
            return [(await first).text, (await second).text]

    assert RUNNERS[loop](main()) == ["1", "2"]
    assert len(set(server.peers)) == 1


def test_a_streamed_request_body_goes_chunked_to_a_real_server() -> None:
    """uvicorn decodes the chunked body; gzip from the server is decoded by httpx2."""
    seen: list[bytes] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        body = await request_body(receive)
        seen.append(body)
        data = gzip.compress(body[::-1])
        await send(
            {
                "type": "http.response.start",
                "status": 201,
                "headers": [(b"content-encoding", b"gzip"), (b"content-length", b"%d" % len(data))],
            }
        )
        await send({"type": "http.response.body", "body": data})

    async def parts() -> AsyncIterator[bytes]:
        for piece in (b"abc", b"", b"def" * 10_000):
            yield piece

    async def main() -> tuple[int, bytes, bytes]:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            sock.listen()
            port = sock.getsockname()[1]
            config = uvicorn.Config(app, log_level="warning", lifespan="off")
            server = uvicorn.Server(config)
            serving = asyncio.ensure_future(server.serve(sockets=[sock]))
            while not server.started:
                await asyncio.sleep(0.01)
            try:
                async with _client() as client:
                    url = f"http://127.0.0.1:{port}/"
                    streamed = await client.post(url, content=parts())
                    plain = await client.post(url, content=b"xyz")
                    return streamed.status_code, streamed.content, plain.content
            finally:
                server.should_exit = True
                await serving

    status, streamed, plain = asyncio.run(main())
    assert status == 201
    assert seen == [b"abc" + b"def" * 10_000, b"xyz"]
    assert streamed == (b"abc" + b"def" * 10_000)[::-1]
    assert plain == b"zyx"


@pytest.mark.parametrize("loop", sorted(RUNNERS))
def test_tls(loop: str, tmp_path: Path) -> None:
    key, cert = _certificate(tmp_path)
    server_side = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_side.load_cert_chain(cert, key)
    trusted = ssl.create_default_context(cafile=str(cert))
    server = Raw(_echo_size)

    async def main() -> list[str]:
        async with await server.start(server_side):
            url = f"https://127.0.0.1:{server.port}/"
            async with _client(verify=trusted) as client:
                texts = [(await client.post(url, content=b"y" * 70_000)).text for _ in range(2)]
            async with _client() as untrusting:  # the system's roots do not know this cert
                with pytest.raises(httpx2.ConnectError):
                    await untrusting.get(url)
            return texts

    assert RUNNERS[loop](main()) == ["70000", "70000"]
    assert len(set(server.peers)) == 1


def test_the_gateway_upstream_runs_on_it_unless_a_proxy_is_set(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in (
        "http_proxy",
        "https_proxy",
        "all_proxy",
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "ALL_PROXY",
    ):
        monkeypatch.delenv(name, raising=False)
    upstream = AsyncUpstream(make_settings("TPX"))
    assert upstream.io == "h1"
    assert isinstance(upstream.client._transport, H1Transport)
    monkeypatch.setenv("HTTPS_PROXY", "http://127.0.0.1:9")
    assert not fast_transport_allowed()
    proxied = AsyncUpstream(make_settings("TPX"))
    assert proxied.io == "httpcore+asyncio"
    injected = AsyncUpstream(make_settings("TPX"), transport=httpx2.MockTransport(lambda r: None))  # type: ignore[arg-type]
    assert injected.io == "injected"
