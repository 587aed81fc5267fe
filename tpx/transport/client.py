"""httpx2 shells around the sans-I/O :class:`~tpx.transport.exchange.Exchange`.

:func:`boot` reads the credentials once and picks the provider for good (key
wins, then token, else none); :meth:`Transport.create` runs one exchange:
``send`` -> HTTP POST -> ``receive`` / ``fail`` -> ``deliver``. Errors are
:class:`~tpx.errors.ModelError` subclasses whose ``.body()`` is a Messages
error body. :func:`aboot` / :class:`AsyncTransport` do the same with
``httpx2.AsyncClient``.

Usage (runnable; ``httpx2.MockTransport`` stands in for the network)::

    import httpx2
    import tpx.transport

    def provider(request: httpx2.Request) -> httpx2.Response:
        assert request.url.path == "/v1/messages"
        assert request.headers["x-api-key"] == "sk-test"
        return httpx2.Response(200, json={
            "id": "msg_1", "type": "message", "role": "assistant", "model": "claude-x",
            "content": [{"type": "text", "text": "hello"}],
            "stop_reason": "end_turn", "stop_sequence": None,
            "usage": {"input_tokens": 3, "output_tokens": 1},
        })

    with tpx.transport.boot(
        api_key="sk-test", env={}, transport=httpx2.MockTransport(provider)
    ) as t:
        reply = t.create({
            "model": "claude-x", "max_tokens": 64,
            "messages": [{"role": "user", "content": "hi"}],
        })
        assert reply["content"][0]["text"] == "hello"
        assert t.exchange.turn == 1 and t.exchange.last_outcome == "ok"

Credentials never appear in ``repr``/``str``, logs or error messages, and only
the selected provider's credential is kept: the Anthropic request carries
``x-api-key`` and never ``Authorization``; the TPX request carries
``Authorization: Bearer`` and never ``x-api-key``. Redirects are not followed.

A credential must be printable ASCII without whitespace (API keys and bearer tokens
are token68-like): anything else is refused at boot with a
:class:`~tpx.errors.ConfigurationError` naming the variable or argument, never the
value. A :class:`~tpx.errors.ModelError` raised for a transport failure is not
chained to the httpx2 exception (whose message and ``.request.headers`` may hold the
credential): ``__cause__`` and ``__context__`` are ``None`` and the message keeps the
httpx2 exception's class name and its text, withheld whole when it holds any part of a
credential. Any other ``Exception`` raised while the request is built or sent (a custom
transport's own error) is the same: a :class:`~tpx.errors.NetworkError` naming its class,
unchained, its text withheld in the same way.

``boot(..., observer=f)`` / ``aboot(..., observer=f)`` hand *f* to the exchange
(:class:`~tpx.transport.exchange.Exchange`): ``f(action, snapshot)`` runs after every spec action
(``CallerSend``, ``ProviderReply``, ``Deliver``, ``ProviderFail``, ``NoProvider``,
``CallerAbort``) as :meth:`Transport.create` / :meth:`Transport.stream` take it. An
exception raised by *f* propagates from the transport method once the action is complete
(not chained to the httpx2 exception of a failed request: it may hold the credential).
The transport then takes no further step, except that
it never leaves an exchange in ``req``: after ``CallerSend`` it takes ``ProviderFail``
(nothing is sent; *f* sees it too). After ``ProviderReply`` the reply waits in ``resp``:
:meth:`Transport.finish` (or ``exchange.deliver()``) hands it over.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Iterator, Mapping
from types import TracebackType
from typing import Any, Self

import attrs
import httpx2

from tpx.errors import (
    ConfigurationError,
    ExchangeStateError,
    ModelError,
    NetworkError,
    ProtocolError,
    detached,
    redact,
    secret_forms,
)
from tpx.transport._config import (
    DEFAULT_ANTHROPIC_BASE_URL,
    DEFAULT_TIMEOUT,
    _Config,
    _configure,
    _exchange_for,
    _Secret,
    _timeout,
)
from tpx.transport._http import error_from_httpx, scrubbed
from tpx.transport.exchange import Exchange, ExchangeObserver, OutboundRequest, Provider
from tpx.transport.translate.profiles import Profile
from tpx.transport.translate.stream import serialize_event

__all__ = [
    "DEFAULT_ANTHROPIC_BASE_URL",
    "DEFAULT_TIMEOUT",
    "AsyncTransport",
    "Transport",
    "aboot",
    "boot",
]

logger = logging.getLogger("tpx.transport")

_CREDENTIAL_HEADERS = ("authorization", "x-api-key")
#: what a :class:`~tpx.errors.NetworkError` says when the HTTP client raised something unforeseen
_SEND_FAILED = "the HTTP client failed to send the request"


class _Handover:
    """What one streamed exchange has handed the caller so far (see ``_Core._hand_over``)."""

    __slots__ = ("done", "error", "started")

    def __init__(self) -> None:
        self.started = False  # some bytes reached the caller
        self.done = False  # nothing more to read from the body
        self.error: ModelError | None = None  # to raise once the bytes are out


@attrs.frozen(repr=False)
class _Core:
    """What both shells share: fixed provider, endpoint and credential, plus the machine."""

    provider: Provider
    base_url: str | None
    model: str | None
    exchange: Exchange
    _secret: _Secret | None
    _timeout: httpx2.Timeout | None
    _owns_client: bool

    def __attrs_post_init__(self) -> None:
        if self.exchange.provider is not self.provider:
            raise ConfigurationError("the exchange's provider differs from the transport's")

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(provider={self.provider.name}, "
            f"base_url={self.base_url!r}, model={self.model!r}, "
            f"credentials={'<redacted>' if self._secret else None}, "
            f"turn={self.exchange.turn}, phase={self.exchange.phase!r})"
        )

    __str__ = __repr__

    def __reduce_ex__(self, protocol: Any) -> Any:
        """Refused: a transport holds the credential (and a live HTTP client)."""
        raise TypeError(
            f"a {type(self).__name__} cannot be pickled or copied: it holds the credential"
        )

    def _secrets(self) -> tuple[str, ...]:
        """The credential in every form it may take inside an error text."""
        return secret_forms((self._secret.value,)) if self._secret else ()

    def _log_failed(self, error: ModelError) -> None:
        """The failure's log record: its message redacted (a log is no client: every piece
        of the credential goes, :func:`tpx.errors.redact`)."""
        if logger.isEnabledFor(logging.INFO):
            message = redact(error.message, self._secrets())
            logger.info("tpx exchange failed: %s: %s", error.code, message)

    def _auth_headers(self) -> dict[str, str]:
        assert self._secret is not None
        if self.provider is Provider.ANTHROPIC:
            return {"x-api-key": self._secret.value}
        return {"authorization": f"Bearer {self._secret.value}"}

    def _build(self, client: httpx2.Client | httpx2.AsyncClient, out: OutboundRequest) -> Any:
        assert self.base_url is not None
        headers = {**out.header_dict(), **self._auth_headers()}
        request = client.build_request(
            out.method,
            self.base_url + out.path,
            headers=headers,
            content=out.body,
            timeout=self._timeout if self._timeout is not None else httpx2.USE_CLIENT_DEFAULT,
        )
        # Only this provider's credential travels, whatever the client's defaults hold.
        own = next(iter(self._auth_headers()))
        for name in _CREDENTIAL_HEADERS:
            if name != own and name in request.headers:
                del request.headers[name]
        logger.debug(
            "tpx %s turn %d: %s %s", self.provider.name, self.exchange.turn, out.method, request.url
        )
        return request

    def _start(self, request: Mapping[str, Any]) -> OutboundRequest:
        if self.exchange.provider is Provider.NONE:
            error = self.exchange.no_provider()
            logger.info("tpx exchange failed: %s", error.code)
            raise error
        idle = self.exchange.phase == "idle"
        try:
            return self.exchange.send(request)
        except BaseException:
            if idle and self.exchange.phase == "req":  # the observer raised after CallerSend
                self._interrupted()
            raise

    def _open(self, client: httpx2.Client | httpx2.AsyncClient, request: Mapping[str, Any]) -> Any:
        """``CallerSend`` and the HTTP request built from it.

        Once the exchange is in ``req`` nothing may leave it there: a failure while
        building (a header httpx2 refuses, a bug) is ``ProviderFail``. An ``Exception`` is
        replaced by a :class:`NetworkError` raised outside the handler (no ``__cause__`` /
        ``__context__``: the original may hold the credential being put into a header);
        cancellation and other ``BaseException`` are re-raised as they are.
        """
        out = self._start(request)
        try:
            return self._build(client, out)
        except Exception as exc:
            failure = exc
        except BaseException:
            self._interrupted()
            raise
        # ProviderFail outside the handler: what the observer raises is not chained to exc
        raise self._local_failure(failure, "could not build the HTTP request")

    def _local_failure(self, exc: Exception, what: str) -> ModelError:
        """``ProviderFail`` for *exc*, an error raised on this side of the wire."""
        if isinstance(exc, httpx2.HTTPError):
            return self._transport_failed(exc)
        detail = scrubbed(str(exc), self._secrets())
        name = type(exc).__name__
        error = self.exchange.fail(
            NetworkError(
                f"{self.provider.name}: {what}: {name}" + (f": {detail}" if detail else ""),
                provider=self.provider.name,
            )
        )
        self._log_failed(error)
        return error

    def _transport_failed(self, exc: httpx2.HTTPError) -> ModelError:
        """``ProviderFail`` for an httpx2 failure: the redacted, *unchained* error to raise.

        The caller calls this and raises the result outside its ``except`` block, so the
        httpx2 exception (whose message and ``.request.headers`` may carry the credential)
        is neither the ``__cause__`` nor the ``__context__`` of what the caller sees, be it
        this error or one the observer raised at ``ProviderFail``.
        """
        mapped = error_from_httpx(exc, provider=self.provider.name, secrets=self._secrets())
        if self.exchange.phase != "req":  # nothing to fail: only hand back the mapped error
            return mapped
        error = self.exchange.fail(mapped)
        self._log_failed(error)
        return error

    def _interrupted(self) -> None:
        self.exchange.fail(NetworkError("the exchange was interrupted before the provider replied"))

    def _settle(self, exc: BaseException) -> BaseException:
        """What to raise for *exc*, which escaped a step after ``CallerSend``.

        The exchange never stays in ``req``: it takes ``ProviderFail`` first (for
        ``KeyboardInterrupt`` / cancellation too, which are then re-raised as they are).
        A :class:`ModelError` and whatever the observer raised propagate as they are; any
        other ``Exception`` (one tpx did not foresee) becomes a :class:`ProtocolError`
        naming only its class (its text may quote the reply). Raise the result outside the
        ``except`` block: nothing is chained to *exc*.
        """
        ex = self.exchange
        if isinstance(exc, ModelError) and ex.phase == "req":
            ex.fail(exc)
            return exc
        if isinstance(exc, ModelError) or ex.raised_by_observer(exc):
            if ex.phase == "req":
                self._interrupted()
            return exc
        if not isinstance(exc, Exception):  # KeyboardInterrupt, cancellation, GeneratorExit
            if ex.phase == "req":
                self._interrupted()
            return exc
        error = ProtocolError(
            f"{self.provider.name}: the reply could not be read ({type(exc).__name__})",
            provider=self.provider.name,
        )
        if ex.phase == "req":
            error = ex.fail(error)  # type: ignore[assignment]
        self._log_failed(error)
        return error

    def _receive(self, response: httpx2.Response) -> None:
        logger.debug(
            "tpx %s turn %d: HTTP %d", self.provider.name, self.exchange.turn, response.status_code
        )
        if self.exchange.streaming:  # create() of a stream: the whole SSE body at once
            ex = self.exchange
            self._stream_start(response, response.content)
            ex.feed(response.content)
            if ex.phase == "req":
                ex.end_stream()
            if ex.phase == "idle":  # ProviderFail
                error = ex.last_error
                assert error is not None
                self._log_failed(error)
                raise error
            return
        try:
            self.exchange.receive(response.status_code, response.headers, response.content)
        except ModelError as error:
            self._log_failed(error)
            raise

    # -- streaming helpers (shared by both shells) ------------------------------------

    @staticmethod
    def _stream_request(request: Mapping[str, Any]) -> Mapping[str, Any]:
        if not isinstance(request, Mapping):
            raise TypeError(f"request must be a mapping, got {type(request).__name__}")
        return request if request.get("stream") is True else {**request, "stream": True}

    def _stream_start(self, response: httpx2.Response, body: bytes) -> None:
        logger.debug(
            "tpx %s turn %d: HTTP %d (stream)",
            self.provider.name,
            self.exchange.turn,
            response.status_code,
        )
        try:
            self.exchange.receive_stream_start(response.status_code, response.headers, body)
        except ModelError as error:
            self._log_failed(error)
            raise

    def _hand_over(
        self, out: _Handover, events: list[dict[str, Any]], *, ended: bool = False
    ) -> Iterator[bytes]:
        """The caller's bytes for what one read produced (*ended*: the body ended), lazily.

        Every event before the terminal one is yielded first. Only when the caller asks
        for the terminal event (``message_stop``), i.e. after it took everything before
        it, are ``ProviderReply`` and ``Deliver`` taken and the terminal event yielded;
        a caller that stops earlier leaves the exchange in ``req`` (``ProviderFail``
        when the stream is closed). A failure yields the ``error`` event, if anything
        reached the caller before, and sets ``out.error``. ``out.done`` is set once
        nothing more is to be read.
        """
        ex = self.exchange
        if ended and ex.phase == "req" and not ex.stream_complete:
            events = [*events, *ex.flush()]
            if ex.phase == "req" and not ex.stream_complete:
                events = [*events, *ex.end_stream()]  # ended early: ProviderFail
        terminal: dict[str, Any] | None = None
        if ex.phase == "req" and ex.stream_complete:
            out.done = True
            terminal = events[-1]  # message_stop: always the last event produced
            events = events[:-1]
        elif ex.phase == "idle":
            self._stream_failed(out)
        yield from self._render(out, events)
        if terminal is None:
            return
        # The caller asked for the terminal event: it holds every event before it.
        tail = ex.end_stream()
        if ex.phase == "resp":
            ex.deliver()
            tail = [terminal]
        else:
            self._stream_failed(out)
        yield from self._render(out, tail)

    def _stream_failed(self, out: _Handover) -> None:
        error = self.exchange.last_error
        assert error is not None
        self._log_failed(error)
        out.error = error
        out.done = True

    @staticmethod
    def _render(out: _Handover, events: list[dict[str, Any]]) -> Iterator[bytes]:
        if out.error is not None and not out.started and len(events) == 1:
            return  # nothing reached the caller yet: the error is raised, not streamed
        for event in events:
            data = serialize_event(event)
            out.started = True
            yield data

    def _stream_broken(
        self, exc: httpx2.HTTPError, started: bool
    ) -> tuple[list[bytes], ModelError]:
        """The bytes still to yield and the error to raise when the body read failed."""
        in_flight = self.exchange.phase == "req"
        error = self._transport_failed(exc)
        return ([serialize_event(error.body())] if started and in_flight else []), error

    def _stream_settle(self, exc: BaseException) -> BaseException:
        """:meth:`_settle` for a stream: closing it early or an interruption is
        ``ProviderFail`` with a :class:`NetworkError` (see :meth:`_stream_abandoned`)."""
        if isinstance(exc, Exception) and not isinstance(exc, ModelError):
            return self._settle(exc)
        self._stream_abandoned()
        return exc

    def _stream_abandoned(self) -> None:
        if self.exchange.phase == "req":
            error = self.exchange.fail(
                NetworkError("the stream was closed or interrupted before it completed")
            )
            self._log_failed(error)

    def _finish(self, response: httpx2.Response) -> dict[str, Any]:
        self._receive(response)
        return self.exchange.deliver()


@attrs.frozen(repr=False)
class Transport(_Core):
    """Synchronous transport: one provider, fixed at :func:`boot`."""

    client: httpx2.Client = attrs.field(kw_only=True)

    def create(self, request: Mapping[str, Any]) -> dict[str, Any]:
        """Run one exchange; return the Messages response body or raise a ModelError.

        Exactly :meth:`begin`, :meth:`roundtrip`, :meth:`finish` in turn.
        """
        http_request = self.begin(request)
        self.roundtrip(http_request)
        return self.finish()

    # -- the exchange one spec action at a time ------------------------------------

    def begin(self, request: Mapping[str, Any]) -> httpx2.Request:
        """``CallerSend``: frame or translate *request* and build the HTTP request (unsent).

        ``NoProvider`` when no provider was selected at boot (raises
        :class:`~tpx.errors.UnauthorizedError`, touches no network); ``CallerAbort`` when
        the tool_results do not answer the pending tool_uses (raises
        :class:`~tpx.errors.PairingError`, nothing built).
        """
        http_request = self._open(self.client, request)
        assert isinstance(http_request, httpx2.Request)
        return http_request

    def roundtrip(self, http_request: httpx2.Request) -> None:
        """Send *http_request* (made by :meth:`begin`) and read the reply.

        ``ProviderReply`` on a 2xx well-formed native reply (the exchange is then
        ready for :meth:`finish`); ``ProviderFail`` otherwise: the mapped
        :class:`~tpx.errors.ModelError` is raised.
        """
        if self.exchange.phase != "req":
            raise ExchangeStateError(
                f"roundtrip needs a request built by begin(): phase={self.exchange.phase!r}"
            )
        unforeseen: Exception | None = None
        try:
            response = self.client.send(http_request, follow_redirects=False)
        except httpx2.HTTPError as exc:
            failure = exc
        except Exception as exc:  # a custom transport's own error: its text may hold anything
            unforeseen = exc
        except BaseException:
            self._interrupted()
            raise
        else:
            settled: BaseException | None = None
            try:
                self._receive(response)
            except BaseException as exc:
                settled = self._settle(exc)
            if settled is None:
                return
            if isinstance(settled, ModelError):
                raise detached(settled)  # outside the handler: not chained to it
            raise settled
        if unforeseen is not None:  # outside the handler: not chained to it
            raise self._local_failure(unforeseen, _SEND_FAILED)
        raise self._transport_failed(failure)  # outside the handler: not chained to it

    def finish(self) -> dict[str, Any]:
        """``Deliver``: the Messages-shaped response body of the exchange."""
        return self.exchange.deliver()

    def stream(self, request: Mapping[str, Any]) -> Iterator[bytes]:
        """Run one streamed exchange: the Messages stream as SSE bytes, one event per item.

        Lazy: nothing happens until the first ``next()``. The request is sent with
        ``stream: true`` (added when missing). TPX chunks are translated to Messages
        events as they arrive; ANTHROPIC events pass through (parsed and checked).
        Every event before the terminal ``message_stop`` is yielded first;
        ``ProviderReply`` and ``Deliver`` are taken only when the caller asks for
        ``message_stop`` (after it took every other event, in the same ``next()`` that
        returns it), so ``exchange.pending`` then holds exactly the tool_use ids the
        caller received. Closing the iterator before ``message_stop`` is ``ProviderFail``
        however much of the reply was already read (even a whole one-chunk reply);
        closing right after it keeps the obligations.

        Failures: until the first bytes are yielded (no provider, pairing, non-2xx,
        connect failure, an error as the very first event) the :class:`ModelError` is
        raised, as by :meth:`create`. Afterwards (a provider error event, a malformed
        chunk, bad tool arguments, a lost connection, a body that ends before
        ``[DONE]`` / ``message_stop``) a final ``event: error`` carrying
        ``ModelError.body()`` is yielded and then the error is raised. Either way the
        exchange has taken ``ProviderFail`` (idle, ``last_outcome == "err"``). Closing
        the iterator early is ``ProviderFail`` too, and closes the HTTP response.
        """
        http_request = self.begin(self._stream_request(request))
        out = _Handover()
        settled: BaseException | None = None
        # httpx2 failures are kept by the handlers and mapped (ProviderFail) outside them,
        # so nothing raised is chained to the httpx2 exception (see _transport_failed).
        failure: httpx2.HTTPError | None = None
        unforeseen: Exception | None = None
        try:
            try:
                response = self.client.send(http_request, stream=True, follow_redirects=False)
            except httpx2.HTTPError as exc:
                failure = exc
            except Exception as exc:  # a custom transport's own error
                unforeseen = exc
            if unforeseen is not None:
                raise self._local_failure(unforeseen, _SEND_FAILED)
            if failure is not None:
                raise self._transport_failed(failure)
            try:
                ok = 200 <= response.status_code < 300
                body = b""
                try:
                    body = b"" if ok else response.read()
                except httpx2.HTTPError as exc:
                    failure = exc
                if failure is not None:
                    raise self._transport_failed(failure)
                self._stream_start(response, body)
                tail: list[bytes] = []
                try:
                    for chunk in response.iter_bytes():
                        yield from self._hand_over(out, self.exchange.feed(chunk))
                        if out.done:
                            break
                    if not out.done:
                        yield from self._hand_over(out, [], ended=True)
                except httpx2.HTTPError as exc:
                    failure = exc
                if failure is not None:
                    tail, out.error = self._stream_broken(failure, out.started)
                yield from tail
                if out.error is not None:
                    raise out.error
            finally:
                response.close()
        except BaseException as exc:  # GeneratorExit (closed early), KeyboardInterrupt, bugs
            settled = self._stream_settle(exc)
            if settled is exc:
                raise
        if settled is not None:
            raise detached(settled)  # an unforeseen exception, as a ProtocolError (unchained)

    def close(self) -> None:
        """Close the HTTP client if :func:`boot` created it."""
        if self._owns_client:
            self.client.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


@attrs.frozen(repr=False)
class AsyncTransport(_Core):
    """Asynchronous transport: one provider, fixed at :func:`aboot`."""

    client: httpx2.AsyncClient = attrs.field(kw_only=True)

    async def create(self, request: Mapping[str, Any]) -> dict[str, Any]:
        """Run one exchange; return the Messages response body or raise a ModelError."""
        http_request = self._open(self.client, request)
        unforeseen: Exception | None = None
        try:
            response = await self.client.send(http_request, follow_redirects=False)
        except httpx2.HTTPError as exc:
            failure = exc
        except Exception as exc:  # a custom transport's own error: its text may hold anything
            unforeseen = exc
        except BaseException:  # cancellation included: the exchange must not stay in "req"
            self._interrupted()
            raise
        else:
            settled: BaseException | None = None
            try:
                return self._finish(response)
            except BaseException as exc:
                settled = self._settle(exc)
            if isinstance(settled, ModelError):
                raise detached(settled)  # outside the handler: not chained to it
            raise settled
        if unforeseen is not None:  # outside the handler: not chained to it
            raise self._local_failure(unforeseen, _SEND_FAILED)
        raise self._transport_failed(failure)  # outside the handler: not chained to it

    async def stream(self, request: Mapping[str, Any]) -> AsyncIterator[bytes]:
        """:meth:`Transport.stream` over ``httpx2.AsyncClient`` (same failure rules;
        cancellation and ``aclose()`` of the iterator are ``ProviderFail``)."""
        http_request = self._open(self.client, self._stream_request(request))
        out = _Handover()
        settled: BaseException | None = None
        # httpx2 failures are kept by the handlers and mapped (ProviderFail) outside them,
        # so nothing raised is chained to the httpx2 exception (see _transport_failed).
        failure: httpx2.HTTPError | None = None
        unforeseen: Exception | None = None
        try:
            try:
                response = await self.client.send(http_request, stream=True, follow_redirects=False)
            except httpx2.HTTPError as exc:
                failure = exc
            except Exception as exc:  # a custom transport's own error
                unforeseen = exc
            if unforeseen is not None:
                raise self._local_failure(unforeseen, _SEND_FAILED)
            if failure is not None:
                raise self._transport_failed(failure)
            try:
                ok = 200 <= response.status_code < 300
                body = b""
                try:
                    body = b"" if ok else await response.aread()
                except httpx2.HTTPError as exc:
                    failure = exc
                if failure is not None:
                    raise self._transport_failed(failure)
                self._stream_start(response, body)
                tail: list[bytes] = []
                try:
                    async for chunk in response.aiter_bytes():
                        for data in self._hand_over(out, self.exchange.feed(chunk)):
                            yield data
                        if out.done:
                            break
                    if not out.done:
                        for data in self._hand_over(out, [], ended=True):
                            yield data
                except httpx2.HTTPError as exc:
                    failure = exc
                if failure is not None:
                    tail, out.error = self._stream_broken(failure, out.started)
                for data in tail:
                    yield data
                if out.error is not None:
                    raise out.error
            finally:
                await response.aclose()
        except BaseException as exc:  # GeneratorExit (aclose), cancellation, bugs
            settled = self._stream_settle(exc)
            if settled is exc:
                raise
        if settled is not None:
            raise detached(settled)  # an unforeseen exception, as a ProtocolError (unchained)

    async def aclose(self) -> None:
        """Close the HTTP client if :func:`aboot` created it."""
        if self._owns_client:
            await self.client.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()


def _one_of(client: object, transport: object) -> None:
    if client is not None and transport is not None:
        raise ConfigurationError("pass client= or transport=, not both")


def _fields(
    config: _Config, exchange: Exchange, timeout: httpx2.Timeout | None
) -> tuple[Provider, str | None, str | None, Exchange, _Secret | None, httpx2.Timeout | None]:
    """The fields both transports start with (then ``owns_client`` and ``client``)."""
    return config.provider, config.base_url, config.model, exchange, config.secret, timeout


def boot(
    *,
    api_key: str | None = None,
    oauth_token: str | None = None,
    anthropic_base_url: str | None = None,
    tpx_base_url: str | None = None,
    env: Mapping[str, str] | None = None,
    client: httpx2.Client | None = None,
    transport: httpx2.BaseTransport | None = None,
    timeout: float | httpx2.Timeout | None = None,
    model: str | None = None,
    max_turns: int | None = None,
    observer: ExchangeObserver | None = None,
    profile: str | Profile | None = None,
    thinking_secret: str | None = None,
) -> Transport:
    """Read credentials once and return a frozen :class:`Transport`.

    Explicit arguments win over ``env`` (default ``os.environ``): ``ANTHROPIC_API_KEY``,
    ``TPX_OAUTH_TOKEN``, ``ANTHROPIC_BASE_URL`` (default :data:`DEFAULT_ANTHROPIC_BASE_URL`),
    ``TPX_BASE_URL`` (required with a token: :class:`ConfigurationError` otherwise) and
    ``TPX_MODEL`` (model override for TPX requests). A key selects ANTHROPIC, else a token
    selects TPX, else no provider (every exchange raises ``UnauthorizedError``).

    Pass *client* (used as is, not closed by the transport) or *transport* (wrapped in a
    new client), not both. *timeout* defaults to :data:`DEFAULT_TIMEOUT` for a client
    made here and to the client's own timeout for an injected client. *observer*
    (``observer(action, snapshot)``) is the exchange's: it sees every spec action as it
    happens (see the module docstring for what its exceptions do).

    *profile* names the kind of TPX upstream (``openai``, ``vllm``, ``sglang``, ``ollama``,
    ``llama.cpp``, ``deepseek``, ``gemini``, ``openrouter``, ``generic``; see
    :mod:`tpx.transport.translate.profiles`), else ``TPX_PROFILE``, else ``generic``.
    *thinking_secret* (else ``TPX_THINKING_SECRET``, else random per process) signs the
    thinking blocks tpx makes from the upstream's reasoning and verifies them when they
    come back (:mod:`tpx.transport.translate.signing`; replicas must share it).
    """
    _one_of(client, transport)
    config = _configure(
        api_key=api_key,
        oauth_token=oauth_token,
        anthropic_base_url=anthropic_base_url,
        tpx_base_url=tpx_base_url,
        env=env,
        model=model,
    )
    exchange = _exchange_for(config, max_turns, observer, profile, thinking_secret, env)
    if client is None:
        own = httpx2.Client(transport=transport, timeout=_timeout(timeout) or DEFAULT_TIMEOUT)
        return Transport(*_fields(config, exchange, None), True, client=own)
    return Transport(*_fields(config, exchange, _timeout(timeout)), False, client=client)


def aboot(
    *,
    api_key: str | None = None,
    oauth_token: str | None = None,
    anthropic_base_url: str | None = None,
    tpx_base_url: str | None = None,
    env: Mapping[str, str] | None = None,
    client: httpx2.AsyncClient | None = None,
    transport: httpx2.AsyncBaseTransport | None = None,
    timeout: float | httpx2.Timeout | None = None,
    model: str | None = None,
    max_turns: int | None = None,
    observer: ExchangeObserver | None = None,
    profile: str | Profile | None = None,
    thinking_secret: str | None = None,
) -> AsyncTransport:
    """:func:`boot` for ``httpx2.AsyncClient`` (a plain function: booting does no I/O)."""
    _one_of(client, transport)
    config = _configure(
        api_key=api_key,
        oauth_token=oauth_token,
        anthropic_base_url=anthropic_base_url,
        tpx_base_url=tpx_base_url,
        env=env,
        model=model,
    )
    exchange = _exchange_for(config, max_turns, observer, profile, thinking_secret, env)
    if client is None:
        own = httpx2.AsyncClient(transport=transport, timeout=_timeout(timeout) or DEFAULT_TIMEOUT)
        return AsyncTransport(*_fields(config, exchange, None), True, client=own)
    return AsyncTransport(*_fields(config, exchange, _timeout(timeout)), False, client=client)
