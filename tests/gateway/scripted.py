"""A loopback HTTP/1.1 upstream on plain sockets in threads, scripted request by request.

It reads every request whole (head and ``content-length`` body) and counts it before its
script step runs, so a test knows exactly what the upstream received; the steps answer,
drop the connection, or misbehave on purpose (hostile bodies). Its threads do not share
the gateway's event loop: a test may block its own loop while the upstream acts.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
import zlib
from collections.abc import Callable, Iterator
from typing import Any

import orjson

#: A step: (the connection, the request's head, its body) -> whether the connection stays open.
Step = Callable[[socket.socket, bytes, bytes], bool]

COMPLETION = orjson.dumps(
    {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "model": "m",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "hello"},
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4},
    }
)


def _chunk(delta: dict[str, Any], finish: str | None) -> bytes:
    choice = {"index": 0, "delta": delta, "finish_reason": finish}
    body = {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "model": "m",
        "choices": [choice],
    }
    return b"data: " + orjson.dumps(body) + b"\n\n"


STREAM = (
    _chunk({"role": "assistant", "content": "hello"}, None)
    + _chunk({}, "stop")
    + b"data: [DONE]\n\n"
)


def streaming(body: bytes) -> bool:
    try:
        return bool(orjson.loads(body).get("stream"))
    except orjson.JSONDecodeError:
        return False


def answer(conn: socket.socket, head: bytes, body: bytes) -> bool:
    """A valid Chat Completions reply (an SSE stream when the request asked for one)."""
    if streaming(body):
        conn.sendall(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: %d\r\n\r\n%s"
            % (len(STREAM), STREAM)
        )
    else:
        conn.sendall(
            b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s"
            % (len(COMPLETION), COMPLETION)
        )
    return True


def drop_after(seconds: float) -> Step:
    """Read the request, "work" *seconds*, then close the connection without a reply."""

    def step(conn: socket.socket, head: bytes, body: bytes) -> bool:
        time.sleep(seconds)
        return False

    return step


def held_until_closed(conn: socket.socket, closed: threading.Event) -> bool:
    """The end of a step that answers no further: read (and drop) whatever comes until the
    client closes the connection, then set *closed*; the connection does not stay open."""
    with contextlib.suppress(OSError):
        while conn.recv(1024):
            pass
        closed.set()
    return False


def until_closed(closed: threading.Event) -> Step:
    """Hold the request without answering; set *closed* when the client closes the
    connection (the hang guard: the connection's own 30 s timeout)."""

    def step(conn: socket.socket, head: bytes, body: bytes) -> bool:
        return held_until_closed(conn, closed)

    return step


def answer_then_close(closed: threading.Event) -> Step:
    """Answer (keep-alive, as far as the client can tell), then close; *closed* is set once
    the connection is closed."""

    def step(conn: socket.socket, head: bytes, body: bytes) -> bool:
        answer(conn, head, body)
        conn.shutdown(socket.SHUT_RDWR)
        conn.close()
        closed.set()
        return False

    return step


class ScriptedUpstream:
    """``with ScriptedUpstream(step, ...) as up``: ``up.url``; request *i* runs ``steps[i]``
    (the last step repeats). ``up.requests`` holds every (head, body) received,
    ``up.connections`` the number of connections accepted."""

    def __init__(self, *steps: Step) -> None:
        assert steps
        self.steps = steps
        self.requests: list[tuple[bytes, bytes]] = []
        self.connections = 0
        self._lock = threading.Lock()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.05)
        self.port: int = self._listener.getsockname()[1]
        self._threads: list[threading.Thread] = []
        self._open: list[socket.socket] = []
        self._stop = threading.Event()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> ScriptedUpstream:
        thread = threading.Thread(target=self._accept, daemon=True)
        thread.start()
        self._threads.append(thread)
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._listener.close()
        with self._lock:
            for conn in self._open:  # a client's kept-alive connection: its thread ends now
                with contextlib.suppress(OSError):
                    conn.shutdown(socket.SHUT_RDWR)
        for thread in self._threads:
            thread.join(10)

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            with self._lock:
                self.connections += 1
                self._open.append(conn)
            thread = threading.Thread(target=self._serve, args=(conn,), daemon=True)
            thread.start()
            self._threads.append(thread)

    def _serve(self, conn: socket.socket) -> None:
        conn.settimeout(30)
        try:
            for head, body in _requests(conn):
                with self._lock:
                    index = len(self.requests)
                    self.requests.append((head, body))
                step = self.steps[min(index, len(self.steps) - 1)]
                if not step(conn, head, body):
                    break
        except OSError:
            pass
        finally:
            conn.close()


