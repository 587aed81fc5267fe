"""Seeded bugs of the failover: each breaks one rule of tpx.gateway.dispatch / tpx.gateway.pool
the way a plausible change would, and the test of tests/gateway/test_pool.py that must then
fail (so each of those tests can fail, and does for that bug)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine
from pathlib import Path
from typing import Any

import httpx2
import pytest

from tests.gateway import test_pool as pool_tests
from tpx.gateway import dispatch, drive
from tpx.gateway import pool as pool_module

Patch = Callable[[pytest.MonkeyPatch], None]


def _failover_after_the_first_byte(mp: pytest.MonkeyPatch) -> None:
    """The failover point forgets that bytes already reached the client."""

    def retarget(*args: Any, started: bool, now: float) -> Any:
        return dispatch.retarget(*args, started=False, now=now)

    mp.setattr(pool_module, "retarget", retarget)


def _hedged_attempt(mp: pytest.MonkeyPatch) -> None:
    """A double send: an attempt past first_byte_timeout is left running (not cancelled)
    while the next upstream is asked."""

    async def within(opening: Awaitable[httpx2.Response], timeout: float | None) -> Any:
        task = asyncio.ensure_future(opening)
        done, _ = await asyncio.wait({task}, timeout=timeout)
        if not done:
            raise TimeoutError
        return task.result()

    mp.setattr(pool_module, "_within", within)


def _resent_after_sending(mp: pytest.MonkeyPatch) -> None:
    """A double send: a connection lost after the request was written fails over too."""
    mp.setattr(dispatch.Failure, "retryable", property(lambda self: True))


def _lost_cooldown(mp: pytest.MonkeyPatch) -> None:
    """The cooldown is computed but never kept: the failed upstream is asked again at once."""
    failed = dispatch.Dispatcher.failed

    def forgetting(self: dispatch.Dispatcher, name: str, failure: Any, now: float) -> float:
        seconds = failed(self, name, failure, now)
        self.health[name].cooling_until = 0.0
        return seconds

    mp.setattr(dispatch.Dispatcher, "failed", forgetting)


def _answer_left_open(mp: pytest.MonkeyPatch) -> None:
    """A response that came while the client was leaving is dropped unclosed: its attempt
    stays in flight for ever (the balancing then avoids a healthy upstream)."""

    async def drop(opening: asyncio.Future[Any], upstream: Any) -> None:
        if not opening.done():
            opening.cancel()

    mp.setattr(drive, "_drop", drop)


def _run(test: Callable[..., Coroutine[Any, Any, None]], *args: Any) -> None:
    asyncio.run(test(*args))


BUGS: dict[str, tuple[Patch, Callable[[Path, pytest.MonkeyPatch], None]]] = {
    "failover_after_the_first_byte": (
        _failover_after_the_first_byte,
        lambda tmp, mp: _run(pool_tests.test_no_failover_once_a_byte_reached_the_client, tmp),
    ),
    "hedged_attempt": (
        _hedged_attempt,
        lambda tmp, mp: _run(
            pool_tests.test_a_timeout_before_the_first_byte_ends_the_attempt_before_the_next_begins,
            tmp,
        ),
    ),
    "resent_after_sending": (
        _resent_after_sending,
        lambda tmp, mp: _run(
            pool_tests.test_a_connection_lost_after_the_request_was_sent_is_not_sent_again, tmp
        ),
    ),
    "answer_left_open": (
        _answer_left_open,
        lambda tmp, mp: _run(
            pool_tests.test_a_client_gone_while_pinging_ends_the_attempt_that_answered_meanwhile,
            tmp,
        ),
    ),
    "lost_cooldown": (
        _lost_cooldown,
        lambda tmp, mp: _run(
            pool_tests.test_a_failure_before_the_first_byte_fails_over_and_cools_the_upstream_down,
            tmp,
            ("status", 503, None),
            True,
        ),
    ),
}


@pytest.mark.parametrize("name", list(BUGS))
def test_each_seeded_bug_is_caught(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    patch, test = BUGS[name]
    test(tmp_path, monkeypatch)  # passes as the code is
    patch(monkeypatch)
    with pytest.raises(AssertionError):
        test(tmp_path, monkeypatch)
