"""tpx.gateway.pool through the official async SDK in-process (tpx.sdk): routes, balancing,
failover only before the first byte, retry-after, cooldowns, one generation at a time, tool
ids and thinking across upstreams, the log line and the metrics per upstream."""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path
from typing import Any

import anthropic
import anyio
import attrs
import httpx2
import orjson
import pytest

import tpx.sdk
from tpx.errors import ConfigurationError
from tpx.gateway import pool as pool_module
from tpx.gateway.core import PING, Gateway, Request, Turn
from tpx.gateway.dispatch import Failure
from tpx.gateway.drive import run_turn
from tpx.gateway.pool import UpstreamPool
from tpx.gateway.settings import Settings, load_settings

from .fakes import FakeUpstream

CONFIG = """
[routing]
first_byte_timeout = {first_byte_timeout}
retry_after_max = 1.0
probe_interval = 0
failover_on_timeout = {failover_on_timeout}

[limits]
ping_interval = {ping_interval}

[[upstreams]]
name = "small"
base_url = "http://small.test/v1"
profile = "deepseek"
models = ["small-model"]
family = "qwen"

[[upstreams]]
name = "big"
base_url = "http://big.test/v1"
profile = "deepseek"
models = ["big-model"]
family = "qwen"

[[upstreams]]
name = "cloud"
base_url = "http://cloud.test/v1"
token_env = "CLOUD_KEY"
profile = "deepseek"
models = ["cloud-model"]
family = "cloud"

[[routes]]
name = "background"
background = true
upstreams = ["small", "big"]

[[routes]]
name = "main"
upstreams = ["big", "cloud"]
"""


CLOUD = "sk-cloud-SECRET-2"


class Timeline:
    """What every fake upstream did, in order, and the most generations at once."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str]] = []
        self.live = 0
        self.most = 0


class _Broken(httpx2.AsyncByteStream):
    """A reply's first event, then the connection drops."""

    def __init__(self, head: bytes, request: httpx2.Request) -> None:
        self.head = head
        self.request = request

    async def __aiter__(self) -> Any:
        yield self.head
        await asyncio.sleep(0.01)
        raise httpx2.ReadError("connection reset mid-stream", request=self.request)


def _breaking(reply: httpx2.Response, request: httpx2.Request) -> httpx2.Response:
    body = reply.read()
    head = body[: body.index(b"\n\n") + 2]
    headers = [(k, v) for k, v in reply.headers.items() if k.lower() != "content-length"]
    return httpx2.Response(reply.status_code, headers=headers, stream=_Broken(head, request))


class Scripted:
    """A fake upstream: scripted behaviours for its next requests, then FakeUpstream's reply.
    Behaviours: ``("status", S, retry_after)``, ``"connect"`` (refused), ``"reset"`` (the
    connection drops after the request was sent), ``"hang"`` (no reply until cancelled),
    ``"break"`` (a stream's first event, then the connection drops)."""

    def __init__(self, name: str, timeline: Timeline, reasoning: str | None = None) -> None:
        self.name = name
        self.timeline = timeline
        self.fake = FakeUpstream("TPX", calls=1, reasoning=reasoning)
        self.script: list[Any] = []
        self.requests: list[dict[str, Any]] = []
        self.tokens: set[str] = set()

    def transport(self) -> httpx2.MockTransport:
        return httpx2.MockTransport(self.handle)

    async def handle(self, request: httpx2.Request) -> httpx2.Response:
        if request.url.path.endswith("/models"):  # a recovery probe: no generation
            return self.fake.handle(request)
        body = orjson.loads(request.content)
        self.requests.append(body)
        self.tokens.add(request.headers.get("authorization", ""))
        action = self.script.pop(0) if self.script else None
        if action == "connect":
            raise httpx2.ConnectError("connection refused", request=request)
        t = self.timeline
        t.events.append(("start", self.name))
        t.live += 1
        t.most = max(t.most, t.live)
        try:
            if action == "reset":
                raise httpx2.ReadError("connection reset", request=request)
            if action == "hang":
                await asyncio.sleep(30)
            if action == "break":
                return _breaking(self.fake.handle(request), request)
            if isinstance(action, tuple):
                _, status, after = action
                headers = {"retry-after": str(after)} if after is not None else {}
                return httpx2.Response(
                    status, headers=headers, json={"error": {"message": "busy", "type": "x"}}
                )
            return self.fake.handle(request)
        except asyncio.CancelledError:
            t.events.append(("cancelled", self.name))
            raise
        finally:
            t.live -= 1
            t.events.append(("end", self.name))


