"""``python -m tpx.audit.serve -- ARGS...``: the real ``tpx serve`` (``tpx.cli.main(ARGS)``)
whose ``/metrics`` also shows its tail cache's hits (:class:`tpx.gateway.bodies.BodyReader`,
bodies whose head alone was parsed) as ``tpx_conformance_tail_cache_hits``, so a replay can
assert that its bodies went through the cache.

It seeds no bug: a launcher that patches a seeded bug in first (the repository's
``conformance/serve.py``) calls :func:`count_tail_hits` and :func:`tpx.cli.main` itself,
and is named to :class:`tpx.audit.harness.Harness` as its ``bug_launcher``.
"""

from __future__ import annotations

import sys
from typing import Any

from prometheus_client import Gauge

import tpx.gateway.core
from tpx.audit.harness import TAIL_HITS  # the gauge's name in ``/metrics``
from tpx.cli import main as tpx_main

__all__ = ["count_tail_hits", "main"]


def count_tail_hits() -> None:
    """Every gateway this process builds shows its tail cache's hits in ``/metrics``."""
    real = tpx.gateway.core.Gateway.__init__
    if getattr(real, "counts_tail_hits", False):
        return

    def init(self: tpx.gateway.core.Gateway, *args: Any, **kwargs: Any) -> None:
        real(self, *args, **kwargs)
        gauge = Gauge(
            TAIL_HITS, "Bodies whose kept tail was reused", registry=self.metrics.registry
        )
        gauge.set_function(lambda: self.bodies.hits)

    init.counts_tail_hits = True  # type: ignore[attr-defined]
    tpx.gateway.core.Gateway.__init__ = init  # type: ignore[method-assign]


def main(argv: list[str]) -> int:
    if argv[:1] == ["--"]:
        argv = argv[1:]
    count_tail_hits()
    return tpx_main(argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
