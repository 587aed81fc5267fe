"""``tpx serve --monitor`` over the pool (tpx.gateway.pool, tpx.gateway.reports): each turn's
upstream steps as the monitor sees them (attempt, accept, resend, failover, first byte,
recover), and the seeded pool bugs (conformance.pool_bugs), each stopped at its first wrong
step before it reaches an upstream, each scenario passing without its bug."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

import anthropic
import attrs
import orjson
import pytest

import tpx.sdk
from conformance.pool_bugs import POOL_BUGS, PoolBug
from tpx.gateway.monitoring import LiveMonitor

from .test_pool import Rig

BUG = {bug.name: bug for bug in POOL_BUGS}


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class Watched:
    """A monitored rig and the attempt steps of every request, as the monitor took them."""

    def __init__(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, **config: Any) -> None:
        self.traces: list[list[str]] = []
        close = LiveMonitor.close

        def closing(monitor: LiveMonitor, key: str) -> None:
            self.traces.append([action for action, _ in monitor.attempts.trace(key)])
            close(monitor, key)

        monkeypatch.setattr(LiveMonitor, "close", closing)
        cooldown = config.pop("cooldown", None)
        self.rig = Rig(tmp_path, monitor=True, **config)
        if cooldown is not None:
            routing = self.rig.settings.routing
            assert routing is not None
            options = attrs.evolve(routing.options, cooldown=cooldown)
            self.rig.settings = attrs.evolve(
                self.rig.settings, routing=attrs.evolve(routing, options=options)
            )
            self.rig.client = tpx.sdk.async_anthropic_client(
                settings=self.rig.settings,
                upstream={n: u.transport() for n, u in self.rig.up.items()},
                max_retries=0,
            )

    async def ask(self, *, stream: bool = True) -> tuple[int, str]:
        """One turn to the main route: its status and (a failure) the error's message."""
        try:
            reply = await self.rig.ask("list the files", stream=stream)
        except anthropic.APIStatusError as failed:
            return failed.status_code, str(failed.body)
        except anthropic.APIError as failed:  # an error event in a stream that began
            return 200, str(failed.body)
        assert reply.stop_reason == "tool_use"
        return 200, ""

    async def violations(self) -> str:
        metrics = await self.rig.client._client.get("http://tpx.in-process/metrics")
        return "\n".join(
            line
            for line in metrics.text.splitlines()
            if line.startswith("tpx_gateway_monitor_violations_total{")
        )


# -- the steps of legal turns ------------------------------------------------------------


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("script", "stream", "steps", "seen"),
    [
        ([], True, ["NewRequest", "UpstreamAccept", "FirstByte"], (1, 0)),
        ([], False, ["NewRequest", "UpstreamAccept"], (1, 0)),
        (["connect"], True, ["NewRequest", "Failover", "UpstreamAccept", "FirstByte"], (1, 1)),
        ([("status", 503, None)], False, ["NewRequest", "Failover", "UpstreamAccept"], (1, 1)),
        (
            [("status", 529, 0.01)],  # waited for, then the same upstream: nothing was taken
            True,
            ["NewRequest", "Resend", "UpstreamAccept", "FirstByte"],
            (2, 0),
        ),
        (["reset"], False, ["NewRequest", "UpstreamAccept"], (1, 0)),  # written: ends there
        (["hang"], True, ["NewRequest", "UpstreamAccept"], (1, 0)),  # timeout: ends there
        (["break"], True, ["NewRequest", "UpstreamAccept", "FirstByte"], (1, 0)),
    ],
    ids=["stream", "plain", "connect", "503", "retry-after", "reset", "timeout", "broken"],
)
async def test_each_attempt_is_reported_and_legal(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    script: list[Any],
    stream: bool,
    steps: list[str],
    seen: tuple[int, int],
) -> None:
    watched = Watched(tmp_path, monkeypatch, first_byte_timeout=0.2)
    watched.rig.up["big"].script = list(script)
    await watched.ask(stream=stream)
    assert watched.traces == [steps]
    assert (watched.rig.seen()["big"], watched.rig.seen()["cloud"]) == seen
    assert await watched.violations() == ""


