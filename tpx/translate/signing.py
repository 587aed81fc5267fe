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
(:data:`PROCESS_SIGNER`). With the random one, signatures do not survive a restart
and differ between replicas: several gateway processes behind one address must
share ``TPX_THINKING_SECRET`` (a reply's thinking could otherwise come back to a
process that cannot verify it, and would be dropped -- never trusted).
"""

from __future__ import annotations

import base64
import functools
import hashlib
import hmac
import secrets

__all__ = ["PROCESS_SIGNER", "SIGNATURE_PREFIX", "ThinkingSigner", "signer_for"]

#: Every tpx signature starts with this (a version tag; other providers' never do).
SIGNATURE_PREFIX = "tpx1."
_CONTEXT = b"tpx thinking signature v1"


class ThinkingSigner:
    """Signs and verifies thinking text with one secret (never shown in its repr)."""

    __slots__ = ("_mac",)

    def __init__(self, secret: str | bytes) -> None:
        raw = secret.encode() if isinstance(secret, str) else bytes(secret)
        if not raw:
            raise ValueError("a thinking secret must not be empty")
        # A derived key: the secret itself is never used as a MAC key directly.
        key = hmac.new(raw, _CONTEXT, hashlib.sha256).digest()
        self._mac = hmac.new(key, digestmod=hashlib.sha256)

    def __repr__(self) -> str:
        return "ThinkingSigner(<secret>)"

    def sign(self, text: str) -> str:
        """The signature of *text*."""
        mac = self._mac.copy()
        mac.update(text.encode("utf-8", "surrogatepass"))
        return SIGNATURE_PREFIX + base64.urlsafe_b64encode(mac.digest()).rstrip(b"=").decode()

    def verify(self, text: str, signature: object) -> bool:
        """*signature* is this signer's signature of *text* (constant-time compare)."""
        if not isinstance(signature, str) or not signature.startswith(SIGNATURE_PREFIX):
            return False
        return hmac.compare_digest(self.sign(text).encode(), signature.encode("utf-8", "replace"))


#: The per-process signer used when no secret is configured (random, never shown).
PROCESS_SIGNER = ThinkingSigner(secrets.token_bytes(32))


def signer_for(secret: str | bytes | ThinkingSigner | None) -> ThinkingSigner:
    """A signer for *secret* (``None`` -> :data:`PROCESS_SIGNER`)."""
    if secret is None:
        return PROCESS_SIGNER
    if isinstance(secret, ThinkingSigner):
        return secret
    return _signer(secret)


@functools.lru_cache(maxsize=8)
def _signer(secret: str | bytes) -> ThinkingSigner:
    return ThinkingSigner(secret)
