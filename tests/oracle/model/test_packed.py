"""The packed (numpy) explorer agrees with the readable mirror state for state."""

from __future__ import annotations

import pytest

from tpx.oracle.model import Config, Init, explore
from tpx.oracle.model.explore import reachable
from tpx.oracle.model.packed import decode, encode, explore_packed, reachable_packed
from tpx.oracle.values import ModelValue

CONFIGS = [
    Config.of(1, 1),
    Config.of(2, 3),
    Config.of(3, 4),
    Config.of(4, 2),
    Config(frozenset({ModelValue("zeta"), ModelValue("alpha"), ModelValue("mid")}), 3),
]


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: f"{len(c.ToolIds)}ids-{c.MaxTurns}turns")
def test_packed_reachable_set_equals_readable(config: Config) -> None:
    readable = set(reachable(config))
    packed = reachable_packed(config)
    assert len(packed) == len(set(packed))
    assert {decode(x, config) for x in packed} == readable


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: f"{len(c.ToolIds)}ids-{c.MaxTurns}turns")
def test_packed_figures_equal_readable(config: Config) -> None:
    a, b = explore(config), explore_packed(config)
    assert (a.verdict, a.initial, a.generated, a.distinct, a.depth) == (
        b.verdict,
        b.initial,
        b.generated,
        b.distinct,
        b.depth,
    )


def test_encode_decode_round_trip() -> None:
    c = Config.of(3, 3)
    states = list(reachable(c))
    codes = {encode(s, c) for s in states}
    assert len(codes) == len(states)
    assert all(decode(encode(s, c), c) == s for s in states)
    assert all(encode(s, c) in codes for s in Init(c))


def test_packed_reports_deadlock_without_halted() -> None:
    # MaxTurns = 0: only Halted is enabled in the initial states; with deadlock
    # checking off both explorers agree, and a violation-free run is ok.
    c = Config.of(2, 0)
    assert explore_packed(c).ok
    assert explore_packed(c).distinct == 4


def test_wide_tool_ids_fall_back_to_readable() -> None:
    c = Config.of(13, 1)
    r = explore_packed(c)
    assert r.ok
    assert r.distinct == explore(c).distinct
