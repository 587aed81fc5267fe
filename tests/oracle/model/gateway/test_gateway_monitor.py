"""The online monitor: every spec behaviour passes, every seeded gateway bug is stopped at
its first illegal step with the property named, and its traces pass `tpx check-trace`."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import attrs
import pytest

from tpx.cli import main
from tpx.oracle.model.gateway import Config, Init, State, Steps
from tpx.oracle.model.gateway.events import request_kind
from tpx.oracle.model.gateway.monitor import GatewayMonitor, Violation, snapshot_of_exchange
from tpx.oracle.tracecheck_gateway import check_gateway_trace, trace_file_name, write_trace
from tpx.oracle.values import ModelValue

from .conftest import CFG, SPEC

C1, C2 = "c1", "c2"


def snap(s: State, c: ModelValue, **creds: bool) -> dict[str, Any]:
    """Conversation *c*'s variables as the gateway reports them (ids unique strings)."""
    out: dict[str, Any] = {"provider": s.provider.name, **creds}
    for name in ("turn", "phase", "wireShape", "gotShape", "lastOutcome", "retryable"):
        out[name] = getattr(s, name)[c]
    for name in ("pending", "reqIds", "wireIds", "emitted"):
        out[name] = sorted(f"{owner}:{t}" for owner, t in getattr(s, name)[c])
    return out


def walk(cfg: Config, rng: random.Random) -> tuple[GatewayMonitor, list[tuple[str, str]]]:
    """One random behaviour of the spec fed to a monitor; returns the steps taken."""
    s = rng.choice(list(Init(cfg)))
    monitor = GatewayMonitor(
        provider=s.provider.name,
        has_key=s.hasKey,
        has_token=s.hasToken,
        max_in_flight=cfg.MaxInFlight,
        gateway_retry=cfg.GatewayRetry,
    )
    for c in cfg.Convs:
        assert monitor.observe(c.name, "Init", snap(s, c)) is None
    taken: list[tuple[str, str]] = []
    while True:
        options = [(n, c, t) for n, c, t in Steps(s, cfg) if c is not None]
        if not options:
            return monitor, taken
        name, c, t = rng.choice(options)
        assert c is not None
        verdict = monitor.observe(c.name, name, snap(t, c))
        assert verdict is None, (taken, name, verdict)
        taken.append((name, c.name))
        s = t


@pytest.mark.parametrize(
    "cfg",
    [Config.from_cfg(CFG), Config.of(3, 2, 2, 2), Config.of(2, 1, 2, retry=False)],
    ids=["shipped", "convs3-ids2-inflight2", "no-retry"],
)
def test_every_spec_behaviour_passes(cfg: Config) -> None:
    rng = random.Random(8)
    seen: set[str] = set()
    for _ in range(150):
        monitor, taken = walk(cfg, rng)
        seen |= {name for name, _ in taken}
        assert monitor.violations == 0
        assert monitor.steps == len(taken) + len(cfg.Convs)
    expected = {"CallerSend", "CallerAbort", "NoProvider", "ProviderReply", "ProviderFail"}
    expected |= {"Deliver", "ClientGone"} | ({"Retry"} if cfg.GatewayRetry else set())
    assert seen == expected


# --------------------------------------------------------------- seeded gateway bugs


def start(monitor: GatewayMonitor, conv: str, pending: list[str] = []) -> None:  # noqa: B006
    event = {
        "provider": "TPX",
        "turn": 0,
        "phase": "idle",
        "pending": pending,
        "reqIds": [],
        "wireShape": "messages",
        "wireIds": [],
        "emitted": [],
        "gotShape": "messages",
        "lastOutcome": "none",
    }
    assert monitor.observe(conv, "Resume" if pending else "Init", event) is None


def step(monitor: GatewayMonitor, conv: str, action: str, **changes: Any) -> Violation | None:
    trace = monitor.trace(conv)
    assert trace
    last = {k: v for k, v in trace[-1].items() if not k.startswith("#")}
    return monitor.observe(conv, action, {**last, **changes})