class Rig:
    def __init__(
        self,
        tmp_path: Path,
        *,
        monitor: bool = False,
        failover_on_timeout: bool = False,
        **config: float,
    ) -> None:
        values: dict[str, Any] = {"first_byte_timeout": 5.0, "ping_interval": 10.0, **config}
        values["failover_on_timeout"] = str(failover_on_timeout).lower()
        path = tmp_path / "gateway.toml"
        path.write_text(CONFIG.format(**values))
        env = {"TPX_OAUTH_TOKEN": "tok-SECRET-1", "TPX_GATEWAY_SECRET": "s", "CLOUD_KEY": CLOUD}
        self.settings: Settings = load_settings(env=env, config_file=path, monitor=monitor)
        self.timeline = Timeline()
        self.up = {
            n: Scripted(n, self.timeline, reasoning=f"thought of {n}")
            for n in ("small", "big", "cloud")
        }
        self.client = tpx.sdk.async_anthropic_client(
            settings=self.settings,
            upstream={n: u.transport() for n, u in self.up.items()},
            max_retries=0,
        )

    def seen(self) -> dict[str, int]:
        return {n: len(u.requests) for n, u in self.up.items()}

    async def ask(self, text: str, *, model: str = "claude-opus-4-8", stream: bool = False) -> Any:
        messages: list[Any] = [{"role": "user", "content": text}]
        if not stream:
            return await self.client.messages.create(model=model, max_tokens=64, messages=messages)
        async with self.client.messages.stream(
            model=model, max_tokens=64, messages=messages
        ) as events:
            return await events.get_final_message()


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _records(caplog: pytest.LogCaptureFixture) -> list[dict[str, Any]]:
    return [
        orjson.loads(r.getMessage())
        for r in caplog.records
        if r.name == "tpx.gateway" and r.getMessage().startswith("{")
    ]


@pytest.mark.anyio
async def test_background_calls_go_to_the_small_upstream_main_turns_to_the_big_one(
    tmp_path: Path,
) -> None:
    rig = Rig(tmp_path)
    await rig.ask("title please", model="claude-haiku-4-5")
    await rig.ask("list the files", stream=True)
    assert rig.seen() == {"small": 1, "big": 1, "cloud": 0}
    assert rig.up["small"].requests[0]["model"] == "small-model"
    assert rig.up["big"].requests[0]["model"] == "big-model"


@pytest.mark.anyio
@pytest.mark.parametrize("failure", [("status", 503, None), ("status", 529, 60), "connect"])
@pytest.mark.parametrize("stream", [False, True])
async def test_a_failure_before_the_first_byte_fails_over_and_cools_the_upstream_down(
    tmp_path: Path, failure: Any, stream: bool
) -> None:
    rig = Rig(tmp_path)
    rig.up["big"].script = [failure]
    reply = await rig.ask("list the files", stream=stream)
    assert reply.stop_reason == "tool_use"
    assert rig.seen() == {"small": 0, "big": 1, "cloud": 1}
    assert rig.up["cloud"].requests[0]["model"] == "cloud-model"  # framed for the fallback
    # each upstream gets its own credential, never another's
    assert rig.up["cloud"].tokens == {f"Bearer {CLOUD}"}
    assert rig.up["big"].tokens == {"Bearer tok-SECRET-1"}
    await rig.ask("again", stream=stream)  # big cools down: straight to the fallback
    assert rig.seen() == {"small": 0, "big": 1, "cloud": 2}


