"""Replay TLC's behaviours through the real transport and check the spec on every step.

* :func:`tlc_graph` dumps TLC's reachable state graph (through :func:`tpx.oracle.tlc.dump_graph`);
* :func:`complete_behaviours`, :func:`edge_cover` and :func:`behaviour_from_trace` (from
  :mod:`tpx.oracle.behaviours`, which ``tpx audit`` shares) turn the graph into the
  behaviours replayed;
* :class:`Replayer` drives the real :class:`~tpx.transport.Transport` step by step with
  the action each edge names, computes the abstraction (:mod:`conformance.abstraction`)
  after every step, and raises :class:`ConformanceError` naming every violated property:
  the invariants (TypeOK, ShapeInv, PairingInv, SelectionInv, BoundedInv) on the
  observed state, SelectionStable on the observed step, PairingInv for multiset problems,
  ``Refinement`` when the observed state is not TLC's (or the step's outcome is not the
  action's), ``Enabled`` when the exchange's enabled actions are not the graph's.

Streamed mode (``Replayer(config, streaming=True)``)
----------------------------------------------------
Every exchange goes through the public :meth:`Transport.stream` with ``stream: true``,
and the caller's side is the bytes it yields. Where each spec action happens inside one
``stream()`` call (the transport is booted with the exchange's public observer,
``boot(..., observer=...)``, which names each action the moment the exchange takes it;
the abstraction is computed right there):

* ``CallerSend`` -- ``begin()`` at the iterator's first ``next()`` (``Exchange.send``);
  observed before a byte goes out, the wire holding the request the exchange framed
  (``Exchange.outbound``);
* ``NoProvider`` / ``CallerAbort`` -- the same place, ``stream()`` raising the error
  (``UnauthorizedError`` / ``PairingError``) without touching the network;
* ``ProviderReply`` -- ``Exchange.end_stream`` once the terminal event (``message_stop`` /
  ``data: [DONE]``) was fed and the caller has taken every event before ``message_stop``
  and asks for it (events change no spec variable); the wire is then the complete
  stream the fake served, a good stream (message_start ... message_stop, or chunks ...
  usage chunk ... ``[DONE]``) emitting the ids of TLC's ``emitted``;
* ``Deliver`` -- ``Exchange.deliver`` right after it, in the same ``next()``; observed when
  the iterator is exhausted (nothing changes in between: checked), with the message the
  caller assembled from every event it received as the delivered body;
* ``ProviderFail`` -- wherever the failing stream surfaces: before the first byte (connect,
  TLS, timeout, HTTP status, a body that is no event stream or not the provider's) or
  mid-stream (dropped connection, ``event: error``, malformed chunk, no terminal event),
  observed when the iterator has raised; the caller's bytes, if any, must end with an
  ``error`` event and the error raised must be the kind's.

The fake's plan for an exchange (reply with TLC's ``emitted`` or fail) is taken from the
behaviour's next step, since one ``stream()`` call runs the whole exchange; the steps'
observations are then judged one spec step at a time, exactly as in plain mode.
"""

from __future__ import annotations

import random
import tempfile
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs
import httpx2
import orjson

from conformance.abstraction import (
    Observation,
    Wire,
    assemble_messages,
    is_stream,
    observe,
    sse_events,
)
from conformance.fakes import (
    ABORT_STYLES,
    ANTHROPIC_URL,
    EXPECTED_ERROR,
    FAILURE_KINDS,
    ID_STYLES,
    KEY,
    STREAM_FAILURE_KINDS,
    STREAM_LAYOUTS,
    TOKEN,
    TPX_URL,
    FailureKind,
    FakeCaller,
    FakeProvider,
    mock_client,
)
from tpx import errors
from tpx.oracle.behaviours import (
    Behaviour,
    Coverage,
    behaviour_from_trace,
    complete_behaviours,
    count_complete_behaviours,
    edge_cover,
    edge_cover_certificate,
    edge_cover_lower_bound,
)
from tpx.oracle.model import INVARIANTS, Config, SelectionStable
from tpx.oracle.tlc import StateGraph, dump_graph, load_cfg, render_cfg, with_constants
from tpx.oracle.values import ModelValue, Record
from tpx.transport import Transport, boot
from tpx.transport.exchange import ExchangeSnapshot, Provider

