"""What a client can make the gateway hold: memory before the key is checked, time on the
event loop, memory for a stream it never reads (docs/limits.md).

The fast tests run the gateway in this process; the ``redteam`` ones attack a real
``tpx serve`` and measure its memory from ``/proc`` (``make redteam`` prints the figures).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx2
import orjson
import pytest

from tests.e2e.procs import GATEWAY_KEY
from tests.security.conftest import (
    MB,
    Figures,
    Reader,
    Serve,
    Server,
    local_gateway,
    mb,
    port_of,
    settle,
)
from tpx.gateway import offload, tokens
from tpx.gateway.context.counting import MARGIN
from tpx.gateway.drive import _Chunks

AUTH = {"x-api-key": GATEWAY_KEY}
PAD = b"x-pad: " + b"a" * 1015 + b"\r\n"  # one 1 KiB header line


@contextlib.contextmanager
def _connect(port: int) -> Iterator[tuple[socket.socket, Reader]]:
    with socket.create_connection(("127.0.0.1", port), timeout=60) as sock:
        reader = Reader(sock)
        try:
            yield sock, reader
        finally:  # wake the reader before the socket (its descriptor) goes
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            reader.join(10)


def _head(method: str, path: str, *lines: str) -> bytes:
    return (
        f"{method} {path} HTTP/1.1\r\nhost: tpx\r\n".encode()
        + "".join(line + "\r\n" for line in lines).encode()
    )


def _send_until_refused(sock: socket.socket, block: bytes, total: int) -> int:
    """Send *block* until *total* bytes went or the server closed; the bytes sent."""
    sent = 0
    try:
        while sent < total:
            sock.sendall(block)
            sent += len(block)
    except OSError:
        pass
    return sent


def _json_error(data: bytes) -> dict[str, Any]:
    _, _, body = data.partition(b"\r\n\r\n")
    error: dict[str, Any] = orjson.loads(body)
    assert error["type"] == "error"
    return error["error"]  # type: ignore[no-any-return]


# -- 1. memory before authentication: request heads ------------------------------------------


def test_a_head_past_the_limit_is_431_complete_or_still_coming() -> None:
    with local_gateway(limits={"max_header_bytes": 8192}) as (url, _):
        port = port_of(url)
        with _connect(port) as (sock, reader):
            sock.sendall(_head("GET", "/healthz", "connection: close") + PAD * 6 + b"\r\n")
            assert reader.wait(10).startswith(b"HTTP/1.1 200"), "a head under the limit is served"

        with _connect(port) as (sock, reader):  # complete, but past the limit
            sock.sendall(_head("GET", "/healthz") + PAD * 9 + b"\r\n")
            data = reader.wait(10)
            assert reader.status() == 431
            assert _json_error(data)["type"] == "request_too_large"
            assert b"8192" in data

        with _connect(port) as (sock, reader):  # still coming: refused before its end
            sock.sendall(_head("POST", "/v1/messages"))
            _send_until_refused(sock, PAD * 16, 4 * MB)
            data = reader.wait(10)
            assert reader.status() == 431, data[:200]
            assert reader.is_alive() is False, "the connection is closed after the 431"


def test_a_keyless_request_is_refused_before_its_body_is_read() -> None:
    """No key: 401 at once, without ``100 Continue`` and without waiting for the body; with
    the key the body is asked for (``100 Continue``) and read."""
    with local_gateway() as (url, _):
        port = port_of(url)
        with _connect(port) as (sock, reader):
            sock.sendall(
                _head("POST", "/v1/messages", "content-length: 10000000", "expect: 100-continue")
                + b"\r\n"
            )
            data = reader.wait(3)
            assert data.startswith(b"HTTP/1.1 401"), data[:200]
            assert b"100 Continue" not in data
            assert _json_error(data)["type"] == "authentication_error"

        with _connect(port) as (sock, reader):  # no Expect: the body is not waited for either
            sock.sendall(_head("POST", "/v1/messages/count_tokens", "content-length: 10000000"))
            sock.sendall(b"\r\n" + b"{" * 1024)
            assert reader.wait(3).startswith(b"HTTP/1.1 401")

        body = orjson.dumps(
            {"model": "m", "messages": [{"role": "user", "content": "hello"}], "max_tokens": 8}
        )
        with _connect(port) as (sock, reader):
            sock.sendall(
                _head(
                    "POST",
                    "/v1/messages/count_tokens",
                    f"content-length: {len(body)}",
                    "expect: 100-continue",
                    f"x-api-key: {GATEWAY_KEY}",
                    "content-type: application/json",
                    "connection: close",
                )
                + b"\r\n"
            )
            deadline = time.monotonic() + 5
            while b"\r\n\r\n" not in reader.data and time.monotonic() < deadline:
                time.sleep(0.01)
            assert bytes(reader.data).startswith(b"HTTP/1.1 100 Continue")
            sock.sendall(body)
            data = reader.wait(10)
            assert b"HTTP/1.1 200" in data
            assert b'"input_tokens"' in data


def test_a_trickled_body_ends_at_body_timeout(figures: Figures) -> None:
    """``body_timeout`` bounds the WHOLE body: a byte every 50 ms still ends there."""
    timeout = 1.0
    with (
        local_gateway(limits={"body_timeout": timeout}) as (url, _),
        _connect(port_of(url)) as (sock, reader),
    ):
        sock.sendall(
            _head("POST", "/v1/messages", "content-length: 400", f"x-api-key: {GATEWAY_KEY}")
            + b"\r\n"
        )
        start = time.monotonic()
        try:  # until answered (then the server closes the connection) or long past the bound
            while reader.status() is None and time.monotonic() - start < timeout + 0.6:
                sock.sendall(b" ")
                time.sleep(0.05)
        except OSError:
            pass
        reader.wait(timeout + 2)
        assert reader.first is not None
        elapsed = reader.first - start
        figures("1 trickled body", f"answer after (body_timeout = {timeout} s)", f"{elapsed:.2f} s")
        assert reader.status() == 408
        assert _json_error(bytes(reader.data))["type"] == "timeout_error"
        assert timeout - 0.1 < elapsed < timeout + 0.5


@pytest.mark.redteam
def test_200_mb_of_headers_get_431_and_hold_no_memory(serve: Serve, figures: Figures) -> None:
    server = serve()
    settle(server)
    before = server.rss()
    server.reset_peak()
    with _connect(server.port) as (sock, reader):
        sock.sendall(_head("GET", "/healthz"))
        started = time.monotonic()
        sent = _send_until_refused(sock, PAD * 64, 200 * MB)
        if sent >= 200 * MB:
            _send_until_refused(sock, b"\r\n", 2)
        reader.wait(60)
        seconds = time.monotonic() - started
        growth = server.peak() - before
    figures(
        "1 header flood", f"status after {mb(sent)} sent ({seconds:.2f} s)", str(reader.status())
    )
    figures("1 header flood", f"peak RSS {mb(before)} -> {mb(server.peak())}: growth", mb(growth))
    assert reader.status() == 431
    assert growth < 10 * MB


@pytest.mark.redteam
def test_20_keyless_30_mb_bodies_get_401_and_hold_no_memory(serve: Serve, figures: Figures) -> None:
    server = serve()
    settle(server)
    before = server.rss()
    server.reset_peak()
    size = 30 * MB
    statuses: list[int | None] = []
    sent: list[int] = []

    def attack() -> None:
        with _connect(server.port) as (sock, reader):
            sock.sendall(
                _head("POST", "/v1/messages", f"content-length: {size}", "content-type: x")
                + b"\r\n"
            )
            sent.append(_send_until_refused(sock, b"a" * MB, size))
            reader.wait(60)
            statuses.append(reader.status())

    started = time.monotonic()
    threads = [threading.Thread(target=attack) for _ in range(20)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    seconds = time.monotonic() - started
    growth = server.peak() - before
    figures(
        "1 keyless bodies",
        f"20 x 30 MB: statuses ({mb(sum(sent))} sent, {seconds:.2f} s)",
        ",".join(sorted({str(s) for s in statuses})),
    )
    figures("1 keyless bodies", f"peak RSS {mb(before)} -> {mb(server.peak())}: growth", mb(growth))
    assert statuses == [401] * 20
    assert growth < 50 * MB


# -- 2. CPU on the event loop ------------------------------------------------------------------


def test_a_large_body_is_handled_off_the_event_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    """Past ``offload_bytes``: a turn is read and translated in a ``tpx-cpu`` thread, a
    count_tokens body counted in a worker process (the server's own ``handle`` never sees
    it); a small body stays on the loop."""
    with local_gateway(limits={"offload_bytes": 4096}) as (url, app):
        threads: list[tuple[str, str, int]] = []
        handle = app.gateway.handle

        def recording(request: Any, **options: Any) -> Any:
            threads.append((threading.current_thread().name, request.path, len(request.body)))
            return handle(request, **options)

        monkeypatch.setattr(app.gateway, "handle", recording)
        counts = []
        with httpx2.Client(base_url=url, timeout=30) as client:
            for text in ("small", "large " * 2000):
                body = {
                    "model": "m",
                    "max_tokens": 8,
                    "messages": [{"role": "user", "content": text}],
                }
                response = client.post("/v1/messages", headers=AUTH, json=body)
                assert response.status_code == 200
                response = client.post("/v1/messages/count_tokens", headers=AUTH, json=body)
                assert response.status_code == 200
                counts.append(response.json()["input_tokens"])
            bad = {"model": "m", "messages": "not a list " * 1000}  # refused in the worker
            refused = client.post("/v1/messages/count_tokens", headers=AUTH, json=bad)
            assert refused.status_code == 400
            assert refused.json()["error"]["type"] == "invalid_request_error"
            metrics = client.get("/metrics").text
    assert [(path, size <= 4096) for _, path, size in threads] == [
        ("/v1/messages", True),
        ("/v1/messages/count_tokens", True),
        ("/v1/messages", False),
        ("/metrics", True),
    ]
    assert not threads[0][0].startswith("tpx-cpu"), "a small body stays on the loop"
    assert threads[2][0].startswith("tpx-cpu"), threads[2]
    small, large = counts
    # 2000 more cl100k tokens, times the estimate's margin (tpx.gateway.context.counting)
    assert 2000 * MARGIN <= large - small <= 2000 * MARGIN + 1, "the worker counted it"
    assert 'tpx_gateway_requests_total{endpoint="count_tokens",status="200"} 2.0' in metrics
    assert 'tpx_gateway_requests_total{endpoint="count_tokens",status="400"} 1.0' in metrics
    assert 'tpx_gateway_errors_total{code="GATEWAY_400"} 1.0' in metrics


def test_a_count_worker_that_never_starts_is_given_up(monkeypatch: pytest.MonkeyPatch) -> None:
    """A forked worker can inherit a lock another thread held at the fork and never run:
    start-up gives it READY_TIMEOUT seconds, kills it, and counts in threads instead."""

    def hung(gateway: object) -> None:
        time.sleep(120)

    monkeypatch.setattr(offload, "READY_TIMEOUT", 0.5)
    monkeypatch.setattr(offload, "_child_start", hung)
    started = time.monotonic()
    with (
        local_gateway(limits={"offload_bytes": 4096}) as (url, app),
        httpx2.Client(base_url=url, timeout=30) as client,
    ):
        assert time.monotonic() - started < 10
        assert not app.offload.processes
        body = {"model": "m", "messages": [{"role": "user", "content": "large " * 2000}]}
        counted = client.post("/v1/messages/count_tokens", headers=AUTH, json=body)
        assert counted.status_code == 200
        assert counted.json()["input_tokens"] > 2000


def test_a_count_worker_that_dies_is_replaced() -> None:
    """Killed (out of memory, an operator): its request fails as any internal error does, a
    fresh worker counts the next one."""
    with (
        local_gateway(limits={"offload_bytes": 4096}) as (url, app),
        httpx2.Client(base_url=url, timeout=30) as client,
    ):
        body = {"model": "m", "messages": [{"role": "user", "content": "large " * 2000}]}
        assert client.post("/v1/messages/count_tokens", headers=AUTH, json=body).is_success
        pool = app.offload._counts
        assert pool is not None
        for process in list(pool._processes.values()):
            assert process.pid is not None
            os.kill(process.pid, signal.SIGKILL)
            process.join(10)
        failed = client.post("/v1/messages/count_tokens", headers=AUTH, json=body)
        assert failed.status_code == 500
        assert failed.json()["error"]["type"] == "api_error"
        again = client.post("/v1/messages/count_tokens", headers=AUTH, json=body)
        assert again.status_code == 200
        assert app.offload._counts is not pool


def test_a_body_denser_than_the_container_bound_is_refused() -> None:
    """More than ``max_json_containers`` objects and arrays: 413 (the core counts brackets
    before it parses: one parse holds the interpreter for about a microsecond a value);
    within the bound the request goes on. Brackets inside strings count too."""
    limit = 1000

    def body(n: int, text: str = "hi") -> bytes:
        return orjson.dumps(
            {
                "model": "m",
                "max_tokens": 8,
                "messages": [{"role": "user", "content": text}],
                "metadata": {"pad": [{} for _ in range(n)]},
            }
        )  # the body's own: 3 objects and 2 arrays besides the pad

    with (
        local_gateway(limits={"max_json_containers": limit}) as (url, _),
        httpx2.Client(base_url=url, timeout=30) as client,
    ):
        for path in ("/v1/messages", "/v1/messages/count_tokens"):
            refused = client.post(path, headers=AUTH, content=body(limit - 4))
            assert refused.status_code == 413, path
            assert refused.json()["error"]["type"] == "request_too_large"
            assert f"more than {limit} JSON objects and arrays" in refused.text
            assert client.post(path, headers=AUTH, content=body(limit - 5)).status_code == 200
        in_text = client.post("/v1/messages", headers=AUTH, content=body(0, "{" * 2 * limit))
        assert in_text.status_code == 413


def test_a_long_text_is_counted_in_pieces_exactly() -> None:
    """Cut before a space between two words, the count is the whole text's."""
    rng = random.Random(7)
    words = ["hello", "world", "a", "123", "x" * 50, "don't", "ünï", "\n", "  ", "!?", "тест"]
    text = " ".join(rng.choice(words) for _ in range(60_000))
    assert len(text) > 3 * tokens.PIECE
    whole = len(tokens.encoding().encode(text, disallowed_special=()))
    assert tokens._text(text) == whole
    regular = "hello " * 40_000  # PIECE falls inside a word: the cut goes back to a space
    assert tokens.PIECE % len("hello ") != 0
    assert tokens._text(regular) == len(tokens.encoding().encode(regular))
    word = "x" * (3 * tokens.PIECE)  # no space to cut before: cut anyway, bounded calls
    assert 0 < tokens._text(word) <= len(word)


