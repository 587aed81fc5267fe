"""Gateway settings: flags > environment > TOML file > defaults, read once at start.

The provider is selected exactly as :func:`tpx.transport.boot` selects it (an Anthropic
key wins, then a TPX token, else none) and never changes. A TPX token may come from
``TPX_OAUTH_TOKEN`` or from ``TPX_OAUTH_TOKEN_COMMAND`` (a shell command printing a fresh
bearer token, re-run before it expires and on an upstream 401: once for all the requests
the same token failed, and not again within a growing delay, see :class:`Credential`; its
output and run time are bounded, :mod:`tpx.gateway.token_command`); either way the
provider is TPX. Credentials come from the environment only (never from the TOML file)
and never appear in a repr, a log line or an error; so does the thinking secret
(``TPX_THINKING_SECRET``, the key that signs the thinking blocks made of upstream
reasoning; random per process when unset, so replicas must share one) and the id secret
(``TPX_GATEWAY_SECRET``, the key that signs the tool ids handed to clients). Either may list
several keys, separated by commas or whitespace: the first signs, every one verifies (a key
is rotated by listing the new one first, retired by removing it).

TOML file (every key optional)::

    [server]
    host = "127.0.0.1"
    port = 8082
    workers = 1
    metrics_auth = false          # GET /metrics needs the gateway key too (--metrics-auth)

    [upstream]
    base_url = "http://127.0.0.1:9000/v1"  # TPX_BASE_URL / ANTHROPIC_BASE_URL win
    model = "qwen3"                         # TPX_MODEL wins
    profile = "vllm"                        # the upstream's kind (translate.profiles);
                                            # --profile > TPX_PROFILE > this > "generic"
    token_ttl = 300                         # seconds a command-made token is reused
    token_timeout = 30                      # seconds the token command may run

    [limits]
    max_body_bytes = 33554432
    max_json_containers = 50000   # JSON objects and arrays in one request body (else 413)
    header_timeout = 30.0         # seconds to receive the request line and headers
    max_header_bytes = 65536      # the request line and headers, at most (else 431)
    body_timeout = 60.0           # seconds to receive a WHOLE request body (else 408)
    connect_timeout = 10.0        # upstream connect
    read_timeout = 600.0          # upstream read (between bytes)
    max_upstream = 512            # concurrent upstream requests per process
    keepalive_expiry = 4.0        # drop idle upstream connections before the upstream does
                                  # (uvicorn-based servers such as vLLM close them after 5 s)
    shutdown_grace = 30.0         # SIGTERM: seconds running streams may finish in
    ping_interval = 10.0          # SSE ping after this many seconds of upstream silence
    tail_cache = 16               # request tails kept parsed (tpx.gateway.bodies); 0: none
    max_upstream_body = 16777216  # decoded bytes of an upstream reply read whole (else 502)
    max_upstream_stream = 268435456  # decoded bytes of one upstream stream
    offload_bytes = 262144        # bodies larger than this are handled off the event loop
    cpu_threads = 2               # threads handling those bodies (at most this many at once)
    count_processes = 1           # processes counting large count_tokens bodies (TPX); 0: threads
    stream_buffer_bytes = 262144  # upstream stream bytes read ahead of a client, at most

    [[models]]                    # first match wins; glob on the caller's model name
    match = "*haiku*"
    model = "small-model"         # the upstream model (absent: keep the caller's)
    max_tokens = 8192             # ceiling: larger max_tokens are lowered to it
    context_window = 32768        # the model's window (tokens; tpx.gateway.context)

    [context]                     # the context-window contract (tpx.gateway.context.config)
    window = 32768                # the window of [upstream] model / TPX_MODEL
    rewrite_errors = true         # upstream context errors in the Messages wording
    drop_billing_header = true    # Claude Code's billing-header system block not sent upstream

    [[upstreams]], [[routes]], [routing]: many OpenAI-compatible upstreams, per-request
    routes, failover and balancing (tpx.gateway.routing, tpx.gateway.dispatch)
"""

from __future__ import annotations

import fnmatch
import os
import secrets
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs

