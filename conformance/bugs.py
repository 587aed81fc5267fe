"""Seeded bugs in the REAL code, injected by monkeypatching, to prove the checks bite.

Each :class:`Bug` names the spec property the conformance checks must report when it is
active. :data:`BUGS` break the plain (non-streamed) path; :data:`STREAM_BUGS` break only
the streamed path (``Transport.stream``) and are caught by the streamed replay.
:meth:`Bug.active` is a context manager (``pytest.MonkeyPatch.context``), usable
from tests and from other tools (trace validation). :func:`record_behaviour` replays one
behaviour and returns its recording (JSON-lines objects, duplicates kept), for
``check_trace`` / ``check_traces_tlc`` / ``tpx check-trace`` (:func:`json_lines`).
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterable, Iterator, Mapping
from contextlib import closing, contextmanager, nullcontext
from typing import Any, Generic, TypeVar

import attrs
import orjson
import pytest

import tpx.transport._config
import tpx.transport.exchange
import tpx.transport.translate
from conformance.replay import Behaviour, Replayer
from tpx.oracle.model import Config
from tpx.transport import Transport
from tpx.transport.exchange import Exchange, Provider
from tpx.transport.translate import Translation

__all__ = ["BUGS", "STREAM_BUGS", "Bug", "json_lines", "record_behaviour"]

Patch = Callable[[pytest.MonkeyPatch], None]
K = TypeVar("K")
V = TypeVar("V")


class PerObject(Generic[K, V]):
    """A seeded bug's memory of one object (an exchange): values keyed by the object itself.

    An :class:`Exchange` has slots and no weak references, and keying by ``id(obj)`` alone
    lets a later object that reuses a collected one's address inherit its entry (whether it
    does depends on the allocator, so a bug behaved differently when Hypothesis re-ran an
    example). Each entry holds its object, so no address is reused while it is kept, and a
    lookup answers only for that very object.
    """

    def __init__(self) -> None:
        self._items: dict[int, tuple[K, V]] = {}

    def get(self, obj: K) -> V | None:
        item = self._items.get(id(obj))
        return item[1] if item is not None and item[0] is obj else None

    def set(self, obj: K, value: V) -> None:
        self._items[id(obj)] = (obj, value)

    def pop(self, obj: K) -> V | None:
        value = self.get(obj)
        self._items.pop(id(obj), None)
        return value


@attrs.frozen
class Bug:
    name: str
    property: str
    """the spec property a conformance run must name"""
    description: str
    patch: Patch

    @contextmanager
    def active(self) -> Iterator[None]:
        with pytest.MonkeyPatch.context() as mp:
            self.patch(mp)
            yield


def _tool_uses(body: Mapping[str, Any]) -> list[dict[str, Any]]:
    content = body.get("content")
    return [b for b in content or [] if isinstance(b, dict) and b.get("type") == "tool_use"]


def _drop_id(mp: pytest.MonkeyPatch) -> None:
    original = Exchange.deliver

    def deliver(self: Exchange) -> dict[str, Any]:
        body = self._delivered
        if body is not None and (uses := _tool_uses(body)):
            gone = uses[-1]
            body["content"] = [b for b in body["content"] if b is not gone]
            self._delivered_ids = self._delivered_ids - {gone["id"]}
        return original(self)

    mp.setattr(Exchange, "deliver", deliver)


def _duplicate_id(mp: pytest.MonkeyPatch) -> None:
    original = Exchange.deliver

    def deliver(self: Exchange) -> dict[str, Any]:
        body = original(self)
        if uses := _tool_uses(body):
            body["content"] = [*body["content"], dict(uses[0])]
        return body

    mp.setattr(Exchange, "deliver", deliver)


def _swap_ids(mp: pytest.MonkeyPatch) -> None:
    original = tpx.transport.translate.request_to_openai

    def request_to_openai(
        request: Mapping[str, Any], *, model: str | None = None, **options: Any
    ) -> Translation:
        tr = original(request, model=model, **options)
        messages = tr.body.get("messages") or []
        last = max(
            (
                i
                for i, m in enumerate(messages)
                if m.get("role") == "assistant" and m.get("tool_calls")
            ),
            default=-1,
        )
        tools = [m for m in messages[last + 1 :] if m.get("role") == "tool"]
        if len(tools) >= 2:
            tools[0]["tool_call_id"], tools[1]["tool_call_id"] = (
                tools[1]["tool_call_id"],
                tools[0]["tool_call_id"],
            )
        return tr

    mp.setattr(tpx.transport.exchange, "translate_checked", request_to_openai)


def _openai_body_to_caller(mp: pytest.MonkeyPatch) -> None:
    raw: PerObject[Exchange, bytes] = PerObject()
    receive, deliver = Exchange.receive, Exchange.deliver

    def receive_(self: Exchange, status: int, headers: Mapping[str, str], body: bytes) -> None:
        raw.set(self, body)
        try:
            receive(self, status, headers, body)
        except BaseException:
            raw.pop(self)
            raise

    def deliver_(self: Exchange) -> dict[str, Any]:
        body = deliver(self)
        reply = raw.pop(self)  # None: a streamed exchange (not this bug's path)
        if self.provider is Provider.TPX and reply is not None:
            wire: dict[str, Any] = orjson.loads(reply)
            return wire
        return body

    mp.setattr(Exchange, "receive", receive_)
    mp.setattr(Exchange, "deliver", deliver_)


def _token_over_key(mp: pytest.MonkeyPatch) -> None:
    def select(has_key: bool, has_token: bool) -> Provider:
        if has_token:
            return Provider.TPX
        return Provider.ANTHROPIC if has_key else Provider.NONE

    mp.setattr(tpx.transport._config, "select_provider", select)  # where boot() selects


def _provider_changes(mp: pytest.MonkeyPatch) -> None:
    original = Transport.finish

    def finish(self: Transport) -> dict[str, Any]:
        body = original(self)
        other = Provider.TPX if self.provider is Provider.ANTHROPIC else Provider.ANTHROPIC
        object.__setattr__(self, "provider", other)
        return body

    mp.setattr(Transport, "finish", finish)


def _pairing_unchecked(mp: pytest.MonkeyPatch) -> None:
    mp.setattr(tpx.transport.exchange, "pairing_problem", lambda answered, pending: None)


BUGS: dict[str, Bug] = {
    b.name: b
    for b in (
        Bug("drop_id", "PairingInv", "a tool_use is dropped on delivery", _drop_id),
        Bug("duplicate_id", "PairingInv", "a tool_use is handed over twice", _duplicate_id),
        Bug(
            "swap_ids",
            "PairingInv",
            "tool results go back under each other's foreign ids",
            _swap_ids,
        ),
        Bug(
            "openai_to_caller",
            "ShapeInv",
            "the caller is handed the provider's Chat Completions body",
            _openai_body_to_caller,
        ),
        Bug("token_over_key", "SelectionInv", "the token wins over the key", _token_over_key),
        Bug(
            "provider_changes",
            "SelectionStable",
            "the provider changes after the first delivered exchange",
            _provider_changes,
        ),
        Bug(
            "pairing_unchecked",
            "PairingInv",
            "a request is sent although it leaves a tool_use unanswered",
            _pairing_unchecked,
        ),
    )
}


def _stream_drop_id(mp: pytest.MonkeyPatch) -> None:
    """The first tool_use block of a streamed reply never reaches the caller (its events
    are filtered out, later blocks renumbered) and is forgotten on delivery."""
    gone: PerObject[Exchange, tuple[str, int]] = PerObject()  # (caller id, block index)
    feed, end_stream, deliver = Exchange.feed, Exchange.end_stream, Exchange.deliver

    def drop(self: Exchange, events: list[dict[str, Any]]) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for event in events:
            kind, index = event.get("type"), event.get("index")
            if kind == "message_start":
                gone.pop(self)
            dropped = gone.get(self)
            block = event.get("content_block") or {}
            if (
                kind == "content_block_start"
                and dropped is None
                and block.get("type") == "tool_use"
            ):
                gone.set(self, (str(block.get("id")), int(index or 0)))
                continue
            if dropped is not None and isinstance(index, int):
                if index == dropped[1]:
                    continue
                if index > dropped[1]:
                    event = {**event, "index": index - 1}
            out.append(event)
        return out

    def feed_(self: Exchange, chunk: bytes) -> list[dict[str, Any]]:
        return drop(self, feed(self, chunk))

    def end_stream_(self: Exchange) -> list[dict[str, Any]]:
        return drop(self, end_stream(self))

    def deliver_(self: Exchange) -> dict[str, Any]:
        dropped = gone.pop(self)
        body = self._delivered
        if dropped is not None and body is not None:
            body["content"] = [b for b in body["content"] if b.get("id") != dropped[0]]
            self._delivered_ids = self._delivered_ids - {dropped[0]}
        return deliver(self)

    mp.setattr(Exchange, "feed", feed_)
    mp.setattr(Exchange, "end_stream", end_stream_)
    mp.setattr(Exchange, "deliver", deliver_)


def _stream_openai_to_caller(mp: pytest.MonkeyPatch) -> None:
    """The TPX stream's Chat Completions chunks reach the caller as they came off the wire,
    instead of the translated Messages events (the exchange itself runs as usual)."""
    raw: PerObject[Exchange, bytearray] = PerObject()
    feed, stream = Exchange.feed, Transport.stream

    def feed_(self: Exchange, chunk: bytes) -> list[dict[str, Any]]:
        if (kept := raw.get(self)) is None:
            raw.set(self, kept := bytearray())
        kept.extend(chunk)
        return feed(self, chunk)

    def stream_(self: Transport, request: Mapping[str, Any]) -> Iterator[bytes]:
        raw.pop(self.exchange)
        events = stream(self, request)
        assert isinstance(events, Generator)
        with closing(events):
            for data in events:
                if self.provider is not Provider.TPX:
                    yield data
                    continue
                chunks = raw.get(self.exchange)
                if chunks:
                    yield bytes(chunks)
                    chunks.clear()

    mp.setattr(Exchange, "feed", feed_)
    mp.setattr(Transport, "stream", stream_)


#: Bugs in the streamed path only (the plain replay does not see them).
STREAM_BUGS: dict[str, Bug] = {
    b.name: b
    for b in (
        Bug(
            "stream_drop_id",
            "PairingInv",
            "a tool_use block of a streamed reply is dropped on its way to the caller",
            _stream_drop_id,
        ),
        Bug(
            "stream_openai_to_caller",
            "ShapeInv",
            "the caller is handed the provider's Chat Completions chunks, not Messages events",
            _stream_openai_to_caller,
        ),
    )
}


def record_behaviour(
    behaviour: Behaviour,
    config: Config,
    *,
    bug: Bug | None = None,
    variant: int = 0,
    streaming: bool = False,
) -> list[dict[str, Any]]:
    """Replay *behaviour* (under *bug*, if given) and return the recording: one
    ``tpx check-trace`` JSON-lines object per observed state (``#action`` the step taken).

    The id variables are lists with one entry per id occurrence observed on the wire, in
    the caller's request or in the delivered body (:attr:`Observation.ids`), so a duplicate
    shows in the recording (the trace checker rejects it as ``TypeOK``). Nothing is checked
    while recording; the recording stops early at the first step whose outcome is not the
    action's (e.g. a request sent where the caller aborted). *streaming*: replay it
    through ``Transport.stream`` (see :mod:`conformance.replay`).
    """
    replayer = Replayer(config, check=False, streaming=streaming)
    try:
        with bug.active() if bug is not None else nullcontext():
            replayer.replay(behaviour, variant)
        return [obs.json_line(action) for action, obs in replayer.observed]
    finally:
        replayer.close()


def json_lines(recording: Iterable[Mapping[str, Any]]) -> str:
    """A recording as the text of a JSON-lines trace file (``tpx check-trace FILE``)."""
    return "".join(orjson.dumps(dict(line)).decode() + "\n" for line in recording)