def _text_30_mb() -> dict[str, Any]:
    return {"model": "m", "messages": [{"role": "user", "content": "word " * (6 * MB)}]}


def _messages_700k() -> dict[str, Any]:
    roles = ("user", "assistant")
    messages = [{"role": roles[i % 2], "content": "hi"} for i in range(700_001)]
    return {"model": "m", "messages": messages}


def _tool_pairs_150k() -> dict[str, Any]:
    messages: list[dict[str, Any]] = [{"role": "user", "content": "go"}]
    for i in range(150_000):
        messages.append(
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": f"toolu_{i}", "name": "t", "input": {}}],
            }
        )
        messages.append(
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": f"toolu_{i}", "content": "r"}],
            }
        )
    tools = [{"name": "t", "input_schema": {"type": "object"}}]
    return {"model": "m", "messages": messages, "tools": tools}


SHAPES: dict[str, Callable[[], dict[str, Any]]] = {
    "30 MB of text": _text_30_mb,
    "700k messages": _messages_700k,
    "150k tool pairs": _tool_pairs_150k,
}


def _poll_while(server: Server, busy: threading.Thread) -> list[float]:
    """``GET /healthz`` latencies (seconds), one every 20 ms while *busy* runs."""
    latencies: list[float] = []
    with httpx2.Client(base_url=server.url, timeout=30) as client:
        while busy.is_alive():
            started = time.monotonic()
            assert client.get("/healthz").status_code == 200
            latencies.append(time.monotonic() - started)
            time.sleep(0.02)
    return latencies


