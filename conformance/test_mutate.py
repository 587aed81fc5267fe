"""The mutation tooling itself (``make mutate``): mutation points, stable ids, the lists it
reads. The campaign is ``make mutate`` (slow, niced), not part of the test suite."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from conformance.mutate.__main__ import ROOT, _pristine, equivalents, targets
from conformance.mutate.judge import GATEWAY_SUITE
from conformance.mutate.mutator import mutants, sample

SAMPLE = '''
def f(a, b):
    """doc"""
    if a == b and not a:
        return a + 1
    while a < 3:
        a += 1
        break
    return True
'''


def test_every_operator_makes_a_compiling_single_change(tmp_path: Path) -> None:
    path = tmp_path / "m.py"
    path.write_text(SAMPLE)
    found = mutants(path, tmp_path)
    assert {m.operator for m in found} == {
        "cmp",
        "bool",
        "not",
        "const",
        "binop",
        "cond",
        "loop",
        "stmt",
    }
    assert len({m.id for m in found}) == len(found)
    original = ast.unparse(ast.parse(SAMPLE))
    for m in found:
        assert m.source != original
        compile(m.source, m.path, "exec")
        assert '"""doc"""' in m.source or "'doc'" in m.source  # docstrings are left alone
    assert any("a != b" in m.source for m in found)
    assert any("a - 1" in m.source for m in found)


def test_ids_survive_edits_elsewhere_in_the_file(tmp_path: Path) -> None:
    path = tmp_path / "m.py"
    path.write_text(SAMPLE)
    before = {m.id: m.source for m in mutants(path, tmp_path)}
    path.write_text("import os\n\n\ndef g(x):\n    return x == 1\n" + SAMPLE.replace("\n", "\n\n"))
    after = {m.id: m for m in mutants(path, tmp_path)}
    assert set(before) <= set(after)  # no id moved with the lines
    for ident, source in before.items():  # ... and each still names the same mutation
        assert after[ident].source.endswith(source.split("def f", 1)[1])
    assert "m.py::f::cmp::a == b => a != b" in before
    assert "m.py::f::cond::while a < 3 => while not a < 3" in before
    assert "m.py::f::const::a + 1 => a + 2" in before
    assert "m.py::f::loop::break => continue" in before


def test_an_id_holding_a_pipe_reads_back(tmp_path: Path) -> None:
    path = tmp_path / "m.py"
    path.write_text("def f(a, b):\n    return a | b\n")
    (binop,) = [m for m in mutants(path, tmp_path) if m.operator == "binop"]
    assert binop.id == "m.py::f::binop::a | b => a & b"
    listed = tmp_path / "equivalent.txt"
    listed.write_text(f"# comment\n{binop.id} | a reason\nm.py::f::stmt::x => pass |\n")
    with pytest.raises(SystemExit, match="needs a reason"):
        equivalents(listed)
    listed.write_text(f"{binop.id} | a reason\n")
    assert equivalents(listed) == {binop.id: "a reason"}


def test_sample_is_seeded_and_per_file(tmp_path: Path) -> None:
    for name in ("a.py", "b.py"):
        (tmp_path / name).write_text(SAMPLE)
    found = [m for name in ("a.py", "b.py") for m in mutants(tmp_path / name, tmp_path)]
    one, two = sample(found, 3, seed=5), sample(found, 3, seed=5)
    assert [m.id for m in one] == [m.id for m in two]
    assert sorted({m.path for m in one}) == ["a.py", "b.py"]
    assert len(one) == 6
    alone = sample([m for m in found if m.path == "a.py"], 3, seed=5)
    assert [m.id for m in alone] == [m.id for m in one if m.path == "a.py"]  # per file


def test_targets_and_equivalents_are_data() -> None:
    files = targets()
    assert ROOT / "tpx/transport/translate/ids.py" in files
    assert ROOT / "tpx/transport/exchange.py" in files
    assert ROOT / "tpx/gateway/core.py" in files
    assert all((ROOT / case).exists() for case in GATEWAY_SUITE)  # the judge's cases
    assert all(p.exists() for p in files)
    known = {m.id for p in files for m in mutants(p, ROOT)}
    listed = equivalents()
    assert listed
    assert all(reason for reason in listed.values())
    assert set(listed) <= known  # no stale entry


def test_the_pristine_copy_collects_the_gateway_suite(tmp_path: Path) -> None:
    """The judge's private copy holds everything the gateway conformance cases import:
    a missing helper makes the unmutated baseline fail and the campaign measure nothing."""
    pristine = _pristine(tmp_path)
    done = subprocess.run(
        [
            *(sys.executable, "-m", "pytest", "--collect-only", "-q", "-m", ""),
            *("-p", "no:xdist", *GATEWAY_SUITE),
        ],
        cwd=pristine,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]


def test_tally_takes_the_last_verdict_of_each_mutant(tmp_path: Path) -> None:
    """``conformance.mutate.tally``: a campaign's printed verdicts or its ``.json``; a mutant
    judged again takes its later verdict."""
    import json

    from conformance.mutate.tally import merged

    ident = "tpx/gateway/drive.py::f::stmt::x = 1 => pass"
    log = tmp_path / "first.log"
    log.write_text(
        "90 mutants in 3 files; judging 2\n"
        f"[1/2] survived {ident} (50.2 s): the conformance cases pass\n"
        "[2/2] killed   tpx/gateway/drive.py::g::cmp::a < b => a <= b (4.0 s): case: x (y)\n"
    )
    again = tmp_path / "again.json"
    again.write_text(json.dumps({"rate": 100.0, "results": [{"id": ident, "verdict": "killed"}]}))
    first = {str(r["id"]): r["verdict"] for r in merged([log])}
    assert first == {ident: "survived", "tpx/gateway/drive.py::g::cmp::a < b => a <= b": "killed"}
    both = {str(r["id"]): r["verdict"] for r in merged([log, again])}
    assert both[ident] == "killed"


def test_tally_current_keeps_the_sample_drawn_now_and_names_the_unjudged(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``tally --current``: a verdict of a mutant outside the sample drawn from the code now
    is left out; a mutant of that sample no report judged is named, and fails the tally."""
    from conformance.mutate.tally import current, main

    path = "tpx/gateway/history.py"
    drawn = current([path], 2, 12)
    assert len(drawn) == 2
    other = next(m.id for m in mutants(ROOT / path, ROOT) if m.id not in drawn)
    log = tmp_path / "campaign.log"
    log.write_text(
        f"[1/2] killed   {drawn[0]} (5.0 s): case: x\n[2/2] killed   {other} (5.0 s): case: y\n"
    )
    args = ["--current", "--per-file", "2", "--file", path]
    assert main([*args, str(log)]) == 1
    out = capsys.readouterr().out
    assert out.startswith("kill rate: 1/1 = 100.0% (1 mutants,")
    assert f"UNJUDGED   {drawn[1]}" in out
    assert other not in out
    log.write_text(log.read_text() + f"[3/3] killed   {drawn[1]} (5.0 s): case: z\n")
    assert main([*args, str(log)]) == 0
    assert capsys.readouterr().out.startswith("kill rate: 2/2 = 100.0% (2 mutants,")
