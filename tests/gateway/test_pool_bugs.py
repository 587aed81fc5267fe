"""Seeded bugs of the failover: each breaks one rule of tpx.gateway.dispatch / tpx.gateway.pool
the way a plausible change would, and the test of tests/gateway/test_pool.py that must then
fail (so each of those tests can fail, and does for that bug). The bugs the HTTP replay of
the failover runs too are those of :mod:`conformance.pool_bugs`."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import pytest

from conformance.pool_bugs import POOL_BUGS, UNSEEN_POOL_BUGS, Patch
from tests.gateway import test_pool as pool_tests
from tpx.gateway import drive

#: the failover's bugs the HTTP replay runs too, by name
REPLAYED: dict[str, Patch] = {bug.name: bug.patch for bug in (*POOL_BUGS, *UNSEEN_POOL_BUGS)}


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
        REPLAYED["failover_after_the_first_byte"],
        lambda tmp, mp: _run(pool_tests.test_no_failover_once_a_byte_reached_the_client, tmp),
    ),
    "hedged_attempt": (
        REPLAYED["hedged_attempt"],
        lambda tmp, mp: _run(
            pool_tests.test_a_timeout_before_the_first_byte_ends_the_attempt_before_the_next_begins,
            tmp,
        ),
    ),
    "resent_after_sending": (
        REPLAYED["resent_after_sending"],
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
        REPLAYED["lost_cooldown"],
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
