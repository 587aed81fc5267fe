"""CPU work of large requests off the event loop (one event loop serves every client).

:meth:`Offload.handle` runs :meth:`Gateway.handle` for a request whose body is larger than
``limits.offload_bytes``:

* ``POST /v1/messages/count_tokens`` with the TPX provider (parse, checks, translation,
  tiktoken: all pure, the answer a few bytes) in a small PROCESS pool
  (``limits.count_processes``): its parse and token count hold that process's interpreter,
  never the server's. The workers are forked at start-up (from the loaded gateway: they
  share its settings and tokenizer without anything being pickled) and a worker that dies
  is replaced by a fresh pool;
* anything else (a ``/v1/messages`` turn's parse, checks and translation build state the
  turn then uses) in a bounded THREAD pool (``limits.cpu_threads``): the event loop gets the
  interpreter between the steps of that work, but not during one long C call such as
  ``orjson.loads`` of the whole body (docs/limits.md has the figures).

More such requests than workers wait for one (their bodies are already read and bounded).

A forked worker that does not come up within :data:`READY_TIMEOUT` seconds (a fork can
inherit a lock another thread held at that instant, and then never run) is killed, and
count_tokens bodies go to the thread pool instead: start-up never waits longer than that.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import logging
import multiprocessing
import signal
from collections.abc import Callable
from concurrent.futures import Executor, ThreadPoolExecutor
from concurrent.futures.process import BrokenProcessPool, ProcessPoolExecutor
from typing import Any, TypeVar

import attrs

from tpx.gateway.context.asked import Asked, Outcome
from tpx.gateway.context.placement import Placement
from tpx.gateway.core import Forward, Gateway, Request, Response, Turn
from tpx.gateway.wire import COUNT, endpoint_label
from tpx.transport.exchange import Provider

_T = TypeVar("_T")

__all__ = ["READY_TIMEOUT", "Offload"]

logger = logging.getLogger("tpx.gateway")

#: Seconds a forked count worker may take to come up before the pool is given up.
READY_TIMEOUT = 20.0

_CHILD: Gateway | None = None
_PR_SET_PDEATHSIG = 1


def _child_start(gateway: Gateway) -> None:
    """A count worker's own gateway (the parent's settings, no monitor, no metrics kept).
    It ends with its parent: the server's signal handlers (inherited) are dropped, and the
    kernel sends it SIGTERM when the parent goes (Linux), whatever way the parent ends."""
    global _CHILD
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent handles ^C, then ends this
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    _CHILD = Gateway(attrs.evolve(gateway.settings, monitor=False))


def _ready() -> bool:
    return _CHILD is not None


def _count_in_child(request: Request) -> Response:
    assert _CHILD is not None
    result = _CHILD.handle(request)
    assert isinstance(result, Response)  # TPX counts locally: never a Turn or a Forward
    return result


class Offload:
    """The CPU pools of one gateway process (:meth:`start` in the lifespan, :meth:`close`)."""

    def __init__(self, gateway: Gateway) -> None:
        self.gateway = gateway
        self._threads: ThreadPoolExecutor | None = None
        self._counts: ProcessPoolExecutor | None = None

    async def start(self) -> None:
        """Fork the count workers now, while the process is quiet (TPX only)."""
        settings = self.gateway.settings
        if (
            settings.provider is Provider.TPX
            and settings.limits.count_processes > 0
            and not self.gateway.context.asks  # else the upstream counts
        ):
            pool = ProcessPoolExecutor(
                settings.limits.count_processes,
                mp_context=multiprocessing.get_context("fork"),
                initializer=_child_start,
                initargs=(self.gateway,),  # forked: inherited, never pickled
            )
            ready = asyncio.get_running_loop().run_in_executor(pool, _ready)
            try:
                await asyncio.wait_for(ready, READY_TIMEOUT)
            except (TimeoutError, BrokenProcessPool):
                _kill(pool)
                logger.warning(
                    "tpx gateway: the count worker did not start; count_tokens runs in threads"
                )
                return
            self._counts = pool

    async def handle(self, request: Request) -> Response | Turn | Forward | Asked | Placement:
        loop = asyncio.get_running_loop()
        counts = self._counts
        if counts is not None and request.path.rstrip("/") == COUNT:
            try:
                response = await loop.run_in_executor(counts, _count_in_child, request)
            except BrokenProcessPool:  # a worker died (killed, out of memory): start again
                self._counts = None
                counts.shutdown(wait=False, cancel_futures=True)
                await self.start()
                raise
            # what the worker's own gateway counted stays there: counted here again
            self.gateway.count(endpoint_label(request.path), response.status)
            if response.status >= 400:
                self.gateway.metrics.errors.labels(f"GATEWAY_{response.status}").inc()
            return response
        return await loop.run_in_executor(self._thread_pool(), self.gateway.handle, request)

    async def resume(self, asked: Asked, outcome: Outcome) -> Response | Turn:
        """:meth:`Asked.resume` of a large request (its preflight, its translation for the
        wire) on the thread pool."""
        loop = asyncio.get_running_loop()
        result: Response | Turn = await loop.run_in_executor(
            self._thread_pool(), asked.resume, outcome
        )
        return result

    async def call(self, work: Callable[..., _T], *args: Any) -> _T:
        """*work* (a large request's counts and translation) on the thread pool."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._thread_pool(), work, *args)

    @property
    def processes(self) -> bool:
        """Are large count_tokens bodies counted in worker processes?"""
        return self._counts is not None

    def _thread_pool(self) -> Executor:
        if self._threads is None:
            self._threads = ThreadPoolExecutor(
                self.gateway.settings.limits.cpu_threads, thread_name_prefix="tpx-cpu"
            )
        return self._threads

    async def aclose(self) -> None:
        """Stop both pools: work not started is dropped, the count workers exit."""
        pools = [pool for pool in (self._threads, self._counts) if pool is not None]
        self._threads = self._counts = None
        for pool in pools:
            await asyncio.to_thread(pool.shutdown, wait=True, cancel_futures=True)


def _kill(pool: ProcessPoolExecutor) -> None:
    """End *pool* and its workers now, a worker that hangs included (``shutdown`` alone waits
    for work a hung worker never finishes)."""
    workers = list(getattr(pool, "_processes", {}).values())  # no public way before 3.14
    for worker in workers:
        with contextlib.suppress(OSError):
            worker.kill()
    pool.shutdown(wait=False, cancel_futures=True)
