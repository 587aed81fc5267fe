"""The judge of one mutant: the conformance replay alone (no unit test takes part).

``python -m conformance.mutate.judge BEHAVIOURS.pickle`` replays the pickled behaviours
(the fast judging subset: the seed cfg's minimum edge cover, 157 behaviours covering all
574 edges and 361 states) through the code importable from the working directory, first
plainly, then every exchange streamed, and stops at the first behaviour that leaves the
spec. Exit status: 0 every behaviour conforms (the mutant survives), 1 a
:class:`~conformance.replay.ConformanceError` (killed: the line names the property), 2 any
other exception escaped the replay (killed: the code under test crashed the harness).
"""

from __future__ import annotations

import pickle
import sys
from pathlib import Path

from conformance.replay import Behaviour, ConformanceError, Replayer
from tpx.model import Config

__all__ = ["judge", "main"]


def judge(behaviours: list[Behaviour], config: Config) -> tuple[int, str]:
    """(exit status, one line saying why) for the code importable now."""
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


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    config, behaviours = pickle.loads(Path(args[0]).read_bytes())
    status, why = judge(behaviours, config)
    print(why)
    return status


if __name__ == "__main__":
    raise SystemExit(main())
