"""What the preflight's count costs to refuse a huge text: counted in full, or stopped once the
count passes what the window takes (side by side, CPU time).

Run: ``python -m benchmarks.preflight_refusal [--mb 30] [--window 200000]`` (prints the CPU
seconds of both counts of one ``--mb`` MB user text, the counts, and their ratio).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

from tpx.gateway import tokens
from tpx.gateway.context.counting import estimate_tokens
from tpx.gateway.context.preflight import maximum_input


def _cpu(run: Callable[[], int]) -> tuple[float, int]:
    start = time.process_time()
    count = run()
    return time.process_time() - start, count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--mb", type=int, default=30)
    parser.add_argument("--window", type=int, default=200_000)
    args = parser.parse_args()
    size = args.mb * 1_000_000
    text = ("the quick brown fox jumps over the lazy dog " * (size // 44 + 1))[:size]
    body: dict[str, Any] = {"messages": [{"role": "user", "content": text}]}
    tokens.encoding()  # the vocabulary loaded before the clock runs
    maximum = maximum_input(args.window, 32_000)
    full_cpu, full = _cpu(lambda: estimate_tokens(body))
    stopped_cpu, stopped = _cpu(lambda: estimate_tokens(body, maximum))
    print(f"{args.mb} MB text, window {args.window}, M = {maximum}")
    print(f"counted in full:  {full_cpu:8.3f} s CPU, {full} tokens")
    above = stopped > maximum
    print(f"stopped past M:   {stopped_cpu:8.3f} s CPU, {stopped} tokens (> M: {above})")
    print(f"ratio full/stopped: {full_cpu / max(stopped_cpu, 1e-9):.0f}x")


if __name__ == "__main__":
    main()
