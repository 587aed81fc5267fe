"""tpx.oracle.graphviz: coverage pictures and figures. Tests that render need graphviz's `dot`
installed (`apt-get install graphviz`); without it they FAIL with GraphvizNotFoundError."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tpx.cli import main
from tpx.oracle.graphviz import (
    COVERED_FILL,
    COVERED_LINE,
    UNCOVERED_FILL,
    GraphvizError,
    GraphvizNotFoundError,
    coverage_summary,
    covered_by,
    load_covered,
    render_coverage,
    state_label,
    to_dot,
)
from tpx.oracle.itf import dump_itf
from tpx.oracle.model import Config, explore
from tpx.oracle.model.explore import Graph
from tpx.oracle.values import Record

TINY = Config.of(1, 1)
FULL = Config.of(2, 3)


def graph_of(config: Config) -> Graph:
    g = explore(config, keep_graph=True).graph
    assert g is not None
    return g


G = graph_of(TINY)


def a_path(g: Graph) -> list[Record]:
    """Init (TPX) -> CallerSend -> ProviderReply(t1) -> Deliver -> Halted."""
    out: dict[Record, list[tuple[Record, str]]] = {}
    for s, t, a in g.edges:
        out.setdefault(s, []).append((t, a))
    state = next(s for s in g.initial if not s["hasKey"] and s["hasToken"])
    path = [state]
    for want in ("CallerSend", "ProviderReply", "Deliver", "Halted"):
        state = sorted((t for t, a in out[state] if a == want), key=lambda t: -len(t["emitted"]))[0]
        path.append(state)
    return path


def test_full_coverage_figures_are_tlcs() -> None:
    g = graph_of(FULL)
    assert coverage_summary(g, g.states, g.edges) == (
        "states 361/361 (100.0%), edges 574/574 (100.0%)"
    )
    assert coverage_summary(g, set(), set()) == "states 0/361 (0.0%), edges 0/574 (0.0%)"


def test_partial_coverage_counts_pairs_and_labelled_edges() -> None:
    states, edges = covered_by([a_path(G)])
    assert len(states) == 4  # Halted repeats the last one
    assert len(edges) == 4  # the final Halted self-loop included
    assert coverage_summary(G, states, edges) == (
        f"states 4/{len(G.states)} ({400 / len(G.states):.1f}%), "
        f"edges 4/{len(G.edges)} ({400 / len(G.edges):.1f}%)"
    )
    s0, s1 = a_path(G)[:2]
    assert "edges 1/" in coverage_summary(G, set(), {(s0, s1, "CallerSend")})
    assert "edges 0/" in coverage_summary(G, set(), {(s0, s1, "Deliver")})


def test_dot_source_colours_covered_and_uncovered() -> None:
    path = a_path(G)
    states, edges = covered_by([path])
    dot = to_dot(G, states, edges)
    nodes = re.findall(r'^  (s\d+) \[label="([^"]*)", fillcolor="([^"]*)"', dot, re.M)
    assert len(nodes) == len(G.states)
    assert sum(fill == COVERED_FILL for _, _, fill in nodes) == 4
    assert sum(fill == UNCOVERED_FILL for _, _, fill in nodes) == len(G.states) - 4
    arrows = re.findall(r'^  s\d+ -> s\d+ \[label="(\w+)", color="([^"]*)"', dot, re.M)
    assert len(arrows) == len(G.edges)
    assert sorted(a for a, c in arrows if c == COVERED_LINE) == sorted(
        ["CallerSend", "ProviderReply", "Deliver", "Halted"]
    )
    assert dot.count("peripheries=2") == len(G.initial)
    assert state_label(path[3]) == "TPX -T 1 idle ok\\np={t1}"
    assert state_label(path[1]) == "TPX -T 0 req none\\np={} w={}"


def test_render_svg(tmp_path: Path) -> None:
    states, edges = covered_by([a_path(G)])
    out = render_coverage(G, states, edges, tmp_path / "cov.svg")
    svg = out.read_text()
    assert svg.lstrip().startswith("<?xml")
    assert "<svg" in svg
    assert svg.count('class="node"') == len(G.states)
    assert svg.count('class="edge"') == len(G.edges)
    assert COVERED_LINE in svg
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cov.svg"]  # no cov.dot beside it


def test_dot_format_needs_no_binary(tmp_path: Path) -> None:
    out = render_coverage(G, set(), set(), tmp_path / "g.dot", fmt="dot", dot="/nonexistent/dot")
    assert out.read_text().startswith("digraph coverage {")


def test_missing_dot_names_the_install_command(tmp_path: Path) -> None:
    with pytest.raises(GraphvizNotFoundError, match="apt-get install graphviz") as info:
        render_coverage(G, set(), set(), tmp_path / "g.svg", dot=str(tmp_path / "no-dot"))
    assert "make graphviz" in str(info.value)


def test_dot_failure_is_reported(tmp_path: Path) -> None:
    with pytest.raises(GraphvizError, match=r"dot -Tnope failed"):
        render_coverage(G, set(), set(), tmp_path / "g.nope", fmt="nope")


def test_cli_graph(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = tmp_path / "tiny.cfg"
    cfg.write_text("SPECIFICATION Spec\nCONSTANTS\n  MaxTurns = 1\n  ToolIds = {t1}\n")
    trace = tmp_path / "t.itf.json"
    dump_itf(trace, a_path(G))
    assert load_covered([trace], TINY) == covered_by([a_path(G)])
    out = tmp_path / "cov.svg"
    assert main(["graph", "--config", str(cfg), "--covered", str(trace), "-o", str(out)]) == 0
    line = capsys.readouterr().out.strip()
    assert line == f"{out}: {coverage_summary(G, *covered_by([a_path(G)]))}"
    assert "<svg" in out.read_text()
    out2 = tmp_path / "all.dot"
    assert main(["graph", "--config", str(cfg), "-o", str(out2)]) == 0
    assert "states 0/23 (0.0%)" in capsys.readouterr().out
    assert COVERED_FILL not in out2.read_text()
