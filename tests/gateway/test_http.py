"""The gateway over HTTP on loopback: endpoints, bad input (a clear Messages-shaped error that
changes nothing), client disconnects, pings, retries after a broken stream, metrics."""

from __future__ import annotations

import contextlib
import socket
import time
from collections.abc import Iterator
from typing import Any

import httpx2
import orjson
import pytest

from tpx.gateway.asgi import GatewayApp, create_app
from tpx.transport.translate.ids import sign_caller_id

from .conftest import GATEWAY_KEY, UPSTREAM_KEY, UPSTREAM_TOKEN, make_settings, serving
from .fakes import FakeUpstream

AUTH = {"x-api-key": GATEWAY_KEY}


@contextlib.contextmanager
def gateway(
    provider: str = "TPX", fake: FakeUpstream | None = None, **changes: Any
) -> Iterator[tuple[httpx2.Client, FakeUpstream, GatewayApp]]:
    fake = fake or FakeUpstream(provider)
    changes.setdefault("gateway_key", GATEWAY_KEY)
    app = create_app(make_settings(provider, **changes), transport=fake.transport())
    with serving(app) as url, httpx2.Client(base_url=url, timeout=30) as client:
        yield client, fake, app


def _body(**over: Any) -> dict[str, Any]:
    return {
        "model": "claude-x",
        "max_tokens": 64,
        "messages": [{"role": "user", "content": "hello"}],
        **over,
    }


def _error(response: httpx2.Response, status: int, error_type: str) -> str:
    assert response.status_code == status
    assert response.headers["request-id"].startswith("req_")
    body = response.json()
    assert body["type"] == "error"
    assert body["error"]["type"] == error_type
    message = body["error"]["message"]
    assert isinstance(message, str)
    assert message
    assert UPSTREAM_TOKEN not in response.text
    assert UPSTREAM_KEY not in response.text
    return message


def test_probe_health_models_and_metrics() -> None:
    with gateway() as (client, fake, _):
        assert client.head("/").status_code == 200
        assert client.get("/").json()["status"] == "ok"
        assert client.get("/healthz").json() == {"status": "ok"}
        models = client.get("/v1/models", headers=AUTH)
        assert models.status_code == 200
        assert models.json()["has_more"] is False
        client.post("/v1/messages", headers=AUTH, json=_body())
        metrics = client.get("/metrics").text
    assert 'tpx_gateway_spec_actions_total{action="Deliver"} 1.0' in metrics
    assert 'tpx_gateway_requests_total{endpoint="messages",status="200"} 1.0' in metrics
    assert 'tpx_gateway_requests_total{endpoint="healthz",status="200"} 1.0' in metrics
    assert "tpx_gateway_upstream_latency_seconds_count 1.0" in metrics
    assert "tpx_gateway_open_streams 0.0" in metrics
    assert len(fake.seen) == 1


@pytest.mark.parametrize("beta", ["", "?beta=true"])
def test_bearer_and_x_api_key_both_accepted(beta: str) -> None:
    with gateway() as (client, _, _):
        bearer = {"authorization": f"Bearer {GATEWAY_KEY}"}
        for headers in (AUTH, bearer):
            reply = client.post(f"/v1/messages{beta}", headers=headers, json=_body())
            assert reply.status_code == 200
            assert reply.json()["type"] == "message"


BAD: list[tuple[str, dict[str, str], bytes, int, str]] = [
    ("/v1/messages", AUTH, b"{not json", 400, "invalid_request_error"),
    ("/v1/messages", AUTH, b"[1, 2]", 400, "invalid_request_error"),
    ("/v1/messages", AUTH, orjson.dumps(_body(max_tokens="64")), 400, "invalid_request_error"),
    ("/v1/messages", AUTH, orjson.dumps(_body(messages="hi")), 400, "invalid_request_error"),
    ("/v1/messages", AUTH, orjson.dumps(_body(model=3)), 400, "invalid_request_error"),
    ("/v1/messages", AUTH, orjson.dumps(_body(stream="yes")), 400, "invalid_request_error"),
    ("/v1/messages", {"x-api-key": "wrong"}, orjson.dumps(_body()), 401, "authentication_error"),
    ("/v1/messages", {}, orjson.dumps(_body()), 401, "authentication_error"),
    ("/v1/messages", {"authorization": "Bearer nope"}, b"{}", 401, "authentication_error"),
    ("/v1/nothing", AUTH, b"{}", 404, "not_found_error"),
    ("/v1/messages", AUTH, b"x" * 5000, 413, "request_too_large"),
]


