"""The audit's lanes: items ``0 .. count-1`` taken in order by whichever lane is free, at
most one per lane at a time, their outcomes handed back in the items' order.

A lane is whatever takes an item (the audit's: an :class:`tpx.audit.run.AuditReplayer`,
with its own clients); *stop* ends the run at the first item (in the items' order, not in
time) whose outcome it holds: nothing after that item is started, and the outcomes of
those after it already under way are dropped, so the outcomes handed back are those one
lane taking the items one by one would have had, up to that item.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

__all__ = ["JOBS", "in_lanes"]

#: ``tpx audit --jobs``: the behaviours in flight together by default (the audit's own
#: time is mostly waiting for the endpoint; eight hide that wait on two cores)
JOBS = 8

Lane = TypeVar("Lane")
Out = TypeVar("Out")


async def in_lanes(
    lanes: Sequence[Lane],
    count: int,
    take: Callable[[Lane, int], Awaitable[Out]],
    stop: Callable[[Out], bool],
) -> list[Out]:
    """The outcomes of items ``0 .. count-1`` (*take*: one item on one lane), in order, up
    to and including the first whose outcome *stop* holds."""
    outcomes: dict[int, Out] = {}
    upcoming = iter(range(count))  # shared: each item is taken once, in order
    stop_at = count

    async def lane_loop(lane: Lane) -> None:
        nonlocal stop_at
        for index in upcoming:
            if index > stop_at:
                return
            outcome = await take(lane, index)
            outcomes[index] = outcome
            if stop(outcome):
                stop_at = min(stop_at, index)

    tasks = [asyncio.ensure_future(lane_loop(lane)) for lane in lanes]
    try:
        await asyncio.gather(*tasks)
    except BaseException:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise
    return [outcomes[i] for i in range(min(count, stop_at + 1))]
