"""Hand-written mutants of gaps a review found: plausible bugs the conformance suite
did not see before the caller kept whole histories, the fakes drew every id style and
stream shape, and the abstraction read the wire exactly.

Each is a :class:`~conformance.bugs.Bug` (monkeypatched into the REAL code, as in
:mod:`conformance.bugs`), with the property the replay must name and the replay that
catches it (``mode``: ``plain`` or ``streamed``); ``conformance/test_gap_bugs.py`` proves
each is caught. :data:`GAPS` maps every gap of the issue to its mutants.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs
import pytest

import tpx.transport
import tpx.transport.client
import tpx.transport.exchange
import tpx.transport.translate.request
import tpx.transport.translate.response
import tpx.transport.translate.stream
from conformance.bugs import Bug
from tpx.transport.exchange import Exchange
from tpx.transport.translate import Translation
from tpx.transport.translate import request_to_openai as translate_request
from tpx.transport.translate.ids import decode_caller_id
from tpx.transport.translate.ids import wire_id as wire_id_of
from tpx.transport.translate.stream import OpenAIStreamTranslator, SSEParser

__all__ = ["GAPS", "GAP_BUGS", "GapBug"]


@attrs.frozen
class GapBug:
    bug: Bug
    mode: str
    """the replay that catches it: ``plain`` or ``streamed``"""


def _history_tool_count(mp: pytest.MonkeyPatch) -> None:
    """The exchange counts the tool messages of the WHOLE translated history as the tool
    results of this request (turn 3 of every real tool loop is refused)."""

    def every_tool_message(body: Mapping[str, Any]) -> list[str]:
        messages = body.get("messages") or []
        return [str(m.get("tool_call_id")) for m in messages if m.get("role") == "tool"]

    mp.setattr(tpx.transport.exchange, "openai_request_tool_ids", every_tool_message)


def _missing_id_invented(mp: pytest.MonkeyPatch) -> None:
    """A call the provider gave no id goes back as ``call_<position>`` instead of ``""``."""
    original = wire_id_of

    def wire_id(caller_id: str) -> str:
        decoded = decode_caller_id(caller_id)
        if decoded is not None and decoded.foreign is None:
            return f"call_{decoded.position}"
        return original(caller_id)

    mp.setattr(tpx.transport.translate.request, "wire_id", wire_id)


def _constant_nonce(mp: pytest.MonkeyPatch) -> None:
    """Every response gets the same nonce: a provider repeating ``call_0`` (or giving no id)
    in every response makes the caller's history hold one tool_use id twice."""
    mp.setattr(tpx.transport.translate.response, "_getrandbits", lambda bits: 0)
    mp.setattr(tpx.transport.translate.stream, "new_nonce", lambda: "0" * 12)


def _index_only_assembly(mp: pytest.MonkeyPatch) -> None:
    """Stream tool-call fragments are assembled by ``index`` alone: Ollama's parallel calls,
    all at ``index: 0``, become one call with concatenated arguments."""
    original = OpenAIStreamTranslator._tool_delta

    def tool_delta(self: OpenAIStreamTranslator, fragment: Any, key: Any = None) -> None:
        if (
            key is None
            and isinstance(fragment, Mapping)
            and ("index", fragment.get("index", "-")) in self._by_key
        ):
            fragment = {k: v for k, v in fragment.items() if k not in ("id", "type")}
            fragment["function"] = {
                "arguments": (fragment.get("function") or {}).get("arguments", "")
            }
        original(self, fragment, key)

    mp.setattr(OpenAIStreamTranslator, "_tool_delta", tool_delta)


def _indexless_merged(mp: pytest.MonkeyPatch) -> None:
    """Fragments without ``index`` (Gemini: every call whole) all continue the first
    index-less call."""
    original = OpenAIStreamTranslator._tool_delta

    def tool_delta(self: OpenAIStreamTranslator, fragment: Any, key: Any = None) -> None:
        if (
            key is None
            and isinstance(fragment, Mapping)
            and fragment.get("index") is None
            and ("index", None) in self._by_key
        ):
            args = (fragment.get("function") or {}).get("arguments", "")
            fragment = {"function": {"arguments": args}}
        original(self, fragment, key)

    mp.setattr(OpenAIStreamTranslator, "_tool_delta", tool_delta)