def _post_while_polling(
    server: Server, path: str, body: bytes, timeout: float
) -> tuple[int, float, list[float]]:
    """POST *body* to *path* in a thread while ``/healthz`` is polled: the status, the
    seconds it took, and the ``/healthz`` latencies meanwhile."""
    outcome: list[tuple[int, float]] = []

    def post() -> None:
        started = time.monotonic()
        response = httpx2.post(
            server.url + path, content=body, headers=server.headers(), timeout=timeout
        )
        outcome.append((response.status_code, time.monotonic() - started))

    busy = threading.Thread(target=post)
    busy.start()
    latencies = _poll_while(server, busy)
    busy.join()
    ((status, seconds),) = outcome
    return status, seconds, latencies


@pytest.mark.redteam
@pytest.mark.parametrize("shape", list(SHAPES))
def test_a_cpu_heavy_request_leaves_the_event_loop_free(
    serve: Serve, figures: Figures, shape: str
) -> None:
    """count_tokens of huge bodies: counted in a worker process (the container bound raised
    so that the work itself is measured)."""
    server = serve(limits={"max_json_containers": 10_000_000})
    body = orjson.dumps(SHAPES[shape]())
    status, seconds, latencies = _post_while_polling(server, "/v1/messages/count_tokens", body, 120)
    worst = max(latencies)
    figures(
        f"2 {shape}",
        f"count_tokens ({mb(len(body))}): status, seconds",
        f"{status}, {seconds:.2f} s",
    )
    stalled = sum(t for t in latencies if t > 0.1)
    figures(f"2 {shape}", f"/healthz meanwhile: worst of {len(latencies)}", f"{worst * 1e3:.1f} ms")
    figures(
        f"2 {shape}",
        f"/healthz meanwhile: time in answers > 100 ms (load {os.getloadavg()[0]:.1f})",
        f"{stalled * 1e3:.0f} ms of {seconds * 1e3:.0f} ms",
    )
    assert status == 200
    assert len(latencies) >= 5, "the request was too quick to measure anything"
    # on a quiet machine every answer takes < 100 ms (docs/limits.md); on a loaded one the
    # scheduler adds pauses of its own, never the whole request a loop held by it would
    assert stalled < 0.25 * seconds
    assert worst < 1.0


