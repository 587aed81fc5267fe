"""An attempt of ``[[upstreams]]`` ends at its upstream as soon as the gateway is done with it:
one its upstream holds past ``first_byte_timeout`` is closed at the timeout (the upstream
sees the connection end before the next upstream's answer goes out), and one whose client
went away is closed then. Real sockets: a real gateway (uvicorn) in front of loopback
upstreams that read the request and answer nothing (``tests/gateway/scripted.py``).

Each check runs against a seeded bug too (the attempt's I/O shielded from its cancellation:
a timed-out or abandoned attempt keeps its connection until its upstream answers or the read
timeout): the same observation then shows the connection still open.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx2
import orjson
import pytest

from tests.gateway.conftest import GATEWAY_KEY, serving
from tests.gateway.scripted import ScriptedUpstream, answer
from tpx.gateway.asgi import create_app
from tpx.gateway.settings import load_settings
from tpx.gateway.upstream import AsyncUpstream
from tpx.gateway.wire import UpstreamCall

#: how long a test waits for an upstream to see its connection end (a hang guard: the
#: gateway closes it within milliseconds; without the close it stays for ``read_timeout``)
GUARD_S = 5.0

CONFIG = """
[routing]
first_byte_timeout = {first_byte_timeout}
failover_on_timeout = {failover}
probe_interval = 0
max_attempts = 2

[limits]
ping_interval = 600.0
read_timeout = 600.0

[[upstreams]]
name = "held"
base_url = "{held}/v1"
models = ["m"]
context_window = 200000

[[upstreams]]
name = "next"
base_url = "{next}/v1"
models = ["m"]
context_window = 200000

