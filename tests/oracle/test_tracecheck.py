"""tpx.oracle.tracecheck: recorded behaviours are accepted, mutated ones rejected at the right
step."""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tpx.cli import main
from tpx.oracle.itf import TraceFormatError, dump_itf
from tpx.oracle.model import Config, Init, Next, State, explore
from tpx.oracle.model.explore import Graph
from tpx.oracle.tracecheck import (
    TraceReport,
    check_trace,
    check_traces_tlc,
    load_trace,
    parse_json_lines,
)
from tpx.oracle.values import ModelValue, Record

ROOT = Path(__file__).parents[2]
SPEC = ROOT / "spec" / "TpxTransport.tla"
CFG = ROOT / "spec" / "TpxTransport.cfg"
C = Config.of(2, 3)  # what spec/TpxTransport.cfg says
TINY = Config.of(1, 2)
T1, T2 = ModelValue("t1"), ModelValue("t2")


def graph_of(config: Config) -> Graph:
    g = explore(config, keep_graph=True).graph
    assert g is not None
    return g


def complete_behaviours(g: Graph) -> Iterator[list[tuple[str, Record]]]:
    """Every maximal path (self-loops aside) from an initial state, plus its final Halted step."""
    out: dict[Record, list[tuple[Record, str]]] = {}
    for s, t, a in g.edges:
        out.setdefault(s, []).append((t, a))

    def walk(path: list[tuple[str, Record]]) -> Iterator[list[tuple[str, Record]]]:
        state = path[-1][1]
        moves = [(t, a) for t, a in out.get(state, []) if t != state]
        if not moves:
            loops = [a for t, a in out.get(state, []) if t == state]
            yield path + [(a, state) for a in loops]
            return
        for t, a in moves:
            yield from walk([*path, (a, t)])

    for s in g.initial:
        yield from walk([("Init", s)])


def drive(init: State, plan: Sequence[str | tuple[str, frozenset[ModelValue]]]) -> list[Record]:
    """A behaviour from *init* taking the planned actions (ProviderReply with its ids)."""
    states = [init]
    for move in plan:
        name, ids = (move, None) if isinstance(move, str) else move
        options = [
            t for a, t in Next(states[-1], C) if a == name and (ids is None or t.emitted == ids)
        ]
        assert len(options) == 1, (name, states[-1])
        states.append(options[0])
    return [s.as_record() for s in states]


def init_state(key: bool, token: bool) -> State:
    return next(s for s in Init(C) if (s.hasKey, s.hasToken) == (key, token))


PLAN: list[str | tuple[str, frozenset[ModelValue]]] = [
    "CallerSend",
    ("ProviderReply", frozenset({T1, T2})),
    "Deliver",
    "CallerSend",
    ("ProviderReply", frozenset({T1})),
    "Deliver",
    "CallerAbort",
    "Halted",
]


def tpx_trace() -> list[Record]:
    """TPX provider: two tool rounds, then the caller aborts; 9 states."""
    return drive(init_state(False, True), PLAN)


def edit(trace: list[Record], index: int, **changes: Any) -> list[Record]:
    """Change state *index* (1-based) of *trace*."""
    out = list(trace)
    out[index - 1] = Record({**out[index - 1], **changes})
    return out


def edit_from(trace: list[Record], index: int, **changes: Any) -> list[Record]:
    out = list(trace)
    for i in range(index - 1, len(out)):
        out[i] = Record({**out[i], **changes})
    return out


