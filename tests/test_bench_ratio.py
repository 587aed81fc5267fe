"""benchmarks.gateway_latency --repeat: the ratios of each repetition and their median, and
the section a --baseline run writes."""

from __future__ import annotations

from pathlib import Path

from benchmarks import report
from benchmarks.gateway_latency import baseline_ratios, baseline_table, ratio_spread


def _run(tpx_ms: float, cpu: float) -> tuple[dict[str, dict[str, list[float]]], dict[str, float]]:
    results = {
        "direct": {"plain": [0.001] * 3, "ttfb": [0.001] * 3},
        "tpx": {"plain": [0.001 + tpx_ms / 1e3] * 3, "ttfb": [0.002] * 3},
        "baseline": {"plain": [0.002] * 3, "ttfb": [0.002] * 3},
    }
    return results, {"tpx": cpu, "baseline": 1.0}


def test_each_repetition_and_the_median_are_printed() -> None:
    runs = [_run(1.1, 1.05), _run(0.9, 1.01), _run(1.3, 1.02)]
    ratios = baseline_ratios(*runs[0])
    assert round(ratios["plain"], 3) == 1.1
    assert ratios["ttfb"] == 1.0
    assert ratios["cpu"] == 1.05
    text = ratio_spread(runs, "REV")
    assert "over 3 repetitions" in text
    assert "gateway CPU ms per request: 1.020 (+2.0%), 1.010..1.050" in text
    assert "added p50 latency (non-streaming): 1.100 (+10.0%), 0.900..1.300" in text
    assert "each: +5.0% +1.0% +2.0%" in text


def test_a_baseline_run_writes_its_ratios_with_the_revision(tmp_path: Path) -> None:
    runs = [_run(1.1, 1.05), _run(0.9, 1.01), _run(1.3, 1.02)]
    table, notes = baseline_table(runs, "REV", "0123456789abcdef", [1.5, 2.0, 3.0], 76_288, 7)
    rows = table.splitlines()
    assert rows[0].startswith(
        "| median of the repetitions | `tpx` (this tree) | `baseline` (REV) |"
    )
    assert (
        "| added p50 latency (non-streaming) | 1.100 ms | 1.000 ms | **1.100** (+10.0%) |" in table
    )
    assert "| 0.900..1.300 | +10.0% -10.0% +30.0% |" in table
    assert "| gateway CPU per request | 1.020 ms | 1.000 ms | **1.020** (+2.0%) |" in table
    assert "`REV` = 0123456789ab" in notes[0]
    assert "74.5 KB" in notes[1]
    assert "7 rounds" in notes[1]
    assert "3 repetitions" in notes[1]
    assert notes[2].endswith("1.5, 2.0, 3.0.")
    doc = tmp_path / "perf.md"
    doc.write_text("<!-- bench:baseline -->\nold\n<!-- /bench:baseline -->\n")
    report.write_section(
        "baseline", "cmd --baseline REV", table, notes=notes, doc=doc, part_of=None
    )
    text = doc.read_text()
    assert "old" not in text
    assert "Written by `cmd --baseline REV` on " in text
    assert "part of" not in text
