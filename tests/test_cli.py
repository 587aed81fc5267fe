"""tpx (the command line): bad input of every kind is a one-line `tpx: error: ...` and exit 2,
never a traceback; one bad trace file never hides the other files' verdicts; `graph
--covered` counts only traces the spec accepts."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tpx.cli import main
from tpx.oracle.model import Config, Init, Next, State
from tpx.oracle.values import Record

ROOT = Path(__file__).parents[1]
SPEC = ROOT / "spec" / "TpxTransport.tla"
CFG = ROOT / "spec" / "TpxTransport.cfg"
TINY_CFG = (
    "SPECIFICATION Spec\nCONSTANTS\n  MaxTurns = 1\n  ToolIds = {t1}\n"
    "  ANTHROPIC = ANTHROPIC\n  TPX = TPX\n  NONE = NONE\n"
    "INVARIANTS TypeOK ShapeInv PairingInv SelectionInv BoundedInv\nPROPERTY SelectionStable\n"
)
TINY = Config.of(1, 1)


def legal_trace(config: Config = TINY) -> list[Record]:
    """TPX: CallerSend, ProviderReply({t1}), Deliver, Halted."""
    state: State = next(s for s in Init(config) if not s.hasKey and s.hasToken)
    out = [state]
    for want in ("CallerSend", "ProviderReply", "Deliver", "Halted"):
        state = max((t for a, t in Next(state, config) if a == want), key=lambda t: len(t.emitted))
        out.append(state)
    return [s.as_record() for s in out]


def json_line(state: Record | dict[str, Any]) -> str:
    obj = {
        k: sorted(x.name for x in v) if isinstance(v, frozenset) else getattr(v, "name", v)
        for k, v in state.items()
    }
    return json.dumps(obj)


def write(path: Path, states: list[Any]) -> Path:
    path.write_text("".join(json_line(s) + "\n" for s in states))
    return path


def tiny_cfg(tmp_path: Path) -> Path:
    cfg = tmp_path / "tiny.cfg"
    cfg.write_text(TINY_CFG)
    return cfg


def err_of(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return err


# --------------------------------------------------------------------------- arguments


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["tlc", "--workers", "0"], "argument --workers: must be at least 1, got 0"),
        (["tlc", "--workers", "two"], "argument --workers: expected a positive integer"),
        (["tlc", "--timeout", "-1"], "argument --timeout: must be a positive number of seconds"),
        (["tlc", "--timeout", "0"], "argument --timeout: must be a positive number of seconds"),
        (["tlc", "--timeout", "nan"], "argument --timeout: must be a positive number of seconds"),
        (["check-trace", "x.jsonl", "--tlc", "--timeout", "-5"], "argument --timeout"),
    ],
)
def test_bad_numbers_are_refused_by_argument_parsing(
    args: list[str], fragment: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as info:
        main(args)
    assert info.value.code == 2
    assert fragment in err_of(capsys)


# --------------------------------------------------------------------------- bad input files

COMMANDS = ["explore", "check-trace", "graph"]


def command(name: str, cfg: Path, tmp_path: Path) -> list[str]:
    trace = write(tmp_path / "t.jsonl", legal_trace())
    if name == "explore":
        return ["explore", str(SPEC), "--config", str(cfg)]
    if name == "check-trace":
        return ["check-trace", str(trace), "--config", str(cfg)]
    return ["graph", "--config", str(cfg), "--covered", str(trace), "-o", str(tmp_path / "g.dot")]


@pytest.mark.parametrize("name", COMMANDS)
def test_tool_ids_that_are_no_set(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = tmp_path / "three.cfg"
    cfg.write_text(TINY_CFG.replace("{t1}", "3"))
    assert main(command(name, cfg, tmp_path)) == 2
    want = f"tpx: error: {cfg}: ToolIds must be a set of model values such as {{t1, t2}}, got 3"
    assert want in err_of(capsys)


@pytest.mark.parametrize("name", [*COMMANDS, "tlc"])
def test_a_cfg_that_is_not_utf8(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = tmp_path / "latin.cfg"
    cfg.write_bytes(("\\* Grüße\n" + TINY_CFG).encode("latin-1"))
    args = ["tlc", str(SPEC), "--config", str(cfg)] if name == "tlc" else None
    assert main(args or command(name, cfg, tmp_path)) == 2
    err = err_of(capsys)
    assert err.startswith("tpx: error: "), err
    assert "latin.cfg is not UTF-8 text (byte 5" in err


def test_explore_a_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["explore", str(tmp_path), "--config", str(CFG)]) == 2
    assert f"tpx: error: {tmp_path}: is not a file (a spec file is needed)" in err_of(capsys)


def test_graph_into_a_missing_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "no" / "such" / "g.dot"
    assert main(["graph", "--config", str(tiny_cfg(tmp_path)), "-o", str(out)]) == 2
    assert err_of(capsys).startswith("tpx: error: ")


# --------------------------------------------------------------------------- check-trace


def unreadable_files(tmp_path: Path) -> dict[str, tuple[Path, str]]:
    """Files that are no trace at all, and what their ERROR line says."""
    legal = legal_trace()
    extra = [dict(s) for s in legal]
    extra[0]["color"] = "red"
    latin = tmp_path / "latin.jsonl"
    latin.write_bytes(json_line(legal[0]).replace("idle", "idl\u00e9").encode("latin-1"))
    deep = tmp_path / "deep.jsonl"
    deep.write_text(json_line(legal[0]) + "\n" + "[" * 100_000 + "]" * 100_000 + "\n")
    return {
        "extra_key": (
            write(tmp_path / "extra_key.jsonl", extra),
            "state 1: expected the variables",
        ),
        "latin": (latin, "not UTF-8 text"),
        "deep": (deep, "JSON nested deeper than 100 levels"),
        "directory": (tmp_path, "cannot read trace file"),
    }


@pytest.mark.parametrize("kind", ["extra_key", "latin", "deep", "directory"])
def test_one_bad_file_does_not_hide_the_others(
    kind: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    legal = write(tmp_path / "legal.jsonl", legal_trace())
    dropped = legal_trace()
    dropped[3] = Record({**dropped[3], "pending": frozenset()})
    drop = write(tmp_path / "drop.jsonl", dropped)
    bad, fragment = unreadable_files(tmp_path)[kind]
    args = ["check-trace", "--config", str(tiny_cfg(tmp_path))]
    assert main([*args, str(legal), str(bad), str(drop)]) == 2
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"{legal}: ACCEPTED (5 states)"
    assert out[1].startswith(f"{bad}: ERROR: "), out[1]
    assert fragment in out[1]
    assert out[2].startswith(f"{drop}: REJECTED at step 4 (PairingInv)")
    # without the bad file: 1 for the rejected one
    assert main([*args, str(legal), str(drop)]) == 1
    capsys.readouterr()


@pytest.mark.tlc
def test_one_bad_file_does_not_hide_the_others_through_tlc(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    legal = write(tmp_path / "legal.jsonl", legal_trace())
    dropped = legal_trace()
    dropped[3] = Record({**dropped[3], "pending": frozenset()})
    drop = write(tmp_path / "drop.jsonl", dropped)
    bad = unreadable_files(tmp_path)
    files = [legal, *(p for p, _ in bad.values()), drop]
    cfg = tiny_cfg(tmp_path)
    assert main(["check-trace", "--spec", str(SPEC), "--config", str(cfg), "--tlc"]
                + [str(f) for f in files]) == 2  # fmt: skip
    out = capsys.readouterr().out.splitlines()
    assert len(out) == len(files)
    assert out[0] == f"{legal}: ACCEPTED (TLC: 5 states, 1 repeated)"
    for line, (path, fragment) in zip(out[1:-1], bad.values(), strict=True):
        assert line.startswith(f"{path}: ERROR: "), line
        assert fragment in line
    assert out[-1] == f"{drop}: REJECTED at step 4 (PairingInv): TLC: state 4 violates PairingInv"


# --------------------------------------------------------------------------- graph --covered


def test_graph_counts_only_accepted_traces(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = tiny_cfg(tmp_path)
    legal = write(tmp_path / "legal.jsonl", legal_trace())
    illegal = legal_trace()
    illegal[3] = Record({**illegal[3], "gotShape": "openai"})  # an OpenAI body handed back
    bad = write(tmp_path / "openai.jsonl", illegal)
    out = tmp_path / "g.dot"
    base = ["graph", "--config", str(cfg), "-o", str(out), "--force"]
    assert main([*base, "--covered", str(legal)]) == 0
    alone = capsys.readouterr().out
    assert main([*base, "--covered", str(legal), str(bad)]) == 1
    captured = capsys.readouterr()
    assert captured.out == alone  # the illegal trace covers nothing
    assert captured.err == (
        f"tpx: warning: {bad}: REJECTED at step 4 (ShapeInv): state 4 violates ShapeInv "
        '(gotShape = "openai"): the caller must only ever be handed Messages-shaped bodies; '
        "not counted as covered\n"
    )
    assert out.read_text().startswith("digraph coverage {")  # drawn all the same
    latin, _ = unreadable_files(tmp_path)["latin"]
    assert main([*base, "--covered", str(latin), str(legal)]) == 2
    captured = capsys.readouterr()
    assert captured.out == alone
    assert captured.err.startswith(f"tpx: warning: {latin}: ERROR: ")
    assert "not UTF-8 text" in captured.err


# --------------------------------------------------------------------------- a new user's trial


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    from importlib.metadata import version

    with pytest.raises(SystemExit) as info:
        main(["--version"])
    assert info.value.code == 0
    assert capsys.readouterr().out == f"tpx {version('tpx')}\n"


@pytest.mark.parametrize("cmd", [[], ["tlc"], ["explore"], ["check-trace"], ["graph"]])
def test_help_is_plain_text_with_defaults(
    cmd: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit):
        main([*cmd, "--help"])
    text = capsys.readouterr().out
    assert "``" not in text
    assert ":mod:" not in text
    assert ":func:" not in text
    if cmd:
        assert "(default: " in text


def test_a_missing_spec_is_blamed_not_its_cfg(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    nope = tmp_path / "nope.tla"
    for cmd in ("tlc", "explore"):
        assert main([cmd, str(nope)]) == 2
        (line,) = err_of(capsys).splitlines()
        assert line == f"tpx: error: {nope}: no such spec file"


def test_defaults_work_from_any_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["explore"]) == 0
    out = capsys.readouterr().out
    assert "verdict    ok" in out
    assert "distinct   361" in out


def test_explore_prints_progress(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["explore", "--progress", "0.000001"]) == 0
    err = capsys.readouterr().err.splitlines()
    assert err
    assert all(line.startswith("explore: depth ") for line in err)
    assert "distinct" in err[-1]
    assert "on queue" in err[-1]
    assert err[-1].endswith("states/s")


def test_counterexamples_show_what_changed() -> None:
    import io

    from tpx.cli import summary

    a = Record(x=1, y=2)
    b = Record(x=1, y=3)
    short, full = io.StringIO(), io.StringIO()
    for out, whole in ((short, False), (full, True)):
        summary("t", SPEC, CFG, "v", 1, 2, 2, 2, 0.0, [("Init", a), ("Step", b), ("S", b)],
                out=out, full=whole)  # fmt: skip
    lines = short.getvalue().splitlines()
    i = lines.index("    2: Step")
    assert lines[i + 1].strip() == "/\\ y = 3"
    assert lines[i + 2] == "    3: S  (nothing changed)"
    assert "/\\ x = 1" in lines[i - 2]  # the first state is whole
    assert full.getvalue().count("/\\ x = 1") == 3


def test_a_cfg_with_a_missing_brace_says_so_briefly(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = tmp_path / "brace.cfg"
    cfg.write_text(CFG.read_text().replace("{t1, t2}", "{t1, t2"))
    for cmd in ("tlc", "explore"):
        assert main([cmd, str(SPEC), "--config", str(cfg)]) == 2
        (line,) = err_of(capsys).splitlines()
        assert f"{cfg}, line 5: bad value for constant ToolIds: expected '}}'" in line
        assert "unclosed" in line
        assert "SPECIFICATION" not in line  # the file is not echoed
        assert len(line) < 160 + len(str(cfg))


@pytest.mark.tlc
@pytest.mark.parametrize(
    ("old", "new", "reason"),
    [
        ("{t1, t2}", "t1", "Attempted to compute the number of elements in the model value t1"),
        ("MaxTurns = 3", 'MaxTurns = "3"', "Attempted"),
    ],
)
def test_tlc_runtime_errors_are_bad_input(
    old: str, new: str, reason: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = tmp_path / "rt.cfg"
    cfg.write_text(CFG.read_text().replace(old, new))
    assert main(["tlc", str(SPEC), "--config", str(cfg)]) == 2
    captured = capsys.readouterr()
    lines = err_of_text(captured.err)
    assert len(lines) == 2
    assert lines[0].startswith(f"tpx: error: {cfg}: TLC could not evaluate the model")
    assert lines[1].startswith("TLC said: ")
    assert reason in lines[1]
    assert "java.lang" not in captured.err
    assert "verdict" not in captured.out


def err_of_text(err: str) -> list[str]:
    """stderr without TLC's progress lines."""
    assert "Traceback" not in err
    return [ln for ln in err.splitlines() if not ln.startswith("tlc: depth")]


