"""The httpx2 shells: boot, one exchange per create(), error mapping, secrets."""

from __future__ import annotations

import copy
import logging
import pickle
import socket
import ssl
import textwrap
import threading
from collections.abc import Callable, Iterator
from typing import Any

import anyio
import attrs
import httpx2
import orjson
import pytest

import tpx.transport
import tpx.transport.client
from tpx import errors
from tpx.transport import AsyncTransport, Transport, aboot, boot
from tpx.transport.exchange import Exchange, ExchangeSnapshot, Provider

KEY = "sk-ant-api03-KEY-SECRET-abcdef"
TOKEN = "oauth-TOKEN-SECRET-123456"
TPX_URL = "https://tpx.example.test"

Handler = Callable[[httpx2.Request], httpx2.Response]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


# -- bodies & recorders ------------------------------------------------------------------


def messages_body(*tool_ids: str) -> dict[str, Any]:
    content: list[dict[str, Any]] = [{"type": "text", "text": "hello"}]
    content += [{"type": "tool_use", "id": i, "name": "calc", "input": {}} for i in tool_ids]
    return {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude-test",
        "content": content,
        "stop_reason": "tool_use" if tool_ids else "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": 3, "output_tokens": 1},
    }


def chat_body(*call_ids: str) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": None if call_ids else "hello"}
    if call_ids:
        message["tool_calls"] = [
            {"id": c, "type": "function", "function": {"name": "calc", "arguments": "{}"}}
            for c in call_ids
        ]
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "model": "tpx-model",
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": "tool_calls" if call_ids else "stop",
            }
        ],
        "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4},
    }


REQUEST: dict[str, Any] = {
    "model": "claude-test",
    "max_tokens": 32,
    "messages": [{"role": "user", "content": "hi"}],
}


@attrs.define
class Recorder:
    """A MockTransport handler that records requests and replies with canned responses."""

    replies: list[httpx2.Response | Exception]
    seen: list[httpx2.Request] = attrs.field(factory=list)

    def __call__(self, request: httpx2.Request) -> httpx2.Response:
        self.seen.append(request)
        reply = self.replies.pop(0)
        if isinstance(reply, Exception):
            raise reply
        return reply

    async def handle_async(self, request: httpx2.Request) -> httpx2.Response:
        await request.aread()
        return self(request)

    def json(self, index: int = -1) -> Any:
        return orjson.loads(self.seen[index].content)


def ok(body: dict[str, Any], status: int = 200, **headers: str) -> httpx2.Response:
    return httpx2.Response(status, json=body, headers=headers)


def never_called(request: httpx2.Request) -> httpx2.Response:
    raise AssertionError(f"the network was touched: {request.method} {request.url}")


def anthropic(*replies: httpx2.Response | Exception, **kw: Any) -> tuple[Transport, Recorder]:
    rec = Recorder(list(replies))
    return boot(api_key=KEY, env={}, transport=httpx2.MockTransport(rec), **kw), rec


def tpx_(*replies: httpx2.Response | Exception, **kw: Any) -> tuple[Transport, Recorder]:
    rec = Recorder(list(replies))
    t = boot(
        oauth_token=TOKEN, tpx_base_url=TPX_URL, env={}, transport=httpx2.MockTransport(rec), **kw
    )
    return t, rec


# -- boot ------------------------------------------------------------------------------------


def test_key_wins_over_token() -> None:
    with boot(env={"ANTHROPIC_API_KEY": KEY, "TPX_OAUTH_TOKEN": TOKEN}) as t:
        assert t.provider is Provider.ANTHROPIC
        assert t.base_url == "https://api.anthropic.com"
        assert t.exchange.provider is Provider.ANTHROPIC


def test_token_selects_tpx_with_its_base_url_and_model() -> None:
    env = {"TPX_OAUTH_TOKEN": TOKEN, "TPX_BASE_URL": TPX_URL + "/v1/", "TPX_MODEL": "m1"}
    with boot(env=env) as t:
        assert t.provider is Provider.TPX
        assert t.base_url == TPX_URL  # a trailing /v1 is not doubled
        assert t.model == "m1"
        assert t.exchange.model == "m1"


def test_explicit_arguments_win_over_env() -> None:
    env = {"ANTHROPIC_API_KEY": "", "TPX_OAUTH_TOKEN": "env-token", "TPX_BASE_URL": "https://env"}
    with boot(env=env, oauth_token=TOKEN, tpx_base_url=TPX_URL, model="explicit") as t:
        assert (t.provider, t.base_url, t.model) == (Provider.TPX, TPX_URL, "explicit")
    with boot(env=env, api_key=KEY, anthropic_base_url="http://127.0.0.1:9/base") as t:
        assert (t.provider, t.base_url) == (Provider.ANTHROPIC, "http://127.0.0.1:9/base")


def test_empty_values_count_as_unset() -> None:
    with boot(env={"ANTHROPIC_API_KEY": "  ", "TPX_OAUTH_TOKEN": ""}) as t:
        assert t.provider is Provider.NONE
        assert t.base_url is None


