"""A provider's reply read into what the caller gets, for ``ProviderReply``.

Sans-I/O and stateless but for one stream's readers; :class:`~tpx.transport.exchange.Exchange`
takes the spec's steps around it:

* :func:`read_body` reads a whole body: the Messages body (translated for TPX), the tool_use
  ids the caller sees in it and the tool ids on the wire (:class:`Reply`);
* :class:`StreamRead` reads a streamed one: bytes in any chunking -> the Messages events for the
  caller (translated for TPX, passed through for ANTHROPIC), then at its end the same
  :class:`Reply`, built from the events the caller was handed.

Both remove a credential the provider echoed (:mod:`tpx._scrub`; in a stream also one split
across deltas) and hold what they hand over to ShapeInv (:mod:`tpx.transport.shape`). A reply
that cannot be handed back Messages-shaped raises :class:`~tpx.errors.ProtocolError`, which the
exchange turns into ``ProviderFail``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import attrs

from tpx import _safe
from tpx._scrub import DeltaScrubber, Scrubber
from tpx.errors import ProtocolError
from tpx.transport.shape import check_event, check_message
from tpx.transport.translate.response import response_checked
from tpx.transport.translate.signing import ThinkingSigner
from tpx.transport.translate.stream import (
    AnthropicStreamReader,
    MessageAccumulator,
    OpenAIStreamTranslator,
    SSEEvent,
    SSEParser,
)
from tpx.transport.wire import Provider, openai_response_tool_ids, wire_str

__all__ = ["Reply", "StreamRead", "internal", "read_body"]


@attrs.frozen
class Reply:
    """A reply as the caller gets it: the Messages body, its tool_use ids (what becomes
    ``pending`` at ``Deliver``), and the tool ids on the wire (``emitted``)."""

    message: dict[str, Any]
    ids: list[str]
    wire_ids: list[str]


def internal(exc: BaseException) -> ProtocolError:
    """The ProtocolError for an exception tpx did not foresee while reading a reply (only
    its class is kept: its text may quote the reply)."""
    return ProtocolError(f"the reply could not be read ({type(exc).__name__})")


def read_body(
    body: bytes,
    provider: Provider,
    *,
    scrub: Scrubber,
    signer: ThinkingSigner,
    wire_model: str | None,
) -> Reply:
    """A whole 2xx body. *wire_model*: the model the request named (reported when the
    provider names none)."""
    walk = False
    if scrub:  # a credential echoed by the provider never reaches the caller
        body, walk = scrub.reply(body)
    try:
        decoded = _safe.loads(body)
    except _safe.DepthError:
        raise ProtocolError(f"response body nests deeper than {_safe.MAX_DEPTH} levels") from None
    except ValueError:
        raise ProtocolError("response body is not JSON") from None
    if not isinstance(decoded, dict):
        raise ProtocolError("response body is not a JSON object")
    if walk:  # an escape may spell a secret (and an error may quote what it decodes to)
        decoded = scrub.value(decoded)
    if provider is Provider.ANTHROPIC:
        ids = check_message(decoded)
        return Reply(decoded, ids, ids)
    if not isinstance(decoded.get("choices"), list) or not decoded["choices"]:
        raise ProtocolError("response is not a chat completion (no choices)")
    wire_ids = openai_response_tool_ids(decoded)
    try:
        # Report the provider's model; if it named none, the model the request named.
        fallback = None if isinstance(decoded.get("model"), str) else wire_model
        # _safe.loads held it to the depth rule (the scrubber only replaces strings)
        translated = response_checked(decoded, model=fallback, secret=signer).body
    except (KeyError, IndexError, TypeError, ValueError, AttributeError) as exc:
        raise ProtocolError(f"cannot translate the response: {type(exc).__name__}") from None
    delivered = dict(translated)
    if walk:  # tool arguments are JSON in a string: what their input decodes to
        delivered = scrub.value(delivered)
    ids = check_message(delivered)
    if len(ids) != len(wire_ids):
        raise ProtocolError(
            f"translation returned {len(ids)} tool_use blocks for {len(wire_ids)} tool calls"
        )
    return Reply(delivered, ids, wire_ids)


class StreamRead:
    """One streamed reply being read: the SSE parser, the provider's reader (or translator),
    the deltas held back while they could begin a secret, and (TPX) an accumulator of the
    events produced for the caller, from which the delivered body is built."""

    __slots__ = ("_hold", "_own", "_parser", "_provider", "_reader", "_scrub")

    def __init__(
        self,
        provider: Provider,
        *,
        scrub: Scrubber,
        signer: ThinkingSigner,
        wire_model: str | None,
    ) -> None:
        name = provider.name
        self._provider = provider
        self._scrub = scrub
        self._parser = SSEParser()
        self._reader: AnthropicStreamReader | OpenAIStreamTranslator
        if provider is Provider.ANTHROPIC:
            self._reader = AnthropicStreamReader(provider=name)
            self._own: MessageAccumulator | None = None
        else:
            self._reader = OpenAIStreamTranslator(
                default_model=wire_model, provider=name, secret=signer
            )
            self._own = MessageAccumulator()
        #: the deltas' ends held back while they could begin a secret (tpx._scrub)
        self._hold = DeltaScrubber(scrub) if scrub else None

    def rescrub(self, scrub: Scrubber) -> None:
        """Scrub with *scrub* from now on (a credential that came into use while reading)."""
        self._scrub = scrub
        if self._hold is not None:
            self._hold.scrub = scrub

    @property
    def complete(self) -> bool:
        """The terminal event (``[DONE]`` / ``message_stop``) was read."""
        return self._reader.complete

    def feed(self, chunk: bytes, out: list[dict[str, Any]]) -> None:
        """Append to *out* the caller's events for the next bytes of the body (those of the
        events before a failure stay in *out* when this raises)."""
        self._consume(self._parser.feed(chunk), out)

    def close(self, out: list[dict[str, Any]]) -> None:
        """The body ended: append the events of a last event it ended without its closing
        blank line."""
        self._consume(self._parser.close(), out)

    def finish(self) -> Reply:
        """The reply the stream amounted to; ProtocolError if it ended before its end."""
        if not self._reader.complete:
            marker = "[DONE]" if self._provider is Provider.TPX else "message_stop"
            raise ProtocolError(f"the stream ended before {marker}")
        if self._own is not None:
            delivered = self._own.message()
        else:
            assert isinstance(self._reader, AnthropicStreamReader)
            delivered = self._reader.message()
        if self._scrub:
            delivered = self._scrub.value(delivered)
        ids = check_message(delivered)
        if isinstance(self._reader, OpenAIStreamTranslator):
            wire_ids = [wire_str(i) for i in self._reader.wire_ids]
            if len(ids) != len(wire_ids):
                raise ProtocolError(
                    f"translation returned {len(ids)} tool_use blocks "
                    f"for {len(wire_ids)} tool calls"
                )
        else:
            wire_ids = ids
        return Reply(delivered, ids, wire_ids)

    def _consume(self, events: Iterable[SSEEvent], out: list[dict[str, Any]]) -> None:
        scrub = self._scrub
        for event in events:
            walk = False
            if scrub:  # a credential echoed by the provider never reaches the caller
                data, walk = scrub.text(event.data)
                if data != event.data:
                    event = SSEEvent(data, event.event, event.id)
            produced = self._reader.on_event(event)
            if walk:
                produced = [scrub.value(item) for item in produced]
            if self._hold is not None:  # a secret split across deltas, escapes decoded
                produced = self._hold.events(produced)
            if self._own is not None:
                self._own.add_all(produced)
            for item in produced:  # ShapeInv: only Messages events reach the caller
                if check_event(item):
                    out.append(item)