@pytest.mark.tlc
def test_dump_graph_writes_exactly_the_path_asked_for(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "x.svg"
    assert (
        main(["tlc", str(SPEC), "--config", str(tiny_cfg(tmp_path)), "--dump-graph", str(out)]) == 0
    )
    assert out.read_text().startswith("strict digraph DiskGraph")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tiny.cfg", "x.svg"]
    capsys.readouterr()
    out.write_text("mine")
    assert (
        main(["tlc", str(SPEC), "--config", str(tiny_cfg(tmp_path)), "--dump-graph", str(out)]) == 2
    )
    assert f"tpx: error: {out} exists; pass --force to overwrite it" in err_of(capsys)
    assert out.read_text() == "mine"


def test_graph_never_overwrites_silently(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    keep = tmp_path / "keep.dot"
    keep.write_text("precious")
    out = tmp_path / "keep.svg"
    args = ["graph", "--config", str(tiny_cfg(tmp_path)), "-o", str(out), "--format", "dot"]
    assert main(args) == 0
    assert keep.read_text() == "precious"  # nothing written beside the output
    capsys.readouterr()
    assert main(args) == 2
    assert f"{out} exists; pass --force" in err_of(capsys)
    assert main([*args, "--force"]) == 0


@pytest.mark.tlc
@pytest.mark.parametrize("what", ["cfg", "spec"])
def test_tlc_rejections_name_the_file_to_blame(
    what: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = tmp_path / "TpxTransport.tla"
    cfg = tmp_path / "TpxTransport.cfg"
    spec.write_text(
        SPEC.read_text().replace("Providers ==", "Providers =")
        if what == "spec"
        else SPEC.read_text()
    )
    cfg.write_text(
        CFG.read_text().replace("TypeOK", "TypeOk") if what == "cfg" else CFG.read_text()
    )
    assert main(["tlc", str(spec)]) == 2
    lines = err_of_text(capsys.readouterr().err)
    assert len(lines) == 2
    blamed = cfg if what == "cfg" else spec
    assert lines[0].startswith(f"tpx: error: {blamed}: TLC ")
    assert lines[1].startswith("TLC said: ")
    assert ("TypeOk" if what == "cfg" else "line 37") in lines[1]


def test_make_graphviz_without_root_says_how(tmp_path: Path) -> None:
    """No dot, not root, no sudo: one line saying how to install graphviz, and make goes on."""
    import shutil
    import subprocess

    make = shutil.which("make")
    assert make is not None, "make is needed to run the Makefile"
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "id").write_text("#!/bin/sh\necho 1000\n")
    (fake / "id").chmod(0o755)
    proc = subprocess.run(
        [make, "-s", "--no-print-directory", "graphviz"],
        cwd=ROOT,
        env={"PATH": str(fake)},
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    (line,) = proc.stdout.splitlines()
    assert "cannot be installed without root" in line
    assert "sudo apt-get install graphviz" in line
