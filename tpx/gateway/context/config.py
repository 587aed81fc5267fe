"""The ``[context]`` table of the config file: the context-window contract's switches.

::

    [context]
    window = 32768          # the window of [upstream] model / TPX_MODEL (tokens)
    default = 200000        # a model whose window nobody says (tpx.gateway.context.window)
    discover = true         # ask the upstream (per profile) for its models' windows
    refresh = 300.0         # seconds between two discoveries
    preflight = true        # refuse / clamp before the wire (tpx.gateway.context.preflight)
    min_output = 1024       # tokens a turn that fits must keep for the reply
    rewrite_errors = true   # upstream context errors in the Messages wording
    aliases = true          # GET /v1/models lists claude-... aliases of the models
    tokenizer = false       # count_tokens and the preflight ask the upstream's tokenizer
                            # endpoint (vLLM, SGLang, llama.cpp: tpx.gateway.context.tokenizer)
    tokenizer_timeout = 2.0 # seconds it may take (then the estimate counts)
    tokenizer_bytes = 4194304  # the largest reply read from it (then the estimate counts)
    estimate_margin = 1.2   # the estimate's factor over the cl100k count (at least 1.0;
                            # docs/context.md has what each tokenizer needs)
    drop_billing_header = true  # Claude Code's x-anthropic-billing-header system block is
                            # not sent upstream (false: it is; [[upstreams]] may say per entry)

``[[models]]`` entries take ``context_window`` too (the window of that entry's model).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from tpx.errors import ConfigurationError
from tpx.gateway.context.counting import MARGIN
from tpx.gateway.context.window import DEFAULT_WINDOW

__all__ = ["ContextConfig", "context_config"]


@attrs.frozen
class ContextConfig:
    window: int | None = None
    default: int = DEFAULT_WINDOW
    discover: bool = True
    refresh: float = 300.0
    preflight: bool = True
    min_output: int = 1024
    rewrite_errors: bool = True
    aliases: bool = True
    tokenizer: bool = False
    tokenizer_timeout: float = 2.0
    tokenizer_bytes: int = 4 << 20
    estimate_margin: float = MARGIN
    drop_billing_header: bool = True


_KINDS: Mapping[str, type | tuple[type, ...]] = {
    "window": int,
    "default": int,
    "discover": bool,
    "refresh": (int, float),
    "preflight": bool,
    "min_output": int,
    "rewrite_errors": bool,
    "aliases": bool,
    "tokenizer": bool,
    "tokenizer_timeout": (int, float),
    "tokenizer_bytes": int,
    "estimate_margin": (int, float),
    "drop_billing_header": bool,
}


def context_config(data: Mapping[str, Any]) -> ContextConfig:
    """The ``[context]`` table of a parsed config file (absent: the defaults)."""
    table = data.get("context", {})
    if not isinstance(table, Mapping):
        raise ConfigurationError("config file: [context] must be a table")
    values: dict[str, Any] = {}
    for key, raw in table.items():
        kind = _KINDS.get(key)
        if kind is None:
            raise ConfigurationError(f"config file: context.{key} is not a known key")
        if isinstance(raw, bool) != (kind is bool) or not isinstance(raw, kind):
            raise ConfigurationError(f"config file: context.{key} has the wrong type")
        value: Any = raw
        if kind is not bool and value <= 0:
            raise ConfigurationError(f"config file: context.{key} must be > 0")
        if key == "estimate_margin" and value < 1:
            raise ConfigurationError("config file: context.estimate_margin must be >= 1.0")
        floats = ("refresh", "tokenizer_timeout", "estimate_margin")
        values[key] = float(value) if key in floats else value
    return ContextConfig(**values)