@pytest.mark.anyio
async def test_a_short_retry_after_is_honoured_on_the_same_upstream_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    waits: list[float] = []

    async def sleep(seconds: float) -> None:
        waits.append(seconds)
        rig.timeline.events.append(("waited", str(seconds)))

    monkeypatch.setattr(pool_module, "_sleep", sleep)
    rig = Rig(tmp_path)
    rig.up["big"].script = [("status", 529, 0.2)]
    reply = await rig.ask("list the files", stream=True)
    assert reply.stop_reason == "tool_use"
    assert rig.seen() == {"small": 0, "big": 2, "cloud": 0}
    assert waits == [0.2]
    assert rig.timeline.events[:4] == [
        ("start", "big"),
        ("end", "big"),
        ("waited", "0.2"),
        ("start", "big"),
    ]


@pytest.mark.anyio
async def test_a_failure_on_every_upstream_reaches_the_client_with_its_status(
    tmp_path: Path,
) -> None:
    rig = Rig(tmp_path)
    rig.up["big"].script = [("status", 529, None)]
    rig.up["cloud"].script = [("status", 529, 30)]
    with pytest.raises(anthropic.APIStatusError) as refused:
        await rig.ask("list the files")
    assert refused.value.status_code == 529
    assert refused.value.response.headers.get("retry-after") == "30"
    assert rig.seen() == {"small": 0, "big": 1, "cloud": 1}


@pytest.mark.anyio
async def test_a_timeout_before_the_first_byte_ends_the_attempt_before_the_next_begins(
    tmp_path: Path,
) -> None:
    rig = Rig(tmp_path, first_byte_timeout=0.2, failover_on_timeout=True)
    rig.up["big"].script = ["hang"]
    reply = await rig.ask("list the files", stream=True)
    assert reply.stop_reason == "tool_use"
    assert rig.timeline.events[:4] == [
        ("start", "big"),
        ("cancelled", "big"),
        ("end", "big"),
        ("start", "cloud"),
    ]
    assert rig.timeline.most == 1  # never two generations for one request


@pytest.mark.anyio
async def test_a_timeout_ends_the_exchange_unless_failover_on_timeout(tmp_path: Path) -> None:
    """A timeout before the response: the request may have been written and the upstream
    may be generating, so by default it is sent nowhere else (one generation at most)."""
    rig = Rig(tmp_path, first_byte_timeout=0.2)
    rig.up["big"].script = ["hang"]
    status = 200
    try:
        await rig.ask("list the files", stream=True)
    except anthropic.APIStatusError as failed:
        status = failed.status_code
    assert rig.seen() == {"small": 0, "big": 1, "cloud": 0}
    assert status >= 500
    assert rig.timeline.events[:3] == [("start", "big"), ("cancelled", "big"), ("end", "big")]


@pytest.mark.anyio
async def test_no_failover_once_a_byte_reached_the_client(tmp_path: Path) -> None:
    """A ping went out (the upstream was silent past ping_interval): the exchange fails as
    with one upstream, and the fallback never gets the request."""
    rig = Rig(tmp_path, first_byte_timeout=0.5, ping_interval=0.05, failover_on_timeout=True)
    rig.up["big"].script = ["hang"]
    failed = False
    try:
        await rig.ask("list the files", stream=True)
    except anthropic.APIError:
        failed = True
    assert rig.seen() == {"small": 0, "big": 1, "cloud": 0}
    assert failed


@pytest.mark.anyio
async def test_a_connection_lost_after_the_request_was_sent_is_not_sent_again(
    tmp_path: Path,
) -> None:
    """The upstream may be generating already: no second generation anywhere."""
    rig = Rig(tmp_path)
    rig.up["big"].script = ["reset"]
    status = 200
    try:
        await rig.ask("list the files")
    except anthropic.APIStatusError as failed:
        status = failed.status_code
    assert rig.seen() == {"small": 0, "big": 1, "cloud": 0}
    assert status == 502


