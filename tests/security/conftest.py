"""Fixtures of the security tests: a REAL ``tpx serve`` process, its memory, a fake upstream.

* ``upstream`` (session): the scripted fake OpenAI upstream (:mod:`tests.e2e.fake_openai`,
  script ``load``); steer it with the tags of its docstring (``[hold:gate]``, ``[flood:MB]``,
  ...), release held streams with :meth:`Upstream.release`, read what it got with
  :meth:`Upstream.ledger`.
* ``serve``: a factory, ``serve(upstream=..., env=..., flags=..., limits=..., key=...)``, that
  starts one ``tpx serve`` (one worker, loopback, provider TPX) and returns a :class:`Server`
  once ``GET /healthz`` answers; every server is stopped at the end of the test. *upstream* is
  the fake (default) or any base URL (a hostile upstream of a test's own); *limits* become a
  ``[limits]`` table of a TOML file passed with ``--config``.
* :func:`local_gateway`: the same gateway in THIS process (uvicorn in a thread, the
  upstream a :class:`tests.gateway.fakes.FakeUpstream`), for the fast tests: its settings
  as :func:`tests.gateway.conftest.make_settings` takes them; yields the base URL and the app.
* ``figures``: ``figures(finding, what, value)`` records a measured figure; ``make redteam``
  (``pytest -s``) prints them all at the end, one line each.

:class:`Server` reads its process's memory from ``/proc/PID/status``: :meth:`Server.rss`
(``VmRSS``) and :meth:`Server.peak` (``VmHWM``, the peak since :meth:`Server.reset_peak`),
so a test sees a transient peak, not only what is left after it.

Tests marked ``redteam`` are the heavy ones (hundreds of MB on loopback, seconds each): they
are also marked ``slow`` here, so ``make test`` leaves them to ``make redteam``.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx2
import pytest

from tests.e2e import procs
from tests.e2e.procs import GATEWAY_KEY, UPSTREAM_TOKEN, HarnessError, Proc
from tests.gateway.conftest import make_settings, serving
from tests.gateway.fakes import FakeUpstream
from tpx.gateway.asgi import GatewayApp, create_app

MB = 1 << 20

Figures = Callable[[str, str, str], None]
_FIGURES: list[tuple[str, str, str]] = []


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "redteam: heavy attack on a real tpx serve (make redteam; also slow)"
    )


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.get_closest_marker("redteam") is not None:
            item.add_marker(pytest.mark.slow)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not _FIGURES:
        return
    terminalreporter.section("tpx serve under attack: figures")
    for finding, what, value in _FIGURES:
        terminalreporter.write_line(f"{finding:<28} {what:<52} {value}")


@pytest.fixture
def figures() -> Figures:
    def record(finding: str, what: str, value: str) -> None:
        _FIGURES.append((finding, what, value))

    return record


def status_field(pid: int, name: str) -> int:
    """A ``kB`` field of ``/proc/PID/status`` (``VmRSS``, ``VmHWM``), in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(name + ":"):
            return int(line.split()[1]) * 1024
    raise HarnessError(f"no {name} in /proc/{pid}/status")


@dataclass
class Server:
    """One running ``tpx serve`` (a single process: ``--workers 1``)."""

    proc: Proc
    key: str | None

    @property
    def url(self) -> str:
        return self.proc.url

    @property
    def port(self) -> int:
        return self.proc.port

    @property
    def pid(self) -> int:
        return self.proc.popen.pid

    def rss(self) -> int:
        return status_field(self.pid, "VmRSS")

    def peak(self) -> int:
        return status_field(self.pid, "VmHWM")

    def reset_peak(self) -> None:
        """Start ``VmHWM`` again from the current RSS (``/proc/PID/clear_refs``, Linux 4.0+)."""
        Path(f"/proc/{self.pid}/clear_refs").write_text("5")

    def output(self) -> str:
        return self.proc.output()

    def alive(self) -> bool:
        return self.proc.alive()

    def headers(self, **extra: str) -> dict[str, str]:
        """The headers of an authenticated Messages request."""
        out = {"content-type": "application/json", "anthropic-version": "2023-06-01"}
        if self.key is not None:
            out["x-api-key"] = self.key
        out.update(extra)
        return out

    def connect(self, timeout: float = 30.0) -> socket.socket:
        """A raw TCP connection to the server (for what an HTTP client will not send)."""
        sock = socket.create_connection(("127.0.0.1", self.port), timeout=timeout)
        return sock


@dataclass
class Upstream:
    proc: Proc
    url: str = field(init=False)

    def __post_init__(self) -> None:
        self.url = self.proc.url + "/v1"

    def release(self) -> None:
        """Let every ``[hold:gate]`` stream go on."""
        httpx2.post(self.proc.url + "/_release", timeout=30)

    def ledger(self) -> dict[str, Any]:
        return procs.ledger(self.proc)