def _is_error_dropped(mp: pytest.MonkeyPatch) -> None:
    """``is_error: true`` of a tool_result does not reach a Chat Completions provider."""
    original = tpx.transport.translate.request._tool_message

    def tool_message(block: Mapping[str, Any], *args: Any) -> dict[str, Any]:
        return original({k: v for k, v in block.items() if k != "is_error"}, *args)

    mp.setattr(tpx.transport.translate.request, "_tool_message", tool_message)


def _results_reversed(mp: pytest.MonkeyPatch) -> None:
    """The tool messages answering the last assistant turn go out in reverse order (each
    under its own id): not in the calls' order."""
    original = translate_request

    def request_to_openai(request: Mapping[str, Any], **options: Any) -> Translation:
        tr = original(request, **options)  # model, profile, secret: whatever the exchange passes
        messages = tr.body["messages"]
        last = max((i for i, m in enumerate(messages) if m.get("role") == "assistant"), default=-1)
        end = last + 1
        while end < len(messages) and messages[end].get("role") == "tool":
            end += 1
        messages[last + 1 : end] = messages[last + 1 : end][::-1]
        return tr

    mp.setattr(tpx.transport.exchange, "translate_checked", request_to_openai)


def _length_is_end_turn(mp: pytest.MonkeyPatch) -> None:
    """``finish_reason: "length"`` is reported as ``end_turn`` (not ``max_tokens``)."""
    mp.setitem(tpx.transport.translate.response._FINISH, "length", "end_turn")


def _wrong_credential_header(mp: pytest.MonkeyPatch) -> None:
    """The TPX token travels as ``x-api-key`` instead of ``Authorization: Bearer``."""
    original = tpx.transport.client._Core._auth_headers

    def auth_headers(self: tpx.transport.client._Core) -> dict[str, str]:
        headers = original(self)
        if "authorization" in headers:
            return {"x-api-key": headers["authorization"].removeprefix("Bearer ")}
        return headers

    mp.setattr(tpx.transport.client._Core, "_auth_headers", auth_headers)


def _caller_close_ignored(mp: pytest.MonkeyPatch) -> None:
    """A stream the caller closes early leaves the exchange waiting (no ProviderFail)."""
    mp.setattr(tpx.transport.client._Core, "_stream_abandoned", lambda self: None)


def _no_finish_no_tools(mp: pytest.MonkeyPatch) -> None:
    """A stream that ends at ``[DONE]`` without a ``finish_reason`` drops its tool calls."""
    original = OpenAIStreamTranslator._end

    def end(self: OpenAIStreamTranslator) -> list[dict[str, Any]]:
        if self._finish is None:
            self._tools_emitted = True
        return original(self)

    mp.setattr(OpenAIStreamTranslator, "_end", end)


def _final_flush_skipped(mp: pytest.MonkeyPatch) -> None:
    """``end_stream`` forgets what the SSE parser still holds: a body ending
    ``data: [DONE]\\n`` without its blank line fails ``create(stream=true)``."""
    original = Exchange.end_stream

    def end_stream(self: Exchange) -> list[dict[str, Any]]:
        stream = self._stream
        if stream is not None and not stream.complete:
            stream._parser = SSEParser()
        return original(self)

    mp.setattr(Exchange, "end_stream", end_stream)


def _empty_arguments_dropped(mp: pytest.MonkeyPatch) -> None:
    """Of parallel streamed calls, one whose arguments are empty is dropped."""
    original = OpenAIStreamTranslator._emit_tools

    def emit_tools(self: OpenAIStreamTranslator, out: list[dict[str, Any]]) -> None:
        if not self._tools_emitted and len(self._calls) > 1:
            self._calls = [c for c in self._calls if c.obj is not None or "".join(c.parts)]
        original(self, out)

    mp.setattr(OpenAIStreamTranslator, "_emit_tools", emit_tools)


def _never_halted(mp: pytest.MonkeyPatch) -> None:
    """``Exchange.halted`` is always false (the transports never read it)."""
    mp.setattr(Exchange, "halted", property(lambda self: False))


def _abort_keeps_pending(mp: pytest.MonkeyPatch) -> None:
    """``Exchange.abort()`` (the transports never call it) keeps the obligations."""
    original = Exchange.abort

    def abort(self: Exchange) -> Any:
        pending = self._pending
        error = original(self)
        self._pending = pending
        return error

    mp.setattr(Exchange, "abort", abort)


