"""Seeded gateway bugs (:mod:`conformance.gateway_bugs`) against a live ``tpx serve
--monitor`` on loopback: each is stopped at its first illegal step with its property named,
the caller gets a Messages-shaped error instead of the step's output, the upstream never
sees the illegal request, and the violation is logged and counted in ``/metrics``. Each stop
is checked twice: with the monitor's compact step and with the reference mirror's
(:class:`tests.oracle.model.gateway.reference_monitor.ReferenceMonitor`): the same stop."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import orjson
import pytest

from conformance.gateway_bugs import GATEWAY_BUGS, GatewayBug
from tests.gateway.conftest import GATEWAY_KEY, make_settings, serving
from tests.gateway.fakes import FakeUpstream
from tests.oracle.model.gateway.reference_monitor import ReferenceMonitor
from tpx.cli import main
from tpx.gateway.asgi import GatewayApp, create_app
from tpx.oracle.model.gateway.monitor import GatewayMonitor

AUTH = {"x-api-key": GATEWAY_KEY}
SPEC = Path(__file__).parents[1] / "spec" / "TpxGateway.tla"
BUG = {bug.name: bug for bug in GATEWAY_BUGS}


@pytest.fixture(params=["compact", "reference"])
def mirror(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """The monitor's step: its compact one (shipped) or the reference mirror's."""
    if request.param == "reference":
        monkeypatch.setattr("tpx.gateway.monitoring.GatewayMonitor", ReferenceMonitor)
    return str(request.param)


class HeldUpstream:
    """The fake upstream, holding any request whose body holds ``HOLD`` until released
    (so one conversation is in flight while another's request arrives)."""

    def __init__(self, fake: FakeUpstream) -> None:
        self.fake = fake
        self.waiting = threading.Event()
        self._release: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    async def handle(self, request: httpx2.Request) -> httpx2.Response:
        if b"HOLD" in request.content:
            self._loop = asyncio.get_running_loop()
            self._release = asyncio.Event()
            self.waiting.set()
            await self._release.wait()
        return self.fake.handle(request)

    def release(self) -> None:
        assert self._loop is not None
        assert self._release is not None
        self._loop.call_soon_threadsafe(self._release.set)


@contextlib.contextmanager
def live(
    provider: str, trace_dir: Path
) -> Iterator[tuple[httpx2.Client, FakeUpstream, HeldUpstream, GatewayApp]]:
    fake = FakeUpstream(provider)
    held = HeldUpstream(fake)
    settings = make_settings(provider, gateway_key=GATEWAY_KEY, monitor=True, trace_dir=trace_dir)
    app = create_app(settings, transport=httpx2.MockTransport(held.handle))
    with serving(app) as url, httpx2.Client(base_url=url, timeout=30) as client:
        yield client, fake, held, app


def body(messages: list[Any]) -> dict[str, Any]:
    return {"model": "claude-x", "max_tokens": 64, "messages": messages}


def tool_turn(client: httpx2.Client, tag: str) -> tuple[list[Any], list[str]]:
    history: list[Any] = [{"role": "user", "content": tag}]
    first = client.post("/v1/messages", headers=AUTH, json=body(history))
    assert first.status_code == 200, first.text
    content = first.json()["content"]
    history.append({"role": "assistant", "content": content})
    return history, [b["id"] for b in content if b["type"] == "tool_use"]


def results(ids: list[str], text: str = "x") -> dict[str, Any]:
    return {
        "role": "user",
        "content": [{"type": "tool_result", "tool_use_id": i, "content": text} for i in ids],
    }


def uses(app: GatewayApp, mirror: str) -> None:
    assert app.gateway.monitor is not None
    checker = type(app.gateway.monitor.monitor)
    assert checker is (ReferenceMonitor if mirror == "reference" else GatewayMonitor)


def stopped(reply: httpx2.Response, prop: str, metrics: str, log: str) -> None:
    """The caller got the fail-closed error, not the step's output; logged and counted."""
    assert reply.status_code == 500
    error = reply.json()
    assert error["type"] == "error"
    assert error["error"]["type"] == "api_error"
    assert f"({prop}," in error["error"]["message"]
    assert "content" not in error
    assert f'tpx_gateway_monitor_violations_total{{property="{prop}"}} 1.0' in metrics
    assert 'tpx_gateway_errors_total{code="MODEL_SPEC_VIOLATION"} 1.0' in metrics
    record = orjson.loads(log)
    assert record["monitor_violation"] == prop
    assert record["trace"][-1]["#action"] == record["action"]


@pytest.mark.parametrize("provider", ["TPX", "ANTHROPIC"])
def test_ids_leaking_between_conversations(
    provider: str, mirror: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with (
        caplog.at_level(logging.WARNING, logger="tpx.gateway"),
        BUG["ids_leak"].active(),
        live(provider, tmp_path) as (client, fake, held, app),
    ):
        uses(app, mirror)
        history_a, ids_a = tool_turn(client, "conversation A")
        history_b, ids_b = tool_turn(client, "conversation B")
        answers: list[httpx2.Response] = []
        a = threading.Thread(
            target=lambda: answers.append(
                client.post(
                    "/v1/messages", headers=AUTH, json=body([*history_a, results(ids_a, "HOLD")])
                )
            )
        )
        a.start()
        assert held.waiting.wait(30)  # A's results are in flight upstream
        seen = len(fake.seen)
        leaked = client.post("/v1/messages", headers=AUTH, json=body([*history_b, results(ids_b)]))
        assert len(fake.seen) == seen  # B's request never reached the upstream
        held.release()
        a.join(30)
        metrics = client.get("/metrics").text
    assert answers[0].status_code == 200  # A was not harmed
    (log,) = [r.getMessage() for r in caplog.records if "monitor_violation" in r.getMessage()]
    stopped(leaked, "NoCrossPairing", metrics, log)
    # B resumes with the client's own history (histories of live requests may share ids:
    # one conversation's requests at once); the leak is the step that takes A's ids
    assert orjson.loads(log)["action"] == "CallerAbort"


def test_a_worker_accepting_a_tool_use_id_it_never_issued(
    mirror: str,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    capsys: pytest.CaptureFixture[str],
) -> None:
    forged = "toolu_01NeverIssuedByThisGateway"
    with (
        caplog.at_level(logging.WARNING, logger="tpx.gateway"),
        live("ANTHROPIC", tmp_path) as (client, fake, _, app),
    ):
        uses(app, mirror)
        history, ids = tool_turn(client, "forger")
        messages = [*history, results([*ids, forged])]
        correct = client.post("/v1/messages", headers=AUTH, json=body(messages))
        assert correct.status_code == 400  # the real gateway refuses it
        with BUG["unissued_id"].active():
            seen = len(fake.seen)
            reply = client.post("/v1/messages", headers=AUTH, json=body(messages))
            assert len(fake.seen) == seen  # never sent upstream
        metrics = client.get("/metrics").text
    (log,) = [r.getMessage() for r in caplog.records if "monitor_violation" in r.getMessage()]
    stopped(reply, "PairingInv", metrics, log)
    assert orjson.loads(log)["action"] == "CallerSend"
    trace = tmp_path / f"{reply.headers['request-id']}.jsonl"
    capsys.readouterr()
    assert main(["check-trace", "--spec", str(SPEC), str(trace)]) == 1
    assert "PairingInv" in capsys.readouterr().out


def test_tpx_translation_refuses_a_never_issued_id_before_the_monitor(tmp_path: Path) -> None:
    """With TPX the translator's own validation refuses the forged id first (400)."""
    with live("TPX", tmp_path) as (client, fake, _, app), BUG["unissued_id"].active():
        history, ids = tool_turn(client, "forger")
        forged = [*history, results([*ids, "toolu_01NeverIssuedByThisGateway"])]
        reply = client.post("/v1/messages", headers=AUTH, json=body(forged))
        assert len(fake.seen) == 1
    assert reply.status_code == 400
    assert "answers no tool_use" in reply.json()["error"]["message"]
    assert app.gateway.monitor is not None
    assert app.gateway.monitor.monitor.violations == 0


@pytest.mark.parametrize("provider", ["TPX", "ANTHROPIC"])
def test_selection_drifting_between_workers(
    provider: str, mirror: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with (
        caplog.at_level(logging.WARNING, logger="tpx.gateway"),
        BUG["selection_drift"].active(),
        live(provider, tmp_path) as (client, fake, _, app),
    ):
        uses(app, mirror)
        tool_turn(client, "first worker")  # exchange 1: the boot selection
        reply = client.post(
            "/v1/messages", headers=AUTH, json=body([{"role": "user", "content": "drift"}])
        )
        assert len(fake.seen) == 1  # the drifted exchange never reached an upstream
        metrics = client.get("/metrics").text
    (log,) = [r.getMessage() for r in caplog.records if "monitor_violation" in r.getMessage()]
    prop = orjson.loads(log)["monitor_violation"]
    assert prop in ("SelectionInv", "SelectionStable")
    stopped(reply, prop, metrics, log)
    assert orjson.loads(log)["action"] == "Resume"


def test_a_retry_duplicating_a_tool_result_is_refused_by_the_exchange(tmp_path: Path) -> None:
    """Not a monitor catch: the exchange's own framing check refuses it first (400)."""
    bug: GatewayBug = BUG["retry_dup"]
    with live("TPX", tmp_path) as (client, fake, _, app):
        history, ids = tool_turn(client, "dup")
        with bug.active():
            reply = client.post("/v1/messages", headers=AUTH, json=body([*history, results(ids)]))
        assert len(fake.seen) == 1
    assert reply.status_code == 400
    error = reply.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert "3 tool results on the wire for 2 tool_result blocks" in error["message"]
    assert "nothing was sent" in error["message"]
    assert app.gateway.monitor is not None
    assert app.gateway.monitor.monitor.violations == 0


@pytest.mark.parametrize("provider", ["TPX", "ANTHROPIC"])
def test_a_retry_losing_its_obligations(
    provider: str,
    mirror: str,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The byte-identical re-send reaches the exchange without its tool round; the monitor
    resumes it with the obligations read from the bytes the client sent, so the exchange's
    CallerSend (no tool_results for them on the wire) is stopped."""
    with (
        caplog.at_level(logging.WARNING, logger="tpx.gateway"),
        BUG["retry_loses_obligation"].active(),
        live(provider, tmp_path) as (client, fake, _, app),
    ):
        uses(app, mirror)
        history, ids = tool_turn(client, "retried")
        assert ids
        resend = body([*history, results(ids)])
        first = client.post("/v1/messages", headers=AUTH, json=resend)
        assert first.status_code == 200, first.text  # the first send is untouched
        seen = len(fake.seen)
        reply = client.post("/v1/messages", headers=AUTH, json=resend)  # the retry
        assert len(fake.seen) == seen  # the lossy request never reached the upstream
        metrics = client.get("/metrics").text
    (log,) = [r.getMessage() for r in caplog.records if "monitor_violation" in r.getMessage()]
    prop = orjson.loads(log)["monitor_violation"]
    stopped(reply, prop, metrics, log)
    record = orjson.loads(log)
    assert (prop, record["action"]) == (BUG["retry_loses_obligation"].property, "CallerSend")
    resumed = record["trace"][-2]
    assert resumed["#action"] == "Resume"
    assert len(resumed["pending"]) == len(ids)  # the client's obligations
    assert record["trace"][-1]["reqIds"] == []  # the exchange answers none of them
    trace = tmp_path / f"{reply.headers['request-id']}.jsonl"
    capsys.readouterr()
    assert main(["check-trace", "--spec", str(SPEC), str(trace)]) == 1


def test_a_correct_retry_passes_the_monitor(tmp_path: Path) -> None:
    """Without the bug the same re-send is a fresh turn the monitor allows."""
    with live("TPX", tmp_path) as (client, fake, _, app):
        history, ids = tool_turn(client, "retried")
        resend = body([*history, results(ids)])
        replies = [client.post("/v1/messages", headers=AUTH, json=resend) for _ in range(2)]
        assert len(fake.seen) == 3
    assert [r.status_code for r in replies] == [200, 200]
    assert app.gateway.monitor is not None
    assert app.gateway.monitor.monitor.violations == 0
