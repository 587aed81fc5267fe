"""The gateway: ``tpx serve``, tpx's verified transport for real Messages clients.

* :mod:`tpx.gateway.core` -- the sans-I/O core (:class:`Gateway`, :class:`Request`,
  :class:`Response`, :class:`Turn`);
* :mod:`tpx.gateway.history` -- a request's obligations read from its history, signed ids;
* :mod:`tpx.gateway.settings` -- flags, environment, TOML file;
* :mod:`tpx.gateway.upstream` -- the httpx2 upstream and the drivers;
* :mod:`tpx.gateway.asgi` -- the ASGI app uvicorn runs; :mod:`tpx.gateway.cli` -- ``tpx serve``;
* :mod:`tpx.gateway.tokens` -- local count_tokens (an estimate); :mod:`tpx.gateway.metrics`.
"""

from tpx.gateway.core import Forward, Gateway, Request, Response, Turn, UpstreamCall
from tpx.gateway.settings import Credential, Limits, ModelRoute, Settings, load_settings

__all__ = [
    "Credential",
    "Forward",
    "Gateway",
    "Limits",
    "ModelRoute",
    "Request",
    "Response",
    "Settings",
    "Turn",
    "UpstreamCall",
    "load_settings",
]
