"""The mirror knows which spec it mirrors: shipped copies, fingerprints, refusals."""

from __future__ import annotations

from pathlib import Path

import pytest

from tpx.cli import main
from tpx.oracle.model import TRANSPORT, registry
from tpx.oracle.model.fingerprint import fingerprint, first_difference, tokens
from tpx.oracle.model.registry import (
    MirroredSpec,
    SpecMismatchError,
    check_mirrored,
    lookup,
    mirrored,
    register,
)

ROOT = Path(__file__).parents[3]
SPEC = ROOT / "spec" / "TpxTransport.tla"
CFG = ROOT / "spec" / "TpxTransport.cfg"
MUTANTS = sorted((ROOT / "spec" / "mutants").glob("*.tla"))
TRACE = '{"hasKey": false, "hasToken": true, "provider": "TPX", "turn": 0, "phase": "idle", "pending": [], "reqIds": [], "wireShape": "messages", "wireIds": [], "emitted": [], "gotShape": "messages", "lastOutcome": "none"}\n'  # noqa: E501


def test_the_shipped_spec_is_the_repositorys() -> None:
    """tpx/oracle/specs/ ships byte-identical copies of spec/ (spec/ is the canonical one)."""
    assert TRANSPORT.spec_path.read_bytes() == SPEC.read_bytes()
    assert TRANSPORT.cfg_path.read_bytes() == CFG.read_bytes()
    assert TRANSPORT.spec_path.parent.parent.name == "oracle"


def test_the_registry_knows_the_seed() -> None:
    assert lookup("TpxTransport") is TRANSPORT
    assert "TpxTransport" in mirrored()
    assert lookup("MutShapeInv") is None


def test_registering_a_mirror_is_one_call(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))
    probe = register(MirroredSpec("TpxProbeOnly", invariants=("Inv",)))
    assert lookup("TpxProbeOnly") is probe
    assert probe.spec_path.name == "TpxProbeOnly.tla"


def test_comments_and_layout_do_not_count(tmp_path: Path) -> None:
    text = SPEC.read_text()
    relaid = (
        "header text before the module is ignored\n"
        + text.replace("\n", "\n\n").replace("==", "  ==  ", 3).replace("    ", "\t")
        + "\n\\* a trailing comment\n"
    )
    relaid = relaid.replace("VARIABLES", "(* a (* nested *) comment *) VARIABLES", 1)
    assert fingerprint(relaid) == fingerprint(text)
    copy = tmp_path / "TpxTransport.tla"
    copy.write_text(relaid)
    (tmp_path / "TpxTransport.cfg").write_text(CFG.read_text())
    assert check_mirrored(copy).mirror is TRANSPORT


def test_strings_and_names_count() -> None:
    text = SPEC.read_text()
    changed = text.replace('"openai"', '"openAI"', 1)
    assert fingerprint(changed) != fingerprint(text)
    diff = first_difference(tokens(changed), tokens(text))
    assert diff is not None
    line = diff[0]
    assert '"openAI"' in changed.splitlines()[line - 1]


def renamed(mutant: Path, tmp_path: Path) -> Path:
    """The mutant under the seed's module name (the hardest case: only the body differs)."""
    out = tmp_path / "TpxTransport.tla"
    out.write_text(mutant.read_text().replace(f"MODULE {mutant.stem}", "MODULE TpxTransport"))
    (tmp_path / "TpxTransport.cfg").write_text(mutant.with_suffix(".cfg").read_text())
    return out


def syntax_broken(tmp_path: Path) -> Path:
    out = tmp_path / "TpxTransport.tla"
    out.write_text(SPEC.read_text().replace("Next ==", "Next =", 1))
    (tmp_path / "TpxTransport.cfg").write_text(CFG.read_text())
    return out


@pytest.mark.parametrize("mutant", MUTANTS, ids=lambda p: p.stem)
def test_explore_refuses_every_mutant(
    mutant: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert len(MUTANTS) >= 6
    assert main(["explore", str(mutant)]) == 2
    err = capsys.readouterr().err
    assert f"found module {mutant.stem}" in err
    assert "tpx tlc" in err
    same_name = renamed(mutant, tmp_path)
    assert main(["explore", str(same_name)]) == 2
    (err,) = capsys.readouterr().err.splitlines()
    assert err.startswith(f"tpx: error: {same_name} differs from the TpxTransport")
    assert "first at line" in err
    assert f"tpx tlc {same_name}" in err


@pytest.mark.parametrize("mutant", MUTANTS, ids=lambda p: p.stem)
def test_check_trace_refuses_every_mutant(
    mutant: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = tmp_path / "t.jsonl"
    trace.write_text(TRACE)
    assert main(["check-trace", str(trace), "--spec", str(mutant)]) == 2
    assert "tpx tlc" in capsys.readouterr().err
    sub = tmp_path / "renamed"
    sub.mkdir()
    assert main(["check-trace", str(trace), "--spec", str(renamed(mutant, sub))]) == 2
    assert "differs from the TpxTransport" in capsys.readouterr().err


def test_a_syntax_broken_copy_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    broken = syntax_broken(tmp_path)
    trace = tmp_path / "t.jsonl"
    trace.write_text(TRACE)
    for args in (["explore", str(broken)], ["check-trace", str(trace), "--spec", str(broken)]):
        assert main(args) == 2
        err = capsys.readouterr().err
        assert "'Next = Halted" in err or "Next =" in err, err
        assert "differs from the TpxTransport" in err


@pytest.mark.parametrize(
    ("old", "new", "fragment"),
    [
        ("TypeOK\n", "TypeOk\n", "INVARIANT TypeOk is not defined in TpxTransport"),
        ("    SelectionStable", "    SelectionStabel", "PROPERTY SelectionStabel is not defined"),
        ("SPECIFICATION Spec", "SPECIFICATION Spc", "SPECIFICATION Spc is not defined"),
    ],
)
def test_cfg_names_are_checked_as_tlc_does(
    old: str, new: str, fragment: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = tmp_path / "my.cfg"
    text = CFG.read_text()
    assert old in text
    cfg.write_text(text.replace(old, new, 1))
    assert main(["explore", "--config", str(cfg)]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(f"tpx: error: {cfg}: ")
    assert fragment in line


def test_only_the_named_invariants_are_checked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A first state handing the caller an OpenAI body: ShapeInv rejects it when the cfg
    names ShapeInv; without it the state is judged by Init alone (as TLC would)."""
    trace = tmp_path / "t.jsonl"
    trace.write_text(TRACE.replace('"gotShape": "messages"', '"gotShape": "openai"'))
    assert main(["check-trace", str(trace)]) == 1
    assert "(ShapeInv)" in capsys.readouterr().out
    cfg = tmp_path / "noshape.cfg"
    cfg.write_text(CFG.read_text().replace("    ShapeInv\n", ""))
    assert main(["check-trace", str(trace), "--config", str(cfg)]) == 1
    out = capsys.readouterr().out
    assert "(Init)" in out
    assert "ShapeInv" not in out
    assert check_mirrored(SPEC, cfg).invariants == (
        "TypeOK",
        "PairingInv",
        "SelectionInv",
        "BoundedInv",
    )


def test_a_spec_without_module_header(tmp_path: Path) -> None:
    spec = tmp_path / "x.tla"
    spec.write_text("nothing here\n")
    with pytest.raises(SpecMismatchError, match="no ---- MODULE"):
        check_mirrored(spec, CFG)