MUTANTS: dict[str, tuple[Callable[[], list[Record]], int, str]] = {
    # name: (trace, failed step, property the mirror names)
    "drop an id from pending after Deliver": (
        lambda: edit(tpx_trace(), 4, pending=frozenset({T1})),
        4,
        "PairingInv",
    ),
    "translation drops an id on the way out": (
        lambda: edit(tpx_trace(), 5, wireIds=frozenset({T1})),
        5,
        "PairingInv",
    ),
    "reverse translation invents an id": (
        lambda: edit(tpx_trace(), 6, wireIds=frozenset({T1, T2})),
        6,
        "PairingInv",
    ),
    "switch provider mid-trace (with the credentials)": (
        lambda: edit_from(tpx_trace(), 5, hasKey=True, provider=ModelValue("ANTHROPIC")),
        5,
        "SelectionStable",
    ),
    "switch provider mid-trace (provider only)": (
        lambda: edit_from(tpx_trace(), 3, provider=ModelValue("ANTHROPIC")),
        3,
        "SelectionInv",
    ),
    "OpenAI-shaped body handed to the caller": (
        lambda: edit(tpx_trace(), 7, gotShape="openai"),
        7,
        "ShapeInv",
    ),
    "skip a state": (lambda: tpx_trace()[:2] + tpx_trace()[3:], 3, "Next"),
    "wrong initial state": (lambda: edit(tpx_trace(), 1, turn=1), 1, "Init"),
    "wrong initial selection": (lambda: edit(tpx_trace(), 1, hasKey=True), 1, "SelectionInv"),
    "unknown provider": (lambda: edit_from(tpx_trace(), 2, provider="OPENAI"), 2, "TypeOK"),
}


# --------------------------------------------------------------------------- mirror


def test_every_complete_behaviour_of_a_tiny_model_is_accepted() -> None:
    behaviours = list(complete_behaviours(graph_of(TINY)))
    assert len(behaviours) > 20
    for b in behaviours:
        report = check_trace([s for _, s in b], TINY, actions=[a for a, _ in b])
        assert report.accepted, report
        assert report.steps == [a for a, _ in b]
        assert report.failed_step is None


GRAPH = graph_of(C)
OUT: dict[Record, list[tuple[Record, str]]] = {}
for _s, _t, _a in GRAPH.edges:
    OUT.setdefault(_s, []).append((_t, _a))


def random_walk(rng: random.Random, length: int) -> list[tuple[str, Record]]:
    state = rng.choice(sorted(GRAPH.initial, key=repr))
    trace = [("Init", state)]
    for _ in range(length):
        state, action = rng.choice(sorted(OUT[state], key=repr))
        trace.append((action, state))
    return trace


@given(st.randoms(use_true_random=False), st.integers(0, 15))
@settings(max_examples=60, deadline=None)
def test_random_walks_are_accepted(rng: random.Random, length: int) -> None:
    walk = random_walk(rng, length)
    report = check_trace([s for _, s in walk], C)
    assert report.accepted, report
    assert report.steps == [a for a, _ in walk]


def test_the_hand_driven_trace_is_accepted() -> None:
    report = check_trace(tpx_trace(), C)
    assert report == TraceReport(
        True, ["Init", *[m if isinstance(m, str) else m[0] for m in PLAN]], None, None, "9 states"
    )


def test_stuttering_is_accepted() -> None:
    trace = tpx_trace()
    report = check_trace([*trace[:3], trace[2], *trace[3:]], C)
    assert report.accepted
    assert report.steps[3] == "stutter"


@pytest.mark.parametrize("name", sorted(MUTANTS))
def test_mutants_are_rejected_by_the_mirror(name: str) -> None:
    make, step, prop = MUTANTS[name]
    report = check_trace(make(), C)
    assert not report.accepted
    assert (report.failed_step, report.failed_property) == (step, prop), report
    assert len(report.steps) == step - 1
    assert f"{step}" in report.message


def test_rejection_messages_say_what_to_fix() -> None:
    skipped = check_trace(MUTANTS["skip a state"][0](), C)
    assert "closest legal successor (ProviderFail)" in skipped.message
    assert 'lastOutcome: observed "ok", expected "err"' in skipped.message
    assert "enabled: ProviderFail, ProviderReply" in skipped.message
    dropped = check_trace(MUTANTS["drop an id from pending after Deliver"][0](), C)
    assert dropped.message == (
        "state 4 violates PairingInv: after a delivered response the caller's pending "
        "tool_use ids must be exactly the ids the provider emitted (pending = emitted), "
        "but pending = {t1}, emitted = {t1, t2}"
    )
    out = check_trace(MUTANTS["translation drops an id on the way out"][0](), C)
    assert out.message.endswith("but wireIds = {t1}, reqIds = {t1, t2}, pending = {t1, t2}")
    back = check_trace(MUTANTS["reverse translation invents an id"][0](), C)
    assert back.message.endswith("(wireIds = emitted), but wireIds = {t1, t2}, emitted = {t1}")
    init = check_trace(MUTANTS["wrong initial state"][0](), C)
    assert "turn: observed 1, expected 0" in init.message
    switched = check_trace(MUTANTS["switch provider mid-trace (with the credentials)"][0](), C)
    assert "provider: TPX -> ANTHROPIC" in switched.message
    assert str(switched).startswith("REJECTED at step 5 (SelectionStable): ")


