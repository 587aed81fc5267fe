"""The gateway's upstream clients over httpx2 (the drivers that run a turn on them:
:mod:`tpx.gateway.drive`).

:class:`AsyncUpstream` holds the one pooled ``httpx2.AsyncClient`` of a process, adds the
credential (``x-api-key`` for ANTHROPIC, ``Authorization: Bearer`` for TPX; a
command-made token is refreshed before expiry and once on a 401, single-flight and with a
backoff: :meth:`tpx.gateway.settings.Credential.refresh_after`), bounds the number of
concurrent upstream requests and records the upstream latency. Reply bodies are read
undecoded and decoded by :mod:`tpx.gateway.inflate` (bounded: ``limits.max_upstream_body``
for a body read whole, ``limits.max_upstream_stream`` for a stream). The sync twin
(:class:`SyncUpstream`) serves the in-process sync SDK client.

No httpx2 exception leaves here: failures become :class:`~tpx.errors.ModelError` (mapped
by :func:`tpx.transport._http.error_from_httpx`, redacted, raised outside the handler so nothing is
chained to the httpx2 exception, whose request headers hold the credential).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Generator
from typing import Any, Generic, TypeVar

import httpx2

from tpx.errors import ModelError
from tpx.gateway.h1 import H1Transport, fast_transport_allowed
from tpx.gateway.inflate import Decoder, read_body, read_body_sync
from tpx.gateway.netio import install
from tpx.gateway.redaction import prepared
from tpx.gateway.settings import Settings
from tpx.gateway.wire import UpstreamCall
from tpx.transport._http import error_from_httpx
from tpx.transport.exchange import Provider

__all__ = ["AsyncUpstream", "SyncUpstream", "unsent"]


#: Sets of request headers :meth:`_Base._request` keeps normalized at most.
_PREPARED = 32
#: The owned client's own default headers: no compressed replies (tpx.gateway.inflate).
_DEFAULT_HEADERS = {"accept-encoding": "identity"}


#: The attribute of a mapped transport failure telling whether the request never left (a
#: connect failure): :func:`unsent`.
_UNSENT = "tpx_unsent"


def unsent(error: ModelError) -> bool:
    """*error* (from :meth:`AsyncUpstream.open`) came before the request was sent: a connect
    failure, or an error without the transport's mark (the token command failed), so
    another upstream may take the request."""
    return bool(getattr(error, _UNSENT, True))


class _Masked(str):
    """A header value in the keys of the kept header sets: compared and hashed as the
    text, shown as ``'[masked]'`` (a credential is among them)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "'[masked]'"


def _timeout(settings: Settings) -> httpx2.Timeout:
    limits = settings.limits
    return httpx2.Timeout(limits.read_timeout, connect=limits.connect_timeout)


_Client = TypeVar("_Client", bound=httpx2.Client | httpx2.AsyncClient)
_Transport = TypeVar("_Transport", bound=httpx2.BaseTransport | httpx2.AsyncBaseTransport)