def test_env_defaults_to_os_environ(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
    monkeypatch.setenv("ANTHROPIC_BASE_URL", "https://proxy.example.test")
    with boot() as t:
        assert (t.provider, t.base_url) == (Provider.ANTHROPIC, "https://proxy.example.test")


def test_credentials_are_read_once(monkeypatch: pytest.MonkeyPatch) -> None:
    env = {"TPX_OAUTH_TOKEN": TOKEN, "TPX_BASE_URL": TPX_URL}
    rec = Recorder([ok(chat_body())])
    with boot(env=env, transport=httpx2.MockTransport(rec)) as t:
        env["ANTHROPIC_API_KEY"] = KEY  # too late: selection is fixed at boot
        monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
        t.create(REQUEST)
        assert t.provider is Provider.TPX
    assert rec.seen[0].url.path == "/v1/chat/completions"


def test_token_without_base_url_is_a_clear_error() -> None:
    with pytest.raises(errors.ConfigurationError, match="TPX_BASE_URL") as info:
        boot(env={"TPX_OAUTH_TOKEN": TOKEN})
    assert TOKEN not in str(info.value)


@pytest.mark.parametrize(
    "url", ["ftp://x.test", "not a url", "https://user:pw@x.test", "https://x.test/?k=v", "//"]
)
def test_bad_base_urls(url: str) -> None:
    with pytest.raises(errors.ConfigurationError):
        boot(api_key=KEY, anthropic_base_url=url, env={})


def test_client_and_transport_together_is_an_error() -> None:
    with httpx2.Client() as client, pytest.raises(errors.ConfigurationError, match="not both"):
        boot(api_key=KEY, env={}, client=client, transport=httpx2.MockTransport(never_called))


def test_transport_is_frozen() -> None:
    t, _ = anthropic()
    with t:
        for name, value in [
            ("provider", Provider.TPX),
            ("base_url", "https://evil.test"),
            ("_secret", None),
            ("client", None),
            ("exchange", None),
        ]:
            with pytest.raises(attrs.exceptions.FrozenInstanceError):
                setattr(t, name, value)
        with pytest.raises(AttributeError):
            t.exchange.provider = Provider.TPX  # type: ignore[misc]
        assert t.provider is Provider.ANTHROPIC


def test_exchange_provider_must_match() -> None:
    t, _ = anthropic()
    with t, pytest.raises(errors.ConfigurationError):
        attrs.evolve(t, provider=Provider.TPX)


# -- the no-provider path ------------------------------------------------------------------


def test_no_credentials_fail_at_once_without_network() -> None:
    with boot(env={}, transport=httpx2.MockTransport(never_called)) as t:
        assert t.provider is Provider.NONE
        for turn in (1, 2):
            with pytest.raises(errors.UnauthorizedError) as info:
                t.create(REQUEST)
            assert info.value.body()["error"]["type"] == "authentication_error"
            assert (t.exchange.turn, t.exchange.last_outcome) == (turn, "err")


@pytest.mark.anyio
async def test_async_no_credentials_fail_without_network() -> None:
    async with aboot(env={}, transport=httpx2.MockTransport(never_called)) as t:
        with pytest.raises(errors.UnauthorizedError):
            await t.create(REQUEST)
        assert t.exchange.turn == 1


# -- successful exchanges ------------------------------------------------------------------


def test_anthropic_exchange_and_headers() -> None:
    t, rec = anthropic(ok(messages_body("toolu_1")))
    with t:
        reply = t.create(REQUEST)
    assert reply == messages_body("toolu_1")
    sent = rec.seen[0]
    assert str(sent.url) == "https://api.anthropic.com/v1/messages"
    assert sent.headers["x-api-key"] == KEY
    assert sent.headers["anthropic-version"] == "2023-06-01"
    assert "authorization" not in sent.headers
    assert TOKEN not in str(sent.headers)
    assert rec.json() == REQUEST
    assert t.exchange.pending == {"toolu_1"}
    assert (t.exchange.turn, t.exchange.last_outcome) == (1, "ok")


def test_tpx_exchange_and_headers() -> None:
    t, rec = tpx_(ok(chat_body()), model="tpx-model")
    with t:
        reply = t.create(REQUEST)
    assert reply["type"] == "message"
    assert reply["content"] == [{"type": "text", "text": "hello"}]
    sent = rec.seen[0]
    assert str(sent.url) == TPX_URL + "/v1/chat/completions"
    assert sent.headers["authorization"] == f"Bearer {TOKEN}"
    assert "x-api-key" not in sent.headers
    assert "anthropic-version" not in sent.headers
    assert rec.json()["model"] == "tpx-model"


def test_the_other_providers_credential_header_is_stripped_from_injected_clients() -> None:
    rec = Recorder([ok(messages_body()), ok(chat_body())])
    defaults = {"Authorization": "Bearer other", "x-api-key": "other-key"}
    with httpx2.Client(transport=httpx2.MockTransport(rec), headers=defaults) as client:
        with boot(api_key=KEY, env={}, client=client) as t:
            t.create(REQUEST)
        with boot(oauth_token=TOKEN, tpx_base_url=TPX_URL, env={}, client=client) as t:
            t.create(REQUEST)
        assert not client.is_closed  # an injected client belongs to the caller
    anthropic_req, tpx_req = rec.seen
    assert anthropic_req.headers["x-api-key"] == KEY
    assert "authorization" not in anthropic_req.headers
    assert tpx_req.headers["authorization"] == f"Bearer {TOKEN}"
    assert "x-api-key" not in tpx_req.headers


def test_tpx_end_to_end_tool_ids_round_trip() -> None:
    t, rec = tpx_(ok(chat_body("call_A", "", "id with spaces")), ok(chat_body()))
    with t:
        first = t.create(REQUEST)
        uses = [b for b in first["content"] if b["type"] == "tool_use"]
        ids = [b["id"] for b in uses]
        assert len(set(ids)) == 3
        assert t.exchange.pending == set(ids)
        follow = {
            **REQUEST,
            "messages": [
                *REQUEST["messages"],
                {"role": "assistant", "content": uses},
                {
                    "role": "user",
                    "content": [
                        {"type": "tool_result", "tool_use_id": i, "content": "r"} for i in ids
                    ],
                },
            ],
        }
        second = t.create(follow)
    assert second["stop_reason"] == "end_turn"
    wire = rec.json(1)["messages"]
    assert [c["id"] for c in wire[1]["tool_calls"]] == ["call_A", "", "id with spaces"]
    assert [m["tool_call_id"] for m in wire[2:]] == ["call_A", "", "id with spaces"]
    assert (t.exchange.turn, t.exchange.pending) == (2, frozenset())


def test_pairing_violation_sends_nothing() -> None:
    t, rec = anthropic(ok(messages_body("toolu_1")))
    with t:
        t.create(REQUEST)
        with pytest.raises(errors.PairingError):
            t.create(REQUEST)  # toolu_1 unanswered
    assert len(rec.seen) == 1
    assert (t.exchange.turn, t.exchange.last_outcome, t.exchange.pending) == (2, "err", frozenset())


def test_timeout_is_passed_per_request() -> None:
    t, rec = anthropic(ok(messages_body()), timeout=7.5)
    with t:
        t.create(REQUEST)
    assert rec.seen[0].extensions["timeout"]["read"] == 7.5
    u, rec2 = anthropic(ok(messages_body()))
    with u:
        u.create(REQUEST)
    assert rec2.seen[0].extensions["timeout"]["read"] == tpx.transport.DEFAULT_TIMEOUT.read


def test_injected_client_timeout_is_kept_unless_given() -> None:
    rec = Recorder([ok(messages_body())] * 2)
    with httpx2.Client(transport=httpx2.MockTransport(rec), timeout=3.0) as client:
        boot(api_key=KEY, env={}, client=client).create(REQUEST)
        boot(api_key=KEY, env={}, client=client, timeout=9.0).create(REQUEST)
    assert [r.extensions["timeout"]["read"] for r in rec.seen] == [3.0, 9.0]


# -- failures ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "cls"),
    [
        (401, errors.UnauthorizedError),
        (403, errors.UnauthorizedError),
        (429, errors.RateLimitedError),
        (503, errors.OverloadedError),
        (529, errors.OverloadedError),
        (500, errors.HTTPStatusError),
        (404, errors.HTTPStatusError),
    ],
)
@pytest.mark.parametrize("provider", ["anthropic", "tpx"])
def test_http_errors_in_either_shape(
    status: int, cls: type[errors.ModelError], provider: str
) -> None:
    if provider == "anthropic":
        body = {"type": "error", "error": {"type": "api_error", "message": "went wrong"}}
        t, _ = anthropic(ok(body, status, **{"retry-after": "5"}))
    else:
        body = {"error": {"message": "went wrong", "type": "server_error", "code": None}}
        t, _ = tpx_(ok(body, status, **{"retry-after": "5"}))
    with t, pytest.raises(cls) as info:
        t.create(REQUEST)
    assert info.value.status == status
    assert info.value.message.endswith(": went wrong")
    assert info.value.retry_after == 5.0
    assert info.value.body()["error"]["message"].startswith(cls.code)
    assert (t.exchange.phase, t.exchange.last_outcome) == ("idle", "err")


