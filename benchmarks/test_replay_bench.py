"""Replay throughput: behaviours/s and steps/s through the real transport (in-process fakes).

Seed cfg (466 complete behaviours) on one core, plain and streamed (every exchange through
``Transport.stream``), and the ToolIds={t1..t4}, MaxTurns=6
minimum edge cover (3,118 behaviours) on one core and on every core (chunks in a
process pool). Figures go into ``extra_info``; nothing is asserted about time.
"""

from __future__ import annotations

import os
from concurrent.futures import ProcessPoolExecutor
from typing import Any

import pytest

from benchmarks.report import Rows
from conformance.replay import Behaviour, Replayer, complete_behaviours, edge_cover, tlc_graph
from tpx.oracle.model import Config

SEED = Config.of(2, 3)
BIG = Config.of(4, 6)


def _replay(
    config: Config, behaviours: list[Behaviour], start: int = 0, streaming: bool = False
) -> int:
    replayer = Replayer(config, streaming=streaming)
    replayer.replay_all(behaviours, start)
    replayer.close()
    return replayer.steps_done


def _chunk(args: tuple[Config, list[Behaviour], int]) -> int:
    return _replay(*args)


@pytest.fixture(scope="module")
def seed() -> list[Behaviour]:
    return complete_behaviours(tlc_graph())


@pytest.fixture(scope="module")
def big_cover() -> list[Behaviour]:
    return edge_cover(tlc_graph(4, 6))


_ROWS = Rows(
    "replay",
    ".venv/bin/python -m pytest benchmarks/test_replay_bench.py -p no:xdist --benchmark-only",
    ("replay", "behaviours", "steps", "behaviours/s", "steps/s"),
)


def _rates(benchmark: Any, behaviours: int, steps: int) -> None:
    mean = benchmark.stats.stats.mean
    what = benchmark.name.removeprefix("test_replay_").replace("_", " ")
    _ROWS.add(
        what, f"{behaviours:,}", f"{steps:,}", f"{behaviours / mean:,.0f}", f"{steps / mean:,.0f}"
    )
    benchmark.extra_info.update(
        behaviours=behaviours,
        steps=steps,
        behaviours_per_s=round(behaviours / mean),
        steps_per_s=round(steps / mean),
    )


@pytest.mark.tlc
def test_replay_seed_466(benchmark: Any, seed: list[Behaviour]) -> None:
    steps = benchmark.pedantic(_replay, args=(SEED, seed), rounds=5, iterations=1)
    assert len(seed) == 466
    _rates(benchmark, len(seed), steps)


@pytest.mark.tlc
def test_replay_seed_466_streamed(benchmark: Any, seed: list[Behaviour]) -> None:
    steps = benchmark.pedantic(_replay, args=(SEED, seed, 0, True), rounds=5, iterations=1)
    assert len(seed) == 466
    _rates(benchmark, len(seed), steps)


@pytest.mark.tlc
def test_replay_big_edge_cover_one_core(benchmark: Any, big_cover: list[Behaviour]) -> None:
    steps = benchmark.pedantic(_replay, args=(BIG, big_cover), rounds=1, iterations=1)
    assert len(big_cover) == 3118
    _rates(benchmark, len(big_cover), steps)


@pytest.mark.tlc
def test_replay_big_edge_cover_all_cores(benchmark: Any, big_cover: list[Behaviour]) -> None:
    workers = max(2, os.cpu_count() or 1)
    size = -(-len(big_cover) // workers)
    chunks = [(BIG, big_cover[i : i + size], i) for i in range(0, len(big_cover), size)]
    with ProcessPoolExecutor(workers) as pool:

        def run() -> int:
            return sum(pool.map(_chunk, chunks))

        steps = benchmark.pedantic(run, rounds=1, iterations=1)
    benchmark.extra_info["workers"] = workers
    _rates(benchmark, len(big_cover), steps)
