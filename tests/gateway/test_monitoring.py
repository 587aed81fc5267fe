"""``tpx serve --monitor`` on loopback: correct traffic passes the live monitor, every
conversation's monitor trace passes ``tpx check-trace --spec spec/TpxGateway.tla``."""

from __future__ import annotations

import contextlib
from collections.abc import Hashable, Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest

from tpx.cli import main
from tpx.gateway.asgi import GatewayApp, create_app
from tpx.oracle.model.gateway.monitor import GatewayMonitor, Violation

from .conftest import GATEWAY_KEY, make_settings, serving
from .fakes import FakeUpstream

AUTH = {"x-api-key": GATEWAY_KEY}
SPEC = Path(__file__).parents[2] / "spec" / "TpxGateway.tla"


@contextlib.contextmanager
def monitored(
    provider: str, trace_dir: Path | None = None, fake: FakeUpstream | None = None
) -> Iterator[tuple[httpx2.Client, FakeUpstream, GatewayApp]]:
    fake = fake or FakeUpstream(provider)
    settings = make_settings(provider, gateway_key=GATEWAY_KEY, monitor=True, trace_dir=trace_dir)
    app = create_app(settings, transport=fake.transport())
    with serving(app) as url, httpx2.Client(base_url=url, timeout=30) as client:
        yield client, fake, app


def body(messages: list[Any], stream: bool = False) -> dict[str, Any]:
    return {"model": "claude-x", "max_tokens": 64, "messages": messages, "stream": stream}


def post(client: httpx2.Client, messages: list[Any], stream: bool) -> dict[str, Any]:
    """One turn; the assistant message (streamed: reassembled by the anthropic-style
    events' content blocks)."""
    if not stream:
        reply = client.post("/v1/messages", headers=AUTH, json=body(messages))
        assert reply.status_code == 200, reply.text
        result: dict[str, Any] = reply.json()
        return result
    import orjson

    reply = client.post("/v1/messages", headers=AUTH, json=body(messages, stream=True))
    assert reply.status_code == 200, reply.text
    blocks: list[dict[str, Any]] = []
    for line in reply.text.splitlines():
        if line.startswith("data: "):
            event = orjson.loads(line[6:])
            assert event["type"] != "error", event
            if event["type"] == "content_block_start":
                blocks.append(event["content_block"])
    return {"role": "assistant", "content": blocks}


def results(ids: list[str]) -> dict[str, Any]:
    return {
        "role": "user",
        "content": [{"type": "tool_result", "tool_use_id": i, "content": "x"} for i in ids],
    }