@pytest.mark.parametrize(
    ("exc", "cls"),
    [
        (httpx2.ConnectTimeout("slow connect"), errors.TimeoutError),
        (httpx2.ReadTimeout("slow read"), errors.TimeoutError),
        (httpx2.WriteTimeout("slow write"), errors.TimeoutError),
        (httpx2.PoolTimeout("no connection"), errors.TimeoutError),
        (httpx2.ConnectError("refused"), errors.NetworkError),
        (httpx2.ReadError("reset"), errors.NetworkError),
        (httpx2.WriteError("broken pipe"), errors.NetworkError),
        (httpx2.RemoteProtocolError("server disconnected"), errors.NetworkError),
    ],
)
def test_httpx_failures_map(exc: Exception, cls: type[errors.ModelError]) -> None:
    t, _ = anthropic(exc)
    with t, pytest.raises(cls) as info:
        t.create(REQUEST)
    # Not chained to the httpx2 exception (it may hold the credential): the class name
    # and the redacted message are kept in the ModelError's own message.
    assert info.value.__cause__ is None
    assert info.value.__context__ is None
    assert type(exc).__name__ in info.value.message
    assert str(exc) in info.value.message
    assert (t.exchange.phase, t.exchange.turn, t.exchange.last_outcome) == ("idle", 1, "err")


def test_simulated_tls_failure() -> None:
    try:
        raise ssl.SSLCertVerificationError(1, "[SSL: CERTIFICATE_VERIFY_FAILED] self-signed")
    except ssl.SSLError as cause:
        exc = httpx2.ConnectError("handshake")
        exc.__cause__ = cause
    t, _ = tpx_(exc)
    with t, pytest.raises(errors.TLSError, match="CERTIFICATE_VERIFY_FAILED"):
        t.create(REQUEST)


@pytest.fixture
def plaintext_port() -> Iterator[int]:
    """A loopback server that answers a TLS ClientHello with plain HTTP."""
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.05)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            with conn:
                try:
                    conn.recv(4096)
                    conn.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
                except OSError:
                    pass

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield server.getsockname()[1]
    stop.set()
    thread.join(5)
    server.close()


def test_real_tls_handshake_failure(plaintext_port: int) -> None:
    url = f"https://127.0.0.1:{plaintext_port}"
    with (
        boot(api_key=KEY, anthropic_base_url=url, env={}, timeout=10.0) as t,
        pytest.raises(errors.TLSError) as info,
    ):
        t.create(REQUEST)
    assert info.value.__cause__ is None
    assert info.value.__context__ is None
    assert "(ConnectError)" in info.value.message
    assert KEY not in str(info.value)
    assert (t.exchange.phase, t.exchange.last_outcome) == ("idle", "err")


