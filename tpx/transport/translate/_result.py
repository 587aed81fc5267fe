"""The value every dict-level translation returns."""

from __future__ import annotations

from typing import Any

import attrs

__all__ = ["Translation"]


@attrs.frozen
class Translation:
    """A translated body plus the features dropped on the way (one message each)."""

    body: dict[str, Any]
    warnings: tuple[str, ...] = ()
