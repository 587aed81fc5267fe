"""The gateway's secrets, prepared once: their rendered forms, the reply scrubber, a fast redactor.

:func:`tpx.errors.redact` looks for every run of 8 characters of every secret form at every
position of a text, in Python: about 1.2 ms for one 360-character log line with 16 forms,
more than the rest of a request's core. :class:`Redactor` gives the same result (it
calls :func:`tpx.errors.redact` whenever that could change anything) after a check that
costs one set lookup per 4 characters: the text is returned as it is when it holds no
8-character piece of any form of 8 or more characters, no whole shorter form and no cut
marker, which are exactly the texts :func:`tpx.errors.redact` returns unchanged. (An
8-character piece starting at position ``s`` holds the 5 characters at the first multiple
of 4 from ``s``, at most ``s + 3``: so only the 5-character pieces of the forms are looked
up, at every 4th position; a hit only means the full redaction runs.)

:func:`prepared` caches one :class:`Secrets` per tuple of secret values (a token command
may change the credential: a new value gets its own entry).
"""

from __future__ import annotations

import functools

from tpx._scrub import Scrubber
from tpx.errors import _CUT_MARKERS, _MIN_FRAGMENT, redact, secret_forms

__all__ = ["FRAGMENT", "Redactor", "Secrets", "prepared"]

#: :func:`tpx.errors.redact` removes any run of this many characters of a secret form
#: (its own constant: the two cannot drift apart).
FRAGMENT = _MIN_FRAGMENT
_STEP = 4
_PROBE = FRAGMENT - _STEP + 1  # a FRAGMENT-long run holds a _PROBE-long piece at a _STEP multiple


class Redactor:
    """``Redactor(forms)(text)`` == ``tpx.errors.redact(text, forms)``, faster when clean."""

    __slots__ = ("_forms", "_short", "_windows")

    def __init__(self, forms: tuple[str, ...]) -> None:
        self._forms = forms
        self._windows = frozenset(
            form[i : i + _PROBE]
            for form in forms
            if len(form) >= FRAGMENT
            for i in range(len(form) - _PROBE + 1)
        )
        self._short = tuple(form for form in forms if 0 < len(form) < FRAGMENT)

    def __call__(self, text: str) -> str:
        if self._forms and self._may_change(text):
            return redact(text, self._forms)
        return text

    def _may_change(self, text: str) -> bool:
        for marker in _CUT_MARKERS:
            if marker in text:
                return True
        for form in self._short:
            if form in text:
                return True
        windows = self._windows
        return any(text[i : i + _PROBE] in windows for i in range(0, len(text) - _PROBE + 1, _STEP))


class Secrets:
    """Everything derived from one set of secret values (built once, shared by requests)."""

    __slots__ = ("forms", "redact", "scrubber")

    def __init__(self, values: tuple[str, ...]) -> None:
        #: every rendered form (:func:`tpx.errors.secret_forms`)
        self.forms = secret_forms(values)
        #: what an :class:`~tpx.exchange.Exchange` holding *values* scrubs replies with
        self.scrubber = Scrubber(self.forms)
        self.redact = Redactor(self.forms)


@functools.lru_cache(maxsize=8)
def prepared(values: tuple[str, ...]) -> Secrets:
    """The :class:`Secrets` of *values* (cached)."""
    return Secrets(values)