__all__ = [
    "CONCRETE_PROPERTIES",
    "SEED_CFG",
    "SPEC",
    "Behaviour",
    "ConformanceError",
    "Coverage",
    "Replayer",
    "StepResult",
    "behaviour_from_trace",
    "cfg_with",
    "complete_behaviours",
    "count_complete_behaviours",
    "edge_cover",
    "edge_cover_certificate",
    "edge_cover_lower_bound",
    "tlc_graph",
]

SPEC = Path(__file__).parents[1] / "spec" / "TpxTransport.tla"
SEED_CFG = SPEC.with_suffix(".cfg")

#: The concrete properties the abstraction checks beside the spec's (see
#: :mod:`conformance.abstraction`): reported like violated invariants.
CONCRETE_PROPERTIES = ("WireIds", "IsError", "StopReason", "Content", "Credential")


# --------------------------------------------------------------------------- graphs


def cfg_with(directory: Path, **constants: Any) -> Path:
    """A cfg file in *directory*: the seed cfg with *constants* replaced."""
    path = Path(directory) / "TpxTransport.cfg"
    path.write_text(render_cfg(with_constants(load_cfg(SEED_CFG), **constants)), encoding="utf-8")
    return path


def tlc_graph(tool_ids: int | None = None, max_turns: int | None = None) -> StateGraph:
    """TLC's state graph of the seed cfg, or of the seed with ToolIds {t1..tn} / MaxTurns."""
    if tool_ids is None and max_turns is None:
        return dump_graph(SPEC, SEED_CFG)
    consts: dict[str, Any] = {}
    if tool_ids is not None:
        consts["ToolIds"] = frozenset(ModelValue(f"t{i}") for i in range(1, tool_ids + 1))
    if max_turns is not None:
        consts["MaxTurns"] = max_turns
    with tempfile.TemporaryDirectory(prefix="tpx-conf-") as tmp:
        return dump_graph(SPEC, cfg_with(Path(tmp), **consts))


#: Coverage summaries reported by this process (the conftest prints them).
COVERAGE_REPORTS: list[dict[str, Any]] = []


# --------------------------------------------------------------------------- replay


class ConformanceError(AssertionError):
    """The real transport left the spec: ``violated`` names the properties."""

    def __init__(
        self,
        message: str,
        *,
        violated: Sequence[str],
        step: int,
        action: str,
        trace: Sequence[tuple[str, Record]],
    ) -> None:
        super().__init__(message)
        self.violated = tuple(violated)
        self.step = step
        self.action = action
        self.trace = tuple(trace)


def _show_state(r: Mapping[str, Any]) -> str:
    def show(v: Any) -> str:
        if isinstance(v, frozenset):
            return "{" + ", ".join(sorted(str(x) for x in v)) + "}"
        return str(v)

    return "[" + ", ".join(f"{k}={show(v)}" for k, v in r.items()) + "]"


def _diff(observed: Mapping[str, Any], expected: Mapping[str, Any]) -> list[str]:
    return [
        f"{k}: observed {observed[k]!r}, TLC {expected[k]!r}"
        for k in expected
        if observed.get(k) != expected[k]
    ]


_PROVIDER_OF = {"ANTHROPIC": Provider.ANTHROPIC, "TPX": Provider.TPX, "NONE": Provider.NONE}

#: The properties a problem line may name as its prefix (anything else is PairingInv).
_PROPERTIES = frozenset(
    {"TypeOK", "ShapeInv", "PairingInv", "SelectionInv", "BoundedInv", "SelectionStable"}
    | set(CONCRETE_PROPERTIES)
)


@attrs.frozen
class StepResult:
    """One spec step as the real system took it: the observation after it, the actions the
    exchange enabled then, and what went differently ('' when nothing)."""

    observation: Observation
    enabled: frozenset[str]
    problem: str = ""


