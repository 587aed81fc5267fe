"""Benchmarks (``make bench``); their tables go into docs/performance.md (benchmarks.report)."""
