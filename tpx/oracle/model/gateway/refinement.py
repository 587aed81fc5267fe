"""The refinement check in the mirror: each conversation's projection is a seed behaviour.

The spec's ``Seed(c) == INSTANCE TpxTransport WITH ToolIds <- Ids(c), turn <- turn[c], ...``
maps a gateway state to a seed state per conversation; ``Refinement`` says every initial
state projects to a seed ``Init`` state and every gateway step is, for every conversation,
a seed ``Next`` step or a stutter of its projection. TLC checks it on
``spec/TpxGatewayRefinement.cfg``; here :func:`project` is that mapping (ids ``<<c, t>>``
renamed to ``t``, a bijection, so the seed's mirror can take them),
:func:`RefinementInit` / :func:`RefinementStep` are the two conjuncts, and
:func:`refinement_counterexample` walks the reachable graph looking for a state or step
that breaks them.
"""

from __future__ import annotations

from collections import deque

from tpx.oracle import model as seed
from tpx.oracle.model.gateway.actions import Init, Steps
from tpx.oracle.model.gateway.state import Config, State
from tpx.oracle.values import ModelValue

__all__ = [
    "KeepsObligations",
    "RefinementInit",
    "RefinementStep",
    "RefinementUpToErrorsStep",
    "project",
    "refinement_counterexample",
    "seed_config",
]


def seed_config(cfg: Config) -> seed.Config:
    """The seed's constants a conversation of *cfg* is checked against."""
    return seed.Config(
        cfg.ToolIds, cfg.MaxTurns, ANTHROPIC=cfg.ANTHROPIC, TPX=cfg.TPX, NONE=cfg.NONE
    )


def _untag(ids: frozenset[tuple[ModelValue, ModelValue]], c: ModelValue) -> frozenset[ModelValue]:
    if any(owner != c for owner, _ in ids):
        raise ValueError(f"{sorted(ids)} holds ids that are not conversation {c}'s")
    return frozenset(t for _, t in ids)


def project(s: State, c: ModelValue) -> seed.State:
    """``Seed(c)``'s variables in state *s*: the seed state conversation *c* is in."""
    return seed.State(
        hasKey=s.hasKey,
        hasToken=s.hasToken,
        provider=s.provider,
        turn=s.turn[c],
        phase=s.phase[c],
        pending=_untag(s.pending[c], c),
        reqIds=_untag(s.reqIds[c], c),
        wireShape=s.wireShape[c],
        wireIds=_untag(s.wireIds[c], c),
        emitted=_untag(s.emitted[c], c),
        gotShape=s.gotShape[c],
        lastOutcome=s.lastOutcome[c],
    )


def RefinementInit(s: State, cfg: Config) -> bool:
    """``\\A c \\in Convs : Seed(c)!Init`` (for an initial state)."""
    inits = set(seed.Init(seed_config(cfg)))
    try:
        return all(project(s, c) in inits for c in cfg.Convs)
    except ValueError:
        return False


def RefinementStep(s: State, t: State, cfg: Config) -> bool:
    """``\\A c \\in Convs : [Seed(c)!Next]_(Seed(c)!vars)`` on the step s -> t."""
    sc = seed_config(cfg)
    try:
        for c in cfg.Convs:
            a, b = project(s, c), project(t, c)
            if a != b and b not in {u for _, u in seed.Next(a, sc)}:
                return False
    except ValueError:
        return False
    return True


def KeepsObligations(s: State, t: State, c: ModelValue) -> bool:
    """``KeepsObligations(c)`` on the step s -> t: an error that keeps c's obligations."""
    return (
        t.phase[c] == "idle"
        and t.lastOutcome[c] == "err"
        and t.turn[c] == s.turn[c] + 1
        and all(
            getattr(t, v)[c] == getattr(s, v)[c]
            for v in ("pending", "reqIds", "wireShape", "wireIds", "emitted", "gotShape")
        )
        and (s.hasKey, s.hasToken, s.provider) == (t.hasKey, t.hasToken, t.provider)
    )


def RefinementUpToErrorsStep(s: State, t: State, cfg: Config) -> bool:
    """``\\A c \\in Convs : [Seed(c)!Next]_(Seed(c)!vars) \\/ KeepsObligations(c)`` on the
    step s -> t (RefinementUpToErrors' step conjunct; its Init one is RefinementInit)."""
    sc = seed_config(cfg)
    try:
        for c in cfg.Convs:
            a, b = project(s, c), project(t, c)
            if (
                a != b
                and not KeepsObligations(s, t, c)
                and b not in {u for _, u in seed.Next(a, sc)}
            ):
                return False
    except ValueError:
        return False
    return True


def refinement_counterexample(cfg: Config) -> tuple[State, str, State] | None:
    """The first (BFS order) initial state or step breaking ``Refinement``: ``(s, "Init", s)``
    for an initial state, ``(s, action, t)`` for a step; ``None`` when it holds."""
    seen: set[State] = set()
    queue: deque[State] = deque()
    for s in Init(cfg):
        if not RefinementInit(s, cfg):
            return s, "Init", s
        if s not in seen:
            seen.add(s)
            queue.append(s)
    while queue:
        s = queue.popleft()
        for name, _, t in Steps(s, cfg):
            if not RefinementStep(s, t, cfg):
                return s, name, t
            if t not in seen:
                seen.add(t)
                queue.append(t)
    return None
