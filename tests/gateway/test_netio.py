"""tpx.gateway.netio: httpx2 over the asyncio network backend, against real loopback servers."""

from __future__ import annotations

import asyncio
import shutil
import socket
import ssl
import subprocess
import threading
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import httpx2
import pytest
import uvloop

from tpx.gateway.netio import HOLD_BYTES, AsyncioBackend, _Protocol, _Stream, install
from tpx.gateway.upstream import AsyncUpstream

from .conftest import make_settings
from .scripted import ScriptedUpstream, answer, answer_then_close

RUNNERS: dict[str, Callable[[Coroutine[Any, Any, Any]], Any]] = {
    "asyncio": asyncio.run,
    "uvloop": uvloop.run,
}


class Server:
    """A tiny HTTP/1.1 server: answers ``<body size>`` to every request; *close_after* closes
    the connection after each response (without saying so); *silent* never answers."""

    def __init__(self, *, close_after: bool = False, silent: bool = False) -> None:
        self.close_after = close_after
        self.silent = silent
        self.peers: list[Any] = []
        self.port = 0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                self.peers.append(writer.get_extra_info("peername"))
                size = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        size = int(line.split(b":", 1)[1])
                body = await reader.readexactly(size)
                if self.silent:
                    await asyncio.sleep(30)
                answer = str(len(body)).encode()
                writer.write(
                    b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n%s" % (len(answer), answer)
                )
                await writer.drain()
                if self.close_after:
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    async def start(self, tls: ssl.SSLContext | None = None) -> asyncio.Server:
        server = await asyncio.start_server(self.handle, "127.0.0.1", 0, ssl=tls)
        self.port = server.sockets[0].getsockname()[1]
        return server


def _client(verify: Any = True, timeout: float = 10) -> httpx2.AsyncClient:
    transport = httpx2.AsyncHTTPTransport(verify=verify)
    assert install(transport)
    return httpx2.AsyncClient(transport=transport, timeout=timeout)


@pytest.mark.parametrize("loop", sorted(RUNNERS))
def test_round_trips_reuse_one_connection(loop: str) -> None:
    server = Server()

    async def main() -> list[str]:
        async with await server.start(), _client() as client:
            url = f"http://127.0.0.1:{server.port}/"
            sizes = [0, 10, 300_000, HOLD_BYTES + 5]  # the last one goes out before the read
            return [(await client.post(url, content=b"x" * size)).text for size in sizes] + [
                (await client.get(url)).text
            ]

    assert RUNNERS[loop](main()) == ["0", "10", "300000", str(HOLD_BYTES + 5), "0"]
    assert len(set(server.peers)) == 1


@pytest.mark.parametrize("loop", sorted(RUNNERS))
def test_a_connection_the_server_closed_is_not_reused(loop: str) -> None:
    server = Server(close_after=True)

    async def main() -> list[int]:
        async with await server.start(), _client() as client:
            url = f"http://127.0.0.1:{server.port}/"
            codes = []
            for _ in range(3):
                codes.append((await client.post(url, content=b"abc")).status_code)
                await asyncio.sleep(0.05)  # the close arrives while the connection is idle
            return codes

    assert RUNNERS[loop](main()) == [200, 200, 200]
    assert len(set(server.peers)) == 3


@pytest.mark.parametrize("loop", sorted(RUNNERS))
def test_read_timeout_and_refused_connection_are_httpx2_errors(loop: str) -> None:
    server = Server(silent=True)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed_port = probe.getsockname()[1]

    async def main() -> None:
        async with await server.start(), _client(timeout=0.3) as client:
            with pytest.raises(httpx2.ReadTimeout):
                await client.post(f"http://127.0.0.1:{server.port}/", content=b"abc")
            with pytest.raises(httpx2.ConnectError):
                await client.get(f"http://127.0.0.1:{closed_port}/")

    RUNNERS[loop](main())


def _certificate(tmp_path: Path) -> tuple[Path, Path]:
    openssl = shutil.which("openssl")
    assert openssl is not None, "the TLS test needs the openssl command"
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(
        [
            *(openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1"),
            *("-keyout", str(key), "-out", str(cert), "-subj", "/CN=127.0.0.1"),
            *("-addext", "subjectAltName=IP:127.0.0.1"),
        ],
        check=True,
        capture_output=True,
    )
    return key, cert


@pytest.mark.parametrize("loop", sorted(RUNNERS))
def test_tls(loop: str, tmp_path: Path) -> None:
    key, cert = _certificate(tmp_path)
    server_side = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_side.load_cert_chain(cert, key)
    trusted = ssl.create_default_context(cafile=str(cert))
    server = Server()

    async def main() -> list[str]:
        async with await server.start(server_side):
            async with _client(verify=trusted) as client:
                url = f"https://127.0.0.1:{server.port}/"
                texts = [(await client.post(url, content=b"y" * 70_000)).text for _ in range(2)]
            async with _client() as untrusting:  # the system's roots do not know this cert
                with pytest.raises(httpx2.ConnectError):
                    await untrusting.get(url)
            return texts

    assert RUNNERS[loop](main()) == ["70000", "70000"]


class _Recorder:
    def __init__(self) -> None:
        self.writes: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.writes.append(data)

    def is_closing(self) -> bool:
        return False


def test_a_request_leaves_in_one_write_when_the_response_is_read() -> None:
    async def main() -> tuple[list[bytes], list[bytes], bytes]:
        transport, protocol = _Recorder(), _Protocol()
        stream = _Stream(transport, protocol)
        await stream.write(b"POST / HTTP/1.1\r\n\r\n")
        await stream.write(b"body")
        before = list(transport.writes)
        protocol.data_received(b"HTTP/1.1 200 OK\r\n")
        data = await stream.read(1000)
        return before, transport.writes, data

    before, after, data = asyncio.run(main())
    assert before == []
    assert after == [b"POST / HTTP/1.1\r\n\r\nbody"]
    assert data == b"HTTP/1.1 200 OK\r\n"


def test_the_gateway_upstream_runs_on_the_backend_behind_a_proxy(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With a proxy configured the upstream is httpx2's own transport (tpx.gateway.h1 does
    not speak to proxies), its connections on this backend."""
    monkeypatch.setenv("HTTPS_PROXY", "http://127.0.0.1:9")
    upstream = AsyncUpstream(make_settings("TPX"))
    assert upstream.io == "httpcore+asyncio"
    transport = upstream.client._transport
    assert isinstance(transport, httpx2.AsyncHTTPTransport)
    assert isinstance(transport._pool._network_backend, AsyncioBackend)


@pytest.mark.parametrize("loop", sorted(RUNNERS))
def test_a_closed_idle_connection_the_loop_has_not_seen_is_not_reused(loop: str) -> None:
    """The server closed the idle connection while the loop was busy (its FIN unread):
    ``is_readable`` asks the socket, httpcore2 drops the connection instead of writing the
    next request into it."""
    closed = threading.Event()
    with ScriptedUpstream(answer_then_close(closed), answer) as upstream:

        async def main() -> list[int]:
            async with _client() as client:
                codes = []
                for _ in range(2):
                    codes.append((await client.post(upstream.url, content=b"{}")).status_code)
                    assert closed.wait(10)  # blocks the loop: the FIN is not read by it
                return codes

        assert RUNNERS[loop](main()) == [200, 200]
        assert (len(upstream.requests), upstream.connections) == (2, 2)
