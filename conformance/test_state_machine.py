"""A Hypothesis state machine: the spec's actions as rules, the real transport and the mirror
side by side, the abstraction compared with the mirror and the invariants checked after
every step. A failure shrinks to a short rule sequence (Hypothesis prints it) and the
assertion message carries the readable (action, observed state) trace.

Each CallerSend draws ``stream``: a plain exchange (``begin`` / ``roundtrip`` / ``finish``,
one rule per spec step) or a streamed one (``Transport.stream`` with ``stream: true``), so
both modes interleave within one boot. A streamed exchange runs as one ``stream()`` call,
so CallerSend also draws the provider's plan (reply with some ids, or fail in one of the
streamed failure kinds); the exchange's steps are observed as they happen
(:meth:`Replayer.stream_step`) and the following rules (ProviderReply / ProviderFail,
Deliver) are the plan's, each judging its own step's observation.

Profiles: ``ci`` (default, derandomized) / ``deep`` (``TPX_HYPOTHESIS_PROFILE=deep``).
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from conformance.abstraction import Observation
from conformance.bugs import BUGS, STREAM_BUGS
from conformance.conftest import PROFILE
from conformance.fakes import (
    ABORT_STYLES,
    FAILURE_KINDS,
    STREAM_FAILURE_KINDS,
    AbortStyle,
    FailureKind,
)
from conformance.replay import ConformanceError, Replayer, StepResult
from tpx.oracle.model import Config, Init, Next, State
from tpx.oracle.values import Record
from tpx.transport import Transport

CONFIG = Config.of(3, 5)
IDS = sorted(str(i) for i in CONFIG.ToolIds)


class TransportMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.replayer = Replayer(CONFIG)
        self.transport: Transport | None = None
        self.state: State | None = None
        self.prev: Observation | None = None
        self.result: StepResult | None = None
        self.trace: list[tuple[str, Record]] = []
        self.variant = 0
        self.creds = (False, False)
        self.plan: tuple[str, Any] | None = None
        """the streamed exchange in flight: the provider's plan"""
        self.queued: list[StepResult] = []
        """its later steps, as the real system took them"""

    @initialize(has_key=st.booleans(), has_token=st.booleans(), variant=st.integers(0, 11))
    def boot(self, has_key: bool, has_token: bool, variant: int) -> None:
        self.creds = (has_key, has_token)
        self.variant = variant
        self.transport = self.replayer.boot(has_key, has_token, variant)
        self.state = next(s for s in Init(CONFIG) if (s.hasKey, s.hasToken) == self.creds)
        self.trace = [("Init", self.state.as_record())]
        self.prev = None
        self.result = None
        self.plan = None
        self.queued = []

    def _enabled(self, action: str) -> bool:
        if self.plan is not None:  # a streamed exchange: only the plan's next step
            following = {"reply": ("ProviderReply", "Deliver"), "fail": ("ProviderFail",)}
            if action not in following[self.plan[0]]:
                return False
        return self.state is not None and any(a == action for a, _ in Next(self.state, CONFIG))

    def _take(
        self,
        action: str,
        *,
        emitted: frozenset[str] | None = None,
        kind: FailureKind = "connect",
        style: AbortStyle = "silent",
        stream: bool = False,
        plan: tuple[str, Any] | None = None,
    ) -> None:
        assert self.state is not None
        assert self.transport is not None
        successors = [
            t
            for a, t in Next(self.state, CONFIG)
            if a == action and (emitted is None or {str(x) for x in t.emitted} == emitted)
        ]
        assert len(successors) == 1
        t = self.transport
        if self.queued:
            self.result = self.queued.pop(0)
        elif stream:
            steps = self.replayer.stream_step(t, action, plan, style)
            self.result, self.queued = steps[0], steps[1:]
            self.plan = plan if action == "CallerSend" else None
        else:
            problem = self.replayer.step(t, action, successors[0].as_record(), kind, style)
            obs = self.replayer.observe(t, *self.creds)
            self.result = StepResult(obs, t.exchange.enabled_actions(), problem)
        if action in ("ProviderFail", "Deliver"):
            self.plan = None
        self.state = successors[0]
        self.trace.append((action, self.state.as_record()))

    @precondition(lambda self: self._enabled("CallerSend"))
    @rule(
        stream=st.booleans(),
        plan=st.one_of(
            st.frozensets(st.sampled_from(IDS)).map(lambda ids: ("reply", sorted(ids))),
            st.sampled_from(STREAM_FAILURE_KINDS).map(lambda kind: ("fail", kind)),
        ),
    )
    def caller_send(self, stream: bool, plan: tuple[str, Any]) -> None:
        self._take("CallerSend", stream=stream, plan=plan)

    @precondition(lambda self: self._enabled("CallerAbort"))
    @rule(style=st.sampled_from(ABORT_STYLES), stream=st.booleans())
    def caller_abort(self, style: AbortStyle, stream: bool) -> None:
        self._take("CallerAbort", style=style, stream=stream)

    @precondition(lambda self: self._enabled("NoProvider"))
    @rule(stream=st.booleans())
    def no_provider(self, stream: bool) -> None:
        self._take("NoProvider", stream=stream)

    @precondition(lambda self: self._enabled("ProviderReply"))
    @rule(ids=st.frozensets(st.sampled_from(IDS)))
    def provider_reply(self, ids: frozenset[str]) -> None:
        if self.plan is not None:  # streamed: the ids the plan made the provider emit
            ids = frozenset(self.plan[1])
        self._take("ProviderReply", emitted=ids)

    @precondition(lambda self: self._enabled("ProviderFail"))
    @rule(kind=st.sampled_from(FAILURE_KINDS))
    def provider_fail(self, kind: FailureKind) -> None:
        if self.plan is not None:
            kind = self.plan[1]
        self._take("ProviderFail", kind=kind)

    @precondition(lambda self: self._enabled("Deliver"))
    @rule()
    def deliver(self) -> None:
        self._take("Deliver")

    @precondition(lambda self: self._enabled("Halted"))
    @rule(stream=st.booleans())
    def halted(self, stream: bool) -> None:
        self._take("Halted", stream=stream)  # the exchange must refuse; nothing changes

    @invariant()
    def conforms(self) -> None:
        if self.transport is None or self.state is None:
            return
        if self.result is None:
            obs = self.replayer.observe(self.transport, *self.creds)
            self.result = StepResult(obs, self.transport.exchange.enabled_actions())
        enabled = frozenset(a for a, _ in Next(self.state, CONFIG))
        action = self.trace[-1][0]
        self.replayer.judge(
            self.result.observation,
            self.prev,
            self.state.as_record(),
            self.result.problem,
            enabled,
            self.transport,
            len(self.trace) - 1,
            action,
            self.trace,
            actual_enabled=self.result.enabled,
        )
        self.prev, self.result = self.result.observation, None

    def teardown(self) -> None:
        self.replayer.close()


TransportMachine.TestCase.settings = settings.get_profile(PROFILE)
TestTransportMachine = TransportMachine.TestCase


@pytest.mark.parametrize(
    "name", ["swap_ids", "token_over_key", "openai_to_caller", "stream_openai_to_caller"]
)
def test_machine_catches_seeded_bug(name: str) -> None:
    bug = {**BUGS, **STREAM_BUGS}[name]
    hunt = settings(
        settings.get_profile("ci"),
        max_examples=200,
        stateful_step_count=12,
        print_blob=False,
        phases=(Phase.explicit, Phase.generate, Phase.shrink),
    )
    with bug.active(), pytest.raises(ConformanceError) as info:
        run_state_machine_as_test(TransportMachine, settings=hunt)
    assert bug.property in info.value.violated
    assert len(info.value.trace) <= 10  # shrunk to a short action sequence


@pytest.mark.slow
def test_machine_deep() -> None:
    """The ``deep`` profile, whatever TPX_HYPOTHESIS_PROFILE says (``make conformance-deep``)."""
    run_state_machine_as_test(TransportMachine, settings=settings.get_profile("deep"))
