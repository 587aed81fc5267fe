"""Reversible tool-id encoding between the provider (foreign) and the caller.

The provider behind the Chat Completions API emits tool-call ids that a Messages
caller cannot always use: empty (Gemini), missing, shared by parallel calls
(Ollama), reused in every turn (Gemini's ``""``, servers counting ``call_0`` per
response), outside ``^[a-zA-Z0-9_-]+$``, or absurdly long. Every id the caller
sees is therefore an *encoding* of the foreign id, the call's position in its
response and a per-response nonce. No table is kept: the mapping survives
restarts and works across processes, because the caller id itself carries the
foreign id.

Grammar of a caller id (the ``tpx`` prefix is reserved)::

    caller_id := "tpx" KIND POSITION "-" NONCE "_" PAYLOAD
    KIND      := "r"   PAYLOAD is the foreign id itself; used when the foreign id
                       is non-empty and entirely in [A-Za-z0-9_-]
               | "b"   PAYLOAD is unpadded base64url of the foreign id's UTF-8
                       (``surrogatepass``); used for every other string, "" included
               | "n"   the call had no id at all (missing / null); PAYLOAD is empty
    POSITION  := decimal, no leading zeros: the call's 0-based index among the
                 tool calls of its response
    NONCE     := 12 lowercase hex digits (48 random bits), drawn once per
                 translated response (:func:`new_nonce`); decoding ignores it

e.g. ``tpxr0-3f9a0c11b2de_call_abc`` (foreign ``call_abc``), ``tpxb1-3f9a0c11b2de_``
(foreign ``""``), ``tpxn0-3f9a0c11b2de_`` (no id).

Properties (property-tested in tests/transport/translate/test_ids.py and test_roundtrip.py):

* caller ids match ``^[a-zA-Z0-9_-]+$``;
* ``to_caller_id`` is injective on ``(foreign, position, nonce)``: ids are unique
  within a response even when foreign ids repeat, and unique across responses
  (with probability 1 - n²/2⁴⁹ for n responses) even when a provider reuses the
  same foreign id at the same position in every turn -- the Messages API rejects
  a history with two tool_use blocks of the same id;
* ``to_foreign_id(to_caller_id(f, p, n)) == f`` byte for byte (``None`` stays
  ``None`` via :func:`decode_caller_id`; see below), whatever the nonce;
* only *canonical* encodings decode (re-encoding must reproduce the input), so
  every other id -- e.g. Anthropic's ``toolu_...`` from a native provider --
  is not ours and passes through unchanged. The union (encoded foreign ids and
  pass-through ids) stays injective as long as pass-through ids do not start
  with ``tpx`` followed by a canonical encoding, which no native provider emits.

A call that had no id (``"n"``) goes back to the provider as the empty string:
the wire needs a string and the provider gave none, so nothing is invented;
Gemini, which omits ids, itself sends ``""``.

Legacy ids: releases before the nonce emitted ``"tpx" KIND POSITION "_" PAYLOAD``
(no ``-NONCE``). Those still decode (a history recorded before an upgrade keeps
working; :attr:`DecodedId.nonce` is ``None`` for them) but are never produced.
The ``_`` right after POSITION tells them apart from the current form's ``-``.

Signed ids (the gateway, :mod:`tpx.gateway`): a gateway hands out caller ids with a MAC
so that it trusts only ids it issued, without keeping any table::

    signed_id := "tpx" KIND POSITION "-" NONCE "-" MAC "_" PAYLOAD
    MAC       := 20 lowercase hex digits: HMAC-SHA256(key, unsigned id), truncated to 80 bits

where the unsigned id is the caller id above (``"tpx" KIND POSITION "-" NONCE "_"
PAYLOAD``). :func:`sign_caller_id` adds the MAC, :func:`verify_signed_id` checks it and
gives the unsigned id back (``None`` when the MAC is wrong or the id is not signed);
it takes one key or several (a key ring: the current key, which signs, and the keys being
retired, whose ids still verify).
A signed id is not a canonical encoding, so :func:`decode_caller_id` does not decode
it: strip the MAC first. The MAC binds the whole id (kind, position, nonce, foreign
id); ids stay stateless, restart-safe and valid on every process sharing the key.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
import random
import re

import attrs

__all__ = [
    "CALLER_ID_PREFIX",
    "MAC_LENGTH",
    "NONCE_BITS",
    "NONCE_LENGTH",
    "RAW_ENCODED_ID",
    "RAW_FOREIGN_ID",
    "DecodedId",
    "decode_caller_id",
    "encode_caller_id",
    "is_caller_id_valid",
    "new_nonce",
    "sign_caller_id",
    "to_caller_id",
    "to_foreign_id",
    "verify_signed_id",
    "wire_id",
]

CALLER_ID_PREFIX = "tpx"
#: Length of the per-response nonce (lowercase hex).
NONCE_LENGTH = 12

_RAW_OK = RAW_FOREIGN_ID = re.compile(r"[A-Za-z0-9_-]+").fullmatch
_VALID = re.compile(r"[a-zA-Z0-9_-]+").fullmatch
_NONCE_OK = re.compile(r"[0-9a-f]{12}").fullmatch
_ENCODED = re.compile(r"tpx([rbn])(0|[1-9][0-9]*)(?:-([0-9a-f]{12}))?_(.*)", re.DOTALL).fullmatch
#: Fast path of :func:`wire_id`: group 1 is the foreign id of a raw-kind caller id.
_RAW_ENCODED = RAW_ENCODED_ID = re.compile(
    r"tpxr(?:0|[1-9][0-9]*)(?:-[0-9a-f]{12})?_([A-Za-z0-9_-]+)"
).fullmatch
# The nonce needs uniqueness, not secrecy: a private generator (``random.seed`` elsewhere
# cannot make it repeat), seeded from os.urandom at import and again in a forked child.
_RNG = random.Random()
os.register_at_fork(after_in_child=_RNG.seed)
#: ``NONCE_BITS(48)`` -> the random bits of a nonce (the private generator's getrandbits).
NONCE_BITS = _getrandbits = _RNG.getrandbits


def new_nonce() -> str:
    """A fresh per-response nonce: 12 lowercase hex digits (48 random bits)."""
    return f"{_getrandbits(48):012x}"


def is_caller_id_valid(caller_id: str) -> bool:
    """Whether *caller_id* is a valid Messages tool id (``^[a-zA-Z0-9_-]+$``)."""
    return _VALID(caller_id) is not None


def encode_caller_id(foreign: str | None, position: int, nonce: str | None) -> str:
    """The caller id of *foreign* (``None`` = missing) at *position* with *nonce*.

    ``nonce=None`` gives the legacy form (no nonce), only for re-encoding legacy ids;
    new ids come from :func:`to_caller_id`.
    """
    head = f"tpx%s{position}_" if nonce is None else f"tpx%s{position}-{nonce}_"
    if foreign is None:
        return head % "n"
    if _RAW_OK(foreign) is not None:
        return head % "r" + foreign
    payload = base64.urlsafe_b64encode(foreign.encode("utf-8", "surrogatepass"))
    return head % "b" + payload.rstrip(b"=").decode("ascii")


def to_caller_id(foreign: str | None, position: int, nonce: str | None = None) -> str:
    """Encode the provider's tool-call id *foreign* (``None`` = missing) at *position*.

    *nonce* is the response's nonce (:func:`new_nonce`; every call of one response
    shares it); ``None`` draws a fresh one. Raises ``ValueError`` for a nonce that
    is not 12 lowercase hex digits.
    """
    if nonce is None:
        nonce = f"{_getrandbits(48):012x}"
    elif _NONCE_OK(nonce) is None:
        raise ValueError(f"a tool-id nonce is 12 lowercase hex digits, not {nonce!r}")
    return encode_caller_id(foreign, position, nonce)


@attrs.frozen
class DecodedId:
    """A caller id of ours, decoded.

    ``foreign`` is the provider's id (``None`` = missing), ``position`` the call's
    index in its response, ``nonce`` the response's nonce (``None`` for a legacy id).
    """

    foreign: str | None
    position: int
    nonce: str | None = None


def decode_caller_id(caller_id: str) -> DecodedId | None:
    """Decode a caller id of ours; ``None`` when *caller_id* is not a canonical encoding."""
    if not caller_id.startswith(CALLER_ID_PREFIX):
        return None
    match = _ENCODED(caller_id)
    if match is None:
        return None
    kind, pos, nonce, payload = match.groups()
    position = int(pos)
    if kind == "r":
        if _RAW_OK(payload) is None:
            return None
        return DecodedId(payload, position, nonce)
    if kind == "n":
        return DecodedId(None, position, nonce) if payload == "" else None
    if _VALID(payload) is None and payload != "":
        return None
    try:
        raw = base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4))
        foreign = raw.decode("utf-8", "surrogatepass")
    except (binascii.Error, ValueError):
        return None
    if encode_caller_id(foreign, position, nonce) != caller_id:
        return None  # non-canonical (a raw-able id in base64, stray bits, ...)
    return DecodedId(foreign, position, nonce)


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
            return raw[1]
        foreign = to_foreign_id(caller_id)
        if foreign is not None:
            return foreign
    return caller_id


# -- signed ids (the gateway) --------------------------------------------------------

#: Length of the MAC of a signed id (lowercase hex).
MAC_LENGTH = 20
_SIGNED = re.compile(
    r"tpx([rbn])(0|[1-9][0-9]*)-([0-9a-f]{12})-([0-9a-f]{20})_(.*)", re.DOTALL
).fullmatch


def _mac(key: bytes, unsigned: str) -> str:
    digest = hmac.new(key, unsigned.encode("utf-8", "surrogatepass"), hashlib.sha256)
    return digest.hexdigest()[:MAC_LENGTH]


def sign_caller_id(caller_id: str, key: bytes, *, ring: tuple[bytes, ...] | None = None) -> str:
    """*caller_id* (a current-form encoding, nonce included) with its MAC under *key*.

    *ring*: the keys :func:`verify_signed_id` will be given for this id (*key* among them):
    the signed id is remembered as verified under them, as a verification would (its MAC
    is right under *key*), so the gateway's next reads of the id it just handed out (its
    monitor's, the next request's) take no MAC. A *ring* without *key* remembers nothing.

    Raises ``ValueError`` for an id that is not a canonical encoding with a nonce.
    """
    match = _ENCODED(caller_id)
    if match is None or match.group(3) is None or decode_caller_id(caller_id) is None:
        raise ValueError("only a canonical caller id with a nonce can be signed")
    kind, pos, nonce, payload = match.groups()
    signed = f"tpx{kind}{pos}-{nonce}-{_mac(key, caller_id)}_{payload}"
    if ring is not None and key in ring:
        _remember(signed, ring, caller_id)
    return signed


#: (signed id, key) -> the unsigned id, for ids whose MAC :func:`verify_signed_id` found
#: right (a pure function): a gateway reads each id of a request more than once (its
#: tool_use and tool_result, the monitor's boundary). Bounded (emptied when full; long ids
#: are not kept); only verified ids are kept; dict reads and writes are atomic.
_VERIFIED: dict[tuple[str, bytes | tuple[bytes, ...]], str] = {}
_VERIFIED_SIZE = 4096
_VERIFIED_ID_LENGTH = 256


def verify_signed_id(signed: str, key: bytes | tuple[bytes, ...]) -> str | None:
    """The unsigned caller id behind *signed* when its MAC under *key* (or under one of the
    keys of a tuple: a ring being rotated) is right, else ``None``."""
    known = _VERIFIED.get((signed, key))
    if known is not None:
        return known
    if not signed.startswith(CALLER_ID_PREFIX):
        return None
    match = _SIGNED(signed)
    if match is None:
        return None
    kind, pos, nonce, mac, payload = match.groups()
    unsigned = f"tpx{kind}{pos}-{nonce}_{payload}"
    if decode_caller_id(unsigned) is None:
        return None
    if isinstance(key, bytes):
        ok = hmac.compare_digest(mac, _mac(key, unsigned))
    else:
        ok = False
        for each in key:  # every key tried: the time does not tell which one matched
            ok |= hmac.compare_digest(mac, _mac(each, unsigned))
    if not ok:
        return None
    _remember(signed, key, unsigned)
    return unsigned


def _remember(signed: str, key: bytes | tuple[bytes, ...], unsigned: str) -> None:
    """*signed* verifies under *key* as *unsigned* (its MAC is right): kept in the bounded
    cache of :func:`verify_signed_id` (a long id is not kept)."""
    if len(signed) <= _VERIFIED_ID_LENGTH:
        if len(_VERIFIED) >= _VERIFIED_SIZE:
            _VERIFIED.clear()
        _VERIFIED[signed, key] = unsigned
