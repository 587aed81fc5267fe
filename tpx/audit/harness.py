"""The replay's machinery: an event loop in a thread (the fake upstreams and every HTTP
client run on it), and real ``tpx serve`` processes on loopback, one per boot selection
(the spec's initial ``hasKey`` / ``hasToken``), started once and reused.

``Harness.run(coro)`` runs a coroutine on the loop from the test's thread.
``Harness.gateway(has_key, has_token, bug=None, ping_interval=None, monitor=False)`` is the
``tpx serve`` process for that boot, started as :mod:`tpx.audit.serve` (``bug``: a process
of its own with that seeded bug patched in, started by the module the harness was given as
``bug_launcher``: the seeded bugs are the test suite's, ``conformance/serve.py`` in the
repository, and the installed package has none; ``ping_interval``: one started with a
config file setting ``[limits] ping_interval``, so streams carry ``ping`` events while a
request is held; ``monitor``: one started with ``--monitor``). :meth:`Harness.metrics`
reads a process's ``/metrics`` (the tail cache's hits among them).
"""

from __future__ import annotations

import asyncio
import collections
import logging
import os
import re
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, TypeVar

import attrs
import httpx2
import uvicorn

from tpx.audit.upstream import FakeUpstreams

__all__ = [
    "API_KEY",
    "GATEWAY_KEY",
    "GATEWAY_SECRET",
    "OAUTH_TOKEN",
    "Gateway",
    "Harness",
    "launch",
    "serve_env",
    "stop_serving",
    "terminate",
]

T = TypeVar("T")

GATEWAY_KEY = "conformance-gateway-key"
API_KEY = "sk-ant-conformance-key"
OAUTH_TOKEN = "conformance-oauth-token"
#: TPX_GATEWAY_SECRET: the key the gateway signs the ids it hands out with
GATEWAY_SECRET = b"conformance-gateway-secret"
_LISTENING = re.compile(r"listening on (http://[0-9.]+:[0-9]+) \(provider (\w+),")
#: the tail cache's hits in the ``/metrics`` of the replay's processes (:mod:`tpx.audit.serve`)
TAIL_HITS = "tpx_conformance_tail_cache_hits"
#: a hang guard only (nothing waits on time): how long one step may take at most
STEP_GUARD_S = 120.0


@attrs.define(eq=False)
class Gateway:
    """One running ``tpx serve``."""

    has_key: bool
    has_token: bool
    bug: str | None
    ping_interval: float | None
    monitor: bool
    url: str
    provider: str  # as its start-up line says
    popen: subprocess.Popen[str]
    tail: collections.deque[str]
    drain: threading.Thread

    def stop(self) -> None:
        stop_serving(self.popen, self.drain)

    def output(self) -> str:
        return "\n".join(self.tail)


def serve_env() -> dict[str, str]:
    """The environment of a ``tpx serve`` child: this process's ``PATH``, ``HOME``, ``LANG``
    and ``TMPDIR``, the gateway's key and secrets, and this process's import path."""
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG", "TMPDIR")}
    env.update(
        {
            "TPX_GATEWAY_KEY": GATEWAY_KEY,
            "TPX_GATEWAY_SECRET": GATEWAY_SECRET.decode(),
            "TPX_THINKING_SECRET": "conformance-thinking-secret",
            # the children import what this process imports
            "PYTHONPATH": os.pathsep.join(p for p in sys.path if p),
        }
    )
    return env