def test_bad_body_is_protocol_error() -> None:
    t, _ = anthropic(httpx2.Response(200, content=b"<html>gateway</html>"))
    with t, pytest.raises(errors.ProtocolError):
        t.create(REQUEST)


def test_redirect_is_not_followed() -> None:
    t, rec = anthropic(
        httpx2.Response(307, headers={"location": "https://evil.example.test/v1/messages"}),
        ok(messages_body()),
    )
    with t, pytest.raises(errors.HTTPStatusError) as info:
        t.create(REQUEST)
    assert info.value.status == 307
    assert [r.url.host for r in rec.seen] == ["api.anthropic.com"]


def test_a_non_httpx_failure_still_ends_the_exchange() -> None:
    t, _ = anthropic(RuntimeError("handler bug"))
    with t, pytest.raises(errors.NetworkError, match="RuntimeError: handler bug") as caught:
        t.create(REQUEST)
    assert caught.value.__cause__ is None
    assert caught.value.__context__ is None
    assert (t.exchange.phase, t.exchange.last_outcome) == ("idle", "err")


def test_exchange_can_be_driven_step_by_step() -> None:
    t, _ = anthropic()
    with t:
        out = t.exchange.send(REQUEST)
        assert out.path == "/v1/messages"
        t.exchange.receive(200, {}, orjson.dumps(messages_body()))
        assert t.exchange.deliver()["content"][0]["text"] == "hello"
        with pytest.raises(errors.ExchangeStateError):
            t.exchange.deliver()


# -- secrets ------------------------------------------------------------------------------------