def tool_ids(message: dict[str, Any]) -> list[str]:
    return [b["id"] for b in message["content"] if b["type"] == "tool_use"]


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
@pytest.mark.parametrize("provider", ["TPX", "ANTHROPIC"])
def test_correct_traffic_passes_and_traces_check(
    provider: str, stream: bool, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with monitored(provider, tmp_path) as (client, fake, app):
        history: list[Any] = [{"role": "user", "content": f"monitored {provider} {stream}"}]
        first = post(client, history, stream)
        ids = tool_ids(first)
        assert len(ids) == 2
        history += [{"role": "assistant", "content": first["content"]}]
        unanswered = [*history, {"role": "user", "content": "no results"}]
        refused = client.post("/v1/messages", headers=AUTH, json=body(unanswered))
        assert refused.status_code == 400  # CallerAbort (obligations held), nothing sent
        stray = [{"role": "user", "content": [results(["toolu_stray"])["content"][0]]}]
        refused = client.post("/v1/messages", headers=AUTH, json=body(stray))
        assert refused.status_code == 400  # refused with nothing pending: CallerAbort too
        history.append(results(ids))
        last = post(client, history, stream)
        assert tool_ids(last) == []
        metrics = client.get("/metrics").text
    monitor = app.gateway.monitor
    assert monitor is not None
    assert monitor.monitor.violations == 0
    assert monitor.monitor.conversations() == 0  # every exchange closed
    assert "tpx_gateway_monitor_violations_total{" not in metrics  # none, by any property
    # Resume, CallerSend, ProviderReply, Deliver twice; Resume, CallerAbort twice
    assert "tpx_gateway_monitor_steps_total 12.0" in metrics
    assert len(fake.seen) == 2
    traces = sorted(tmp_path.glob("*.jsonl"))
    assert len(traces) == 4
    capsys.readouterr()
    assert main(["check-trace", "--spec", str(SPEC), *map(str, traces)]) == 0
    out = capsys.readouterr().out
    assert out.count("ACCEPTED (4 states)") == 2
    assert out.count("ACCEPTED (2 states)") == 2  # the refusals: Resume, CallerAbort


@pytest.mark.parametrize("provider", ["TPX", "ANTHROPIC"])
def test_a_correct_request_refused_is_stopped(
    provider: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A seeded bug: the exchange's pairing check refuses every turn carrying tool_results.
    The client's request answers each obligation once (read from its bytes), so the
    refusal is RefusesOnlyWrong: the monitor stops it (500), it is counted, and nothing
    reaches the upstream."""
    import tpx.transport.exchange

    with monitored(provider, tmp_path) as (client, fake, _):
        history: list[Any] = [{"role": "user", "content": f"refused {provider}"}]
        first = post(client, history, False)
        history += [{"role": "assistant", "content": first["content"]}, results(tool_ids(first))]

        def refusing(answered: Any, pending: frozenset[str]) -> str | None:
            return "refused by a seeded bug" if answered else None

        monkeypatch.setattr(tpx.transport.exchange, "pairing_problem", refusing)
        stopped = client.post("/v1/messages", headers=AUTH, json=body(history))
        metrics = client.get("/metrics").text
    assert stopped.status_code == 500
    assert stopped.json()["error"]["type"] == "api_error"
    assert 'tpx_gateway_monitor_violations_total{property="RefusesOnlyWrong"} 1.0' in metrics
    assert len(fake.seen) == 1


@pytest.mark.parametrize("provider", ["TPX", "ANTHROPIC"])
def test_a_529_then_the_same_turn_again(provider: str, tmp_path: Path) -> None:
    with monitored(provider, tmp_path) as (client, fake, app):
        history: list[Any] = [{"role": "user", "content": "FAIL529 monitored"}]
        failed = client.post("/v1/messages", headers=AUTH, json=body(history))
        assert failed.status_code == 529
        first = post(client, history, False)
        assert len(tool_ids(first)) == 2
    assert fake.failures == 1
    assert app.gateway.monitor is not None
    assert app.gateway.monitor.monitor.violations == 0
    assert main(["check-trace", "--spec", str(SPEC), *map(str, tmp_path.glob("*"))]) == 0


def stop_at(monkeypatch: pytest.MonkeyPatch, stopped_action: str) -> None:
    """Make the live monitor report a violation at *stopped_action* (the fail-closed
    plumbing on every path, whatever the bug behind it)."""
    real = GatewayMonitor.observe_exchange

    def strict(
        self: GatewayMonitor, key: Hashable, action: str, snapshot: Any, **held: Any
    ) -> Violation | None:
        if action == stopped_action:
            return Violation(key, 9, action, "PairingInv", "seeded", trace=())
        return real(self, key, action, snapshot, **held)

    monkeypatch.setattr(GatewayMonitor, "observe_exchange", strict)


@pytest.mark.parametrize("action", ["ProviderReply", "Deliver"])
@pytest.mark.parametrize("provider", ["TPX", "ANTHROPIC"])
def test_a_stopped_step_never_reaches_the_caller(
    provider: str, action: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    stop_at(monkeypatch, action)
    first = [{"role": "user", "content": "stopped"}]
    with monitored(provider) as (client, _, app):
        plain = client.post("/v1/messages", headers=AUTH, json=body(first))
        streamed = client.post("/v1/messages", headers=AUTH, json=body(first, stream=True))
        metrics = client.get("/metrics").text
    assert plain.status_code == 500
    assert plain.json()["error"]["type"] == "api_error"
    assert "(PairingInv," in plain.json()["error"]["message"]
    assert "tool_use" not in plain.text
    # streamed: the deltas went out, but the message never completes: an error event
    # takes message_stop's place (an SDK raises instead of returning the message)
    assert streamed.status_code == 200
    kinds = [ln[7:] for ln in streamed.text.splitlines() if ln.startswith("event: ")]
    assert kinds[-1] == "error"
    assert "message_stop" not in kinds
    assert "(PairingInv," in streamed.text
    assert 'tpx_gateway_monitor_violations_total{property="PairingInv"} 2.0' in metrics
    assert app.gateway.monitor is not None
    assert app.gateway.monitor.monitor.conversations() == 0


@pytest.mark.parametrize("provider", ["TPX", "ANTHROPIC"])
def test_the_next_turn_may_come_before_the_upstream_body_ends(provider: str) -> None:
    """A client that got ``message_stop`` sends its next turn (carrying the ids) while the
    upstream's body has not ended yet (its last bytes still on the way): the finished
    exchange's conversation is over already, so the monitor sees no cross-pairing."""
    with monitored(provider) as (client, fake, app):
        history: list[Any] = [{"role": "user", "content": f"TAIL {provider}"}]
        first = post(client, history, stream=True)  # message_stop in hand, tail held back
        ids = tool_ids(first)
        assert len(ids) == 2
        history += [{"role": "assistant", "content": first["content"]}, results(ids)]
        last = post(client, history, stream=False)
        fake.tail.set()
        assert tool_ids(last) == []
        monitor = app.gateway.monitor
        assert monitor is not None
        assert monitor.monitor.violations == 0
