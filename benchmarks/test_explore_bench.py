"""Explorer against TLC, side by side in one run (``make bench``).

Wall time of a whole TLC run (JVM start included, 2 workers) against the
packed explorer on the same constants; the ratio explorer / TLC is printed
and stored in the benchmark's ``extra_info``. Correctness is asserted (both
find the same number of distinct states); time never is.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from pytest_benchmark.fixture import BenchmarkFixture

from benchmarks.report import Rows
from tpx.oracle.model import Config
from tpx.oracle.model.packed import explore_packed
from tpx.oracle.tlc import run_tlc
from tpx.oracle.tlc.cfg import load_cfg, render_cfg, with_constants
from tpx.oracle.values import ModelValue

SPEC = Path(__file__).parents[1] / "spec" / "TpxTransport.tla"
_ROWS = Rows(
    "explore",
    ".venv/bin/python -m pytest benchmarks/test_explore_bench.py -p no:xdist --benchmark-only",
    (
        "ToolIds",
        "MaxTurns",
        "distinct states",
        "TLC (2 workers, JVM start included)",
        "packed explorer",
        "explorer / TLC",
    ),
)


@pytest.mark.parametrize(
    ("tool_ids", "max_turns"), [(2, 3), (4, 6), (7, 4), (7, 6), (8, 4), (8, 6)]
)
def test_explorer_vs_tlc(
    benchmark: BenchmarkFixture,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    tool_ids: int,
    max_turns: int,
) -> None:
    ids = frozenset(ModelValue(f"t{i}") for i in range(1, tool_ids + 1))
    cfg = with_constants(load_cfg(SPEC.with_suffix(".cfg")), ToolIds=ids, MaxTurns=max_turns)
    cfg_path = tmp_path / "TpxTransport.cfg"
    cfg_path.write_text(render_cfg(cfg))
    t0 = time.perf_counter()
    tlc = run_tlc(SPEC, cfg_path, workers=2)
    tlc_s = time.perf_counter() - t0
    assert tlc.verdict.kind == "ok"

    config = Config.of(tool_ids, max_turns)
    result = benchmark.pedantic(  # type: ignore[no-untyped-call]
        explore_packed, args=(config,), rounds=2, iterations=1
    )
    assert result.ok
    assert result.distinct == tlc.distinct
    assert result.generated == tlc.generated
    assert benchmark.stats is not None
    mirror_s = benchmark.stats.stats.min
    ratio = mirror_s / tlc_s
    benchmark.extra_info.update(
        distinct=result.distinct, tlc_wall_s=round(tlc_s, 3), explorer_over_tlc=round(ratio, 3)
    )
    _ROWS.add(
        tool_ids,
        max_turns,
        f"{result.distinct:,}",
        f"{tlc_s:.2f} s",
        f"{mirror_s:.3f} s",
        f"**{ratio:.3f}**",
    )
    with capsys.disabled():
        print(
            f"\n[explore-vs-tlc] ToolIds={tool_ids} MaxTurns={max_turns} "
            f"distinct={result.distinct:,} tlc={tlc_s:.2f}s explorer={mirror_s:.2f}s "
            f"ratio={ratio:.2f}"
        )
