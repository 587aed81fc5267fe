"""An unforeseen exception of the HTTP client (a custom transport's own error) while the
request is built or sent: a documented, redacted, unchained tpx error, the same either way.

The transport below raises an exception whose text holds the credential (whole, or a
piece of it), as a custom transport that logs its request might. Whatever the path (both
providers; ``create`` and ``stream``; sync and async; raised while building or while
sending), the caller gets a :class:`~tpx.errors.NetworkError`: its text names the
exception's class, holds no part of the credential, and nothing in its chain
(``__cause__`` / ``__context__``, transitively) is the original exception.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import httpx2
import pytest

import tpx.transport
import tpx.transport.client
from tpx import errors
from tpx.errors import NetworkError, TpxError, redact

TOKEN = "sk-proj-Zx9Qw8Er7Ty6Ui5Op4As3Df2Gh1Jk0LzXcVbNmQwErTyUiOpAsDf"
KEY = "sk-ant-api03-Mn8Bv7Cx6Zl5Kj4Hg3Fd2Sa1Qp0Wo9Ei8Ru7Ty6Yu5Io4Pa3Sd"
REQUEST: dict[str, Any] = {
    "model": "m",
    "max_tokens": 16,
    "messages": [{"role": "user", "content": "hi"}],
}


class TransportBug(Exception):
    """A custom transport's own exception (not an httpx2 one)."""


class Raising(httpx2.BaseTransport, httpx2.AsyncBaseTransport):
    """Raises :class:`TransportBug` quoting the request's credential header."""

    def __init__(self, piece: slice) -> None:
        self.piece = piece

    def _fail(self, request: httpx2.Request) -> TransportBug:
        credential = request.headers.get("authorization") or request.headers["x-api-key"]
        credential = credential.removeprefix("Bearer ")
        return TransportBug(f"could not send {request.url}: header {credential[self.piece]}")

    def handle_request(self, request: httpx2.Request) -> httpx2.Response:
        raise self._fail(request)

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        raise self._fail(request)


def _boot(provider: str, piece: slice, asynchronous: bool) -> Any:
    boot = tpx.transport.aboot if asynchronous else tpx.transport.boot
    kwargs: dict[str, Any] = (
        {"api_key": KEY, "anthropic_base_url": "http://anthropic.test"}
        if provider == "ANTHROPIC"
        else {"oauth_token": TOKEN, "tpx_base_url": "http://upstream.test/v1"}
    )
    return boot(env={}, transport=Raising(piece), **kwargs)


def _chain(error: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    pending: list[BaseException | None] = [error]
    while pending:
        current = pending.pop()
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        yield current
        pending += [current.__cause__, current.__context__]


def raised(provider: str, how: str, piece: slice, asynchronous: bool) -> BaseException:
    """What the caller gets from *how* (``create`` / ``stream``) over the raising transport."""

    def sync() -> None:
        with _boot(provider, piece, False) as transport:
            if how == "create":
                transport.create(REQUEST)
            else:
                b"".join(transport.stream(REQUEST))

    async def run() -> None:
        async with _boot(provider, piece, True) as transport:
            if how == "create":
                await transport.create(REQUEST)
            else:
                [part async for part in transport.stream(REQUEST)]

    try:
        asyncio.run(run()) if asynchronous else sync()
    except BaseException as exc:
        return exc
    raise AssertionError("nothing was raised")


PIECES = {"whole": slice(None), "first-12": slice(0, 12), "middle-9": slice(20, 29)}


@pytest.mark.parametrize("piece", sorted(PIECES))
@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize("how", ["create", "stream"])
@pytest.mark.parametrize("provider", ["TPX", "ANTHROPIC"])
def test_a_send_failure_is_a_redacted_unchained_network_error(
    provider: str, how: str, asynchronous: bool, piece: str
) -> None:
    error = raised(provider, how, PIECES[piece], asynchronous)
    credential = TOKEN if provider == "TPX" else KEY
    assert isinstance(error, NetworkError), repr(error)
    assert "TransportBug" in str(error)
    assert error.__cause__ is None
    assert error.__context__ is None
    for link in _chain(error):
        assert isinstance(link, TpxError)
        for text in (str(link), repr(link), *map(str, link.args)):
            assert credential[PIECES[piece]] not in text
            assert credential[8:16] not in text
    body = error.body()
    assert body["type"] == "error"
    assert body["error"]["type"] == "api_error"
    assert credential[PIECES[piece]] not in str(body)


@pytest.mark.parametrize("provider", ["TPX", "ANTHROPIC"])
def test_building_and_sending_fail_alike(provider: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same exception raised while the request is built (a header the client refuses)
    gives the same kind of error as when it is raised while the request is sent."""
    sent = raised(provider, "create", slice(None), False)

    def refuse(*args: Any, **kwargs: Any) -> httpx2.Request:
        raise TransportBug(f"header {TOKEN if provider == 'TPX' else KEY}")

    monkeypatch.setattr(httpx2.Client, "build_request", refuse)
    built = raised(provider, "create", slice(None), False)
    assert type(built) is type(sent) is NetworkError
    assert built.__cause__ is sent.__cause__ is None
    assert built.__context__ is sent.__context__ is None
    assert str(built).endswith("TransportBug: [REDACTED]")
    assert str(sent).endswith("TransportBug: [REDACTED]")


def test_an_unforeseen_send_error_re_raised_as_it_is_is_caught(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The seeded bug: the HTTP client's own exception handed to the caller unchanged (as
    when only httpx2's errors were mapped): the checks above see the credential in it."""

    def as_it_is(self: Any, exc: Exception, what: str) -> Exception:
        return exc

    monkeypatch.setattr(tpx.transport.client._Core, "_local_failure", as_it_is)
    error = raised("TPX", "create", slice(None), False)
    assert not isinstance(error, NetworkError)
    assert TOKEN in str(error)


def test_an_error_text_redacted_in_pieces_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """The seeded bug: the exception's text redacted piece by piece (a secret's start before
    a cut, the runs of 8): what is left around the pieces shows; withheld whole, nothing."""
    monkeypatch.setattr(tpx.transport.client, "scrubbed", redact)
    error = raised("TPX", "create", slice(None), False)
    assert "header [REDACTED]" in str(error)  # the text around the credential survived


def test_the_library_logs_a_failure_redacted(caplog: pytest.LogCaptureFixture) -> None:
    """A log is no client: the provider's message, shown whole to the caller (it holds only
    a piece of the credential), is logged with every piece redacted."""
    quoted = f"key {TOKEN[:14]}... is not allowed here"

    def reply(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(400, json={"error": {"message": quoted}})

    caplog.set_level("INFO", logger="tpx.transport")
    with (
        tpx.transport.boot(
            oauth_token=TOKEN,
            tpx_base_url="http://upstream.test/v1",
            env={},
            transport=httpx2.MockTransport(reply),
        ) as transport,
        pytest.raises(errors.HTTPStatusError) as caught,
    ):
        transport.create(REQUEST)
    assert quoted in str(caught.value)  # whole: it may quote the caller's own input
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert "tpx exchange failed: MODEL_HTTP" in logged
    assert TOKEN[:14] not in logged
