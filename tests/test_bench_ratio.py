"""benchmarks.gateway_latency --repeat: the ratios of each repetition and their median."""

from __future__ import annotations

from benchmarks.gateway_latency import baseline_ratios, ratio_spread


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
