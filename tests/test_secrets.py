"""Credentials never escape: not through exception chains, reprs, logs, bodies or bad values.

Every failure path (sync ``create`` / ``roundtrip`` / ``stream``, async ``create`` /
``stream``, both providers) is driven with an httpx2 exception whose message carries the
credential and whose ``.request.headers`` carry it too, and the :class:`ModelError` the
caller gets is checked the way a caller would leak it: ``traceback.format_exception``,
``logging.exception``, ``repr`` / ``str`` / ``.body()``, and its ``__cause__`` /
``__context__``.
"""

from __future__ import annotations

import logging
import socket
import traceback
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import httpx2
import orjson
import pytest

import tpx.transport._config
from tpx import errors
from tpx.errors import redact, secret_forms
from tpx.transport import AsyncTransport, Transport, aboot, boot

KEY = "sk-ant-api03-KEY-SECRET-abcdef"
TOKEN = "oauth-TOKEN-SECRET-123456"
TPX_URL = "https://tpx.example.test"
REQUEST: dict[str, Any] = {
    "model": "claude-test",
    "max_tokens": 32,
    "messages": [{"role": "user", "content": "hi"}],
}
MESSAGES_REPLY: dict[str, Any] = {
    "id": "msg_1",
    "type": "message",
    "role": "assistant",
    "model": "claude-test",
    "content": [{"type": "text", "text": "hello"}],
    "stop_reason": "end_turn",
    "stop_sequence": None,
    "usage": {"input_tokens": 3, "output_tokens": 1},
}
CHAT_REPLY: dict[str, Any] = {
    "id": "chatcmpl-1",
    "object": "chat.completion",
    "model": "tpx-model",
    "choices": [
        {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "hi"}}
    ],
    "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4},
}
PROVIDERS = ["anthropic", "tpx"]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _secret(provider: str) -> str:
    return KEY if provider == "anthropic" else TOKEN


def _header(provider: str) -> tuple[str, str]:
    return ("x-api-key", KEY) if provider == "anthropic" else ("authorization", f"Bearer {TOKEN}")


def _ok(provider: str) -> httpx2.Response:
    return httpx2.Response(200, json=MESSAGES_REPLY if provider == "anthropic" else CHAT_REPLY)


def _sse(provider: str) -> bytes:
    """The first events of a stream (never completed: the connection breaks after them)."""
    if provider == "anthropic":
        start = {"type": "message_start", "message": {**MESSAGES_REPLY, "content": []}}
        return b"event: message_start\ndata: " + orjson.dumps(start) + b"\n\n"
    chunk = {
        "id": "c",
        "object": "chat.completion.chunk",
        "model": "m",
        "choices": [{"index": 0, "delta": {"role": "assistant", "content": "par"}}],
    }
    return b"data: " + orjson.dumps(chunk) + b"\n\n"


class _Broken(httpx2.SyncByteStream, httpx2.AsyncByteStream):
    """A streamed body that yields *data* and then fails with *error*."""

    def __init__(self, data: bytes, error: Exception) -> None:
        self.data = data
        self.error = error

    def __iter__(self) -> Iterator[bytes]:
        yield self.data
        raise self.error

    async def __aiter__(self) -> AsyncIterator[bytes]:
        yield self.data
        raise self.error


class _Handler:
    """MockTransport handler: raises (or streams then raises) a secret-bearing ReadError.

    ``where`` is ``"send"`` (the request fails) or ``"body"`` (a 200 event stream whose
    connection breaks after the first event). The raised exception is kept so the test
    can show that it *does* carry the credential (message and request headers).
    """

    def __init__(self, provider: str, where: str) -> None:
        self.provider = provider
        self.where = where
        self.raised: httpx2.ReadError | None = None

    def _error(self, request: httpx2.Request) -> httpx2.ReadError:
        self.raised = httpx2.ReadError(f"reset {_secret(self.provider)}", request=request)
        return self.raised

    def __call__(self, request: httpx2.Request) -> httpx2.Response:
        if self.where == "send":
            raise self._error(request)
        body = _Broken(_sse(self.provider), self._error(request))
        return httpx2.Response(200, headers={"content-type": "text/event-stream"}, stream=body)

    async def handle_async(self, request: httpx2.Request) -> httpx2.Response:
        await request.aread()
        return self(request)


