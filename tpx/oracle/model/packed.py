"""The spec's exploration on bit-packed states, vectorised with numpy.

This is a second rendering of the same actions, for speed only: every state
is one ``uint64`` and every action a handful of array operations over a
whole BFS level. :func:`explore_packed` reports the same figures as
:func:`tpx.oracle.model.explore.explore`; ``tests/oracle/model/test_packed.py`` proves the
two agree state for state (:func:`decode` maps back to
:class:`~tpx.oracle.model.state.State`). On a violation it hands over to the
readable explorer, which returns the shortest counterexample.

Bit layout, low to high (``n = |ToolIds|``, ids in sorted order):

=========  =====  =========================================
field      bits   encoding
=========  =====  =========================================
pending    n      bit i = i-th tool id
reqIds     n
wireIds    n
emitted    n
hasKey     1
hasToken   1
provider   2      0 ANTHROPIC, 1 TPX, 2 NONE
phase      2      0 idle, 1 req, 2 resp
wireShape  1      0 messages, 1 openai
gotShape   1      0 messages, 1 openai
lastOut.   2      0 none, 1 ok, 2 err
turn       rest
=========  =====  =========================================
"""

from __future__ import annotations

import time

import attrs
import numpy as np
import numpy.typing as npt

from tpx.oracle.model.explore import ExploreResult, Progress, ProgressFn, Verdict, explore
from tpx.oracle.model.state import Config, State

__all__ = ["MAX_TOOL_IDS", "Layout", "decode", "encode", "explore_packed"]

U64 = np.uint64
Arr = npt.NDArray[np.uint64]

#: The widest ToolIds the packed encoding holds (4n + 10 bits + turn bits <= 64).
MAX_TOOL_IDS = 12

_PROVIDERS = ("ANTHROPIC", "TPX", "NONE")
_PHASES = ("idle", "req", "resp")
_SHAPES = ("messages", "openai")
_OUTCOMES = ("none", "ok", "err")


@attrs.frozen
class Layout:
    n: int

    @property
    def P(self) -> int:  # pending
        return 0

    @property
    def R(self) -> int:  # reqIds
        return self.n

    @property
    def W(self) -> int:  # wireIds
        return 2 * self.n

    @property
    def E(self) -> int:  # emitted
        return 3 * self.n

    @property
    def K(self) -> int:  # hasKey; hasToken = K + 1
        return 4 * self.n

    @property
    def PV(self) -> int:
        return self.K + 2

    @property
    def PH(self) -> int:
        return self.K + 4

    @property
    def WS(self) -> int:
        return self.K + 6

    @property
    def GS(self) -> int:
        return self.K + 7

    @property
    def LO(self) -> int:
        return self.K + 8

    @property
    def T(self) -> int:
        return self.K + 10


def _ids_mask(ids: frozenset[object], order: list[object]) -> int:
    return sum(1 << i for i, x in enumerate(order) if x in ids)


def encode(s: State, c: Config) -> int:
    """Pack a readable state into one integer."""
    order = sorted(c.ToolIds)
    lay = Layout(len(order))
    providers = (c.ANTHROPIC, c.TPX, c.NONE)
    return (
        _ids_mask(s.pending, order) << lay.P  # type: ignore[arg-type]
        | _ids_mask(s.reqIds, order) << lay.R  # type: ignore[arg-type]
        | _ids_mask(s.wireIds, order) << lay.W  # type: ignore[arg-type]
        | _ids_mask(s.emitted, order) << lay.E  # type: ignore[arg-type]
        | int(s.hasKey) << lay.K
        | int(s.hasToken) << (lay.K + 1)
        | providers.index(s.provider) << lay.PV
        | _PHASES.index(s.phase) << lay.PH
        | _SHAPES.index(s.wireShape) << lay.WS
        | _SHAPES.index(s.gotShape) << lay.GS
        | _OUTCOMES.index(s.lastOutcome) << lay.LO
        | s.turn << lay.T
    )


def decode(x: int, c: Config) -> State:
    """Unpack an integer made by :func:`encode` (or by the packed actions)."""
    order = sorted(c.ToolIds)
    lay = Layout(len(order))
    m = (1 << lay.n) - 1
    providers = (c.ANTHROPIC, c.TPX, c.NONE)

    def ids(shift: int) -> frozenset[object]:
        bits = (x >> shift) & m
        return frozenset(v for i, v in enumerate(order) if bits >> i & 1)

    return State(
        hasKey=bool(x >> lay.K & 1),
        hasToken=bool(x >> (lay.K + 1) & 1),
        provider=providers[x >> lay.PV & 3],
        turn=x >> lay.T,
        phase=_PHASES[x >> lay.PH & 3],
        pending=ids(lay.P),  # type: ignore[arg-type]
        reqIds=ids(lay.R),  # type: ignore[arg-type]
        wireShape=_SHAPES[x >> lay.WS & 1],
        wireIds=ids(lay.W),  # type: ignore[arg-type]
        emitted=ids(lay.E),  # type: ignore[arg-type]
        gotShape=_SHAPES[x >> lay.GS & 1],
        lastOutcome=_OUTCOMES[x >> lay.LO & 3],
    )


