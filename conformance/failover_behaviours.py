"""The behaviours of ``spec/TpxGatewayFailover.cfg`` the HTTP failover replay drives
(:mod:`conformance.failover_replay`): the mirror's graph, cut down to the steps a correct
``tpx serve`` with ``[[upstreams]]`` can be made to take on request, and seen through the
variables the replay observes (:data:`OBSERVED`).

The cut (:func:`realizable`), each for a reason of the gateway's, not of the replay's:

* only the TPX boot (``hasKey`` false, ``hasToken`` true): ``[[upstreams]]`` with an
  Anthropic key is refused at start, and a gateway without a credential has no pool;
* no ``NewRequest`` while every upstream cools down: the gateway then tries the one whose
  cooldown ends first *as its probe* (a ``Recover`` the spec's ``NewRequest`` does not
  take), and its success ends that cooldown;
* no ``NewRequest`` to an upstream the other conversation's exchange is on while the other
  upstream is healthy: the pool balances by requests in flight, so it picks the idle one;
* no answer from an upstream that cools down (the other conversation's request failed over
  from it while this one was there) -- an ``UpstreamAccept``, or a ``ProviderFail`` the
  replay scripts as a ``400``: the gateway takes any answer that is not a refusal as the end
  of its cooldown (``Dispatcher.succeeded``), a ``Recover`` the spec takes only as a step of
  its own. On the last attempt the replay refuses with a ``503`` instead, which the gateway
  gives up on (another cooldown of an upstream cooling down already); before it, a refusal
  would be tried elsewhere (a ``Failover``, or the upstream tried anyway as its probe);
* no ``Failover`` of an attempt the upstream took (``reached``): the pool never sends a
  request another upstream may be generating elsewhere (the spec's ``Failover`` allows it
  and takes that generation back).

The view (:func:`project`) keeps the conversation's progress and every upstream variable;
the ids a reply emits (which the HTTP replay of the other cfgs checks) are left out, so
behaviours that differ only there are one.
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import cache
from pathlib import Path

from tpx.audit.behaviours import conversation_of, mirror_graph
from tpx.oracle.behaviours import Behaviour, edge_cover
from tpx.oracle.model.gateway import Config
from tpx.oracle.tlc import StateGraph
from tpx.oracle.values import ModelValue, Record

__all__ = [
    "FAILOVER",
    "OBSERVED",
    "Plan",
    "actor",
    "failover_plan",
    "next_of",
    "project",
    "realizable",
]

FAILOVER = Config.from_cfg(Path(__file__).parents[1] / "spec" / "TpxGatewayFailover.cfg")
#: the variables the replay observes (from the clients and the fake upstreams)
OBSERVED = (
    "provider",
    "turn",
    "phase",
    "lastOutcome",
    "request",
    "up",
    "health",
    "attempts",
    "reached",
    "gens",
    "fwd",
)


def project(state: Record) -> Record:
    return Record({n: state[n] for n in OBSERVED})


def _healthy(s: Record) -> set[ModelValue]:
    return {u for u, ok in s["health"].items() if ok}


def realizable(s: Record, t: Record, action: str, config: Config) -> bool:
    """A correct gateway takes the step s -> t when the replay scripts it (module doc)."""
    if action in ("NoProvider", "Retry"):
        return False
    if action == "Halted" or action == "Recover":
        return True
    c = conversation_of(s, t, config)
    if c is None:  # an upstream step moves no turn or phase: the one whose up vars moved
        moved = [
            d
            for d in config.Convs
            if any(s[v][d] != t[v][d] for v in ("up", "attempts", "reached", "fwd"))
        ]
        c = moved[0]
    if action == "CallerSend":
        healthy = _healthy(s)
        if not healthy:
            return False
        u = t["up"][c]
        if len(healthy) > 1:
            for d in config.Convs:
                if d != c and s["phase"][d] != "idle" and s["up"][d] == u:
                    return False
        return True
    if action == "Failover":
        return not s["reached"][c]
    if action == "UpstreamAccept":
        return bool(s["health"][s["up"][c]])
    if action == "ProviderFail" and not s["reached"][c]:
        return bool(s["health"][s["up"][c]]) or s["attempts"][c] == config.MaxAttempts
    return True


class Plan:
    """The cut and projected graph of a cfg, its edge cover, and the figures."""

    def __init__(self, config: Config) -> None:
        self.config = config
        full = mirror_graph(config)
        self.full = full
        tpx_init = {
            i for i in full.initial if not full.states[i]["hasKey"] and full.states[i]["hasToken"]
        }
        kept = {
            (a, b, label)
            for a, b, label in full.edges
            if realizable(full.states[a], full.states[b], label, config)
        }
        succ: dict[int, set[int]] = {}
        for a, b, _ in kept:
            succ.setdefault(a, set()).add(b)
        # reachable from the TPX boot through kept edges
        seen = set(tpx_init)
        todo = list(tpx_init)
        while todo:
            a = todo.pop()
            for b in succ.get(a, ()):
                if b not in seen:
                    seen.add(b)
                    todo.append(b)
        # and able to end (Halted): drop states every kept path from which gets stuck
        ending = {a for a, b, label in kept if label == "Halted" and a in seen}
        pred: dict[int, set[int]] = {}
        for a, b, _ in kept:
            if a in seen and b in seen:
                pred.setdefault(b, set()).add(a)
        live = set(ending)
        todo = list(ending)
        while todo:
            b = todo.pop()
            for a in pred.get(b, ()):
                if a not in live:
                    live.add(a)
                    todo.append(a)
        self.kept_states = live
        edges = {(a, b, lb) for a, b, lb in kept if a in live and b in live}
        # a Halted stutter where another step (a Recover) is still enabled ends no behaviour
        # (a behaviour ends where Halted is the only step): not a step to replay
        moving = {a for a, b, lb in edges if lb != "Halted"}
        self.stutters = {(a, b, lb) for a, b, lb in edges if lb == "Halted" and a in moving}
        self.kept_edges = edges - self.stutters
        # the projection
        ix: dict[Record, int] = {}
        for i in sorted(live):
            ix.setdefault(project(full.states[i]), len(ix))
        self.of_state = {i: ix[project(full.states[i])] for i in live}
        self.graph = StateGraph(
            states={n: r for r, n in ix.items()},
            initial=frozenset(self.of_state[i] for i in tpx_init if i in live),
            edges=frozenset(
                (self.of_state[a], self.of_state[b], lb) for a, b, lb in self.kept_edges
            ),
        )

    def behaviours(self) -> list[Behaviour]:
        return edge_cover(self.graph)

    def figures(self) -> dict[str, int]:
        return {
            "mirror states": len(self.full.states),
            "mirror edges": len(self.full.edges),
            "TPX-boot realizable states": len(self.kept_states),
            "TPX-boot realizable edges": len(self.kept_edges),
            "Halted stutters left out": len(self.stutters),
            "observed-view states": len(self.graph.states),
            "observed-view edges": len(self.graph.edges),
        }


@cache
def failover_plan(config: Config = FAILOVER) -> Plan:
    return Plan(config)


def labels(behaviours: Iterable[Behaviour]) -> set[str]:
    return {a for b in behaviours for a, _ in b.steps}


def actor(before: Record, after: Record, action: str, config: Config) -> ModelValue | None:
    """The conversation that moves in the step *before* -> *after* (none for a Recover)."""
    if action in ("Halted", "Recover"):
        return None
    c = conversation_of(before, after, config)
    if c is not None:
        return c
    for d in config.Convs:
        if any(before[v][d] != after[v][d] for v in ("up", "attempts", "reached", "fwd")):
            return d
    raise ValueError(f"{action}: no conversation moves")


def next_of(behaviour: Behaviour, n: int, c: ModelValue, config: Config) -> str | None:
    """The action of *c*'s next step after step *n* (1-based)."""
    states = behaviour.states()
    for m in range(n, len(behaviour.steps)):
        action, after = behaviour.steps[m]
        if action not in ("Halted", "Recover") and actor(states[m], after, action, config) == c:
            return action
    return None
