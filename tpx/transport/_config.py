"""Boot-time configuration: credentials, endpoints and the provider selection.

:func:`configure` reads the credentials once (explicit arguments, then the environment)
and selects the provider exactly as the spec's boot does (key, then token, else none);
:func:`exchange_for` builds the exchange for that selection. Both transports' ``boot``
functions and the gateway's settings use them, so the selection rule exists once.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Any

import attrs
import httpx2

from tpx.errors import ConfigurationError
from tpx.transport.exchange import Exchange, ExchangeObserver, Provider, select_provider
from tpx.transport.translate.profiles import Profile, profile_from_env

DEFAULT_ANTHROPIC_BASE_URL = "https://api.anthropic.com"
DEFAULT_TIMEOUT = httpx2.Timeout(600.0, connect=10.0)

# A host as httpx2 encodes it (IDNA applied, IPv6 without brackets).
_HOST = re.compile(rb"[A-Za-z0-9._-]+|[0-9A-Fa-f:.]+").fullmatch


class _Secret:
    """A credential that never renders, pickles or copies.

    Deliberately not an attrs class: ``attrs.asdict`` / ``attrs.astuple`` of a transport
    keep it as this opaque object instead of recursing into its value.
    """

    __slots__ = ("value",)

    def __init__(self, value: str) -> None:
        self.value = value

    def __repr__(self) -> str:
        return "<redacted>"

    __str__ = __repr__

    def __reduce_ex__(self, protocol: Any) -> Any:
        raise TypeError("a credential cannot be pickled or copied")


@attrs.frozen(repr=False)
class _Config:
    provider: Provider
    base_url: str | None
    secret: _Secret | None
    model: str | None


def _pick(explicit: object, env: Mapping[str, str], name: str, argument: str) -> str | None:
    """The explicit argument, else the environment variable; blank -> ``None``.

    Anything but a string is refused (:class:`ConfigurationError`, the value not shown).
    """
    value: object = explicit if explicit is not None else env.get(name)
    if value is None:
        return None
    if not isinstance(value, str):
        where = (
            f"the {argument}= argument"
            if explicit is not None
            else f"the {name} environment variable"
        )
        raise ConfigurationError(
            f"{where} must be a string, got {type(value).__name__} (the value is not shown)"
        )
    return value.strip() or None


def _credential_problem(value: str) -> str | None:
    """Why *value* cannot be a credential (token68-like: printable ASCII, no spaces)."""
    if not value.isascii():
        return "contains a non-ASCII character"
    if any(c.isspace() for c in value):
        return "contains whitespace (a space, tab or line break)"
    if not value.isprintable():
        return "contains a control character"
    return None


def _check_credential(value: str, explicit: str | None, name: str, argument: str) -> str:
    problem = _credential_problem(value)
    if problem is not None:
        where = (
            f"the {argument}= argument"
            if explicit is not None
            else f"the {name} environment variable"
        )
        raise ConfigurationError(
            f"{where} is not a valid credential: it {problem}; API keys and tokens are "
            "printable ASCII without spaces (the value is not shown)"
        )
    return value


def _base_url(raw: str, name: str) -> str:
    if any(c.isspace() or not c.isprintable() for c in raw):
        raise ConfigurationError(f"{name} is not a valid URL: it contains whitespace")
    try:
        url = httpx2.URL(raw)
    except (httpx2.InvalidURL, TypeError) as exc:
        raise ConfigurationError(f"{name} is not a valid URL") from exc
    if url.scheme not in ("http", "https") or not url.host:
        raise ConfigurationError(f"{name} must be an http(s) URL with a host")
    if _HOST(url.raw_host) is None:  # httpx2 percent-encodes what a host may not hold
        raise ConfigurationError(
            f"{name} is not a valid URL: its host is neither a DNS name nor an IP address"
        )
    if url.userinfo or url.query or url.fragment:
        raise ConfigurationError(f"{name} must not carry user info, a query or a fragment")
    path = url.path.rstrip("/")
    if path.endswith("/v1"):  # paths below already start with /v1
        path = path[: -len("/v1")]
    return str(url.copy_with(path=path or "/")).rstrip("/")


def _configure(
    *,
    api_key: str | None,
    oauth_token: str | None,
    anthropic_base_url: str | None,
    tpx_base_url: str | None,
    env: Mapping[str, str] | None,
    model: str | None,
) -> _Config:
    if env is not None and not isinstance(env, Mapping):
        raise ConfigurationError(f"env= must be a mapping, got {type(env).__name__}")
    environ: Mapping[str, str] = os.environ if env is None else env
    key = _pick(api_key, environ, "ANTHROPIC_API_KEY", "api_key")
    token = _pick(oauth_token, environ, "TPX_OAUTH_TOKEN", "oauth_token")
    provider = select_provider(key is not None, token is not None)
    if provider is Provider.ANTHROPIC:
        assert key is not None
        key = _check_credential(key, api_key, "ANTHROPIC_API_KEY", "api_key")
        raw = _pick(anthropic_base_url, environ, "ANTHROPIC_BASE_URL", "anthropic_base_url")
        base = _base_url(raw or DEFAULT_ANTHROPIC_BASE_URL, "ANTHROPIC_BASE_URL")
        return _Config(provider, base, _Secret(key), None)
    if provider is Provider.TPX:
        assert token is not None
        token = _check_credential(token, oauth_token, "TPX_OAUTH_TOKEN", "oauth_token")
        raw = _pick(tpx_base_url, environ, "TPX_BASE_URL", "tpx_base_url")
        if raw is None:
            raise ConfigurationError(
                "TPX_OAUTH_TOKEN is set but TPX_BASE_URL is not: there is no default TPX "
                "endpoint, set TPX_BASE_URL (or pass tpx_base_url=)"
            )
        tpx_model = _pick(model, environ, "TPX_MODEL", "model")
        return _Config(provider, _base_url(raw, "TPX_BASE_URL"), _Secret(token), tpx_model)
    return _Config(Provider.NONE, None, None, None)


def _exchange_for(
    config: _Config,
    max_turns: int | None,
    observer: ExchangeObserver | None,
    profile: str | Profile | None = None,
    thinking_secret: str | None = None,
    env: Mapping[str, str] | None = None,
) -> Exchange:
    secrets = (config.secret.value,) if config.secret else ()
    environ: Mapping[str, str] = os.environ if env is None else env
    if thinking_secret is None:
        thinking_secret = environ.get("TPX_THINKING_SECRET") or None
    return Exchange(
        config.provider,
        max_turns=max_turns,
        model=config.model,
        secrets=secrets,
        observer=observer,
        profile=profile_from_env(profile, environ),
        thinking_secret=thinking_secret,
    )


def _timeout(timeout: float | httpx2.Timeout | None) -> httpx2.Timeout | None:
    if timeout is None or isinstance(timeout, httpx2.Timeout):
        return timeout
    return httpx2.Timeout(timeout)
