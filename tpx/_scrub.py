"""Credential echoes in successful replies: removed before a caller sees them.

A provider may echo the credential it was sent (a debugging proxy, a hostile server).
Error texts are redacted where they are built (:func:`tpx.errors.redact`); this is the
same rule for the bodies and stream events tpx *delivers*: every form in
:func:`tpx.errors.secret_forms` (and its JSON-escaped spelling) is replaced by
``[REDACTED]`` in the reply's text before it is parsed, and when the text holds
``\\u`` escapes (which may spell a credential in any mix of escaped characters) every
string of the parsed value is checked too.

Known limit: a credential split by the provider across stream chunks (half in one text
delta, half in the next) reaches the caller in halves; tpx does not buffer deltas.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

__all__ = ["Scrubber"]

_REDACTED = "[REDACTED]"


class Scrubber:
    """Removes the given secret forms from reply text and parsed values."""

    __slots__ = ("_bytes", "_text")

    def __init__(self, forms: Iterable[str]) -> None:
        text: set[str] = set()
        for form in forms:
            text.add(form)
            text.add(json.dumps(form)[1:-1])
        ordered = sorted((t for t in text if t), key=lambda t: (-len(t), t))
        self._text = tuple(ordered)
        self._bytes = tuple(t.encode("utf-8", "surrogatepass") for t in ordered)

    def __bool__(self) -> bool:
        return bool(self._text)

    def reply(self, data: bytes) -> tuple[bytes, bool]:
        """*data* without the forms; ``True`` when the parsed value needs :meth:`value`."""
        for form in self._bytes:
            if form in data:
                data = data.replace(form, _REDACTED.encode())
        return data, b"\\u" in data

    def text(self, data: str) -> tuple[str, bool]:
        """:meth:`reply` for text."""
        for form in self._text:
            if form in data:
                data = data.replace(form, _REDACTED)
        return data, "\\u" in data

    def _clean(self, text: str) -> str:
        for form in self._text:
            if form in text:
                text = text.replace(form, _REDACTED)
        return text

    def value(self, value: Any) -> Any:
        """*value* (parsed JSON) with every string and key cleaned, without recursion.
        Returns *value* itself when nothing was found."""
        found = False
        pending: list[Any] = [value]
        while pending and not found:
            item = pending.pop()
            if item.__class__ is str:
                found = self._clean(item) != item
            elif item.__class__ is dict:
                pending.extend(item.keys())
                pending.extend(item.values())
            elif item.__class__ is list:
                pending.extend(item)
        if not found:
            return value
        return self._rebuild(value)

    def _rebuild(self, value: Any) -> Any:
        # Iterative copy: (source, target) pairs; containers are filled after creation.
        if value.__class__ is str:
            return self._clean(value)
        root: Any = {} if value.__class__ is dict else [] if value.__class__ is list else value
        work: list[tuple[Any, Any]] = [(value, root)] if root is not value else []
        while work:
            source, target = work.pop()
            pairs = source.items() if source.__class__ is dict else enumerate(source)
            for key, item in pairs:
                if item.__class__ is dict or item.__class__ is list:
                    copy: Any = {} if item.__class__ is dict else []
                    work.append((item, copy))
                elif item.__class__ is str:
                    copy = self._clean(item)
                else:
                    copy = item
                if target.__class__ is dict:
                    target[self._clean(key) if key.__class__ is str else key] = copy
                else:
                    target.append(copy)
        return root