def tool_turn(monitor: GatewayMonitor, conv: str, ids: list[str]) -> None:
    """CallerSend, ProviderReply emitting *ids*, Deliver: the client now owes *ids*."""
    assert step(monitor, conv, "CallerSend", phase="req", wireShape="openai") is None
    assert step(monitor, conv, "ProviderReply", phase="resp", wireIds=ids, emitted=ids) is None
    got = step(monitor, conv, "Deliver", phase="idle", pending=ids, lastOutcome="ok", turn=1)
    assert got is None


def monitor() -> GatewayMonitor:
    return GatewayMonitor(provider="TPX", max_in_flight=4)


def test_ids_leaking_between_conversations_is_no_cross_pairing() -> None:
    m = monitor()
    start(m, C1)
    start(m, C2)
    tool_turn(m, C2, ["tpx-b"])
    assert step(m, C1, "CallerSend", phase="req", wireShape="openai") is None
    leak = step(m, C1, "ProviderReply", phase="resp", wireIds=["tpx-b"], emitted=["tpx-b"])
    assert leak is not None
    assert (leak.property, leak.step, leak.action) == ("NoCrossPairing", 3, "ProviderReply")
    assert "c2" in leak.message
    assert [e["#action"] for e in leak.trace] == ["Init", "CallerSend", "ProviderReply"]
    # a history carrying another live conversation's id is caught when it resumes
    other = step(m, C2, "CallerSend", phase="req", reqIds=["tpx-b"], wireIds=["tpx-b"])
    assert other is None
    m2 = monitor()
    start(m2, C2)
    tool_turn(m2, C2, ["tpx-b"])
    bad = m2.observe(C1, "Resume", {**m2.trace(C2)[0], "pending": ["tpx-b"]})
    assert bad is not None
    assert bad.property == "NoCrossPairing"


def test_a_retry_that_loses_an_obligation_is_retry_inv() -> None:
    m = monitor()
    start(m, C1)
    tool_turn(m, C1, ["tpx-a"])
    sent = step(m, C1, "CallerSend", phase="req", reqIds=["tpx-a"], wireIds=["tpx-a"])
    assert sent is None
    lost = step(m, C1, "ProviderFail", phase="idle", lastOutcome="err", turn=2, pending=[])
    assert lost is not None
    assert lost.property == "RetryInv"


def test_a_retry_that_drops_or_adds_a_tool_result_is_pairing_inv() -> None:
    m = monitor()
    start(m, C1)
    tool_turn(m, C1, ["tpx-a", "tpx-b"])
    sent = step(
        m, C1, "CallerSend", phase="req", reqIds=["tpx-a", "tpx-b"], wireIds=["tpx-a", "tpx-b"]
    )
    assert sent is None
    assert step(m, C1, "ClientGone", phase="idle", lastOutcome="err", turn=2) is None
    dropped = step(m, C1, "Retry", phase="req", wireIds=["tpx-a"])
    assert dropped is not None
    assert dropped.property == "PairingInv"


def test_a_tool_use_id_never_issued_is_pairing_inv() -> None:
    m = monitor()
    start(m, C1)
    forged = step(m, C1, "CallerSend", phase="req", reqIds=["tpx-forged"], wireIds=["tpx-forged"])
    assert forged is not None
    assert (forged.property, forged.step) == ("PairingInv", 2)


def test_selection_drifting_between_workers_is_selection_stable() -> None:
    m = GatewayMonitor(provider="TPX", has_key=False, has_token=True)
    start(m, C1)
    drift = step(m, C1, "CallerSend", phase="req", provider="ANTHROPIC")
    assert drift is not None
    assert drift.property == "SelectionStable"
    m = GatewayMonitor(provider="TPX", has_key=False, has_token=True)
    start(m, C1)
    drift = step(
        m, C1, "CallerSend", phase="req", wireShape="openai", hasToken=False, provider="NONE"
    )
    assert drift is not None
    assert drift.property == "SelectionStable"


