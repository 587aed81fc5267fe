"""The HTTP replay of ``spec/TpxGatewayFailover.cfg``: behaviours of
:mod:`conformance.failover_behaviours` driven through a real ``tpx serve`` with
``[[upstreams]]`` (:mod:`conformance.failover_gateway`) in front of scripted upstreams
(:mod:`conformance.pool_upstreams`).

Each step is HTTP, scripted from the step itself:

=================  ========================================================================
``CallerSend``     the client POSTs, asking for the model routed to the spec's upstream
                   first (``to-u1`` / ``to-u2``); done when the request reaches an upstream.
                   A conversation streams when its behaviour has a ``FirstByte``
``CallerAbort``    the client POSTs a tool_result for an id never issued; done at the answer
``PromptTooLong``  the client POSTs a prompt past the context window; done at the answer
``Resend``         the upstream refuses with 429 / 529 and ``retry-after: 0``; done when the
                   request reaches an upstream again
``Failover``       the upstream refuses (503, 500, 502, or 529 / 429 with a long
                   ``retry-after``, in rotation); done at the next arrival
``UpstreamAccept`` the upstream takes it: ``200`` headers, the body held back (``drop`` mode:
                   the connection closed once read, when the exchange then fails; ``timeout``
                   mode: nothing, until the gateway's ``first_byte_timeout`` closes it)
``FirstByte``      the upstream sends the stream's first event; done when the client has read
                   a byte of the body
``ProviderReply``  the upstream sends the rest of the reply
``ProviderFail``   a request not taken: refused with a 400 (no cooldown, no failover; on an
                   upstream cooling down, its last attempt: a 503); one
                   taken: an error event ends the stream or the body is not JSON (``break``
                   mode, after a first byte: the connection closes mid-stream); done at the
                   client's answer
``ClientGone``     the client drops its request; done when the upstream sees it closed
``Deliver``        the client takes its answer
``Recover``        the upstream answers its next recovery probe healthy; done when the
                   gateway counted that probe (``/metrics``)
=================  ========================================================================

After each step the observed variables, computed from what the clients and the upstreams saw
-- never from the gateway -- must equal the behaviour's (:mod:`conformance.failover_abstraction`
names the property they break). Through ``tpx serve --monitor``, a step the monitor stopped
(its violation counter went up: the client got its ``MODEL_SPEC_VIOLATION`` answer, which
would otherwise pass for a failure the spec allows) fails the replay at that step, naming the
monitor's property.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from typing import Any

import attrs
import httpx2
import orjson

from conformance.failover_abstraction import Abstraction, Conv, FailoverError
from conformance.failover_behaviours import actor, next_of
from conformance.failover_gateway import FailoverGateway, cooling, metrics, probes_ok, violations
from conformance.pool_upstreams import Act, Arrival, PoolUpstreams
from tpx.audit.harness import GATEWAY_KEY
from tpx.oracle.behaviours import Behaviour
from tpx.oracle.model.gateway import Config
from tpx.oracle.values import ModelValue, Record

__all__ = ["FailoverError", "FailoverReplayer", "Modes"]

_KEYS = itertools.count(1)
GUARD_S = 60.0  # a hang guard only: every wait is for an event
#: the refusals that move a request elsewhere, in rotation
FAILOVER_REFUSALS: tuple[tuple[int, str | None], ...] = (
    (503, None),
    (529, "3000"),
    (500, None),
    (429, "3000"),
    (502, None),
)


@attrs.frozen
class Modes:
    """How the steps that can be taken several ways are taken (module doc)."""

    accept: str = "take"  #: ``take``, ``drop`` or ``timeout`` (before a ProviderFail)
    broken: str = "fail"  #: ``fail`` or ``break`` (a ProviderFail after a FirstByte)
    #: every conversation streams (``first_byte_timeout`` applies to streams only)
    stream_all: bool = False


class FailoverReplayer:
    def __init__(
        self,
        upstreams: PoolUpstreams,
        gateway: FailoverGateway,
        config: Config,
        modes: Modes = Modes(),
    ) -> None:
        self.upstreams = upstreams
        self.gateway = gateway
        self.config = config
        self.modes = modes
        self.http = httpx2.AsyncClient(
            base_url=gateway.url,
            headers={"x-api-key": GATEWAY_KEY, "anthropic-version": "2023-06-01"},
            timeout=httpx2.Timeout(600.0),
        )
        self.steps = 0
        #: how long any one wait may take (a hang guard: lower it where a bug is expected)
        self.guard_s = GUARD_S
        #: how long an ended exchange's upstream request may take to close (a hang guard)
        self.ended_s = GUARD_S
        self.refusals = itertools.count()
        #: the observed variables, from what the clients and the upstreams saw
        self.abstraction = Abstraction(upstreams, config)
        #: upstreams the gateway cools down beyond the spec's failovers (a timeout, a stream
        #: broken after its first byte): recovered after the behaviour
        self.extra_cooled: set[str] = set()
        #: the monitor's violation counts, by property, after the step before
        self.stopped: dict[str, int] = {}

    async def aclose(self) -> None:
        await self.http.aclose()

    # -- one behaviour ------------------------------------------------------------------

    async def replay(self, behaviour: Behaviour) -> None:
        streamed = {
            c
            for s, t, a in behaviour.edges()
            if a == "FirstByte"
            for c in self.config.Convs
            if s["fwd"][c] != t["fwd"][c]
        }
        convs = {
            c: Conv(c, f"f{next(_KEYS)}{c.name}", c in streamed or self.modes.stream_all)
            for c in self.config.Convs
        }
        failed = True
        try:
            await self._monitor_stopped()
            self.abstraction.judge(convs, None, behaviour.init, 0, "Init", self.gateway.bug)
            before = behaviour.init
            for n, (action, expected) in enumerate(behaviour.steps, start=1):
                c = actor(before, expected, action, self.config)
                label = action if c is None else f"{action}({c})"
                try:
                    await self._step(action, convs, c, before, expected, behaviour, n)
                except FailoverError as stuck:
                    stopped = await self._monitor_stopped()
                    raise FailoverError(
                        f"step {n} {label}: {stuck}",
                        violated=[*stopped, *stuck.violated],
                        step=n,
                        action=label,
                    ) from None
                self.steps += 1
                stopped = await self._monitor_stopped()
                if stopped:
                    raise FailoverError(
                        f"step {n} {label} (bug {self.gateway.bug}): tpx serve --monitor "
                        f"stopped it ({', '.join(stopped)})",
                        violated=stopped,
                        step=n,
                        action=label,
                    )
                self.abstraction.judge(convs, before, expected, n, label, self.gateway.bug)
                before = expected
            failed = False
        finally:
            try:
                await self._cleanup(convs)
            except FailoverError:
                if not failed:  # else the behaviour's own failure is the one to report
                    raise

    async def _monitor_stopped(self) -> list[str]:
        """The properties ``--monitor`` named since the last call (its counter went up)."""
        if not self.gateway.monitor:
            return []
        counted = violations(await metrics(self.http, self.gateway))
        stopped = [p for p, v in counted.items() if v > self.stopped.get(p, 0)]
        self.stopped = counted
        return stopped

    async def _step(
        self,
        action: str,
        convs: dict[ModelValue, Conv],
        c: ModelValue | None,
        before: Record,
        after: Record,
        behaviour: Behaviour,
        n: int,
    ) -> None:
        if action == "Halted":
            return
        if action == "Recover":
            (u,) = [u for u, ok in after["health"].items() if ok and not before["health"][u]]
            await self._recover(u.name)
            return
        assert c is not None
        cv = convs[c]
        if action == "CallerSend":
            cv.request = "ok"
            healthy = [u for u, ok in before["health"].items() if ok]
            # with one upstream healthy, the route that lists the other first: the gateway
            # must skip the one cooling down
            first = after["up"][c]
            if len(healthy) == 1:
                (first,) = [u for u in self.config.Upstreams if u != first]
            self._send(cv, self._body(cv, f"to-{first.name}"))
            await self._arrival(cv)
        elif action in ("CallerAbort", "PromptTooLong"):
            cv.request = "unknown" if action == "CallerAbort" else "long"
            self._send(cv, self._body(cv, "to-u1", wrong=action))
            await self._settle(cv, convs)
        elif action == "Resend":
            status = 429 if next(self.refusals) % 2 else 529
            await self._act(self._current(cv), Act("refuse", status, "0"))
            await self._arrival(cv)
        elif action == "Failover":
            status, wait = FAILOVER_REFUSALS[next(self.refusals) % len(FAILOVER_REFUSALS)]
            await self._act(self._current(cv), Act("refuse", status, wait))
            await self._arrival(cv)
        elif action == "UpstreamAccept":
            ex = self._current(cv)
            mode = (
                self.modes.accept
                if next_of(behaviour, n, c, self.config) == "ProviderFail"
                else "take"
            )
            if mode == "take":
                await self._act(ex, Act("take"))
            else:
                got = asyncio.ensure_future(self.upstreams.queue(cv.key).get())
                if mode == "drop":
                    await self._act(ex, Act("drop"))
                else:  # the gateway's first_byte_timeout ends the attempt (closes it)
                    self.extra_cooled.add(ex.upstream)
                    closed = asyncio.ensure_future(ex.done.wait())
                    assert cv.task is not None  # its end, an answer, or another upstream
                    await _first_of(self.guard_s, got, closed, cv.task)
                    closed.cancel()
                    if not got.done():
                        await self._over(cv, ex, "the gateway's first_byte_timeout")
                # the gateway answers the client, or (wrongly) asks another upstream
                assert cv.task is not None
                await _first_of(self.guard_s, got, cv.task)
                got.cancel()
        elif action == "FirstByte":
            await self._act(self._current(cv), Act("first"))
            await self._read_first(cv)
        elif action == "ProviderReply":
            await self._act(self._current(cv), Act("reply"))
        elif action == "ProviderFail":
            ex = self._current(cv)
            if not ex.taken and ex.open:
                cooling = not before["health"][before["up"][c]]
                await self._act(ex, Act("refuse", 503 if cooling else 400))
            elif ex.open and cv.first and self.modes.broken == "break":
                self.extra_cooled.add(ex.upstream)
                await self._act(ex, Act("drop"))
            elif ex.open:
                await self._act(ex, Act("fail"))
            await self._settle(cv, convs)
            await self._ended(cv)
        elif action == "Deliver":
            await self._settle(cv, convs)
        elif action == "ClientGone":
            ex = self._current(cv)
            cv.gone = True
            await self._drop(cv)
            await self._guard(ex.done.wait(), "the gateway closing the upstream request")
            cv.turn, cv.outcome = 1, "err"
            await self._quiet(convs)
        else:
            raise ValueError(f"no HTTP step for {action}")

    # -- the client side ------------------------------------------------------------------

    def _body(self, cv: Conv, model: str, wrong: str | None = None) -> bytes:
        text = f"[conv:{cv.key}] hello"
        content: Any = text
        if wrong == "PromptTooLong":
            content = text + " lorem ipsum dolor sit amet" * 8000
        elif wrong == "CallerAbort":
            content = [
                {"type": "text", "text": text},
                {"type": "tool_result", "tool_use_id": f"toolu_forged{cv.key}", "content": "x"},
            ]
        body: dict[str, Any] = {
            "model": model,
            "max_tokens": 64,
            "messages": [{"role": "user", "content": content}],
        }
        if cv.stream and wrong is None:
            body["stream"] = True
        return orjson.dumps(body)

    def _send(self, cv: Conv, body: bytes) -> None:
        request = self.http.build_request(
            "POST", "/v1/messages", content=body, headers={"content-type": "application/json"}
        )
        cv.task = asyncio.ensure_future(self.http.send(request, stream=cv.stream))

    async def _read_first(self, cv: Conv) -> None:
        assert cv.task is not None
        response = await self._guard(asyncio.shield(cv.task), "the stream's headers")
        cv.response = response
        cv.chunks = response.aiter_raw()
        while not cv.body:
            try:
                cv.body += await self._guard(anext(cv.chunks), "the stream's first byte")
            except StopAsyncIteration:
                break
        cv.first = bool(cv.body)

    async def _settle(self, cv: Conv, convs: dict[ModelValue, Conv]) -> None:
        """The client takes its answer (a request reaching an upstream meanwhile is one it
        did not send: it shows as an attempt)."""
        assert cv.task is not None
        got = asyncio.ensure_future(self.upstreams.queue(cv.key).get())
        try:
            await _first_of(self.guard_s, got, cv.task)
            if got.done():  # the gateway asked an upstream again: the state shows it
                return
            response = await self._guard(asyncio.shield(cv.task), "the gateway's answer")
            if cv.stream:
                if cv.chunks is None:
                    cv.chunks = response.aiter_raw()
                while True:  # each part, or the gateway asking an upstream again
                    part = asyncio.ensure_future(anext(cv.chunks))
                    await _first_of(self.guard_s, got, part)
                    if not part.done():
                        part.cancel()
                        if got.done():
                            return
                        raise FailoverError(
                            "no progress: waited for the stream's rest",
                            violated=["Refinement"],
                            step=0,
                            action="",
                        )
                    try:
                        cv.body += part.result()
                    except StopAsyncIteration:
                        break
                await response.aclose()
            else:
                cv.body = response.content
        except httpx2.HTTPError as exc:
            raise FailoverError(
                f"{cv.c}: the client's request failed: {exc!r}",
                violated=["Refinement"],
                step=0,
                action="",
            ) from None
        finally:
            if not got.done():
                got.cancel()
        ok = response.status_code == 200 and (
            b"message_stop" in cv.body and b"event: error" not in cv.body
            if cv.stream
            else b'"type":"message"' in cv.body.replace(b" ", b"")
        )
        cv.task = None
        cv.turn, cv.outcome = 1, "ok" if ok else "err"
        await self._quiet(convs)

    async def _ended(self, cv: Conv) -> None:
        """The exchange ended: no request of it may still run at an upstream (a
        generation left running for an answer the client no longer waits for)."""
        if cv.task is not None:
            return
        for ex in self.upstreams.arrivals.get(cv.key, []):
            await self._over(cv, ex, "the exchange's end")

    async def _over(self, cv: Conv, ex: Arrival, what: str) -> None:
        """*ex* ends at its upstream (closed or answered) after *what*, else a generation
        runs that nothing waits for (``ended_s``: a hang guard)."""
        try:
            await self._guard(ex.done.wait(), "the upstream request's end", self.ended_s)
        except FailoverError:
            raise FailoverError(
                f"{cv.c}: its request #{ex.seq} still runs on {ex.upstream} after {what}",
                violated=["OneGeneration"],
                step=0,
                action="",
            ) from None

    async def _drop(self, cv: Conv) -> None:
        task = cv.task
        cv.task = None
        if task is None:
            return
        if not task.done():
            task.cancel()
        with contextlib.suppress(asyncio.CancelledError, httpx2.HTTPError):
            response = await task
            await response.aclose()

    # -- the upstream side ----------------------------------------------------------------

    def _current(self, cv: Conv) -> Arrival:
        arrivals = self.upstreams.arrivals.get(cv.key)
        if not arrivals:
            raise FailoverError(
                f"{cv.c}: no request of it reached an upstream",
                violated=["Refinement"],
                step=0,
                action="",
            )
        return arrivals[-1]

    async def _act(self, ex: Arrival, act: Act) -> None:
        if not ex.open:
            raise FailoverError(
                f"{ex.key}: the request on {ex.upstream} is over already (closed: {ex.closed})",
                violated=["Refinement"],
                step=0,
                action="",
            )
        ex.acted.clear()
        ex.acts.put_nowait(act)
        await self._guard(ex.acted.wait(), f"{ex.upstream} carrying out {act.kind}")

    async def _arrival(self, cv: Conv) -> None:
        """Wait for the conversation's next arrival on any upstream, or its answer."""
        assert cv.task is not None
        got = asyncio.ensure_future(self.upstreams.queue(cv.key).get())
        await _first_of(self.guard_s, got, cv.task)
        if not got.done():
            got.cancel()
            if not cv.task.done():
                raise FailoverError(
                    "no progress: no arrival, no answer", violated=["Refinement"], step=0, action=""
                )

    async def _recover(self, name: str) -> None:
        samples = await metrics(self.http, self.gateway)
        if not cooling(samples, name):  # no probe will come: the state shows it
            raise FailoverError(
                f"{name} is not in cooldown at the gateway",
                violated=["Refinement"],
                step=0,
                action="",
            )
        before = probes_ok(samples, name)
        probed = self.upstreams.upstreams[name].allow_probe()
        await self._guard(probed.wait(), f"a recovery probe of {name}")
        self.abstraction.probed_at[name] = next(self.upstreams.seq)
        for _ in range(int(self.guard_s / 0.005)):
            if probes_ok(await metrics(self.http, self.gateway), name) > before:
                return
            await asyncio.sleep(0.005)  # polls /metrics for the probe's count: an event
        raise FailoverError(
            f"the gateway never counted {name}'s probe", violated=["Refinement"], step=0, action=""
        )

    async def _quiet(self, convs: dict[ModelValue, Conv]) -> None:
        """Wait until the gateway released every attempt of an ended exchange (its
        in-flight gauge), so balancing sees what the spec sees."""
        busy: dict[str, int] = {}
        for cv in convs.values():
            arrivals = self.upstreams.arrivals.get(cv.key)
            if cv.task is not None and arrivals:
                busy[arrivals[-1].upstream] = busy.get(arrivals[-1].upstream, 0) + 1
        for _ in range(int(self.guard_s / 0.005)):
            samples = await metrics(self.http, self.gateway)
            if all(
                v <= busy.get(labels.split('"')[1], 0)
                for (metric, labels), v in samples.items()
                if metric == "tpx_gateway_upstream_in_flight"
            ):
                return
            await asyncio.sleep(0.005)

    async def _guard(self, aw: Any, what: str, guard_s: float | None = None) -> Any:
        try:
            return await asyncio.wait_for(aw, guard_s or self.guard_s)
        except TimeoutError:
            raise FailoverError(
                f"no progress: waited for {what}", violated=["Refinement"], step=0, action=""
            ) from None

    async def _cleanup(self, convs: dict[ModelValue, Conv]) -> None:
        for cv in convs.values():
            await self._drop(cv)
            for ex in self.upstreams.arrivals.get(cv.key, []):
                if ex.open:
                    ex.acts.put_nowait(Act("drop"))
                    with contextlib.suppress(FailoverError):
                        await self._guard(ex.done.wait(), "the upstream finishing")
        unhealthy = {u.name for u, ok in self.abstraction.health(convs).items() if not ok}
        samples = await metrics(self.http, self.gateway)
        for name in sorted(unhealthy | self.extra_cooled):
            if cooling(samples, name):  # else no probe will come (nor is one needed)
                await self._recover(name)
        self.extra_cooled.clear()
        for cv in convs.values():
            self.upstreams.forget(cv.key)
        await self._quiet({})


async def _first_of(guard_s: float, *futures: asyncio.Future[Any]) -> None:
    waits: set[asyncio.Future[Any]] = set(futures)
    await asyncio.wait(waits, timeout=guard_s, return_when=asyncio.FIRST_COMPLETED)
