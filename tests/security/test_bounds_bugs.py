"""Seeded bugs: each bound of docs/limits.md broken the way a plausible change would break
it, and the fast test that must then fail (so each test can fail, and does for that bug)."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from typing import Any

import attrs
import httpx2
import pytest

import tpx.gateway.core
from tests.gateway import test_longjson as long_json
from tests.security import test_client_bounds as bounds
from tests.security import test_long_strings as long_strings
from tests.security import test_low as low
from tpx.gateway import longjson, tokens
from tpx.gateway.asgi import GatewayApp, _BodyError
from tpx.gateway.core import Gateway
from tpx.gateway.drive import _Chunks
from tpx.gateway.offload import Offload
from tpx.gateway.protocol import HeaderTimeoutProtocol

Patch = Callable[[pytest.MonkeyPatch], None]


def _head_not_refused(mp: pytest.MonkeyPatch) -> None:
    """The 431 forgotten: an oversized head goes on to the app."""
    mp.setattr(HeaderTimeoutProtocol, "_refuse", lambda self: None)


def _body_before_key(mp: pytest.MonkeyPatch) -> None:
    """The shell reads the body first and lets the core refuse it afterwards."""
    mp.setattr(Gateway, "preflight", lambda self, method, path, headers: None)


async def _per_chunk_body(self: GatewayApp, scope: Any, receive: Any) -> bytes:
    """The body's deadline re-armed for every chunk (a trickle never ends)."""
    parts: list[bytes] = []
    more = True
    while more:
        try:
            async with asyncio.timeout(self.settings.limits.body_timeout):
                message = await receive()
        except TimeoutError:
            raise _BodyError(408, "timeout_error", "Timed out reading the request body") from None
        if message["type"] == "http.disconnect":
            raise _BodyError(400, "invalid_request_error", "the client disconnected")
        parts.append(message.get("body", b""))
        more = bool(message.get("more_body", False))
    return b"".join(parts)


def _per_chunk_deadline(mp: pytest.MonkeyPatch) -> None:
    mp.setattr(GatewayApp, "_body", _per_chunk_body)


def _handled_inline(mp: pytest.MonkeyPatch) -> None:
    """The offload bypassed: every body handled on the event loop."""

    async def inline(self: Offload, request: Any) -> Any:
        return self.gateway.handle(request)

    mp.setattr(Offload, "handle", inline)


def _buffer_counts_items(mp: pytest.MonkeyPatch) -> None:
    """The stream buffer bounded in chunks again, whatever their size."""
    mp.setattr(_Chunks, "full", lambda self: self.qsize() >= 64)


def _head_without_length(mp: pytest.MonkeyPatch) -> None:
    """HEAD answered with an empty body, so a content-length of 0."""
    handle = Gateway._handle

    def empty_head(self: Gateway, request: Any, admitted: bool) -> Any:
        result = handle(self, request, admitted)
        if request.method == "HEAD" and isinstance(result, tpx.gateway.core.Response):
            return attrs.evolve(result, body=b"")
        return result

    mp.setattr(Gateway, "_handle", empty_head)


def _metrics_key_ignored(mp: pytest.MonkeyPatch) -> None:
    """``metrics_auth`` read but never checked."""
    admit_real = Gateway._admit

    def admit(self: Gateway, method: str, path: str, headers: Any) -> str:
        if path.rstrip("/") == "/metrics":
            return "/metrics"
        return admit_real(self, method, path, headers)

    mp.setattr(Gateway, "_admit", admit)


def _trace_write_raises(mp: pytest.MonkeyPatch) -> None:
    """A trace write that fails escapes the log line (and the exchange)."""
    log = Gateway.log

    def strict(self: Gateway, record: dict[str, Any], *, failed: bool) -> None:
        log(self, record, failed=failed)
        if "trace_error" in record:
            raise FileNotFoundError(record["trace_error"])

    mp.setattr(Gateway, "log", strict)


def _pieces_cut_anywhere(mp: pytest.MonkeyPatch) -> None:
    """A long text cut every PIECE characters, wherever that falls."""
    mp.setattr(tokens, "_CUT", re.compile(r"(?!x)x"))


def _parsed_whole(mp: pytest.MonkeyPatch) -> None:
    """A large body parsed in one orjson call again (the loop held for all of it)."""
    mp.setattr(longjson, "loads", lambda body: longjson._parse(body))


def _escaped_quotes_counted(mp: pytest.MonkeyPatch) -> None:
    """Every quote taken to open or close a string, ``\\"`` included."""
    long_json.make_small(mp)
    mp.setattr(longjson, "_quotes", lambda body, start, end: body.count(b'"', start, end))


def _no_figures(finding: str, what: str, value: str) -> None:
    pass


BUGS: dict[str, tuple[Patch, Callable[[pytest.MonkeyPatch], None]]] = {
    "head_not_refused": (
        _head_not_refused,
        lambda mp: bounds.test_a_head_past_the_limit_is_431_complete_or_still_coming(),
    ),
    "body_before_key": (
        _body_before_key,
        lambda mp: bounds.test_a_keyless_request_is_refused_before_its_body_is_read(),
    ),
    "per_chunk_deadline": (
        _per_chunk_deadline,
        lambda mp: bounds.test_a_trickled_body_ends_at_body_timeout(_no_figures),
    ),
    "handled_inline": (
        _handled_inline,
        bounds.test_a_large_body_is_handled_off_the_event_loop,
    ),
    "buffer_counts_items": (
        _buffer_counts_items,
        lambda mp: bounds.test_the_stream_buffer_is_bounded_in_bytes(),
    ),
    "head_without_length": (
        _head_without_length,
        lambda mp: low.test_head_says_what_get_sends("/"),
    ),
    "pieces_cut_anywhere": (
        _pieces_cut_anywhere,
        lambda mp: bounds.test_a_long_text_is_counted_in_pieces_exactly(),
    ),
    "parsed_whole": (
        _parsed_whole,
        lambda mp: long_strings.test_a_long_string_is_parsed_a_slice_at_a_time(mp, "a long text"),
    ),
    "escaped_quotes_counted": (
        _escaped_quotes_counted,
        lambda mp: long_json.test_a_long_string_after_escaped_quotes_is_cut_in_slices(None, mp),
    ),
    "metrics_key_ignored": (
        _metrics_key_ignored,
        lambda mp: low.test_metrics_are_open_by_default_and_can_require_the_key(),
    ),
}


@pytest.mark.parametrize("name", list(BUGS))
def test_each_seeded_bug_is_caught(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    patch, test = BUGS[name]
    patch(monkeypatch)
    with pytest.raises(AssertionError):
        test(monkeypatch)


def test_a_trace_write_that_escapes_is_caught(
    tmp_path: Any, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    _trace_write_raises(monkeypatch)
    with pytest.raises((AssertionError, httpx2.HTTPError)):  # the exchange broke
        low.test_a_trace_dir_that_goes_away_never_breaks_an_exchange(tmp_path, caplog)
