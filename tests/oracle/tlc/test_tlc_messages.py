"""The -tool message parser and verdict reader, on outputs captured from the real TLC 2.15 jar."""

from __future__ import annotations

from pathlib import Path

import pytest

from tpx.errors import TLCConfigError, TLCCrashError
from tpx.oracle.tlc import (
    ToolOutputParser,
    interpret_output,
    parse_dot,
    parse_progress,
    parse_tool_output,
)
from tpx.oracle.values import ModelValue, Record

FIXTURES = Path(__file__).parent / "fixtures"
MUTANTS = Path(__file__).parents[3] / "spec" / "mutants"


def load(name: str) -> tuple[str, int]:
    (path,) = FIXTURES.glob(f"{name}.*.out")
    return path.read_text(encoding="utf-8"), int(path.name.split(".")[1])


def sources(*modules: str) -> dict[str, str]:
    """Module texts: the spec mutants from spec/mutants/ (never copied here), probes from
    the fixtures."""
    out = {}
    for m in modules:
        path = MUTANTS / f"{m}.tla" if m.startswith("Mut") else FIXTURES / f"{m}.tla"
        out[m] = path.read_text(encoding="utf-8")
    return out


def test_messages_of_the_seed_run() -> None:
    text, _ = load("seed_ok")
    messages, plain = parse_tool_output(text)
    codes = [m.code for m in messages]
    assert codes == [
        2262,
        2187,
        2220,
        2219,
        2185,
        2189,
        2269,
        2190,
        2193,
        2200,
        2199,
        2194,
        2268,
        2186,
    ]
    assert all(m.severity == 0 for m in messages)
    assert plain[0].startswith("Parsing file")
    (progress_msg,) = [m for m in messages if m.code == 2200]
    progress = parse_progress(progress_msg)
    assert progress is not None
    assert (progress.depth, progress.generated, progress.distinct, progress.left) == (
        9,
        578,
        361,
        0,
    )


def test_nested_message_starting_mid_line() -> None:
    text, _ = load("cfg_syntax")
    messages, _ = parse_tool_output(text)
    (outer,) = [m for m in messages if m.code == 1000]
    assert outer.severity == 1
    (inner,) = outer.children
    assert inner.code == 5006
    assert "configuration file at line 1" in inner.text
    assert "ConfigFileException" in outer.text
    assert inner.text in outer.text


def test_incremental_feeding_matches_whole_parse() -> None:
    text, _ = load("invariant")
    parser = ToolOutputParser()
    got = []
    for line in text.splitlines(keepends=True):
        got.extend(parser.feed(line))
    assert got == parse_tool_output(text)[0]


def test_simulation_progress_has_no_distinct_count() -> None:
    text, _ = load("simulate")
    messages, _ = parse_tool_output(text)
    (msg,) = [m for m in messages if m.code == 2209]
    progress = parse_progress(msg)
    assert progress is not None
    assert progress.code == 2209
    assert progress.generated == 22
    assert progress.distinct is None
    assert interpret_output(text, 0).ok


def test_seed_ok() -> None:
    text, code = load("seed_ok")
    result = interpret_output(text, code)
    assert result.ok
    assert (result.initial, result.generated, result.distinct, result.depth) == (4, 578, 361, 9)
    assert result.trace == ()


def test_invariant_violation_names_actions_from_the_source() -> None:
    text, code = load("invariant")
    result = interpret_output(text, code, sources=sources("MutShapeInv"))
    assert result.verdict.kind == "invariant"
    assert result.verdict.property == "ShapeInv"
    assert [s.action for s in result.trace] == ["Init", "CallerSend", "ProviderReply", "Deliver"]
    last = result.trace[-1].state
    assert last["gotShape"] == "openai"
    assert last["provider"] == ModelValue("TPX")
    assert len(last) == 12


def test_invariant_violated_by_initial_state() -> None:
    text, code = load("invariant_initial")
    result = interpret_output(text, code)
    assert result.verdict.kind == "invariant"
    assert result.verdict.property == "SelectionInv"
    assert [s.action for s in result.trace] == ["Init"]
    state = result.trace[0].state
    assert (state["hasKey"], state["hasToken"], state["provider"]) == (
        False,
        True,
        ModelValue("ANTHROPIC"),
    )
    assert result.initial is None


def test_deadlock() -> None:
    text, code = load("deadlock")
    result = interpret_output(text, code, sources=sources("MutDeadlock"))
    assert result.verdict.kind == "deadlock"
    assert result.verdict.property is None
    assert [s.action for s in result.trace] == ["Init", "CallerSend", "ProviderReply"]
    assert result.trace[-1].state["phase"] == "resp"


