"""The upstream steps read on one conversation (tpx.oracle.model.gateway.attempts) are the
mirror's: on every state of the failover cfgs' graphs, each step enabled at a conversation
in flight here is enabled in the mirror with the same successor, and the other way round;
and the attempt monitor stops each seeded bug of the upstream steps for its property."""

from __future__ import annotations

from collections.abc import Hashable
from pathlib import Path

import pytest

from tpx.oracle.model.gateway import attempts as A
from tpx.oracle.model.gateway.actions import Init, Steps
from tpx.oracle.model.gateway.state import Config, State
from tpx.oracle.tlc.cfg import load_cfg
from tpx.oracle.values import ModelValue, TLAValue

from .conftest import FAILOVER_CFG, mvs

CASES: dict[str, tuple[Path, dict[str, TLAValue]]] = {
    "failover": (FAILOVER_CFG, {}),
    "failover-convs1-turns3-attempts3": (
        FAILOVER_CFG,
        {"Convs": mvs("solo"), "MaxTurns": 3, "MaxAttempts": 3, "Upstreams": mvs("a", "b", "c")},
    ),
}


def at(s: State, c: ModelValue) -> A.Attempts:
    up = s.up[c]
    return A.Attempts(up.name if up == ModelValue("NONE") else up, *(
        getattr(s, v)[c] for v in ("attempts", "reached", "gens", "fwd")
    ))  # fmt: skip


def health(s: State) -> dict[Hashable, bool]:
    return dict(s.health.items())


def reachable(cfg: Config) -> list[State]:
    seen = set(Init(cfg))
    frontier = list(seen)
    while frontier:
        s = frontier.pop()
        for _, _, t in Steps(s, cfg):
            if t not in seen:
                seen.add(t)
                frontier.append(t)
    return list(seen)


def compact(name: str, s: State, c: ModelValue, u: Hashable, cfg: Config) -> A.Attempts | None:
    a, h = at(s, c), health(s)
    if name == "UpstreamAccept":
        return A.UpstreamAccept(a)
    if name == "Resend":
        return A.Resend(a, cfg.MaxAttempts)
    if name == "Failover":
        return A.Failover(a, u, h, cfg.MaxAttempts)
    if name == "FirstByte":
        return A.FirstByte(a)
    return A.NewRequest(a, u, h)


@pytest.mark.parametrize("case", list(CASES))
def test_the_compact_upstream_steps_are_the_mirrors(case: str) -> None:
    base, constants = CASES[case]
    cfg = Config.from_constants({**load_cfg(base).constants, **constants})
    checked = enabled = 0
    for s in reachable(cfg):
        mirror: dict[tuple[ModelValue, str, Hashable], A.Attempts] = {}
        for name, c, t in Steps(s, cfg):
            if name in {"UpstreamAccept", "Resend", "Failover", "FirstByte"} or (
                name in {"CallerSend", "Retry"}
            ):
                assert c is not None
                key = (c, name, t.up[c] if name in {"Failover", "CallerSend", "Retry"} else None)
                assert key not in mirror or mirror[key] == at(t, c)
                mirror[key] = at(t, c)
                if name == "Failover":  # the one left cools down, nothing else
                    assert health(t) == {**health(s), s.up[c]: False}
                else:
                    assert health(t) == health(s)
                if s.phase[c] == "req":  # a step of an exchange in flight
                    assert A.FailoverBeforeFirstByte(at(s, c), at(t, c))
                assert all(inv(at(t, c)) for _, inv in A.INVARIANTS)
        for c in cfg.Convs:
            if s.phase[c] != "req":
                continue
            for name in ("UpstreamAccept", "Resend", "Failover", "FirstByte"):
                for u in cfg.Upstreams if name == "Failover" else (None,):
                    got = compact(name, s, c, u, cfg)
                    assert got == mirror.get((c, name, u)), (name, s, c, u)
                    checked += 1
                    enabled += got is not None
    assert checked > 1000
    assert enabled > 300


def test_new_requests_go_to_a_healthy_upstream() -> None:
    cfg = Config.from_cfg(FAILOVER_CFG)
    for s in reachable(cfg):
        for name, c, t in Steps(s, cfg):
            if name in {"CallerSend", "Retry"}:
                assert c is not None
                assert A.NewRequest(at(s, c), t.up[c], health(s)) == at(t, c)


def test_a_new_request_is_enabled_exactly_at_the_healthy_upstreams() -> None:
    """NewRequest at every health of two upstreams, for each of them and one never seen:
    enabled iff the upstream is in Healthy (the healthy ones, all of them when none is)."""
    for a in (True, False):
        for b in (True, False):
            health: dict[Hashable, bool] = {"u1": a, "u2": b}
            for u in ("u1", "u2", "u3"):
                enabled = A.NewRequest(A.INIT, u, health) is not None
                assert enabled == (u in A.Healthy(health)), (health, u)
    assert A.NewRequest(A.INIT, "u1", {}) is None


# ------------------------------------------------------------------- the attempt monitor