@attrs.frozen
class _Hooked:
    action: str
    snapshot: ExchangeSnapshot
    enabled: frozenset[str]
    observation: Observation


@attrs.define(eq=False)
class Replayer:
    """Replays behaviours through the real transport against fake providers.

    In-process by default (``httpx2.MockTransport``); pass *client*, *anthropic_url* and
    *tpx_url* (and the fakes they serve) to go through real sockets.
    """

    config: Config
    anthropic: FakeProvider = attrs.field(factory=lambda: FakeProvider("messages"))
    tpx: FakeProvider = attrs.field(factory=lambda: FakeProvider("openai", "openai"))
    client: httpx2.Client | None = None
    anthropic_url: str = ANTHROPIC_URL
    tpx_url: str = TPX_URL
    failure_kinds: tuple[FailureKind, ...] = FAILURE_KINDS
    check: bool = True
    coverage: Coverage | None = None
    streaming: bool = False
    """every exchange through :meth:`Transport.stream` (see the module docstring); the
    default ``failure_kinds`` then include the mid-stream ones"""
    caller: FakeCaller = attrs.field(factory=FakeCaller)
    wire: Wire = attrs.field(factory=Wire)
    steps_done: int = 0
    used: Counter[str] = attrs.field(factory=Counter)
    """failure kinds, abort styles, id styles and providers the replays exercised"""
    observed: list[tuple[str, Observation]] = attrs.field(factory=list)
    """the last replay's (action, observation) per state, ``"Init"`` first (multisets kept:
    :meth:`Observation.json_line` turns them into a ``tpx check-trace`` recording)"""
    _pending_request: httpx2.Request | None = attrs.field(init=False, default=None)
    _hooked: list[_Hooked] | None = attrs.field(init=False, default=None)
    _stream_req: dict[str, Any] | None = attrs.field(init=False, default=None)
    _outbound: bytes | None = attrs.field(init=False, default=None)
    """the body of the request the exchange framed at the streamed exchange's CallerSend"""
    _live: tuple[Transport, bool, bool] | None = attrs.field(init=False, default=None)
    _rng: random.Random = attrs.field(init=False, factory=random.Random)
    """draws, per behaviour (seeded by its index), how each plain step is driven"""
    _index: int = attrs.field(init=False, default=0)
    _reentry: list[str] = attrs.field(init=False, factory=list)
    """steps the observer took that the exchange should have refused"""

    def __attrs_post_init__(self) -> None:
        if self.client is None:
            self.client = mock_client(self.anthropic, self.tpx)
        if self.streaming and self.failure_kinds is FAILURE_KINDS:
            self.failure_kinds = STREAM_FAILURE_KINDS

    def close(self) -> None:
        if self.client is not None:
            self.client.close()

    # -- one behaviour ----------------------------------------------------------------

    def boot(self, has_key: bool, has_token: bool, index: int) -> Transport:
        layout = index // 2
        self.anthropic.reset(reverse=bool(index // 3 % 2), layout=layout, seed=index)
        styles = ID_STYLES["openai"]
        self.tpx.reset(
            id_style=styles[index % len(styles)],
            reverse=bool(index // 3 % 2),
            layout=layout,
            seed=index,
        )
        self.caller.reset(reverse_answers=bool(index // 2 % 2), seed=index)
        self._rng.seed(f"replay:{index}")
        self._index = index
        self.wire.reset()
        assert self.client is not None
        t = boot(
            api_key=KEY if has_key else None,
            oauth_token=TOKEN if has_token else None,
            anthropic_base_url=self.anthropic_url,
            tpx_base_url=self.tpx_url,
            env={},
            client=self.client,
            max_turns=self.config.MaxTurns,
            observer=self._on_step,
        )
        self._live = (t, has_key, has_token)
        if self.streaming and t.provider is not Provider.NONE:
            self.used[f"layout:{STREAM_LAYOUTS[layout % len(STREAM_LAYOUTS)]}"] += 1
        return t

    def _fake(self, t: Transport) -> FakeProvider | None:
        if t.provider is Provider.ANTHROPIC:
            return self.anthropic
        if t.provider is Provider.TPX:
            return self.tpx
        return None

    def observe(self, t: Transport, has_key: bool, has_token: bool) -> Observation:
        return observe(
            t,
            has_key=has_key,
            has_token=has_token,
            config=self.config,
            wire=self.wire,
            fake=self._fake(t),
            sent=self.caller.sent,
            rounds=self.caller.sent_rounds,
            delivered_serial=self.caller.delivered_serial,
            delivered=(
                self.caller.last_stream
                if self.caller.last_stream is not None
                else self.caller.last_delivered
            ),
        )

    def replay(self, behaviour: Behaviour, index: int = 0) -> list[Record]:
        """Replay *behaviour*; return the observed abstract states (one per state).

        With ``check`` on, raise :class:`ConformanceError` at the first step that leaves
        the spec; with it off, record until the first step whose outcome is not the
        action's (that state included) and return the recording.
        """
        has_key, has_token = bool(behaviour.init["hasKey"]), bool(behaviour.init["hasToken"])
        t = self.boot(has_key, has_token, index)
        self.used[f"provider:{t.provider.name}"] += 1
        if t.provider is Provider.TPX:
            self.used[f"ids:{self.tpx.id_style}"] += 1
        obs = self.observe(t, has_key, has_token)
        self.observed = [("Init", obs)]
        recording = [obs.state.as_record()]
        trace: list[tuple[str, Record]] = [("Init", recording[0])]
        self.judge(obs, None, behaviour.init, "", behaviour.enabled[0], t, 0, "Init", trace)
        fails = 0
        aborts = 0
        queued: list[StepResult] = []
        for i, (action, expected) in enumerate(behaviour.steps, start=1):
            kind = self.failure_kinds[(index + fails) % len(self.failure_kinds)]
            style = ABORT_STYLES[(index + aborts) % len(ABORT_STYLES)]
            fails += action == "ProviderFail"
            aborts += action == "CallerAbort"
            if action == "ProviderFail":
                self.used[f"fail:{kind}"] += 1
            elif action == "CallerAbort":
                self.used[f"abort:{style}"] += 1
            if queued:  # a later step of the streamed exchange run at CallerSend
                result = queued.pop(0)
            elif self.streaming:
                plan: tuple[str, Any] | None = None
                if action == "CallerSend" and i < len(behaviour.steps):
                    following, state = behaviour.steps[i]
                    plan = (
                        ("reply", sorted(str(x) for x in state["emitted"]))
                        if following == "ProviderReply"
                        else ("fail", kind)
                    )
                result, *queued = self.stream_step(t, action, plan, style)
            else:
                problem = self.step(t, action, expected, kind, style)
                result = StepResult(
                    self.observe(t, has_key, has_token), t.exchange.enabled_actions(), problem
                )
            if self._reentry:
                result = attrs.evolve(
                    result, problem="; ".join(p for p in (result.problem, *self._reentry) if p)
                )
                self._reentry.clear()
            if not queued and t.exchange.halted != ("Halted" in behaviour.enabled[i]):
                result = attrs.evolve(
                    result,
                    problem="; ".join(
                        p for p in (result.problem, f"halted is {t.exchange.halted}") if p
                    ),
                )
            new = result.observation
            self.observed.append((action, new))
            record = new.state.as_record()
            recording.append(record)
            trace.append((action, record))
            self.steps_done += 1
            if not self.check and result.problem:
                return recording
            self.judge(
                new,
                obs,
                expected,
                result.problem,
                behaviour.enabled[i],
                t,
                i,
                action,
                trace,
                actual_enabled=result.enabled,
            )
            obs = new
        if self.coverage is not None:
            self.coverage.add(behaviour)
        self._count_draws()
        return recording

    def _count_draws(self) -> None:
        """Add what the fakes drew in this boot to ``used`` (``tpx:shape:gemini``, ...)."""
        for name, fake in (("anthropic", self.anthropic), ("tpx", self.tpx)):
            for key, n in fake.drawn.items():
                self.used[f"{name}:{key}"] += n
            fake.drawn.clear()
            for reply in fake.replies:
                if reply.calls:
                    self.used[f"{name}:ids:{reply.id_style}"] += 1

    def replay_all(self, behaviours: Iterable[Behaviour], start: int = 0) -> int:
        n = 0
        for n, b in enumerate(behaviours, start=1):
            self.replay(b, start + n - 1)
        return n

    # -- one step ---------------------------------------------------------------------

    def step(
        self, t: Transport, action: str, expected: Record, kind: FailureKind, style: str
    ) -> str:
        """Take *action* on the real transport; return '' or what went differently.

        How is drawn per step (seeded by the behaviour's index, counted in ``used``):
        CallerSend through ``begin`` or the exchange's ``send_bytes`` (the HTTP request
        then built as ``begin`` does), with ``stream: true`` or not (a streamed request
        read whole: ``create(stream=true)``'s path); CallerAbort through ``begin``,
        ``send_bytes`` or ``Exchange.abort()``; Deliver through ``finish`` or
        ``deliver_bytes``."""
        fake = self._fake(t)
        before = (len(self.anthropic.received), len(self.tpx.received))
        if action in ("CallerSend", "CallerAbort", "NoProvider", "Halted"):
            req = (
                self.caller.bad_request(style)  # type: ignore[arg-type]
                if action == "CallerAbort"
                else self.caller.request()
            )
            if action == "CallerSend" and self._rng.random() < 0.3:
                req = {**req, "stream": True}
                self.used["plain:stream"] += 1
            want: type[BaseException] | None = {
                "CallerSend": None,
                "CallerAbort": errors.PairingError,
                "NoProvider": errors.UnauthorizedError,
                "Halted": errors.ExchangeStateError,
            }[action]
            if (
                action == "CallerSend"
                and t.provider is not Provider.NONE
                and (problem := self._malformed_first(t, req))
            ):
                return problem
            how = "begin"
            if action in ("CallerSend", "CallerAbort") and t.provider is not Provider.NONE:
                how = self._rng.choice(
                    ("begin", "send_bytes", "abort")
                    if action == "CallerAbort"
                    else ("begin", "send_bytes")
                )
            self.used[f"drive:{action}:{how}"] += 1
            if action == "Halted" and not t.exchange.halted:
                return "Halted: the exchange's halted is False"
            try:
                if how == "abort":
                    returned = t.exchange.abort()
                    if not isinstance(returned, errors.PairingError):
                        return f"CallerAbort: abort() returned {returned!r}"
                    raise returned
                if how == "send_bytes":
                    out = t.exchange.send_bytes(orjson.dumps(req))
                    http_request = t._build(t.client, out)
                else:
                    http_request = t.begin(req)
            except Exception as exc:
                if action != "Halted":
                    self.caller.failed()
                if want is None or not isinstance(exc, want):
                    return f"{action}: {how}() raised {exc!r}"
            else:
                self.caller.accepted(req)
                self.wire.request(http_request.content)
                self._pending_request = http_request
                if want is not None:
                    return f"{action}: {how}() built a request instead of raising {want.__name__}"
            if (len(self.anthropic.received), len(self.tpx.received)) != before:
                return f"{action}: the network was touched"
            return ""
        if action in ("ProviderReply", "ProviderFail"):
            if fake is None:
                return f"{action}: no provider behind the transport"
            if action == "ProviderReply":
                fake.plan_reply(sorted(str(x) for x in expected["emitted"]))
                want = None
            else:
                fake.plan_fail(kind)
                want = EXPECTED_ERROR[kind]
            if self._pending_request is None:
                return f"{action}: no request was built"
            sent_bytes = self._pending_request.content
            outcome: Exception | None = None
            try:
                t.roundtrip(self._pending_request)
            except Exception as exc:
                outcome = exc
            if fake.last_good and fake.good_reply is not None:
                self.wire.reply(fake.good_reply)
            if not fake.received or fake.received[-1] != sent_bytes:
                return f"{action}: the bytes the provider received are not the request built"
            if outcome is not None:
                self.caller.failed()
                if want is None or type(outcome) is not want:
                    return f"{action}: roundtrip() raised {outcome!r}"
            elif want is not None:
                return f"{action} ({kind}): roundtrip() raised nothing, wanted {want.__name__}"
            return ""
        if action == "Deliver":
            how = self._rng.choice(("finish", "deliver_bytes"))
            self.used[f"drive:Deliver:{how}"] += 1
            try:
                body = t.finish() if how == "finish" else orjson.loads(t.exchange.deliver_bytes())
            except Exception as exc:
                return f"Deliver: {how}() raised {exc!r}"
            self.caller.delivered(body, self._serial(t))
            return ""
        raise ValueError(f"unknown action {action!r}")

    def draws(self) -> str:
        """What the fakes drew for the behaviour being replayed (reported on failure)."""
        shown = []
        for name, fake in (("ANTHROPIC", self.anthropic), ("TPX", self.tpx)):
            replies = ", ".join(
                f"{r.shape}{'+' + '+'.join(sorted(r.flags)) if r.flags else ''}"
                f"{'(stream)' if r.streamed else ''}"
                for r in fake.replies
            )
            shown.append(f"{name} ids={fake.id_style} replies=[{replies}]")
        return f"fakes (seed {self._index}): " + "; ".join(shown)

    def _malformed_first(self, t: Transport, req: dict[str, Any]) -> str:
        """Sometimes (drawn) send a request the exchange cannot take before the real one: a
        tool_result whose ``tool_use_id`` is no string, a ``messages`` that is no list, a
        value JSON cannot carry. No spec action covers it: it must raise a ModelError
        (not a PairingError) and change nothing, on the wire or in the exchange."""
        if self._rng.random() >= 0.2:
            return ""
        kind = self._rng.choice(("id", "messages", "json"))
        self.used[f"malformed:{kind}"] += 1
        bad: dict[str, Any]
        if kind == "id":
            result = {"type": "tool_result", "tool_use_id": 7, "content": "x"}
            bad = {**req, "messages": [*req["messages"], {"role": "user", "content": [result]}]}
        elif kind == "messages":
            bad = {**req, "messages": {"role": "user", "content": "hi"}}
        else:
            bad = {**req, "metadata": {"user_id": object()}}
        before = (t.exchange.snapshot(), len(self.anthropic.received), len(self.tpx.received))
        try:
            t.begin(bad)
        except errors.ModelError as exc:
            if isinstance(exc, errors.PairingError):
                return f"CallerSend: a malformed request ({kind}) was taken as CallerAbort"
        except Exception as exc:
            return f"CallerSend: a malformed request ({kind}) raised {exc!r}"
        else:
            return f"CallerSend: a malformed request ({kind}) was sent"
        after = (t.exchange.snapshot(), len(self.anthropic.received), len(self.tpx.received))
        if after != before:
            return f"CallerSend: a malformed request ({kind}) changed the exchange or the wire"
        return ""

    def _serial(self, t: Transport) -> int | None:
        """The serial of the fake's last good reply (the one a delivery hands over)."""
        fake = self._fake(t)
        return len(fake.replies) - 1 if fake is not None and fake.replies else None

    # -- one streamed exchange ---------------------------------------------------------

    def _on_step(self, action: str, snapshot: ExchangeSnapshot) -> None:
        """The exchange's observer: it took *action* (inside a streamed exchange: observe
        the spec state right now; plain steps are observed by :meth:`replay`)."""
        if self._live is not None and self._rng.random() < 0.25:
            try:
                self._step_from_observer(self._live[0])
            except Exception as exc:  # the step went through and failed: not refused either
                self._reentry.append(f"a step inside the observer raised {exc!r}")
        if self._hooked is None or self._live is None:
            return
        t, has_key, has_token = self._live
        ex = t.exchange
        if action == "CallerSend" and ex.outbound is not None and self._stream_req is not None:
            self._outbound = ex.outbound.body
            self.caller.accepted(self._stream_req)
            self.wire.request(ex.outbound.body)
        elif action == "ProviderReply":
            fake = self._fake(t)
            if fake is not None and fake.last_good:
                self.wire.reply(bytes(fake.served))  # the stream that crossed the wire
                self.used["reply:streamed"] += is_stream(self.wire.body)
        self._hooked.append(
            _Hooked(
                action,
                snapshot,
                ex.enabled_actions(),
                self.observe(t, has_key, has_token),
            )
        )

    def _step_from_observer(self, t: Transport) -> None:
        """The observer may read the exchange, not take steps: a step taken from inside it
        (one the exchange enables right now) must be refused and change nothing."""
        ex = t.exchange
        enabled = ex.enabled_actions()
        before = ex.snapshot()
        self.used["observer:step refused"] += 1
        try:
            if "ProviderFail" in enabled:
                ex.fail(errors.NetworkError("a step from inside the observer"))
            elif "Deliver" in enabled:
                ex.deliver()
            elif "CallerSend" in enabled:
                ex.send(
                    {"model": "m", "max_tokens": 1, "messages": [{"role": "user", "content": "hi"}]}
                )
            else:
                self.used["observer:step refused"] -= 1
                return
        except errors.ExchangeStateError:
            if ex.snapshot() != before:
                self._reentry.append("a step refused inside the observer changed the exchange")
            return
        self._reentry.append("a step taken inside the observer was not refused")

    def stream_step(
        self, t: Transport, action: str, plan: tuple[str, Any] | None, style: str
    ) -> list[StepResult]:
        """Run *action* (``CallerSend``: with the whole exchange it starts, the provider
        answering as *plan* says: ``("reply", ids)`` or ``("fail", kind)``) through one
        :meth:`Transport.stream` call; one :class:`StepResult` per spec step, in order."""
        if action == "CallerSend":
            assert plan is not None, "a streamed CallerSend needs the provider's plan"
            intended = (
                ["CallerSend", "ProviderReply", "Deliver"]
                if plan[0] == "reply"
                else ["CallerSend", "ProviderFail"]
            )
        else:
            intended = [action]
        self.used[f"streamed:{action}"] += 1
        fake = self._fake(t)
        if fake is not None and plan is not None:
            if plan[0] == "reply":
                fake.plan_reply(plan[1])
            else:
                fake.plan_fail(plan[1])
        base = (
            self.caller.bad_request(style)  # type: ignore[arg-type]
            if action == "CallerAbort"
            else self.caller.request()
        )
        request = {**base, "stream": True}
        before = (len(self.anthropic.received), len(self.tpx.received))
        self._stream_req = request
        self._outbound = None
        self._hooked = []
        data = bytearray()
        error: Exception | None = None
        # the caller closes the stream early: after the first event, or once it has the
        # message_delta (everything but message_stop)
        closing = plan is not None and plan == ("fail", "caller_close")
        close_late = closing and self._rng.random() < 0.5
        if closing:
            self.used[f"caller_close:{'late' if close_late else 'first'}"] += 1
        events = t.stream(request)
        try:
            for piece in events:
                data += piece
                if closing and (not close_late or b"message_delta" in piece):
                    events.close()  # type: ignore[attr-defined]
                    break
        except Exception as exc:
            error = exc
        finally:
            hooked, self._hooked, self._stream_req = self._hooked, None, None
        problems = self._stream_outcome(t, action, plan, bytes(data), error, before)
        if error is None and not closing:
            self.caller.delivered_stream(
                bytes(data), assemble_messages(bytes(data)), self._serial(t)
            )
        elif action != "Halted":
            self.caller.failed()
        _, has_key, has_token = self._live or (t, False, False)
        final = self.observe(t, has_key, has_token)
        results: list[StepResult] = []
        for i, name in enumerate(intended):
            h = hooked[i] if i < len(hooked) else None
            found = [x.action for x in hooked]
            took = h is not None and h.action == name
            if name == "Halted":  # no step: the exchange must refuse and change nothing
                took = not hooked
            problem = "" if took else f"{name}: the streamed exchange took the steps {found}"
            if i < len(intended) - 1:
                obs = h.observation if h is not None else final
                enabled = h.enabled if h is not None else t.exchange.enabled_actions()
            else:  # the exchange's last step: observed once the caller has everything
                obs, enabled = final, t.exchange.enabled_actions()
                if h is not None and h.snapshot != t.exchange.snapshot():
                    problems.append(f"{name}: the exchange changed after the step")
                if len(hooked) > len(intended):
                    problems.append(f"{name}: the streamed exchange took the steps {found}")
                problem = "; ".join(p for p in (problem, *problems) if p)
            results.append(StepResult(obs, enabled, problem))
        return results

    def _stream_outcome(
        self,
        t: Transport,
        action: str,
        plan: tuple[str, Any] | None,
        data: bytes,
        error: Exception | None,
        before: tuple[int, int],
    ) -> list[str]:
        """What the caller got that it should not have (the stream's contract)."""
        problems: list[str] = []
        want: type[BaseException] | None = {
            "CallerSend": None,
            "CallerAbort": errors.PairingError,
            "NoProvider": errors.UnauthorizedError,
            "Halted": errors.ExchangeStateError,
        }[action]
        if action == "CallerSend" and plan is not None and plan[0] == "fail":
            want = EXPECTED_ERROR[plan[1]]
        touched = (len(self.anthropic.received), len(self.tpx.received)) != before
        if action != "CallerSend":
            if touched:
                problems.append(f"{action}: the network was touched")
            if data:
                problems.append(f"{action}: stream() yielded bytes")
        else:
            fake = self._fake(t)
            if fake is None or not fake.received or fake.received[-1] != self._outbound:
                problems.append("CallerSend: the bytes the provider received are not the request")
        if plan == ("fail", "caller_close"):  # the caller closed it: nothing is raised
            last = t.exchange.last_error
            if error is not None:
                problems.append(f"{action}: closing the stream raised {error!r}")
            if t.exchange.phase != "idle" or not isinstance(last, errors.NetworkError):
                problems.append(f"{action}: closing the stream early left {t.exchange!r}")
            return problems
        if want is None and error is not None:
            problems.append(f"{action}: stream() raised {error!r}")
        elif want is not None and (error is None or not isinstance(error, want)):
            problems.append(f"{action}: stream() raised {error!r}, wanted {want.__name__}")
        if want is not None and data:
            events = sse_events(data)
            if not events or events[-1][0] != "error":
                problems.append(f"{action}: the failing stream did not end with an error event")
        return problems

    def judge(
        self,
        obs: Observation,
        prev: Observation | None,
        expected: Record,
        problem: str,
        enabled: frozenset[str],
        t: Transport,
        step: int,
        action: str,
        trace: list[tuple[str, Record]],
        *,
        actual_enabled: frozenset[str] | None = None,
    ) -> None:
        """Raise :class:`ConformanceError` when the observed step leaves the spec.
        *actual_enabled*: the actions the exchange enabled when *obs* was taken (default:
        now)."""
        if not self.check:
            return
        s = obs.state
        violated = [name for name, inv in INVARIANTS if not inv(s, self.config)]
        details: list[str] = []
        if prev is not None and not SelectionStable(prev.state, s):
            violated.append("SelectionStable")
        for line in obs.problems:
            named = line.split(":", 1)[0]
            named = named if named in _PROPERTIES else "PairingInv"
            if named not in violated:
                violated.append(named)
            details.append(line)
        record = s.as_record()
        if record != expected:
            violated.append("Refinement")
            details += _diff(record, expected)
        if problem:
            if "Refinement" not in violated:
                violated.append("Refinement")
            details.append(problem)
        actual = t.exchange.enabled_actions() if actual_enabled is None else actual_enabled
        if actual != enabled:
            violated.append("Enabled")
            details.append(f"exchange enables {sorted(actual)}")
        if violated:
            lines = [f"  {i:2d} {a:<13} {_show_state(r)}" for i, (a, r) in enumerate(trace)]
            raise ConformanceError(
                f"step {step} ({action}) violates {', '.join(violated)}:\n    "
                + "\n    ".join(details)
                + f"\n  TLC expected {_show_state(expected)}\n  {self.draws()}\n"
                + "  trace (observed):\n"
                + "\n".join(lines),
                violated=violated,
                step=step,
                action=action,
                trace=trace,
            )