@attrs.frozen
class _Level:
    """Successors of one BFS level: the new states, and what was generated."""

    successors: Arr
    generated: int
    deadlocked: Arr
    unstable: bool


class _Machine:
    """The spec's actions over arrays of packed states."""

    def __init__(self, c: Config) -> None:
        self.c = c
        self.lay = lay = Layout(len(c.ToolIds))
        n = lay.n
        m = (1 << n) - 1
        self.ids_m = U64(m)
        self.max_turns = U64(c.MaxTurns)

        def f(shift: int, width: int) -> U64:
            return U64(((1 << width) - 1) << shift)

        self.f_P, self.f_R, self.f_W, self.f_E = (f(s, n) for s in (lay.P, lay.R, lay.W, lay.E))
        self.f_creds = f(lay.K, 4)
        self.f_PH, self.f_WS, self.f_GS, self.f_LO = (
            f(lay.PH, 2),
            f(lay.WS, 1),
            f(lay.GS, 1),
            f(lay.LO, 2),
        )
        self.one_turn = U64(1 << lay.T)
        subsets = np.arange(1 << n, dtype=np.uint64)
        # ProviderReply's \E ids \in SUBSET ToolIds: emitted' = wireIds' = ids.
        self.reply_offsets = (subsets << U64(lay.W)) | (subsets << U64(lay.E))

    def field(self, s: Arr, shift: int, width: int) -> Arr:
        return (s >> U64(shift)) & U64((1 << width) - 1)

    def step(self, s: Arr, check_deadlock: bool) -> _Level:
        lay = self.lay
        ph = self.field(s, lay.PH, 2)
        turn = s >> U64(lay.T)
        prov = self.field(s, lay.PV, 2)
        pend = s & self.ids_m
        idle, req, resp = ph == 0, ph == 1, ph == 2
        room = idle & (turn < self.max_turns)
        native = (prov == 1).astype(np.uint64)  # NativeShape: TPX -> openai
        out: list[Arr] = []
        srcs: list[Arr] = []
        unstable = False
        counts = np.zeros(s.shape, dtype=np.int64)

        # CallerSend
        en = room & (prov != 2)
        x, p, nat = s[en], pend[en], native[en]
        x = x & ~(self.f_R | self.f_W | self.f_WS | self.f_PH)
        out.append(
            x | (p << U64(lay.R)) | (p << U64(lay.W)) | (nat << U64(lay.WS)) | U64(1 << lay.PH)
        )
        srcs.append(s[en])
        counts += en
        # CallerAbort
        en = room & (prov != 2) & (pend != 0)
        x = s[en] & ~(self.f_P | self.f_LO)
        out.append((x | U64(2 << lay.LO)) + self.one_turn)
        srcs.append(s[en])
        counts += en
        # NoProvider
        en = room & (prov == 2)
        x = s[en] & ~self.f_LO
        out.append((x | U64(2 << lay.LO)) + self.one_turn)
        srcs.append(s[en])
        counts += en
        # ProviderReply: one base per state, times every subset of ToolIds
        x, nat = s[req], native[req]
        base = (x & ~(self.f_E | self.f_W | self.f_WS | self.f_PH)) | (nat << U64(lay.WS))
        base |= U64(2 << lay.PH)
        unstable |= bool(np.any((base & self.f_creds) != (x & self.f_creds)))
        base = np.unique(base)
        replies: Arr = np.bitwise_or.outer(base, self.reply_offsets).ravel()
        out.append(replies)
        counts += req * len(self.reply_offsets)
        # ProviderFail
        x = s[req] & ~(self.f_LO | self.f_P | self.f_PH)
        out.append((x | U64(2 << lay.LO)) + self.one_turn)
        srcs.append(s[req])
        counts += req
        # Deliver
        x = s[resp]
        ws = self.field(x, lay.WS, 1)
        got = np.where(ws == 1, U64(0), ws)  # IF wireShape = "openai" THEN "messages" ...
        wire = self.field(x, lay.W, lay.n)
        x = x & ~(self.f_GS | self.f_P | self.f_LO | self.f_PH)
        out.append((x | (got << U64(lay.GS)) | wire | U64(1 << lay.LO)) + self.one_turn)
        srcs.append(s[resp])
        counts += resp
        # Halted: a stuttering self-loop, generated but never new
        halted = idle & (turn == self.max_turns)
        counts += halted

        deadlocked = s[counts == 0] if check_deadlock else s[:0]
        # SelectionStable, [][CredsUnchanged]_vars: every step keeps the
        # hasKey/hasToken/provider bits of its source (ProviderReply checked above).
        for succ, src in zip(out[:3] + out[4:], srcs, strict=True):
            unstable |= bool(np.any((succ & self.f_creds) != (src & self.f_creds)))
        return _Level(
            successors=np.concatenate(out),
            generated=int(counts.sum()),
            deadlocked=deadlocked,
            unstable=unstable,
        )

    def invariants_hold(self, s: Arr) -> bool:
        lay = self.lay
        prov = self.field(s, lay.PV, 2)
        ph = self.field(s, lay.PH, 2)
        lo = self.field(s, lay.LO, 2)
        turn = s >> U64(lay.T)
        k = self.field(s, lay.K, 1)
        t = self.field(s, lay.K + 1, 1)
        pend, rq = s & self.ids_m, self.field(s, lay.R, lay.n)
        wire, em = self.field(s, lay.W, lay.n), self.field(s, lay.E, lay.n)
        type_ok = (prov <= 2) & (ph <= 2) & (lo <= 2) & (turn <= self.max_turns)
        shape = self.field(s, lay.GS, 1) == 0
        pairing = (
            ((ph != 1) | ((wire == rq) & (rq == pend)))
            & ((ph != 2) | (wire == em))
            & (~((ph == 0) & (lo == 1)) | (pend == em))
        )
        select = np.where(k == 1, U64(0), np.where(t == 1, U64(1), U64(2)))
        selection = prov == select
        return bool(np.all(type_ok & shape & pairing & selection))


