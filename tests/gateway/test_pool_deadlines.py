"""The first-byte bound of a streamed attempt (tpx.gateway.pool._within): asyncio.timeout's
semantics on one loop timer shared by every attempt in flight."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tpx.gateway import pool as pool_module


async def _never() -> Any:
    await asyncio.Event().wait()


async def _soon(value: str) -> str:
    await asyncio.sleep(0)
    return value


def test_an_attempt_with_an_earlier_deadline_moves_the_one_timer() -> None:
    async def main() -> bool:
        long = asyncio.ensure_future(pool_module._within(_never(), 3600.0))
        await asyncio.sleep(0)  # the timer armed for the long one
        # the later attempt has the earlier deadline: it times out then, the long one waits
        async with asyncio.timeout(30):  # not the hour the first deadline is
            with pytest.raises(TimeoutError):
                await pool_module._within(_never(), 0.01)
        deadlines = pool_module._DEADLINES[asyncio.get_running_loop()]
        assert len(deadlines.waiting) == 1
        assert not long.done()
        long.cancel()
        with pytest.raises(asyncio.CancelledError):
            await long
        return not deadlines.waiting

    assert asyncio.run(main())


def test_an_attempt_that_answers_in_time_is_not_cancelled() -> None:
    async def main() -> tuple[str, str]:
        first = await pool_module._within(_soon("a"), 60.0)
        second = await pool_module._within(_soon("b"), 60.0)
        assert not pool_module._DEADLINES[asyncio.get_running_loop()].waiting
        await asyncio.sleep(0)  # no cancellation left pending for this task
        return first, second

    assert asyncio.run(main()) == ("a", "b")


def test_a_cancellation_from_elsewhere_is_passed_on_not_turned_into_a_timeout() -> None:
    async def main() -> None:
        task = asyncio.ensure_future(pool_module._within(_never(), 60.0))
        await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())


def test_the_deadline_timer_keeps_running_for_attempts_left_after_one_ends() -> None:
    async def main() -> bool:
        waiting = asyncio.ensure_future(pool_module._within(_never(), 0.05))
        assert await pool_module._within(_soon("x"), 0.01) == "x"
        with pytest.raises(TimeoutError):
            await waiting
        return True

    assert asyncio.run(main())
