"""Conformance through the gateway core (:mod:`conformance.gateway_core`): whole-history tool
loops, every upstream failure and its retry, caller aborts, requests refused before the
wire, forged ids, a caller closing its stream early, and the Messages API surface the
gateway answers itself. In-process (no socket): this is the judge ``make mutate`` runs on
the gateway core's mutants (:mod:`conformance.mutate.judge`)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import httpx2
import orjson
import pytest

from conformance.abstraction import sse_events
from conformance.bugs import BUGS
from conformance.fakes import (
    FAILURE_KINDS,
    KEY,
    MID_STREAM_FAILURE_KINDS,
    TOKEN,
    FailureKind,
    FakeProvider,
)
from conformance.gateway_bugs import GATEWAY_BUGS
from conformance.gateway_core import AUTH, GATEWAY_KEY, SECRET, GatewayRig, log_records
from tpx.cli import main
from tpx.errors import redact, secret_forms
from tpx.gateway import core
from tpx.gateway.context.counting import estimate_tokens
from tpx.gateway.drive import run_turn_sync
from tpx.gateway.settings import Credential, ModelRoute
from tpx.gateway.turn import Turn
from tpx.gateway.upstream import SyncUpstream
from tpx.gateway.wire import Request, Response
from tpx.sdk import GatewayTransport
from tpx.transport.exchange import Exchange, Provider
from tpx.transport.translate.ids import sign_caller_id, verify_signed_id

PROVIDERS = [Provider.TPX, Provider.ANTHROPIC]
SPEC = Path(__file__).parents[1] / "spec" / "TpxGateway.tla"


def _ok(result: Any) -> None:
    assert result.problems == (), result


@pytest.mark.parametrize("streaming", [False, True], ids=["plain", "streamed"])
@pytest.mark.parametrize("provider", PROVIDERS, ids=lambda p: p.name)
@pytest.mark.parametrize("seed", [0, 1, 2, 3, 4, 5])
def test_tool_loops_through_the_gateway(provider: Provider, streaming: bool, seed: int) -> None:
    """Three tool rounds and more, the whole history every turn (each foreign-id style and
    stream layout by seed), a CallerAbort between them, then a turn with no tool call."""
    chosen: dict[str, Any] = {"model": "upstream-model"} if seed >= 3 else {}
    with GatewayRig(provider, seed=seed, streaming=streaming, **chosen) as rig:
        for ids in (("t1", "t2"), ("t2",), ("t1", "t2", "t3"), ("t3", "t1")):
            _ok(rig.turn("reply", ids=ids))
        style = ("partial", "unknown", "duplicate", "silent")[seed % 4]
        abort = rig.turn("abort", style=style)  # type: ignore[arg-type]
        _ok(abort)
        assert abort.status == 400
        _ok(rig.turn("reply", ids=("t1",)))
        _ok(rig.turn("reply", ids=("t2", "t3")))
        _ok(rig.turn("reply", ids=()))
        assert rig.caller.obligations == []
        assert len(rig.caller.rounds) >= 5  # the history held five tool rounds and more
        assert rig.gateway.bodies.hits > 0  # turns read through a kept tail (tpx.gateway.bodies)


@pytest.mark.parametrize("streaming", [False, True], ids=["plain", "streamed"])
@pytest.mark.parametrize("provider", PROVIDERS, ids=lambda p: p.name)
def test_upstream_failures_then_the_same_request_again(provider: Provider, streaming: bool) -> None:
    kinds: tuple[FailureKind, ...] = FAILURE_KINDS + (
        tuple(k for k in MID_STREAM_FAILURE_KINDS if k != "caller_close") if streaming else ()
    )
    for i, kind in enumerate(kinds):
        with GatewayRig(provider, seed=i, streaming=streaming) as rig:
            _ok(rig.turn("reply", ids=("t1", "t2")))
            failed = rig.turn("fail", failure=kind)
            _ok(failed)
            _ok(rig.turn("reply", ids=("t2",)))
            _ok(rig.turn("fail", failure=kind, retry=False))
            _ok(rig.turn("reply", ids=("t1", "t3")))


@pytest.mark.parametrize("provider", PROVIDERS, ids=lambda p: p.name)
def test_a_caller_closing_its_stream_early(provider: Provider) -> None:
    """The caller stops reading after the first event: ProviderFail (client_gone), nothing
    left behind; the same request again is a fresh turn that succeeds."""
    with GatewayRig(provider, seed=1, streaming=True) as rig:
        _ok(rig.turn("reply", ids=("t1", "t2")))
        req = {**rig.caller.request(), "stream": True}
        rig.fake.plan_reply(("t1",))
        with (
            log_records() as lines,
            rig.client.stream(
                "POST", "/v1/messages", content=orjson.dumps(req), headers=AUTH
            ) as response,
        ):
            assert response.status_code == 200
            first = next(response.iter_bytes())
            assert first.startswith(b"event: message_start")
        (line,) = lines
        assert line["actions"] == ["CallerSend", "ProviderFail"]
        assert line["client_gone"] is True
        assert line["error"] == "MODEL_NETWORK"
        assert line["outcome"] == "err"
        assert rig.violations() == 0
        rig.caller.accepted(req)
        _ok(rig.turn("reply", ids=("t3",)))


def _post(rig: GatewayRig, body: Any, headers: dict[str, str] | None = None) -> Any:
    content = body if isinstance(body, bytes) else orjson.dumps(body)
    return rig.client.post("/v1/messages", content=content, headers=headers or AUTH)


BASE: dict[str, Any] = {
    "model": "claude-fake",
    "max_tokens": 64,
    "messages": [{"role": "user", "content": "hi"}],
}

#: Requests the Messages API refuses before anything happens: (body, words of the message).
MALFORMED: list[tuple[Any, str]] = [
    (b"{not json", "not valid JSON"),
    ([1, 2], "not a JSON object"),
    ({**BASE, "model": None}, "model: Field required"),
    ({**BASE, "model": 7}, "model: Input should be a string"),
    ({k: v for k, v in BASE.items() if k != "max_tokens"}, "max_tokens: Field required"),
    ({**BASE, "max_tokens": 0}, "max_tokens: Input should be a valid integer"),
    ({**BASE, "max_tokens": True}, "max_tokens: Input should be a valid integer"),
    ({**BASE, "stream": "yes"}, "stream: Input should be a valid boolean"),
    ({k: v for k, v in BASE.items() if k != "messages"}, "messages: Field required"),
    ({**BASE, "messages": {"role": "user"}}, "messages: Input should be a valid list"),
    ({**BASE, "messages": ["hi"]}, "messages.0: Input should be a valid dictionary"),
    ({**BASE, "messages": [{"role": "bot", "content": "x"}]}, "messages.0.role"),
    ({**BASE, "messages": [{"role": "user", "content": 5}]}, "messages.0.content: Input"),
    ({**BASE, "messages": [{"role": "user", "content": ["x"]}]}, "messages.0.content.0:"),
    (
        {**BASE, "messages": [{"role": "assistant", "content": [{"type": "tool_use", "id": 3}]}]},
        "messages.0.content.0.id: Input should be a string",
    ),
    (
        {
            **BASE,
            "messages": [
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": None}]}
            ],
        },
        "messages.0.content.0.tool_use_id: Input should be a string",
    ),
]


@pytest.mark.parametrize("provider", PROVIDERS, ids=lambda p: p.name)
def test_malformed_requests_are_refused_before_the_wire(provider: Provider) -> None:
    with GatewayRig(provider) as rig:
        for body, words in MALFORMED:
            reply = _post(rig, body)
            assert reply.status_code == 400, (body, reply.text)
            error = reply.json()
            assert error["type"] == "error"
            assert error["error"]["type"] == "invalid_request_error"
            assert words in error["error"]["message"], (words, error)
            assert error["request_id"] == reply.headers["request-id"]
            assert reply.headers["request-id"].startswith("req_")
        assert rig.fake.received == []
        metrics = rig.client.get("/metrics").text
        assert f'tpx_gateway_errors_total{{code="GATEWAY_400"}} {len(MALFORMED)}.0' in metrics


@pytest.mark.parametrize("provider", PROVIDERS, ids=lambda p: p.name)
def test_the_gateway_key_guards_the_api(provider: Provider) -> None:
    with GatewayRig(provider) as rig:
        for headers in ({}, {"x-api-key": "wrong"}, {"authorization": "Bearer wrong"}):
            reply = _post(rig, BASE, headers or {"x-other": "1"})
            assert reply.status_code == 401
            assert reply.json()["error"]["type"] == "authentication_error"
        rig.fake.plan_reply(())
        bearer = _post(rig, BASE, {"authorization": f"Bearer {GATEWAY_KEY}"})
        assert bearer.status_code == 200, bearer.text
        assert len(rig.fake.received) == 1
        assert rig.client.get("/v1/models", headers={"x-other": "1"}).status_code == 401
    with GatewayRig(provider, gateway_key=None) as open_rig:
        open_rig.fake.plan_reply(())
        assert _post(open_rig, BASE, {"x-other": "1"}).status_code == 200


@pytest.mark.parametrize("provider", PROVIDERS, ids=lambda p: p.name)
def test_methods_paths_and_sizes(provider: Provider) -> None:
    with GatewayRig(provider) as rig:
        c = rig.client
        assert c.get("/v1/messages", headers=AUTH).status_code == 405
        assert c.request("HEAD", "/v1/messages", headers=AUTH).status_code == 405
        assert c.request("DELETE", "/v1/models", headers=AUTH).status_code == 405
        assert c.post("/healthz").status_code == 405
        assert c.post("/").status_code == 405
        missing = c.get("/v1/nothing", headers=AUTH)
        assert missing.status_code == 404
        assert missing.json()["error"]["type"] == "not_found_error"
        assert c.get("/healthz").json() == {"status": "ok"}
        assert c.request("HEAD", "/healthz").status_code == 200
        assert c.get("/").json() == {"service": "tpx", "status": "ok"}
        head = c.request("HEAD", "/")
        assert head.content == b""
        assert head.headers["content-length"] == str(len(c.get("/").content))
        assert c.get("/healthz/").status_code == 200
        big = {**BASE, "metadata": {"pad": "x" * (rig.settings.limits.max_body_bytes + 1)}}
        too_big = _post(rig, big)
        assert too_big.status_code == 413
        assert too_big.json()["error"]["type"] == "request_too_large"
        assert rig.fake.received == []
        metrics = c.get("/metrics")
        assert metrics.headers["content-type"].startswith("text/plain")
        text = metrics.text
        assert 'tpx_gateway_requests_total{endpoint="messages",status="405"} 2.0' in text
        assert 'tpx_gateway_requests_total{endpoint="other",status="404"} 1.0' in text
        assert 'tpx_gateway_requests_total{endpoint="healthz",status="200"} 3.0' in text
        assert 'tpx_gateway_requests_total{endpoint="messages",status="413"} 1.0' in text


def test_forged_and_tampered_ids_are_refused() -> None:
    """TPX: a tool_use id in the tpx encoding this gateway did not sign is refused before
    the wire; an id in any other form passes through to the pairing check."""
    with GatewayRig(Provider.TPX, seed=0) as rig:
        _ok(rig.turn("reply", ids=("t1", "t2")))
        history = [*rig.caller.history]
        good = [b["id"] for b in rig.caller.obligations]
        unsigned = verify_signed_id(good[0], SECRET)
        assert unsigned is not None
        other = sign_caller_id(unsigned, b"another gateway's secret")
        not_issued = "is not a tool_use id this gateway issued"
        unexpected = "unexpected `tool_use_id` found in `tool_result` blocks"
        cases = [
            (other, not_issued),  # signed by another gateway's secret
            (good[0][:-3] + "abc", not_issued),  # a tampered payload
            ("tpxr0-aaaaaaaaaaaa-bbbbbbbbbbbbbbbbbbbb_x", not_issued),  # a signed shape
            (good[0].replace("-", "-0", 1), unexpected),  # no tpx shape: the caller's own id
            ("tpxr0-aaaaaaaaaaaa-bbbbbbbbbbbbbbbbbbb_x", unexpected),  # a 19-digit MAC
            ("tpxr0-aaaaaaaaaaab-bbbbbbbbbbbbbbbbbbbb-c_x", unexpected),  # four parts
        ]
        for forged, words in cases:
            results = [
                {"type": "tool_result", "tool_use_id": i, "content": "x"}
                for i in (forged, *good[1:])
            ]
            body = {**BASE, "messages": [*history, {"role": "user", "content": results}]}
            reply = _post(rig, body)
            assert reply.status_code == 400, forged
            message = reply.json()["error"]["message"]
            assert message.startswith("messages.2.content.0"), message
            assert words in message, (forged, message)
            assert forged in message
        assert len(rig.fake.received) == 1
        answered = [{"type": "tool_result", "tool_use_id": i, "content": "x"} for i in good]
        rig.fake.plan_reply(())
        body = {**BASE, "messages": [*history, {"role": "user", "content": answered}]}
        assert _post(rig, body).status_code == 200
        sent = orjson.loads(rig.fake.received[-1])
        tool_ids = [m["tool_call_id"] for m in sent["messages"] if m["role"] == "tool"]
        assert tool_ids == [c.wire_id for c in rig.fake.replies[0].calls]


def test_a_tpx_shaped_id_that_is_no_encoding_passes_through() -> None:
    """An id starting ``tpx`` that is neither a tpx encoding nor a signed shape is the
    caller's own: it reaches the pairing check (refused there as unknown), not the MAC's."""
    with GatewayRig(Provider.TPX, seed=0) as rig:
        _ok(rig.turn("reply", ids=("t1",)))
        history = [*rig.caller.history]
        (good,) = [b["id"] for b in rig.caller.obligations]
        results = [
            {"type": "tool_result", "tool_use_id": i, "content": "x"} for i in (good, "tpxlocal")
        ]
        reply = _post(rig, {**BASE, "messages": [*history, {"role": "user", "content": results}]})
        assert reply.status_code == 400
        assert "unexpected `tool_use_id` found in `tool_result` blocks: tpxlocal" in reply.text


@pytest.mark.parametrize("provider", PROVIDERS, ids=lambda p: p.name)
def test_models_route_and_count_tokens(provider: Provider) -> None:
    routes = (ModelRoute("claude-big", "big-model", 32), ModelRoute("claude-small", "", None))
    with GatewayRig(provider, model="default-model", routes=routes) as rig:
        rig.fake.plan_reply(())
        body = {**BASE, "model": "claude-big", "max_tokens": 100}
        assert _post(rig, body).status_code == 200
        sent = orjson.loads(rig.fake.received[-1])
        assert sent["model"] == "big-model"
        assert sent.get("max_tokens", sent.get("max_completion_tokens")) == 32
        rig.fake.plan_reply(())
        assert _post(rig, {**BASE, "model": "claude-small"}).status_code == 200
        sent = orjson.loads(rig.fake.received[-1])
        want = "default-model" if provider is Provider.TPX else "claude-small"
        assert sent["model"] == want
        if provider is Provider.TPX:
            models = rig.client.get("/v1/models", headers=AUTH).json()
            assert [m["id"] for m in models["data"]] == [
                "default-model",
                "big-model",
                "claude-tpx-default-model",  # the aliases Claude Code's picker keeps
                "claude-tpx-big-model",
            ]
            assert models["first_id"] == "default-model"
            assert models["last_id"] == "claude-tpx-big-model"
            assert models["has_more"] is False
            count = rig.client.post(
                "/v1/messages/count_tokens", headers=AUTH, content=orjson.dumps(BASE)
            )
            assert count.status_code == 200
            assert count.json()["input_tokens"] > 0
            bad = rig.client.post(
                "/v1/messages/count_tokens",
                headers=AUTH,
                content=orjson.dumps({**BASE, "model": 3}),
            )
            assert bad.status_code == 400
        assert len(rig.fake.received) == 2


@pytest.mark.parametrize("provider", PROVIDERS, ids=lambda p: p.name)
def test_monitor_traces_pass_the_gateway_spec(
    provider: Provider, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """With ``--trace-dir`` every conversation's trace passes ``tpx check-trace`` against
    spec/TpxGateway.tla: tool rounds, a failure, a CallerAbort."""
    with GatewayRig(provider, seed=2, trace_dir=tmp_path) as rig:
        _ok(rig.turn("reply", ids=("t1", "t2")))
        _ok(rig.turn("fail", failure="http529", retry=False))
        _ok(rig.turn("reply", ids=("t2",)))
        _ok(rig.turn("abort", style="unknown"))
        _ok(rig.turn("reply", ids=()))
    traces = sorted(tmp_path.iterdir())
    assert len(traces) == 5
    capsys.readouterr()
    assert main(["check-trace", "--spec", str(SPEC), *map(str, traces)]) == 0, capsys.readouterr()


@pytest.mark.parametrize("provider", PROVIDERS, ids=lambda p: p.name)
def test_exchange_traces_without_the_monitor(
    provider: Provider, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Without ``--monitor`` the raw exchange trace is written: ``Resume`` with the history's
    obligations, then each spec action with the exchange's spec variables (the tool
    results a ``CallerSend`` put on the wire among them); ``tpx check-trace --exchange``
    accepts every file against spec/TpxGateway.tla."""
    with GatewayRig(provider, seed=0, trace_dir=tmp_path, monitor=False) as rig:
        _ok(rig.turn("reply", ids=("t1", "t2")))
        owed = sorted(b["id"] for b in rig.caller.obligations)
        _ok(rig.turn("reply", ids=()))
    first, second = sorted(tmp_path.iterdir(), key=lambda p: p.stat().st_mtime_ns)
    steps = [orjson.loads(line) for line in second.read_bytes().splitlines()]
    assert [s["#action"] for s in steps] == ["Resume", "CallerSend", "ProviderReply", "Deliver"]
    resume = steps[0]
    assert resume["provider"] == provider.name
    assert resume["phase"] == "idle"
    assert resume["turn"] == 0
    if provider is Provider.ANTHROPIC:
        assert resume["pending"] == owed
    else:  # the history's ids unsigned: what the exchange holds
        assert len(resume["pending"]) == len(owed)
        assert not any(i in owed for i in resume["pending"])
    assert steps[1]["phase"] == "req"
    assert len(steps[1]["reqIds"]) == 2
    assert len(steps[1]["wireIds"]) == 2  # the two tool results, on the wire
    assert steps[-1]["lastOutcome"] == "ok"
    assert steps[-1]["gotShape"] == "messages"
    assert steps[-1]["pending"] == []
    assert orjson.loads(first.read_bytes().splitlines()[0])["#action"] == "Resume"
    assert SECRET not in second.read_bytes()
    capsys.readouterr()
    checked = main(["check-trace", "--spec", str(SPEC), "--exchange", str(first), str(second)])
    assert checked == 0, capsys.readouterr()