def _initial(c: Config) -> Arr:
    from tpx.oracle.model.actions import Init

    return np.array([encode(s, c) for s in Init(c)], dtype=np.uint64)


def explore_packed(
    config: Config, *, check_deadlock: bool = True, on_progress: ProgressFn | None = None
) -> ExploreResult:
    """Explore like :func:`~tpx.oracle.model.explore.explore`, on packed states.

    *on_progress* is called once per BFS level (see :data:`~tpx.oracle.model.explore.ProgressFn`).

    Falls back to the readable explorer when ToolIds is too wide to pack, and
    hands any violation to it for the shortest counterexample.
    """
    n = len(config.ToolIds)
    turn_bits = max(1, (config.MaxTurns + 1).bit_length())
    if n > MAX_TOOL_IDS or 4 * n + 10 + turn_bits > 64:
        return explore(config, check_deadlock=check_deadlock, on_progress=on_progress)
    start = time.perf_counter()
    machine = _Machine(config)
    frontier = np.unique(_initial(config))
    initial = len(frontier)
    generated = initial
    visited = frontier
    depth = 1
    if not machine.invariants_hold(frontier):
        return explore(config, check_deadlock=check_deadlock, on_progress=on_progress)
    while len(frontier):
        level = machine.step(frontier, check_deadlock)
        generated += level.generated
        if len(level.deadlocked) or level.unstable:
            return explore(config, check_deadlock=check_deadlock, on_progress=on_progress)
        new = np.unique(level.successors)
        new = new[~_sorted_isin(new, visited)]
        if not len(new):
            break
        if not machine.invariants_hold(new):
            return explore(config, check_deadlock=check_deadlock, on_progress=on_progress)
        depth += 1
        visited = np.union1d(visited, new)
        frontier = new
        if on_progress is not None:
            on_progress(Progress(depth, generated, len(visited), len(frontier)))
    return ExploreResult(
        verdict=Verdict("ok"),
        initial=initial,
        generated=generated,
        distinct=len(visited),
        depth=depth,
        duration_s=time.perf_counter() - start,
    )


def _sorted_isin(values: Arr, sorted_pool: Arr) -> npt.NDArray[np.bool_]:
    """``values in sorted_pool``, elementwise, for a sorted pool."""
    if not len(sorted_pool):
        return np.zeros(values.shape, dtype=bool)
    idx = np.searchsorted(sorted_pool, values)
    idx[idx == len(sorted_pool)] = 0
    found: npt.NDArray[np.bool_] = sorted_pool[idx] == values
    return found


def reachable_packed(config: Config) -> list[int]:
    """Every reachable packed state (for the agreement test)."""
    machine = _Machine(config)
    frontier = np.unique(_initial(config))
    visited = frontier
    while len(frontier):
        new = np.unique(machine.step(frontier, False).successors)
        new = new[~_sorted_isin(new, visited)]
        visited = np.union1d(visited, new)
        frontier = new
    return [int(x) for x in visited]