@pytest.fixture(scope="session")
def upstream(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Upstream]:
    logdir = tmp_path_factory.mktemp("security-upstream")
    with procs.fake_upstream(logdir, "load") as proc:
        yield Upstream(proc)


def _toml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    return '"' + str(value).replace("\\", "\\\\").replace('"', '\\"') + '"'


def write_config(path: Path, tables: Mapping[str, Mapping[str, Any]]) -> Path:
    lines: list[str] = []
    for name, table in tables.items():
        lines.append(f"[{name}]")
        lines += [f"{k} = {_toml(v)}" for k, v in table.items()]
    path.write_text("\n".join(lines) + "\n")
    return path


Serve = Callable[..., Server]


@pytest.fixture
def serve(tmp_path: Path, upstream: Upstream) -> Iterator[Serve]:
    stack = ExitStack()
    count = 0

    def start(
        *,
        base_url: str | None = None,
        env: Mapping[str, str] | None = None,
        flags: Sequence[str] = (),
        limits: Mapping[str, Any] | None = None,
        config: Mapping[str, Mapping[str, Any]] | None = None,
        key: str | None = GATEWAY_KEY,
        ready_path: str = "/healthz",
    ) -> Server:
        nonlocal count
        count += 1
        tables: dict[str, Mapping[str, Any]] = dict(config or {})
        if limits:
            tables["limits"] = {**tables.get("limits", {}), **limits}
        cmd = [str(procs.tpx_executable()), "serve", "--host", "127.0.0.1"]
        cmd += ["--port", str(procs.free_port()), "--workers", "1"]
        if tables:
            cmd += ["--config", str(write_config(tmp_path / f"tpx-{count}.toml", tables))]
        cmd += list(flags)
        port = int(cmd[cmd.index("--port") + 1])
        environ = procs.base_env()
        environ.update(
            {"TPX_BASE_URL": base_url or upstream.url, "TPX_OAUTH_TOKEN": UPSTREAM_TOKEN}
        )
        if key is not None:
            environ["TPX_GATEWAY_KEY"] = key
        environ.update(env or {})
        popen, log = procs._spawn(f"tpx-serve-{count}", cmd, environ, tmp_path)
        proc = Proc(f"tpx serve #{count}", popen, log, port)
        stack.callback(proc.stop)

        def ready() -> bool:
            try:
                return httpx2.get(proc.url + ready_path, timeout=1).status_code == 200
            except httpx2.TransportError:
                return False

        procs._wait(proc, ready, 60)
        return Server(proc, key)

    with stack:
        yield start


def settle(server: Server, seconds: float = 0.5) -> None:
    """Give the server's allocator a moment after an attack (freed arenas go back)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not server.alive():
            raise HarnessError(f"tpx serve died:\n{server.output()}")
        time.sleep(0.05)


def mb(n: int) -> str:
    return f"{n / MB:.1f} MB"


@contextlib.contextmanager
def local_gateway(
    provider: str = "TPX", fake: FakeUpstream | None = None, **changes: Any
) -> Iterator[tuple[str, GatewayApp]]:
    """The gateway in this process on 127.0.0.1:<ephemeral> (key ``GATEWAY_KEY``); the
    protocol's limits are the settings' (as ``tpx serve`` sets them)."""
    fake = fake or FakeUpstream(provider)
    changes.setdefault("gateway_key", GATEWAY_KEY)
    settings = make_settings(provider, **changes)
    app = create_app(settings, transport=fake.transport())
    limits = settings.limits
    with serving(
        app, header_timeout=limits.header_timeout, max_header_bytes=limits.max_header_bytes
    ) as url:
        yield url, app


class Reader(threading.Thread):
    """Reads a socket until EOF or an error, in the background: what the server answered
    reaches the test even while the test is still sending (the server may answer early)."""

    def __init__(self, sock: socket.socket) -> None:
        super().__init__(daemon=True)
        self.sock = sock
        self.data = bytearray()
        self.error: OSError | None = None
        self.first: float | None = None  # monotonic time of the first byte
        self.start()

    def run(self) -> None:
        try:
            while True:
                chunk = self.sock.recv(65536)
                if not chunk:
                    return
                if self.first is None:
                    self.first = time.monotonic()
                self.data += chunk
        except OSError as exc:
            self.error = exc

    def status(self) -> int | None:
        """The status of the first response received (``None``: none yet)."""
        line = bytes(self.data).split(b"\r\n", 1)[0].split()
        return int(line[1]) if len(line) >= 2 and line[1].isdigit() else None

    def wait(self, timeout: float) -> bytes:
        self.join(timeout)
        return bytes(self.data)


def port_of(url: str) -> int:
    return int(url.rsplit(":", 1)[1])