@pytest.mark.parametrize("streaming", [False, True], ids=["plain", "streamed"])
def test_logged_bodies_are_the_bodies(streaming: bool) -> None:
    """``log_bodies``: the log line carries the request and the response as they crossed
    (the response: the body the caller got, plain only), credentials redacted."""
    with GatewayRig(Provider.TPX, seed=4, streaming=streaming, log_bodies=True) as rig:
        with log_records() as lines:
            _ok(rig.turn("reply", ids=("t1",)))
        body, _, data, _ = rig.posts[-1]
        (line,) = [x for x in lines if "request_body" in x]
        forms = secret_forms(rig.settings.secret_values())
        assert line["request_body"] == redact(orjson.dumps(body).decode(), forms)
        if streaming:
            assert "response_body" not in line
        else:
            assert line["response_body"] == redact(data.decode(), forms)


def test_the_anthropic_pass_through_endpoints() -> None:
    """ANTHROPIC: ``/v1/models`` and ``count_tokens`` go to the upstream as they are (query
    kept), the answer comes back under the gateway's request id; an upstream that cannot be
    reached or refuses the gateway's key is a 502 ``api_error``."""
    with GatewayRig(Provider.ANTHROPIC) as rig:
        rig.fake.plan_reply(())
        models = rig.client.get("/v1/models?limit=2", headers=AUTH)
        assert models.status_code == 200
        assert models.json() == orjson.loads(rig.fake.good_reply or b"null")
        assert models.headers["request-id"].startswith("req_")
        rig.fake.plan_reply(())
        count = rig.client.post(
            "/v1/messages/count_tokens", headers=AUTH, content=orjson.dumps(BASE)
        )
        assert count.status_code == 200
        assert orjson.loads(rig.fake.received[-1])["model"] == BASE["model"]
        for kind in ("connect", "http401"):
            rig.fake.plan_fail(kind)
            failed = rig.client.post(
                "/v1/messages/count_tokens", headers=AUTH, content=orjson.dumps(BASE)
            )
            assert failed.status_code == 502, kind
            assert failed.json()["error"]["type"] == "api_error"
            assert failed.json()["request_id"] == failed.headers["request-id"]
        rig.fake.plan_fail("http429")
        limited = rig.client.get("/v1/models", headers=AUTH)
        assert limited.status_code == 429
        metrics = rig.client.get("/metrics").text
        assert 'tpx_gateway_requests_total{endpoint="models",status="200"} 1.0' in metrics
        assert 'tpx_gateway_requests_total{endpoint="count_tokens",status="502"} 2.0' in metrics


