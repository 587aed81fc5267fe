"""``python -m conformance.gateway_http.serve [--bug NAME] -- ARGS...``: the real
``tpx serve`` (``tpx.cli.main(ARGS)``), with one seeded bug of
:mod:`conformance.gateway_bugs` patched in first when ``--bug`` names one."""

from __future__ import annotations

import sys

import pytest

from conformance.gateway_bugs import GATEWAY_BUGS
from tpx.cli import main as tpx_main


def main(argv: list[str]) -> int:
    bug = None
    if argv[:1] == ["--bug"]:
        bug, argv = argv[1], argv[2:]
    if argv[:1] == ["--"]:
        argv = argv[1:]
    if bug is not None:
        (chosen,) = [b for b in GATEWAY_BUGS if b.name == bug]
        chosen.patch(pytest.MonkeyPatch())  # for the life of the process
    return tpx_main(argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