from tpx.errors import ConfigurationError
from tpx.gateway.context.config import ContextConfig, context_config
from tpx.gateway.credential import BACKOFF_FIRST, BACKOFF_MAX, Credential
from tpx.gateway.routing import Routing, parse_routing
from tpx.gateway.token_command import TIMEOUT
from tpx.transport._config import _check_credential, _configure
from tpx.transport.exchange import Provider
from tpx.transport.translate.profiles import DEFAULT_PROFILE, Profile, get_profile
from tpx.transport.translate.signing import PROCESS_SIGNER, ThinkingSigner, signer_for, split_secret

__all__ = [
    "BACKOFF_FIRST",
    "BACKOFF_MAX",
    "Credential",
    "Limits",
    "ModelRoute",
    "Settings",
    "load_settings",
]

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8082


@attrs.frozen
class ModelRoute:
    """``match`` (a glob on the caller's model) -> ``model`` upstream, ``max_tokens`` ceiling,
    ``context_window`` (the upstream model's window in tokens; tpx.gateway.context)."""

    match: str
    model: str | None = None
    max_tokens: int | None = None
    context_window: int | None = None

    def matches(self, model: str) -> bool:
        return fnmatch.fnmatchcase(model, self.match)


@attrs.frozen
class Limits:
    max_body_bytes: int = 32 * 1024 * 1024
    #: JSON objects and arrays in one request body, at most (413 past it): parsing costs
    #: about a microsecond per value in one call that holds the interpreter, so this bounds
    #: the pause a body can cause (a Claude Code turn holds a few hundred)
    max_json_containers: int = 50_000
    header_timeout: float = 30.0
    body_timeout: float = 60.0
    connect_timeout: float = 10.0
    read_timeout: float = 600.0
    max_upstream: int = 512
    keepalive_expiry: float = 4.0
    shutdown_grace: float = 30.0
    ping_interval: float = 10.0
    #: request tails (the members after ``messages``) kept parsed (tpx.gateway.bodies);
    #: 0: none
    tail_cache: int = 16
    #: decoded bytes of an upstream reply read whole (tpx.gateway.inflate); past it: 502
    max_upstream_body: int = 16 * 1024 * 1024
    #: decoded bytes of an upstream stream (translated as it arrives); past it: the
    #: stream fails
    max_upstream_stream: int = 256 * 1024 * 1024
    #: the request line and headers, at most (tpx.gateway.protocol: 431 past it)
    max_header_bytes: int = 64 * 1024
    #: request bodies larger than this are handled off the event loop (tpx.gateway.offload)
    offload_bytes: int = 256 * 1024
    #: the threads doing that work (a bounded pool: more such requests wait their turn)
    cpu_threads: int = 2
    #: processes counting the tokens of those bodies (TPX count_tokens; 0: the threads do)
    count_processes: int = 1
    #: the bytes of an upstream stream read ahead of what its client has taken, at most
    stream_buffer_bytes: int = 256 * 1024
    #: /v1/messages exchanges in flight at once, at most (the spec's MaxInFlight): past it a
    #: new one is answered 529 overloaded_error before anything reaches the upstream
    max_in_flight: int = 1024


