"""The online monitor on overlapping exchanges of one conversation
(spec/TpxGatewayOverlap.tla): every behaviour of the overlap spec, its main and fork
exchanges each a key of the monitor joined to its conversation, passes; with each key a
conversation of its own (the request-keyed monitor) a legal fork is stopped; ids crossing
between conversations are still stopped; and a conversation keeps its ids while any of its
exchanges is live. The conversation's name: :func:`tpx.gateway.history.opening`."""

from __future__ import annotations

import random
from typing import Any

import pytest

from tpx.gateway.history import opening
from tpx.oracle.model.gateway import actions as gw
from tpx.oracle.model.gateway.monitor import GatewayMonitor, Violation
from tpx.oracle.model.gateway.overlap import OverlapConfig, OverlapInit, OverlapNext, OverlapState
from tpx.oracle.model.gateway.state import ToolId
from tpx.oracle.values import ModelValue

from .test_gateway_monitor import snap
from .test_gateway_overlap_mirror import CFG, DEEP_CFG

IDLE: dict[str, Any] = {
    "provider": "ANTHROPIC",
    "turn": 0,
    "phase": "idle",
    "pending": [],
    "reqIds": [],
    "wireShape": "messages",
    "wireIds": [],
    "emitted": [],
    "gotShape": "messages",
    "lastOutcome": "none",
}


def names(ids: frozenset[ToolId]) -> list[str]:
    return sorted(f"{owner}:{t}" for owner, t in ids)


class Fork:
    """The fork exchanges of the overlap spec as the monitor sees them: each fork exchange
    a request of its own (a new key), resuming with the ids its request answers."""

    def __init__(self, monitor: GatewayMonitor, c: ModelValue, joined: bool) -> None:
        self.monitor, self.c, self.joined = monitor, c, joined
        self.count = 0
        self.state: dict[str, Any] = dict(IDLE)

    @property
    def key(self) -> str:
        return f"{self.c}-fork{self.count}"

    def step(self, action: str, s: OverlapState, t: OverlapState) -> list[Violation | None]:
        c, m = self.c, self.monitor
        if action == "ForkSend":
            self.count += 1
            if self.joined:
                m.joins(self.key, c.name)
            answers = names(t.fwire[c])
            self.state = {**IDLE, "provider": s.main.provider.name, "pending": answers}
            resumed = m.observe(self.key, "Resume", self.state)
            shape = "openai" if s.main.provider.name == "TPX" else "messages"  # NativeShape
            self.state |= {"phase": "req", "reqIds": answers, "wireIds": answers}
            self.state["wireShape"] = shape
            return [resumed, m.observe(self.key, "CallerSend", self.state)]
        if action == "ForkReply":
            self.state = {**self.state, "phase": "resp"}
            self.state["wireIds"] = self.state["emitted"] = names(t.femitted[c])
            return [m.observe(self.key, "ProviderReply", self.state)]
        ended = {**self.state, "phase": "idle", "turn": 1}
        if action == "ForkDeliver":
            ended |= {"pending": self.state["emitted"], "lastOutcome": "ok"}
            verdict = m.observe(self.key, "Deliver", ended)
        else:  # ForkFail
            verdict = m.observe(self.key, "ProviderFail", ended | {"lastOutcome": "err"})
        m.close(self.key)
        return [verdict]


def walk(
    cfg: OverlapConfig, rng: random.Random, joined: bool = True
) -> tuple[GatewayMonitor, list[str], list[Violation]]:
    """One random behaviour of the overlap spec fed to a monitor (main exchange c: key c;
    its forks: keys of their own; all joined to conversation c unless told)."""
    s = rng.choice(list(OverlapInit(cfg)))
    monitor = GatewayMonitor(
        provider=s.main.provider.name,
        has_key=s.main.hasKey,
        has_token=s.main.hasToken,
        max_in_flight=cfg.MaxInFlight + len(cfg.Convs) * cfg.MaxForks,
    )
    forks = {c: Fork(monitor, c, joined) for c in cfg.Convs}
    for c in cfg.Convs:
        if joined:
            monitor.joins(c.name, c.name)
        assert monitor.observe(c.name, "Init", snap(s.main, c)) is None
    taken: list[str] = []
    stopped: list[Violation] = []
    while not stopped:
        options = list(OverlapNext(s, cfg))
        steps = [(a, t) for a, t in options if t != s]
        if not steps:
            break
        action, t = rng.choice(steps)
        if action.startswith("Fork"):
            (c,) = [c for c in cfg.Convs if s.fphase[c] != t.fphase[c]]
            verdicts = forks[c].step(action, s, t)
        else:
            moved = [c for c in cfg.Convs if snap(s.main, c) != snap(t.main, c)]
            verdicts = [  # none moved: Rotate, Recover, no conversation's step
                monitor.observe(c.name, _main_action(s, t, c, cfg), snap(t.main, c)) for c in moved
            ]
        stopped += [v for v in verdicts if v is not None]
        taken.append(action)
        s = t
    return monitor, taken, stopped