@pytest.mark.parametrize("provider", PROVIDERS, ids=lambda p: p.name)
def test_an_upstream_status_outside_the_error_range(provider: Provider) -> None:
    """An upstream answering 302 (or any status that is no 2xx and no 4xx / 5xx) is the
    gateway's upstream failing: 502 ``api_error`` for the caller, ProviderFail."""
    with GatewayRig(provider) as rig:
        seen: list[httpx2.Request] = []

        def redirect(request: httpx2.Request) -> httpx2.Response:
            seen.append(request)
            return httpx2.Response(302, headers={"location": "https://elsewhere.test/"})

        rig.client.close()
        upstream = SyncUpstream(rig.settings, transport=httpx2.MockTransport(redirect))
        rig.client = httpx2.Client(
            transport=GatewayTransport(rig.gateway, upstream), base_url="http://gateway.test"
        )
        reply = _post(rig, BASE)
        assert len(seen) == 1
        assert reply.status_code == 502
        assert reply.json()["error"]["type"] == "api_error"
        assert rig.violations() == 0


@pytest.mark.parametrize("streaming", [False, True], ids=["plain", "streamed"])
@pytest.mark.parametrize("provider", PROVIDERS, ids=lambda p: p.name)
def test_a_step_the_spec_forbids_is_stopped_closed(provider: Provider, streaming: bool) -> None:
    """A seeded bug at Deliver (a tool_use dropped: PairingInv) is stopped by ``--monitor``
    inside the turn: the caller gets a 500 ``api_error`` naming the property (streamed: the
    stream ends with that error event, never ``message_stop``), the exchange is logged
    failed with MODEL_SPEC_VIOLATION and counted, and the next turn is served again."""
    with GatewayRig(provider, seed=1, streaming=streaming) as rig:
        before = rig.error_counts()
        with BUGS["drop_id"].active(), log_records() as lines:
            req = {**rig.caller.request(), "stream": True} if streaming else rig.caller.request()
            rig.fake.plan_reply(("t1", "t2"))
            status, _, data = rig.post(req)
        assert rig.violations() == 1
        if streaming:
            assert status == 200
            events = sse_events(data)
            assert events[-1][0] == "error"
            assert "message_stop" not in [name for name, _ in events]
            error = orjson.loads(events[-1][1])["error"]
        else:
            assert status == 500
            error = orjson.loads(data)["error"]
        assert error["type"] == "api_error"
        assert "(PairingInv, Deliver)" in error["message"]
        (line,) = [x for x in lines if x.get("endpoint") == "messages"]
        assert line["error"] == "MODEL_SPEC_VIOLATION"
        assert line["status"] == status
        assert rig.error_counts() - before == {"MODEL_SPEC_VIOLATION": 1}
        rig.caller.failed()
        _ok(rig.turn("reply", ids=("t2",)))


