"""The mirror's reachable graph equals TLC's dumped graph, state for state and edge for edge."""

from __future__ import annotations

from pathlib import Path

import pytest

from tpx.oracle.model import Config, explore
from tpx.oracle.tlc import dump_graph
from tpx.oracle.tlc.cfg import load_cfg, render_cfg, with_constants
from tpx.oracle.values import ModelValue, TLAValue

SPEC = Path(__file__).parents[1] / "spec" / "TpxTransport.tla"
SEED_CFG = SPEC.with_suffix(".cfg")


def _ids(*names: str) -> frozenset[ModelValue]:
    return frozenset(ModelValue(n) for n in names)


CASES: dict[str, dict[str, TLAValue] | None] = {
    "seed": None,
    "ids1-turns1": {"ToolIds": _ids("t1"), "MaxTurns": 1},
    "ids3-turns6-named": {"ToolIds": _ids("read", "write", "grep"), "MaxTurns": 6},
    "ids2-turns5-providers": {
        "ToolIds": _ids("a", "b"),
        "MaxTurns": 5,
        "ANTHROPIC": ModelValue("anth"),
        "TPX": ModelValue("oai"),
        "NONE": ModelValue("nobody"),
    },
    "ids4-turns6": {"ToolIds": _ids("u1", "u2", "u3", "u4"), "MaxTurns": 6},  # 11,632 states
}


@pytest.mark.tlc
@pytest.mark.parametrize("case", list(CASES))
def test_mirror_graph_equals_tlc_dump(case: str, tmp_path: Path) -> None:
    cfg_path = SEED_CFG
    constants = CASES[case]
    if constants is not None:
        cfg_path = tmp_path / "TpxTransport.cfg"
        cfg_path.write_text(render_cfg(with_constants(load_cfg(SEED_CFG), **constants)))
    config = Config.from_constants(dict(load_cfg(cfg_path).constants))

    tlc = dump_graph(SPEC, cfg_path)
    mirror = explore(config, keep_graph=True)
    assert mirror.ok
    assert mirror.graph is not None

    assert tlc.state_set() == mirror.graph.states
    assert frozenset(tlc.states[fp] for fp in tlc.initial) == mirror.graph.initial
    assert tlc.labelled_edges() == mirror.graph.edges
    assert len(mirror.graph.states) == mirror.distinct
    if case == "seed":
        assert (mirror.initial, mirror.generated, mirror.distinct, mirror.depth) == (4, 578, 361, 9)
    if case == "ids4-turns6":
        assert mirror.distinct == 11632