@pytest.mark.anyio
async def test_tool_ids_stay_valid_and_thinking_stays_in_its_family(tmp_path: Path) -> None:
    """A tool id the small upstream issued is accepted when the next turn goes elsewhere, and
    reaches it as the small one's wire id; the thinking it produced goes back as reasoning to
    its own family only."""
    rig = Rig(tmp_path)
    messages: list[Any] = [{"role": "user", "content": "list the files"}]
    first = await rig.client.messages.create(
        model="claude-haiku-4-5", max_tokens=64, messages=messages
    )
    assert rig.seen()["small"] == 1
    kinds = [b.type for b in first.content]
    assert kinds == ["thinking", "text", "tool_use"]
    thinking = first.content[0]
    assert isinstance(thinking, anthropic.types.ThinkingBlock)
    assert thinking.signature.endswith("~qwen")  # the signature names its producer
    tool = first.content[2]
    assert isinstance(tool, anthropic.types.ToolUseBlock)
    wire_id = rig.up["small"].fake.emitted["list the files"][0]
    assert tool.id.endswith("_" + wire_id)
    messages += [
        {"role": "assistant", "content": [b.model_dump() for b in first.content]},
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": tool.id, "content": "a.txt"}],
        },
    ]
    # the next turn: a main turn to big (the same family: the reasoning goes back) ...
    reply = await rig.client.messages.create(
        model="claude-opus-4-8", max_tokens=64, messages=messages
    )
    assert reply.stop_reason == "end_turn"
    sent = rig.up["big"].requests[-1]["messages"]
    assert sent[1]["tool_calls"][0]["id"] == wire_id
    assert sent[1].get("reasoning_content") == "thought of small"
    # ... and, big failing, to the cloud (another family: no reasoning_content)
    rig.up["big"].script = [("status", 503, None)]
    reply = await rig.client.messages.create(
        model="claude-opus-4-8", max_tokens=64, messages=messages
    )
    assert reply.stop_reason == "end_turn"
    sent = rig.up["cloud"].requests[-1]["messages"]
    assert sent[1]["tool_calls"][0]["id"] == wire_id
    assert "reasoning_content" not in sent[1]
    assert "thought of small" not in orjson.dumps(rig.up["cloud"].requests[-1]).decode()


@pytest.mark.anyio
async def test_the_log_line_and_the_metrics_name_the_upstreams(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="tpx.gateway")
    rig = Rig(tmp_path)
    rig.up["big"].script = [("status", 503, None)]
    await rig.ask("list the files")
    metrics = await rig.client._client.get("http://tpx.in-process/metrics")
    text = metrics.text
    assert 'tpx_gateway_upstream_requests_total{outcome="503",upstream="big"} 1.0' in text
    assert 'tpx_gateway_upstream_requests_total{outcome="200",upstream="cloud"} 1.0' in text
    assert 'tpx_gateway_upstream_cooldowns_total{upstream="big"} 1.0' in text
    assert 'tpx_gateway_upstream_failovers_total{upstream="big"} 1.0' in text
    assert 'tpx_gateway_upstream_attempt_seconds_count{upstream="cloud"} 1.0' in text
    lines = [r for r in _records(caplog) if r.get("endpoint") == "messages"]
    assert len(lines) == 1
    line = lines[0]
    assert (line["route"], line["upstream"], line["upstream_model"]) == (
        "main",
        "cloud",
        "cloud-model",
    )
    assert line["attempts"] == [
        {"upstream": "big", "outcome": 503},
        {"upstream": "cloud", "outcome": "ok"},
    ]
    assert "SECRET" not in orjson.dumps(lines).decode()


@pytest.mark.anyio
async def test_balancing_spreads_concurrent_requests_over_the_route(tmp_path: Path) -> None:
    rig = Rig(tmp_path)

    async def held(request: httpx2.Request) -> httpx2.Response:
        await asyncio.sleep(0.2)
        return await rig.up["small"].handle(request)

    rig.client = tpx.sdk.async_anthropic_client(
        settings=rig.settings,
        upstream={
            "small": httpx2.MockTransport(held),
            "big": rig.up["big"].transport(),
            "cloud": rig.up["cloud"].transport(),
        },
        max_retries=0,
    )
    await asyncio.gather(*(rig.ask(f"t{n}", model="claude-haiku-4-5") for n in range(4)))
    # the small one holds its first request: the next ones go to the least loaded
    assert rig.seen()["small"] >= 1
    assert rig.seen()["big"] >= 1


