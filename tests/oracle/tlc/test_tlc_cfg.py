"""tpx.oracle.tlc.cfg: reading, writing and adjusting TLC model configurations."""

from __future__ import annotations

from pathlib import Path

import pytest

from tpx.errors import SpecConfigError
from tpx.oracle.tlc.cfg import ModelConfig, load_cfg, parse_cfg, render_cfg, with_constants
from tpx.oracle.values import ModelValue, Record

SEED_CFG = Path(__file__).resolve().parents[3] / "spec" / "TpxTransport.cfg"


def test_seed_cfg() -> None:
    cfg = load_cfg(SEED_CFG)
    assert cfg.specification == "Spec"
    assert cfg.init is None
    assert cfg.next is None
    assert cfg.constants == {
        "MaxTurns": 3,
        "ToolIds": frozenset({ModelValue("t1"), ModelValue("t2")}),
        "ANTHROPIC": ModelValue("ANTHROPIC"),
        "TPX": ModelValue("TPX"),
        "NONE": ModelValue("NONE"),
    }
    assert cfg.invariants == ("TypeOK", "ShapeInv", "PairingInv", "SelectionInv", "BoundedInv")
    assert cfg.properties == ("SelectionStable",)
    assert cfg.check_deadlock is True


def test_comments_keywords_and_multiline_values() -> None:
    text = """
    \\* line comment INVARIANT Nope
    (* block (* nested *) comment
       PROPERTY Nope *)
    INIT Init NEXT Next
    CONSTANT Name = "x (* not a comment *) y"  N = -2
    CONSTANTS Set = {a,
                     b}  R = [f |-> <<1, TRUE>>]
    INVARIANTS I1 I2
    INVARIANT I3
    PROPERTIES P1
    PROPERTY P2
    CHECK_DEADLOCK FALSE
    """
    cfg = parse_cfg(text)
    assert cfg == ModelConfig(
        init="Init",
        next="Next",
        constants={
            "Name": "x (* not a comment *) y",
            "N": -2,
            "Set": frozenset({ModelValue("a"), ModelValue("b")}),
            "R": Record(f=(1, True)),
        },
        invariants=("I1", "I2", "I3"),
        properties=("P1", "P2"),
        check_deadlock=False,
    )


def test_render_round_trips_without_check_deadlock() -> None:
    cfg = load_cfg(SEED_CFG)
    text = render_cfg(cfg)
    assert "CHECK_DEADLOCK" not in text
    assert parse_cfg(text) == attrs_evolve_deadlock(cfg)


def attrs_evolve_deadlock(cfg: ModelConfig) -> ModelConfig:
    import attrs

    return attrs.evolve(cfg, check_deadlock=None)


def test_with_constants() -> None:
    cfg = load_cfg(SEED_CFG)
    bigger = with_constants(cfg, MaxTurns=5, Extra="x")
    assert bigger.constants["MaxTurns"] == 5
    assert bigger.constants["Extra"] == "x"
    assert bigger.constants["TPX"] == ModelValue("TPX")
    assert cfg.constants["MaxTurns"] == 3
    assert "MaxTurns = 5" in render_cfg(bigger)


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("SPECIFICATION Spec\nFOO Bar\n", "line 2: expected a cfg keyword"),
        ("SPECIFICATION Spec\nCONSTANTS\n  MaxTurns == 3\n", "line 3"),
        ("CONSTANTS\n  MaxTurns 3\n", "line 2: expected '=' after the constant MaxTurns"),
        ("CONSTANTS\n  X = {1,\n", "bad value for constant X"),
        ("CONSTANTS\n  X <- {1}\n", "X <- needs an operator name"),
        ("CONSTANTS X = 1\nCONSTANTS X = 2\n", "line 2: constant X assigned twice"),
        ("CONSTANTS X =\nINIT I\n", "constant X has no value"),
        ("\n\nCHECK_DEADLOCK maybe\n", "line 3: CHECK_DEADLOCK needs TRUE or FALSE"),
        ("SPECIFICATION\n", "line 1: SPECIFICATION needs an operator name"),
        ("SPECIFICATION A\nSPECIFICATION B\n", "line 2: SPECIFICATION given twice"),
        ("INVARIANT\nINIT I NEXT N\n", "INVARIANT needs at least one"),
        ("INIT I\n", "INIT and NEXT must be given together"),
        ("SPECIFICATION S INIT I NEXT N\n", "cannot be combined"),
        ("POSTCONDITION P\n", "POSTCONDITION is not known to TLC 2.15"),
        ("CONSTANTS X = 1 X <- Y\n", "constant X assigned twice"),
        ("SYMMETRY\nINIT I\n", "SYMMETRY needs at least one"),
        ("(* open\nSPECIFICATION S\n", "unterminated"),
        ("SPECIFICATION S\n  # \n", "line 2: unexpected character '#'"),
    ],
)
def test_bad_cfg_names_the_line(text: str, fragment: str) -> None:
    with pytest.raises(SpecConfigError) as info:
        parse_cfg(text)
    assert fragment in str(info.value)


def test_load_cfg_missing_file(tmp_path: Path) -> None:
    with pytest.raises(SpecConfigError, match="cannot read cfg file"):
        load_cfg(tmp_path / "nope.cfg")


def test_load_cfg_not_utf8(tmp_path: Path) -> None:
    path = tmp_path / "latin1.cfg"
    path.write_bytes("\\* Grüße\nSPECIFICATION Spec\n".encode("latin-1"))
    with pytest.raises(SpecConfigError, match=r"latin1\.cfg is not UTF-8 text \(byte 5"):
        load_cfg(path)


def test_every_keyword_tlc_knows_round_trips() -> None:
    text = (
        "SPECIFICATION Spec\nCONSTANTS\n  Procs = {p1, p2}\n  N <- Two\n"
        "CONSTRAINT Small\nCONSTRAINTS Tiny\nACTION_CONSTRAINT Slow\nSYMMETRY Sym\n"
        "VIEW View\nALIAS Alias\nINVARIANT Inv\nPROPERTY Prop\n"
    )
    cfg = parse_cfg(text)
    assert cfg.substitutions == {"N": "Two"}
    assert cfg.constraints == ("Small", "Tiny")
    assert cfg.action_constraints == ("Slow",)
    assert (cfg.symmetry, cfg.view, cfg.alias) == (("Sym",), ("View",), ("Alias",))
    assert parse_cfg(render_cfg(cfg)) == cfg
    assert cfg.mirror_free() == [
        "CONSTRAINT",
        "ACTION_CONSTRAINT",
        "SYMMETRY",
        "VIEW",
        "ALIAS",
        "`<-` substitution",
    ]