def test_a_wrong_action_claim_is_rejected() -> None:
    trace = tpx_trace()
    claims: list[str | None] = [None] * len(trace)
    claims[3] = "ProviderFail"
    report = check_trace(trace, C, actions=claims)
    assert (report.failed_step, report.failed_property) == (4, "Action")
    assert "recorded as ProviderFail but only Deliver explains it" in report.message


def test_the_first_state_may_only_claim_init() -> None:
    trace = tpx_trace()
    claims: list[str | None] = [None] * len(trace)
    assert check_trace(trace, C, actions=claims).accepted
    claims[0] = "Init"
    assert check_trace(trace, C, actions=claims).accepted
    claims[0] = "CallerSend"
    report = check_trace(trace, C, actions=claims)
    assert (report.failed_step, report.failed_property) == (1, "Action")
    assert (
        report.message == "state 1 is recorded as CallerSend but only Init explains a first state"
    )
    # a wrong initial state is an Init failure first, whatever it claims
    bad = check_trace(edit(trace, 1, turn=1), C, actions=claims)
    assert (bad.failed_step, bad.failed_property) == (1, "Init")


#: (claim on a repeated state 3 of tpx_trace, accepted?): a stuttering step may claim to be
#: one, or claim nothing; Halted is not enabled there (turn 0 < MaxTurns)
STUTTER_CLAIMS: list[tuple[str | None, bool]] = [
    (None, True),
    ("stutter", True),
    ("Stuttering", True),
    ("Deliver", False),
    ("Halted", False),
]


@pytest.mark.parametrize(("claim", "ok"), STUTTER_CLAIMS)
def test_claims_on_a_stuttering_step(claim: str | None, ok: bool) -> None:
    trace = tpx_trace()
    stuttering = [*trace[:3], trace[2], *trace[3:]]
    claims: list[str | None] = [None] * len(stuttering)
    claims[3] = claim
    report = check_trace(stuttering, C, actions=claims)
    assert report.accepted == ok, report
    if not ok:
        assert (report.failed_step, report.failed_property) == (4, "Action")
        assert f"recorded as {claim} but only stutter explains it" in report.message
    # at the end of the budget Halted repeats the state too: both names fit
    end = [*trace, trace[-1]]
    for name in ("Halted", "stutter"):
        last: list[str | None] = [None] * len(end)
        last[-1] = name
        assert check_trace(end, C, actions=last).accepted


def test_a_turn_past_the_budget_is_rejected() -> None:
    trace = tpx_trace()
    report = check_trace([*trace, edit(trace, 9, turn=4)[8]], C)
    assert (report.failed_step, report.failed_property) == (10, "TypeOK")
    assert report.message == "state 10 violates TypeOK: turn = 4 is not in 0..3"
    unknown = check_trace(MUTANTS["unknown provider"][0](), C)
    assert "provider = OPENAI is not in {ANTHROPIC, NONE, TPX}" in unknown.message


@pytest.mark.parametrize(
    ("changes", "fragment"),
    [
        ({"turn": "1"}, 'turn = "1" is not an integer'),
        ({"pending": ["t1", "t1"]}, 'pending = ["t1", "t1"] lists t1 more than once'),
        ({"pending": 3}, "pending = 3 is not a set of tool ids"),
        ({"pending": [1]}, "is not a set of tool ids"),
        ({"hasKey": 0}, "hasKey = 0 is not a boolean"),
        ({"phase": 0}, "phase = 0 is not a string"),
        ({"provider": 0}, "provider = 0 is not a provider name"),
    ],
)
def test_ill_typed_states_fail_type_ok(changes: dict[str, Any], fragment: str) -> None:
    trace: list[dict[str, Any]] = [dict(s) for s in tpx_trace()]
    trace[1].update(changes)
    report = check_trace(trace, C)
    assert (report.failed_step, report.failed_property) == (2, "TypeOK")
    assert fragment in report.message