def _boot(provider: str, handler: Callable[..., Any]) -> Transport:
    transport = httpx2.MockTransport(handler)
    if provider == "anthropic":
        return boot(api_key=KEY, env={}, transport=transport)
    return boot(oauth_token=TOKEN, tpx_base_url=TPX_URL, env={}, transport=transport)


def _aboot(provider: str, handler: Callable[..., Any]) -> AsyncTransport:
    transport = httpx2.MockTransport(handler)
    if provider == "anthropic":
        return aboot(api_key=KEY, env={}, transport=transport)
    return aboot(oauth_token=TOKEN, tpx_base_url=TPX_URL, env={}, transport=transport)


async def _drain(stream: AsyncIterator[bytes], into: list[bytes]) -> None:
    async for data in stream:
        into.append(data)


def _assert_no_leak(
    error: errors.ModelError,
    secret: str,
    caplog: pytest.LogCaptureFixture,
    streamed: bytes = b"",
) -> None:
    """*error* as a caller would render or log it holds no form of *secret*."""
    assert error.__cause__ is None
    assert error.__context__ is None
    logging.getLogger("tests.caller").exception("the model call failed", exc_info=error)
    texts = [
        "".join(traceback.format_exception(error)),
        repr(error),
        str(error),
        error.message,
        orjson.dumps(error.body()).decode(),
        caplog.text,
        streamed.decode("utf-8", "replace"),
    ]
    for text in texts:
        for form in secret_forms([secret]):
            assert form not in text, text
    assert "ReadError" in error.message  # the useful, non-secret part is kept
    assert "[REDACTED]" in error.message


def _assert_evidence(handler: _Handler) -> None:
    """The httpx2 exception really did carry the credential (so the test means something)."""
    raised = handler.raised
    assert raised is not None
    name, value = _header(handler.provider)
    assert raised.request.headers[name] == value
    assert _secret(handler.provider) in str(raised)


# -- finding 1: the exception chain -----------------------------------------------------


