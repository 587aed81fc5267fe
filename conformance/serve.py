"""``python -m conformance.serve [--bug NAME] -- ARGS...``: ``tpx serve`` as
:mod:`tpx.audit.serve` runs it, with one seeded bug of :mod:`conformance.gateway_bugs`,
:mod:`conformance.audit_bugs` or :mod:`conformance.pool_bugs` patched in first when ``--bug``
names one.

The replays' harnesses name it as their ``bug_launcher``
(:class:`tpx.audit.harness.Harness`); the installed package never needs it.
"""

from __future__ import annotations

import sys
from typing import Any

import pytest

from conformance.audit_bugs import AUDIT_BUGS
from conformance.gateway_bugs import GATEWAY_BUGS
from conformance.pool_bugs import POOL_BUGS, UNSEEN_POOL_BUGS
from tpx.audit.serve import count_tail_hits
from tpx.cli import main as tpx_main

#: the module name a harness launches
LAUNCHER = "conformance.serve"


def main(argv: list[str]) -> int:
    bug = None
    if argv[:1] == ["--bug"]:
        bug, argv = argv[1], argv[2:]
    if argv[:1] == ["--"]:
        argv = argv[1:]
    count_tail_hits()
    if bug is not None:
        bugs: tuple[Any, ...] = (*GATEWAY_BUGS, *AUDIT_BUGS, *POOL_BUGS, *UNSEEN_POOL_BUGS)
        (chosen,) = [b for b in bugs if b.name == bug]
        chosen.patch(pytest.MonkeyPatch())  # patched for the life of the process
    return tpx_main(argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