def _failing_turn_keeps_its_number(mp: pytest.MonkeyPatch) -> None:
    """A seeded bug: a failed exchange does not advance the turn (ProviderFail without
    ``turn' = turn + 1``), a step the gateway spec does not allow."""
    real = Exchange._end_turn

    def end_turn(self: Exchange, outcome: Any) -> None:
        turn = self._turn
        real(self, outcome)
        if outcome == "err":
            self._turn = turn

    mp.setattr(Exchange, "_end_turn", end_turn)


def test_an_illegal_refusal_is_stopped_closed() -> None:
    """A seeded bug: the core reads no obligations from the history, so a request answering
    the last turn's tool_use is refused for pairing with nothing pending. In the gateway
    spec that CallerAbort discards the client's obligations, a step it does not allow:
    ``--monitor`` stops it before the 400 goes out; the caller gets a 500 ``api_error``
    naming the step, the exchange is logged failed with MODEL_SPEC_VIOLATION and counted,
    and (the bug gone) the same request is served again."""
    with GatewayRig(Provider.TPX, seed=3) as rig:
        _ok(rig.turn("reply", ids=("t1",)))
        before = rig.error_counts()
        req = rig.caller.request()
        upstream = len(rig.fake.received)
        with pytest.MonkeyPatch.context() as mp, log_records() as lines:
            mp.setattr(core, "pending_ids", lambda messages: [])
            status, _, data = rig.post(req)
        assert len(rig.fake.received) == upstream  # refused before the wire
        assert rig.violations() == 1
        assert status == 500, (status, data)
        error = orjson.loads(data)["error"]
        assert error["type"] == "api_error"
        assert "CallerAbort)" in error["message"], error
        (line,) = lines
        assert line["error"] == "MODEL_SPEC_VIOLATION"
        assert line["actions"] == []
        assert rig.error_counts() - before == {"MODEL_SPEC_VIOLATION": 1}
        rig.fake.plan_reply(())
        status, _, _ = rig.post(req)
        assert status == 200


