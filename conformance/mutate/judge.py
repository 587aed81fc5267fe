"""The judge of one mutant: the conformance suite alone (no unit test takes part).

``python -m conformance.mutate.judge BEHAVIOURS.pickle`` judges the code importable from
the working directory in two stages, stopping at the first that fails:

1. the transport replay: the pickled behaviours (the seed cfg's minimum edge cover, 157
   behaviours covering all 574 edges and 361 states) through the real transport, first
   plainly, then every exchange streamed, stopping at the first behaviour that leaves the
   spec;
2. the conformance cases (:data:`GATEWAY_SUITE`, under pytest): hostile reply shapes
   through the transport (``conformance/test_stream_edge_cases.py``), whole conversations
   through the sans-I/O gateway core in-process (:mod:`conformance.gateway_core`: tool
   loops, every upstream failure and its retry, aborts, refusals, traces checked against
   spec/TpxGateway.tla; ``conformance/test_gateway_limits_cases.py``: the refusals before
   the wire), then the seeded gateway bugs against a live ``tpx serve --monitor`` on
   loopback, then the upstream client over real loopback HTTP
   (``conformance/test_gateway_upstream_live.py``: the small cfgs replayed through ``tpx
   serve`` processes; the conformance conversations, every socket-level failure, and
   ``[[upstreams]]`` failover through the real client;
   ``conformance/test_gateway_upstream_cases.py``: upstream context errors in the Messages
   wording, a refusal after pings, a client leaving while the upstream holds its request,
   redirects, a stream's first events before the upstream ends it, a withheld
   pass-through reply, ``log_bodies``; ``conformance/test_gateway_upstream_client.py``: a
   proxy in the environment, large bursts, bodies cut short or stalled, token commands).
   The seed edge cover never reaches
   the gateway core; this stage does (and the id signing of
   :mod:`tpx.transport.translate.ids` only the gateway uses).

Exit status: 0 every stage conforms (the mutant survives), 1 a
:class:`~conformance.replay.ConformanceError` or a failed gateway conformance case
(killed: the line names the property or the case), 2 any other exception escaped the
replay (killed: the code under test crashed the harness).
"""

from __future__ import annotations

import pickle
import sys
from pathlib import Path
from typing import Any

from conformance.replay import Behaviour, ConformanceError, Replayer
from tpx.oracle.model import Config

__all__ = ["GATEWAY_SUITE", "gateway", "judge", "main"]

#: The conformance cases the judge runs after the replay (relative to the repository root).
GATEWAY_SUITE = (
    "conformance/test_stream_edge_cases.py",
    "conformance/test_gateway_core_cases.py",
    "conformance/test_gateway_limits_cases.py",
    "conformance/test_gateway_bugs_live.py",
    "conformance/test_gateway_upstream_live.py",
    "conformance/test_gateway_upstream_cases.py",
    "conformance/test_gateway_upstream_client.py",
)


def judge(behaviours: list[Behaviour], config: Config) -> tuple[int, str]:
    """(exit status, one line saying why) for the code importable now (the replay)."""
    for streaming in (False, True):
        replayer = Replayer(config, streaming=streaming)
        try:
            for i, b in enumerate(behaviours):
                try:
                    replayer.replay(b, i)
                except ConformanceError as exc:
                    mode = "streamed" if streaming else "plain"
                    return 1, f"{mode} behaviour {i}: {', '.join(exc.violated)}"
                except Exception as exc:  # the mutant broke the harness: killed too
                    return 2, f"behaviour {i}: {type(exc).__name__}: {exc}"[:300]
        finally:
            replayer.close()
    return 0, f"{len(behaviours)} behaviours conform, plain and streamed"


class _Failed:
    """A pytest plugin noting the first failed case."""

    def __init__(self) -> None:
        self.first = ""

    def pytest_runtest_logreport(self, report: Any) -> None:
        if report.failed and not self.first:
            lines = str(report.longrepr).strip().splitlines()
            last = next((x for x in reversed(lines) if x.startswith("E ")), lines[-1:] or [""])
            self.first = f"{report.nodeid}: {str(last).strip()}"[:300]


def gateway(root: Path) -> tuple[int, str]:
    """(exit status, one line) of the gateway conformance run from *root*."""
    import pytest

    failed = _Failed()
    args = [
        *(str(root / p) for p in GATEWAY_SUITE),
        "-x",
        "-q",
        "-m",
        "",  # every case of the suite, slow ones included (the default selection skips them)
        "-p",
        "no:cacheprovider",
        "-p",
        "no:xdist",
        f"--rootdir={root}",
    ]
    status = pytest.main(args, plugins=[failed])
    if status == 0:
        return 0, "the conformance cases pass"
    return 1, f"case: {failed.first or f'pytest exit status {int(status)}'}"


def main(argv: list[str] | None = None) -> int:
    """``judge BEHAVIOURS.pickle [MUTATED_PATH]``: a mutant of the gateway core
    (``tpx/gateway/...``) skips the replay, which never imports the gateway."""
    args = sys.argv[1:] if argv is None else argv
    config, behaviours = pickle.loads(Path(args[0]).read_bytes())
    gateway_only = len(args) > 1 and args[1].startswith("tpx/gateway/")
    if gateway_only:
        status, why = 0, "(no replay: it never imports the gateway)"
    else:
        status, why = judge(behaviours, config)
    if status == 0:
        status, more = gateway(Path.cwd())
        why = f"{why}; {more}"
    print(why)
    return status


if __name__ == "__main__":
    raise SystemExit(main())
