"""tpx.gateway.dispatch: balancing, cooldowns, retry-after and the failover point, without I/O
(the clock is a number)."""

from __future__ import annotations

import pytest

from tpx.gateway.credential import Credential
from tpx.gateway.dispatch import (
    Attempt,
    Dispatcher,
    Failure,
    GiveUp,
    Plan,
    first,
    retarget,
    retry_after,
    retryable_status,
)
from tpx.gateway.routing import Options, Routing, UpstreamConfig


def _dispatcher(**options: float) -> Dispatcher:
    def upstream(name: str, weight: float = 1.0, concurrency: int | None = None) -> UpstreamConfig:
        return UpstreamConfig(
            name, f"http://{name}", Credential("t"), weight=weight, concurrency=concurrency
        )

    routing = Routing(
        (upstream("a"), upstream("b", weight=2.0), upstream("c", concurrency=1)),
        options=Options(**options),  # type: ignore[arg-type]
    )
    return Dispatcher(routing)


def test_the_least_loaded_available_upstream_is_picked_relative_to_its_weight() -> None:
    d = _dispatcher()
    assert d.pick(("a", "b", "c"), 0.0) == "a"  # a tie: the route's order
    d.began("a")
    assert d.pick(("a", "b", "c"), 0.0) == "b"
    d.began("b")
    d.began("b")  # b: 2 in flight at weight 2 == a: 1 at weight 1
    assert d.pick(("a", "b", "c"), 0.0) == "c"
    d.began("c")  # c is at its concurrency limit
    assert d.pick(("a", "b", "c"), 0.0) == "a"
    d.ended("a")
    assert d.pick(("a", "b"), 0.0) == "a"


def test_a_failure_cools_an_upstream_down_exponentially_up_to_the_bound() -> None:
    d = _dispatcher(cooldown=1.0, cooldown_max=5.0)
    seconds = [d.failed("a", Failure("connect"), 0.0) for _ in range(5)]
    assert seconds == [1.0, 2.0, 4.0, 5.0, 5.0]
    assert not d.available("a", 4.9)
    assert d.pick(("a", "b"), 4.9) == "b"
    d.succeeded("a")  # a success closes the breaker and starts the count over
    assert d.available("a", 0.0)
    assert d.failed("a", Failure("connect"), 0.0) == 1.0


def test_retry_after_sets_the_cooldown_within_the_bound() -> None:
    d = _dispatcher(cooldown_max=30.0)
    assert d.failed("a", Failure("status", 529, retry_after=7.0), 100.0) == 7.0
    assert not d.available("a", 106.9)
    assert d.available("a", 107.0)
    assert d.failed("b", Failure("status", 429, retry_after=3600.0), 0.0) == 30.0


def test_the_failover_goes_to_the_next_upstream_only_before_the_first_byte() -> None:
    d = _dispatcher()
    plan = Plan(("a", "b", "c"))
    assert first(d, plan, 0.0) == Attempt("a")
    assert retarget(d, plan, Failure("status", 503), started=False, now=0.0) == Attempt("b")
    assert not d.available("a", 0.5)  # the failed one cools down
    step = retarget(d, plan, Failure("connect"), started=True, now=0.0)
    assert step == GiveUp("bytes reached the client")
    assert not d.available("b", 0.5)  # even when the client sees the failure


@pytest.mark.parametrize(
    "failure",
    [Failure("status", 400), Failure("status", 401), Failure("network"), Failure("status", 404)],
)
def test_failures_another_upstream_cannot_answer_better_do_not_fail_over(
    failure: Failure,
) -> None:
    d = _dispatcher()
    plan = Plan(("a", "b"))
    first(d, plan, 0.0)
    assert isinstance(retarget(d, plan, failure, started=False, now=0.0), GiveUp)
    assert d.available("a", 0.0)  # and cause no cooldown