def _send_bytes_last_turn(mp: pytest.MonkeyPatch) -> None:
    """``Exchange.send_bytes`` (the transports never call it) sends the last message only."""

    def send_bytes(self: Exchange, request: bytes) -> Any:
        import orjson

        decoded = orjson.loads(request)
        return self.send({**decoded, "messages": decoded["messages"][-1:]})

    mp.setattr(Exchange, "send_bytes", send_bytes)


def _gap(name: str, prop: str, description: str, patch: Any, mode: str = "plain") -> GapBug:
    return GapBug(Bug(name, prop, description, patch), mode)


GAP_BUGS: dict[str, GapBug] = {
    g.bug.name: g
    for g in (
        _gap(
            "history_tool_count",
            "Refinement",
            "tool results counted over the whole history",
            _history_tool_count,
        ),
        _gap(
            "missing_id_invented",
            "WireIds",
            "a call without id goes back as call_<n>",
            _missing_id_invented,
        ),
        _gap(
            "constant_nonce",
            "PairingInv",
            "one nonce for every response: repeated foreign ids collide in the history",
            _constant_nonce,
        ),
        _gap(
            "index_only_assembly",
            "Refinement",
            "stream fragments assembled by index alone (Ollama's index-0 parallel calls merge)",
            _index_only_assembly,
            "streamed",
        ),
        _gap(
            "indexless_merged",
            "Refinement",
            "index-less stream fragments (Gemini) merged into one call",
            _indexless_merged,
            "streamed",
        ),
        _gap(
            "is_error_dropped",
            "IsError",
            "is_error does not reach a Chat Completions provider",
            _is_error_dropped,
        ),
        _gap(
            "results_reversed",
            "WireIds",
            "tool messages not in the calls' order",
            _results_reversed,
        ),
        _gap(
            "length_is_end_turn",
            "StopReason",
            "finish_reason length reported as end_turn",
            _length_is_end_turn,
        ),
        _gap(
            "wrong_credential_header",
            "Credential",
            "the TPX token travels as x-api-key",
            _wrong_credential_header,
        ),
        _gap(
            "caller_close_ignored",
            "Refinement",
            "a stream closed early by the caller leaves the exchange waiting",
            _caller_close_ignored,
            "streamed",
        ),
        _gap(
            "no_finish_no_tools",
            "Refinement",
            "a stream without finish_reason loses its tool calls",
            _no_finish_no_tools,
            "streamed",
        ),
        _gap(
            "final_flush_skipped",
            "Refinement",
            "data: [DONE] without its blank line fails create(stream=true)",
            _final_flush_skipped,
        ),
        _gap(
            "empty_arguments_dropped",
            "Refinement",
            "a parallel call with empty arguments is dropped",
            _empty_arguments_dropped,
            "streamed",
        ),
        _gap("never_halted", "Refinement", "Exchange.halted always false", _never_halted),
        _gap(
            "abort_keeps_pending",
            "Refinement",
            "Exchange.abort() keeps the obligations",
            _abort_keeps_pending,
        ),
        _gap(
            "send_bytes_last_turn",
            "Refinement",
            "Exchange.send_bytes sends the last message only",
            _send_bytes_last_turn,
        ),
    )
}

#: Every gap the issue lists -> the hand mutants that prove its conformance case bites.
GAPS: dict[str, tuple[str, ...]] = {
    "whole histories (two or more tool rounds)": ("history_tool_count", "send_bytes_last_turn"),
    "missing ids": ("missing_id_invented",),
    "repeated ids (call_0 every response)": ("constant_nonce",),
    "Ollama index-0 parallel calls": ("index_only_assembly",),
    "Gemini chunks without index / mixed": ("indexless_merged",),
    "is_error on the wire": ("is_error_dropped",),
    "order of tool results on the wire": ("results_reversed",),
    "stop reasons": ("length_is_end_turn",),
    "which credential header travels": ("wrong_credential_header",),
    "a stream closed early by the caller": ("caller_close_ignored",),
    "[DONE] with no finish_reason": ("no_finish_no_tools",),
    "data: [DONE] without its blank line": ("final_flush_skipped",),
    "parallel calls, the first with empty arguments": ("empty_arguments_dropped",),
    "abort(), send_bytes(), halted": (
        "abort_keeps_pending",
        "send_bytes_last_turn",
        "never_halted",
    ),
}