def test_in_flight_bound_is_bounded_inv() -> None:
    m = GatewayMonitor(provider="TPX", max_in_flight=1)
    start(m, C1)
    start(m, C2)
    assert step(m, C1, "CallerSend", phase="req", wireShape="openai") is None
    assert m.in_flight == 1
    over = step(m, C2, "CallerSend", phase="req", wireShape="openai")
    assert over is not None
    assert over.property == "BoundedInv"
    assert m.in_flight == 1  # c2 was forgotten; c1 still in flight
    m.close(C1)
    assert m.in_flight == 0


def test_steps_the_spec_does_not_take() -> None:
    m = monitor()
    start(m, C1)
    early = step(m, C1, "Deliver", lastOutcome="ok", turn=1)
    assert early is not None
    assert early.property == "Next"
    assert "not enabled" in early.message
    assert m.conversations() == 0  # forgotten after its violation
    unknown = m.observe(C1, "CallerSend", {})
    assert unknown is not None
    assert unknown.property == "Init"
    start(m, C1)
    bad = step(m, C1, "CallerSend", phase="bogus")
    assert bad is not None
    assert bad.property == "TypeOK"
    start(m, C1)
    odd = step(m, C1, "Halted")
    assert odd is not None
    assert odd.property == "Next"
    start(m, C1)
    assert step(m, C1, "CallerSend", phase="req", wireIds=5) is not None  # not a list
    with pytest.raises(ValueError, match="provider"):
        GatewayMonitor(provider="OPENAI")


def test_a_refused_request_then_a_correct_answer() -> None:
    m = monitor()
    start(m, C1, ["tpx-a"])  # a request whose history owes tpx-a
    assert step(m, C1, "CallerAbort", lastOutcome="err", turn=1) is None  # obligations kept
    answered = step(
        m, C1, "CallerSend", phase="req", wireShape="openai", reqIds=["tpx-a"], wireIds=["tpx-a"]
    )
    assert answered is None
    discarded = monitor()
    start(discarded, C1, ["tpx-a"])
    seedlike = step(discarded, C1, "CallerAbort", lastOutcome="err", turn=1, pending=[])
    assert seedlike is not None
    assert seedlike.property == "Next"


def test_snapshot_of_exchange_reads_an_exchange_snapshot() -> None:
    from tpx.transport.exchange import Exchange, Provider

    ex = Exchange(Provider.TPX)
    got = snapshot_of_exchange(ex.snapshot())
    m = monitor()
    assert m.observe("r1", "Init", got) is None


# ------------------------------------------------------------------ traces on disk


