"""tpx: a Messages <-> Chat Completions transport mechanically tied to its TLA+ spec.

The names most callers need are here; the rest live in the submodules:

* :mod:`tpx.transport` -- :func:`boot`, :func:`aboot`, :class:`Transport`, :class:`AsyncTransport`
* :mod:`tpx.exchange`  -- the sans-I/O exchange machine (steps = the spec's actions)
* :mod:`tpx.translate` -- the sans-I/O translator (dicts and bytes, streaming too)
* :mod:`tpx.errors`    -- the one error tree (MODEL_* codes)
* :mod:`tpx.model`     -- the Python mirror of spec/TpxTransport.tla (the reference oracle)
* :mod:`tpx.tlc`       -- the TLC runner
"""

from tpx.errors import ModelError, TpxError
from tpx.exchange import Exchange, Provider
from tpx.transport import AsyncTransport, Transport, aboot, boot

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