@pytest.mark.redteam
@pytest.mark.parametrize("shape", list(SHAPES))
def test_a_large_turn_is_answered_while_the_loop_keeps_serving(
    serve: Serve, figures: Figures, shape: str
) -> None:
    """``/v1/messages`` with the same bodies: handled in a thread, so the loop pauses only
    for the longest single C call of that work; the body's JSON parse is cut in slices
    (:mod:`tpx.gateway.longjson`), its structure bounded by ``limits.max_json_containers``:
    a body denser than that is refused (413) before it is parsed, the 30 MB text (three
    containers) is answered."""
    server = serve(config={"context": {"default": 1 << 30}})  # measures the parse, not a refusal
    body = orjson.dumps({**SHAPES[shape](), "max_tokens": 8})
    status, seconds, latencies = _post_while_polling(server, "/v1/messages", body, 300)
    worst = max(latencies)
    figures(
        f"2 {shape}",
        f"/v1/messages ({mb(len(body))}): status, seconds",
        f"{status}, {seconds:.2f} s",
    )
    figures(f"2 {shape}", f"/healthz meanwhile: worst of {len(latencies)}", f"{worst * 1e3:.1f} ms")
    assert status == (200 if shape == "30 MB of text" else 413)
    # a quiet machine answers every /healthz in < 100 ms (docs/limits.md); a loaded one adds
    # scheduling pauses of its own, never the second a dense body's parse would hold it for
    assert worst < 0.5