@attrs.frozen(repr=False)
class Settings:
    """Everything the gateway needs; built by :func:`load_settings` (or directly in tests)."""

    provider: Provider
    base_url: str | None
    credential: Credential | None
    gateway_key: str | None = attrs.field(default=None)
    secret: bytes = attrs.field(factory=lambda: secrets.token_bytes(32))
    model: str | None = None
    routes: tuple[ModelRoute, ...] = ()
    limits: Limits = Limits()
    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    workers: int = 1
    log_bodies: bool = False
    trace_dir: Path | None = None
    monitor: bool = False
    """``tpx serve --monitor``: check every exchange's spec steps (tpx.gateway.monitoring)."""
    #: the TPX upstream's kind: how requests are shaped for it (tpx.transport.translate.profiles)
    profile: Profile = DEFAULT_PROFILE
    #: signs / verifies thinking blocks (None: a random per-process key); may list several
    #: keys (tpx.transport.translate.signing.split_secret): the first signs, every one verifies
    thinking_secret: str | None = None
    #: keys being retired: tool ids signed with one still verify (``secret`` signs new ones)
    previous_secrets: tuple[bytes, ...] = ()
    #: the context-window contract's switches (``[context]``, tpx.gateway.context)
    context: ContextConfig = attrs.field(factory=ContextConfig)

    @property
    def id_keys(self) -> tuple[bytes, ...]:
        """The keys a tool id may be signed with: ``secret`` first, then the retired ones."""
        return (self.secret, *self.previous_secrets)

    #: ``GET /metrics`` needs the gateway key too (``--metrics-auth``)
    metrics_auth: bool = False
    #: ``[[upstreams]]`` and ``[[routes]]`` (tpx.gateway.routing); None: the one upstream
    routing: Routing | None = None

    @property
    def signer(self) -> ThinkingSigner:
        """The thinking signer (cached per secret by :func:`signer_for`)."""
        if self.thinking_secret is None:
            return PROCESS_SIGNER
        return signer_for(self.thinking_secret)

    def __repr__(self) -> str:
        return (
            f"Settings(provider={self.provider.name}, base_url={self.base_url!r}, "
            f"model={self.model!r}, profile={self.profile.name!r}, routes={self.routes!r}, "
            f"host={self.host!r}, "
            f"port={self.port}, workers={self.workers}, credentials=<redacted>)"
        )

    __str__ = __repr__

    def route(self, model: str) -> ModelRoute | None:
        return next((r for r in self.routes if r.matches(model)), None)

    def secret_values(self) -> tuple[str, ...]:
        """Every secret the gateway holds (for redaction)."""
        values = [self.gateway_key] if self.gateway_key else []
        own = self.credential
        if own is not None and own._value is not None:
            values.append(own._value)
        if self.routing is not None:  # the upstreams' own (the gateway's is in already)
            values += [
                c._value
                for c in self.routing.credentials()
                if c is not own and c._value is not None
            ]
        if self.thinking_secret:
            values.append(self.thinking_secret)
            keys = split_secret(self.thinking_secret)
            if len(keys) > 1:
                values += keys
        return tuple(values)


def _table(data: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    value = data.get(name, {})
    if not isinstance(value, Mapping):
        raise ConfigurationError(f"config file: [{name}] must be a table")
    return value


def _typed(table: Mapping[str, Any], key: str, kind: type | tuple[type, ...], where: str) -> Any:
    value = table.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, kind):
        raise ConfigurationError(f"config file: {where}.{key} has the wrong type")
    return value


def _routes(data: Mapping[str, Any]) -> tuple[ModelRoute, ...]:
    raw = data.get("models", [])
    if not isinstance(raw, list):
        raise ConfigurationError("config file: [[models]] must be an array of tables")
    routes = []
    for i, entry in enumerate(raw):
        if not isinstance(entry, Mapping) or not isinstance(entry.get("match"), str):
            raise ConfigurationError(f"config file: models[{i}] needs a string 'match'")
        model = _typed(entry, "model", str, f"models[{i}]")
        ceiling = _typed(entry, "max_tokens", int, f"models[{i}]")
        if ceiling is not None and ceiling < 1:
            raise ConfigurationError(f"config file: models[{i}].max_tokens must be >= 1")
        window = _typed(entry, "context_window", int, f"models[{i}]")
        if window is not None and window < 1:
            raise ConfigurationError(f"config file: models[{i}].context_window must be >= 1")
        routes.append(ModelRoute(entry["match"], model, ceiling, window))
    return tuple(routes)


def _limits(table: Mapping[str, Any]) -> Limits:
    defaults = Limits()
    values: dict[str, Any] = {}
    for field in attrs.fields(Limits):
        kind: type | tuple[type, ...] = int if field.type in (int, "int") else (int, float)
        value = _typed(table, field.name, kind, "limits")
        if value is not None:
            if field.name in ("tail_cache", "count_processes"):  # 0: none
                if value < 0:
                    raise ConfigurationError(f"config file: limits.{field.name} must be >= 0")
            elif value <= 0:
                raise ConfigurationError(f"config file: limits.{field.name} must be > 0")
            values[field.name] = value
    return attrs.evolve(defaults, **values)