@pytest.mark.parametrize(
    ("streaming", "kind"),
    [
        (False, "http529"),
        (False, "connect"),
        (True, "http529"),
        (True, "connect"),
        (True, "malformed"),
        (True, "non_json"),
        (True, "shape"),
        (True, "bad_tool_call"),
        (True, "drop"),
        (True, "no_done"),
        (True, "error_event"),
    ],
)
def test_an_illegal_provider_fail_is_stopped_closed(streaming: bool, kind: FailureKind) -> None:
    """A ProviderFail the gateway spec forbids, wherever the failure surfaces in the turn
    (the reply's status, the connection, a chunk fed, the connection dropped mid-stream,
    the body ending early, an error event; streamed, a body refused before any byte went
    out: the stop, not the provider's error, is the caller's response): ``--monitor``
    stops it; the caller gets a 500 ``api_error`` naming the step (streamed, once bytes
    went out: the stream's last event), the exchange is logged failed with
    MODEL_SPEC_VIOLATION and counted."""
    with GatewayRig(Provider.TPX, seed=2, streaming=streaming) as rig:
        _ok(rig.turn("reply", ids=("t1",)))
        before = rig.error_counts()
        req = {**rig.caller.request(), "stream": True} if streaming else rig.caller.request()
        rig.fake.plan_fail(kind)
        with pytest.MonkeyPatch.context() as mp, log_records() as lines:
            _failing_turn_keeps_its_number(mp)
            status, _, data = rig.post(req)
        assert rig.violations() == 1
        if status == 200:
            assert streaming
            name, payload = sse_events(data)[-1]
            assert name == "error"
            error = orjson.loads(payload)["error"]
        else:
            assert status == 500, (status, data)
            error = orjson.loads(data)["error"]
        assert error["type"] == "api_error"
        assert "ProviderFail)" in error["message"], error
        (line,) = lines
        # Turn.fail (the connection dropped mid-stream) logs the transport's failure, not
        # the monitor's stop (whose own log line names the violation): reported, not tpx's
        # other paths' behaviour
        code = "MODEL_NETWORK" if kind == "drop" else "MODEL_SPEC_VIOLATION"
        assert line["error"] == code
        assert line["status"] == status
        assert rig.error_counts() - before == {code: 1}