class _Base(Generic[_Client, _Transport]):
    """What both upstreams share: the client (made here unless given: *transport* then
    replaces the network), the upstream requests, the credential, the retry policy."""

    def __init__(
        self,
        settings: Settings,
        *,
        client: _Client | None = None,
        transport: _Transport | None = None,
        observe: Any = None,
    ) -> None:
        self.settings = settings
        self._observe = observe
        self._urls: dict[str, httpx2.URL] = {}  # path -> parsed upstream URL
        self._prepared: dict[tuple[Any, ...], httpx2.Headers] = {}  # see _request
        self._timeouts = _timeout(settings).as_dict()
        self._owns = client is None
        self.client: _Client = self._new_client(transport) if client is None else client
        self._defaults = dict(self.client.headers)  # the owned client's default headers

    def _new_client(self, transport: _Transport | None) -> _Client:
        raise NotImplementedError

    def _request(self, call: UpstreamCall, headers: dict[str, str]) -> httpx2.Request:
        """The upstream request for *call*. With the client made here, built directly (the
        URL parsed once per path, the client's default headers copied once: ~0.1 ms less per
        request than ``build_request``); an injected client's ``build_request`` applies its
        own defaults."""
        timeouts = self._timeouts
        if call.timeout is not None:  # a call of its own bound (the tokenizer endpoint's)
            timeouts = httpx2.Timeout(call.timeout).as_dict()
        if not self._owns:
            request = self.client.build_request(
                call.method, self._url(call), headers=headers, content=call.body or None
            )
            if call.timeout is not None:
                request.extensions["timeout"] = timeouts
            return request
        url = self._urls.get(call.path)
        if url is None:
            url = httpx2.URL(self._url(call))
            if "?" not in call.path:  # a fixed set of paths (not a client's query strings)
                self._urls[call.path] = url
        if not call.body:
            return httpx2.Request(
                call.method,
                url,
                headers={**self._defaults, **headers},
                extensions={"timeout": timeouts},
            )
        # the headers httpx2 would make (Host first, the client's defaults, the call's,
        # Content-Length last), normalized once per set of headers: ~20 us less a request
        key = (url.netloc, *[(k, _Masked(v)) for k, v in headers.items()])
        prepared = self._prepared.get(key)
        if prepared is None:
            if len(self._prepared) >= _PREPARED:
                self._prepared.clear()  # e.g. tokens a command replaced
            merged = {**self._defaults, **headers}
            prepared = self._prepared[key] = httpx2.Headers(
                [("Host", url.netloc.decode("ascii")), *merged.items()]
            )
        request = httpx2.Request(
            call.method,
            url,
            headers=prepared,  # copied by the request
            stream=httpx2.ByteStream(call.body),
            extensions={"timeout": timeouts},
        )
        request.headers["Content-Length"] = str(len(call.body))
        request.read()  # as content= would have it (no copy: one bytes object)
        return request

    def _plan(
        self, observed: bool = True
    ) -> Generator[bool, httpx2.Response | httpx2.HTTPError, None]:
        """The retry policy of ``open``, without I/O: yields whether the next attempt takes a
        fresh token and is sent that attempt's outcome (the response, or the httpx2 error);
        stops when the response is the one to use, raises the :class:`ModelError` when
        there is none. The response's latency is observed when *observed*.

        An attempt is sent again only once with a fresh token after a 401 when the token
        comes from a command (the upstream refused it: nothing was generated), unless the
        command's backoff holds the fresh token back (the 401 stands). A transport
        failure is never re-sent: once a byte of the request was written the upstream may
        be generating (and billing) the reply already. The one case where a request
        provably did not leave, a pooled connection the upstream closed meanwhile, is
        handled under the client: the transport does not write on it and takes another
        connection (:mod:`tpx.gateway.h1`; :func:`tpx.gateway.netio.peer_spoke` behind a
        proxy).
        """
        began = time.perf_counter()
        refresh = refreshed = False
        while True:
            outcome = yield refresh
            if isinstance(outcome, httpx2.HTTPError):
                error = self._map(outcome)
                # nothing reached the upstream: another upstream may take it (tpx.gateway.pool)
                setattr(
                    error, _UNSENT, isinstance(outcome, httpx2.ConnectError | httpx2.ConnectTimeout)
                )
                raise error  # not in a handler: nothing chained
            status = outcome.status_code
            if not refreshed and self._refreshable(status):
                refresh = refreshed = True
                continue
            credential = self.settings.credential
            if credential is not None and status != 401:
                credential.worked()
            if self._observe is not None and observed:
                self._observe(time.perf_counter() - began)
            return

    @staticmethod
    def _decide(
        plan: Generator[bool, httpx2.Response | httpx2.HTTPError, None],
        outcome: httpx2.Response | httpx2.HTTPError,
    ) -> bool | None:
        """Hand *outcome* to *plan*: ``None`` when it is the response to use, else whether
        the next attempt takes a fresh token (the ModelError when there is none)."""
        try:
            return plan.send(outcome)
        except StopIteration:
            return None

    def _secrets(self) -> tuple[str, ...]:
        return prepared(self.settings.secret_values()).forms

    def _fresh_token(self, refused: str) -> str | None:
        """THE one place a fresh upstream token is obtained (after the upstream refused
        *refused* with a 401): the token command's run, single-flight and backed off
        (:meth:`~tpx.gateway.settings.Credential.refresh_after`; ``None``: held back, the
        401 stands). A request's scrubber must hold the token that request carries: today
        it does through :meth:`~tpx.gateway.settings.Settings.secret_values`, which reads
        the credential's current value whenever an error is mapped (:meth:`_secrets`); a
        per-request scrubber registers the token returned here. Blocks: run it in a
        thread from the event loop."""
        credential = self.settings.credential
        assert credential is not None
        return credential.refresh_after(refused)

    def _token(self) -> str | None:
        """The token of a first attempt (the command re-run when it expired: blocks then,
        see ``Credential.stale``)."""
        credential = self.settings.credential
        return None if credential is None else credential.value()

    def _headers(self, call: UpstreamCall, token: str | None = None) -> dict[str, str]:
        headers = dict(call.headers)
        if token is None:
            return headers
        if self.settings.provider is Provider.ANTHROPIC:
            headers["x-api-key"] = token
        else:
            headers["authorization"] = f"Bearer {token}"
        return headers

    def _url(self, call: UpstreamCall) -> str:
        assert self.settings.base_url is not None
        return self.settings.base_url + call.path

    def body_decoder(self, response: httpx2.Response) -> Decoder:
        """The decoder of a streamed reply (``limits.max_upstream_stream``)."""
        limit = self.settings.limits.max_upstream_stream
        return Decoder.of(response, limit, self._provider, "limits.max_upstream_stream")

    @property
    def _provider(self) -> str:
        return self.settings.provider.name

    def _map(self, exc: httpx2.HTTPError) -> ModelError:
        return error_from_httpx(exc, provider=self.settings.provider.name, secrets=self._secrets())

    def _refreshable(self, status: int) -> bool:
        credential = self.settings.credential
        return status == 401 and credential is not None and credential.refreshable


