"""The gateway monitor on the real code: every behaviour of an edge cover of the seed
(each conversation of the gateway with GatewayRetry = FALSE is one), replayed through the
real transport (plain and streamed), fed to a GatewayMonitor by the exchange's own observer,
passes; seeded bugs that show in the exchange's spec variables are stopped with the
property named (bugs only the bodies show are the conformance abstraction's to catch)."""

from __future__ import annotations

import contextlib
from collections import Counter

import pytest

from conformance.bugs import BUGS
from conformance.replay import Behaviour, ConformanceError, Replayer, edge_cover
from tpx.oracle.model import Config
from tpx.oracle.model.gateway.monitor import GatewayMonitor, Violation, snapshot_of_exchange
from tpx.oracle.tlc import StateGraph
from tpx.transport import Transport
from tpx.transport.exchange import ExchangeSnapshot
from tpx.transport.translate.ids import wire_id

SEED = Config.of(2, 3)


class MonitoredReplayer(Replayer):
    """A Replayer whose transports' observer also feeds a gateway monitor."""

    monitor: GatewayMonitor
    violations: list[Violation]
    key: int

    def boot(self, has_key: bool, has_token: bool, index: int) -> Transport:
        t = super().boot(has_key, has_token, index)
        self.key = index
        self.monitor = GatewayMonitor(
            provider=t.provider.name,
            has_key=has_key,
            has_token=has_token,
            max_in_flight=1,
            gateway_retry=False,  # one seed transport: the gateway without its differences
            to_wire=wire_id,
        )
        self._feed("Init", t.exchange.snapshot())
        return t

    def _feed(self, action: str, snapshot: ExchangeSnapshot) -> None:
        found = self.monitor.observe(self.key, action, snapshot_of_exchange(snapshot))
        if found is not None:
            self.violations.append(found)

    def _on_step(self, action: str, snapshot: ExchangeSnapshot) -> None:
        super()._on_step(action, snapshot)
        self._feed(action, snapshot)


def _run(
    behaviours: list[Behaviour], *, streaming: bool, buggy: bool = False
) -> tuple[list[Violation], Counter[str]]:
    replayer = MonitoredReplayer(SEED, streaming=streaming)
    replayer.violations = []
    steps: Counter[str] = Counter()
    try:
        for i, b in enumerate(behaviours):
            # with a bug active the conformance check's own verdict is not this test's
            with contextlib.suppress(*((ConformanceError,) if buggy else ())):
                replayer.replay(b, i)
            steps.update(a for a, _ in b.steps)
    finally:
        replayer.close()
    return replayer.violations, steps


@pytest.fixture(scope="module")
def cover(seed_graph: StateGraph) -> list[Behaviour]:
    return edge_cover(seed_graph)


@pytest.mark.tlc
@pytest.mark.parametrize("streaming", [False, True], ids=["plain", "streamed"])
def test_monitor_passes_every_real_step(cover: list[Behaviour], streaming: bool) -> None:
    violations, steps = _run(cover, streaming=streaming)
    assert violations == []
    assert set(steps) == {
        "CallerSend",
        "CallerAbort",
        "NoProvider",
        "ProviderReply",
        "ProviderFail",
        "Deliver",
        "Halted",
    }


#: The seeded bugs (conformance/bugs.py) that show in the exchange's own spec variables, and
#: the property the monitor names. The others (duplicate_id, swap_ids, openai_to_caller,
#: provider_changes) change only bodies or the Transport object, which the observer's
#: snapshots do not carry: the conformance abstraction catches those.
VISIBLE = {
    "drop_id": "PairingInv",
    "pairing_unchecked": "PairingInv",
    "token_over_key": "SelectionInv",
}


@pytest.mark.tlc
@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(VISIBLE))
def test_monitor_stops_a_seeded_bug_with_its_property(cover: list[Behaviour], name: str) -> None:
    with BUGS[name].active():
        violations, _ = _run(cover, streaming=False, buggy=True)
    named = Counter(v.property for v in violations)
    assert named, name
    assert set(named) == {VISIBLE[name]}, named
    first = violations[0]
    assert first.trace[-1]["#action"] == first.action
    assert len(first.trace) == first.step