[[routes]]
upstreams = ["held", "next"]
"""

ENV = {
    "TPX_OAUTH_TOKEN": "tok-SECRET-1",
    "TPX_GATEWAY_SECRET": "s",
    "TPX_GATEWAY_KEY": GATEWAY_KEY,
}


class Held:
    """A step of :class:`ScriptedUpstream`: read the request, answer nothing; ``closed`` is
    set when the gateway closes the connection (the upstream reads its end)."""

    def __init__(self) -> None:
        self.arrived = threading.Event()
        self.closed = threading.Event()

    def __call__(self, conn: socket.socket, head: bytes, body: bytes) -> bool:
        self.arrived.set()
        try:
            data = conn.recv(1)
        except OSError:  # its own read timeout, or the test ending
            return False
        if data == b"":
            self.closed.set()
        return False


class AfterHeld:
    """A step: answer once the held upstream saw its connection end (or after the guard);
    ``held_closed`` says which came first."""

    def __init__(self, held: Held) -> None:
        self.held = held
        self.held_closed: bool | None = None
        self.decided = threading.Event()

    def __call__(self, conn: socket.socket, head: bytes, body: bytes) -> bool:
        self.held_closed = self.held.closed.wait(GUARD_S)
        self.decided.set()
        return answer(conn, head, body)


_OPEN = AsyncUpstream.open
#: the I/O the seeded bug left running, with its event loop (ended before the gateway stops)
LEFT: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[httpx2.Response]]] = []


async def _shielded_open(self: AsyncUpstream, call: UpstreamCall) -> httpx2.Response:
    """A seeded bug: the attempt's I/O is not cancelled with the attempt (its connection
    stays open until the upstream answers)."""
    task = asyncio.ensure_future(_OPEN(self, call))
    LEFT.append((asyncio.get_running_loop(), task))
    return await asyncio.shield(task)


async def _ended(task: asyncio.Future[httpx2.Response]) -> None:
    task.cancel()
    with contextlib.suppress(BaseException):
        response = await task
        await response.aclose()


def _end_left() -> None:
    """End what the seeded bug left running, on its loop, while the gateway still runs."""
    while LEFT:
        loop, task = LEFT.pop()
        asyncio.run_coroutine_threadsafe(_ended(task), loop).result(GUARD_S)


@pytest.fixture(params=[False, True], ids=["real", "shielded-bug"])
def seeded(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> bool:
    if request.param:
        monkeypatch.setattr(AsyncUpstream, "open", _shielded_open)
    return bool(request.param)


@contextlib.contextmanager
def gateway(
    tmp_path: Path,
    held: Held,
    following: AfterHeld | None = None,
    *,
    failover: bool = False,
    first_byte_timeout: float = 0.3,
) -> Iterator[tuple[str, ScriptedUpstream, ScriptedUpstream]]:
    """A gateway over the held upstream (first in the route) and the next one."""
    with (
        ScriptedUpstream(held) as first,
        ScriptedUpstream(following or answer) as second,
    ):
        path = tmp_path / "gateway.toml"
        path.write_text(
            CONFIG.format(
                failover=str(failover).lower(),
                first_byte_timeout=first_byte_timeout,
                held=first.url,
                next=second.url,
            )
        )
        settings = load_settings(env=ENV, config_file=path)
        with serving(create_app(settings)) as url:
            try:
                yield url, first, second
            finally:
                _end_left()


def _body(stream: bool) -> bytes:
    return orjson.dumps(
        {
            "model": "m",
            "max_tokens": 64,
            "stream": stream,
            "messages": [{"role": "user", "content": "list the files"}],
        }
    )


def _post(url: str, stream: bool) -> httpx2.Response:
    with httpx2.Client(base_url=url, timeout=60) as client:
        return client.post(
            "/v1/messages",
            content=_body(stream),
            headers={"x-api-key": GATEWAY_KEY, "content-type": "application/json"},
        )


def test_a_timed_out_attempt_is_closed_before_the_next_upstream_answers(
    tmp_path: Path, seeded: bool
) -> None:
    """``failover_on_timeout``: the held attempt times out and the request moves on; the
    held upstream sees its connection end before the next upstream answers (not when the
    client's request ends)."""
    held = Held()
    following = AfterHeld(held)
    with gateway(tmp_path, held, following, failover=True) as (url, first, second):
        reply = _post(url, stream=True)
        # the gateway keeps running meanwhile (its end would close whatever it left open)
        assert following.decided.wait(GUARD_S * 2)
        counts = (len(first.requests), len(second.requests))
    assert counts == (1, 1)
    assert following.held_closed is (not seeded)
    if not seeded:  # (with the bug the next attempt outlives its timeout too, held as long)
        assert reply.status_code == 200
        assert b"message_stop" in reply.content


def test_a_timed_out_attempt_is_closed_when_the_exchange_ends_there(
    tmp_path: Path, seeded: bool
) -> None:
    """Without ``failover_on_timeout`` the timeout ends the exchange (an error to the
    client) and the held upstream sees its connection end: no generation is left running."""
    held = Held()
    with gateway(tmp_path, held) as (url, first, second):
        reply = _post(url, stream=True)
        closed = held.closed.wait(GUARD_S)
        counts = (len(first.requests), len(second.requests))
    assert counts == (1, 0)
    assert reply.status_code >= 500
    assert closed is (not seeded)


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_a_client_that_leaves_mid_request_has_its_attempt_closed(
    tmp_path: Path, seeded: bool, stream: bool
) -> None:
    """The client closes its connection while the upstream holds the request (a plain
    request: no ``first_byte_timeout``; a stream: long before it): the upstream sees its
    connection end."""
    held = Held()
    with gateway(tmp_path, held, first_byte_timeout=600.0) as (url, first, _):
        host, port = url.removeprefix("http://").split(":")
        body = _body(stream)
        with socket.create_connection((host, int(port)), timeout=30) as client:
            client.sendall(
                b"POST /v1/messages HTTP/1.1\r\nhost: gateway\r\n"
                b"content-type: application/json\r\nx-api-key: "
                + GATEWAY_KEY.encode()
                + b"\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body)
            )
            assert held.arrived.wait(GUARD_S)
        closed = held.closed.wait(GUARD_S)
        assert len(first.requests) == 1
    assert closed is (not seeded)