def test_a_gateway_without_credentials() -> None:
    """NoProvider: every Messages request is answered 502 ``api_error`` (the gateway's
    configuration, not the caller's request) without an upstream call, logged and counted;
    count_tokens says so with 401."""
    with GatewayRig(Provider.TPX, uncredentialed=True) as rig:
        before = rig.error_counts()
        with log_records() as lines:
            replies = [_post(rig, BASE), _post(rig, {**BASE, "stream": True})]
        for reply in replies:
            assert reply.status_code == 502
            assert reply.json()["error"]["type"] == "api_error"
            assert "no credentials" in reply.json()["error"]["message"]
        assert [line["actions"] for line in lines] == [["NoProvider"], ["NoProvider"]]
        assert [line["error"] for line in lines] == ["MODEL_UNAUTHORIZED"] * 2
        assert rig.error_counts() - before == {"MODEL_UNAUTHORIZED": 2}
        assert rig.fake.received == []
        assert rig.violations() == 0
        count = rig.client.post(
            "/v1/messages/count_tokens", headers=AUTH, content=orjson.dumps(BASE)
        )
        assert count.status_code == 401
        assert count.json()["error"]["type"] == "authentication_error"


@pytest.mark.parametrize("provider", PROVIDERS, ids=lambda p: p.name)
def test_a_request_the_exchange_cannot_frame(provider: Provider) -> None:
    """A request past the shape checks that the exchange still refuses (nested deeper than
    tpx reads): 400 ``invalid_request_error`` with the exchange's reason, no spec step, no
    upstream call, logged and counted."""
    deep: dict[str, Any] = {}
    cur = deep
    for _ in range(200):
        cur["a"] = {}
        cur = cur["a"]
    with GatewayRig(provider) as rig:
        before = rig.error_counts()
        with log_records() as lines:
            reply = _post(rig, {**BASE, "metadata": deep})
        assert reply.status_code == 400
        assert reply.json()["error"]["type"] == "invalid_request_error"
        assert "nests deeper than" in reply.json()["error"]["message"]
        (line,) = lines
        assert line["actions"] == []
        assert line["error"] == "MODEL_PROTOCOL"
        assert rig.error_counts() - before == {"MODEL_PROTOCOL": 1}
        assert rig.fake.received == []


@pytest.mark.parametrize("streaming", [False, True], ids=["plain", "streamed"])
@pytest.mark.parametrize("provider", PROVIDERS, ids=lambda p: p.name)
def test_each_exchange_is_counted_once_by_status(provider: Provider, streaming: bool) -> None:
    """``tpx_gateway_requests_total``: every ``/v1/messages`` exchange counts once under the
    status the client got (200 for a delivered turn, 400 for a refused CallerAbort)."""
    with GatewayRig(provider, streaming=streaming) as rig:
        _ok(rig.turn("reply", ids=("t1", "t2")))
        _ok(rig.turn("reply", ids=("t2",)))
        _ok(rig.turn("abort", style="unknown"))
        text = rig.gateway.metrics.render().decode()
        assert 'tpx_gateway_requests_total{endpoint="messages",status="200"} 2.0' in text
        assert 'tpx_gateway_requests_total{endpoint="messages",status="400"} 1.0' in text


def test_count_tokens_over_a_history_with_signed_ids() -> None:
    """TPX: ``count_tokens`` reads the history as ``/v1/messages`` does: the signed ids this
    gateway issued count as the request the upstream gets (its translated body, counted
    locally), and an id in the tpx encoding it did not issue is refused (400) with the error
    body /v1/messages gives for that history."""
    with GatewayRig(Provider.TPX, seed=0) as rig:
        _ok(rig.turn("reply", ids=("t1", "t2")))
        history = [*rig.caller.history]
        good = [b["id"] for b in rig.caller.obligations]
        answered = [{"type": "tool_result", "tool_use_id": i, "content": "x"} for i in good]
        body = {**BASE, "messages": [*history, {"role": "user", "content": answered}]}
        count = rig.client.post(
            "/v1/messages/count_tokens", headers=AUTH, content=orjson.dumps(body)
        )
        assert count.status_code == 200, count.text
        rig.fake.plan_reply(())
        assert _post(rig, body).status_code == 200
        sent = orjson.loads(rig.fake.received[-1])
        assert count.json() == {"input_tokens": estimate_tokens(sent)}
        unsigned = verify_signed_id(good[0], SECRET)
        assert unsigned is not None
        forged = sign_caller_id(unsigned, b"another gateway's secret")
        results = [
            {"type": "tool_result", "tool_use_id": i, "content": "x"} for i in (forged, *good[1:])
        ]
        bad = {**BASE, "messages": [*history, {"role": "user", "content": results}]}
        refused = rig.client.post(
            "/v1/messages/count_tokens", headers=AUTH, content=orjson.dumps(bad)
        )
        assert refused.status_code == 400
        message = refused.json()["error"]["message"]
        assert "is not a tool_use id this gateway issued" in message
        same = _post(rig, bad)  # /v1/messages refuses the same body with the same answer
        assert same.status_code == 400
        assert same.json()["error"] == refused.json()["error"]