def _main_action(s: OverlapState, t: OverlapState, c: ModelValue, cfg: OverlapConfig) -> str:
    """The TpxGateway action a main step of c is (TLC labels them all OverlapNext)."""
    return next(name for name, action in gw.ACTIONS for u in action(s.main, c, cfg) if u == t.main)


@pytest.mark.parametrize("cfg_path", [CFG, DEEP_CFG], ids=["small", "deep"])
def test_every_overlap_behaviour_passes_the_monitor(cfg_path: Any) -> None:
    cfg = OverlapConfig.from_cfg(cfg_path)
    rng = random.Random(11)
    seen: set[str] = set()
    for _ in range(200):
        monitor, taken, stopped = walk(cfg, rng)
        assert stopped == [], (taken, stopped[0])
        assert monitor.violations == 0
        seen |= set(taken)
    assert {"ForkSend", "ForkReply", "ForkDeliver", "ForkFail"} <= seen


def test_the_request_keyed_monitor_stops_a_legal_fork() -> None:
    """Seeded bug (the monitor before ``joins``): each key its own conversation."""
    rng = random.Random(11)
    cfg = OverlapConfig.from_cfg(CFG)
    stops = [walk(cfg, rng, joined=False)[2] for _ in range(200)]
    found = [v for vs in stops for v in vs]
    assert found
    assert {v.property for v in found} == {"NoCrossPairing"}


def exchange(m: GatewayMonitor, key: str, history: list[str], emitted: list[str]) -> list[Any]:
    """A request resuming with *history*'s ids answered, up to its ProviderReply."""
    held = {**IDLE, "pending": history}
    sent = {**held, "phase": "req", "reqIds": history, "wireIds": history}
    replied = {**sent, "phase": "resp", "wireIds": emitted, "emitted": emitted}
    return [
        m.observe(key, "Resume", held),
        m.observe(key, "CallerSend", sent),
        m.observe(key, "ProviderReply", replied),
    ]


def test_ids_still_cross_no_conversation() -> None:
    m = GatewayMonitor(provider="ANTHROPIC")
    for key in ("a1", "a2"):
        m.joins(key, "A")
    m.joins("b1", "B")
    assert exchange(m, "a1", ["call_0"], []) == [None, None, None]
    assert exchange(m, "a2", [], ["call_0"]) == [None, None, None]  # a fork of A: its ids
    *ok, stopped = exchange(m, "b1", [], ["call_0"])
    assert ok == [None, None]
    assert stopped is not None
    assert stopped.property == "NoCrossPairing"
    assert "belongs to conversation" in stopped.message


def test_a_conversation_keeps_its_ids_while_one_exchange_is_live() -> None:
    """a1 and a2 both took call_9; a1 ends; call_9 is still A's (a2's), not B's."""
    m = GatewayMonitor(provider="ANTHROPIC")
    for key in ("a1", "a2"):
        m.joins(key, "A")
    m.joins("b1", "B")
    assert exchange(m, "a1", [], ["call_9"]) == [None, None, None]
    assert exchange(m, "a2", [], ["call_9"]) == [None, None, None]
    m.close("a1")
    *_, stopped = exchange(m, "b1", [], ["call_9"])
    assert stopped is not None
    assert stopped.property == "NoCrossPairing"
    m.close("a2")
    m.close("b1")
    m.joins("b2", "B")
    assert exchange(m, "b2", [], ["call_9"]) == [None, None, None]  # A has ended


def test_the_opening_names_a_conversation() -> None:
    first = {"role": "user", "content": [{"type": "text", "text": "fix the build"}]}
    marked = {
        "role": "user",
        "content": [{"type": "text", "text": "fix the build", "cache_control": {"type": "x"}}],
    }
    later = [first, {"role": "assistant", "content": "ok"}, {"role": "user", "content": "more"}]
    body = {"system": "be brief", "messages": [first]}
    assert opening(body) == opening({**body, "messages": later})  # a fork, a longer request
    assert opening(body) == opening({**body, "messages": [marked]})  # cache_control moved
    assert opening(body) != opening({**body, "system": "be long"})
    assert opening(body) != opening({**body, "messages": [{"role": "user", "content": "other"}]})
    assert opening({"messages": [{"role": "user", "content": "ab"}]}) != opening(
        {"system": "a", "messages": [{"role": "user", "content": "b"}]}
    )
    assert opening({"messages": []}) == opening({})