def launch(
    cmd: list[str], env: dict[str, str], listening: re.Pattern[str]
) -> tuple[subprocess.Popen[str], re.Match[str], collections.deque[str], threading.Thread]:
    """Start ``tpx serve`` as *cmd* and read its stderr up to its start-up line (the first
    that *listening* matches): the process, that match, the last 200 lines of its stderr,
    and the daemon thread that goes on reading them into that tail."""
    popen = subprocess.Popen(
        cmd,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert popen.stderr is not None
    tail: collections.deque[str] = collections.deque(maxlen=200)
    match = None
    for line in popen.stderr:  # blocks until the start-up line (or the process ends)
        tail.append(line.rstrip("\n"))
        match = listening.search(line)
        if match:
            break
    if match is None:
        popen.wait(30)
        popen.stderr.close()
        raise RuntimeError("tpx serve did not start:\n" + "\n".join(tail))
    stream = popen.stderr

    def drain() -> None:  # the per-exchange log lines: keep the last ones
        for line in stream:
            tail.append(line.rstrip("\n"))

    drainer = threading.Thread(target=drain, daemon=True)
    drainer.start()
    return popen, match, tail, drainer


def terminate(popen: subprocess.Popen[Any]) -> None:
    """End *popen* if it runs: terminated; killed if it outlives that by 30 s."""
    if popen.poll() is None:
        popen.terminate()
        try:
            popen.wait(30)
        except subprocess.TimeoutExpired:
            popen.kill()
            popen.wait(30)


def stop_serving(popen: subprocess.Popen[str], drain: threading.Thread) -> None:
    """End a process :func:`launch` started (:func:`terminate`) and the thread reading its
    stderr."""
    terminate(popen)
    drain.join(30)
    if popen.stderr is not None:
        popen.stderr.close()


def _until_healthy(gw: Gateway) -> None:
    """The start-up contract: poll ``GET /healthz`` until 200 (the socket is bound before
    the application has started; a TPX gateway loads its tokenizer first)."""
    for _ in range(6000):
        if gw.popen.poll() is not None:
            raise RuntimeError("tpx serve ended:\n" + gw.output())
        try:
            if httpx2.get(gw.url + "/healthz", timeout=30).status_code == 200:
                return
        except httpx2.TransportError:
            pass
        time.sleep(0.02)  # start-up only; no replay step ever waits on time
    raise RuntimeError("tpx serve never became healthy:\n" + gw.output())


class _BrokenStreams(logging.Filter):
    """The fake breaks streams off on purpose (ProviderFail): uvicorn's one line about it
    is expected, not news."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "returned without completing response" not in record.getMessage()


class Harness:
    def __init__(
        self, listen: tuple[str, int] = ("127.0.0.1", 0), bug_launcher: str | None = None
    ) -> None:
        #: the module ``python -m`` runs for a gateway with a seeded bug (``--bug NAME --``
        #: then ``tpx serve``'s arguments)
        self.bug_launcher = bug_launcher
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()
        self.upstreams = FakeUpstreams()
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # replies in one go
        sock.bind(listen)
        self.upstream_url = f"http://{listen[0]}:{sock.getsockname()[1]}"
        config = uvicorn.Config(
            self.upstreams, log_level="warning", access_log=False, lifespan="off"
        )
        self._server = uvicorn.Server(config)
        logging.getLogger("uvicorn.error").addFilter(_BrokenStreams())
        self._serving = asyncio.run_coroutine_threadsafe(
            self._server.serve(sockets=[sock]), self.loop
        )
        self._gateways: dict[tuple[bool, bool, str | None, float | None, bool], Gateway] = {}
        self._configs = tempfile.TemporaryDirectory(prefix="tpx-gw-http-")

    def started(self) -> bool:
        """The scripted upstream accepts connections."""
        return bool(self._server.started)

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    def gateway(
        self,
        has_key: bool,
        has_token: bool,
        bug: str | None = None,
        ping_interval: float | None = None,
        monitor: bool = False,
    ) -> Gateway:
        key = (has_key, has_token, bug, ping_interval, monitor)
        gw = self._gateways.get(key)
        if gw is None or gw.popen.poll() is not None:
            gw = self._gateways[key] = self._start(*key)
        return gw

    def stop_gateways(self, bug: str) -> None:
        """Stop every process started with *bug*."""
        for key, gw in list(self._gateways.items()):
            if gw.bug == bug:
                gw.stop()
                del self._gateways[key]

    def metrics(self, gw: Gateway) -> dict[str, float]:
        """``gw``'s ``/metrics``: sample (name and labels, as rendered) -> value."""
        text = httpx2.get(gw.url + "/metrics", timeout=30).text
        out: dict[str, float] = {}
        for line in text.splitlines():
            if line and not line.startswith("#"):
                name, _, value = line.rpartition(" ")
                out[name] = float(value)
        return out

    def _start(
        self,
        has_key: bool,
        has_token: bool,
        bug: str | None,
        ping_interval: float | None,
        monitor: bool,
    ) -> Gateway:
        env = serve_env()
        if has_key:
            env["ANTHROPIC_API_KEY"] = API_KEY
            env["ANTHROPIC_BASE_URL"] = self.upstream_url
        if has_token:
            env["TPX_OAUTH_TOKEN"] = OAUTH_TOKEN
            env["TPX_BASE_URL"] = self.upstream_url + "/v1"
        cmd = [sys.executable, "-m", "tpx.audit.serve"]
        if bug is not None:
            if self.bug_launcher is None:
                raise ValueError(
                    f"a gateway with the seeded bug {bug!r} needs a bug_launcher "
                    "(the module that patches it in)"
                )
            cmd = [sys.executable, "-m", self.bug_launcher, "--bug", bug]
        cmd += ["--", "serve", "--host", "127.0.0.1", "--port", "0"]
        if monitor:
            cmd.append("--monitor")
        if ping_interval is not None:
            config = Path(self._configs.name) / f"ping-{ping_interval}.toml"
            config.write_text(f"[limits]\nping_interval = {ping_interval!r}\n", encoding="utf-8")
            cmd += ["--config", str(config)]
        popen, match, tail, drainer = launch(cmd, env, _LISTENING)
        url, provider = match.group(1), match.group(2)
        gw = Gateway(
            has_key, has_token, bug, ping_interval, monitor, url, provider, popen, tail, drainer
        )
        _until_healthy(gw)
        return gw

    def close(self) -> None:
        for gw in list(self._gateways.values()):
            gw.stop()
        self._gateways.clear()
        self._configs.cleanup()
        self._server.should_exit = True
        self._serving.result(60)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(60)
        self.loop.close()