def read_config_file(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as handle:
            return tomllib.load(handle)
    except OSError as exc:
        raise ConfigurationError(f"cannot read config file {path}: {exc.strerror}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigurationError(f"config file {path} is not valid TOML: {exc}") from None


def load_settings(
    *,
    env: Mapping[str, str] | None = None,
    config_file: Path | None = None,
    host: str | None = None,
    port: int | None = None,
    workers: int | None = None,
    log_bodies: bool = False,
    trace_dir: Path | None = None,
    monitor: bool = False,
    profile: str | None = None,
    metrics_auth: bool = False,
) -> Settings:
    """Settings from flags (the keyword arguments), *env* (default ``os.environ``) and the file."""
    environ: Mapping[str, str] = os.environ if env is None else env
    data = read_config_file(config_file) if config_file is not None else {}
    server = _table(data, "server")
    upstream = _table(data, "upstream")
    limits = _limits(_table(data, "limits"))
    merged = dict(environ)
    base = _typed(upstream, "base_url", str, "upstream")
    model = _typed(upstream, "model", str, "upstream")
    ttl = _typed(upstream, "token_ttl", (int, float), "upstream") or 300.0
    token_timeout = _typed(upstream, "token_timeout", (int, float), "upstream") or TIMEOUT
    if model is not None and not (environ.get("TPX_MODEL") or "").strip():
        merged["TPX_MODEL"] = model
    command = (environ.get("TPX_OAUTH_TOKEN_COMMAND") or "").strip() or None
    has_key = bool((environ.get("ANTHROPIC_API_KEY") or "").strip())
    static_token = bool((environ.get("TPX_OAUTH_TOKEN") or "").strip())
    credential: Credential | None = None
    token: str | None = None
    if not has_key and not static_token and command is not None:
        credential = Credential.from_command(command, float(ttl), float(token_timeout))
        token = credential.value()
    first = _first_upstream(data)
    if base is None and first is not None and not (environ.get("TPX_BASE_URL") or "").strip():
        merged["TPX_BASE_URL"] = first  # [[upstreams]]: the first one's URL is the default
    if base is not None:
        for name in ("ANTHROPIC_BASE_URL", "TPX_BASE_URL"):
            if not (environ.get(name) or "").strip():
                merged[name] = base
    config = _configure(
        api_key=None,
        oauth_token=token,
        anthropic_base_url=None,
        tpx_base_url=None,
        env=merged,
        model=None,
    )
    if credential is None and config.secret is not None:
        credential = Credential(config.secret.value)
    context = context_config(data)
    routing = parse_routing(data, environ, credential, context.drop_billing_header)
    if routing is not None and config.provider is not Provider.TPX:
        raise ConfigurationError(
            "config file: [[upstreams]] are OpenAI-compatible (TPX) deployments; set "
            "TPX_OAUTH_TOKEN (any word) and leave ANTHROPIC_API_KEY unset"
        )
    key = (environ.get("TPX_GATEWAY_KEY") or "").strip() or None
    if key is not None:
        _check_credential(key, None, "TPX_GATEWAY_KEY", "gateway_key")
    file_profile = _typed(upstream, "profile", str, "upstream")
    env_profile = (environ.get("TPX_PROFILE") or "").strip() or None
    chosen = get_profile(profile or env_profile or file_profile)
    if chosen.drop_billing_header != context.drop_billing_header:
        chosen = attrs.evolve(chosen, drop_billing_header=context.drop_billing_header)
    thinking_secret = (environ.get("TPX_THINKING_SECRET") or "").strip() or None
    id_keys = [key.encode() for key in split_secret(environ.get("TPX_GATEWAY_SECRET") or "")]
    secret = id_keys[0] if id_keys else secrets.token_bytes(32)
    file_host = _typed(server, "host", str, "server")
    file_port = _typed(server, "port", int, "server")
    file_workers = _typed(server, "workers", int, "server")
    file_metrics_auth = server.get("metrics_auth", False)
    if not isinstance(file_metrics_auth, bool):
        raise ConfigurationError("config file: server.metrics_auth must be true or false")
    return Settings(
        provider=config.provider,
        base_url=config.base_url,
        credential=credential,
        gateway_key=key,
        secret=secret,
        model=config.model,
        routes=_routes(data),
        limits=limits,
        host=host or file_host or DEFAULT_HOST,
        port=port if port is not None else (file_port if file_port is not None else DEFAULT_PORT),
        workers=workers or file_workers or 1,
        log_bodies=log_bodies,
        trace_dir=trace_dir,
        monitor=monitor,
        profile=chosen,
        thinking_secret=thinking_secret,
        previous_secrets=tuple(id_keys[1:]),
        metrics_auth=metrics_auth or file_metrics_auth,
        routing=routing,
        context=context,
    )


def _first_upstream(data: Mapping[str, Any]) -> str | None:
    raw = data.get("upstreams")
    if isinstance(raw, list) and raw and isinstance(raw[0], Mapping):
        base = raw[0].get("base_url")
        return base if isinstance(base, str) else None
    return None