class AsyncUpstream(_Base[httpx2.AsyncClient, httpx2.AsyncBaseTransport]):
    """The upstream for one process: a pooled ``httpx2.AsyncClient`` (made here unless given)."""

    #: what carries the owned client's requests: ``h1`` (tpx.gateway.h1, the default),
    #: ``httpcore+asyncio`` (httpx2's transport on tpx.gateway.netio's backend, when a proxy
    #: is configured), ``httpcore`` (its default backend), ``injected`` (a given transport)
    io = "injected"
    _slots: asyncio.Semaphore | None = None

    def _new_client(self, transport: httpx2.AsyncBaseTransport | None) -> httpx2.AsyncClient:
        limit = self.settings.limits.max_upstream
        limits = httpx2.Limits(
            max_connections=limit,
            max_keepalive_connections=limit,
            keepalive_expiry=self.settings.limits.keepalive_expiry,
        )
        if transport is None:
            if fast_transport_allowed():
                transport = H1Transport(limits=limits)
                self.io = "h1"
            else:  # a proxy is configured: httpx2's own transport speaks to it
                own = httpx2.AsyncHTTPTransport(limits=limits)
                self.io = "httpcore+asyncio" if install(own) else "httpcore"
                transport = own
        return httpx2.AsyncClient(
            transport=transport,
            timeout=_timeout(self.settings),
            limits=limits,
            headers=_DEFAULT_HEADERS,
        )

    @property
    def slots(self) -> asyncio.Semaphore:
        if self._slots is None:
            self._slots = asyncio.Semaphore(self.settings.limits.max_upstream)
        return self._slots

    async def open(self, call: UpstreamCall) -> httpx2.Response:
        """Send *call*; the response with its body unread (read it with :meth:`read`, or
        through :meth:`body_decoder`). Raises a ModelError (the retry policy:
        :meth:`_Base._plan`). A token command runs in a thread."""
        plan = self._plan(call.latency)
        next(plan)
        credential = self.settings.credential
        if credential is not None and credential.stale():
            token = await asyncio.to_thread(self._token)
        else:
            token = self._token()
        while True:
            outcome = await self._attempt(self._request(call, self._headers(call, token)))
            if self._decide(plan, outcome) is None:
                return outcome  # type: ignore[return-value]  # _decide: a response
            # a 401 refusing a command-made token: the next attempt takes a fresh one
            assert isinstance(outcome, httpx2.Response)
            assert token is not None
            try:
                fresh = await asyncio.to_thread(self._fresh_token, token)
            except BaseException:
                await outcome.aclose()
                raise
            if fresh is None:  # the backoff holds the command off: the 401 stands
                plan.close()
                return outcome
            token = fresh
            await outcome.aclose()  # refused: the next attempt replaces it

    async def _attempt(self, request: httpx2.Request) -> httpx2.Response | httpx2.HTTPError:
        try:
            return await self.client.send(request, stream=True, follow_redirects=False)
        except httpx2.HTTPError as exc:
            return exc

    async def read(self, response: httpx2.Response) -> bytes:
        """*response*'s whole body, decoded, at most ``limits.max_upstream_body`` bytes.
        Raises a ModelError (a ProtocolError past the limit)."""
        failure: httpx2.HTTPError | None = None
        try:
            return await read_body(
                response,
                self.settings.limits.max_upstream_body,
                self._provider,
                "limits.max_upstream_body",
            )
        except httpx2.HTTPError as exc:
            failure = exc
        raise self._map(failure)  # not in a handler: nothing chained

    async def aclose(self) -> None:
        if self._owns:
            await self.client.aclose()