def test_secrets_absent_from_repr_str_errors_and_logs(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    echo = {"type": "error", "error": {"type": "authentication_error", "message": f"bad {KEY}"}}
    t, _ = anthropic(ok(messages_body()), ok(echo, 401), httpx2.ReadError(f"reset {KEY}"))
    u, _ = tpx_(ok({"error": {"message": f"token {TOKEN} expired"}}, 401))
    raised: list[errors.ModelError] = []
    with t, u:
        t.create(REQUEST)
        for transport in (t, t, u):
            with pytest.raises(errors.ModelError) as info:
                transport.create(REQUEST)
            raised.append(info.value)
        texts = [repr(t), str(t), repr(u), str(u), repr(t.exchange), repr(u.exchange)]
    for error in raised:
        texts += [str(error), repr(error), error.message, orjson.dumps(error.body()).decode()]
    texts.append(caplog.text)
    assert any("[REDACTED]" in text for text in texts)
    assert "HTTP 401" in caplog.text
    for text in texts:
        assert KEY not in text
        assert TOKEN not in text


def test_config_objects_do_not_render_secrets() -> None:
    with boot(api_key=KEY, env={}) as t:
        assert "credentials=<redacted>" in repr(t)
        assert KEY not in repr(attrs.asdict(t, recurse=False).get("_secret"))


# -- async ---------------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_async_anthropic_exchange() -> None:
    rec = Recorder([ok(messages_body("toolu_9"))])
    async with aboot(api_key=KEY, env={}, transport=httpx2.MockTransport(rec.handle_async)) as t:
        assert isinstance(t, AsyncTransport)
        reply = await t.create(REQUEST)
    assert reply["content"][1]["id"] == "toolu_9"
    assert rec.seen[0].headers["x-api-key"] == KEY
    assert "authorization" not in rec.seen[0].headers
    assert t.exchange.pending == {"toolu_9"}


@pytest.mark.anyio
async def test_async_tpx_exchange_and_errors() -> None:
    rec = Recorder(
        [
            ok(chat_body("c1")),
            ok({"error": {"message": "busy"}}, 529, **{"retry-after": "1"}),
            httpx2.ReadTimeout("slow"),
        ]
    )
    async with aboot(
        oauth_token=TOKEN,
        tpx_base_url=TPX_URL,
        env={},
        transport=httpx2.MockTransport(rec.handle_async),
    ) as t:
        first = await t.create(REQUEST)
        tool_id = first["content"][0]["id"]
        assert t.exchange.pending == {tool_id}
        with pytest.raises(errors.PairingError):
            await t.create(REQUEST)
        with pytest.raises(errors.OverloadedError) as info:
            await t.create(REQUEST)
        assert info.value.retry_after == 1.0
        with pytest.raises(errors.TimeoutError):
            await t.create(REQUEST)
    assert rec.seen[0].headers["authorization"] == f"Bearer {TOKEN}"
    assert "x-api-key" not in rec.seen[0].headers
    assert len(rec.seen) == 3
    assert (t.exchange.turn, t.exchange.last_outcome) == (4, "err")


@pytest.mark.anyio
async def test_async_injected_client_is_used_and_not_closed() -> None:
    rec = Recorder([ok(messages_body())])
    async with httpx2.AsyncClient(transport=httpx2.MockTransport(rec.handle_async)) as client:
        t = aboot(api_key=KEY, env={}, client=client)
        await t.create(REQUEST)
        await t.aclose()
        assert not client.is_closed
    assert len(rec.seen) == 1


@pytest.mark.anyio
async def test_cancellation_mid_request_returns_the_exchange_to_idle() -> None:
    started = anyio.Event()

    async def hang(request: httpx2.Request) -> httpx2.Response:
        started.set()
        await anyio.sleep_forever()
        raise AssertionError("unreachable")

    async with aboot(api_key=KEY, env={}, transport=httpx2.MockTransport(hang)) as t:
        async with anyio.create_task_group() as tg:
            tg.start_soon(t.create, REQUEST)
            await started.wait()
            assert t.exchange.phase == "req"
            tg.cancel_scope.cancel()
        assert (t.exchange.phase, t.exchange.last_outcome) == ("idle", "err")


# -- the docstring example ------------------------------------------------------------------------


def test_module_docstring_example_runs() -> None:
    doc = tpx.transport.client.__doc__
    assert doc is not None
    example = textwrap.dedent(doc.split("::\n", 1)[1].split("\nCredentials never", 1)[0])
    exec(compile(example, "tpx.transport docstring", "exec"), {})


# -- step-level methods: begin / roundtrip / finish ------------------------------------------


def test_steps_are_the_spec_actions_one_at_a_time() -> None:
    t, rec = tpx_(ok(chat_body("call_a")))
    with t:
        http_request = t.begin(REQUEST)  # CallerSend: built, not sent
        assert rec.seen == []
        assert t.exchange.phase == "req"
        assert http_request.url == httpx2.URL(TPX_URL + "/v1/chat/completions")
        assert http_request.headers["authorization"] == f"Bearer {TOKEN}"
        assert "x-api-key" not in http_request.headers
        assert t.exchange.enabled_actions() == {"ProviderReply", "ProviderFail"}
        t.roundtrip(http_request)  # ProviderReply
        assert len(rec.seen) == 1
        assert rec.seen[0].content == http_request.content
        assert (t.exchange.phase, t.exchange.turn) == ("resp", 0)
        body = t.finish()  # Deliver
        assert body["type"] == "message"
        assert [b["type"] for b in body["content"]] == ["tool_use"]
        assert (t.exchange.phase, t.exchange.turn, t.exchange.last_outcome) == ("idle", 1, "ok")
        assert len(t.exchange.pending) == 1


def test_begin_without_provider_is_no_provider_and_touches_nothing() -> None:
    with boot(env={}, transport=httpx2.MockTransport(never_called)) as t:
        with pytest.raises(errors.UnauthorizedError):
            t.begin(REQUEST)
        assert (t.exchange.turn, t.exchange.last_outcome) == (1, "err")


def test_begin_with_unanswered_tool_use_aborts_and_builds_nothing() -> None:
    t, rec = anthropic(ok(messages_body("toolu_1")))
    with t:
        t.create(REQUEST)
        with pytest.raises(errors.PairingError):
            t.begin(REQUEST)  # answers nothing: CallerAbort
        assert len(rec.seen) == 1
        assert (t.exchange.phase, t.exchange.turn, t.exchange.pending) == ("idle", 2, frozenset())


@pytest.mark.parametrize(
    ("reply", "error"),
    [
        (ok({"error": {"message": "slow down"}}, status=429), errors.RateLimitedError),
        (httpx2.ConnectError("refused"), errors.NetworkError),
        (httpx2.ReadTimeout("slow"), errors.TimeoutError),
        (httpx2.Response(200, content=b"<html>"), errors.ProtocolError),
    ],
)
def test_roundtrip_failure_is_provider_fail(
    reply: httpx2.Response | Exception, error: type[errors.ModelError]
) -> None:
    t, _ = anthropic(reply)
    with t:
        http_request = t.begin(REQUEST)
        with pytest.raises(error):
            t.roundtrip(http_request)
        assert (t.exchange.phase, t.exchange.turn, t.exchange.last_outcome) == ("idle", 1, "err")
        with pytest.raises(errors.ExchangeStateError):
            t.finish()


def test_steps_out_of_order_are_refused_without_change() -> None:
    t, rec = anthropic(ok(messages_body()))
    with t:
        stray = t.client.build_request("POST", "https://api.anthropic.com/v1/messages")
        with pytest.raises(errors.ExchangeStateError):
            t.roundtrip(stray)  # no begin() yet
        with pytest.raises(errors.ExchangeStateError):
            t.finish()
        assert rec.seen == []
        http_request = t.begin(REQUEST)
        with pytest.raises(errors.ExchangeStateError):
            t.begin(REQUEST)  # already mid-exchange
        with pytest.raises(errors.ExchangeStateError):
            t.finish()  # nothing received yet
        t.roundtrip(http_request)
        with pytest.raises(errors.ExchangeStateError):
            t.roundtrip(http_request)
        assert t.finish()["content"][0]["text"] == "hello"
        assert len(rec.seen) == 1


def test_halted_exchange_refuses_begin() -> None:
    t, rec = anthropic(ok(messages_body()), max_turns=1)
    with t:
        t.create(REQUEST)
        assert t.exchange.halted
        with pytest.raises(errors.ExchangeStateError):
            t.begin(REQUEST)
        assert len(rec.seen) == 1
        assert t.exchange.turn == 1


# -- the observer: the spec's actions as the transport takes them ----------------------------


@attrs.define
class Seen:
    """An observer recording each action, its snapshot and how many requests had gone out."""

    rec: Recorder | None = None
    calls: list[tuple[str, ExchangeSnapshot, int]] = attrs.field(factory=list)
    raise_at: str | None = None

    def __call__(self, action: str, snapshot: ExchangeSnapshot) -> None:
        self.calls.append((action, snapshot, len(self.rec.seen) if self.rec else 0))
        if action == self.raise_at:
            raise Boom(action)

    @property
    def actions(self) -> list[str]:
        return [action for action, _, _ in self.calls]


class Boom(Exception):
    pass


def observed(
    provider: str, *replies: httpx2.Response | Exception, **kw: Any
) -> tuple[Transport, Recorder, Seen]:
    rec = Recorder(list(replies))
    seen = Seen(rec)
    creds: dict[str, Any] = {"api_key": KEY} if provider == "anthropic" else {"oauth_token": TOKEN}
    t = boot(
        **creds,
        tpx_base_url=TPX_URL,
        env={},
        transport=httpx2.MockTransport(rec),
        observer=seen,
        **kw,
    )
    return t, rec, seen


def reply_for(provider: str, *ids: str, status: int = 200) -> httpx2.Response:
    return ok(messages_body(*ids) if provider == "anthropic" else chat_body(*ids), status=status)


@pytest.mark.parametrize("provider", ["anthropic", "tpx"])
def test_create_is_observed_as_caller_send_provider_reply_deliver(provider: str) -> None:
    t, _, seen = observed(provider, reply_for(provider, "id_1"))
    with t:
        body = t.create(REQUEST)
    assert seen.actions == ["CallerSend", "ProviderReply", "Deliver"]
    (_, sent, out_at_send), (_, replied, _), (_, delivered, _) = seen.calls
    assert out_at_send == 0  # CallerSend is observed before a byte goes out
    assert (sent.phase, replied.phase, delivered.phase) == ("req", "resp", "idle")
    assert delivered == t.exchange.snapshot()
    assert delivered.pending == {b["id"] for b in body["content"] if b["type"] == "tool_use"}


@pytest.mark.parametrize(
    "reply",
    [
        ok({"error": {"message": "down"}}, status=500),
        httpx2.ConnectError("refused"),
        httpx2.ReadTimeout("slow"),
        httpx2.Response(200, content=b"<html>"),
        RuntimeError("handler bug"),
    ],
)
@pytest.mark.parametrize("provider", ["anthropic", "tpx"])
def test_failed_create_is_observed_as_caller_send_provider_fail(
    provider: str, reply: httpx2.Response | Exception
) -> None:
    t, _, seen = observed(provider, reply)
    with t, pytest.raises((errors.ModelError, RuntimeError)):
        t.create(REQUEST)
    assert seen.actions == ["CallerSend", "ProviderFail"]
    assert seen.calls[-1][1] == t.exchange.snapshot()


def test_no_provider_and_caller_abort_are_observed_without_network() -> None:
    seen = Seen()
    t = boot(env={}, transport=httpx2.MockTransport(never_called), observer=seen)
    with t, pytest.raises(errors.UnauthorizedError):
        t.create(REQUEST)
    assert seen.actions == ["NoProvider"]
    t, rec, seen = observed("anthropic", reply_for("anthropic", "toolu_1"))
    with t:
        t.create(REQUEST)
        with pytest.raises(errors.PairingError):
            t.create(REQUEST)  # toolu_1 unanswered
    assert seen.actions == ["CallerSend", "ProviderReply", "Deliver", "CallerAbort"]
    assert len(rec.seen) == 1


def test_refused_steps_are_not_observed() -> None:
    t, _, seen = observed("anthropic", reply_for("anthropic"), max_turns=1)
    with t:
        with pytest.raises(errors.ExchangeStateError):
            t.finish()
        http_request = t.begin(REQUEST)
        with pytest.raises(errors.ExchangeStateError):
            t.begin(REQUEST)  # already mid-exchange
        t.roundtrip(http_request)
        with pytest.raises(errors.ExchangeStateError):
            t.roundtrip(http_request)
        t.finish()
        with pytest.raises(errors.ExchangeStateError):
            t.create(REQUEST)  # halted
    assert seen.actions == ["CallerSend", "ProviderReply", "Deliver"]


def tool_use_block(tool_id: str) -> dict[str, Any]:
    return {"type": "tool_use", "id": tool_id, "name": "calc", "input": {}}


@pytest.mark.anyio
@pytest.mark.parametrize("provider", ["anthropic", "tpx"])
async def test_async_create_is_observed(provider: str) -> None:
    seen = Seen()
    rec = Recorder([reply_for(provider, "id_1"), ok({"error": {"message": "x"}}, status=503)])
    creds: dict[str, Any] = {"api_key": KEY} if provider == "anthropic" else {"oauth_token": TOKEN}
    async with aboot(
        **creds, tpx_base_url=TPX_URL, env={}, transport=httpx2.MockTransport(rec), observer=seen
    ) as t:
        await t.create(REQUEST)
        assert seen.actions == ["CallerSend", "ProviderReply", "Deliver"]
        pending = sorted(t.exchange.pending)
        follow = {
            **REQUEST,
            "messages": [
                *REQUEST["messages"],
                {"role": "assistant", "content": [tool_use_block(i) for i in pending]},
                {
                    "role": "user",
                    "content": [
                        {"type": "tool_result", "tool_use_id": i, "content": "1"} for i in pending
                    ],
                },
            ],
        }
        with pytest.raises(errors.OverloadedError):
            await t.create(follow)
    assert seen.actions[3:] == ["CallerSend", "ProviderFail"]


def test_observer_raising_at_caller_send_fails_the_exchange_and_sends_nothing() -> None:
    t, rec, seen = observed("anthropic", reply_for("anthropic"))
    seen.raise_at = "CallerSend"
    with t:
        with pytest.raises(Boom):
            t.create(REQUEST)
        assert rec.seen == []
        assert seen.actions == ["CallerSend", "ProviderFail"]  # never left in "req"
        assert (t.exchange.phase, t.exchange.turn, t.exchange.last_outcome) == ("idle", 1, "err")
        seen.raise_at = None
        assert t.create(REQUEST)["type"] == "message"  # the next exchange runs as usual


def test_observer_raising_at_provider_reply_keeps_the_reply_for_finish() -> None:
    t, _, seen = observed("tpx", reply_for("tpx", "call_1"), reply_for("tpx"))
    seen.raise_at = "ProviderReply"
    with t:
        with pytest.raises(Boom):
            t.create(REQUEST)
        assert t.exchange.phase == "resp"
        body = t.finish()  # the reply is not lost
        assert [b["type"] for b in body["content"]] == ["tool_use"]
        assert seen.actions == ["CallerSend", "ProviderReply", "Deliver"]
        assert t.exchange.pending == {body["content"][0]["id"]}


@pytest.mark.parametrize("provider", ["anthropic", "tpx"])
def test_observer_exception_at_provider_fail_is_not_chained_to_the_httpx_error(
    provider: str,
) -> None:
    secret = KEY if provider == "anthropic" else TOKEN
    t, _, seen = observed(provider, httpx2.ConnectError(f"refused, credential {secret}"))
    seen.raise_at = "ProviderFail"
    with t, pytest.raises(Boom) as info:
        t.create(REQUEST)
    assert info.value.__context__ is None
    assert info.value.__cause__ is None
    assert isinstance(t.exchange.last_error, errors.NetworkError)
    assert secret not in t.exchange.last_error.message


def test_observer_exception_after_a_build_failure_is_not_chained_to_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def build(self: Any, client: Any, out: Any) -> Any:
        raise ValueError(f"bad header value {KEY}")

    monkeypatch.setattr(tpx.transport.client._Core, "_build", build)
    t, rec, seen = observed("anthropic")
    seen.raise_at = "ProviderFail"
    with t, pytest.raises(Boom) as info:
        t.create(REQUEST)
    assert (info.value.__context__, info.value.__cause__) == (None, None)
    assert seen.actions == ["CallerSend", "ProviderFail"]
    assert rec.seen == []


@pytest.mark.parametrize("provider", ["anthropic", "tpx"])
def test_the_observer_sees_no_credentials(provider: str) -> None:
    t, _, seen = observed(
        provider, reply_for(provider, "id_1"), ok({"error": {"message": KEY + TOKEN}}, status=401)
    )
    with t:
        t.create(REQUEST)
        with pytest.raises(errors.PairingError):
            t.create(REQUEST)
        http_request = t.begin(REQUEST)
        with pytest.raises(errors.UnauthorizedError):
            t.roundtrip(http_request)
    assert seen.actions[-2:] == ["CallerSend", "ProviderFail"]
    for action, snapshot, _ in seen.calls:
        shown = action + repr(snapshot) + repr(attrs.asdict(snapshot))
        assert KEY not in shown
        assert TOKEN not in shown


# -- a user turn split over consecutive user messages ---------------------------------------


def _split_turn(uses: list[dict[str, Any]], layout: str) -> list[dict[str, Any]]:
    """The user turn answering *uses*, spread over consecutive user messages."""
    results = [{"type": "tool_result", "tool_use_id": u["id"], "content": "r"} for u in uses]
    if layout == "results_then_text":
        return [{"role": "user", "content": results}, {"role": "user", "content": "and more"}]
    if layout == "text_then_results":
        return [{"role": "user", "content": "first"}, {"role": "user", "content": results}]
    return [  # one result per message, text in between
        {"role": "user", "content": [results[0], {"type": "text", "text": "middle"}]},
        {"role": "user", "content": results[1:]},
    ]


@pytest.mark.parametrize("provider", ["anthropic", "tpx"])
@pytest.mark.parametrize("layout", ["results_then_text", "text_then_results", "spread"])
def test_tool_results_over_consecutive_user_messages_answer_the_pending_tool_uses(
    provider: str, layout: str
) -> None:
    if provider == "anthropic":
        t, rec = anthropic(ok(messages_body("toolu_1", "toolu_2")), ok(messages_body()))
    else:
        t, rec = tpx_(ok(chat_body("call_1", "call_2")), ok(chat_body()))
    with t:
        first = t.create(REQUEST)
        uses = [b for b in first["content"] if b["type"] == "tool_use"]
        turn = _split_turn(uses, layout)
        follow = {
            **REQUEST,
            "messages": [*REQUEST["messages"], {"role": "assistant", "content": uses}, *turn],
        }
        t.create(follow)
        assert (t.exchange.turn, t.exchange.last_outcome) == (2, "ok")
        assert t.exchange.snapshot().req_ids == {u["id"] for u in uses}
    wire = rec.json(1)["messages"]
    if provider == "anthropic":
        assert wire == follow["messages"]  # sent as the caller wrote it
        return
    assert [c["id"] for c in wire[1]["tool_calls"]] == ["call_1", "call_2"]
    # the tool messages right after the assistant message, then the run's other content
    assert [(m["role"], m.get("tool_call_id")) for m in wire[2:4]] == [
        ("tool", "call_1"),
        ("tool", "call_2"),
    ]
    text = {"results_then_text": "and more", "text_then_results": "first", "spread": "middle"}
    assert wire[4:] == [{"role": "user", "content": text[layout]}]


def test_a_missing_result_in_a_split_turn_is_still_a_pairing_error() -> None:
    t, rec = anthropic(ok(messages_body("toolu_1", "toolu_2")))
    with t:
        first = t.create(REQUEST)
        uses = [b for b in first["content"] if b["type"] == "tool_use"]
        follow = {
            **REQUEST,
            "messages": [
                *REQUEST["messages"],
                {"role": "assistant", "content": uses},
                {
                    "role": "user",
                    "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "r"}],
                },
                {"role": "user", "content": "toolu_2 is not answered"},
            ],
        }
        with pytest.raises(errors.PairingError, match="toolu_2"):
            t.create(follow)
    assert len(rec.seen) == 1


# -- serialisation never carries the credential ------------------------------------------


@pytest.mark.parametrize("provider", ["anthropic", "tpx"])
def test_transports_and_exchanges_refuse_pickle_and_copy(provider: str) -> None:
    t, _ = anthropic() if provider == "anthropic" else tpx_()
    secret = KEY if provider == "anthropic" else TOKEN
    with t:
        for obj in (t, t.exchange, t._secret):
            for serialise in (pickle.dumps, copy.copy, copy.deepcopy):
                with pytest.raises(TypeError, match="cannot be pickled or copied") as info:
                    serialise(obj)
                assert secret not in str(info.value)
        as_dict = attrs.asdict(t)
        as_tuple = attrs.astuple(t)
        assert secret not in repr(as_dict)
        assert secret not in repr(as_tuple)
        assert repr(as_dict["_secret"]) == "<redacted>"
        assert not attrs.has(type(t._secret))
        with pytest.raises(TypeError):
            pickle.dumps(as_dict)
        # the snapshot is the credential-free, picklable state
        snapshot = pickle.loads(pickle.dumps(t.exchange.snapshot()))
        assert snapshot == t.exchange.snapshot()


# -- input checks at boot -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "names"),
    [
        ({"api_key": 123}, "api_key"),
        ({"api_key": b"sk-bytes-key"}, "api_key"),
        ({"oauth_token": 4.5, "tpx_base_url": TPX_URL}, "oauth_token"),
        ({"api_key": KEY, "anthropic_base_url": 7}, "anthropic_base_url"),
        ({"oauth_token": TOKEN, "tpx_base_url": ["https://x.test"]}, "tpx_base_url"),
        ({"oauth_token": TOKEN, "tpx_base_url": TPX_URL, "model": 1}, "model"),
        ({"env": {"ANTHROPIC_API_KEY": 99}}, "ANTHROPIC_API_KEY"),
        ({"env": "ANTHROPIC_API_KEY=x"}, "env"),
    ],
)
def test_non_string_settings_are_a_configuration_error(kwargs: dict[str, Any], names: str) -> None:
    settings = {"env": {}, **kwargs}
    with pytest.raises(errors.ConfigurationError, match=names) as info:
        boot(**settings)
    assert "123" not in str(info.value)
    assert "sk-bytes-key" not in str(info.value)
    with pytest.raises(errors.ConfigurationError, match=names):
        aboot(**settings)


