"""The upstream steps of the pool's turns, told to ``tpx serve --monitor``.

:class:`Reports` turns what :mod:`tpx.gateway.pool` does into the gateway spec's upstream
steps (``spec/TpxGateway.tla``, ``UpstreamSteps``) and hands each to the live monitor
(:class:`~tpx.gateway.monitoring.LiveMonitor`) *before* the I/O it stands for, so a step the
spec does not allow is stopped before it reaches an upstream:

* ``NewRequest`` -- a turn's first attempt goes to an upstream (:meth:`Reports.first`);
* ``UpstreamAccept`` -- the upstream took the request (:meth:`Reports.accept`): it answered
  with a status that is not a refusal (anything but 429, 529 and 5xx), or the attempt
  failed once the request may have been written (a timeout before the response, a
  connection lost after writing): from then on it may be generating. A refusal proves it
  generated nothing and took nothing (no accept); a connect failure wrote nothing;
* ``Resend`` -- the same upstream again after its short ``retry-after`` (nothing taken);
* ``Failover`` -- another upstream; *generating* when the attempt left was accepted (the
  spec's Failover leaves only attempts that generated nothing, so that one is stopped);
* ``FirstByte`` -- reported by the turn (:meth:`tpx.gateway.turn.Turn.start`): its stream
  begins;
* ``Recover`` -- a cooldown ends: its time passed (kept here from the dispatcher's own
  answer when it set it, :attr:`tpx.gateway.dispatch.Plan.cooled`), a recovery probe
  passed, the upstream answered a request it took while cooling down
  (:meth:`Reports.succeeded`), or every candidate of a route cools down and the one tried
  anyway is its probe.

A choice of an upstream the monitor still holds in cooldown (the dispatcher lost the
cooldown it set) is then a ``NewRequest`` or ``Failover`` the spec does not allow (``Next``).
Made only with ``--monitor``: without it the pool keeps no record and reports nothing.
"""

from __future__ import annotations

from tpx.gateway.dispatch import Dispatcher, Plan
from tpx.gateway.monitoring import LiveMonitor

__all__ = ["Reports"]


class Reports:
    """The monitor's view of one pool's attempts and cooldowns (one per pool)."""

    def __init__(self, monitor: LiveMonitor, dispatcher: Dispatcher) -> None:
        self.monitor = monitor
        self.dispatcher = dispatcher
        #: the cooldowns set, by upstream: when each ends (monotonic seconds)
        self.cooling: dict[str, float] = {}

    def _ready(self, name: str, now: float) -> None:
        """Recover the upstreams whose cooldown ended; and *name* when it is chosen while the
        dispatcher still has it cooling down (every candidate does: it is tried anyway)."""
        cooling = self.cooling
        for other, until in list(cooling.items()):
            if until <= now:
                del cooling[other]
                self.monitor.recover(other)
        if name in cooling and self.dispatcher.health[name].cooling(now):
            del cooling[name]
            self.monitor.recover(name)

    def first(self, key: str, name: str, now: float) -> None:
        """The turn's first attempt goes to *name* (``NewRequest``)."""
        self._ready(name, now)
        self.monitor.attempt(key, name)

    def accept(self, key: str) -> None:
        """The attempt's upstream took the request (``UpstreamAccept``)."""
        self.monitor.accept(key)

    def next(self, key: str, left: str, name: str, now: float, *, generating: bool) -> None:
        """The turn's next attempt, after the one on *left*: ``Resend`` to the same upstream,
        else ``Failover`` to *name* (*generating*: the attempt left was accepted)."""
        if name == left:
            self.monitor.resend(key)
            return
        self._ready(name, now)
        self.monitor.failover(key, name, generating=generating)

    def cooled(self, plan: Plan) -> None:
        """Keep the cooldowns *plan*'s failures set (each ends at the later of two)."""
        cooling = self.cooling
        for name, until in plan.cooled.items():
            cooling[name] = max(until, cooling.get(name, until))
        plan.cooled.clear()

    def succeeded(self, name: str, now: float) -> None:
        """*name* answered (call it before the dispatcher's ``succeeded``): a cooldown the
        dispatcher still has it in ends there, so one these reports hold ends too
        (``Recover``). A cooldown the dispatcher lost stays held: its choice stays a step
        the spec does not allow."""
        if name in self.cooling and self.dispatcher.health[name].cooling(now):
            del self.cooling[name]
            self.monitor.recover(name)

    def probed(self, name: str, ok: bool) -> None:
        """A recovery probe of *name* passed (*ok*): its cooldown ends (``Recover``)."""
        if ok:
            self.cooling.pop(name, None)
            self.monitor.recover(name)
