"""The live monitor's steps around the exchange: a preflight refusal (PromptTooLong), a
request's upstream attempts (attempt, accept, resend, failover, first byte, recover), and
the in-flight bound (``limits.max_in_flight``: 529 before the wire, BoundedInv)."""

from __future__ import annotations

from typing import Any

import attrs
import httpx2
import pytest

from tpx.gateway.asgi import create_app
from tpx.gateway.metrics import Metrics
from tpx.gateway.monitoring import LiveMonitor, SpecViolationError
from tpx.transport.exchange import ExchangeSnapshot, Provider

from .conftest import GATEWAY_KEY, make_settings, serving
from .fakes import FakeUpstream

AUTH = {"x-api-key": GATEWAY_KEY}


def live(provider: str = "ANTHROPIC", **limits: int) -> LiveMonitor:
    settings = make_settings(provider, monitor=True)
    if limits:
        settings = attrs.evolve(settings, limits=attrs.evolve(settings.limits, **limits))
    return LiveMonitor(settings, Metrics())


def idle(pending: frozenset[str] = frozenset()) -> ExchangeSnapshot:
    return ExchangeSnapshot(
        provider=Provider.ANTHROPIC,
        turn=0,
        phase="idle",
        pending=pending,
        last_outcome="none",
        max_turns=None,
        req_ids=frozenset(),
        wire_shape="messages",
        wire_ids=frozenset(),
        emitted=frozenset(),
        got_shape="messages",
    )


def stopped(call: Any, *args: Any, **kwargs: Any) -> str:
    with pytest.raises(SpecViolationError) as info:
        call(*args, **kwargs)
    return info.value.property


def test_a_preflight_refusal_of_a_request_that_does_not_fit_is_legal() -> None:
    m = live()
    m.start("r", idle(frozenset({"toolu_1"})))
    m.preflight_refused("r", idle(frozenset({"toolu_1"})), input_tokens=9000, maximum=8192)
    assert m.monitor.violations == 0
    (record,) = [e for e in m.monitor.trace("r") if e["#action"] == "PromptTooLong"]
    assert (record["turn"], record["lastOutcome"], record["pending"]) == (1, "err", ["toolu_1"])


def test_a_preflight_refusal_of_a_request_that_fits_is_stopped() -> None:
    m = live()
    m.start("r", idle())
    prop = stopped(m.preflight_refused, "r", idle(), input_tokens=8192, maximum=8192)
    assert prop == "RefusesOnlyWrong"
    assert m.violations.labels("RefusesOnlyWrong")._value.get() == 1


def test_legal_attempts_pass() -> None:
    m = live()
    m.attempt("r", "big")
    m.resend("r")  # a stale pooled connection: nothing was written
    m.accept("r")
    m.failover("r", "small")  # big answered 529 before any byte
    m.accept("r")
    m.first_byte("r")
    assert m.attempts.health == {"big": False, "small": True}
    m.recover("big")
    m.attempt("r2", "big")
    m.close("r")
    assert m.attempts.trace("r") == ()


@pytest.mark.parametrize(
    ("steps", "bad"),
    [
        ([("accept",)], "resend"),  # the upstream got it: a resend is a second generation
        ([("accept",), ("first_byte",)], "failover"),  # after the first byte
        ([("accept",), ("first_byte",)], "first_byte"),  # a reply's start twice
    ],
)
def test_illegal_attempts_are_stopped(steps: list[tuple[str]], bad: str) -> None:
    m = live()
    m.attempt("r", "u1")
    for (name,) in steps:
        getattr(m, name)("r")
    args = ("r", "u2") if bad == "failover" else ("r",)
    assert stopped(getattr(m, bad), *args) == "Next"
    assert m.violations.labels("Next")._value.get() == 1


def test_the_monitor_bounds_the_requests_in_flight() -> None:
    assert live(max_in_flight=3).monitor._max_in_flight == 3


def test_a_request_past_the_in_flight_bound_gets_529_before_the_wire() -> None:
    """With ``limits.max_in_flight = 1`` and one exchange holding its slot, the next turn is
    answered 529 overloaded_error and never reaches the upstream; once that exchange's line
    is logged (it ended), the next one passes."""
    fake = FakeUpstream("ANTHROPIC")
    settings = make_settings("ANTHROPIC", gateway_key=GATEWAY_KEY, monitor=True)
    settings = attrs.evolve(settings, limits=attrs.evolve(settings.limits, max_in_flight=1))
    app = create_app(settings, transport=fake.transport())
    messages = [{"role": "user", "content": "b"}]
    body = {"model": "claude-x", "max_tokens": 8, "messages": messages}
    gateway = app.gateway
    with serving(app) as url, httpx2.Client(base_url=url, timeout=30) as client:
        assert gateway._take_slot()  # an exchange in flight
        assert gateway.in_flight == 1
        second = client.post("/v1/messages", headers=AUTH, json=body)
        assert second.status_code == 529
        assert second.json()["error"]["type"] == "overloaded_error"
        assert fake.seen == []  # nothing reached the upstream
        gateway.log({"request_id": "held", "#slot": True}, failed=False)  # it ended
        assert gateway.in_flight == 0
        third = client.post("/v1/messages", headers=AUTH, json=body)
        assert third.status_code == 200, third.text
        assert len(fake.seen) == 1


def turn_through(stream: bool, monkeypatch: pytest.MonkeyPatch, twice: bool) -> tuple[int, Any]:
    """One monitored ANTHROPIC turn; the attempt monitor's trace of it, as the turn
    reported it (with *twice*, a gateway that reports a reply's first byte twice: a seeded
    bug)."""
    traces: list[Any] = []
    answered, close = LiveMonitor.answered, LiveMonitor.close

    def spy(self: LiveMonitor, key: str, upstream: str, *, stream: bool) -> None:
        answered(self, key, upstream, stream=stream)
        if twice and stream:
            self.first_byte(key)

    def closing(self: LiveMonitor, key: str) -> None:
        traces.append([action for action, _ in self.attempts.trace(key)])
        close(self, key)

    monkeypatch.setattr(LiveMonitor, "answered", spy)
    monkeypatch.setattr(LiveMonitor, "close", closing)
    fake = FakeUpstream("ANTHROPIC")
    settings = make_settings("ANTHROPIC", gateway_key=GATEWAY_KEY, monitor=True)
    app = create_app(settings, transport=fake.transport())
    messages = [{"role": "user", "content": "steps"}]
    body = {"model": "claude-x", "max_tokens": 8, "messages": messages, "stream": stream}
    with serving(app) as url, httpx2.Client(base_url=url, timeout=30) as client:
        reply = client.post("/v1/messages", headers=AUTH, json=body)
    return reply.status_code, traces


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_a_turn_reports_its_upstream_steps(stream: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    status, traces = turn_through(stream, monkeypatch, twice=False)
    assert status == 200
    steps = ["NewRequest", "UpstreamAccept", *(["FirstByte"] if stream else [])]
    assert traces == [steps]


def test_a_reply_started_twice_is_stopped(monkeypatch: pytest.MonkeyPatch) -> None:
    status, _ = turn_through(True, monkeypatch, twice=True)
    assert status == 500