@pytest.mark.parametrize("provider", PROVIDERS)
def test_sync_create_error_is_not_chained_to_the_httpx_exception(
    provider: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    handler = _Handler(provider, "send")
    with _boot(provider, handler) as t, pytest.raises(errors.NetworkError) as info:
        t.create(REQUEST)
    _assert_evidence(handler)
    _assert_no_leak(info.value, _secret(provider), caplog)
    assert (t.exchange.phase, t.exchange.last_outcome) == ("idle", "err")


@pytest.mark.parametrize("provider", PROVIDERS)
def test_sync_roundtrip_error_is_not_chained(
    provider: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    handler = _Handler(provider, "send")
    with _boot(provider, handler) as t:
        http_request = t.begin(REQUEST)
        with pytest.raises(errors.NetworkError) as info:
            t.roundtrip(http_request)
    _assert_evidence(handler)
    _assert_no_leak(info.value, _secret(provider), caplog)


@pytest.mark.parametrize("where", ["send", "body"])
@pytest.mark.parametrize("provider", PROVIDERS)
def test_sync_stream_error_is_not_chained(
    provider: str, where: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    handler = _Handler(provider, where)
    got: list[bytes] = []
    with _boot(provider, handler) as t, pytest.raises(errors.NetworkError) as info:
        got.extend(t.stream(REQUEST))
    _assert_evidence(handler)
    streamed = b"".join(got)
    if where == "body":  # the caller got the first event and then the error event
        assert b"event: error" in streamed
    _assert_no_leak(info.value, _secret(provider), caplog, streamed)
    assert (t.exchange.phase, t.exchange.last_outcome) == ("idle", "err")


@pytest.mark.anyio
@pytest.mark.parametrize("provider", PROVIDERS)
async def test_async_create_error_is_not_chained(
    provider: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    handler = _Handler(provider, "send")
    async with _aboot(provider, handler.handle_async) as t:
        with pytest.raises(errors.NetworkError) as info:
            await t.create(REQUEST)
    _assert_evidence(handler)
    _assert_no_leak(info.value, _secret(provider), caplog)
    assert (t.exchange.phase, t.exchange.last_outcome) == ("idle", "err")


@pytest.mark.anyio
@pytest.mark.parametrize("where", ["send", "body"])
@pytest.mark.parametrize("provider", PROVIDERS)
async def test_async_stream_error_is_not_chained(
    provider: str, where: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    handler = _Handler(provider, where)
    got: list[bytes] = []
    async with _aboot(provider, handler.handle_async) as t:
        with pytest.raises(errors.NetworkError) as info:
            await _drain(t.stream(REQUEST), got)
    _assert_evidence(handler)
    _assert_no_leak(info.value, _secret(provider), caplog, b"".join(got))
    assert (t.exchange.phase, t.exchange.last_outcome) == ("idle", "err")


def test_error_raised_inside_a_callers_handler_chains_only_to_the_callers_exception() -> None:
    handler = _Handler("anthropic", "send")
    own = LookupError("the caller's own failure")
    with _boot("anthropic", handler) as t:
        try:
            raise own
        except LookupError:
            with pytest.raises(errors.NetworkError) as info:
                t.create(REQUEST)
    assert info.value.__context__ is own  # Python's doing; nothing of ours
    assert info.value.__cause__ is None


# -- finding 2: credentials that cannot be sent -------------------------------------------


@pytest.mark.parametrize(
    "bad",
    ["tok\nSECRET-XYZ", "tok-é-SECRET", "tok SECRET", "tok\tSECRET", "tok\x00SECRET", "tok\x7fS"],
)
@pytest.mark.parametrize("provider", PROVIDERS)
def test_bad_credentials_are_refused_at_boot_without_echoing_them(provider: str, bad: str) -> None:
    forms = secret_forms([bad])
    for explicit in (True, False):
        if provider == "anthropic":
            name, argument = "ANTHROPIC_API_KEY", "api_key"
        else:
            name, argument = "TPX_OAUTH_TOKEN", "oauth_token"
        env = {"TPX_BASE_URL": TPX_URL}
        kwargs: dict[str, Any] = {"env": env}
        if explicit:
            kwargs[argument] = bad
        else:
            env[name] = bad
        for start in (boot, aboot):
            with pytest.raises(errors.ConfigurationError) as info:
                start(**kwargs)
            text = "".join(traceback.format_exception(info.value)) + repr(info.value)
            assert (f"{argument}=" if explicit else name) in str(info.value)
            assert "SECRET" not in str(info.value)
            assert not any(form in text for form in forms)
            assert info.value.__cause__ is None
            assert info.value.__context__ is None


def test_surrounding_whitespace_is_still_stripped_and_the_unused_credential_not_checked() -> None:
    with boot(api_key=f"  {KEY}\n", env={"TPX_OAUTH_TOKEN": "bad token é"}) as t:
        assert t.provider.name == "ANTHROPIC"
        assert t._auth_headers() == {"x-api-key": KEY}


def test_redaction_covers_escaped_forms() -> None:
    secret = "tok\nSECRET-é"
    rendered = [
        f"Illegal header value {('Bearer ' + secret).encode('utf-8')!r}",
        f"value {secret!r}",
        orjson.dumps({"m": secret}).decode(),
        f"latin {secret.encode('latin-1')!r}",
        secret.encode("unicode_escape").decode(),
    ]
    for text in rendered:
        cleaned = redact(text, secret_forms([secret]))
        assert "SECRET" not in cleaned
        assert "[REDACTED]" in cleaned
    assert secret_forms([None, ""]) == ()
    assert "plain" in secret_forms(["plain"])


def _unchecked(monkeypatch: pytest.MonkeyPatch) -> None:
    """Boot without the credential check, to test the defences behind it."""
    monkeypatch.setattr(tpx.transport._config, "_credential_problem", lambda value: None)


def test_a_header_httpx_refuses_fails_the_exchange_without_leaking(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Non-ASCII: httpx2 raises UnicodeEncodeError (``.object`` holds the token) in build."""
    caplog.set_level(logging.DEBUG)
    _unchecked(monkeypatch)
    token = "tok-é-SECRET"
    with boot(oauth_token=token, tpx_base_url=TPX_URL, env={}) as t:
        for turn in (1, 2):  # never wedged: the second call fails the same way
            with pytest.raises(errors.NetworkError, match="UnicodeEncodeError") as info:
                t.create(REQUEST)
            assert (t.exchange.phase, t.exchange.turn, t.exchange.last_outcome) == (
                "idle",
                turn,
                "err",
            )
            text = "".join(traceback.format_exception(info.value)) + caplog.text
            assert not any(form in text for form in secret_forms([token]))
            assert "SECRET" not in text
            assert info.value.__cause__ is None
            assert info.value.__context__ is None


def test_a_control_character_refused_on_the_wire_is_redacted_in_every_form(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """h11 refuses ``\\n`` in a header: its message shows the bytes repr of the value."""
    _unchecked(monkeypatch)
    token = "tok\nSECRET-XYZ"
    server = socket.create_server(("127.0.0.1", 0))  # the kernel accepts: no thread needed
    url = f"http://127.0.0.1:{server.getsockname()[1]}"
    try:
        with boot(oauth_token=token, tpx_base_url=url, env={}, timeout=5.0) as t:
            with pytest.raises(errors.NetworkError) as info:
                t.create(REQUEST)
            assert (t.exchange.phase, t.exchange.last_outcome) == ("idle", "err")
    finally:
        server.close()
    error = info.value
    assert "LocalProtocolError" in error.message
    text = "".join(traceback.format_exception(error)) + repr(error) + str(error.body())
    assert "SECRET-XYZ" not in text
    assert "[REDACTED]" in error.message


class _Interrupt(BaseException):
    pass


@pytest.mark.parametrize("stream", [False, True])
def test_a_failure_while_building_the_request_returns_the_exchange_to_idle(
    monkeypatch: pytest.MonkeyPatch, stream: bool
) -> None:
    def reply(request: httpx2.Request) -> httpx2.Response:
        if not stream:
            return _ok("tpx")
        sse = _sse("tpx") + b"data: [DONE]\n\n"
        return httpx2.Response(200, headers={"content-type": "text/event-stream"}, content=sse)

    with _boot("tpx", reply) as t:
        real = t.client.build_request
        failures: list[BaseException] = [RuntimeError(f"boom {TOKEN}"), _Interrupt()]

        def build(*args: Any, **kwargs: Any) -> httpx2.Request:
            if failures:
                raise failures.pop(0)
            return real(*args, **kwargs)

        monkeypatch.setattr(t.client, "build_request", build)

        def run() -> Any:
            if stream:
                return next(t.stream(REQUEST))
            return t.create(REQUEST)

        with pytest.raises(errors.NetworkError, match="RuntimeError") as info:
            run()
        assert TOKEN not in str(info.value)
        assert info.value.__cause__ is None
        assert info.value.__context__ is None
        assert (t.exchange.phase, t.exchange.turn, t.exchange.last_outcome) == ("idle", 1, "err")
        with pytest.raises(_Interrupt):  # not an Exception: re-raised as it is, still idle
            run()
        assert (t.exchange.phase, t.exchange.turn, t.exchange.last_outcome) == ("idle", 2, "err")
        if stream:
            assert run().startswith(b"event: message_start")
        else:
            assert run()["content"] == [{"type": "text", "text": "hi"}]
            assert (t.exchange.turn, t.exchange.last_outcome) == (3, "ok")


@pytest.mark.anyio
async def test_async_failure_while_building_the_request_returns_the_exchange_to_idle(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async def reply(request: httpx2.Request) -> httpx2.Response:
        return _ok("anthropic")

    async with _aboot("anthropic", reply) as t:
        real = t.client.build_request
        failures = [RuntimeError("boom")]

        def build(*args: Any, **kwargs: Any) -> httpx2.Request:
            if failures:
                raise failures.pop(0)
            return real(*args, **kwargs)

        monkeypatch.setattr(t.client, "build_request", build)
        with pytest.raises(errors.NetworkError, match="RuntimeError"):
            await t.create(REQUEST)
        assert (t.exchange.phase, t.exchange.last_outcome) == ("idle", "err")
        assert (await t.create(REQUEST))["content"][0]["text"] == "hello"
        assert (t.exchange.turn, t.exchange.last_outcome) == (2, "ok")