def test_a_forked_worker_logs_its_own_pid() -> None:
    """The log line's ``pid`` is the worker that served the exchange: a gateway built before
    a fork (a preloading server's workers) logs the child's pid, not its parent's."""
    with GatewayRig(Provider.TPX, seed=0) as rig:
        read_end, write_end = os.pipe()
        child = os.fork()
        if child == 0:  # the worker: one exchange, then its log line's pid to the parent
            code = 1
            try:
                os.close(read_end)
                with log_records() as lines:
                    _ok(rig.turn("reply", ids=("t1",)))
                os.write(write_end, orjson.dumps([line["pid"] for line in lines]))
                code = 0
            finally:
                os._exit(code)
        os.close(write_end)
        with os.fdopen(read_end, "rb") as pipe:
            got = pipe.read()
        _, status = os.waitpid(child, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        assert orjson.loads(got) == [child]
        with log_records() as lines:  # and the parent still logs its own
            _ok(rig.turn("reply", ids=("t1",)))
        assert [line["pid"] for line in lines] == [os.getpid()]


@pytest.mark.parametrize("streaming", [False, True], ids=["plain", "streamed"])
def test_no_log_value_shows_a_credential_even_a_word_the_log_uses(streaming: bool) -> None:
    """Secrecy holds whatever the credential is: one that reads like a spec action's name
    (``ProviderReply``) is redacted out of the log line's ``actions`` list like out of
    every other value, so no line holds it, nor any form or fragment of it."""
    credential = "ProviderReply"
    with GatewayRig(Provider.TPX, seed=0, credential=Credential(credential)) as rig:
        req = {**rig.caller.request(), "stream": True} if streaming else rig.caller.request()
        rig.fake.plan_reply(("t1",))
        with log_records() as lines:
            status, _, _ = rig.post(req)
        assert status == 200
        (line,) = lines
        forms = secret_forms(rig.settings.secret_values())
        text = orjson.dumps(line).decode()
        assert credential not in text
        assert redact(text, forms) == text
        assert line["actions"] == ["CallerSend", redact(credential, forms), "Deliver"]


@pytest.mark.parametrize("streaming", [False, True], ids=["plain", "streamed"])
@pytest.mark.parametrize("provider", PROVIDERS, ids=lambda p: p.name)
def test_an_upstream_error_echoing_the_credential_reaches_the_caller_redacted(
    provider: Provider, streaming: bool
) -> None:
    """An upstream error whose message echoes the gateway's upstream credential (a 429
    quoting the token it throttles): the caller gets the error with the provider's text
    withheld whole (tpx.errors: never partly redacted), its log line holds none either."""
    credential = TOKEN if provider is Provider.TPX else KEY
    real = FakeProvider.error_body

    def echoing(fake: FakeProvider, status: int) -> bytes:
        return real(fake, status).replace(b"fake says no", f"slow down, {credential}".encode())

    with GatewayRig(provider, seed=0, streaming=streaming) as rig:
        _ok(rig.turn("reply", ids=("t1",)))
        req = {**rig.caller.request(), "stream": True} if streaming else rig.caller.request()
        rig.fake.plan_fail("http429")
        with pytest.MonkeyPatch.context() as mp, log_records() as lines:
            mp.setattr(FakeProvider, "error_body", echoing)
            status, _, data = rig.post(req)
        assert status == 429
        message = orjson.loads(data)["error"]["message"]
        forms = secret_forms(rig.settings.secret_values())
        assert message.endswith("returned HTTP 429: [REDACTED]")
        assert credential not in message
        assert redact(message, forms) == message
        (line,) = lines
        text = orjson.dumps(line).decode()
        assert redact(text, forms) == text


@pytest.mark.parametrize("streaming", [False, True], ids=["plain", "streamed"])
def test_a_turn_closed_twice_logs_and_counts_once(streaming: bool) -> None:
    """``Turn.close`` writes the exchange's log line once: a shell on the sans-I/O core
    that closes a turn again (a cleanup path after the normal end) adds no second log line
    and no second count to ``tpx_gateway_requests_total``."""
    with GatewayRig(Provider.TPX, seed=0, streaming=streaming) as rig:
        body = {**rig.caller.request(), "stream": True} if streaming else rig.caller.request()
        rig.fake.plan_reply(())
        headers = {**AUTH, "content-type": "application/json"}
        turn = rig.gateway.handle(Request("POST", "/v1/messages", "", headers, orjson.dumps(body)))
        assert isinstance(turn, Turn)
        out = list(run_turn_sync(turn, rig.upstream))
        if streaming:  # the whole stream went out
            assert all(isinstance(item, bytes) for item in out)
            assert b"event: message_stop" in b"".join(x for x in out if isinstance(x, bytes))
        else:
            (reply,) = out
            assert isinstance(reply, Response)
            assert reply.status == 200
        with log_records() as lines:
            turn.close()
            turn.close()
        assert [line["status"] for line in lines] == [200]
        text = rig.gateway.metrics.render().decode()
        assert 'tpx_gateway_requests_total{endpoint="messages",status="200"} 1.0' in text


@pytest.mark.parametrize("fail", [False, True], ids=["delivered", "failed"])
def test_a_streamed_turn_is_over_with_its_last_byte(fail: bool) -> None:
    """``Turn.over`` (what a shell reads to end the client's response at once, without
    waiting for the upstream connection to drain): false while the exchange is in flight,
    true from the item carrying the stream's last event (``message_stop``, or the error
    event of a stream that failed mid-way) on."""
    with GatewayRig(Provider.TPX, seed=0, streaming=True) as rig:
        body = {**rig.caller.request(), "stream": True}
        if fail:
            rig.fake.plan_fail("error_event")
        else:
            rig.fake.plan_reply(("t1",))
        headers = {**AUTH, "content-type": "application/json"}
        turn = rig.gateway.handle(Request("POST", "/v1/messages", "", headers, orjson.dumps(body)))
        assert isinstance(turn, Turn)
        assert not turn.over
        seen: list[tuple[bytes, bool]] = []
        for item in run_turn_sync(turn, rig.upstream):
            assert isinstance(item, bytes)
            seen.append((item, turn.over))
        turn.close()
        last = b"event: error" if fail else b"event: message_stop"
        assert [over for _, over in seen] == [False] * (len(seen) - 1) + [True]
        assert last in seen[-1][0]
        assert all(last not in data for data, _ in seen[:-1])


def test_anthropic_beta_and_a_count_tokens_stream_flag_upstream() -> None:
    """ANTHROPIC: the caller's ``anthropic-beta`` header goes upstream with its
    ``/v1/messages`` and its ``count_tokens`` requests; ``count_tokens`` takes no ``stream``
    field, so a caller's ``"stream": true`` is dropped from the counted body."""
    beta = "interleaved-thinking-2025-05-14"
    with GatewayRig(Provider.ANTHROPIC) as rig:
        rig.fake.plan_reply(())
        reply = _post(rig, BASE, {**AUTH, "anthropic-beta": beta})
        assert reply.status_code == 200
        assert rig.fake.received_headers[-1].get("anthropic-beta") == beta
        rig.fake.plan_reply(())
        count = rig.client.post(
            "/v1/messages/count_tokens",
            headers={**AUTH, "anthropic-beta": beta},
            content=orjson.dumps({**BASE, "stream": True}),
        )
        assert count.status_code == 200
        assert rig.fake.received_headers[-1].get("anthropic-beta") == beta
        assert orjson.loads(rig.fake.received[-1]) == {**BASE}


def test_count_tokens_ignores_a_stream_flag() -> None:
    """TPX: whether the counted request would stream changes nothing in its count."""
    with GatewayRig(Provider.TPX) as rig:
        counts = [
            rig.client.post(
                "/v1/messages/count_tokens", headers=AUTH, content=orjson.dumps(body)
            ).json()
            for body in (BASE, {**BASE, "stream": True})
        ]
        assert counts[0] == counts[1]
        assert counts[0]["input_tokens"] > 0


def test_count_tokens_needs_no_max_tokens() -> None:
    """``max_tokens`` is required by ``/v1/messages`` and not by ``count_tokens`` (the
    Messages API's own shapes): the same body without it is counted, and refused as a turn."""
    with GatewayRig(Provider.TPX, seed=0) as rig:
        body = {k: v for k, v in BASE.items() if k != "max_tokens"}
        count = rig.client.post(
            "/v1/messages/count_tokens", headers=AUTH, content=orjson.dumps(body)
        )
        assert count.status_code == 200, count.text
        assert count.json()["input_tokens"] > 0
        refused = _post(rig, body)
        assert refused.status_code == 400
        assert "max_tokens: Field required" in refused.json()["error"]["message"]
        assert rig.fake.received == []


#: seeded gateway bugs that hand the model another call's output, lose a round or refuse a
#: correct turn (conformance.gateway_bugs), and (provider, seed, the check the tool loop
#: names first): the seed's abstraction binds every result to its call, every round
CORE_BINDING_BUGS: dict[str, tuple[Provider, int, str]] = {
    "results_reversed": (Provider.TPX, 0, "PairingInv"),
    "ids_permuted": (Provider.TPX, 0, "WireIds"),
    "earlier_results_dropped": (Provider.ANTHROPIC, 0, "PairingInv"),
    "results_in_order": (Provider.TPX, 2, "Refinement"),  # seed 2 answers in reverse
}


@pytest.mark.parametrize("name", sorted(CORE_BINDING_BUGS))
def test_the_tool_loop_catches_the_seeded_binding_bugs(name: str) -> None:
    (bug,) = [b for b in GATEWAY_BUGS if b.name == name]
    provider, seed, check = CORE_BINDING_BUGS[name]
    problems: list[str] = []
    with bug.active(), GatewayRig(provider, seed=seed) as rig:
        for ids in (("t1", "t2"), ("t2",), ("t1", "t2", "t3"), ("t3", "t1")):
            problems += rig.turn("reply", ids=ids).problems
    assert problems
    assert problems[0].startswith(f"{check}:"), problems[0]


@pytest.mark.parametrize("provider", PROVIDERS, ids=lambda p: p.name)
def test_the_monitor_names_a_client_leaving_client_gone(provider: Provider, tmp_path: Path) -> None:
    """The caller stops reading mid-stream: the exchange fails (ProviderFail), and the
    monitor's trace has the spec's step for it, ClientGone, which keeps the history's
    obligations; the trace checks against the spec."""
    with GatewayRig(provider, seed=1, streaming=True, trace_dir=tmp_path) as rig:
        _ok(rig.turn("reply", ids=("t1", "t2")))
        req = {**rig.caller.request(), "stream": True}
        rig.fake.plan_reply(("t1",))
        with rig.client.stream(
            "POST", "/v1/messages", content=orjson.dumps(req), headers=AUTH
        ) as response:
            assert response.status_code == 200
            assert next(response.iter_bytes()).startswith(b"event: message_start")
        assert rig.violations() == 0
    traces = [orjson.loads(line) for f in sorted(tmp_path.glob("*.jsonl")) for line in
              f.read_text().splitlines()]  # fmt: skip
    gone = [e for e in traces if e["#action"] == "ClientGone"]
    assert len(gone) == 1
    assert gone[0]["pending"]
    assert gone[0]["lastOutcome"] == "err"
    assert not [e for e in traces if e["#action"] == "ProviderFail"]
    assert main(["check-trace", "--spec", str(SPEC), *map(str, tmp_path.glob("*.jsonl"))]) == 0