#: ill-typed versions of state 4 of tpx_trace (after Deliver): what they change, what the
#: rejection says; the last ones hold ids that are not even TLA+ identifiers
ILL_TYPED: list[tuple[dict[str, Any], str]] = [
    ({"pending": ["t1", "t1", "t2"]}, 'pending = ["t1", "t1", "t2"] lists t1 more than once'),
    ({"turn": "1"}, 'turn = "1" is not an integer'),
    ({"turn": 7}, "turn = 7 is not in 0..3"),
    ({"phase": "done"}, 'phase = "done" is not in {"idle", "req", "resp"}'),
    ({"provider": "OPENAI"}, "provider = OPENAI is not in {ANTHROPIC, NONE, TPX}"),
    (
        {"pending": ["?tpxb0-e066_Y2Fs", "t2"]},
        'pending = {"?tpxb0-e066_Y2Fs", t2} is not in SUBSET {t1, t2}',
    ),
    ({"wireIds": ["t 1"]}, 'wireIds = {"t 1"} is not in SUBSET {t1, t2}'),
    ({"provider": "TPX-2"}, 'provider = "TPX-2" is not in {ANTHROPIC, NONE, TPX}'),
]


@pytest.mark.tlc
def test_cli_tlc_rejects_ill_typed_states_as_type_ok(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Through TLC (one run for every file), as through the mirror: an ill-typed state, even one
    naming ids TLA+ cannot write, is REJECTED (TypeOK) at its step; no ValueError escapes."""
    files = []
    for n, (changes, _) in enumerate(ILL_TYPED):
        lines = [json.loads(as_json_line(s)) for s in tpx_trace()]
        lines[3].update(changes)
        path = tmp_path / f"ill{n}.jsonl"
        path.write_text("".join(json.dumps(line) + "\n" for line in lines))
        files.append(path)
    common = ["check-trace", "--spec", str(SPEC), "--config", str(CFG)]
    for tlc in ([], ["--tlc"]):
        assert main([*common, *tlc, *map(str, files)]) == 1
        out = capsys.readouterr().out.splitlines()
        assert len(out) == len(files)
        for path, (_, fragment), line in zip(files, ILL_TYPED, out, strict=True):
            assert line.startswith(f"{path}: REJECTED at step 4 (TypeOK): state 4"), line
            assert fragment in line, (tlc, line)


def test_python_sets_and_strings_are_read_as_ids() -> None:
    trace: list[dict[str, Any]] = [dict(s) for s in tpx_trace()]
    trace[3]["pending"] = {"t1", "t2"}
    trace[4]["pending"] = ["t2", T1]
    assert check_trace(trace, C).accepted


def test_structural_problems_raise() -> None:
    with pytest.raises(TraceFormatError, match="no states"):
        check_trace([], C)
    state = dict(tpx_trace()[0])
    del state["turn"]
    with pytest.raises(TraceFormatError, match=r"state 1: .*missing \['turn'\]"):
        check_trace([state], C)


# --------------------------------------------------------------------------- files


def as_json_line(state: Record, action: str | None = None) -> str:
    obj: dict[str, Any] = {}
    for k, v in state.items():
        if isinstance(v, frozenset):
            obj[k] = sorted(x.name for x in v)
        elif isinstance(v, ModelValue):
            obj[k] = v.name
        else:
            obj[k] = v
    if action is not None:
        obj["#action"] = action
    obj["#ts"] = "2024-01-01T00:00:00Z"
    return json.dumps(obj)


def write_jsonl(path: Path, trace: list[Record], actions: Sequence[str | None] = ()) -> Path:
    claims = list(actions) or [None] * len(trace)
    lines = [as_json_line(s, a) for s, a in zip(trace, claims, strict=True)]
    path.write_text("\n".join(lines[:2]) + "\n\n" + "\n".join(lines[2:]) + "\n")
    return path


def test_json_lines_and_itf_files_load_to_the_same_verdicts(tmp_path: Path) -> None:
    trace = tpx_trace()
    jl = write_jsonl(tmp_path / "t.jsonl", trace, ["Init", *["CallerSend"] * 8])
    states, actions = load_trace(jl)
    assert actions[:2] == ["Init", "CallerSend"]
    assert check_trace(states, C).accepted
    assert check_trace(states, C, actions=actions).failed_property == "Action"
    itf = tmp_path / "t.itf.json"
    dump_itf(itf, [("Init", s) for s in trace])
    states2, _ = load_trace(itf)
    assert check_trace(states2, C) == check_trace(states, C)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "no states"),
        ("{\n", "line 1: not JSON"),
        ("[1]\n", "line 1: a state is a JSON object"),
        ('{"turn": 1.5}\n', "line 1: turn = 1.5"),
        ('{"turn": null}\n', "line 1: turn = None"),
        ('{"#action": 1}\n', "line 1: #action must be a string"),
        ('{}\n{"pending": {"#set": 1}}\n', "line 2: pending: #set needs a JSON list"),
    ],
)
def test_bad_json_lines(text: str, message: str) -> None:
    with pytest.raises(TraceFormatError, match=message):
        parse_json_lines(text)


def test_json_lines_accept_itf_tagged_values() -> None:
    (state,) = parse_json_lines('{"pending": {"#set": [{"#unserializable": "t1"}]}, "turn": 2}')
    assert state == {"pending": frozenset({T1}), "turn": 2}


def test_cli_check_trace(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = write_jsonl(tmp_path / "good.jsonl", tpx_trace())
    bad = tmp_path / "bad.itf.json"
    dump_itf(bad, MUTANTS["OpenAI-shaped body handed to the caller"][0]())
    assert main(["check-trace", str(good), "--config", str(CFG)]) == 0
    assert main(["check-trace", str(good), str(bad), "--config", str(CFG)]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"{good}: ACCEPTED (9 states)"
    assert out[1] == f"{good}: ACCEPTED (9 states)"
    assert out[2].startswith(f"{bad}: REJECTED at step 7 (ShapeInv): state 7 violates ShapeInv")
    broken = tmp_path / "broken.jsonl"
    broken.write_text("{\n")
    assert main(["check-trace", str(good), str(broken)]) == 2
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"{good}: ACCEPTED (9 states)"
    assert out[1].startswith(f"{broken}: ERROR: {broken}, line 1: not JSON")


# --------------------------------------------------------------------------- TLC


@pytest.mark.tlc
def test_tlc_agrees_with_the_mirror_in_one_run() -> None:
    rng = random.Random(7)
    accepted = [tpx_trace(), *[[s for _, s in random_walk(rng, 12)] for _ in range(4)]]
    stutter = tpx_trace()
    accepted.append([*stutter[:3], stutter[2], *stutter[3:]])
    names = sorted(MUTANTS)
    rejected = [MUTANTS[n][0]() for n in names]
    reports = check_traces_tlc([*accepted, *rejected], C, spec=SPEC, cfg=CFG)
    assert len(reports) == len(accepted) + len(rejected)
    for report in reports[: len(accepted)]:
        assert report.accepted, report
    assert reports[0].message == "TLC: 9 states, 1 repeated"  # the final Halted stutter
    for name, report in zip(names, reports[len(accepted) :], strict=True):
        _, step, prop = MUTANTS[name]
        mirror = check_trace(MUTANTS[name][0](), C)
        assert not report.accepted, name
        assert report.failed_step == step == mirror.failed_step, (name, report)
        assert mirror.failed_property == prop
        if prop == "TypeOK":
            # ill-typed states are cut before TLC; the report says so, like the mirror
            assert report.failed_property == "TypeOK", (name, report)
            assert report.message == mirror.message
            continue
        # the TLC path checks the cfg's invariants and properties too: the same name
        assert report.failed_property == mirror.failed_property, (name, report)
        assert report.message.startswith("TLC: ")


def claim_cases() -> list[tuple[str, list[Record], list[str | None]]]:
    """(name, trace, claims): action claims the mirror and TLC must judge alike."""
    trace = tpx_trace()
    plan = ["Init", *[m if isinstance(m, str) else m[0] for m in PLAN]]
    stutter = [*trace[:3], trace[2], *trace[3:]]

    def claims(n: int, **at: str) -> list[str | None]:
        out: list[str | None] = [None] * n
        for k, v in at.items():
            out[int(k[1:]) - 1] = v
        return out

    return [
        ("every step claimed rightly", trace, list(plan)),
        ("CallerSend claimed as Deliver", trace, claims(9, s2="Deliver")),
        ("first state claims an action", trace, claims(9, s1="CallerSend")),
        ("first state claims Init", trace, claims(9, s1="Init")),
        ("an action the spec lacks", trace, claims(9, s5="Retry")),
        ("Init claimed later", trace, claims(9, s5="Init")),
        ("Halted claimed rightly", trace, claims(9, s9="Halted")),
        ("stutter unclaimed", stutter, claims(10)),
        ("stutter claimed", stutter, claims(10, s4="stutter")),
        ("stutter claimed as Deliver", stutter, claims(10, s4="Deliver")),
        ("stutter claimed as Halted too early", stutter, claims(10, s4="Halted")),
        ("a skipped state is Next before Action", trace[:2] + trace[3:], claims(8, s3="Deliver")),
        ("a wrong claim before an ill-typed state", edit(trace, 6, turn=9), claims(9, s3="Halted")),
    ]


def test_claim_cases_as_the_mirror_sees_them() -> None:
    verdicts = {
        name: (r.accepted, r.failed_step, r.failed_property)
        for name, trace, claims in claim_cases()
        for r in [check_trace(trace, C, actions=claims)]
    }
    assert verdicts == {
        "every step claimed rightly": (True, None, None),
        "CallerSend claimed as Deliver": (False, 2, "Action"),
        "first state claims an action": (False, 1, "Action"),
        "first state claims Init": (True, None, None),
        "an action the spec lacks": (False, 5, "Action"),
        "Init claimed later": (False, 5, "Action"),
        "Halted claimed rightly": (True, None, None),
        "stutter unclaimed": (True, None, None),
        "stutter claimed": (True, None, None),
        "stutter claimed as Deliver": (False, 4, "Action"),
        "stutter claimed as Halted too early": (False, 4, "Action"),
        "a skipped state is Next before Action": (False, 3, "Next"),
        "a wrong claim before an ill-typed state": (False, 3, "Action"),
    }


@pytest.mark.tlc
def test_tlc_judges_action_claims_as_the_mirror_does() -> None:
    """One TLC run: each labelled step is constrained to its action, the first state to Init,
    and stuttering is allowed, so TLC's verdict equals the mirror's on every case."""
    cases = claim_cases()
    reports = check_traces_tlc(
        [t for _, t, _ in cases], C, actions=[c for _, _, c in cases], spec=SPEC, cfg=CFG
    )
    for (name, trace, claims), report in zip(cases, reports, strict=True):
        mirror = check_trace(trace, C, actions=claims)
        got = (report.accepted, report.failed_step, report.failed_property)
        assert got == (mirror.accepted, mirror.failed_step, mirror.failed_property), name
    by_name = dict(zip([n for n, _, _ in cases], reports, strict=True))
    assert by_name["CallerSend claimed as Deliver"].message == (
        "TLC: step 1 -> 2 is recorded as Deliver, but that action does not take it"
    )
    assert by_name["first state claims an action"].message == (
        "TLC: state 1 is recorded as CallerSend but only Init explains a first state"
    )
    assert by_name["stutter unclaimed"].message == "TLC: 10 states, 2 repeated"


@pytest.mark.tlc
def test_cli_both_paths_reject_a_mislabelled_step(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = tpx_trace()
    wrong = write_jsonl(tmp_path / "wrong.jsonl", trace, [None, "Deliver", *[None] * 7])
    right = write_jsonl(tmp_path / "right.jsonl", trace, ["Init", "CallerSend", *[None] * 7])
    common = ["check-trace", "--spec", str(SPEC), "--config", str(CFG), str(wrong), str(right)]
    for tlc in ([], ["--tlc"]):
        assert main([*common, *tlc]) == 1
        out = capsys.readouterr().out.splitlines()
        assert out[0].startswith(f"{wrong}: REJECTED at step 2 (Action): "), (tlc, out)
        assert out[1].startswith(f"{right}: ACCEPTED"), (tlc, out)


def test_cli_check_trace_tlc_sends_every_file_in_one_call(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import tpx.oracle.tracecheck

    calls: list[int] = []

    def fake(traces: Sequence[Sequence[Any]], config: Config, **kw: Any) -> list[TraceReport]:
        calls.append(len(traces))
        assert kw["cfg"] == CFG
        return [
            TraceReport(True, [], None, None, "TLC: 9 distinct steps"),
            TraceReport(False, [], 3, "Next", "TLC: no Next step of the spec leads ..."),
        ]

    monkeypatch.setattr(tpx.oracle.tracecheck, "check_traces_tlc", fake)
    a = write_jsonl(tmp_path / "a.jsonl", tpx_trace())
    b = write_jsonl(tmp_path / "b.jsonl", MUTANTS["skip a state"][0]())
    assert main(["check-trace", str(a), str(b), "--tlc", "--config", str(CFG)]) == 1
    assert calls == [2]
    assert capsys.readouterr().out.splitlines() == [
        f"{a}: ACCEPTED (TLC: 9 distinct steps)",
        f"{b}: REJECTED at step 3 (Next): TLC: no Next step of the spec leads ...",
    ]


# --------------------------------------------------------------------------- mutants' traces


SPEC_MUTANTS = sorted((ROOT / "spec" / "mutants").glob("*.tla"))


@pytest.mark.tlc
@pytest.mark.parametrize("mutant", SPEC_MUTANTS, ids=lambda p: p.stem)
def test_both_paths_agree_on_each_mutants_counterexample(mutant: Path) -> None:
    """TLC's counterexample for each spec mutant, judged against the seed by the mirror and
    by the TLC path (the same verdict, property and step), and against the mutant itself by
    the TLC path (--spec honoured: the mutant's own violation, or accepted for a deadlock,
    whose trace is a behaviour); the mirror refuses the mutant outright."""
    from tpx.oracle.model.registry import SpecMismatchError, check_mirrored
    from tpx.oracle.tlc import run_tlc

    result = run_tlc(mutant, mutant.with_suffix(".cfg"))
    assert not result.ok
    trace = [dict(state) for _, state in result.trace]
    mirror = check_trace(trace, C)
    seed_tlc = check_traces_tlc([trace], C, spec=SPEC, cfg=CFG)[0]
    assert (seed_tlc.accepted, seed_tlc.failed_step, seed_tlc.failed_property) == (
        mirror.accepted,
        mirror.failed_step,
        mirror.failed_property,
    ), (str(mirror), str(seed_tlc))
    own = check_traces_tlc([trace], C, spec=mutant, cfg=mutant.with_suffix(".cfg"))[0]
    if result.verdict.kind == "deadlock":
        assert own.accepted, str(own)
    else:
        assert result.verdict.property is not None
        assert (own.failed_step, own.failed_property) == (len(trace), result.verdict.property)
    with pytest.raises(SpecMismatchError):
        check_mirrored(mutant)


@pytest.mark.tlc
def test_tlc_path_checks_action_properties() -> None:
    """A step that swaps the credentials and re-selects consistently (SelectionInv holds):
    both paths name SelectionStable, not Next."""
    base = tpx_trace()[:3]
    swapped = dict(base[-1])
    swapped.update(hasKey=True, hasToken=False, provider=C.ANTHROPIC)
    trace = [*base, Record(swapped)]
    mirror = check_trace(trace, C)
    tlc = check_traces_tlc([trace], C, spec=SPEC, cfg=CFG)[0]
    assert mirror.failed_property == tlc.failed_property == "SelectionStable"
    assert mirror.failed_step == tlc.failed_step == 4
    assert tlc.message == "TLC: step 3 -> 4 violates SelectionStable"
