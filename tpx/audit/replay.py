"""Replay the gateway spec's behaviours through a real ``tpx serve`` over HTTP.

:class:`HttpReplayer` takes a behaviour (:mod:`tpx.audit.behaviours`), picks
the ``tpx serve`` process of its initial ``hasKey`` / ``hasToken`` (started once, reused),
gives each conversation its own ``httpx2.AsyncClient`` and its own channel on the fake
upstream, and takes each step as HTTP:

=================  ========================================================================
``CallerSend``     the client POSTs its next turn (every obligation answered once); done
                   when the request reaches the fake upstream (or the client has an answer)
``Retry``          the client re-sends its last body, byte for byte (streamed mode: every
                   second one is Claude Code's fallback, the same body without
                   ``stream``); the same wait
``CallerAbort``    the client POSTs tool_results that do not answer its obligations (an id
                   of an earlier round when the history has one, else one never issued;
                   one left out; one twice); done at the gateway's answer
                   (400 expected) or when anything reaches the upstream (a bug)
``NoProvider``     the client POSTs a turn to a gateway started without credentials
``ProviderReply``  the fake releases the held request with a reply emitting the spec's ids
``ProviderFail``   the fake releases it with a failure (500 / 529 / 429 / 503 / a body that
                   is not the provider's; streamed: also a stream broken off mid-way); done
                   when the client has the gateway's answer
``ClientGone``     the client drops its request; done when the fake sees the gateway close
                   the upstream request
``Deliver``        the client takes the gateway's answer
=================  ========================================================================

Streamed mode (``streaming=True``; ``None``: every second behaviour): every request has
``"stream": true``, the fake answers with the provider's event stream (Chat Completions
chunks with tool calls in fragments, or Messages events), and the client reads the
gateway's events whole and assembles the message (a ``ClientGone`` drops the stream
before its first event; a failed stream is an ``error`` event or a broken one).

Nothing waits on time: each step waits for its event (an arrival on the fake, a response
on the client, the upstream connection closing), with a generous guard against a hang.
Requests stay held on the fake until the behaviour's ``ProviderReply`` / ``ProviderFail``,
so wherever a behaviour has one conversation's exchange in flight while another's
request is sent, both really are in flight together.

After every step the abstraction (:mod:`tpx.audit.abstraction`) computes
the spec's variables and the step is judged: ``Refinement`` when the observed state is
not the spec's, every invariant of the cfg the observed state violates, every step
property of the cfg (``SelectionStable``, and those the mirror lists) on the observed
step, what the bytes show (:func:`byte_problems`), and which call every id, call and
result on both wires is about, over every round (``Binding``; a request the upstream got
that no client request started: ``OneRequest``; :func:`binding_problems`). A problem
raises :class:`HttpConformanceError` naming them; so does a request reaching the upstream
while the step waits for the gateway's answer (``OneRequest``).

The conversations of one behaviour share a Claude Code session id (a session's
sub-agents); on every other pair of behaviours the clients answer parallel calls in the
reverse order. Bodies are Claude Code's shape, so every replay also goes through the
gateway's tail cache (:meth:`HttpReplayer.tail_hits`).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import Sequence
from typing import Any

import httpx2

from tpx.audit.abstraction import (
    BOUND,
    Observer,
    binding_problems,
    byte_problems,
    client_call,
    refusal_problem,
)
from tpx.audit.behaviours import conversation_of
from tpx.audit.binding import IdReader
from tpx.audit.client import ABORT_STYLES, ConvClient, Settled
from tpx.audit.harness import GATEWAY_KEY, STEP_GUARD_S, TAIL_HITS, Gateway, Harness
from tpx.audit.upstream import FAIL_KINDS, STREAM_FAIL_KINDS, Channel, Plan
from tpx.oracle.behaviours import Behaviour, Coverage
from tpx.oracle.model.gateway import INVARIANTS, Config, SelectionStable, State
from tpx.oracle.model.gateway import invariants as _invariants
from tpx.oracle.values import ModelValue, Record

__all__ = ["CLOSE", "HttpConformanceError", "HttpReplayer"]

#: the wait after a client left (``ClientGone``), as a guard names it
CLOSE = "the gateway closing the upstream request"

_KEYS = itertools.count(1)
#: the cfg's step properties (the mirror's list where it has one)
STEP_PROPERTIES: tuple[tuple[str, Any], ...] = getattr(
    _invariants, "PROPERTIES", (("SelectionStable", SelectionStable),)
)
#: the spec's wrong ``request`` -> the client's way of sending it
ABORT_STYLE_OF = {"unknown": "unknown", "missing": "missing", "duplicated": "duplicate"}


class HttpConformanceError(AssertionError):
    """The real gateway left the spec: ``violated`` names the properties."""

    def __init__(self, message: str, *, violated: Sequence[str], step: int, action: str) -> None:
        super().__init__(message)
        self.violated = tuple(dict.fromkeys(violated))
        self.step = step
        self.action = action


def _show(v: Any) -> str:
    if isinstance(v, frozenset):
        return "{" + ", ".join(sorted(_show(x) for x in v)) + "}"
    if isinstance(v, tuple):
        return "<<" + ", ".join(_show(x) for x in v) + ">>"
    return repr(v) if isinstance(v, str) else str(v)


class HttpReplayer:
    """Replays behaviours of *config* through ``harness``'s gateways (``bug``: through
    processes with that seeded bug; ``monitor``: processes started with ``--monitor``)."""

    def __init__(
        self,
        harness: Harness,
        config: Config,
        *,
        bug: str | None = None,
        streaming: bool | None = False,
        ping_interval: float | None = None,
        monitor: bool = False,
    ) -> None:
        self.harness = harness
        self.monitor = monitor
        self.gateways: dict[str, Gateway] = {}  # every process it replayed through, by URL
        self._hits_before: dict[str, int] = {}
        #: requests its clients sent (each one a body the gateway parses)
        self.requests = 0
        self.config = config
        self.bug = bug
        #: True: every request streams; None: every second behaviour (odd indices) does
        self.streaming = streaming
        self.ping_interval = ping_interval
        self._http: dict[tuple[str, ModelValue], httpx2.AsyncClient] = {}
        self.steps = 0
        #: how the abstraction reads the ids the clients hold (:mod:`tpx.audit.abstraction`)
        self.reader: IdReader = client_call
        #: the hang guard of one step, in seconds
        self.guard_s = STEP_GUARD_S
        #: requests that reached the upstream while another conversation's exchange was in
        #: flight (its request held on the fake, or its reply out and not yet delivered)
        self.overlaps = 0
        #: answers that carried ``ping`` events (reported, not required: pings follow time)
        self.pinged = 0

    def replay(self, behaviour: Behaviour, index: int = 0) -> None:
        """Replay one behaviour (from the test's thread); raises HttpConformanceError."""
        init = behaviour.init
        gw = self.harness.gateway(
            init["hasKey"], init["hasToken"], self.bug, self.ping_interval, self.monitor
        )
        if gw.url not in self.gateways:
            self.gateways[gw.url] = gw
            self._hits_before[gw.url] = int(self.harness.metrics(gw).get(TAIL_HITS, 0))
        self.harness.run(self._replay(gw, behaviour, index))

    def tail_hits(self) -> int:
        """Bodies the gateways it replayed through parsed with a kept tail since it first
        used each (their ``/metrics``)."""
        return sum(
            int(self.harness.metrics(gw).get(TAIL_HITS, 0)) - self._hits_before[url]
            for url, gw in self.gateways.items()
            if gw.popen.poll() is None
        )

    def monitor_steps(self) -> int:
        """``tpx_gateway_monitor_steps_total`` of its gateways (0: no monitor ran)."""
        return sum(
            int(self.harness.metrics(gw).get("tpx_gateway_monitor_steps_total", 0))
            for gw in self.gateways.values()
            if gw.popen.poll() is None
        )

    def monitor_violations(self) -> dict[str, int]:
        """``tpx_gateway_monitor_violations_total`` of its gateways, by property."""
        out: dict[str, int] = {}
        prefix = 'tpx_gateway_monitor_violations_total{property="'
        for gw in self.gateways.values():
            if gw.popen.poll() is not None:
                continue
            for name, value in self.harness.metrics(gw).items():
                if name.startswith(prefix):
                    prop = name[len(prefix) : -2]
                    out[prop] = out.get(prop, 0) + int(value)
        return out

    def replay_all(self, behaviours: Sequence[Behaviour], coverage: Coverage | None = None) -> int:
        for i, b in enumerate(behaviours):
            self.replay(b, i)
            if coverage is not None:
                coverage.add(b)
        return len(behaviours)

    def close(self) -> None:
        async def close_all() -> None:
            for client in self._http.values():
                await client.aclose()

        self.harness.run(close_all())
        self._http.clear()

    # -- one behaviour ----------------------------------------------------------------------

    def _client(self, gw: Gateway, c: ModelValue) -> httpx2.AsyncClient:
        client = self._http.get((gw.url, c))
        if client is None:
            client = self._http[(gw.url, c)] = httpx2.AsyncClient(
                base_url=gw.url,
                headers={"x-api-key": GATEWAY_KEY, "anthropic-version": "2023-06-01"},
                timeout=httpx2.Timeout(600.0),
            )
        return client

    def _names(self, index: int) -> tuple[str, str]:
        """The session id of behaviour *index*'s clients, and the prefix of its
        conversations' keys (the key: the prefix, then the conversation's name)."""
        n = next(_KEYS)
        return f"session-{n}", f"b{n}"

    async def _replay(self, gw: Gateway, behaviour: Behaviour, index: int) -> None:
        upstreams = self.harness.upstreams
        clients: dict[ModelValue, ConvClient] = {}
        channels: dict[ModelValue, Channel] = {}
        stream = self.streaming if self.streaming is not None else index % 2 == 1
        session, prefix = self._names(index)
        numbering = itertools.count(1)  # the behaviour's upstream requests, in arrival order
        for c in self.config.Convs:
            key = prefix + c.name
            clients[c] = ConvClient(
                c,
                key,
                self._client(gw, c),
                stream=stream,
                session=session,
                reverse=index // 2 % 2 == 1,
            )
            channels[c] = upstreams.channel(key, numbering)
        obs = Observer(
            behaviour.init["hasKey"], behaviour.init["hasToken"], gw.provider, clients, channels
        )
        obs.reader = self.reader
        try:
            before = obs.state()
            self._judge(obs, before, None, behaviour.init, 0, "Init", gw)
            expected_before = behaviour.init
            for n, (action, expected) in enumerate(behaviour.steps, start=1):
                conv = conversation_of(expected_before, expected, self.config)
                label = action if conv is None else f"{action}({conv})"
                if conv is not None:
                    others = [cl.outstanding is not None for d, cl in clients.items() if d != conv]
                    try:
                        await self._step(
                            action,
                            clients[conv],
                            channels[conv],
                            expected["emitted"][conv],
                            index + n,
                            expected["request"][conv] if BOUND else None,
                        )
                    except HttpConformanceError as stuck:  # name the step
                        raise HttpConformanceError(
                            f"step {n} {label} ({gw.provider} gateway): {stuck}",
                            violated=stuck.violated,
                            step=n,
                            action=label,
                        ) from None
                    if action in ("CallerSend", "Retry") and any(others):
                        self.overlaps += 1
                self.steps += 1
                after = obs.state()
                self._judge(obs, after, before, expected, n, label, gw)
                before, expected_before = after, expected
        finally:
            await self._cleanup(clients, channels)
            for ch in channels.values():
                upstreams.forget(ch.key)

    async def _step(
        self,
        action: str,
        cl: ConvClient,
        ch: Channel,
        emitted: frozenset[Any],
        salt: int,
        wrong: str | None = None,
    ) -> None:
        """Take *action* for *cl* (*emitted*: the ids a ProviderReply emits; *wrong*: how a
        CallerAbort's request is wrong, when the spec says: its ``request``)."""
        if action in ("CallerSend", "Retry", "CallerAbort", "NoProvider"):
            self.requests += 1
        if action in ("CallerSend", "NoProvider"):
            kept = cl.request
            cl.send(cl.fresh_body())
            if action == "NoProvider":  # no provider: the spec's request is unchanged
                cl.request = kept
            await self._sent(cl, ch)
        elif action == "Retry":
            assert cl.last_body is not None
            fallback = cl.stream and salt % 2 == 1
            cl.send(cl.fallback_body() if fallback else cl.last_body)
            await self._sent(cl, ch)
        elif action == "CallerAbort":
            styles = [s for s in ABORT_STYLES if s == "unknown" or cl.pending()]
            style = styles[salt % len(styles)] if wrong is None else ABORT_STYLE_OF[wrong]
            if style == "unknown" and cl.earlier():
                style = "issued"  # an id of an earlier round, when the history has one
            cl.send(cl.bad_body(style))
            await self._sent(cl, ch)
        elif action == "ProviderReply":
            ex = self._held(cl)
            ex.plan.set_result(Plan("reply", tuple(sorted(t.name for _, t in emitted))))
            await self._guard(ex.done.wait(), "the fake's reply going out")
        elif action == "ProviderFail":
            ex = self._held(cl)
            kinds = STREAM_FAIL_KINDS if cl.stream else FAIL_KINDS
            ex.plan.set_result(Plan("fail", fail=kinds[salt % len(kinds)]))
            await self._settle(cl, ch)
        elif action == "Deliver":
            await self._settle(cl, ch)
        elif action == "ClientGone":
            ex = self._held(cl)
            assert cl.outstanding is not None
            cl.outstanding.cancel()
            with contextlib.suppress(asyncio.CancelledError, httpx2.HTTPError):
                await cl.outstanding
            await self._guard(ex.done.wait(), CLOSE)
            cl.settle(Settled(None, b""))
        else:
            raise ValueError(f"no HTTP step for {action}")

    @staticmethod
    def _held(cl: ConvClient) -> Any:
        if cl.arrived is None:
            raise HttpConformanceError(
                f"{cl.c}: no request of it on the upstream wire to answer",
                violated=["Refinement"],
                step=0,
                action="",
            )
        return cl.arrived

    async def _guard(self, aw: Any, what: str) -> Any:
        try:
            return await asyncio.wait_for(aw, self.guard_s)
        except TimeoutError:
            raise HttpConformanceError(
                f"no progress: waited for {what}", violated=["Refinement"], step=0, action=""
            ) from None

    async def _sent(self, cl: ConvClient, ch: Channel) -> None:
        """Wait until the request reaches the fake upstream, or the client has an answer."""
        assert cl.outstanding is not None
        arrival = asyncio.ensure_future(ch.arrivals.get())
        done, _ = await asyncio.wait(
            {arrival, cl.outstanding}, timeout=self.guard_s, return_when=asyncio.FIRST_COMPLETED
        )
        if arrival in done:
            cl.arrived = arrival.result()
            cl.accepted = cl.sent
            assert cl.last_body is not None
            cl.forwarded.append((cl.arrived, cl.last_body))
            return
        arrival.cancel()
        if not done:
            raise HttpConformanceError(
                "no progress: the request neither reached the upstream nor was answered",
                violated=["Refinement"],
                step=0,
                action="",
            )
        await self._settle(cl, ch)

    async def _settle(self, cl: ConvClient, ch: Channel) -> None:
        """Wait for the gateway's answer; a request reaching the upstream meanwhile is one
        the client did not send (``OneRequest``)."""
        assert cl.outstanding is not None
        arrival = asyncio.ensure_future(ch.arrivals.get())
        await asyncio.wait(
            {arrival, cl.outstanding}, timeout=self.guard_s, return_when=asyncio.FIRST_COMPLETED
        )
        if arrival.done():
            raise HttpConformanceError(
                f"{cl.c}: upstream request #{arrival.result().seq} arrived while the client "
                "waited for its answer: no client request started it",
                violated=["OneRequest"],
                step=0,
                action="",
            )
        arrival.cancel()
        try:
            response = await self._guard(asyncio.shield(cl.outstanding), "the gateway's answer")
        except httpx2.HTTPError as exc:
            raise HttpConformanceError(
                f"{cl.c}: the client's request failed: {type(exc).__name__}: {exc}",
                violated=["Refinement"],
                step=0,
                action="",
            ) from None
        if b"event: ping" in response.content:
            self.pinged += 1
        headers = {k.lower(): v for k, v in response.headers.items()}
        cl.settle(Settled(response.status_code, response.content, headers))

    async def _cleanup(
        self, clients: dict[ModelValue, ConvClient], channels: dict[ModelValue, Channel]
    ) -> None:
        """After a failure: drop outstanding requests, fail held ones, wait for the fake."""
        for cl in clients.values():
            if cl.outstanding is not None:
                cl.outstanding.cancel()
                with contextlib.suppress(asyncio.CancelledError, httpx2.HTTPError):
                    await cl.outstanding
                cl.outstanding = None
        for ch in channels.values():
            for ex in ch.exchanges:
                if not ex.plan.done():
                    ex.plan.set_result(Plan("fail", fail="500"))
                await self._guard(ex.done.wait(), "the fake finishing")

    # -- judging ----------------------------------------------------------------------------

    def _judge(
        self,
        obs: Observer,
        observed: Record,
        before: Record | None,
        expected: Record,
        step: int,
        action: str,
        gw: Gateway,
    ) -> None:
        problems: list[tuple[str, str]] = []
        try:
            state = State.from_record(observed)
        except ValueError as exc:
            problems.append(("TypeOK", str(exc)))
        else:
            for name, inv in INVARIANTS:
                try:
                    ok = inv(state, self.config)
                except (KeyError, TypeError):
                    ok = False
                if not ok:
                    problems.append((name, "violated by the observed state"))
            if before is not None:
                prior = State.from_record(before)
                for name, prop in STEP_PROPERTIES:
                    try:
                        ok = prop(prior, state)
                    except (KeyError, TypeError):
                        ok = False
                    if not ok:
                        problems.append((name, "violated by the observed step"))
        problems += byte_problems(obs)
        problems += binding_problems(obs)
        if action.startswith("CallerAbort("):
            cl = obs.clients[ModelValue(action[len("CallerAbort(") : -1])]
            answered = cl.outstanding is None and bool(cl.received)
            bad = refusal_problem(cl.received[-1] if answered else None)
            if bad is not None:
                problems.append(("Refusal", bad))
        for name in expected:
            if observed[name] != expected[name]:
                problems.append(
                    (
                        "Refinement",
                        f"{name}: observed {_show(observed[name])}, spec {_show(expected[name])}",
                    )
                )
        if problems:
            where = f"{gw.provider} gateway" + ("" if gw.bug is None else f", bug {gw.bug}")
            raise HttpConformanceError(
                f"step {step} {action} ({where}):\n  "
                + "\n  ".join(f"{p}: {m}" for p, m in problems),
                violated=[p for p, _ in problems],
                step=step,
                action=action,
            )