@pytest.mark.parametrize(
    "url",
    [
        "https://h .test",
        "https://h%20.test",
        "https://h\u3000x.test",
        "https://h.test/a b",
        "https://h<x>.test",
        "https://h\u00a0.test",
    ],
)
def test_base_urls_with_spaces_or_bad_hosts_are_refused(url: str) -> None:
    with pytest.raises(errors.ConfigurationError, match="TPX_BASE_URL"):
        boot(oauth_token=TOKEN, tpx_base_url=url, env={})
    with pytest.raises(errors.ConfigurationError, match="ANTHROPIC_BASE_URL"):
        boot(api_key=KEY, anthropic_base_url=url, env={})


@pytest.mark.parametrize(
    "url",
    ["https://[::1]:8443/v1", "http://127.0.0.1:8080", "https://bücher.test", "https://a_b.test"],
)
def test_ordinary_hosts_are_still_accepted(url: str) -> None:
    with boot(oauth_token=TOKEN, tpx_base_url=url, env={}) as t:
        assert t.base_url is not None
        assert t.base_url.startswith("http")


def test_receive_accepts_none_as_no_headers() -> None:
    ex = Exchange(Provider.ANTHROPIC)
    ex.send(REQUEST)
    with pytest.raises(errors.RateLimitedError) as info:
        ex.receive(429, None, b"{}")
    assert info.value.retry_after is None
    assert (ex.phase, ex.last_outcome) == ("idle", "err")
    ex.send(REQUEST)
    ex.receive(200, None, orjson.dumps(messages_body()))
    assert ex.deliver()["content"][0]["text"] == "hello"
    ex.send({**REQUEST, "stream": True})
    with pytest.raises(errors.OverloadedError):
        ex.receive_stream_start(529, None, b"{}")
    ex.send(REQUEST)
    for status, headers in (("200", {}), (200, [("a", "b")]), (True, {})):
        with pytest.raises(TypeError):
            ex.receive(status, headers, b"{}")  # type: ignore[arg-type]
        assert ex.phase == "req"  # nothing changed


