"""The audit's lanes (:func:`tpx.audit.lanes.in_lanes`): outcomes in the items' order
whatever order they finish in, never more items under way than lanes, and a stop at the
first item in the items' order that holds it, not the first in time. Each property is a
check run on the real function and on a seeded bug of it, which it must catch."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine, Sequence
from typing import Any

import pytest

from tpx.audit.lanes import in_lanes

InLanes = Callable[..., Coroutine[Any, Any, list[Any]]]


async def _completion_order(
    lanes: Sequence[Any], count: int, take: Any, stop: Callable[[Any], bool]
) -> list[Any]:
    """Seeded bug: the outcomes in the order they finished."""
    done: list[Any] = []
    upcoming = iter(range(count))

    async def loop(lane: Any) -> None:
        for index in upcoming:
            done.append(await take(lane, index))

    await asyncio.gather(*(loop(lane) for lane in lanes))
    return done


async def _stops_at_first_in_time(
    lanes: Sequence[Any], count: int, take: Any, stop: Callable[[Any], bool]
) -> list[Any]:
    """Seeded bug: the run stops at the first outcome, in time, that *stop* holds (items
    before it still under way are lost)."""
    outcomes: dict[int, Any] = {}
    upcoming = iter(range(count))
    stopped = False

    async def loop(lane: Any) -> None:
        nonlocal stopped
        for index in upcoming:
            if stopped:
                return
            outcome = await take(lane, index)
            if stopped:
                return
            outcomes[index] = outcome
            stopped = stop(outcome)

    await asyncio.gather(*(loop(lane) for lane in lanes))
    return [outcomes[i] for i in sorted(outcomes)]


async def _one_lane_for_all(
    lanes: Sequence[Any], count: int, take: Any, stop: Callable[[Any], bool]
) -> list[Any]:
    """Seeded bug: every item started at once, whatever the lanes."""
    outcomes = await asyncio.gather(*(take(lanes[0], i) for i in range(count)))
    out = []
    for outcome in outcomes:
        out.append(outcome)
        if stop(outcome):
            break
    return out


def _later_first(impl: InLanes) -> list[Any]:
    """Eight items on eight lanes, item k finishing only after item k+1 has."""
    finished = [asyncio.Event() for _ in range(9)]

    async def take(lane: int, index: int) -> int:
        if index < 7:
            await finished[index + 1].wait()
        finished[index].set()
        return index

    return asyncio.run(impl(range(8), 8, take, lambda _: False))


def _most_in_flight(impl: InLanes) -> tuple[int, list[Any]]:
    """Twelve items on three lanes: how many were under way at once, and the outcomes."""
    flight = [0, 0]

    async def take(lane: int, index: int) -> tuple[int, int]:
        flight[0] += 1
        flight[1] = max(flight)
        for _ in range(3):  # other lanes run in between
            await asyncio.sleep(0)
        flight[0] -= 1
        return lane, index

    outcomes = asyncio.run(impl(range(3), 12, take, lambda _: False))
    return flight[1], outcomes


def _stopped(impl: InLanes) -> list[Any]:
    """Ten items on four lanes; items 2 and 3 stop the run, item 3 finishing first."""
    three_done = asyncio.Event()

    async def take(lane: int, index: int) -> int:
        if index == 2:
            await three_done.wait()
        if index == 3:
            three_done.set()
        return index

    return asyncio.run(impl(range(4), 10, take, lambda i: i in (2, 3)))


def test_outcomes_come_in_the_items_order() -> None:
    assert _later_first(in_lanes) == list(range(8))


def test_never_more_items_under_way_than_lanes() -> None:
    most, outcomes = _most_in_flight(in_lanes)
    assert most == 3
    assert [index for _, index in outcomes] == list(range(12))
    assert {lane for lane, _ in outcomes} == {0, 1, 2}


def test_the_run_stops_at_the_first_item_in_order_that_stops_it() -> None:
    assert _stopped(in_lanes) == [0, 1, 2]


def test_no_items_no_outcomes() -> None:
    async def take(lane: int, index: int) -> int:
        raise AssertionError("no item to take")

    assert asyncio.run(in_lanes(range(2), 0, take, lambda _: True)) == []


def test_a_failing_item_ends_the_run_with_its_error() -> None:
    async def take(lane: int, index: int) -> int:
        if index == 5:
            raise RuntimeError("item 5")
        await asyncio.sleep(0)
        return index

    with pytest.raises(RuntimeError, match="item 5"):
        asyncio.run(in_lanes(range(3), 20, take, lambda _: False))


@pytest.mark.parametrize(
    ("seeded", "check"),
    [
        (_completion_order, lambda impl: _later_first(impl) == list(range(8))),
        (_one_lane_for_all, lambda impl: _most_in_flight(impl)[0] == 3),
        (_stops_at_first_in_time, lambda impl: _stopped(impl) == [0, 1, 2]),
    ],
    ids=["completion_order", "one_lane_for_all", "stops_at_first_in_time"],
)
def test_each_seeded_bug_of_the_lanes_is_caught(
    seeded: InLanes, check: Callable[[InLanes], bool]
) -> None:
    assert check(in_lanes)
    assert not check(seeded)