@pytest.mark.parametrize(("path", "headers", "data", "status", "error_type"), BAD)
def test_bad_input_gets_a_messages_error_and_changes_nothing(
    path: str, headers: dict[str, str], data: bytes, status: int, error_type: str
) -> None:
    with gateway(limits={"max_body_bytes": 4096}) as (client, fake, _):
        reply = client.post(
            path, headers={**headers, "content-type": "application/json"}, content=data
        )
        _error(reply, status, error_type)
        assert fake.seen == []
        # and the gateway still works
        assert client.post("/v1/messages", headers=AUTH, json=_body()).status_code == 200


def _tool_turn(client: httpx2.Client, tag: str) -> tuple[list[Any], list[str]]:
    history: list[Any] = [{"role": "user", "content": tag}]
    first = client.post("/v1/messages", headers=AUTH, json=_body(messages=history)).json()
    ids = [b["id"] for b in first["content"] if b["type"] == "tool_use"]
    history.append({"role": "assistant", "content": first["content"]})
    return history, ids


def _results(ids: list[str]) -> dict[str, Any]:
    return {
        "role": "user",
        "content": [{"type": "tool_result", "tool_use_id": i, "content": "x"} for i in ids],
    }


@pytest.mark.parametrize("provider", ["TPX", "ANTHROPIC"])
def test_pairing_refusals_use_the_messages_api_wording(provider: str) -> None:
    with gateway(provider) as (client, fake, _):
        history, ids = _tool_turn(client, "pairing")
        before = len(fake.seen)
        cases = {
            "without `tool_result` blocks immediately after": [*history, _results(ids[:1])],
            "unexpected `tool_use_id`": [*history, _results([*ids, "toolu_other"])],
            "Found multiple `tool_result` blocks": [*history, _results([ids[0], *ids])],
        }
        for wording, messages in cases.items():
            reply = client.post("/v1/messages", headers=AUTH, json=_body(messages=messages))
            assert wording in _error(reply, 400, "invalid_request_error")
        assert len(fake.seen) == before  # refused before the wire
        ok = client.post(
            "/v1/messages", headers=AUTH, json=_body(messages=[*history, _results(ids)])
        )
        assert ok.status_code == 200


def test_a_tpx_id_the_gateway_never_issued_is_refused() -> None:
    with gateway() as (client, fake, _):
        history, ids = _tool_turn(client, "forged")
        unsigned = "tpxr0-0123456789ab_call_x"
        other_secret = sign_caller_id(unsigned, b"another-gateway")
        for forged in (unsigned, other_secret, ids[0][:-1] + "Z"):
            block = {"type": "tool_use", "id": forged, "name": "ls", "input": {}}
            tampered = [history[0], {"role": "assistant", "content": [block]}]
            reply = client.post(
                "/v1/messages", headers=AUTH, json=_body(messages=[*tampered, _results([forged])])
            )
            assert "not a tool_use id this gateway issued" in _error(
                reply, 400, "invalid_request_error"
            )
        assert len(fake.seen) == 1


def test_ids_survive_history_rewriting_and_other_replicas() -> None:
    """A second gateway process with the same secret accepts the ids; older turns dropped."""
    with gateway() as (client, _, _):
        history, ids = _tool_turn(client, "replica")
    with gateway() as (other, fake, _):
        compacted = [{"role": "user", "content": "summary of earlier turns"}, *history[1:]]
        reply = other.post(
            "/v1/messages", headers=AUTH, json=_body(messages=[*compacted, _results(ids)])
        )
        assert reply.status_code == 200
        tool_ids = [m.get("tool_call_id") for m in fake.seen[0]["messages"] if m["role"] == "tool"]
    assert all(i and not i.startswith("tpx") for i in tool_ids)  # foreign ids on the wire


