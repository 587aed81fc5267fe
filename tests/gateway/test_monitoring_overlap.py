"""Overlapping requests of one conversation against a live ``tpx serve --monitor``
(``spec/TpxGatewayOverlap.tla``): while a request of a conversation is held upstream, a
second one of it runs -- a fork from an earlier point, the same history again, a streamed
fork. Each gets 200 and the reply to its own request (the fake upstream's reply answers
the very request it got: tool calls for a history without results, ``done: <results>``
for one that answers them), with no violation. The seeded bugs of
:mod:`conformance.overlap_bugs` are each caught by these checks."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Iterator
from typing import Any

import attrs
import httpx2
import orjson
import pytest

from conformance.overlap_bugs import OVERLAP_BUGS
from tpx.gateway.asgi import GatewayApp, create_app

from .conftest import GATEWAY_KEY, make_settings, serving
from .fakes import FakeUpstream
from .test_monitoring import AUTH, body, post, results, tool_ids

BUG = {bug.name: bug for bug in OVERLAP_BUGS}
#: How long the test lets the second request run before it releases the first (a
#: second request that waits for the first finishes only once that one is released).
PATIENCE = 30.0


class HoldFirst:
    """The fake upstream, holding the first Messages or chat request after :meth:`arm`
    until :meth:`release`; counts the requests that reached it meanwhile."""

    def __init__(self, fake: FakeUpstream) -> None:
        self.fake = fake
        self.armed = False
        self.waiting = threading.Event()
        self.meanwhile = 0
        self._release: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def arm(self) -> None:
        self.armed = True

    async def handle(self, request: httpx2.Request) -> httpx2.Response:
        if request.url.path.endswith(("/messages", "/completions")):
            if self.armed:
                self.armed = False
                self._loop = asyncio.get_running_loop()
                self._release = asyncio.Event()
                self.waiting.set()
                await self._release.wait()
            elif self._release is not None and not self._release.is_set():
                self.meanwhile += 1
        return self.fake.handle(request)

    def release(self) -> None:
        assert self._loop is not None
        assert self._release is not None
        self._loop.call_soon_threadsafe(self._release.set)


@contextlib.contextmanager
def gateway(provider: str) -> Iterator[tuple[httpx2.Client, HoldFirst, GatewayApp]]:
    held = HoldFirst(FakeUpstream(provider))
    settings = make_settings(provider, gateway_key=GATEWAY_KEY, monitor=True)
    app = create_app(settings, transport=httpx2.MockTransport(held.handle))
    with serving(app) as url, httpx2.Client(base_url=url, timeout=60) as client:
        yield client, held, app


@attrs.frozen
class Reply:
    """A reply as the client got it: status, text and tool_use blocks (a stream
    reassembled from its events)."""

    status: int
    text: str
    uses: tuple[str, ...]
    raw: str

    @classmethod
    def of(cls, response: httpx2.Response, stream: bool) -> Reply:
        if response.status_code != 200:
            return cls(response.status_code, "", (), response.text)
        if not stream:
            content = response.json()["content"]
        else:
            content = []
            for line in response.text.splitlines():
                if line.startswith("data: "):
                    event = orjson.loads(line[6:])
                    if event["type"] == "error":
                        return cls(500, "", (), response.text)
                    if event["type"] == "content_block_start":
                        content.append(dict(event["content_block"]))
                    elif event["type"] == "content_block_delta" and "text" in event["delta"]:
                        content[-1]["text"] = content[-1].get("text", "") + event["delta"]["text"]
        text = "".join(b.get("text", "") for b in content if b["type"] == "text")
        uses = tuple(b["id"] for b in content if b["type"] == "tool_use")
        return cls(200, text, uses, response.text)


def answers(history: list[Any]) -> str:
    """The text of the fake's reply to *history*: what its last user turn's results say."""
    last = history[-1]["content"]
    said = (
        [b["content"] for b in last if b.get("type") == "tool_result"]
        if isinstance(last, list)
        else []
    )
    return f"done: {said}" if said else "calling tools"


def problems(history: list[Any], reply: Reply) -> list[str]:
    """How *reply* fails to be the 200 reply to its own request *history*."""
    found = []
    if reply.status != 200:
        found.append(f"status {reply.status}: {reply.raw[:300]}")
    elif reply.text != answers(history):
        found.append(f"the reply says {reply.text!r}, its request asked {answers(history)!r}")
    elif (reply.text == "calling tools") != (len(reply.uses) == 2):
        found.append(f"tool calls {reply.uses} in a reply saying {reply.text!r}")
    return found


@attrs.frozen
class Sent:
    """A request of the overlap: its history and the reply its client got."""

    history: list[Any]
    reply: Reply


def overlap(
    provider: str, first: str, second: str, *, stream: bool = False, patience: float = PATIENCE
) -> list[str]:
    """Open a conversation (its first turn: two tool calls), then send *first* (held
    upstream) and, while it is held, *second* (streamed if told); each is ``"history"``
    (the history after the first turn's results: the later point) or ``"opening"`` (the
    first user message alone: a fork from the start). Every way the two replies fail to
    be each its own request's, the overlap not to have happened, or the monitor to have
    stopped a step. *patience*: how long the second may take before the first is
    released."""
    with gateway(provider) as (client, held, app):
        opened: list[Any] = [{"role": "user", "content": f"overlap {provider}"}]
        reply = post(client, opened, False)
        later = [*opened, {"role": "assistant", "content": reply["content"]}]
        later.append(results(tool_ids(reply)))
        histories = {"history": later, "opening": opened}
        got: dict[str, httpx2.Response] = {}

        def send(name: str, streamed: bool) -> threading.Thread:
            messages = histories[name]

            def run() -> None:
                got[name] = client.post("/v1/messages", headers=AUTH, json=body(messages, streamed))

            thread = threading.Thread(target=run)
            thread.start()
            return thread

        held.arm()
        a = send(first, False)
        assert held.waiting.wait(30)  # the first is in flight upstream
        if second == first:
            histories["again"] = histories[first]
            second = "again"
        b = send(second, stream)
        b.join(patience)  # the second runs meanwhile (released after it ends, or patience)
        held.release()
        a.join(60)
        b.join(60)
    monitor = app.gateway.monitor
    assert monitor is not None
    violations = monitor.monitor.violations
    assert monitor.monitor.conversations() == 0  # every exchange closed
    found = [f"first: {p}" for p in problems(histories[first], Reply.of(got[first], False))]
    found += [f"second: {p}" for p in problems(histories[second], Reply.of(got[second], stream))]
    if held.meanwhile != 1:
        found.append(f"{held.meanwhile} requests reached the upstream while the first was held")
    if violations:
        found.append(f"{violations} monitor violations")
    return found


@pytest.mark.parametrize("provider", ["TPX", "ANTHROPIC"])
def test_a_fork_from_the_start_while_a_later_request_is_held(provider: str) -> None:
    """The reproducer of the false 500: the fork's provider emits again the ids the held
    request's history holds (the fake's ids follow from the opening)."""
    assert overlap(provider, "history", "opening") == []


@pytest.mark.parametrize("provider", ["TPX", "ANTHROPIC"])
def test_the_same_history_twice_at_once(provider: str) -> None:
    """A client's retry of a request still running: the same body again."""
    assert overlap(provider, "history", "history") == []