@pytest.mark.anyio
async def test_a_broken_stream_cools_its_upstream_down(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    watched = Watched(tmp_path, monkeypatch)
    watched.rig.up["big"].script = ["break"]
    status, message = await watched.ask()
    assert (status, "connection reset" in message or "network" in message.lower()) == (200, True)
    await watched.ask()  # big cools down: the next turn goes to the cloud
    assert watched.rig.seen() == {"small": 0, "big": 1, "cloud": 1}
    assert await watched.violations() == ""


@pytest.mark.anyio
async def test_a_cooldown_that_ends_is_a_recovery(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The failed upstream is healthy again for the monitor once its cooldown ran out."""
    watched = Watched(tmp_path, monkeypatch, cooldown=0.05)
    watched.rig.up["big"].script = [("status", 503, None)]
    await watched.ask()
    await asyncio.sleep(0.2)  # past the cooldown
    await watched.ask()
    assert watched.rig.seen() == {"small": 0, "big": 2, "cloud": 1}
    assert watched.traces[-1] == ["NewRequest", "UpstreamAccept", "FirstByte"]
    assert await watched.violations() == ""


@pytest.mark.anyio
async def test_a_request_tried_on_a_cooling_upstream_is_its_probe(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Both upstreams of the route fail: the next request goes to the one whose cooldown
    ends first anyway, which the monitor takes as its recovery."""
    watched = Watched(tmp_path, monkeypatch)
    watched.rig.up["big"].script = [("status", 503, None)]
    watched.rig.up["cloud"].script = [("status", 503, None)]
    status, _ = await watched.ask()
    assert status == 503
    assert await watched.ask() == (200, "")
    assert await watched.violations() == ""


@pytest.mark.anyio
async def test_a_probe_that_passes_is_a_recovery(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    watched = Watched(tmp_path, monkeypatch)
    watched.rig.up["big"].script = ["connect"]
    await watched.ask()
    monitor = watched.rig.client._client._transport.gateway.monitor  # type: ignore[attr-defined]
    assert monitor.attempts.health["big"] is False
    pool = watched.rig.client._client._transport.upstream  # type: ignore[attr-defined]
    assert await pool.probe("big") is True
    assert monitor.attempts.health["big"] is True
    await watched.ask()
    assert watched.rig.seen()["big"] == 2
    assert await watched.violations() == ""


@pytest.mark.anyio
async def test_with_failover_on_timeout_the_monitor_stops_the_failover(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The user took a possible second generation; the monitor checks the spec, which
    allows one: the failover is stopped (OneGeneration) before the fallback is asked."""
    watched = Watched(tmp_path, monkeypatch, first_byte_timeout=0.2, failover_on_timeout=True)
    watched.rig.up["big"].script = ["hang"]
    status, message = await watched.ask()
    assert status == 500
    assert "(OneGeneration, Failover)" in message
    assert watched.rig.seen()["cloud"] == 0
    assert 'property="OneGeneration"' in await watched.violations()


# -- seeded bugs ----------------------------------------------------------------------------

#: each bug's scenario: the config, what big and cloud do, the turns (stream or not)
SCENARIOS: dict[str, tuple[dict[str, Any], list[Any], list[bool]]] = {
    "failover_after_the_first_byte": ({}, ["break"], [True]),
    "resent_after_sending": ({}, ["reset"], [False]),
    "timeout_fails_over": ({"first_byte_timeout": 0.2}, ["hang"], [True]),
    "resent_to_the_same": ({}, ["reset"], [False]),
    "lost_cooldown": ({}, [("status", 503, None)], [True, True]),
}


async def _scenario(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> tuple[Watched, list[tuple[int, str]]]:
    config, script, turns = SCENARIOS[name]
    watched = Watched(tmp_path, monkeypatch, **config)
    watched.rig.up["big"].script = list(script)
    return watched, [await watched.ask(stream=stream) for stream in turns]


def _stops(caplog: pytest.LogCaptureFixture) -> list[dict[str, Any]]:
    return [
        orjson.loads(r.getMessage())
        for r in caplog.records
        if r.name == "tpx.gateway" and "monitor_violation" in r.getMessage()
    ]


@pytest.mark.anyio
@pytest.mark.parametrize("name", sorted(SCENARIOS))
async def test_without_the_bug_the_scenario_passes(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="tpx.gateway")
    watched, _ = await _scenario(name, tmp_path, monkeypatch)
    assert await watched.violations() == ""
    assert _stops(caplog) == []
    assert watched.rig.seen()["big"] == 1  # no request was sent twice anywhere
    assert watched.rig.seen()["cloud"] == (2 if name == "lost_cooldown" else 0)


@pytest.mark.anyio
@pytest.mark.parametrize("name", sorted(SCENARIOS))
async def test_the_monitor_stops_each_seeded_bug_at_its_first_wrong_step(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    bug: PoolBug = BUG[name]
    caplog.set_level(logging.WARNING, logger="tpx.gateway")
    with bug.active():
        watched, replies = await _scenario(name, tmp_path, monkeypatch)
    (stop,) = _stops(caplog)
    assert (stop["monitor_violation"], stop["action"]) == (bug.property, bug.action)
    assert stop["trace"][-1]["#action"] == bug.action
    assert f'property="{bug.property}"' in await watched.violations()
    status, message = replies[-1]
    assert f"({bug.property}, {bug.action})" in message  # the client got the monitor's error
    assert status in (200, 500)  # 200: an error event after the stream began
    # the stopped step reached no upstream: one request each, never a second generation
    expected = {"lost_cooldown": (1, 1)}.get(name, (1, 0))
    assert (watched.rig.seen()["big"], watched.rig.seen()["cloud"]) == expected
