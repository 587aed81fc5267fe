"""The transport library: one Messages API seam over two providers, translated both ways.

* :mod:`tpx.transport.client`    -- :func:`boot`, :func:`aboot`, :class:`Transport`,
  :class:`AsyncTransport`: the httpx2 shells (re-exported here)
* :mod:`tpx.transport.exchange`  -- the sans-I/O exchange machine (steps = the spec's actions)
* :mod:`tpx.transport.translate` -- the sans-I/O translator, Messages <-> Chat Completions
* :mod:`tpx.transport.shape`     -- ShapeInv at run time: every body and event a caller gets
"""

from tpx.transport.client import (
    DEFAULT_ANTHROPIC_BASE_URL,
    DEFAULT_TIMEOUT,
    AsyncTransport,
    Transport,
    aboot,
    boot,
)

__all__ = [
    "DEFAULT_ANTHROPIC_BASE_URL",
    "DEFAULT_TIMEOUT",
    "AsyncTransport",
    "Transport",
    "aboot",
    "boot",
]