# -- 3. a streaming client that never reads --------------------------------------------------


def test_the_stream_buffer_is_bounded_in_bytes() -> None:
    async def run() -> None:
        chunks = _Chunks(1000)
        chunks.put_nowait(b"a" * 600)
        chunks.put_nowait(b"b" * 600)  # below the bound when it came: it passes
        assert chunks.full()
        with pytest.raises(asyncio.QueueFull):
            chunks.put_nowait(b"c")
        waiting = asyncio.ensure_future(chunks.put(None))
        await asyncio.sleep(0.01)
        assert not waiting.done(), "the reader waits while the bound is reached"
        assert chunks.get_nowait() == b"a" * 600
        await asyncio.wait_for(waiting, 1)
        assert chunks.get_nowait() == b"b" * 600
        assert chunks.get_nowait() is None
        assert not chunks.full()

    asyncio.run(run())


def _stalled_stream(port: int, conversation: str, megabytes: int) -> socket.socket:
    """A client that asks for a stream of *megabytes* and never reads it."""
    body = orjson.dumps(
        {
            "model": "m",
            "max_tokens": 64,
            "stream": True,
            "messages": [
                {"role": "user", "content": f"[conv:{conversation}] [flood:{megabytes}] go"}
            ],
        }
    )
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
    sock.connect(("127.0.0.1", port))
    head = _head(
        "POST",
        "/v1/messages",
        f"content-length: {len(body)}",
        "content-type: application/json",
        f"x-api-key: {GATEWAY_KEY}",
    )
    sock.sendall(head + b"\r\n" + body)
    return sock