def test_stream_pings_during_upstream_silence() -> None:
    fake = FakeUpstream("TPX", pause=0.5)
    with gateway(fake=fake, limits={"ping_interval": 0.05}) as (client, _, _):
        reply = client.post(
            "/v1/messages",
            headers=AUTH,
            json=_body(stream=True, messages=[{"role": "user", "content": "SILENT"}]),
        )
    assert reply.status_code == 200
    assert b"event: ping" in reply.content
    assert reply.content.rstrip().endswith(b'data: {"type":"message_stop"}')


@pytest.mark.parametrize("provider", ["TPX", "ANTHROPIC"])
def test_broken_stream_then_non_streaming_fallback_with_the_same_body(provider: str) -> None:
    with gateway(provider) as (client, fake, app):
        history, ids = _tool_turn(client, "BREAK later")
        body = _body(messages=[*history, _results(ids)], stream=True)
        broken = client.post("/v1/messages", headers=AUTH, json=body)
        assert broken.status_code == 200
        assert b"event: error" in broken.content
        assert b"event: message_stop" not in broken.content
        del body["stream"]
        fake.seen.clear()
        retry = client.post("/v1/messages", headers=AUTH, json=body)
        assert retry.status_code == 200
        assert retry.json()["stop_reason"] == "end_turn"
    metrics = app.gateway.metrics.render().decode()
    assert 'tpx_gateway_spec_actions_total{action="ProviderFail"} 1.0' in metrics


def test_client_disconnecting_mid_stream_fails_the_exchange() -> None:
    fake = FakeUpstream("TPX", pause=2.0)
    with gateway(fake=fake, limits={"ping_interval": 0.05}) as (client, _, app):
        body = _body(stream=True, messages=[{"role": "user", "content": "SILENT gone"}])
        with client.stream("POST", "/v1/messages", headers=AUTH, json=body) as reply:
            assert reply.status_code == 200
            first = next(reply.iter_bytes())
            assert first
        metrics = app.gateway.metrics
        for _ in range(3000):  # the server notices the disconnect (30 s at most)
            text = metrics.render().decode()
            if 'action="ProviderFail"} 1.0' in text:
                break
            time.sleep(0.01)
        assert 'tpx_gateway_spec_actions_total{action="ProviderFail"} 1.0' in text
        assert "tpx_gateway_open_streams 0.0" in text
        # the same turn again succeeds
        again = client.post("/v1/messages", headers=AUTH, json={**body, "stream": False})
        assert again.status_code == 200