@pytest.mark.parametrize("provider", ["TPX", "ANTHROPIC"])
def test_a_streamed_fork_while_a_later_request_is_held(provider: str) -> None:
    assert overlap(provider, "history", "opening", stream=True) == []


@pytest.mark.parametrize("provider", ["TPX", "ANTHROPIC"])
def test_a_later_request_while_a_fork_from_the_start_is_held(provider: str) -> None:
    """The other way round: the held request's provider emits the ids the later one's
    history holds."""
    assert overlap(provider, "opening", "history", stream=True) == []


def test_the_request_keyed_monitor_answers_a_legal_fork_with_a_500() -> None:
    """Seeded bug ``overlap_500``: ids owned per request, not per conversation."""
    with BUG["overlap_500"].active():
        found = overlap("ANTHROPIC", "history", "opening")
    assert len(found) == 2
    assert found[0].startswith("second: status 500")
    assert "(NoCrossPairing, ProviderReply)" in found[0]
    assert found[1] == "1 monitor violations"


@pytest.mark.parametrize("provider", ["TPX", "ANTHROPIC"])
def test_a_crossed_reply_is_caught(provider: str) -> None:
    """Seeded bug ``crossed_reply``: the fork is handed the held request's reply; the
    monitor sees legal steps only, the replies' bytes give it away."""
    with BUG["crossed_reply"].active():
        # the second waits for the first: released after a short patience
        found = overlap(provider, "history", "opening", patience=1.0)
    assert found == [
        "second: the reply says \"done: ['x', 'x']\", its request asked 'calling tools'",
        "0 requests reached the upstream while the first was held",
    ]
