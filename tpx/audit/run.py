"""``tpx audit URL``: the gateway spec's behaviours, and the Messages API's rules, as a test
of any Messages endpoint.

Gateway mode (:func:`audit_gateway`): tpx runs the scripted OpenAI-compatible upstream
(:class:`tpx.audit.upstream.FakeUpstreams`); the endpoint under test is configured to use
it. The audit replays every behaviour of a small cfg of ``spec/TpxGateway.tla`` whose
gateway has an OpenAI-compatible upstream (``hasToken``, no ``hasKey``) through the
endpoint, with Claude Code's recorded bodies, every second behaviour streamed
(:class:`AuditReplayer`: the conformance replay aimed at a URL), and judges each step: the
spec's variables from the bytes (Refinement, PairingInv, the binding of ids to calls and
results over every round, one upstream request per client request, refusals), and every
answer against the Messages API's grammar and rules (:mod:`tpx.audit.checks`: ShapeInv,
the ``msg_`` id, usage, error shapes, ``retry-after``). A few scenarios add what the
spec's behaviours do not: a context overflow upstream (the prompt-too-long wording), a
529 then the same body again (retry safety), ``count_tokens`` and ``/v1/models``.

The behaviours run on *jobs* lanes (``tpx audit --jobs N``, :mod:`tpx.audit.lanes`): up to
N behaviours in flight together, each on its own clients with its own conversation keys
(the scripted upstream tells every request's behaviour and conversation by the tag its
first user text carries), each judged on its own; their findings are merged in the
behaviours' order, so the result is the one-at-a-time run's.

Pass-through mode (``upstream="messages"``, ``tpx audit --messages-upstream``): the scripted
upstream speaks the Messages API; the behaviours are those whose gateway has an Anthropic
key only (the spec's provider ANTHROPIC), the checks the same.

Live mode (:func:`tpx.audit.endpoints.audit_live`): a real model behind the URL; the
checks that need no scripted upstream.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Sequence
from typing import Any, cast

import attrs
import httpx2
import orjson

from tpx.audit import checks
from tpx.audit.abstraction import Observer, foreign_call, foreign_ids, reply_view
from tpx.audit.behaviours import (
    CREDENTIALS,
    RETRY,
    SHIPPED,
    SMALL,
    TWO_TOOLS,
    all_behaviours,
    cover_behaviours,
    mirror_graph,
)
from tpx.audit.client import ConvClient, Settled
from tpx.audit.endpoints import kept_headers, text_of
from tpx.audit.findings import CHECK_OF, Failure, Result, check_named
from tpx.audit.harness import GATEWAY_KEY, Gateway, Harness
from tpx.audit.lanes import JOBS, in_lanes
from tpx.audit.replay import CLOSE, HttpConformanceError, HttpReplayer
from tpx.audit.scenarios import run_scenarios
from tpx.audit.sse import is_stream
from tpx.audit.traces import conversation_trace, gateway_trace, judge
from tpx.oracle.model.gateway import Config
from tpx.oracle.values import ModelValue, Record

__all__ = [
    "FULL_CFGS",
    "JOBS",
    "MODE_OF",
    "PROVIDER_OF",
    "SMALL_CFGS",
    "AuditReplayer",
    "Target",
    "audit_gateway",
    "gateway_behaviours",
]

#: the small cfgs: every behaviour of each (two conversations; three turns with retries;
#: two parallel calls over two rounds)
SMALL_CFGS: tuple[tuple[str, Config], ...] = (
    ("TWO_TOOLS", TWO_TOOLS),
    ("RETRY", RETRY),
    ("SMALL", SMALL),
)
#: the guard of a wait that timed out before (the endpoint did not do it within GUARD_S once)
AGAIN_S = 0.1
#: a cfg name's suffix: its behaviours are a minimum edge cover, not all
COVER = " (edge cover)"
#: ``--profile full``: the small cfgs and the edge cover of spec/TpxGateway.cfg
FULL_CFGS = (*SMALL_CFGS, ("SHIPPED" + COVER, SHIPPED))
#: the conversations of earlier behaviours kept for a NoCrossPairing counterexample (a
#: leak from one behaviour's conversation into a later behaviour's), beside those of the
#: behaviours in flight
EARLIER = 16
#: a step's hang guard (a failure to answer is a finding, not a wait)
GUARD_S = 20.0
#: how long an endpoint may keep the upstream request open after its client left (the
#: upstream generating for nobody): the guard of that wait, the first time
CLOSE_S = 5.0


class _Recorded(Exception):
    """The behaviour failed on a check already recorded: it ends there."""


@attrs.frozen
class Outcome:
    """What auditing one behaviour found, in the order found, and the requests it sent."""

    failures: list[Failure]
    requests: int


#: names each audit's conversations apart from an earlier audit's on the same endpoint
_AUDITS = itertools.count(1)


#: the upstream API the scripted upstream speaks -> the spec's provider of an endpoint
#: configured to it (an OpenAI-compatible upstream: TPX, translated; a Messages upstream:
#: ANTHROPIC, passed through)
PROVIDER_OF = {"openai": "TPX", "messages": "ANTHROPIC"}
#: the audit's mode, as the report names it, by upstream API
MODE_OF = {"openai": "gateway", "messages": "pass-through"}


@attrs.frozen
class Target:
    """The endpoint under test, as the replay addresses a gateway."""

    url: str
    provider: str = "TPX"
    bug: str | None = None


def gateway_behaviours(
    configs: Sequence[tuple[str, Config]], provider: str = "TPX"
) -> list[tuple[str, Any]]:
    """``(label, behaviour)`` of every behaviour of *configs* (a name ending in
    :data:`COVER`: a minimum edge cover) whose gateway boots with *provider*'s credential
    only (what an endpoint configured to the fake has: TPX, an OpenAI-compatible upstream;
    ANTHROPIC, a Messages upstream)."""
    creds = CREDENTIALS[provider]
    out = []
    for name, config in configs:
        pick = cover_behaviours if name.endswith(COVER) else all_behaviours
        for k, b in enumerate(pick(mirror_graph(config))):
            if (b.init["hasKey"], b.init["hasToken"]) == creds:
                out.append((f"{name.removesuffix(COVER)} #{k}", b))
    return out


def _slim_upstream(body: bytes) -> str:
    """An upstream request for the report: the system prompt's text and the tool list (the
    recorded ones, the same in every request) left out."""
    try:
        value = orjson.loads(body)
    except orjson.JSONDecodeError:
        return text_of(body)
    if not isinstance(value, dict) or not isinstance(value.get("messages"), list):
        return text_of(body)
    messages = []
    for m in value["messages"]:
        if isinstance(m, dict) and m.get("role") in ("system", "developer"):
            m = {
                **m,
                "content": f"(the recorded system prompt, {len(str(m.get('content')))} characters)",
            }
        messages.append(m)
    kept = {k: value[k] for k in ("model", "stream") if k in value}
    kept["messages"] = messages
    kept["..."] = "tools and the other members of the translated request"
    return orjson.dumps(kept, option=orjson.OPT_INDENT_2).decode()


def _slim(body: bytes) -> str:
    """A client request for the report: the members after ``messages`` (the recorded
    system prompt and tools, the same in every request) left out."""
    try:
        value = orjson.loads(body)
    except orjson.JSONDecodeError:
        return text_of(body)
    if isinstance(value, dict):
        kept = {k: value[k] for k in ("model", "messages", "stream") if k in value}
        kept["..."] = "system, tools, metadata and the rest of Claude Code's recorded body"
        return orjson.dumps(kept, option=orjson.OPT_INDENT_2).decode()
    return text_of(body)


#: the conversations of the latest behaviours (and those in flight), by key: their
#: behaviour's states and the conversation's name there
EarlierConvs = dict[str, tuple[list[tuple[str, Record]], ModelValue]]


class AuditReplayer(HttpReplayer):
    """The conformance replay aimed at an endpoint's URL, one lane of the audit; every
    failure is recorded (with its counterexample) in :attr:`found` instead of ending the
    audit. The lanes of one audit share *tag* (their conversations' keys begin with it),
    the waits that timed out and the latest conversations."""

    def __init__(
        self,
        harness: Harness,
        target: Target,
        key: str,
        result: Result,
        *,
        tag: str = "",
        timed_out: set[str] | None = None,
        earlier: EarlierConvs | None = None,
        keep: int = EARLIER,
    ) -> None:
        super().__init__(harness, SMALL, streaming=None)
        self.target = target
        self.key = key
        self.result = result
        #: the failures found since the last behaviour (or scenario) began, in order
        self.found: list[Failure] = []
        self.tag = tag or f"a{next(_AUDITS)}"
        self.guard_s = GUARD_S
        self.reader = foreign_call
        self._states: list[tuple[str, Record]] = []
        self._seen: dict[tuple[ModelValue, int], bool] = {}
        self._obs: Observer | None = None
        self._where = ""
        self._timed_out: set[str] = set() if timed_out is None else timed_out
        self._earlier: EarlierConvs = {} if earlier is None else earlier
        self._keep = keep
        #: the scenario step under way (``Action(c1)``)
        self.taking = ""

    # -- driving ------------------------------------------------------------------------

    async def audit(self, label: str, config: Config, behaviour: Any, index: int) -> Outcome:
        """Replay behaviour *index* of *config* and judge it: what it found."""
        self.config = config
        self._where = f"{label}, {'streamed' if index % 2 == 1 else 'plain'}"
        self._states = []
        self._seen = {}
        self._obs = None
        self.found = []
        sent = self.requests
        gw = cast(Gateway, self.target)
        try:
            await self._replay(gw, behaviour, index)
        except _Recorded:
            pass
        except HttpConformanceError as exc:
            if self._obs is not None and exc.step > len(self._states) - 1:
                self._states.append((exc.action, self._obs.state()))
            self._record_replay(exc)
        return Outcome(self.found, self.requests - sent)

    def _names(self, index: int) -> tuple[str, str]:
        """Behaviour *index*'s session and keys: the same in every run of the audit (and
        apart from another audit's)."""
        return f"session-{self.tag}-{index}", f"{self.tag}b{index}"

    async def _guard(self, aw: Any, what: str) -> Any:
        """The replay's hang guard, short for a wait that has timed out before: an endpoint
        that never does what is waited for (say, close the upstream request when its client
        leaves) fails each behaviour that waits for it without holding the audit up."""
        guard = self.guard_s
        if what in self._timed_out:
            self.guard_s = AGAIN_S
        elif what == CLOSE:
            self.guard_s = min(guard, CLOSE_S)
        try:
            return await super()._guard(aw, what)
        except HttpConformanceError:
            self._timed_out.add(what)
            raise
        finally:
            self.guard_s = guard

    def _client(self, gw: Gateway, c: ModelValue) -> httpx2.AsyncClient:
        client = self._http.get((gw.url, c))
        if client is None:
            client = self._http[(gw.url, c)] = httpx2.AsyncClient(
                base_url=gw.url,
                headers={"x-api-key": self.key, "anthropic-version": "2023-06-01"},
                timeout=httpx2.Timeout(self.guard_s),
            )
        return client

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
        if self._obs is not obs:  # a behaviour's first step: its conversations, for the
            # NoCrossPairing trace of a later behaviour (or one in flight beside it)
            for c, cl in obs.clients.items():
                self._earlier[cl.key] = (self._states, c)
            while len(self._earlier) > self._keep:
                del self._earlier[next(iter(self._earlier))]
        self._obs = obs
        if "signedBy" in observed:  # how an endpoint makes its ids is its own (not judged)
            observed = Record({**dict(observed.items()), "signedBy": expected["signedBy"]})
        self._states.append((action, observed))
        found = False
        for c, cl in obs.clients.items():
            for k, answer in enumerate(cl.received):
                if (c, k) not in self._seen:
                    self._seen[(c, k)] = True
                    for check, message in answer_problems(cl, answer):
                        self._record(check, f"{c}: {message}", c)
                        found = True
        try:
            super()._judge(obs, observed, before, expected, step, action, gw)
        except HttpConformanceError as exc:
            if found and set(exc.violated) == {"Refinement"}:
                # what the answer's bytes broke, seen in the spec's variables: recorded
                raise _Recorded from None
            raise

    # -- recording ------------------------------------------------------------------------

    def _record_replay(self, exc: HttpConformanceError) -> None:
        lines = [line.strip() for line in str(exc).splitlines()[1:]]
        if not lines:  # one problem, said in one line
            lines = [f"{v}: {str(exc).splitlines()[0]}" for v in exc.violated[:1]]
        done: set[str] = set()
        conv = _conv_of(exc.action)
        named = {CHECK_OF.get(line.partition(": ")[0], "Refinement") for line in lines}
        if len(named) > 1:  # the state left the spec's: the invariant's check names why
            done.add("Refinement")
        for line in lines:
            prop, _, message = line.partition(": ")
            check = CHECK_OF.get(prop, "Refinement")
            if exc.action.startswith("CallerAbort(") and check in ("PairingInv", "Refinement"):
                check = "Refusal"
            if check in done:
                continue
            done.add(check)
            first = str(exc).splitlines()[0]
            text = message if message.startswith(first) else f"{first} {prop}: {message}"
            if check == "Refusal" and prop != "Refusal":
                text = f"a turn whose tool_results do not answer its calls went on: {text}"
            # a refusal answered the wrong way: the answer's shape; forwarded: the pairing;
            # another conversation's ids: across the conversations
            spec_property = {"Refusal": "ShapeInv", "NoCrossPairing": "NoCrossPairing"}
            self._record(check, text, conv, spec_property.get(prop))

    def _record(
        self, check: str, message: str, conv: ModelValue | None, prop: str | None = None
    ) -> None:
        obs = self._obs
        failure = Failure(
            check,
            message,
            self._where,
            [label for label, _ in self._states[1:]],
            *_exchanges(obs),
        )
        spec_property = check_named(check).property if prop is None else prop
        failure.property = spec_property
        if spec_property and conv is not None and self._states:
            foreign: frozenset[Any] = frozenset()
            if spec_property == "NoCrossPairing" and obs is not None:
                # across conversations: every conversation's steps, interleaved, after those
                # of the earlier behaviours' conversations whose ids the bytes name
                foreign = foreign_ids(obs, conv)
                keys = sorted({c.name[1:] for c, _ in foreign if c.name.startswith("?")})
                earlier = [(*self._earlier[k], k) for k in keys if k in self._earlier]
                trace = gateway_trace(self._states, earlier)
            else:
                trace = conversation_trace(self._states, conv)
            description = f"tpx audit {check}: {message[:200]}"
            doc, report = judge(trace, spec_property, description, foreign)
            failure.trace, failure.verdict = doc, str(report)
            failure.rejected_for = report.failed_property or ""
        self.found.append(failure)


def _conv_of(label: str) -> ModelValue | None:
    _, _, who = label.partition("(")
    return ModelValue(who.rstrip(")")) if who else None


def _exchanges(obs: Observer | None) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    if obs is None:
        return [], []
    client: list[dict[str, Any]] = []
    upstream: list[dict[str, Any]] = []
    for c, cl in obs.clients.items():
        answers = list(cl.received)
        for k, (ex, _sent) in enumerate(cl.forwarded):
            upstream.append(
                {
                    "conversation": c.name,
                    "path": ex.path,
                    "request": _slim_upstream(ex.body),
                    "status": ex.status,
                    "reply": text_of(ex.response),
                    "seq": ex.seq,
                    "client_request": k,
                }
            )
        sent_bodies = [sent for _, sent in cl.forwarded]
        if cl.last_body is not None and (not sent_bodies or sent_bodies[-1] != cl.last_body):
            sent_bodies.append(cl.last_body)
        for k, body in enumerate(sent_bodies):
            answer = answers[k] if k < len(answers) else None
            client.append(
                {
                    "conversation": c.name,
                    "request": _slim(body),
                    "status": None if answer is None else answer.status,
                    "headers": {} if answer is None else kept_headers(answer.headers),
                    "answer": "" if answer is None else text_of(answer.body),
                }
            )
        for ch_ex in obs.channels[c].exchanges:
            if all(u["seq"] != ch_ex.seq for u in upstream):
                upstream.append(
                    {
                        "conversation": c.name,
                        "path": ch_ex.path,
                        "request": _slim_upstream(ch_ex.body),
                        "status": ch_ex.status,
                        "reply": text_of(ch_ex.response),
                        "seq": ch_ex.seq,
                        "client_request": None,
                    }
                )
    upstream.sort(key=lambda u: int(u["seq"]))
    return client, upstream


def answer_problems(cl: ConvClient, answer: Settled) -> list[checks.Problem]:
    """The Messages API's rules on one answer a client received (beside the replay's)."""
    if answer.status is None:
        return []
    sent = cl.sent or {}
    upstream = cl.arrived
    if answer.status >= 400:
        problems = checks.error_problems(answer.status, answer.body, f"a {answer.status} answer")
        if upstream is not None and upstream.status in (429, 529) and not problems:
            want = {429: "rate_limit_error", 529: "overloaded_error"}[upstream.status]
            kind = orjson.loads(answer.body)["error"]["type"]
            if answer.status != upstream.status or kind != want:
                problems.append(
                    (
                        "ErrorShape",
                        f"the upstream's {upstream.status} answered {answer.status} {kind}, "
                        f"not {upstream.status} {want}",
                    )
                )
            elif "retry-after" not in answer.headers:
                problems.append(
                    ("ErrorShape", f"the upstream's {upstream.status} retry-after was dropped")
                )
        return problems
    if answer.status != 200:
        return [("ShapeInv", f"a {answer.status} answer to a Messages request")]
    message: Any
    if sent.get("stream") is True:
        if not is_stream(answer.body):
            return [("ShapeInv", "a streamed request answered without an event stream")]
        problems, message = checks.stream_problems(answer.body)
    else:
        try:
            message = orjson.loads(answer.body)
        except orjson.JSONDecodeError:
            return [("ShapeInv", f"a 200 whose body is not JSON: {text_of(answer.body, 120)}")]
        problems = checks.message_problems(message)
    if message is not None and upstream is not None and upstream.replied:
        usage = _upstream_usage(upstream.response)
        if usage is not None:
            problems += checks.usage_problems(message, *usage, "the reply")
    return problems


def _upstream_usage(data: bytes | None) -> tuple[int, int] | None:
    """``(prompt_tokens, completion_tokens)`` the fake reported (plain or streamed; a
    Messages reply: its input and output tokens)."""
    if data is None:
        return None
    view = reply_view(data)
    if view is not None and view[0] == "messages":
        message = checks.stream_problems(data)[1] if is_stream(data) else orjson.loads(data)
        counts = checks.usage_of(message) if isinstance(message, dict) else (None, None)
        prompt, completion = counts
        if isinstance(prompt, int) and isinstance(completion, int):
            return prompt, completion
        return None
    for chunk in reversed(data.split(b"\n")):
        text = chunk[6:] if chunk.startswith(b"data: ") else chunk
        try:
            value = orjson.loads(text)
        except orjson.JSONDecodeError:
            continue
        usage = value.get("usage") if isinstance(value, dict) else None
        if isinstance(usage, dict) and "prompt_tokens" in usage:
            return int(usage["prompt_tokens"]), int(usage["completion_tokens"])
    return None


def audit_gateway(
    harness: Harness,
    url: str,
    key: str = GATEWAY_KEY,
    *,
    configs: Sequence[tuple[str, Config]] = SMALL_CFGS,
    limit: int | None = None,
    scenarios: bool = True,
    stop_on: str | None = None,
    upstream: str = "openai",
    jobs: int = JOBS,
) -> Result:
    """Audit the endpoint at *url* (configured to use *harness*'s scripted upstream, which
    speaks *upstream*: ``openai``, Chat Completions, or ``messages``, the Messages API):
    the scenarios, then the behaviours of *configs* whose gateway has that upstream (the
    first *limit*; *stop_on*: none after the first whose audit fails that check), *jobs*
    of them in flight together; the result is the same whatever *jobs*."""
    start = time.monotonic()
    result = Result(url, MODE_OF[upstream])
    provider = PROVIDER_OF[upstream]
    behaviours = gateway_behaviours(configs, provider)
    if limit is not None:
        behaviours = behaviours[:limit]
    cfg_of = {name.removesuffix(COVER): config for name, config in configs}
    target = Target(url.rstrip("/"), provider)
    jobs = max(1, min(jobs, len(behaviours)))
    timed_out: set[str] = set()
    earlier: EarlierConvs = {}
    keep = EARLIER + jobs * max(len(config.Convs) for _, config in configs)
    tag = f"a{next(_AUDITS)}"
    lanes = [
        AuditReplayer(
            harness, target, key, result, tag=tag, timed_out=timed_out, earlier=earlier, keep=keep
        )
        for _ in range(jobs)
    ]

    async def take(lane: AuditReplayer, index: int) -> Outcome:
        label, b = behaviours[index]
        return await lane.audit(label, cfg_of[label.split(" #")[0]], b, index)

    def stops(outcome: Outcome) -> bool:
        return any(f.check == stop_on for f in outcome.failures)

    try:
        if scenarios:
            run_scenarios(lanes[0])
            for failure in lanes[0].found:
                result.add(failure)
        count = 0 if stop_on in result.failures else len(behaviours)
        outcomes = harness.run(in_lanes(lanes, count, take, stops))
    finally:
        for lane in lanes:
            lane.close()
    for outcome in outcomes:  # in the behaviours' order, as one lane would have found them
        result.behaviours += 1
        result.requests += outcome.requests
        for failure in outcome.failures:
            result.add(failure)
    result.ran |= {
        "ShapeInv",
        "MessageId",
        "Usage",
        "PairingInv",
        "Refusal",
        "OneRequest",
        "Refinement",
        "ErrorShape",
        "Credential",
    }
    if scenarios:
        result.ran |= {"PromptTooLong", "RetrySafety"}
    result.seconds = time.monotonic() - start
    return result
