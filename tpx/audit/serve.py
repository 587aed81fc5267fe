"""``python -m tpx.audit.serve [--bug NAME] -- ARGS...``: the real
``tpx serve`` (``tpx.cli.main(ARGS)``), with one seeded bug of
:mod:`conformance.gateway_bugs` patched in first when ``--bug`` names one.

Every gateway it starts also shows its tail cache's hits (:class:`tpx.gateway.bodies.BodyReader`,
bodies whose head alone was parsed) in ``/metrics`` as ``tpx_conformance_tail_cache_hits``,
so the replay can assert that its bodies went through the cache.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

from prometheus_client import Gauge

import tpx.gateway.core
from tpx.cli import main as tpx_main

if TYPE_CHECKING:
    import pytest

from tpx.audit.harness import TAIL_HITS  # the gauge's name in ``/metrics``


def _count_tail_hits(mp: pytest.MonkeyPatch) -> None:
    real = tpx.gateway.core.Gateway.__init__

    def init(self: tpx.gateway.core.Gateway, *args: Any, **kwargs: Any) -> None:
        real(self, *args, **kwargs)
        gauge = Gauge(
            TAIL_HITS, "Bodies whose kept tail was reused", registry=self.metrics.registry
        )
        gauge.set_function(lambda: self.bodies.hits)

    mp.setattr(tpx.gateway.core.Gateway, "__init__", init)


def main(argv: list[str]) -> int:
    bug = None
    if argv[:1] == ["--bug"]:
        bug, argv = argv[1], argv[2:]
    if argv[:1] == ["--"]:
        argv = argv[1:]
    import pytest  # the seeded bugs are patched in as the tests patch them

    from conformance.audit_bugs import AUDIT_BUGS
    from conformance.gateway_bugs import GATEWAY_BUGS

    mp = pytest.MonkeyPatch()  # for the life of the process
    _count_tail_hits(mp)
    if bug is not None:
        (chosen,) = [b for b in (*GATEWAY_BUGS, *AUDIT_BUGS) if b.name == bug]
        chosen.patch(mp)
    return tpx_main(argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
