"""Gateway traces of several conversations interleaved (``Action(c)``): ``tpx check-trace``
accepts every behaviour of the two-conversation cfg written so, rejects an id of one
conversation showing up in another (NoCrossPairing), and still reads per-conversation
traces (bare action names)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from tpx.audit.behaviours import SMALL, all_behaviours, conversation_of, mirror_graph
from tpx.audit.traces import VARS, conversation_trace, gateway_trace
from tpx.cli import main
from tpx.oracle.behaviours import Behaviour
from tpx.oracle.itf import to_itf
from tpx.oracle.tracecheck_gateway import check_gateway_trace, split_action
from tpx.oracle.values import ModelValue, Record

SPEC = str(Path(__file__).parents[2] / "spec" / "TpxGateway.tla")
C1, C2 = ModelValue("c1"), ModelValue("c2")

Trace = list[tuple[str, dict[str, Any]]]


def _labelled(b: Behaviour) -> list[tuple[str, Record]]:
    """The behaviour's states, each step labelled ``Action(c)`` (the audit's labels)."""
    out = [("Init", b.init)]
    before = b.init
    for action, state in b.steps:
        c = conversation_of(before, state, SMALL)
        out.append((action if c is None else f"{action}({c})", state))
        before = state
    return out


def _verdict(trace: Trace) -> Any:
    return check_gateway_trace([s for _, s in trace], [a for a, _ in trace])


@pytest.fixture(scope="module")
def behaviours() -> list[Behaviour]:
    return all_behaviours(mirror_graph(SMALL))


def _both_hold_ids(b: Behaviour) -> bool:
    last = b.steps[-1][1] if b.steps else b.init
    return all(last["emitted"][c] for c in (C1, C2))


def test_split_action_reads_the_parameter() -> None:
    assert split_action("CallerSend(c1)") == ("CallerSend", "c1")
    assert split_action("Init(b16c1)") == ("Init", "b16c1")
    assert split_action("CallerSend") == ("CallerSend", "")


def test_every_behaviour_interleaved_is_accepted(behaviours: list[Behaviour]) -> None:
    assert any(_both_hold_ids(b) for b in behaviours)  # ids of both: NoCrossPairing is live
    for b in behaviours:
        trace = gateway_trace(_labelled(b))
        assert {split_action(a)[1] for a, _ in trace} == {"c1", "c2"}
        report = _verdict(trace)
        assert report.accepted, (report, [a for a, _ in trace])
        for c in (C1, C2):  # and each conversation alone, bare action names
            alone = conversation_trace(_labelled(b), c)
            assert all("(" not in a for a, _ in alone)
            assert _verdict(alone).accepted


def _leak(b: Behaviour) -> Trace:
    """*b* interleaved, cut at c2's last ProviderReply, which carries an id c1's provider
    emitted besides its own (the gateway handed c2 another conversation's call)."""
    trace = gateway_trace(_labelled(b))
    at = max(k for k, (a, _) in enumerate(trace) if a == "ProviderReply(c2)")
    ids = next(s["emitted"] for a, s in trace[:at] if a == "ProviderReply(c1)" and s["emitted"])
    action, state = trace[at]
    leaked = {min(ids)}
    trace[at] = (
        action,
        {**state, "emitted": state["emitted"] | leaked, "wireIds": state["wireIds"] | leaked},
    )
    return trace[: at + 1]


def _leaky(behaviours: list[Behaviour]) -> Behaviour:
    """A behaviour in which c2's provider replies after c1's emitted ids."""
    for b in behaviours:
        labels = [a for a, _ in _labelled(b)]
        c1 = [
            k
            for k, (a, s) in enumerate(b.steps, 1)
            if labels[k] == "ProviderReply(c1)" and s["emitted"][C1]
        ]
        c2 = [k for k, a in enumerate(labels) if a == "ProviderReply(c2)"]
        if c1 and c2 and c2[-1] > c1[0]:
            return b
    raise AssertionError("no behaviour has c2's provider reply after c1 was emitted ids")


def test_an_id_of_another_conversation_is_no_cross_pairing(behaviours: list[Behaviour]) -> None:
    trace = _leak(_leaky(behaviours))
    report = _verdict(trace)
    assert not report.accepted
    assert report.failed_property == "NoCrossPairing", report
    assert report.failed_step == len(trace)
    assert "c1" in report.message
    # one conversation's trace alone cannot show it: the id is just not its obligation
    alone = [(split_action(a)[0], s) for a, s in trace if a.endswith("(c2)")]
    assert _verdict(alone).failed_property != "NoCrossPairing"


def _json_lines(trace: Trace) -> bytes:
    lines = [
        {"#action": a, **{k: sorted(v) if isinstance(v, frozenset) else v for k, v in s.items()}}
        for a, s in trace
    ]
    return b"".join(orjson.dumps(line) + b"\n" for line in lines)


@pytest.mark.parametrize("kind", ["itf", "jsonl"])
def test_check_trace_reads_interleaved_files(
    behaviours: list[Behaviour], tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: str
) -> None:
    legal = gateway_trace(_labelled(_leaky(behaviours)))
    leak = _leak(_leaky(behaviours))
    files = []
    for name, trace in (("legal", legal), ("leak", leak)):
        path = tmp_path / f"{name}.{kind}.json"
        if kind == "itf":
            doc = to_itf([(a, Record(s)) for a, s in trace], vars=VARS)
            path.write_bytes(orjson.dumps(doc))
        else:
            path.write_bytes(_json_lines(trace))
        files.append(path)
    capsys.readouterr()
    assert main(["check-trace", "--spec", SPEC, str(files[0])]) == 0
    assert "ACCEPTED" in capsys.readouterr().out
    assert main(["check-trace", "--spec", SPEC, str(files[1])]) == 1
    assert "(NoCrossPairing)" in capsys.readouterr().out