def test_a_request_failing_over_before_its_first_byte_is_legal() -> None:
    m = A.AttemptMonitor(max_attempts=3)
    assert m.send("r1", "big") is None
    assert m.accept("r1") is None  # the upstream got it, then answered 529
    assert m.failover("r1", "small") is None
    assert m.health == {"big": False, "small": True}
    assert m.accept("r1") is None
    assert m.first_byte("r1") is None
    assert m.state("r1") == A.Attempts("small", 2, True, 1, 1)
    assert m.send("r2", "big") == ("Next", "NewRequest is not enabled in " + A._show(A.INIT))
    m.recover(["big"])
    assert m.send("r2", "big") is None


def test_a_resend_after_the_request_reached_the_upstream_is_stopped() -> None:
    m = A.AttemptMonitor()
    assert m.send("r", "u") is None
    assert m.resend("r") is None  # a stale pooled connection: nothing written
    assert m.accept("r") is None
    failure = m.resend("r")
    assert failure is not None
    assert failure[0] == "Next"


def test_a_failover_after_the_first_byte_is_stopped() -> None:
    m = A.AttemptMonitor()
    assert m.send("r", "u") is None
    assert m.accept("r") is None
    assert m.first_byte("r") is None
    failure = m.failover("r", "v")
    assert failure is not None
    assert failure[0] == "Next"
    assert m.health == {"u": True, "v": True}  # a refused step changes nothing
    assert m.state("r") == A.INIT  # and the request is forgotten


def test_a_second_first_byte_is_stopped() -> None:
    m = A.AttemptMonitor()
    assert m.send("r", "u") is None
    assert m.accept("r") is None
    assert m.first_byte("r") is None
    failure = m.first_byte("r")
    assert failure is not None
    assert failure[0] == "Next"


def test_the_properties_judge_what_a_broken_step_reaches() -> None:
    s = A.Attempts("u", 1, True, 1, 1)
    assert not A.FailoverBeforeFirstByte(s, s._replace(up="v"))
    assert not A.OneGeneration(s._replace(gens=2))
    assert not A.NoDuplicateDelivery(s._replace(fwd=2))
    assert A.FailoverBeforeFirstByte(s._replace(fwd=0), s._replace(up="v", fwd=0))


def test_attempts_are_bounded() -> None:
    m = A.AttemptMonitor(max_attempts=2)
    assert m.send("r", "u") is None
    assert m.resend("r") is None
    failure = m.resend("r")
    assert failure is not None
    assert failure[0] == "Next"


@pytest.mark.parametrize("first_byte", [False, True])
def test_an_answered_request_takes_the_steps_one_by_one_would(first_byte: bool) -> None:
    """``answered`` (send, accept, first byte at once; remembered per healthy upstream) ends
    in the state and trace the steps taken one by one reach, the second time too, and is
    stopped at an unhealthy upstream as ``send`` is."""
    one, many = A.AttemptMonitor(), A.AttemptMonitor()
    for key in ("r1", "r2"):
        assert one.send(key, "u") is None
        assert one.accept(key) is None
        if first_byte:
            assert one.first_byte(key) is None
        last = "FirstByte" if first_byte else "UpstreamAccept"
        assert many.answered(key, "u", first_byte=first_byte) == (last, None)
        assert many.state(key) == one.state(key)
        assert many.trace(key) == one.trace(key)
        many.close(key)
        one.close(key)
    assert many.answered("r3", "v", first_byte=first_byte) == (last, None)
    assert many.accept("r3") is not None  # answered reached it already: stopped
    many.health.update(u=False)  # u cools down, v is healthy: u is no route
    action, failure = many.answered("r4", "u", first_byte=first_byte)
    assert action == "NewRequest"
    assert failure == ("Next", "NewRequest is not enabled in " + A._show(A.INIT))
    assert many.state("r4") == A.INIT


def test_steps_taken_again_are_the_steps_taken_the_first_time() -> None:
    """The attempt monitor takes a step it took before from the same state as it took it
    (NewRequest to a healthy upstream, UpstreamAccept, Resend, FirstByte): on every
    sequence of up to four steps over two upstreams, a monitor that took every earlier
    sequence gives each step the verdict, state, trace and health a fresh monitor gives,
    legal or not."""
    steps = {
        "send u": lambda m: m.send("r", "u"),
        "send v": lambda m: m.send("r", "v"),
        "accept": lambda m: m.accept("r"),
        "resend": lambda m: m.resend("r"),
        "failover v": lambda m: m.failover("r", "v"),
        "failover u": lambda m: m.failover("r", "u"),
        "first byte": lambda m: m.first_byte("r"),
        "recover u": lambda m: m.recover(["u"]),
    }
    sequences: list[tuple[str, ...]] = [()]
    for _ in range(4):
        sequences = [(*seq, name) for seq in sequences for name in steps]
    warm = A.AttemptMonitor(max_attempts=2)
    for seq in sequences:  # every shorter sequence is the start of one of these
        fresh = A.AttemptMonitor(max_attempts=2)
        warm.health.clear()
        warm.close("r")
        for name in seq:
            assert steps[name](warm) == steps[name](fresh), seq
            assert warm.state("r") == fresh.state("r"), seq
            assert warm.trace("r") == fresh.trace("r"), seq
            assert warm.health == fresh.health, seq
    assert len(warm._legal) > 5  # the steps were taken again