@pytest.mark.anyio
async def test_a_probe_ends_a_cooldown_when_the_upstream_answers(tmp_path: Path) -> None:
    """Recovery probes: ``GET /v1/models`` (no generation); an answer below 500 ends the
    cooldown, a refused connection keeps it; the timer probes a cooling upstream by itself."""
    rig = Rig(tmp_path)
    models: list[str] = []

    async def answering(request: httpx2.Request) -> httpx2.Response:
        models.append(request.url.path)
        return httpx2.Response(200, json={"data": []})

    async def refusing(request: httpx2.Request) -> httpx2.Response:
        raise httpx2.ConnectError("connection refused", request=request)

    routing = rig.settings.routing
    assert routing is not None
    options = attrs.evolve(routing.options, probe_interval=0.05, cooldown=60.0)
    settings = attrs.evolve(rig.settings, routing=attrs.evolve(routing, options=options))
    transports = {
        "small": httpx2.MockTransport(refusing),
        "big": httpx2.MockTransport(answering),
        "cloud": httpx2.MockTransport(answering),
    }
    pool = UpstreamPool(settings, transport=transports)
    try:
        d = pool.dispatcher
        now = time.monotonic()
        d.failed("small", Failure("connect"), now)
        d.failed("big", Failure("status", 503), now)
        assert await pool.probe("small") is False
        assert not d.available("small", time.monotonic())
        assert await pool.probe("big") is True
        assert d.available("big", time.monotonic())
        assert models == ["/v1/models"]
        d.failed("cloud", Failure("status", 503), time.monotonic())
        pool._start_probes()
        with anyio.fail_after(10):  # the timer's probe brings it back
            while not d.available("cloud", time.monotonic()):
                await asyncio.sleep(0.02)
        assert models == ["/v1/models", "/v1/models"]
    finally:
        await pool.aclose()


@pytest.mark.anyio
async def test_the_monitor_accepts_a_failover(tmp_path: Path) -> None:
    """``--monitor``: a turn framed again for the fallback takes the spec steps of one turn
    (the failover happens before any reply): no violation."""
    rig = Rig(tmp_path, monitor=True)
    rig.up["big"].script = ["connect"]
    reply = await rig.ask("list the files", stream=True)
    assert reply.stop_reason == "tool_use"
    metrics = (await rig.client._client.get("http://tpx.in-process/metrics")).text
    assert "tpx_gateway_monitor_violations_total{" not in metrics
    (steps,) = [
        float(line.split()[-1])
        for line in metrics.splitlines()
        if line.startswith("tpx_gateway_monitor_steps_total")
    ]
    assert steps >= 3  # CallerSend, ProviderReply, Deliver: checked


def test_the_sync_in_process_client_refuses_upstreams(tmp_path: Path) -> None:
    rig = Rig(tmp_path)
    with pytest.raises(ConfigurationError, match="async_anthropic_client"):
        tpx.sdk.anthropic_client(settings=rig.settings)


@pytest.mark.anyio
async def test_a_client_gone_while_pinging_ends_the_attempt_that_answered_meanwhile(
    tmp_path: Path,
) -> None:
    """The upstream answers after a ping went out and the client left before taking it: the
    response is closed and its attempt no longer counts as in flight."""
    rig = Rig(tmp_path)
    answered = asyncio.Event()

    async def late(request: httpx2.Request) -> httpx2.Response:
        await asyncio.sleep(0.05)
        response = await rig.up["big"].handle(request)
        answered.set()
        return response

    pool = UpstreamPool(rig.settings, transport={"big": httpx2.MockTransport(late)})
    gateway = Gateway(rig.settings)
    body = {
        "model": "claude-opus-4-8",
        "max_tokens": 64,
        "stream": True,
        "messages": [{"role": "user", "content": "list the files"}],
    }
    request = Request("POST", "/v1/messages", "", {}, orjson.dumps(body))
    turn = gateway.handle(request)
    assert isinstance(turn, Turn)
    items = run_turn(turn, pool, ping_interval=0.01)
    try:
        assert await items.__anext__() == PING
        with anyio.fail_after(10):
            await answered.wait()
        await asyncio.sleep(0.05)  # the opening task finishes while the ping is held
        assert pool.dispatcher.health["big"].in_flight == 1
        await items.aclose()  # type: ignore[attr-defined]
        turn.abandon()
        assert pool.dispatcher.health["big"].in_flight == 0
    finally:
        await pool.aclose()
