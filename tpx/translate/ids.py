"""Reversible tool-id encoding between the provider (foreign) and the caller.

The provider behind the Chat Completions API emits tool-call ids that a Messages
caller cannot always use: empty (Gemini), missing, shared by parallel calls
(Ollama), outside ``^[a-zA-Z0-9_-]+$``, or absurdly long. Every id the caller
sees is therefore an *encoding* of the foreign id plus the call's position in
its response. No table is kept: the mapping survives restarts and works across
processes, because the caller id itself carries the foreign id.

Grammar of a caller id (the ``tpx`` prefix is reserved)::

    caller_id := "tpx" KIND POSITION "_" PAYLOAD
    KIND      := "r"   PAYLOAD is the foreign id itself; used when the foreign id
                       is non-empty and entirely in [A-Za-z0-9_-]
               | "b"   PAYLOAD is unpadded base64url of the foreign id's UTF-8
                       (``surrogatepass``); used for every other string, "" included
               | "n"   the call had no id at all (missing / null); PAYLOAD is empty
    POSITION  := decimal, no leading zeros: the call's 0-based index among the
                 tool calls of its response

Properties (property-tested in tests/translate/test_ids.py):

* caller ids match ``^[a-zA-Z0-9_-]+$``;
* ``to_caller_id`` is injective on ``(foreign, position)``, so ids are unique
  within a response even when foreign ids repeat;
* ``to_foreign_id(to_caller_id(f, p)) == f`` byte for byte (``None`` stays
  ``None`` via :func:`decode_caller_id`; see below);
* only *canonical* encodings decode (re-encoding must reproduce the input), so
  every other id -- e.g. Anthropic's ``toolu_...`` from a native provider --
  is not ours and passes through unchanged. The union (encoded foreign ids and
  pass-through ids) stays injective as long as pass-through ids do not start
  with ``tpx`` followed by a canonical encoding, which no native provider emits.

A call that had no id (``"n"``) goes back to the provider as the empty string:
the wire needs a string and the provider gave none, so nothing is invented;
Gemini, which omits ids, itself sends ``""``.

Caller ids are unique within one response. They are deterministic, so two
responses whose calls have the same foreign id at the same position produce
the same caller id; that happens only when the provider reuses ids across turns.
"""

from __future__ import annotations

import base64
import binascii
import re

import attrs

__all__ = [
    "CALLER_ID_PREFIX",
    "RAW_ENCODED_ID",
    "RAW_FOREIGN_ID",
    "DecodedId",
    "decode_caller_id",
    "is_caller_id_valid",
    "to_caller_id",
    "to_foreign_id",
    "wire_id",
]

CALLER_ID_PREFIX = "tpx"

_RAW_OK = RAW_FOREIGN_ID = re.compile(r"[A-Za-z0-9_-]+").fullmatch
_VALID = re.compile(r"[a-zA-Z0-9_-]+").fullmatch
_ENCODED = re.compile(r"tpx([rbn])(0|[1-9][0-9]*)_(.*)", re.DOTALL).fullmatch
_RAW_ENCODED = RAW_ENCODED_ID = re.compile(r"tpxr(?:0|[1-9][0-9]*)_([A-Za-z0-9_-]+)").fullmatch


def is_caller_id_valid(caller_id: str) -> bool:
    """Whether *caller_id* is a valid Messages tool id (``^[a-zA-Z0-9_-]+$``)."""
    return _VALID(caller_id) is not None


def to_caller_id(foreign: str | None, position: int) -> str:
    """Encode the provider's tool-call id *foreign* (``None`` = missing) at *position*."""
    if foreign is None:
        return f"tpxn{position}_"
    if _RAW_OK(foreign) is not None:
        return f"tpxr{position}_{foreign}"
    payload = base64.urlsafe_b64encode(foreign.encode("utf-8", "surrogatepass"))
    return f"tpxb{position}_{payload.rstrip(b'=').decode('ascii')}"


@attrs.frozen
class DecodedId:
    """A caller id of ours, decoded: the foreign id (``None`` = missing) and its position."""

    foreign: str | None
    position: int


def decode_caller_id(caller_id: str) -> DecodedId | None:
    """Decode a caller id of ours; ``None`` when *caller_id* is not a canonical encoding."""
    if not caller_id.startswith(CALLER_ID_PREFIX):
        return None
    match = _ENCODED(caller_id)
    if match is None:
        return None
    kind, pos, payload = match.groups()
    position = int(pos)
    if kind == "r":
        if _RAW_OK(payload) is None:
            return None
        return DecodedId(payload, position)
    if kind == "n":
        return DecodedId(None, position) if payload == "" else None
    if _VALID(payload) is None and payload != "":
        return None
    try:
        raw = base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4))
        foreign = raw.decode("utf-8", "surrogatepass")
    except (binascii.Error, ValueError):
        return None
    if to_caller_id(foreign, position) != caller_id:
        return None  # non-canonical (a raw-able id in base64, stray bits, ...)
    return DecodedId(foreign, position)


def to_foreign_id(caller_id: str) -> str | None:
    """The provider's id behind *caller_id*; ``None`` if *caller_id* is not ours.

    A call that had no foreign id decodes to ``""`` here (what goes on the wire);
    use :func:`decode_caller_id` to tell "missing" from "empty".
    """
    decoded = decode_caller_id(caller_id)
    if decoded is None:
        return None
    return "" if decoded.foreign is None else decoded.foreign


def wire_id(caller_id: str) -> str:
    """The id to send to the provider for *caller_id*: decoded if ours, else unchanged."""
    if caller_id.startswith(CALLER_ID_PREFIX):
        raw = _RAW_ENCODED(caller_id)  # fast path: the common, raw-able foreign id
        if raw is not None:
            return raw.group(1)
        foreign = to_foreign_id(caller_id)
        if foreign is not None:
            return foreign
    return caller_id
