"""``tpx serve --monitor``: every exchange's spec actions checked live against the gateway mirror.

One :class:`LiveMonitor` per gateway process wraps a
:class:`tpx.oracle.model.gateway.monitor.GatewayMonitor` (keyed by request id: one exchange,
which the stateless gateway can always name; each request joins the conversation its
opening names, :func:`tpx.gateway.history.opening`, so requests of one conversation at
once, the same history again or a fork of it, share its ids: no cross-pairing,
spec/TpxGatewayOverlap.tla). The core calls
:meth:`LiveMonitor.start` (``Resume``: the history's obligations) before the exchange's
first step, feeds every exchange action through :meth:`LiveMonitor.observer` (with the
history's obligations, so a ProviderFail / ClientGone / CallerAbort keeps them as the
gateway spec says; a failure after :meth:`LiveMonitor.client_gone` is reported as
``ClientGone``), reports a refusal that took no exchange step as ``CallerAbort`` (:meth:`refused`),
and :meth:`LiveMonitor.close` s the conversation when the exchange ends. The in-flight bound
(``limits.max_in_flight``, the spec's MaxInFlight) is the monitor's too (BoundedInv).

The steps the gateway takes around the exchange are reported by their own methods:
:meth:`LiveMonitor.preflight_refused` (``PromptTooLong``: a request too long for the
upstream's window refused before the wire), and a request's upstream attempts,
:meth:`~LiveMonitor.attempt` (its first attempt goes to an upstream), :meth:`~LiveMonitor.accept`
(``UpstreamAccept``: its bytes reached the upstream), :meth:`~LiveMonitor.resend`
(``Resend``), :meth:`~LiveMonitor.failover` (``Failover``), :meth:`~LiveMonitor.first_byte`
(``FirstByte``) and :meth:`~LiveMonitor.recover` (``Recover``; a turn reports the first
three at once when its upstream answered, :meth:`~LiveMonitor.answered`), checked by
:class:`tpx.oracle.model.gateway.attempts.AttemptMonitor` (OneGeneration,
NoDuplicateDelivery, FailoverBeforeFirstByte).

A step the spec does not allow raises :class:`SpecViolationError` (a
:class:`~tpx.errors.ModelError`, raised by the exchange's observer *in place of* the
step's result): the turn fails closed with a Messages-shaped ``api_error`` (status 500),
so the caller never receives the output of the illegal step. The violation is logged
(one JSON line with the conversation's trace, ``monitor_violation``) and counted in
``/metrics`` (``tpx_gateway_monitor_violations_total{property=...}``); with
``--trace-dir`` every conversation's monitor trace is written as JSON lines that
``tpx check-trace --spec spec/TpxGateway.tla`` reads (wire-side ids throughout).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Hashable, Iterable, Iterator
from pathlib import Path

import attrs
import orjson
from prometheus_client import Counter
from prometheus_client.metrics_core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector

from tpx.errors import ModelError
from tpx.gateway.metrics import Metrics
from tpx.gateway.settings import Settings
from tpx.oracle.model.gateway.attempts import AttemptMonitor, Failover
from tpx.oracle.model.gateway.events import request_kind
from tpx.oracle.model.gateway.monitor import GatewayMonitor, Violation, snapshot_of_exchange
from tpx.oracle.tracecheck_gateway import trace_file_name, write_trace
from tpx.transport.exchange import ExchangeSnapshot, Provider
from tpx.transport.translate.ids import RAW_ENCODED_ID, verify_signed_id, wire_id

__all__ = ["LiveMonitor", "SpecViolationError"]

logger = logging.getLogger("tpx.gateway")
#: The tool_result ids of a request's last user turn, or what reads them (when it is refused).
Answers = tuple[str, ...] | Callable[[], tuple[str, ...]]


class SpecViolationError(ModelError):
    """The gateway monitor stopped a step ``spec/TpxGateway.tla`` does not allow."""

    code = "MODEL_SPEC_VIOLATION"
    default_error_type = "api_error"
    default_status = 500

    def __init__(self, violation: Violation) -> None:
        super().__init__(
            f"the gateway stopped a step its spec does not allow ({violation.property}, "
            f"{violation.action}); the gateway log has the trace"
        )
        self.property = violation.property


class _StepsCollector(Collector):
    """``tpx_gateway_monitor_steps_total``, read from the monitor's own count at scrape
    time (no per-step metric update on the request path)."""

    def __init__(self, monitor: GatewayMonitor) -> None:
        self._monitor = monitor

    def collect(self) -> Iterator[Metric]:
        steps = CounterMetricFamily(
            "tpx_gateway_monitor_steps", "Spec steps the gateway monitor checked"
        )
        steps.add_metric([], self._monitor.steps)
        yield steps


class LiveMonitor:
    """The per-process online monitor of ``tpx serve --monitor`` (see the module doc)."""

    def __init__(self, settings: Settings, metrics: Metrics) -> None:
        to_wire: Callable[[str], str] | None = None
        self._unsigned: Callable[[str], str] | None = None
        #: whether a caller id verifies (TPX signs the ids it hands out)
        self._verifies: Callable[[str], bool] | None = None
        if settings.provider is Provider.TPX:
            secret = settings.id_keys

            def verifies(i: str) -> bool:
                return verify_signed_id(i, secret) is not None

            self._verifies = verifies

            def unsigned(i: str) -> str:
                """The caller id behind a signed one (a forged or no MAC: the id itself):
                ``verify_signed_id(i, secret) or i``, without verifying an id that cannot be
                signed. A signed id is ``tpx[rbn]<position>-<12 hex nonce>-<20 hex MAC>_...``:
                neither ``tpx``, the kind nor the position holds a ``-``, so its first ``-``
                ends that prefix and 13 characters on, past the nonce, comes the ``-``
                before the MAC. An id without a ``-`` there matches no signed id (and was
                never cached as verified: only ids whose MAC is right are), so
                :func:`~tpx.transport.translate.ids.verify_signed_id` refuses it. The exchange's own
                caller ids (``<nonce>_``: the ``pending`` of every Deliver) are such ids."""
                k = i.find("-")
                if k < 0 or i[k + 13 : k + 14] != "-":
                    return i
                return verify_signed_id(i, secret) or i

            def to_wire(i: str) -> str:
                """``wire_id(unsigned(i))``, one call fewer (the monitor's id reads): an id
                of the raw form (the exchange's own ids, unsigned, of every Deliver) is its
                wire id as ``wire_id`` reads it first; a signed id never has that form (the
                MAC's ``-`` comes where its ``_`` would)."""
                raw = RAW_ENCODED_ID(i)
                if raw is not None:
                    return raw[1]
                k = i.find("-")
                if k >= 0 and i[k + 13 : k + 14] == "-":
                    i = verify_signed_id(i, secret) or i
                return wire_id(i)

            self._unsigned = unsigned

        self.monitor = GatewayMonitor(
            provider=settings.provider.name,
            gateway_retry=True,
            to_wire=to_wire,
            max_in_flight=settings.limits.max_in_flight,
            preflight=True,
        )
        #: the upstream attempts of the live requests (the spec's upVars)
        routing = settings.routing
        self.attempts = AttemptMonitor(
            max_attempts=None if routing is None else routing.options.max_attempts
        )
        self.trace_dir: Path | None = settings.trace_dir
        self._lock = threading.Lock()
        #: requests whose client left while their exchange was in flight (Turn.abandon)
        self._gone: set[str] = set()
        #: each live request's obligations and answers, read from the client's bytes
        self._asked: dict[str, tuple[frozenset[str], Answers]] = {}
        self.violations = Counter(
            "tpx_gateway_monitor_violations",
            "Steps the gateway monitor stopped (the spec does not allow them), by property",
            ["property"],
            registry=metrics.registry,
        )
        metrics.registry.register(_StepsCollector(self.monitor))

    def _check(
        self,
        key: str,
        action: str,
        snapshot: ExchangeSnapshot,
        obligations: Iterable[str] | None = None,
    ) -> None:
        with self._lock:
            violation = self.monitor.observe_exchange(
                key, action, snapshot, obligations=obligations
            )
        if violation is not None:
            self._stopped(key, violation)

    def _stopped(self, key: str, violation: Violation) -> None:
        self.violations.labels(violation.property).inc()
        record = {
            "request_id": key,
            "monitor_violation": violation.property,
            "step": violation.step,
            "action": violation.action,
            "message": violation.message,
            "trace": list(violation.trace),
        }
        logger.warning("%s", orjson.dumps(record).decode())
        if self.trace_dir is not None:
            write_trace(self.trace_dir / trace_file_name(key), violation.trace)
        raise SpecViolationError(violation)

    def start(
        self,
        key: str,
        snapshot: ExchangeSnapshot,
        obligations: frozenset[str] | None = None,
        answers: Answers | None = None,
        *,
        conversation: Hashable | None = None,
    ) -> None:
        """``Resume``: the conversation starts idle with its history's obligations.

        *conversation* names the conversation the request is an exchange of (its
        opening, :func:`tpx.gateway.history.opening`): the ids of its live
        exchanges are all of theirs (overlapping requests, spec/TpxGatewayOverlap.tla;
        ``None``: the request is a conversation of its own).

        *obligations* are those of the request as the client sent it, read at the
        gateway's boundary (``None``: take the exchange's ``pending``), *answers* the
        tool_result ids of its last user turn (or what reads them from the request's bytes,
        called only if the request is refused): with both, a refusal of the request is
        checked to refuse a wrong one (RefusesOnlyWrong). The exchange's own
        state is checked first; when its ``pending`` is not the client's (compared on the
        wire side), the conversation resumes with the client's, the spec's ``pending``, so
        an exchange that lost some is stopped at its next step (a ``CallerSend`` without
        their tool_results)."""
        monitor = self.monitor
        with self._lock:  # _check, inline
            if conversation is not None:
                monitor.joins(key, conversation)
            violation = monitor.observe_exchange(key, "Resume", snapshot)
            if violation is None and obligations is not None and answers is not None:
                self._asked[key] = (obligations, answers)  # judged only if refused
        if violation is not None:
            self._stopped(key, violation)
        pending = snapshot.pending
        if (
            obligations is not None
            and obligations != pending
            # TPX: the same caller ids once unsigned name the same wire ids (to_wire maps
            # a caller id through its unsigned one)
            and (self._unsigned is None or frozenset(map(self._unsigned, obligations)) != pending)
            and not self.monitor.same_ids(obligations, pending)
        ):
            self._check(key, "Resume", attrs.evolve(snapshot, pending=obligations))

    def observer(
        self,
        key: str,
        obligations: Iterable[str],
        inner: Callable[[str, ExchangeSnapshot], None],
    ) -> Callable[[str, ExchangeSnapshot], None]:
        """The exchange observer: *inner* (actions, metrics, raw trace), then the check."""
        held = frozenset(obligations)
        check, lock, gone = self.monitor.observe_exchange, self._lock, self._gone

        def observe(action: str, snapshot: ExchangeSnapshot) -> None:
            inner(action, snapshot)
            with lock:
                if gone and action == "ProviderFail" and key in gone:
                    gone.discard(key)
                    action = "ClientGone"  # the exchange's failure: the client left
                violation = check(key, action, snapshot, obligations=held)
                if violation is None and action == "CallerAbort":
                    violation = self._refusal(key)
            if violation is not None:
                self._stopped(key, violation)

        return observe

    def client_gone(self, key: str) -> None:
        """The client of request *key* left mid-exchange: the exchange's next failure is
        the spec's ``ClientGone`` (the same step as ProviderFail, named as it happened)."""
        with self._lock:
            self._gone.add(key)

    def refused(self, key: str, snapshot: ExchangeSnapshot) -> None:
        """A request refused for pairing with nothing pending took no exchange step: in
        the gateway spec it is a CallerAbort (the turn counts, the outcome is "err")."""
        record = snapshot_of_exchange(snapshot)
        record["turn"] = snapshot.turn + 1
        record["lastOutcome"] = "err"
        with self._lock:
            violation = self.monitor.observe(key, "CallerAbort", record) or self._refusal(key)
        if violation is not None:
            self._stopped(key, violation)

    def _refusal(self, key: str) -> Violation | None:
        """RefusesOnlyWrong on the refusal of request *key* (held lock): its request as
        :meth:`start` read it (not read: nothing to judge)."""
        asked = self._asked.pop(key, None)
        if asked is None:
            return None
        obligations, answers = asked
        if callable(answers):
            answers = answers()
        return self.monitor.refuses(key, request_kind(obligations, answers, self._verifies))

    def preflight_refused(
        self, key: str, snapshot: ExchangeSnapshot, *, input_tokens: int, maximum: int
    ) -> None:
        """The gateway's preflight refused request *key* (400 ``prompt is too long``) before
        the wire: the spec's ``PromptTooLong`` (the turn counts, the outcome is "err", the
        obligations are kept). *snapshot* is the exchange's before any step (as
        :meth:`start` took it), *input_tokens* the request's input as the preflight counted
        it, *maximum* the most input its model's context window takes with the reply room
        the preflight keeps. RefusesOnlyWrong: the refusal is legal only for a request that
        does not fit, ``input_tokens > maximum``; else it is stopped
        (:class:`SpecViolationError`)."""
        record = snapshot_of_exchange(snapshot, action="PromptTooLong", obligations=None)
        record["turn"] = snapshot.turn + 1
        record["lastOutcome"] = "err"
        with self._lock:
            self._asked.pop(key, None)
            violation = self.monitor.observe(key, "PromptTooLong", record)
            if violation is None:
                fits = input_tokens <= maximum
                violation = self.monitor.refuses(key, "ok" if fits else "long", "PromptTooLong")
        if violation is not None:
            self._stopped(key, violation)

    def _attempt_step(self, key: str, action: str, failure: tuple[str, str] | None) -> None:
        """Stop the step when the attempt monitor found it illegal (held no lock)."""
        if failure is None:
            return
        prop, message = failure
        trace = tuple({"#action": a, **s._asdict()} for a, s in self.attempts.trace(key))
        self.monitor.violations += 1
        self._stopped(key, Violation(key, len(trace) + 1, action, prop, message, trace))

    def attempt(self, key: str, upstream: str) -> None:
        """Request *key* was sent (CallerSend or a retried turn): its first attempt goes to
        *upstream* (a healthy one unless none is)."""
        with self._lock:
            failure = self.attempts.send(key, upstream)
        self._attempt_step(key, "NewRequest", failure)

    def answered(self, key: str, upstream: str, *, stream: bool) -> None:
        """:meth:`attempt`, :meth:`accept` and, for a stream that begins, :meth:`first_byte`
        at once (one lock): request *key* went to *upstream*, which answered it."""
        with self._lock:
            action, failure = self.attempts.answered(key, upstream, first_byte=stream)
        if failure is not None:
            self._attempt_step(key, action, failure)

    def accept(self, key: str) -> None:
        """The current attempt of request *key* wrote a byte of the request to its upstream
        (``UpstreamAccept``: from here on it may be generating)."""
        with self._lock:
            failure = self.attempts.accept(key)
        self._attempt_step(key, "UpstreamAccept", failure)

    def resend(self, key: str) -> None:
        """Request *key* is sent again to the same upstream on a fresh connection, its
        reused connection having failed before anything was written (``Resend``)."""
        with self._lock:
            failure = self.attempts.resend(key)
        self._attempt_step(key, "Resend", failure)

    def failover(self, key: str, upstream: str, *, generating: bool = False) -> None:
        """Request *key* moves to *upstream* (``Failover``): its attempt failed before any
        byte of a reply reached the client (a connect error, or the upstream's own 429, 529
        or 5xx); the upstream it leaves cools down until :meth:`recover`. *generating*: the
        attempt it leaves reached its upstream and failed in a way that does not say the
        upstream generated nothing (a timeout, a connection lost after the request was
        written): no Failover of the spec, whose reached attempt is no generation, so the
        step is stopped (OneGeneration: the next attempt would be a second generation)."""
        with self._lock:
            attempts = self.attempts
            s = attempts.state(key)
            attempts.health.setdefault(upstream, True)
            if (
                generating
                and s.reached
                and Failover(s, upstream, attempts.health, attempts.max_attempts) is not None
            ):
                failure: tuple[str, str] | None = (
                    "OneGeneration",
                    f"Failover to {upstream!r} leaves an attempt that may be generating",
                )
                attempts.stop(key, "Failover", s)
            else:
                failure = attempts.failover(key, upstream)
        self._attempt_step(key, "Failover", failure)

    def first_byte(self, key: str) -> None:
        """The first byte of the upstream's reply to request *key* went to the client
        (``FirstByte``): from here on the request ends on this upstream."""
        with self._lock:
            failure = self.attempts.first_byte(key)
        self._attempt_step(key, "FirstByte", failure)

    def recover(self, upstream: str) -> None:
        """A cooling-down *upstream* passed its recovery probe (``Recover``)."""
        with self._lock:
            self.attempts.recover((upstream,))

    def close(self, key: str) -> None:
        """The exchange ended: forget the conversation; write its trace (``--trace-dir``)."""
        with self._lock:
            if self._gone:
                self._gone.discard(key)
            if self._asked:
                self._asked.pop(key, None)
            self.attempts.close(key)
            if self.trace_dir is None:
                self.monitor.forget(key)
                return
            trace = self.monitor.close(key)
        if trace:
            write_trace(self.trace_dir / trace_file_name(key), trace)