def test_monitor_traces_pass_check_trace(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rng = random.Random(3)
    cfg = Config.from_cfg(CFG)
    files = []
    for n in range(20):
        m, _ = walk(cfg, rng)
        for c in cfg.Convs:
            path = tmp_path / trace_file_name(f"walk{n}/{c}")
            files.append(write_trace(path, m.close(c.name)))
    assert all("/" not in p.name for p in files)
    assert main(["check-trace", "--spec", str(SPEC), *map(str, files)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert len(out) == len(files)
    assert all(line.endswith("states)") and "ACCEPTED" in line for line in out)

    # tamper: one step names the wrong action
    lines = files[0].read_text().splitlines()
    assert len(lines) > 1
    lines[1] = lines[1].replace(lines[1].split('"#action":"')[1].split('"')[0], "Deliver", 1)
    files[0].write_text("\n".join(lines) + "\n")
    assert main(["check-trace", "--spec", str(SPEC), str(files[0])]) == 1
    assert "REJECTED at step 2" in capsys.readouterr().out
    assert main(["check-trace", "--spec", str(SPEC), "--tlc", str(files[1])]) == 2
    assert "--tlc" in capsys.readouterr().err


def test_check_gateway_trace_needs_actions_and_a_provider() -> None:
    from tpx.oracle.itf import TraceFormatError

    first = {"provider": "TPX", "turn": 0, "phase": "idle", "pending": [], "reqIds": []}
    report = check_gateway_trace([first], [None])
    assert not report.accepted
    assert report.failed_property == "Action"
    with pytest.raises(TraceFormatError, match="provider"):
        check_gateway_trace([{**first, "provider": 3}], ["Init"])


# ------------------------------------------- caller-side and wire-side ids (to_wire)


def wire_of(caller: str) -> str:
    """A stand-in for the gateway's id decoding: caller id ``k-<nonce>-<foreign>``; other
    ids are not the gateway's and pass through (as tpx.transport.translate.ids.wire_id does)."""
    return caller.split("-", 2)[2] if caller.startswith("k-") else caller


def test_to_wire_compares_caller_ids_through_the_bijection() -> None:
    m = GatewayMonitor(provider="TPX", to_wire=wire_of)
    start(m, C1, ["k-n1-call_0"])  # the history owes call_0 (caller id carries a nonce)
    sent = step(
        m,
        C1,
        "CallerSend",
        phase="req",
        wireShape="openai",
        reqIds=["k-n1-call_0"],
        wireIds=["call_0"],
    )
    assert sent is None
    # the stored trace holds wire-side ids throughout, so it checks on its own
    assert m.trace(C1)[-1]["reqIds"] == ["call_0"]
    report = check_gateway_trace(
        [{k: v for k, v in e.items() if k != "#action"} for e in m.trace(C1)],
        [e["#action"] for e in m.trace(C1)],
    )
    assert report.accepted, report
    # the same foreign id in another live conversation is no cross-pairing (wire ids are
    # per upstream response); the same caller id is
    start(m, C2, ["k-n2-call_0"])
    m2 = GatewayMonitor(provider="TPX", to_wire=wire_of)
    start(m2, C1, ["k-n1-call_0"])
    assert (
        step(
            m2,
            C1,
            "CallerSend",
            phase="req",
            wireShape="openai",
            reqIds=["k-n1-call_0"],
            wireIds=["call_0"],
        )
        is None
    )
    # a second request of the same conversation (same history) while the first is in
    # flight: both hold the history's ids, no cross-pairing
    again = m2.observe(C2, "Resume", {**m2.trace(C1)[0], "pending": ["k-n1-call_0"]})
    assert again is None
    wrong = GatewayMonitor(provider="TPX", to_wire=wire_of)
    start(wrong, C1, ["k-n1-call_0"])
    bad = step(wrong, C1, "CallerSend", phase="req", reqIds=["k-n1-call_0"], wireIds=["call_9"])
    assert bad is not None
    assert bad.property == "PairingInv"


def test_snapshot_of_exchange_keeps_the_historys_obligations_on_failure() -> None:
    @attrs.frozen
    class Prov:
        name: str

    @attrs.frozen
    class Snap:  # the fields of tpx.transport.exchange.ExchangeSnapshot the adapter reads
        provider: Prov
        turn: int
        phase: str
        pending: frozenset[str]
        req_ids: frozenset[str]
        wire_shape: str
        wire_ids: frozenset[str]
        emitted: frozenset[str]
        got_shape: str
        last_outcome: str

    failed = Snap(
        Prov("TPX"),
        1,
        "idle",
        frozenset(),
        frozenset({"a"}),
        "openai",
        frozenset({"a"}),
        frozenset(),
        "messages",
        "err",
    )
    seed_view = snapshot_of_exchange(failed)
    assert seed_view["pending"] == []
    gateway_view = snapshot_of_exchange(failed, action="ProviderFail", obligations={"a"})
    assert gateway_view["pending"] == ["a"]
    assert snapshot_of_exchange(failed, action="Deliver", obligations={"a"})["pending"] == []
    m = monitor()
    start(m, C1, ["a"])
    assert (
        step(m, C1, "CallerSend", phase="req", wireShape="openai", reqIds=["a"], wireIds=["a"])
        is None
    )
    assert m.observe(C1, "ProviderFail", gateway_view) is None


def test_to_wire_counts_a_wire_id_the_provider_repeats() -> None:
    """Two calls the provider gave the same id ("" from Gemini, a shared id): their caller
    ids differ, their wire ids do not. The monitor counts them: two calls pass, one
    dropped on delivery (the caller owes one of the two) is PairingInv."""
    m = GatewayMonitor(provider="TPX", to_wire=wire_of)
    start(m, C1)
    assert step(m, C1, "CallerSend", phase="req", wireShape="openai") is None
    both = ["", ""]
    assert step(m, C1, "ProviderReply", phase="resp", wireIds=both, emitted=both) is None
    owed = ["k-n1-", "k-n2-"]
    assert step(m, C1, "Deliver", phase="idle", pending=owed, lastOutcome="ok", turn=1) is None
    assert m.trace(C1)[-1]["pending"] == both  # the trace keeps the wire ids, repeats too
    dropped = GatewayMonitor(provider="TPX", to_wire=wire_of)
    start(dropped, C1)
    assert step(dropped, C1, "CallerSend", phase="req", wireShape="openai") is None
    assert step(dropped, C1, "ProviderReply", phase="resp", wireIds=both, emitted=both) is None
    bad = step(dropped, C1, "Deliver", phase="idle", pending=owed[:1], lastOutcome="ok", turn=1)
    assert bad is not None
    assert bad.property == "PairingInv"
    # the caller-side ids themselves must still be unique
    twice = GatewayMonitor(provider="TPX", to_wire=wire_of)
    start(twice, C1)
    again = twice.observe(C1, "Resume", {**twice.trace(C1)[0], "pending": ["k-n1-", "k-n1-"]})
    assert again is not None
    assert again.property == "TypeOK"


def test_requests_of_one_conversation_at_once_are_no_cross_pairing() -> None:
    """A client's timeout retry (or a forked history) while the first request is in
    flight: two live exchanges resume with the same history's obligations. Each gets its
    own reply; neither is a violation, and each closes on its own."""
    m = monitor()
    for key in ("first", "retry"):
        start(m, key, ["tpx-a"])
        sent = step(m, key, "CallerSend", phase="req", wireShape="openai", reqIds=["tpx-a"],
                    wireIds=["tpx-a"])  # fmt: skip
        assert sent is None
    assert m.in_flight == 2
    for key, minted in (("first", "tpx-b"), ("retry", "tpx-c")):
        reply = step(m, key, "ProviderReply", phase="resp", wireIds=[minted], emitted=[minted])
        assert reply is None
        got = step(m, key, "Deliver", phase="idle", pending=[minted], lastOutcome="ok", turn=1)
        assert got is None
    m.forget("first")
    start(m, "next", ["tpx-a"])
    # an id a live request's provider minted is that request's alone
    stolen = m.observe("other", "Resume", {**m.trace("next")[0], "pending": ["tpx-c"]})
    assert stolen is not None
    assert stolen.property == "NoCrossPairing"
    # and no conversation takes another's history id after it started (a reply handing
    # out an id of another live conversation's history)
    start(m, "third")
    assert step(m, "third", "CallerSend", phase="req", wireShape="openai") is None
    leak = step(m, "third", "ProviderReply", phase="resp", wireIds=["tpx-a"], emitted=["tpx-a"])
    assert leak is not None
    assert (leak.property, leak.action) == ("NoCrossPairing", "ProviderReply")


def test_request_kind_reads_the_spec_requests() -> None:
    owed = frozenset({"a", "b"})
    assert request_kind(owed, ["b", "a"]) == "ok"
    assert request_kind(frozenset(), []) == "ok"
    assert request_kind(owed, ["a"]) == "missing"
    assert request_kind(owed, ["a", "b", "x"]) == "unknown"
    assert request_kind(owed, ["a", "a", "b"]) == "duplicated"
    assert request_kind(owed, ["a", "b"], verifies=lambda i: i != "b") == "retired"
    m = monitor()
    start(m, C1, ["a"])
    assert m.refuses(C1, "missing") is None
    wrongful = m.refuses(C1, "ok")
    assert wrongful is not None
    assert (wrongful.property, wrongful.action) == ("RefusesOnlyWrong", "CallerAbort")
    assert m.conversations() == 0  # a violation forgets the conversation
