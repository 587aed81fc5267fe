"""Random behaviours from TLC's ``-simulate`` mode."""

from __future__ import annotations

import re
import tempfile
from pathlib import Path

from tpx.errors import (
    TLCCrashError,
)
from tpx.oracle.tlc.cfg import StrPath
from tpx.oracle.tlc.graph import _graph_model
from tpx.oracle.tlc.runner import load_model, run_model
from tpx.oracle.tlc.values import parse_state
from tpx.oracle.values import Record

__all__ = ["simulate"]

_STATE_HEADER = re.compile(r"^STATE_(\d+) ==\s*$", re.MULTILINE)


def _parse_sim_file(text: str) -> tuple[Record, ...]:
    parts = _STATE_HEADER.split(text)
    states: list[Record] = []
    for i in range(2, len(parts), 2):
        body = re.sub(r"^=+\s*$", "", parts[i], flags=re.MULTILINE)
        states.append(parse_state(body))
    return tuple(states)


def simulate(
    spec: StrPath,
    cfg: StrPath | None = None,
    *,
    num: int,
    depth: int,
    seed: int,
    timeout: float | None = None,
) -> list[tuple[Record, ...]]:
    """*num* random behaviours of *depth* states each (``-simulate``; invariants,
    properties and deadlock checking off). TLC 2.15 pads ends with stuttering steps."""
    model = _graph_model(load_model(cfg, Path(spec)))
    with tempfile.TemporaryDirectory(prefix="tpx-sim-") as tmp:
        sim_dir = Path(tmp)
        args = ["-simulate", f"file={sim_dir / 'tr'},num={num}", "-depth", str(depth)]
        args += ["-seed", str(seed)]
        result = run_model(spec, model, extra_args=args, timeout=timeout)
        if not result.ok:
            raise TLCCrashError(f"simulation did not complete: {result.verdict}")
        files = sorted(
            sim_dir.glob("tr_*"), key=lambda p: tuple(int(x) for x in p.name.split("_")[1:])
        )
        return [_parse_sim_file(f.read_text(encoding="utf-8")) for f in files]