def test_upstream_failure_is_mapped_with_retry_after_and_no_credential() -> None:
    def refuse(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(
            429,
            headers={"retry-after": "7"},
            json={"error": {"message": f"slow down {UPSTREAM_TOKEN}"}},
        )

    app = create_app(make_settings("TPX"), transport=httpx2.MockTransport(refuse))
    with serving(app) as url, httpx2.Client(base_url=url) as client:
        reply = client.post("/v1/messages", json=_body())
    message = _error(reply, 429, "rate_limit_error")
    assert reply.headers["retry-after"] == "7"
    assert "[REDACTED]" in message


def test_upstream_unreachable_is_a_502() -> None:
    def down(request: httpx2.Request) -> httpx2.Response:
        raise httpx2.ConnectError("connection refused", request=request)

    app = create_app(make_settings("TPX"), transport=httpx2.MockTransport(down))
    with serving(app) as url, httpx2.Client(base_url=url) as client:
        reply = client.post("/v1/messages", json=_body())
        streamed = client.post("/v1/messages", json=_body(stream=True))
    assert "MODEL_NETWORK" in _error(reply, 502, "api_error")
    assert "MODEL_NETWORK" in _error(streamed, 502, "api_error")


def test_trace_dir_records_each_exchange(tmp_path: Any) -> None:
    with gateway(trace_dir=tmp_path) as (client, _, _):
        history, ids = _tool_turn(client, "traced")
        reply = client.post(
            "/v1/messages", headers=AUTH, json=_body(messages=[*history, _results(ids)])
        )
        request_id = reply.headers["request-id"]
    steps = [
        orjson.loads(line) for line in (tmp_path / f"{request_id}.jsonl").read_bytes().splitlines()
    ]
    assert [s["#action"] for s in steps] == ["Resume", "CallerSend", "ProviderReply", "Deliver"]
    assert len(steps[0]["pending"]) == 2  # the obligations the history carried
    assert steps[1]["reqIds"] == steps[0]["pending"]
    assert steps[-1]["lastOutcome"] == "ok"
    assert len(list(tmp_path.iterdir())) == 2


def _closed_within(sock: socket.socket, seconds: float) -> bytes:
    """What the server sent before closing *sock* (waits at most *seconds*)."""
    sock.settimeout(seconds)
    data = b""
    while True:
        part = sock.recv(4096)
        if not part:
            return data
        data += part


def test_slow_headers_and_slow_bodies_are_cut_off() -> None:
    app = create_app(make_settings("TPX", limits={"body_timeout": 0.3}))
    with serving(app, header_timeout=0.3) as url:
        host, port = url.removeprefix("http://").split(":")
        with socket.create_connection((host, int(port))) as slow_headers:
            slow_headers.sendall(b"POST /v1/messages HTTP/1.1\r\nhost: x\r\n")
            answer = _closed_within(slow_headers, 20)
        assert answer.startswith(b"HTTP/1.1 408")
        assert b'"timeout_error"' in answer
        with socket.create_connection((host, int(port))) as slow_body:
            slow_body.sendall(
                b"POST /v1/messages HTTP/1.1\r\nhost: x\r\ncontent-length: 100\r\n\r\n{"
            )
            answer = _closed_within(slow_body, 20)
        assert answer.startswith(b"HTTP/1.1 408")
        assert b"Timed out reading the request body" in answer
        with httpx2.Client(base_url=url) as client:  # the server still serves
            assert client.get("/healthz").status_code == 200


def test_an_internal_error_is_a_messages_shaped_500(monkeypatch: pytest.MonkeyPatch) -> None:
    from tpx.gateway import core

    def broken(*args: Any) -> Any:
        raise RuntimeError(f"bug near {UPSTREAM_TOKEN}")

    with gateway() as (client, _, app):
        monkeypatch.setattr(core.Turn, "reply", broken)
        reply = client.post("/v1/messages", headers=AUTH, json=_body())
        assert _error(reply, 500, "api_error") == "internal gateway error"
        monkeypatch.undo()
        assert client.post("/v1/messages", headers=AUTH, json=_body()).status_code == 200
    metrics = app.gateway.metrics.render().decode()
    assert 'tpx_gateway_spec_actions_total{action="ProviderFail"} 1.0' in metrics


def test_log_bodies_logs_redacted_bodies(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level("INFO", logger="tpx.gateway")
    with gateway(log_bodies=True) as (client, _, _):
        body = _body(messages=[{"role": "user", "content": f"my key is {GATEWAY_KEY}"}])
        assert client.post("/v1/messages", headers=AUTH, json=body).status_code == 200
    (line,) = [r.getMessage() for r in caplog.records if '"request_body"' in r.getMessage()]
    record = orjson.loads(line)
    assert "my key is [REDACTED]" in record["request_body"]
    assert record["response_body"].startswith('{"id"')
    assert GATEWAY_KEY not in line


@pytest.mark.parametrize("status", [401, 403])
def test_upstream_refusing_the_gateways_credential_is_a_502(status: int) -> None:
    def refuse(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(status, json={"error": {"message": "bad token"}})

    app = create_app(make_settings("TPX"), transport=httpx2.MockTransport(refuse))
    with serving(app) as url, httpx2.Client(base_url=url) as client:
        reply = client.post("/v1/messages", json=_body())
    assert "MODEL_UNAUTHORIZED" in _error(reply, 502, "api_error")


def test_a_request_that_failed_on_the_way_is_not_resent() -> None:
    """The upstream may have received it (tests/gateway/test_upstream.py: the pooled
    connection found closed before writing is the one that is replaced)."""
    calls: list[int] = []

    def flaky(request: httpx2.Request) -> httpx2.Response:
        calls.append(1)
        raise httpx2.RemoteProtocolError("Server disconnected", request=request)

    app = create_app(make_settings("TPX"), transport=httpx2.MockTransport(flaky))
    with serving(app) as url, httpx2.Client(base_url=url) as client:
        reply = client.post("/v1/messages", json=_body())
    assert "MODEL_NETWORK" in _error(reply, 502, "api_error")
    assert len(calls) == 1
