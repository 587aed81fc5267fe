"""Signatures of the thinking blocks tpx makes from a provider's reasoning.

A Messages client (Claude Code) drops a reply whose thinking block has no signature,
and sends thinking blocks back verbatim on the next turn. tpx therefore signs the
thinking it makes: ``signature = "tpx1." + base64url(HMAC-SHA256(key, text))`` where
*text* is the block's ``thinking`` (UTF-8) and *key* is derived from the transport's
thinking secret. When a thinking block comes back, the translator verifies the
signature (constant-time) before turning the text into the provider's reasoning field;
a forged or foreign signature (another provider's, another secret's, an edited text)
is dropped with a warning and never forwarded as the model's own reasoning.

The secret: ``boot(thinking_secret=...)``, else the ``TPX_THINKING_SECRET``
environment variable, else a random secret drawn once per process
(:data:`PROCESS_SIGNER`). A secret may list several keys separated by commas or
whitespace (:func:`split_secret`), e.g. ``"new-key,old-key"``: the first signs, every
one verifies, so a key is rotated by putting the new one first, and retired by
removing it once no signature made with it matters any more. With the random one,
signatures do not survive a restart and differ between replicas: several gateway
processes behind one address must share ``TPX_THINKING_SECRET`` (a reply's thinking
could otherwise come back to a process that cannot verify it, and would be dropped --
never trusted).
"""

from __future__ import annotations

import base64
import functools
import hashlib
import hmac
import re
import secrets

__all__ = ["PROCESS_SIGNER", "SIGNATURE_PREFIX", "ThinkingSigner", "signer_for", "split_secret"]

#: Every tpx signature starts with this (a version tag; other providers' never do).
SIGNATURE_PREFIX = "tpx1."
_CONTEXT = b"tpx thinking signature v1"
_SEPARATORS = re.compile(r"[\s,]+")


def split_secret(text: str) -> tuple[str, ...]:
    """The keys *text* lists, separated by commas or whitespace (the current one first)."""
    return tuple(key for key in _SEPARATORS.split(text) if key)


def _mac_of(secret: str | bytes) -> hmac.HMAC:
    raw = secret.encode() if isinstance(secret, str) else bytes(secret)
    if not raw:
        raise ValueError("a thinking secret must not be empty")
    # A derived key: the secret itself is never used as a MAC key directly.
    key = hmac.new(raw, _CONTEXT, hashlib.sha256).digest()
    return hmac.new(key, digestmod=hashlib.sha256)


def _signature(mac: hmac.HMAC, text: str) -> str:
    mac = mac.copy()
    mac.update(text.encode("utf-8", "surrogatepass"))
    return SIGNATURE_PREFIX + base64.urlsafe_b64encode(mac.digest()).rstrip(b"=").decode()


class ThinkingSigner:
    """Signs thinking text with *secret*, and verifies it against *secret* and every key of
    *older* (keys being retired). Never shown in its repr."""

    __slots__ = ("_mac", "_older")

    def __init__(self, secret: str | bytes, *older: str | bytes) -> None:
        self._mac = _mac_of(secret)
        self._older = tuple(_mac_of(key) for key in older)

    def __repr__(self) -> str:
        return "ThinkingSigner(<secret>)"

    def sign(self, text: str) -> str:
        """The signature of *text* (under the current key)."""
        return _signature(self._mac, text)

    def verify(self, text: str, signature: object) -> bool:
        """*signature* is the signature of *text* under one of this signer's keys
        (constant-time compares, every key tried)."""
        if not isinstance(signature, str) or not signature.startswith(SIGNATURE_PREFIX):
            return False
        given = signature.encode("utf-8", "replace")
        ok = hmac.compare_digest(self.sign(text).encode(), given)
        for mac in self._older:
            ok |= hmac.compare_digest(_signature(mac, text).encode(), given)
        return ok


#: The per-process signer used when no secret is configured (random, never shown).
PROCESS_SIGNER = ThinkingSigner(secrets.token_bytes(32))


def signer_for(secret: str | bytes | ThinkingSigner | None) -> ThinkingSigner:
    """A signer for *secret* (``None`` -> :data:`PROCESS_SIGNER`; a str listing several
    keys: :func:`split_secret`, the first signs)."""
    if secret is None:
        return PROCESS_SIGNER
    if isinstance(secret, ThinkingSigner):
        return secret
    return _signer(secret)


@functools.lru_cache(maxsize=8)
def _signer(secret: str | bytes) -> ThinkingSigner:
    if isinstance(secret, str):
        keys = split_secret(secret)
        if len(keys) > 1:
            return ThinkingSigner(*keys)
        secret = keys[0] if keys else secret
    return ThinkingSigner(secret)
