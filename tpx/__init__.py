"""tpx: a Messages <-> Chat Completions transport mechanically tied to its TLA+ spec.

The names most callers need are here; the rest live in the submodules:

* :mod:`tpx.transport` -- :func:`boot`, :func:`aboot`, :class:`Transport`, :class:`AsyncTransport`
* :mod:`tpx.transport.exchange`  -- the sans-I/O exchange machine (steps = the spec's actions)
* :mod:`tpx.transport.translate` -- the sans-I/O translator (dicts and bytes, streaming too)
* :mod:`tpx.errors`    -- the one error tree (MODEL_* codes)
* :mod:`tpx.oracle.model`     -- the Python mirror of spec/TpxTransport.tla (the reference oracle)
* :mod:`tpx.oracle.tlc`       -- the TLC runner
"""

from tpx.errors import ModelError, TpxError
from tpx.transport import AsyncTransport, Transport, aboot, boot
from tpx.transport.exchange import Exchange, Provider

__version__ = "0.1.0"

__all__ = [
    "AsyncTransport",
    "Exchange",
    "ModelError",
    "Provider",
    "TpxError",
    "Transport",
    "__version__",
    "aboot",
    "boot",
]
