"""Conformance of the gateway's own refusals before the wire, through the gateway core
in-process (the sync SDK transport, the monitor on): the preflight's ``prompt is too long``
(the spec's ``PromptTooLong``, legal only for a request its window cannot take: a seeded
spurious refusal is stopped closed; a model's ``claude-tpx-`` alias counted against that
model's window), a body holding more JSON containers than the limit (413; exactly the limit
passes), and ``count_tokens`` answered by the upstream's tokenizer endpoint. Each refusal
leaves the upstream uncalled, is logged under its code and counted once in ``/metrics``; the
spec actions of the exchanges are counted there too."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import attrs
import httpx2
import orjson
import pytest

from conformance.gateway_core import AUTH, log_records, settings_for
from tpx.gateway.context.config import ContextConfig
from tpx.gateway.core import Gateway
from tpx.gateway.settings import Limits, Settings
from tpx.gateway.upstream import SyncUpstream
from tpx.sdk import GatewayTransport
from tpx.transport.exchange import Provider
from tpx.transport.translate.overflow import too_long
from tpx.transport.translate.profiles import get_profile

TOO_LONG = re.compile(r"^prompt is too long: (\d+) tokens > (\d+) maximum$")
WINDOW = 4096


def _reply() -> dict[str, Any]:
    return {
        "id": "c1",
        "object": "chat.completion",
        "model": "up-model",
        "created": 0,
        "choices": [
            {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "ok"}}
        ],
        "usage": {"prompt_tokens": 10, "completion_tokens": 1, "total_tokens": 11},
    }


class Upstream:
    """What reached the upstream, by path; a chat reply, or a tokenizer's count."""

    def __init__(self, count: int = 0) -> None:
        self.paths: list[str] = []
        self.count = count

    def __call__(self, request: httpx2.Request) -> httpx2.Response:
        self.paths.append(request.url.path)
        if request.url.path.endswith("/tokenize"):
            return httpx2.Response(200, json={"count": self.count})
        return httpx2.Response(200, json=_reply())


def _settings(**context: Any) -> Settings:
    return settings_for(
        Provider.TPX,
        base_url="https://tpx.fake.test",  # the profile's paths hold /v1
        model="up-model",
        profile=get_profile("vllm"),
        context=ContextConfig(**context),
    )


@contextmanager
def _gateway(settings: Settings, upstream: Upstream) -> Iterator[tuple[Gateway, httpx2.Client]]:
    gateway = Gateway(settings)
    transport = GatewayTransport(
        gateway, SyncUpstream(settings, transport=httpx2.MockTransport(upstream))
    )
    with httpx2.Client(transport=transport, base_url="http://gateway.test") as http:
        yield gateway, http


def _body(text: str, max_tokens: int = 1000) -> dict[str, Any]:
    return {
        "model": "claude-sonnet-5",
        "max_tokens": max_tokens,
        "messages": [{"role": "user", "content": text}],
    }


def _errors(gateway: Gateway) -> dict[str, float]:
    out = {}
    for line in gateway.metrics.render().decode().splitlines():
        if line.startswith('tpx_gateway_errors_total{code="'):
            code, _, value = line[len('tpx_gateway_errors_total{code="') :].partition('"} ')
            out[code] = float(value)
    return out


def _actions(gateway: Gateway) -> dict[str, float]:
    prefix = 'tpx_gateway_spec_actions_total{action="'
    out = {}
    for line in gateway.metrics.render().decode().splitlines():
        if line.startswith(prefix):
            action, _, value = line[len(prefix) :].partition('"} ')
            out[action] = float(value)
    return out


def _violations(gateway: Gateway) -> int:
    assert gateway.monitor is not None
    return gateway.monitor.monitor.violations


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
def test_a_prompt_its_window_cannot_take_is_refused_before_the_wire(stream: bool) -> None:
    upstream = Upstream()
    with _gateway(_settings(window=WINDOW), upstream) as (gateway, http), log_records() as lines:
        refused = http.post(
            "/v1/messages", json={**_body("word " * 6000), "stream": stream}, headers=AUTH
        )
        assert upstream.paths == []  # nothing went on the wire
        fits = http.post("/v1/messages", json=_body("hello"), headers=AUTH)
    assert refused.status_code == 400
    error = refused.json()
    assert error["type"] == "error"
    assert error["error"]["type"] == "invalid_request_error"
    words = TOO_LONG.match(error["error"]["message"])
    assert words is not None, error
    tokens, maximum = int(words[1]), int(words[2])
    assert tokens > maximum
    assert maximum <= WINDOW
    assert fits.status_code == 200
    assert len(upstream.paths) == 1
    assert [line.get("error") for line in lines] == ["GATEWAY_400", None]
    assert lines[0]["context"]["input_tokens"] == tokens
    assert _errors(gateway).get("GATEWAY_400") == 1.0
    assert _violations(gateway) == 0  # PromptTooLong: legal for a request that does not fit
    assert gateway.in_flight == 0
    # the spec's actions of each exchange are counted: the refused one's and the delivered one's
    assert _actions(gateway).get("Deliver") == 1.0