# -- a refused request that quotes the credential ------------------------------------------


_ROLE = {"model": "m", "max_tokens": 8, "messages": [{"role": "{}", "content": "hi"}]}
_ANSWER = {
    "model": "m",
    "max_tokens": 8,
    "messages": [
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "{}", "content": "x"}]}
    ],
}


@pytest.mark.parametrize(
    ("provider", "request_body"),
    [("TPX", _ROLE), ("ANTHROPIC", _ANSWER), ("TPX", _ANSWER)],
    ids=["role-TPX", "tool_use_id-ANTHROPIC", "tool_use_id-TPX"],
)
def test_a_refusal_quoting_the_whole_credential_is_withheld_whole(
    provider: str, request_body: dict[str, Any]
) -> None:
    secret = KEY if provider == "ANTHROPIC" else TOKEN
    t, rec = anthropic(ok({})) if provider == "ANTHROPIC" else tpx_(ok({}))
    leaky = orjson.loads(orjson.dumps(request_body).replace(b"{}", secret.encode()))
    with t, pytest.raises(errors.ModelError) as caught:
        t.create(leaky)
    shown = str(caught.value) + repr(caught.value) + orjson.dumps(caught.value.body()).decode()
    assert secret not in shown
    assert errors.WITHHELD in shown
    assert caught.value.__cause__ is None
    assert caught.value.__context__ is None
    assert rec.seen == []
    # a guess that is not the whole credential is quoted as any other input is
    guess = orjson.loads(orjson.dumps(request_body).replace(b"{}", secret[:-1].encode()))
    with t, pytest.raises(errors.ModelError) as other:
        t.create(guess)
    assert errors.WITHHELD not in str(other.value)
