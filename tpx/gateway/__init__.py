"""The gateway: ``tpx serve``, tpx's verified transport for real Messages clients.

* :mod:`tpx.gateway.core` -- the sans-I/O core (:class:`Gateway`); :mod:`tpx.gateway.turn` --
  one exchange (:class:`Turn`) and pass-throughs; :mod:`tpx.gateway.wire` -- :class:`Request`,
  :class:`Response`, :class:`UpstreamCall`, error bodies;
* :mod:`tpx.gateway.history` -- a request's obligations read from its history, signed ids;
* :mod:`tpx.gateway.settings` -- flags, environment, TOML file;
* :mod:`tpx.gateway.upstream` -- the httpx2 upstream clients; :mod:`tpx.gateway.drive` -- the
  drivers that run a turn on them; :mod:`tpx.gateway.netio` -- their connections' network
  backend (asyncio transports, one write per request);
* :mod:`tpx.gateway.redaction` -- the secrets' forms, scrubber and fast redactor, prepared once;
* :mod:`tpx.gateway.asgi` -- the ASGI app uvicorn runs; :mod:`tpx.gateway.protocol` -- its
  header read timeout; :mod:`tpx.gateway.cli` -- ``tpx serve``;
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