def test_a_prompt_sent_to_a_models_alias_is_counted_against_that_models_window() -> None:
    """``GET /v1/models`` lists ``claude-tpx-<model>`` aliases; a request naming one is the
    aliased model's, and its preflight counts against that model's window."""
    upstream = Upstream()
    with _gateway(_settings(window=WINDOW), upstream) as (_, http):
        body = {**_body("word " * 6000), "model": "claude-tpx-up-model"}
        refused = http.post("/v1/messages", json=body, headers=AUTH)
        fits = http.post(
            "/v1/messages", json={**_body("hello"), "model": "claude-tpx-up-model"}, headers=AUTH
        )
    assert refused.status_code == 400, refused.text
    words = TOO_LONG.match(refused.json()["error"]["message"])
    assert words is not None, refused.text
    assert int(words[2]) <= WINDOW
    assert fits.status_code == 200, fits.text
    assert upstream.paths == ["/v1/chat/completions"]


def test_a_spurious_preflight_refusal_is_stopped_closed(monkeypatch: pytest.MonkeyPatch) -> None:
    """Seeded bug: the preflight refuses whatever it counts (a request that fits too); the
    monitor stops the refusal (RefusesOnlyWrong): the client gets the fail-closed error,
    not a ``prompt is too long`` its request does not deserve."""
    import tpx.gateway.context.gate as gate_module
    from tpx.gateway.context.preflight import Verdict

    def refuses_all(
        input_tokens: int, max_tokens: int | None, window: int, *, min_output: int = 1024
    ) -> Verdict:
        return Verdict(
            input_tokens, window, max_tokens, refusal=too_long(input_tokens, window), maximum=window
        )

    monkeypatch.setattr(gate_module, "preflight", refuses_all)
    monkeypatch.setattr(gate_module, "may_overflow", lambda *a: True)
    upstream = Upstream()
    with _gateway(_settings(window=WINDOW), upstream) as (gateway, http):
        stopped = http.post("/v1/messages", json=_body("hello"), headers=AUTH)
    assert stopped.status_code == 500
    error = stopped.json()["error"]
    assert error["type"] == "api_error"
    assert "(RefusesOnlyWrong," in error["message"]
    assert "prompt is too long" not in error["message"]
    assert upstream.paths == []
    assert _violations(gateway) == 1


def test_a_body_holding_more_json_containers_than_the_limit() -> None:
    limits = attrs.evolve(Limits(), max_json_containers=8)
    upstream = Upstream()
    nested = [{"type": "text", "text": f"part {i}"} for i in range(12)]
    with _gateway(attrs.evolve(_settings(), limits=limits), upstream) as (gateway, http):
        refused = http.post(
            "/v1/messages",
            content=orjson.dumps({**_body(""), "messages": [{"role": "user", "content": nested}]}),
            headers={**AUTH, "content-type": "application/json"},
        )
        small = http.post("/v1/messages", json=_body("hello"), headers=AUTH)
        # 2 objects and 1 array, and 20 brackets in a text: 23 opening brackets (the count
        # is an upper bound: a bracket in a string counts as an array)
        bracketed = http.post("/v1/messages", json=_body("[" * 20), headers=AUTH)
        at_the_limit = http.post("/v1/messages", json=_body("[" * 5), headers=AUTH)  # 8 of them
    assert refused.status_code == 413
    assert refused.json()["error"]["message"] == (
        "Request holds more than 8 JSON objects and arrays"
    )
    assert bracketed.status_code == 413, bracketed.text
    assert at_the_limit.status_code == 200, at_the_limit.text  # more than the limit is refused
    assert small.status_code == 200  # a body of at most twice the limit is not refused
    assert _errors(gateway) == {"GATEWAY_413": 2.0}  # each counted once, under its status
    assert upstream.paths == ["/v1/chat/completions"] * 2


def test_count_tokens_asks_the_upstream_tokenizer() -> None:
    upstream = Upstream(count=321)
    with _gateway(_settings(tokenizer=True), upstream) as (_, http):
        counted = http.post("/v1/messages/count_tokens", json=_body("hello there"), headers=AUTH)
    assert counted.status_code == 200
    assert counted.json() == {"input_tokens": 321}  # vLLM's chat count, as it is
    assert upstream.paths == ["/tokenize"]