def test_action_property() -> None:
    text, code = load("action_property")
    result = interpret_output(text, code, sources=sources("MutSelectionStable"))
    assert result.verdict.kind == "action_property"
    assert result.verdict.property == "SelectionStable"
    assert [s.action for s in result.trace] == ["Init", "CallerSend", "ProviderFail"]
    first, last = result.trace[0].state, result.trace[-1].state
    assert first["hasKey"] is True
    assert last["hasKey"] is False


def test_temporal_with_stuttering_and_single_variable_states() -> None:
    text, code = load("temporal")
    result = interpret_output(text, code, sources=sources("Live"))
    assert result.verdict.kind == "temporal"
    assert [s.action for s in result.trace] == ["Init", "Next", "Next", "Stuttering"]
    assert [s.state for s in result.trace] == [Record(x=0), Record(x=1), Record(x=2), Record(x=2)]


def test_without_sources_the_printed_name_is_kept() -> None:
    text, code = load("invariant")
    result = interpret_output(text, code)
    assert [s.action for s in result.trace][1:] == ["CallerSend", "ProviderReply", "Deliver"]


def test_evaluation_error_is_an_error_verdict() -> None:
    text, code = load("eval_error")
    result = interpret_output(text, code, sources=sources("Ev"))
    assert code == 75
    assert result.verdict.kind == "error"
    assert result.verdict.message is not None
    assert "CHOOSE x \\in S: P" in result.verdict.message
    assert [s.state["x"] for s in result.trace] == [0, 1, 2]


@pytest.mark.parametrize(
    ("name", "fragment"),
    [
        ("cfg_undefined", "The invariant NoSuchInv specified in the configuration file"),
        ("cfg_check_deadlock_after_property", "The property CHECK_DEADLOCK"),
        ("cfg_syntax", "TLC found an error in the configuration file at line 1"),
        ("parse_error", 'Encountered "==" at line 158, column 12'),
        ("semantic_error", "Unknown operator: `MaxTurnz'"),
        ("bad_option", "unrecognized option: -bogus"),
        (
            "cfg_unassigned_constant",
            "The constant parameter TPX is not assigned a value by the configuration file.",
        ),
    ],
)
def test_rejected_spec_or_cfg(name: str, fragment: str) -> None:
    text, code = load(name)
    with pytest.raises(TLCConfigError) as info:
        interpret_output(text, code)
    assert fragment in str(info.value)
    assert f"exit {code}" in str(info.value)


def test_every_error_message_reaches_the_config_error() -> None:
    text, code = load("cfg_unassigned_constant")
    with pytest.raises(TLCConfigError) as info:
        interpret_output(text, code)
    assert str(info.value) == (
        "TLC rejected the model configuration (exit 151):\n"
        "The constant parameter TPX is not assigned a value by the configuration file."
    )
    # a nested message already shown inside its parent is not repeated
    text, code = load("cfg_syntax")
    with pytest.raises(TLCConfigError) as info:
        interpret_output(text, code)
    assert str(info.value).count("error in the configuration file at line 1") == 1


def test_error_messages_reach_the_crash_error() -> None:
    error = "@!@!@STARTMSG 2222:1 @!@!@\nSomething TLC said went wrong.\n@!@!@ENDMSG 2222 @!@!@\n"
    noise = "".join(
        f"@!@!@STARTMSG 2200:0 @!@!@\nProgress {i}\n@!@!@ENDMSG 2200 @!@!@\n" for i in range(20)
    )
    with pytest.raises(TLCCrashError) as info:
        interpret_output(error + noise, 255)
    assert "TLC reported:\nSomething TLC said went wrong." in str(info.value)
    assert "Progress 19" in str(info.value)  # the tail is still there


@pytest.mark.parametrize(
    ("text", "code"),
    [
        ("", 137),
        ("", 0),
        ("Exception in thread main\n", 255),
        ("@!@!@STARTMSG 2262:0 @!@!@\nTLC2 Version 2.15\n@!@!@ENDMSG 2262 @!@!@\n", -9),
    ],
)
def test_abnormal_end_is_a_crash(text: str, code: int) -> None:
    with pytest.raises(TLCCrashError, match=f"exit code {code}"):
        interpret_output(text, code, stderr="boom")


def test_verdict_inconsistent_with_exit_code_is_a_crash() -> None:
    text, _ = load("invariant")
    with pytest.raises(TLCCrashError):
        interpret_output(text, 255)


def test_parallel_edges_are_kept_apart() -> None:
    graph = parse_dot((FIXTURES / "parallel_edges.dot").read_text(encoding="utf-8"))
    assert graph.state_set() == {Record(x=0), Record(x=1)}
    assert len(graph.initial) == 1
    assert {lbl for _, _, lbl in graph.edges} == {"A", "B", "C"}
    assert len(graph.edges) == 3  # = 4 generated - 1 initial
    assert (Record(x=1), Record(x=1), "C") in graph.labelled_edges()
