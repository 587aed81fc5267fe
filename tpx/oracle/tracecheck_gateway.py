"""Gateway traces: one JSON-lines file per conversation, written and checked against
spec/TpxGateway.tla.

A gateway trace is the events :class:`tpx.oracle.model.gateway.monitor.GatewayMonitor` takes, one
JSON object per line, in order::

    {"#action": "Resume", "provider": "TPX", "turn": 0, "phase": "idle", "pending": [...],
     "reqIds": [], "wireShape": "messages", "wireIds": [], "emitted": [],
     "gotShape": "messages", "lastOutcome": "none"}
    {"#action": "CallerSend", ...}

Keys: ``#action`` (required: ``Init`` or ``Resume`` first, then the spec's
per-conversation actions), the nine per-conversation variables and ``provider``
(``hasKey``, ``hasToken``, ``retryable`` optional), tool ids as the caller sees them
(strings); other ``#`` keys (timestamps) are ignored. A trace is accepted when replaying it
through a fresh monitor finds no violation: the same checks, in the same order, as the live
``tpx serve --monitor`` (see :mod:`tpx.oracle.model.gateway.monitor`). ``GatewayRetry`` is
read from the cfg.

Several conversations interleaved: an action written with its parameter, as the spec
names it (``CallerSend(c1)``), is a step of that conversation, and the state holds that
conversation's variables (the same keys); each conversation starts with its own
``Init(c)`` or ``Resume(c)``, and the provider and credentials are the first state's. One
monitor takes every conversation's steps, so NoCrossPairing across them is checked: an id
one conversation took (its provider's reply, its history) that shows up in another's
variables is rejected. A bare action name (``CallerSend``) is a step of the one unnamed
conversation: a per-conversation trace, as ``tpx serve --monitor`` writes, says nothing
about other conversations (the in-flight bound and NoCrossPairing across them are then the
live monitor's job). ITF traces name their actions the same way (``#meta.action``).

``tpx check-trace --spec spec/TpxGateway.tla FILE...`` uses this module (the mirror only;
``--tlc`` is refused for the gateway spec); ``--exchange`` reads the per-request exchange
traces ``tpx serve --trace-dir`` writes (see :func:`check_gateway_trace`).

Which kind a file is: the first line of every trace ``tpx serve`` writes carries
``"#trace"``: :data:`CONVERSATION_TRACE` (a ``--monitor`` conversation's events, written by
:func:`write_trace`) or :data:`EXCHANGE_TRACE` (one request's exchange, ``--trace-dir``
without ``--monitor``). :func:`trace_kind` reads it, so ``tpx check-trace`` refuses a file
read the wrong way (a usage error naming the right flag) instead of giving a verdict.
"""

from __future__ import annotations

import re
from collections.abc import Hashable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import orjson

from tpx.oracle.itf import TraceFormatError
from tpx.oracle.model.gateway.monitor import GatewayMonitor
from tpx.oracle.tracecheck import TraceReport, load_trace
from tpx.transport.translate.ids import wire_id

__all__ = [
    "CONVERSATION_TRACE",
    "EXCHANGE_TRACE",
    "check_gateway_trace",
    "is_gateway_spec",
    "split_action",
    "trace_file_name",
    "trace_kind",
    "write_trace",
]

#: ``"#trace"`` of a ``tpx serve --monitor`` conversation trace (its first line).
CONVERSATION_TRACE = "tpx serve conversation"
#: ``"#trace"`` of a ``tpx serve --trace-dir`` exchange trace (its first line).
EXCHANGE_TRACE = "tpx serve exchange"

_FIRST_LINE_LIMIT = 1 << 20

_PARAMETER = re.compile(r"(\w+)\((.+)\)").fullmatch

_MODULE = re.compile(r"-{4,}\s*MODULE\s+(\w+)\s*-{4,}")


def is_gateway_spec(spec: Path) -> bool:
    """Does *spec* hold the module TpxGateway?"""
    try:
        text = spec.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return False
    m = _MODULE.search(text)
    return m is not None and m.group(1) == "TpxGateway"


