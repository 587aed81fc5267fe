"""The exchange state machine: a sans-I/O mirror of ``spec/TpxTransport.tla``.

No sockets, no httpx2: dicts and bytes go in, dicts and bytes come out, and the
I/O shells in :mod:`tpx.transport.client` move the bytes. Each step is one action of
the spec and is refused (:class:`~tpx.errors.ExchangeStateError`, nothing
changes) when the spec's guard does not hold. What a step reads lives beside it:
a reply in :mod:`tpx.transport.reply`, the provider and the tool ids in bodies in
:mod:`tpx.transport.wire`.

==============================  ===================================================
spec/TpxTransport.tla           here
==============================  ===================================================
``Select(k, t)``                :func:`select_provider`
``NativeShape(p)``              :func:`native_shape`
``CallerSend``                  :meth:`Exchange.send` (pairing holds)
``CallerAbort``                 :meth:`Exchange.abort`, and :meth:`Exchange.send` when
                                the tool_results do not answer the pending tool_uses
``NoProvider``                  :meth:`Exchange.no_provider`
``ProviderReply``               :meth:`Exchange.receive` (2xx, well-formed native body);
                                streaming: :meth:`Exchange.end_stream` once the stream
                                completed well-formed (``[DONE]`` / ``message_stop``)
``ProviderFail``                :meth:`Exchange.receive` (non-2xx / bad body) and
                                :meth:`Exchange.fail` (timeout, network, TLS, the
                                caller stopped reading); streaming:
                                :meth:`Exchange.receive_stream_start` (non-2xx),
                                :meth:`Exchange.feed` (error event, malformed chunk,
                                bad tool arguments), :meth:`Exchange.end_stream` (the
                                body ended before ``[DONE]`` / ``message_stop``)
``Deliver``                     :meth:`Exchange.deliver` / :meth:`Exchange.deliver_bytes`
                                (streaming too: the accumulated Messages body)
``Halted``                      :attr:`Exchange.halted` (no step: nothing to do)
``MaxTurns``                    ``max_turns`` (``None``: unbounded)
variables                       :class:`ExchangeSnapshot` (:meth:`Exchange.snapshot`)
each action as it happens       ``Exchange(..., observer=...)`` (see below)
``PairingInv``                  checked on every send / receive (see below)
==============================  ===================================================

Concrete readings of the abstract spec:

* ``pending`` holds the tool_use ids *the caller sees* (for TPX the translator's
  reversible encodings of the provider's ids); ``wire_ids`` / ``emitted`` hold the
  ids on the wire (the provider's own ids).
* ``CallerSend`` requires the tool_result ids of the request's last run of
  consecutive user messages (the Messages API merges consecutive user messages into
  one turn; usually the run is just the last user message) to answer exactly
  ``pending``. When they do not and ``pending`` is non-empty the send performs
  ``CallerAbort`` and raises :class:`~tpx.errors.PairingError`.
  When ``pending`` is empty the spec enables no abort, so a request carrying
  tool_results then raises :class:`~tpx.errors.PairingError` and changes nothing.
* A request the transport cannot frame (a feature the translator cannot carry)
  raises before anything is sent and changes nothing: no spec action covers it.
* Streaming (``stream: true``) keeps the same steps. ``CallerSend`` frames the
  request with ``stream: true`` (TPX: plus ``stream_options.include_usage``). The
  reply is consumed incrementally while the phase stays ``req``:
  :meth:`Exchange.receive_stream_start` (status, headers), then
  :meth:`Exchange.feed` (bytes in any chunking -> the Messages stream events for
  the caller, translated for TPX, passed through for ANTHROPIC), then
  :meth:`Exchange.end_stream`: ``ProviderReply`` when the stream completed
  well-formed, else ``ProviderFail``. Every failure while streaming is a
  ``ProviderFail`` that returns, as the last event, the Messages ``error`` event
  (``ModelError.body()``); the error itself is :attr:`Exchange.last_error`.
  ``Deliver`` then returns the body accumulated from the events and sets
  ``pending`` to the tool_use ids the caller received. Events reach the caller
  before ``Deliver``; the caller's obligations (``pending``) only change at
  ``Deliver``, as in the spec. :attr:`Exchange.stream_complete` tells the I/O
  shell that the terminal event (``message_stop``, always the last event
  returned) was produced: the shell hands every event before it over first and
  takes ``ProviderReply`` and ``Deliver`` only when the caller asks for the
  terminal event, so a caller that stops reading before ``message_stop`` fails
  the exchange (it may not have seen every tool_use) and one that stops right
  after it keeps its obligations. When the body ends, :meth:`Exchange.flush`
  returns the events of a last event the body ended without its closing blank
  line (no action), before :meth:`Exchange.end_stream`.
* The response is validated *and translated* in :meth:`Exchange.receive`, so a
  body that cannot be handed back Messages-shaped is a ``ProviderFail`` (from
  phase ``req``), never a stuck ``resp`` phase.
* ``PairingInv`` is checked concretely: the translated request must carry one tool
  result per tool_result the caller sent, and the translated response one (unique)
  tool_use per tool call the provider emitted; otherwise
  :class:`~tpx.errors.ProtocolError`. Providers may repeat or omit ids (the
  translator's encoding keeps caller ids unique), so wire ids are compared by count.

Observing the actions: ``Exchange(provider, observer=f)`` calls ``f(action, snapshot)``
exactly once after every step that changes the state, with the spec action's name
(``"CallerSend"``, ``"CallerAbort"``, ``"NoProvider"``, ``"ProviderReply"``,
``"ProviderFail"``, ``"Deliver"``) and :meth:`Exchange.snapshot` after it. It is not called
for a refused step (:class:`~tpx.errors.ExchangeStateError`), for a request refused before
anything changed (a :class:`~tpx.errors.PairingError` with nothing pending, a request that
cannot be framed) nor for the streaming calls that take no action
(:meth:`Exchange.receive_stream_start` on a 2xx, :meth:`Exchange.feed` without a failure).

* The step is complete when the observer runs: it may read the exchange (properties,
  :meth:`Exchange.snapshot`, :meth:`Exchange.enabled_actions`, :attr:`Exchange.outbound`);
  a step taken from inside it is refused (:class:`~tpx.errors.ExchangeStateError`).
* An exception raised by the observer propagates from the step's method *after* the step,
  in place of its result (or of the error it raises; a ``ProviderFail``'s error stays in
  :attr:`Exchange.last_error`). The exchange keeps the state the observer was shown and
  takes the next step as usual: nothing is rolled back, nothing is half done.
* The observer receives no credentials: a snapshot holds the spec's variables (provider,
  turn, phase, tool ids, shapes, outcome), never the ``secrets``.

``tests/transport/test_exchange.py`` walks every reachable state of the spec (via the
mirror in :mod:`tpx.oracle.model`, ToolIds = {t1, t2}, MaxTurns = 3: 361 states) and
replays each path on this machine, for both providers, checking the variables and
the set of enabled actions state by state.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Literal

import attrs
import orjson

from tpx import _safe
from tpx._scrub import Scrubber
from tpx.errors import (
    WITHHELD,
    ExchangeStateError,
    ModelError,
    PairingError,
    ProtocolError,
    UnauthorizedError,
    UnsupportedError,
    detached,
    error_for_status,
    holds_secret,
    secret_forms,
)
from tpx.transport.reply import Reply, StreamRead, internal, read_body
from tpx.transport.translate.profiles import Profile, get_profile
from tpx.transport.translate.request import translate_checked
from tpx.transport.translate.signing import signer_for
from tpx.transport.wire import (
    ANTHROPIC_VERSION,
    Provider,
    Shape,
    answered_ids,
    native_shape,
    openai_request_tool_ids,
    pairing_problem,
    reply_headers,
    select_provider,
    serialize,
)

__all__ = [
    "ANTHROPIC_VERSION",
    "Exchange",
    "ExchangeObserver",
    "ExchangeSnapshot",
    "OutboundRequest",
    "Outcome",
    "Phase",
    "Provider",
    "Shape",
    "native_shape",
    "select_provider",
]

Phase = Literal["idle", "req", "resp"]
Outcome = Literal["none", "ok", "err"]


def _caller_error(message: str) -> ProtocolError:
    """The error for a request the caller got wrong (400 ``invalid_request_error``)."""
    return ProtocolError(
        f"invalid Messages request: {message}", status=400, error_type="invalid_request_error"
    )


@attrs.frozen
class OutboundRequest:
    """One HTTP request to make, without credentials (the I/O shell adds them)."""

    method: str
    path: str
    headers: tuple[tuple[str, str], ...]
    body: bytes

    def header_dict(self) -> dict[str, str]:
        return dict(self.headers)


@functools.lru_cache(maxsize=16)
def _prepared(values: tuple[str, ...]) -> tuple[tuple[str, ...], Scrubber]:
    """Every rendered form of *values* (:func:`tpx.errors.secret_forms`) and the scrubber
    of them: the same for every exchange holding these values (a few entries: a token
    command's new credential gets its own)."""
    forms = secret_forms(values)
    return forms, Scrubber(forms)


@attrs.frozen
class ExchangeSnapshot:
    """The spec's exchange variables at one instant (``hasKey``/``hasToken`` live in boot)."""

    provider: Provider
    turn: int
    phase: Phase
    pending: frozenset[str]
    last_outcome: Outcome
    max_turns: int | None
    req_ids: frozenset[str]
    wire_shape: Shape
    wire_ids: frozenset[str]
    emitted: frozenset[str]
    got_shape: Shape
    wire_list: tuple[str, ...] = ()
    """``wire_ids`` as a multiset: one entry per tool id on the wire, in order, repeats kept
    (a provider may repeat ``""`` or ``call_0``, or share one id, within a response; the
    caller-side ids stay unique, :mod:`tpx.transport.translate.ids`). A call without an id is
    ``""``,
    what goes back to the provider for it."""
    emitted_list: tuple[str, ...] = ()
    """``emitted`` as a multiset, as ``wire_list``."""


#: ``observer(action, snapshot)``: called after every spec action the exchange takes.
ExchangeObserver = Callable[[str, ExchangeSnapshot], None]


class Exchange:
    """One boot's exchange machine. Provider and bound are fixed at construction.

    ``secrets`` (never shown) are only used to redact error messages built from
    provider output; the exchange itself never sends credentials. ``observer`` is called
    with the spec action's name and the snapshot after every state-changing step (see the
    module docstring: never for a refused step; its exceptions propagate once the step is
    complete). ``profile`` (the TPX upstream's kind) and ``thinking_secret`` (signs and
    verifies thinking blocks; redacted like ``secrets``) go to the translator
    (:mod:`tpx.transport.translate.profiles`, :mod:`tpx.transport.translate.signing`).

    An exchange cannot be pickled or copied (``pickle``, ``copy``, ``deepcopy`` raise
    :class:`TypeError`): it keeps the credentials' forms for redaction. Use
    :meth:`snapshot` for a credential-free copy of its state.
    """

    __slots__ = (
        "_delivered",
        "_delivered_ids",
        "_emitted",
        "_emitted_list",
        "_got_shape",
        "_last_error",
        "_last_outcome",
        "_max_turns",
        "_model",
        "_notifying",
        "_observer",
        "_observer_failure",
        "_outbound",
        "_pending",
        "_phase",
        "_profile",
        "_provider",
        "_req_ids",
        "_scrub",
        "_secrets",
        "_signer",
        "_stream",
        "_streaming",
        "_turn",
        "_wire_ids",
        "_wire_list",
        "_wire_model",
        "_wire_shape",
    )

    def __init__(
        self,
        provider: Provider,
        *,
        max_turns: int | None = None,
        model: str | None = None,
        secrets: Iterable[str | None] = (),
        observer: ExchangeObserver | None = None,
        profile: str | Profile | None = None,
        thinking_secret: str | bytes | None = None,
    ) -> None:
        if not isinstance(provider, Provider):
            raise TypeError(f"provider must be a Provider, got {type(provider).__name__}")
        if max_turns is not None and (isinstance(max_turns, bool) or max_turns < 0):
            raise ValueError("max_turns must be None or a non-negative int")
        if observer is not None and not callable(observer):
            raise TypeError(f"observer must be callable, got {type(observer).__name__}")
        self._provider = provider
        self._max_turns = max_turns
        self._model = model
        # The upstream profile and the thinking signer (tpx.transport.translate.profiles /
        # .signing).
        self._profile = get_profile(profile)
        self._signer = signer_for(thinking_secret)
        values = tuple(v for v in secrets if v)
        if isinstance(thinking_secret, str) and thinking_secret:
            values = (*values, thinking_secret)
        # Every rendered form of each secret (repr / bytes repr / JSON escapes too), and the
        # scrubber of echoes in delivered replies: built once per tuple of values.
        self._secrets, self._scrub = _prepared(values)
        self._turn = 0
        self._phase: Phase = "idle"
        self._pending: frozenset[str] = frozenset()
        self._req_ids: frozenset[str] = frozenset()
        self._wire_shape: Shape = "messages"
        self._wire_ids: frozenset[str] = frozenset()
        self._wire_list: tuple[str, ...] = ()
        self._emitted: frozenset[str] = frozenset()
        self._emitted_list: tuple[str, ...] = ()
        self._got_shape: Shape = "messages"
        self._last_outcome: Outcome = "none"
        self._delivered: dict[str, Any] | None = None
        self._delivered_ids: frozenset[str] = frozenset()
        self._wire_model: str | None = None
        self._streaming = False
        self._stream: StreamRead | None = None
        self._last_error: ModelError | None = None
        self._outbound: OutboundRequest | None = None
        self._observer = observer
        self._observer_failure: BaseException | None = None
        self._notifying = False

    # -- read-only state ---------------------------------------------------

    @property
    def provider(self) -> Provider:
        return self._provider

    @property
    def turn(self) -> int:
        return self._turn

    @property
    def phase(self) -> Phase:
        return self._phase

    @property
    def pending(self) -> frozenset[str]:
        return self._pending

    @property
    def last_outcome(self) -> Outcome:
        return self._last_outcome

    @property
    def max_turns(self) -> int | None:
        return self._max_turns

    @property
    def model(self) -> str | None:
        return self._model

    @property
    def streaming(self) -> bool:
        """The request in flight asked for a stream (``stream: true``)."""
        return self._phase != "idle" and self._streaming

    @property
    def stream_complete(self) -> bool:
        """The stream in flight produced its terminal event (``message_stop``)."""
        return self._stream is not None and self._stream.complete

    @property
    def last_error(self) -> ModelError | None:
        """The error of the last ``ProviderFail`` (``None`` once a new request is sent)."""
        return self._last_error

    @property
    def outbound(self) -> OutboundRequest | None:
        """The request :meth:`send` framed for the exchange in flight (``None`` when idle).

        Credential-free: the I/O shell adds the credential to its own HTTP request.
        """
        return self._outbound

    @property
    def halted(self) -> bool:
        """``Halted``'s guard: idle with the turn budget spent."""
        return self._phase == "idle" and self._turn == self._max_turns

    def snapshot(self) -> ExchangeSnapshot:
        return ExchangeSnapshot(
            provider=self._provider,
            turn=self._turn,
            phase=self._phase,
            pending=self._pending,
            last_outcome=self._last_outcome,
            max_turns=self._max_turns,
            req_ids=self._req_ids,
            wire_shape=self._wire_shape,
            wire_ids=self._wire_ids,
            emitted=self._emitted,
            got_shape=self._got_shape,
            wire_list=self._wire_list,
            emitted_list=self._emitted_list,
        )

    def enabled_actions(self) -> frozenset[str]:
        """Names of the spec actions whose guards hold now."""
        names: set[str] = set()
        if self._phase == "idle":
            if self._below_bound():
                if self._provider is Provider.NONE:
                    names.add("NoProvider")
                else:
                    names.add("CallerSend")
                    if self._pending:
                        names.add("CallerAbort")
            else:
                names.add("Halted")
        elif self._phase == "req":
            names.update(("ProviderReply", "ProviderFail"))
        else:
            names.add("Deliver")
        return frozenset(names)

    def __reduce_ex__(self, protocol: Any) -> Any:
        """Refused: an exchange keeps the credentials (to redact errors) and a live stream."""
        raise TypeError(
            "an Exchange cannot be pickled or copied: it holds the credentials it redacts "
            "(snapshot() gives its state without them)"
        )

    def __repr__(self) -> str:
        return (
            f"Exchange(provider={self._provider.name}, turn={self._turn}, "
            f"phase={self._phase!r}, pending={sorted(self._pending)!r}, "
            f"last_outcome={self._last_outcome!r}, max_turns={self._max_turns!r})"
        )

    # -- guards --------------------------------------------------------------

    def _below_bound(self) -> bool:
        return self._max_turns is None or self._turn < self._max_turns

    def _require(self, action: str, ok: bool) -> None:
        if self._notifying:
            raise ExchangeStateError(
                f"{action} refused: the observer may read the exchange, not take steps"
            )
        if not ok:
            raise ExchangeStateError(
                f"{action} is not enabled: provider={self._provider.name}, "
                f"phase={self._phase!r}, turn={self._turn}, max_turns={self._max_turns!r}"
            )

    def _end_turn(self, outcome: Outcome) -> None:
        self._turn += 1
        self._phase = "idle"
        self._last_outcome = outcome
        self._outbound = None

    def _notify(self, action: str) -> None:
        """Show *action* and the state after it to the observer. Called last in a step:
        whatever the observer raises, the step is complete."""
        observer = self._observer
        if observer is None:
            return
        self._notifying = True
        try:
            observer(action, self.snapshot())
        except BaseException as exc:
            self._observer_failure = exc  # so a shell can tell it from its own failures
            raise
        finally:
            self._notifying = False

    def raised_by_observer(self, exc: BaseException) -> bool:
        """*exc* is what the observer raised at the last step (it propagates as is)."""
        return exc is self._observer_failure

    # -- CallerSend / CallerAbort / NoProvider ----------------------------------

    def send(self, request: Mapping[str, Any], *, shallow: bool = False) -> OutboundRequest:
        """``CallerSend``: frame (ANTHROPIC) or translate (TPX) the caller's Messages body.

        Raises :class:`PairingError` after ``CallerAbort`` when the last user
        message's tool_results do not answer exactly the pending tool_uses.
        *shallow*: the caller has already held *request* to the depth rule (e.g.
        :func:`tpx._safe.parsed_too_deep` on the value ``orjson`` parsed), so the walk
        is not done again.
        """
        self._require(
            "CallerSend",
            self._phase == "idle" and self._below_bound() and self._provider is not Provider.NONE,
        )
        if not isinstance(request, Mapping):
            raise TypeError(f"request must be a mapping, got {type(request).__name__}")
        if not shallow and _safe.too_deep(request):
            raise _caller_error(
                f"the request nests deeper than {_safe.MAX_DEPTH} levels; nothing was sent"
            )
        refused: ModelError | None = None
        try:
            answered = answered_ids(request)
        except Exception as exc:  # a hostile Mapping; no state changed yet
            refused = _caller_error(f"the request cannot be read ({type(exc).__name__})")
        if refused is not None:
            raise refused
        problem = pairing_problem(answered, self._pending)
        if problem is not None:
            if self._pending:
                self._caller_abort()
                raise self._withheld(
                    PairingError(f"{problem}; the turn was aborted and nothing was sent")
                )
            raise self._withheld(PairingError(f"{problem}; nothing was sent"))
        streaming = request.get("stream") is True
        try:
            outbound, wire_ids, wire_model = self._frame(request, streaming)
        except ModelError as exc:
            refused = exc
        except Exception as exc:  # unforeseen: still the request's doing, nothing was sent
            refused = _caller_error(f"the request cannot be framed ({type(exc).__name__})")
        if refused is not None:
            raise detached(self._withheld(refused))  # outside the handler: no chained context
        if len(wire_ids) != len(answered):
            # e.g. a tool_result turn followed by an empty assistant turn: the history is
            # malformed (the Messages API requires non-empty assistant content there)
            raise _caller_error(
                f"the history carries {len(wire_ids)} tool results on the wire for "
                f"{len(answered)} tool_result blocks in its last user turn (an assistant "
                "message with empty content?); nothing was sent"
            )
        self._req_ids = frozenset(answered)
        self._wire_shape = native_shape(self._provider)
        self._wire_ids = frozenset(wire_ids)
        self._wire_list = tuple(wire_ids)
        self._wire_model = wire_model
        self._streaming = streaming
        self._stream = None
        self._last_error = None
        self._outbound = outbound
        self._phase = "req"
        self._notify("CallerSend")
        return outbound

    def send_bytes(self, request: bytes) -> OutboundRequest:
        """:meth:`send` for a JSON-encoded request body."""
        failure: str | None = None
        try:
            decoded = _safe.loads(request)
        except ValueError as exc:  # not JSON, or nested too deep
            failure = str(exc)
        if failure is not None:
            raise UnsupportedError(f"request body is not JSON: {failure}")
        if not isinstance(decoded, dict):
            raise UnsupportedError("request body is not a JSON object")
        return self.send(decoded, shallow=True)  # _safe.loads held it to the depth rule

    def _frame(
        self, request: Mapping[str, Any], streaming: bool = False
    ) -> tuple[OutboundRequest, list[str], str | None]:
        headers: list[tuple[str, str]] = [
            ("content-type", "application/json"),
            ("accept", "text/event-stream" if streaming else "application/json"),
        ]
        if self._provider is Provider.ANTHROPIC:
            body: Mapping[str, Any] = dict(request)
            path = "/v1/messages"
            headers.append(("anthropic-version", ANTHROPIC_VERSION))
            wire_ids = answered_ids(request)
        else:
            body = translate_checked(  # send() held the request to the depth rule
                request, model=self._model, profile=self._profile, secret=self._signer
            ).body
            path = "/v1/chat/completions"
            wire_ids = openai_request_tool_ids(body)
        problem: str | None = None
        try:
            data = serialize(body)
        except TypeError as exc:
            problem = str(exc)
        if problem is not None:
            raise UnsupportedError(f"request is not JSON-serializable: {problem}")
        model = body.get("model")
        return (
            OutboundRequest("POST", path, tuple(headers), data),
            wire_ids,
            model if isinstance(model, str) else None,
        )

    def abort(self) -> PairingError:
        """``CallerAbort``: the caller cannot answer the pending tool_uses.

        Returns the :class:`PairingError` the turn ended with (for the caller to raise).
        """
        self._require(
            "CallerAbort",
            self._phase == "idle"
            and self._below_bound()
            and self._provider is not Provider.NONE
            and bool(self._pending),
        )
        missing = sorted(self._pending)
        self._caller_abort()
        return PairingError(f"the caller aborted without answering tool_use ids {missing}")

    def _caller_abort(self) -> None:
        self._pending = frozenset()
        self._turn += 1
        self._last_outcome = "err"
        self._notify("CallerAbort")

    def no_provider(self) -> UnauthorizedError:
        """``NoProvider``: no credentials at boot. Returns the error to raise."""
        self._require(
            "NoProvider",
            self._phase == "idle" and self._below_bound() and self._provider is Provider.NONE,
        )
        self._turn += 1
        self._last_outcome = "err"
        self._notify("NoProvider")
        return UnauthorizedError(
            "no credentials at boot: set ANTHROPIC_API_KEY (Anthropic) or "
            "TPX_OAUTH_TOKEN with TPX_BASE_URL (TPX)"
        )

    # -- ProviderReply / ProviderFail ------------------------------------------

    def receive(self, status: int, headers: Mapping[str, str] | None, body: bytes) -> None:
        """``ProviderReply`` for a 2xx well-formed native body, else ``ProviderFail``.

        *headers* ``None`` means no headers. A *status* that is not an int or *headers*
        that are not a mapping raise :class:`TypeError` and change nothing.

        On failure the exchange is back in ``idle`` (turn+1, ``err``, pending
        cleared) and the :class:`ModelError` is raised.
        """
        self._require("ProviderReply", self._phase == "req" and not self._streaming)
        headers = reply_headers(status, headers)
        name = self._provider.name
        failure: ModelError | None = None
        try:
            if not 200 <= status < 300:
                failure = error_for_status(
                    status, headers, body, provider=name, secrets=self._secrets
                )
            else:
                reply = read_body(
                    body,
                    self._provider,
                    scrub=self._scrub,
                    signer=self._signer,
                    wire_model=self._wire_model,
                )
        except ModelError as exc:
            failure = ProtocolError(exc.message, provider=name)
        except Exception as exc:  # unforeseen: the reply still cannot be delivered
            failure = internal(exc)
        if failure is not None:  # raised outside the handlers: nothing chained
            raise self._provider_fail(failure)
        self._replied(reply)
        self._notify("ProviderReply")

    def _replied(self, reply: Reply) -> None:
        """``ProviderReply``'s effect: the reply is ready for ``Deliver``."""
        self._delivered = reply.message
        self._delivered_ids = frozenset(reply.ids)
        self._emitted = frozenset(reply.wire_ids)
        self._emitted_list = self._wire_list = tuple(reply.wire_ids)
        self._wire_ids = frozenset(reply.wire_ids)
        self._wire_shape = native_shape(self._provider)
        self._phase = "resp"

    def fail(self, error: ModelError) -> ModelError:
        """``ProviderFail`` for a failure the I/O shell saw (timeout, network, TLS).

        Returns *error* (its message redacted) for the shell to raise.
        """
        if not isinstance(error, ModelError):
            raise TypeError(f"error must be a ModelError, got {type(error).__name__}")
        self._require("ProviderFail", self._phase == "req")
        return self._provider_fail(error)

    def _withheld(self, error: ModelError) -> ModelError:
        """*error* with its message withheld whole when a whole form of the credential
        stands in it. Whole or not at all: the text may quote the caller's input, and
        what is replaced would show which part matched (:mod:`tpx.errors`)."""
        if self._secrets and holds_secret(error.message, self._secrets):
            error.message = f"{self._provider.name}: {WITHHELD}"
            error.args = (error.message,)
        return error

    def _provider_fail(self, error: ModelError) -> ModelError:
        detached(self._withheld(error))
        if error.provider is None:
            error.provider = self._provider.name
        self._pending = frozenset()
        self._delivered = None
        self._stream = None
        self._last_error = error
        self._end_turn("err")
        self._notify("ProviderFail")
        return error

    # -- ProviderReply / ProviderFail, streaming -----------------------------------

    def receive_stream_start(
        self, status: int, headers: Mapping[str, str] | None, body: bytes = b""
    ) -> None:
        """The streamed reply's status line and headers arrived.

        Non-2xx (*body*: the error body, read by the shell) is ``ProviderFail``: the
        mapped :class:`ModelError` is raised. A 2xx JSON (not event-stream) reply is
        ``ProviderFail`` with a :class:`ProtocolError`. Otherwise the exchange stays in
        ``req`` and :meth:`feed` takes the body.
        """
        self._require(
            "ProviderReply", self._phase == "req" and self._streaming and self._stream is None
        )
        headers = reply_headers(status, headers)
        name = self._provider.name
        if not 200 <= status < 300:
            raise self._provider_fail(
                error_for_status(status, headers, body, provider=name, secrets=self._secrets)
            )
        content_type = {k.lower(): v for k, v in headers.items()}.get("content-type", "")
        if content_type.lower().startswith("application/json"):
            raise self._provider_fail(
                ProtocolError(
                    f"{name} answered a streaming request with {content_type}, "
                    "not text/event-stream",
                    provider=name,
                )
            )
        self._stream = StreamRead(
            self._provider, scrub=self._scrub, signer=self._signer, wire_model=self._wire_model
        )

    def feed(self, chunk: bytes) -> list[dict[str, Any]]:
        """The Messages stream events for the next bytes of the streamed body.

        On a failure (a provider error event, a malformed chunk, tool arguments that
        are not a JSON object, ...) this is ``ProviderFail``: the returned list ends
        with the Messages ``error`` event, the exchange is back in ``idle`` and the
        error is :attr:`last_error`. Bytes after the terminal event are ignored.
        """
        self._require("ProviderReply", self._phase == "req" and self._stream is not None)
        stream = self._stream
        assert stream is not None
        out: list[dict[str, Any]] = []
        try:
            stream.feed(chunk, out)
        except ModelError as error:
            self._stream_fail(error, out)
        except Exception as exc:  # unforeseen: still a ProviderFail, never a stuck "req"
            self._stream_fail(internal(exc), out)
        return out

    def flush(self) -> list[dict[str, Any]]:
        """The streamed body ended: the events of what the SSE parser still holds (a last
        event whose lines all ended but whose closing blank line never came).

        Takes no action (call :meth:`end_stream` next), except ``ProviderFail`` when that
        event is malformed or a provider error (as in :meth:`feed`: the list then ends
        with the ``error`` event). Lets an I/O shell hand over every event before the
        terminal one before ``ProviderReply`` (see the module docstring).
        """
        self._require("ProviderReply", self._phase == "req" and self._stream is not None)
        stream = self._stream
        assert stream is not None
        out: list[dict[str, Any]] = []
        if stream.complete:
            return out
        try:
            stream.close(out)
        except ModelError as error:
            self._stream_fail(error, out)
        except Exception as exc:
            self._stream_fail(internal(exc), out)
        return out

    def end_stream(self) -> list[dict[str, Any]]:
        """The streamed body ended: ``ProviderReply`` if the stream completed, else
        ``ProviderFail`` (the returned list then ends with the ``error`` event)."""
        self._require("ProviderReply", self._phase == "req" and self._stream is not None)
        stream = self._stream
        assert stream is not None
        out: list[dict[str, Any]] = []
        try:
            if not stream.complete:
                stream.close(out)
            reply = stream.finish()
        except ModelError as error:
            self._stream_fail(error, out)
        except Exception as exc:
            self._stream_fail(internal(exc), out)
        else:
            self._stream = None
            self._replied(reply)
            self._notify("ProviderReply")
        return out

    def _stream_fail(self, error: ModelError, out: list[dict[str, Any]]) -> None:
        if isinstance(error, ProtocolError | UnsupportedError) and error.provider is None:
            error = ProtocolError(error.message, provider=self._provider.name)
        self._provider_fail(error)
        out.append(error.body())

    # -- Deliver -------------------------------------------------------------------

    def deliver(self) -> dict[str, Any]:
        """``Deliver``: the Messages-shaped response; its tool_use ids become pending."""
        self._require("Deliver", self._phase == "resp" and self._delivered is not None)
        delivered = self._delivered
        assert delivered is not None
        self._delivered = None
        self._pending = self._delivered_ids
        self._got_shape = "messages"
        self._end_turn("ok")
        self._notify("Deliver")
        return delivered

    def deliver_bytes(self) -> bytes:
        """:meth:`deliver`, JSON-encoded."""
        return orjson.dumps(self.deliver())