def test_a_short_retry_after_is_waited_for_on_the_same_upstream_once() -> None:
    d = _dispatcher(retry_after_max=2.0)
    plan = Plan(("a", "b"))
    first(d, plan, 0.0)
    busy = Failure("status", 529, retry_after=1.5)
    assert retarget(d, plan, busy, started=False, now=0.0) == Attempt("a", 1.5)
    assert retarget(d, plan, busy, started=False, now=1.5) == Attempt("b")  # then over
    long = Plan(("a", "b"))
    first(d, long, 10.0)
    step = retarget(d, long, Failure("status", 429, retry_after=30.0), started=False, now=10.0)
    assert step == Attempt("b")  # too long to wait: failed over at once


def test_attempts_are_bounded() -> None:
    d = _dispatcher(max_attempts=2)
    plan = Plan(("a", "b", "c"))
    first(d, plan, 0.0)
    assert retarget(d, plan, Failure("connect"), started=False, now=0.0) == Attempt("b")
    assert retarget(d, plan, Failure("connect"), started=False, now=0.0) == GiveUp("max_attempts")


def test_a_timeout_moves_on_only_with_failover_on_timeout() -> None:
    """The timed-out request may have been written: by default the exchange ends (one
    generation at most); with ``failover_on_timeout`` it moves on. It cools down either way,
    and the plan keeps when each cooldown ends."""
    for moves, expected in (
        (False, GiveUp("a timeout after the request may have been written")),
        (True, Attempt("b")),
    ):
        d = _dispatcher(failover_on_timeout=moves)
        plan = Plan(("a", "b"))
        first(d, plan, 0.0)
        assert retarget(d, plan, Failure("timeout"), started=False, now=0.0) == expected
        assert not d.available("a", 0.5)
        assert plan.cooled == {"a": 1.0}


def test_a_broken_stream_never_moves_and_cools_its_upstream_down() -> None:
    d = _dispatcher()
    plan = Plan(("a", "b"))
    first(d, plan, 0.0)
    step = retarget(d, plan, Failure("broken"), started=True, now=0.0)
    assert step == GiveUp("bytes reached the client")
    assert not d.available("a", 0.5)


def test_when_every_upstream_cools_down_the_soonest_is_still_tried() -> None:
    """Never a refusal without an attempt (one failure does not make a route answer 429)."""
    d = _dispatcher()
    d.failed("a", Failure("connect"), 0.0)  # until 1
    d.failed("b", Failure("status", 503, retry_after=0.5), 0.0)  # until 0.5
    plan = Plan(("a", "b"))
    assert first(d, plan, 0.1) == Attempt("b")
    assert retarget(d, plan, Failure("connect"), started=False, now=0.1) == Attempt("a")
    assert retarget(d, plan, Failure("connect"), started=False, now=0.1) == GiveUp(
        "no other upstream in the route"
    )


def test_probes_are_due_for_cooling_upstreams_one_at_a_time() -> None:
    d = _dispatcher(probe_interval=5.0, cooldown=60.0)
    d.failed("a", Failure("connect"), 0.0)
    assert d.due_probes(4.0) == []
    assert d.due_probes(5.0) == ["a"]
    assert d.due_probes(50.0) == []  # its probe is still running
    d.probed("a", False, 50.0)
    assert d.due_probes(54.0) == []
    assert d.due_probes(55.0) == ["a"]
    d.probed("a", True, 55.0)
    assert d.available("a", 55.0)  # recovered before its cooldown ended
    assert _dispatcher(probe_interval=0.0).due_probes(1e9) == []


def test_statuses_and_retry_after_headers() -> None:
    assert [s for s in (200, 400, 408, 429, 500, 502, 503, 529) if retryable_status(s)] == [
        429,
        500,
        502,
        503,
        529,
    ]
    assert [retry_after(v) for v in ("2", " 0.5 ", "-1", "nan", "Wed, 21 Oct 2015", None)] == [
        2.0,
        0.5,
        None,
        None,
        None,
        None,
    ]
