"""A request the ASGI shell's preflight let through is handled without its route, method and
key being checked a second time (``Gateway.handle(request, admitted=True)``): the answer is
the same, a keyless request is still refused (by the preflight) and never reaches the
upstream, and a shell whose preflight admits everything (the seeded bug) is caught by that
very check."""

from __future__ import annotations

import orjson
import pytest

from tpx.gateway.core import Gateway, Request, Response, Turn

from .conftest import GATEWAY_KEY, make_settings
from .test_http import AUTH, _body, gateway


def _request(path: str, headers: dict[str, str], body: bytes = b"") -> Request:
    method = "GET" if path == "/v1/models" else "POST"
    return Request(method, path, "", {"content-type": "application/json", **headers}, body)


def test_an_admitted_request_gets_the_same_answer() -> None:
    core = Gateway(make_settings("TPX", gateway_key=GATEWAY_KEY))
    models = _request("/v1/models", AUTH)
    plain, admitted = core.handle(models), core.handle(models, admitted=True)
    assert isinstance(plain, Response)
    assert isinstance(admitted, Response)
    assert (plain.status, orjson.loads(plain.body)["data"]) == (
        admitted.status,
        orjson.loads(admitted.body)["data"],
    )
    turn = core.handle(_request("/v1/messages/", AUTH, orjson.dumps(_body())), admitted=True)
    assert isinstance(turn, Turn)
    turn.close()
    refused = core.handle(_request("/v1/messages", {}, orjson.dumps(_body())))
    assert isinstance(refused, Response)
    assert refused.status == 401  # not admitted: handle checks the key itself


def test_a_keyless_request_is_refused_and_never_reaches_the_upstream() -> None:
    with gateway() as (client, fake, _):
        reply = client.post("/v1/messages", json=_body())
        assert reply.status_code == 401
        assert reply.json()["error"]["type"] == "authentication_error"
        assert fake.seen == []
        assert client.post("/v1/messages", headers=AUTH, json=_body()).status_code == 200
        assert len(fake.seen) == 1


def test_a_shell_whose_preflight_admits_everything_is_caught(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(Gateway, "preflight", lambda *_: None)  # the seeded bug
    with gateway() as (client, fake, _):
        reply = client.post("/v1/messages", json=_body())
    # what the keyless test above refuses goes through: that test catches such a shell
    assert reply.status_code == 200
    assert len(fake.seen) == 1