def check_gateway_trace(
    states: Sequence[Mapping[str, Any]],
    actions: Sequence[str | None],
    *,
    gateway_retry: bool = True,
    exchange: bool = False,
) -> TraceReport:
    """Replay a trace (one conversation's, or several interleaved: see the module's docs)
    through a fresh monitor.

    ``exchange=True`` reads a trace of one gateway request's seed exchange as ``tpx serve
    --trace-dir`` records it: caller-side ids (``pending``, ``reqIds``) are compared with
    the wire-side ones through :func:`tpx.transport.translate.ids.wire_id`, and the ``pending`` of a
    ProviderFail / CallerAbort step is the history's obligations (the last ``Resume``
    state's), since the seed exchange discards them but the conversation keeps them."""
    if not states:
        raise TraceFormatError("a trace needs at least one state")
    first = states[0]
    provider = first.get("provider")
    if not isinstance(provider, str) or provider not in ("ANTHROPIC", "TPX", "NONE"):
        raise TraceFormatError(f"provider must be ANTHROPIC, TPX or NONE, got {provider!r}")
    has_key, has_token = first.get("hasKey"), first.get("hasToken")
    monitor = GatewayMonitor(
        provider=provider,
        has_key=has_key if isinstance(has_key, bool) else None,
        has_token=has_token if isinstance(has_token, bool) else None,
        gateway_retry=gateway_retry,
        to_wire=wire_id if exchange else None,
    )
    steps: list[str] = []
    history: dict[str, Any] = {}
    for i, (state, label) in enumerate(zip(states, actions, strict=True), 1):
        if label is None:
            return TraceReport(
                False, steps, i, "Action", "a gateway trace names every step's #action"
            )
        action, conversation = split_action(label)
        if exchange and action == "Resume":
            history[conversation] = state.get("pending", ())
        if exchange and action in ("ProviderFail", "CallerAbort"):
            state = {**state, "pending": history.get(conversation, ())}
        violation = monitor.observe(conversation, action, state)
        if violation is not None:
            return TraceReport(False, steps, i, violation.property, violation.message)
        steps.append(label)
    return TraceReport(True, steps, message=f"{len(steps)} states")


def split_action(label: str) -> tuple[str, str]:
    """``(action, conversation)`` of a step's ``#action``: ``CallerSend(c1)`` is
    ``("CallerSend", "c1")``; a bare name is a step of the unnamed conversation ``""``."""
    m = _PARAMETER(label)
    return (m.group(1), m.group(2)) if m else (label, "")


def trace_kind(path: Path) -> str | None:
    """The ``"#trace"`` a gateway trace file declares on its first line, or ``None`` (no
    such key, not JSON lines, unreadable: the readers say why)."""
    try:
        with path.open("rb") as f:
            first = f.readline(_FIRST_LINE_LIMIT)
        head = orjson.loads(first)
    except (OSError, orjson.JSONDecodeError):
        return None
    kind = head.get("#trace") if isinstance(head, dict) else None
    return kind if isinstance(kind, str) else None


def trace_file_name(conversation: Hashable) -> str:
    """A safe file name for a conversation's trace (``[A-Za-z0-9._-]`` only)."""
    name = re.sub(r"[^A-Za-z0-9._-]", "_", str(conversation))[:200].lstrip(".")
    return f"{name or 'conversation'}.jsonl"


def write_trace(path: Path, events: Iterable[Mapping[str, Any]]) -> Path:
    """Write a conversation's events (e.g. :meth:`GatewayMonitor.close`'s result) as JSON
    lines that ``tpx check-trace --spec spec/TpxGateway.tla`` reads."""
    marked = [dict(e) for e in events]
    if marked:
        marked[0]["#trace"] = CONVERSATION_TRACE
    path.write_bytes(b"".join(orjson.dumps(e, option=orjson.OPT_SORT_KEYS) + b"\n" for e in marked))
    return path


def check_files(
    files: Sequence[Path], *, gateway_retry: bool, exchange: bool = False
) -> tuple[list[str], int]:
    """``tpx check-trace`` for the gateway spec: one line per file and the exit code."""
    lines: list[str] = []
    errors = rejected = 0
    for path in files:
        try:
            states, actions = load_trace(path)
            report = check_gateway_trace(
                states, actions, gateway_retry=gateway_retry, exchange=exchange
            )
        except TraceFormatError as exc:
            lines.append(f"{path}: ERROR: {exc}")
            errors += 1
            continue
        lines.append(f"{path}: {report}")
        rejected += not report.accepted
    return lines, 2 if errors else 1 if rejected else 0