class SyncUpstream(_Base[httpx2.Client, httpx2.BaseTransport]):
    """The upstream over a sync ``httpx2.Client`` (in-process sync SDK clients). A sync
    client may be shared by many threads: :attr:`slots` bounds their concurrent upstream
    calls (``limits.max_upstream``) as :attr:`AsyncUpstream.slots` bounds a process's."""

    def __init__(
        self,
        settings: Settings,
        *,
        client: httpx2.Client | None = None,
        transport: httpx2.BaseTransport | None = None,
        observe: Any = None,
    ) -> None:
        super().__init__(settings, client=client, transport=transport, observe=observe)
        #: concurrent upstream calls of this client's threads, turns and tokenizer calls
        self.slots = threading.BoundedSemaphore(settings.limits.max_upstream)

    def _new_client(self, transport: httpx2.BaseTransport | None) -> httpx2.Client:
        limit = self.settings.limits.max_upstream
        return httpx2.Client(
            transport=transport,
            timeout=_timeout(self.settings),
            limits=httpx2.Limits(
                max_connections=limit,
                max_keepalive_connections=limit,
                keepalive_expiry=self.settings.limits.keepalive_expiry,
            ),
            headers=_DEFAULT_HEADERS,
        )

    def open(self, call: UpstreamCall) -> httpx2.Response:
        """:meth:`AsyncUpstream.open` over the sync client."""
        plan = self._plan(call.latency)
        next(plan)
        token = self._token()
        while True:
            try:
                request = self._request(call, self._headers(call, token))
                outcome: httpx2.Response | httpx2.HTTPError = self.client.send(
                    request, stream=True, follow_redirects=False
                )
            except httpx2.HTTPError as exc:
                outcome = exc
            if self._decide(plan, outcome) is None:
                return outcome  # type: ignore[return-value]  # _decide: a response
            assert isinstance(outcome, httpx2.Response)
            assert token is not None
            try:
                fresh = self._fresh_token(token)
            except BaseException:
                outcome.close()
                raise
            if fresh is None:
                plan.close()
                return outcome
            token = fresh
            outcome.close()

    def read(self, response: httpx2.Response) -> bytes:
        """:meth:`AsyncUpstream.read` over the sync client."""
        failure: httpx2.HTTPError | None = None
        try:
            return read_body_sync(
                response,
                self.settings.limits.max_upstream_body,
                self._provider,
                "limits.max_upstream_body",
            )
        except httpx2.HTTPError as exc:
            failure = exc
        raise self._map(failure)

    def close(self) -> None:
        if self._owns:
            self.client.close()
