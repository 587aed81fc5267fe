"""The gateway's secrets, prepared once: their rendered forms, the reply scrubber, a fast redactor.

:class:`Redactor` is :func:`tpx.errors.redact` with the patterns it derives from the forms
built once (a few set lookups per 4 characters of text; a text with no hit is returned as
it is). :func:`prepared` caches one :class:`Secrets` per tuple of secret values (a token
command may change the credential: a new value gets its own entry).
"""

from __future__ import annotations

import functools

from tpx._redact import _MIN_FRAGMENT, _patterns, secret_forms
from tpx._scrub import Scrubber

__all__ = ["FRAGMENT", "Redactor", "Secrets", "prepared"]

#: :func:`tpx.errors.redact` removes any run of this many characters of a secret form
#: (its own constant: the two cannot drift apart).
FRAGMENT = _MIN_FRAGMENT


#: The most texts a :class:`Redactor` remembers as clean (then it starts afresh), and the
#: longest it remembers: a log line's values repeat (its model, its outcome, its actions).
CLEAN_TEXTS = 1024
CLEAN_TEXT_LENGTH = 256


class Redactor:
    """``Redactor(forms)(text)`` == ``tpx.errors.redact(text, forms)``, faster when clean.

    A short text found clean is remembered (at most :data:`CLEAN_TEXTS` of them): the forms
    never change, so it is clean the next time too."""

    __slots__ = ("_clean", "_forms", "_patterns")

    def __init__(self, forms: tuple[str, ...]) -> None:
        self._forms = tuple(f for f in forms if f)
        self._patterns = _patterns(self._forms)
        self._clean: set[str] = set()

    def __call__(self, text: str) -> str:
        if not self._forms or text in self._clean:
            return text
        if self._patterns.may_change(text):
            return self._patterns.apply(text)
        if len(text) <= CLEAN_TEXT_LENGTH:
            clean = self._clean
            if len(clean) >= CLEAN_TEXTS:
                clean.clear()
            clean.add(text)
        return text


class Secrets:
    """Everything derived from one set of secret values (built once, shared by requests)."""

    __slots__ = ("forms", "redact", "scrubber", "values")

    def __init__(self, values: tuple[str, ...]) -> None:
        self.values = values
        #: every rendered form (:func:`tpx.errors.secret_forms`)
        self.forms = secret_forms(values)
        #: what an :class:`~tpx.transport.exchange.Exchange` holding *values* scrubs replies with
        self.scrubber = Scrubber(self.forms)
        self.redact = Redactor(self.forms)


@functools.lru_cache(maxsize=8)
def prepared(values: tuple[str, ...]) -> Secrets:
    """The :class:`Secrets` of *values* (cached)."""
    return Secrets(values)
