"""The audit's scenarios beyond the spec's behaviours: a context overflow upstream (the
prompt-too-long wording), a 529 then the same body again (retry safety), ``count_tokens``
and ``/v1/models``. Each runs one fresh conversation through the replayer of
:mod:`tpx.audit.run`, its failures recorded there with their counterexamples."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import Sequence
from typing import Any, Protocol, cast

import httpx2
import orjson

from tpx.audit import checks
from tpx.audit.abstraction import Observer, foreign_call
from tpx.audit.behaviours import CREDENTIALS
from tpx.audit.client import ConvClient
from tpx.audit.endpoints import JSON_HEADERS, endpoint_failures, text_of
from tpx.audit.findings import CHECK_OF, Result
from tpx.audit.harness import Gateway, Harness
from tpx.audit.replay import HttpConformanceError
from tpx.audit.upstream import Channel, Plan
from tpx.oracle.values import ModelValue, Record

__all__ = ["Replaying", "run_scenarios"]


class Replaying(Protocol):
    """What a scenario drives: the audit's replayer (:class:`tpx.audit.run.AuditReplayer`)."""

    harness: Harness

    @property
    def target(self) -> object: ...

    result: Result
    tag: str
    taking: str
    _obs: Observer | None
    _seen: dict[tuple[ModelValue, int], bool]
    _states: list[tuple[str, Record]]
    _where: str

    def _client(self, gw: Gateway, c: ModelValue) -> httpx2.AsyncClient: ...
    async def _guard(self, aw: Any, what: str) -> Any: ...
    def _held(self, cl: ConvClient) -> Any: ...
    async def _sent(self, cl: ConvClient, ch: Channel) -> None: ...
    async def _settle(self, cl: ConvClient, ch: Channel) -> None: ...
    def _record(
        self, check: str, message: str, conv: ModelValue | None, prop: str | None = None
    ) -> None: ...


def run_scenarios(rp: Replaying) -> None:
    """Every scenario, through *rp*."""
    _prompt_too_long(rp)
    _retry_safety(rp)
    _endpoints(rp)


async def _scenario(
    rp: Replaying, name: str, steps: Sequence[tuple[str, Any]], stream: bool
) -> tuple[ConvClient, Observer]:
    """Run *steps* (``(action, plan)``: ``CallerSend``, ``Retry``, ``Reply`` (tools),
    ``Fail`` (kind), ``Deliver``) for one fresh conversation, recording observed states."""
    c = ModelValue("c1")
    key = rp.tag + "s" + "".join(ch for ch in name if ch.isalnum())
    cl = ConvClient(
        c, key, rp._client(cast(Gateway, rp.target), c), stream=stream, session=f"audit-{key}"
    )
    ch: Channel = rp.harness.upstreams.channel(key, itertools.count(1))
    provider = cast(Gateway, rp.target).provider
    obs = Observer(*CREDENTIALS[provider], provider, {c: cl}, {c: ch})
    obs.reader = foreign_call
    rp._obs = obs
    rp._states = [("Init", obs.state())]
    rp._seen = {}
    try:
        for action, arg in steps:
            rp.taking = f"{action}(c1)"
            if action == "CallerSend":
                cl.send(cl.fresh_body())
                await rp._sent(cl, ch)
            elif action == "Retry":
                assert cl.last_body is not None
                cl.send(cl.last_body)
                await rp._sent(cl, ch)
            elif action == "ProviderReply":
                ex = rp._held(cl)
                ex.plan.set_result(Plan("reply", tuple(arg)))
                await rp._guard(ex.done.wait(), "the fake's reply going out")
            elif action == "ProviderFail":
                ex = rp._held(cl)
                ex.plan.set_result(Plan("fail", fail=str(arg)))
                await rp._settle(cl, ch)
            elif action == "Deliver":
                await rp._settle(cl, ch)
            rp._states.append((f"{action}(c1)", obs.state()))
    finally:
        if cl.outstanding is not None:
            cl.outstanding.cancel()
            with contextlib.suppress(asyncio.CancelledError, httpx2.HTTPError):
                await cl.outstanding
            cl.outstanding = None
        for ex in ch.exchanges:
            if not ex.plan.done():
                ex.plan.set_result(Plan("fail", fail="500"))
    return cl, obs


def _run_scenario(
    rp: Replaying, name: str, steps: Sequence[tuple[str, Any]], stream: bool = False
) -> ConvClient | None:
    rp._where = f"scenario {name}, {'streamed' if stream else 'plain'}"
    try:
        cl, _ = rp.harness.run(_scenario(rp, name, steps, stream))
    except HttpConformanceError as exc:
        if rp._obs is not None:  # the step that failed, as observed
            rp._states.append((rp.taking, rp._obs.state()))
        check = CHECK_OF.get(exc.violated[0] if exc.violated else "", "Refinement")
        if check == "Refinement" and name == "retry-after-529":
            check = "RetrySafety"
        rp._record(check, f"{exc}", ModelValue("c1"))
        return None
    return cl


def _prompt_too_long(rp: Replaying) -> None:
    steps = [("CallerSend", None), ("ProviderFail", "context")]
    cl = _run_scenario(rp, "context-overflow", steps)
    if cl is None or not cl.received:
        return
    answer = cl.received[-1]
    problem = ""
    try:
        error = orjson.loads(answer.body)["error"]
        kind, text = error["type"], error["message"]
    except (orjson.JSONDecodeError, KeyError, TypeError):
        problem = f"answered {answer.status} {text_of(answer.body, 200)}"
    else:
        if answer.status != 400 or kind != "invalid_request_error":
            problem = f"answered {answer.status} {kind}, not 400 invalid_request_error"
        elif not checks.PROMPT_TOO_LONG.search(text):
            problem = f"the message {text!r} does not say 'prompt is too long'"
    if problem:
        rp._record("PromptTooLong", f"an upstream context overflow: {problem}", ModelValue("c1"))


def _retry_safety(rp: Replaying) -> None:
    steps = [
        ("CallerSend", None),
        ("ProviderFail", "529"),
        ("Retry", None),
        ("ProviderReply", ("t1",)),
        ("Deliver", None),
    ]
    cl = _run_scenario(rp, "retry-after-529", steps)
    if cl is None:
        return
    last = cl.received[-1] if cl.received else None
    if last is None or last.status != 200:
        got = "nothing" if last is None else f"{last.status} {text_of(last.body, 200)}"
        rp._record("RetrySafety", f"the same body after a 529 answered {got}", ModelValue("c1"))


def _endpoints(rp: Replaying) -> None:
    async def both() -> tuple[httpx2.Response, httpx2.Response]:
        http = rp._client(cast(Gateway, rp.target), ModelValue("endpoints"))
        body = {"model": "claude-audit", "messages": [{"role": "user", "content": "count me"}]}
        counted = await http.post(
            "/v1/messages/count_tokens", content=orjson.dumps(body), headers=JSON_HEADERS
        )
        models = await http.get("/v1/models")
        return counted, models

    try:
        counted, models = rp.harness.run(both())
    except httpx2.HTTPError as exc:
        rp.result.notes.append(f"count_tokens / models: {type(exc).__name__}: {exc}")
        return
    endpoint_failures(rp.result, counted, models)