def _peak_settled(server: Server, quiet: float = 2.0, limit: float = 40.0) -> int:
    """The peak RSS once it stopped growing for *quiet* seconds (at most *limit* s)."""
    deadline = time.monotonic() + limit
    peak, since = server.peak(), time.monotonic()
    while time.monotonic() < deadline and time.monotonic() - since < quiet:
        time.sleep(0.2)
        now = server.peak()
        if now > peak + 256 * 1024:
            peak, since = now, time.monotonic()
    return server.peak()


@pytest.mark.redteam
def test_stream_clients_that_never_read_hold_bounded_memory(serve: Serve, figures: Figures) -> None:
    server = serve()
    warm = orjson.dumps(
        {
            "model": "m",
            "max_tokens": 8,
            "stream": True,
            "messages": [{"role": "user", "content": "[flood:4] warm"}],
        }
    )
    for _ in range(2):  # the first stream's one-time costs (imports, pools) are not the attack's
        taken = httpx2.post(
            server.url + "/v1/messages", content=warm, headers=server.headers(), timeout=60
        )
        assert taken.status_code == 200
        assert len(taken.content) > 4 * MB
    settle(server, 1.0)
    before = server.rss()
    server.reset_peak()
    clients = 3
    socks = [_stalled_stream(server.port, f"stall-{i}", 256) for i in range(clients)]
    try:
        peak = _peak_settled(server)
        started = time.monotonic()
        assert httpx2.get(server.url + "/healthz", timeout=10).status_code == 200
        health = time.monotonic() - started
    finally:
        for sock in socks:
            sock.close()
    per_client = (peak - before) / clients
    figures(
        "3 stalled streams",
        f"{clients} x 256 MB never read: peak RSS {mb(before)} -> {mb(peak)}, per client",
        mb(int(per_client)),
    )
    figures("3 stalled streams", "/healthz meanwhile", f"{health * 1e3:.1f} ms")
    # what one such client holds: the upstream connection's read-ahead (tpx.gateway.h1,
    # 1 MiB) and one read of it in flight, limits.stream_buffer_bytes, the text of the reply
    # it took before it stopped (the exchange keeps it) and the allocator's slack
    # (docs/limits.md)
    assert per_client < 16 * MB