def _requests(conn: socket.socket) -> Iterator[tuple[bytes, bytes]]:
    buffer = b""
    while True:
        while b"\r\n\r\n" not in buffer:
            data = conn.recv(65536)
            if not data:
                return
            buffer += data
        head, _, buffer = buffer.partition(b"\r\n\r\n")
        size = 0
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                size = int(value)
        while len(buffer) < size:
            data = conn.recv(65536)
            if not data:
                return
            buffer += data
        yield head, buffer[:size]
        buffer = buffer[size:]


# -- hostile replies ---------------------------------------------------------------------------

JSON_TYPE = b"application/json"
SSE_TYPE = b"text/event-stream"
#: A block of SSE comment lines (valid, and ignored by every reader): a stream of them is
#: bounded by nothing but the gateway's stream limit.
COMMENTS = b": " + b"x" * 1020 + b"\n"


def gzip_bomb(decoded: int, block: bytes = b"\0") -> bytes:
    """*decoded* bytes of *block* repeated, gzip-compressed (~1,000:1 for zeros)."""
    compressor = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    piece = block * max(1, (1 << 20) // len(block))
    parts = [compressor.compress(piece) for _ in range(decoded // len(piece))]
    return b"".join([*parts, compressor.flush()])


def compressed(data: bytes, content_type: bytes = JSON_TYPE) -> Step:
    """Reply 200 with *data* as a gzip ``content-encoding`` body."""

    def step(conn: socket.socket, head: bytes, body: bytes) -> bool:
        conn.sendall(
            b"HTTP/1.1 200 OK\r\ncontent-type: %s\r\ncontent-encoding: gzip\r\n"
            b"content-length: %d\r\n\r\n" % (content_type, len(data))
        )
        conn.sendall(data)
        return True

    return step


def huge(size: int, content_type: bytes = JSON_TYPE, block: bytes = b"x" * (1 << 20)) -> Step:
    """Reply 200 with a *size*-byte body of *block* repeated (sent until the client hangs up)."""

    def step(conn: socket.socket, head: bytes, body: bytes) -> bool:
        conn.sendall(
            b"HTTP/1.1 200 OK\r\ncontent-type: %s\r\ncontent-length: %d\r\n\r\n"
            % (content_type, size)
        )
        piece = block * max(1, (1 << 20) // len(block))
        sent = 0
        while sent < size:
            part = piece[: size - sent]
            conn.sendall(part)
            sent += len(part)
        return True

    return step


def by_marker(steps: dict[bytes, Step], default: Step = answer) -> Step:
    """The step whose marker the request's body holds (else *default*)."""

    def step(conn: socket.socket, head: bytes, body: bytes) -> bool:
        for marker, chosen in steps.items():
            if marker in body:
                return chosen(conn, head, body)
        return default(conn, head, body)

    return step


def big_completion(content: int) -> tuple[bytes, bytes, int]:
    """A valid Chat Completions reply whose text is *content* bytes: (head, tail, filler
    size) around ``"a" * size``, the size *content* rounded down to whole MiB, for
    :func:`gzip_completion` and :func:`huge_completion`."""
    text = COMPLETION.decode()
    head, _, tail = text.partition('"hello"')
    return (head + '"').encode(), ('"' + tail).encode(), content - content % (1 << 20)


def gzip_completion(content: int) -> bytes:
    """:func:`big_completion` gzip-compressed (a bomb that decodes to a valid reply)."""
    head, tail, size = big_completion(content)
    compressor = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    piece = b"a" * (1 << 20)
    parts = [compressor.compress(head)]
    parts += [compressor.compress(piece) for _ in range(size // len(piece))]
    parts += [compressor.compress(tail), compressor.flush()]
    return b"".join(parts)


def huge_completion(content: int) -> Step:
    """Reply 200 with :func:`big_completion` uncompressed, sent as it is made."""
    head, tail, size = big_completion(content)

    def step(conn: socket.socket, head_: bytes, body: bytes) -> bool:
        conn.sendall(
            b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n"
            % (len(head) + size + len(tail))
        )
        conn.sendall(head)
        piece = b"a" * (1 << 20)
        for _ in range(size // len(piece)):
            conn.sendall(piece)
        conn.sendall(tail)
        return True

    return step


def long_stream(comments: int) -> Step:
    """A valid SSE reply with *comments* bytes of comment lines before its events."""

    def step(conn: socket.socket, head: bytes, body: bytes) -> bool:
        block = COMMENTS * 1024
        count = max(1, comments // len(block))
        size = count * len(block) + len(STREAM)
        conn.sendall(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: %d\r\n\r\n"
            % size
        )
        for _ in range(count):
            conn.sendall(block)
        conn.sendall(STREAM)
        return True

    return step
