"""Many upstreams behind one gateway: the ``[[upstreams]]`` and ``[[routes]]`` of the config
file as data, and the pure routing function.

Each upstream is an OpenAI-compatible (TPX) deployment: a name, a base URL, a credential
(from an environment variable, a token command, or the gateway's own TPX credential), a
profile, the models it serves, a weight, a concurrency limit and a context window (a plain
field: what a request may hold there; read by whoever needs it). The provider kind is the
boot-time selection's and never changes: ``[[upstreams]]`` need the TPX provider.

A route is an ordered rule; the first whose conditions all hold wins, and names the
upstreams to try, in order. The conditions read what a Claude Code request carries:

* ``model``: globs (or plain aliases) on the requested model;
* ``background``: the request is a background call (its model matches
  ``[routing] background_models``, Claude Code's small/fast model, ``*haiku*`` by default);
* ``thinking``: thinking enabled (``enabled`` or ``adaptive``);
* ``min_input_tokens``: the estimated input size (the body's bytes / 4) is at least this;
* ``subagent``: the request comes from a subagent (``X-Claude-Code-Agent-Id`` is sent);
* ``tools``: globs on the tools offered (a tool's ``name`` or ``type``: ``web_search*``).

:func:`route` is sans-I/O and allocation-light: the facts of a request are read once
(:func:`facts_of`), the rules' globs are compiled at start. No rule matching: every
upstream, in the order of the config file.
"""

from __future__ import annotations

import fnmatch
import os
import re
from collections.abc import Mapping
from typing import Any, NamedTuple

import attrs

from tpx.errors import ConfigurationError
from tpx.gateway.context.tokenizer import TOKENIZERS, TokenizerEndpoint
from tpx.gateway.credential import Credential
from tpx.gateway.token_command import TIMEOUT
from tpx.transport._config import _check_credential
from tpx.transport.translate.profiles import DEFAULT_PROFILE, Profile, get_profile
from tpx.transport.translate.signing import ThinkingSigner
from tpx.transport.translate.tools import FrozenJSONList

__all__ = [
    "Facts",
    "Options",
    "Routed",
    "Routing",
    "Rule",
    "UpstreamConfig",
    "facts_of",
    "family_signer",
    "parse_routing",
    "route",
]

#: The header Claude Code sends on a subagent's requests.
AGENT_HEADER = "x-claude-code-agent-id"
#: Bytes of a request body counted as one token by the input-size estimate.
BYTES_PER_TOKEN = 4
#: Tool lists whose names (and rule verdicts) are kept, per process and per rule.
_KEPT = 64


@attrs.frozen(repr=False)
class UpstreamConfig:
    """One OpenAI-compatible deployment (``[[upstreams]]``)."""

    name: str
    base_url: str
    credential: Credential | None
    profile: Profile = DEFAULT_PROFILE
    #: the models it serves: the requested one when listed here, else the first, goes upstream
    models: tuple[str, ...] = ()
    weight: float = 1.0
    #: concurrent requests at most (None: only ``limits.max_upstream``)
    concurrency: int | None = None
    #: tokens a request may hold there (None: unknown); read by context-window logic
    context_window: int | None = None
    #: what the thinking it produces is signed as: another family never gets it back
    family: str = ""
    #: its tokenizer endpoint (``tokenizer = true``: its profile's; a kind's name: that
    #: kind's), which count_tokens and the preflight ask for a request routed here; None:
    #: the estimate counts (tpx.gateway.context.placement)
    tokenizer: TokenizerEndpoint | None = None
    #: seconds and reply bytes the endpoint may take (None: ``[context]``'s)
    tokenizer_timeout: float | None = None
    tokenizer_bytes: int | None = None

    def model_for(self, requested: str | None) -> str | None:
        """The model sent to this upstream for a request asking for *requested*."""
        if requested is not None and requested in self.models:
            return requested
        return self.models[0] if self.models else requested

    def __repr__(self) -> str:
        return (
            f"UpstreamConfig(name={self.name!r}, base_url={self.base_url!r}, "
            f"profile={self.profile.name!r}, models={self.models!r}, weight={self.weight}, "
            f"concurrency={self.concurrency}, context_window={self.context_window}, "
            f"family={self.family!r}, tokenizer={self.tokenizer!r}, credential=<redacted>)"
        )

    __str__ = __repr__


def _globs(patterns: tuple[str, ...]) -> re.Pattern[str] | None:
    if not patterns:
        return None
    return re.compile("|".join(f"(?:{fnmatch.translate(p)})" for p in patterns))


@attrs.frozen
class Rule:
    """One ``[[routes]]`` entry: conditions (``None`` / empty: any) and the upstreams to try."""

    name: str
    upstreams: tuple[str, ...]
    model: tuple[str, ...] = ()
    background: bool | None = None
    thinking: bool | None = None
    min_input_tokens: int | None = None
    subagent: bool | None = None
    tools: tuple[str, ...] = ()
    _model_re: re.Pattern[str] | None = attrs.field(init=False, repr=False, eq=False)
    _tools_re: re.Pattern[str] | None = attrs.field(init=False, repr=False, eq=False)
    #: the tools verdict per tool list seen (a client sends the same tools every turn)
    _tools_seen: dict[tuple[str, ...], bool] = attrs.field(init=False, repr=False, eq=False)

    def __attrs_post_init__(self) -> None:
        object.__setattr__(self, "_model_re", _globs(self.model))
        object.__setattr__(self, "_tools_re", _globs(self.tools))
        object.__setattr__(self, "_tools_seen", {})

    def matches(self, facts: Facts) -> bool:
        if self._model_re is not None and self._model_re.match(facts.model) is None:
            return False
        if self.background is not None and self.background != facts.background:
            return False
        if self.thinking is not None and self.thinking != facts.thinking:
            return False
        if self.min_input_tokens is not None and facts.input_tokens < self.min_input_tokens:
            return False
        if self.subagent is not None and self.subagent != facts.subagent:
            return False
        if self._tools_re is not None:
            return self._offers(facts.tools)
        return True

    def _offers(self, tools: tuple[str, ...]) -> bool:
        seen = self._tools_seen
        verdict = seen.get(tools)
        if verdict is None:
            match = self._tools_re.match  # type: ignore[union-attr]
            verdict = any(match(tool) is not None for tool in tools)
            if len(seen) >= _KEPT:
                seen.clear()
            seen[tools] = verdict
        return verdict


@attrs.frozen
class Options:
    """``[routing]``: what makes a call a background one, and the failover policy."""

    background_models: tuple[str, ...] = ("*haiku*",)
    #: seconds a streamed turn waits for an upstream's response headers before failing over
    first_byte_timeout: float = 8.0
    #: upstream attempts per client request, at most (one at a time)
    max_attempts: int = 3
    #: a 429/529 whose retry-after is at most this many seconds is waited for and sent to
    #: the same upstream once before failing over
    retry_after_max: float = 2.0
    #: an upstream's first cooldown after a failure (doubling per consecutive failure)
    cooldown: float = 1.0
    cooldown_max: float = 60.0
    #: seconds between the recovery probes of an upstream in cooldown (0: none)
    probe_interval: float = 5.0
    #: a timeout before the response fails over too (the timed-out request may have been
    #: written: the upstream may be generating, so the client's request may get a second
    #: generation); false: the exchange ends with the timeout, one generation at most
    failover_on_timeout: bool = False
    _background_re: re.Pattern[str] | None = attrs.field(init=False, repr=False, eq=False)

    def __attrs_post_init__(self) -> None:
        object.__setattr__(self, "_background_re", _globs(self.background_models))

    def background(self, model: str) -> bool:
        return self._background_re is not None and self._background_re.match(model) is not None


@attrs.frozen(repr=False)
class Routing:
    """The upstreams, the rules and the options (``Settings.routing``)."""

    upstreams: tuple[UpstreamConfig, ...]
    rules: tuple[Rule, ...] = ()
    options: Options = Options()
    _by_name: dict[str, UpstreamConfig] = attrs.field(init=False, eq=False)
    _default: Rule = attrs.field(init=False, eq=False)
    _credentials: tuple[Credential, ...] = attrs.field(init=False, eq=False)

    def __attrs_post_init__(self) -> None:
        by_name = {u.name: u for u in self.upstreams}
        object.__setattr__(self, "_by_name", by_name)
        object.__setattr__(self, "_default", Rule("default", tuple(by_name)))
        # each credential once (upstreams without their own share the gateway's): read for
        # the redaction of every log line, so gathered here once
        given = (u.credential for u in self.upstreams if u.credential is not None)
        object.__setattr__(self, "_credentials", tuple(dict.fromkeys(given)))

    def upstream(self, name: str) -> UpstreamConfig:
        return self._by_name[name]

    @property
    def default(self) -> Rule:
        return self._default

    def credentials(self) -> tuple[Credential, ...]:
        """The upstreams' credentials, each once."""
        return self._credentials

    def __repr__(self) -> str:
        return f"Routing(upstreams={[u.name for u in self.upstreams]!r}, rules={self.rules!r})"


class Facts(NamedTuple):
    """What the rules read of one request (a named tuple: made for every routed request)."""

    model: str
    background: bool = False
    thinking: bool = False
    input_tokens: int = 0
    subagent: bool = False
    tools: tuple[str, ...] = ()


def facts_of(
    body: Mapping[str, Any], headers: Mapping[str, str], size: int, options: Options
) -> Facts:
    """The facts of a ``/v1/messages`` request (*body* parsed, *size* its bytes)."""
    model = body.get("model")
    model = model if isinstance(model, str) else ""
    thinking = body.get("thinking")
    kind = thinking.get("type") if isinstance(thinking, Mapping) else None
    tools = body.get("tools")
    return Facts(
        model=model,
        background=options.background(model),
        thinking=kind in ("enabled", "adaptive"),
        input_tokens=size // BYTES_PER_TOKEN,
        subagent=bool(headers.get(AGENT_HEADER)),
        tools=_tool_names(tools) if isinstance(tools, list) else (),
    )


_NAMES: dict[bytes, tuple[str, ...]] = {}


def _tool_names(tools: list[Any]) -> tuple[str, ...]:
    """The ``name`` and ``type`` of every tool; kept per tool list a client sends again (the
    body reader's shared tools carry their JSON text: tpx.gateway.bodies)."""
    text = tools.json if isinstance(tools, FrozenJSONList) else None
    if text is not None:
        kept = _NAMES.get(text)
        if kept is not None:
            return kept
    names: list[str] = []
    for tool in tools:
        if tool.__class__ is dict or isinstance(tool, Mapping):
            for key in ("name", "type"):
                value = tool.get(key)
                if isinstance(value, str):
                    names.append(value)
    found = tuple(names)
    if text is not None:
        if len(_NAMES) >= _KEPT:
            _NAMES.clear()
        _NAMES[text] = found
    return found


def route(routing: Routing, facts: Facts) -> Rule:
    """The first rule whose conditions all hold (none: every upstream, in order)."""
    for rule in routing.rules:
        if rule.matches(facts):
            return rule
    return routing.default


# -- the thinking of one family --------------------------------------------------------------


class _FamilySigner(ThinkingSigner):
    """Signs and verifies thinking as produced by *family*: the signature names its producer
    (``tpx1.<mac>~<family>``) and the family is part of what the MAC covers, so a block one
    family produced never verifies for another (it is dropped, never sent as the other's
    ``reasoning_content``)."""

    __slots__ = ("_base", "_suffix", "_tag")

    def __init__(self, base: ThinkingSigner, family: str) -> None:  # no keys of its own
        self._base = base
        self._tag = f"tpx-family:{family}\x00"
        self._suffix = "~" + _UNSAFE.sub("_", family)

    def sign(self, text: str) -> str:
        return self._base.sign(self._tag + text) + self._suffix

    def verify(self, text: str, signature: object) -> bool:
        if not isinstance(signature, str) or not signature.endswith(self._suffix):
            return False  # another producer's (or none named)
        mac = signature[: -len(self._suffix)]
        return self._base.verify(self._tag + text, mac)


_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")
_FAMILY_SIGNERS: dict[tuple[int, str], ThinkingSigner] = {}


def family_signer(base: ThinkingSigner, family: str) -> ThinkingSigner:
    """The signer of *family*'s thinking under *base*'s keys (one per pair, kept)."""
    key = (id(base), family)
    signer = _FAMILY_SIGNERS.get(key)
    if signer is None:
        if len(_FAMILY_SIGNERS) > 256:
            _FAMILY_SIGNERS.clear()
        signer = _FAMILY_SIGNERS[key] = _FamilySigner(base, family)
    return signer


# -- the config file ---------------------------------------------------------------------------


def _field(entry: Mapping[str, Any], key: str, kind: type | tuple[type, ...], where: str) -> Any:
    value = entry.get(key)
    if value is None:
        return None
    if isinstance(value, bool) != (kind is bool) or not isinstance(value, kind):
        raise ConfigurationError(f"config file: {where}.{key} has the wrong type")
    return value


def _strings(entry: Mapping[str, Any], key: str, where: str) -> tuple[str, ...]:
    value = entry.get(key, [])
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise ConfigurationError(f"config file: {where}.{key} must be a list of strings")
    return tuple(value)


def _positive(value: Any, where: str) -> Any:
    if value is not None and value <= 0:
        raise ConfigurationError(f"config file: {where} must be > 0")
    return value


def _credential(
    entry: Mapping[str, Any], where: str, environ: Mapping[str, str], fallback: Credential | None
) -> Credential | None:
    env_name = _field(entry, "token_env", str, where)
    command = _field(entry, "token_command", str, where)
    if env_name is not None and command is not None:
        raise ConfigurationError(f"config file: {where}: token_env or token_command, not both")
    if env_name is not None:
        value = (environ.get(env_name) or "").strip()
        if not value:
            raise ConfigurationError(f"{where}.token_env: {env_name} is not set")
        _check_credential(value, None, env_name, "token_env")
        return Credential(value)
    if command is not None:
        ttl = _positive(_field(entry, "token_ttl", (int, float), where), f"{where}.token_ttl")
        return Credential.from_command(command, float(ttl or 300.0), TIMEOUT)
    return fallback


def _upstream(
    i: int,
    entry: Any,
    environ: Mapping[str, str],
    fallback: Credential | None,
    drop_billing_header: bool = True,
) -> UpstreamConfig:
    where = f"upstreams[{i}]"
    if not isinstance(entry, Mapping):
        raise ConfigurationError(f"config file: {where} must be a table")
    name = _field(entry, "name", str, where)
    base = _field(entry, "base_url", str, where)
    if not name or not base:
        raise ConfigurationError(f"config file: {where} needs a 'name' and a 'base_url'")
    base = base.rstrip("/")
    if base.endswith("/v1"):
        base = base[:-3]
    models = _strings(entry, "models", where)
    weight = _positive(_field(entry, "weight", (int, float), where), f"{where}.weight")
    concurrency = _positive(_field(entry, "concurrency", int, where), f"{where}.concurrency")
    window = _positive(_field(entry, "context_window", int, where), f"{where}.context_window")
    family = _field(entry, "family", str, where) or (models[0] if models else name)
    profile = get_profile(_field(entry, "profile", str, where))
    drop = _field(entry, "drop_billing_header", bool, where)
    drop = drop_billing_header if drop is None else drop
    if drop != profile.drop_billing_header:
        profile = attrs.evolve(profile, drop_billing_header=drop)
    timeout = _field(entry, "tokenizer_timeout", (int, float), where)
    size = _field(entry, "tokenizer_bytes", int, where)
    return UpstreamConfig(
        name=name,
        base_url=base,
        credential=_credential(entry, where, environ, fallback),
        profile=profile,
        models=models,
        weight=float(weight or 1.0),
        concurrency=concurrency,
        context_window=window,
        family=family,
        tokenizer=_tokenizer(entry, profile.name, where),
        tokenizer_timeout=_positive(timeout, f"{where}.tokenizer_timeout"),
        tokenizer_bytes=_positive(size, f"{where}.tokenizer_bytes"),
    )


def _tokenizer(entry: Mapping[str, Any], profile: str, where: str) -> TokenizerEndpoint | None:
    """The tokenizer endpoint an entry names: ``tokenizer = true`` (its profile's), or the
    kind of server it is (``"vllm"``, ``"sglang"``, ``"llama.cpp"``: that kind's path and
    body)."""
    value = entry.get("tokenizer", False)
    kinds = ", ".join(f'"{k}"' for k in TOKENIZERS)
    if isinstance(value, str):
        endpoint = TOKENIZERS.get(value)
        if endpoint is None:
            raise ConfigurationError(
                f"config file: {where}.tokenizer = {value!r} is not a kind of tokenizer "
                f"endpoint (one of {kinds}, or true for its profile's)"
            )
        return endpoint
    if not isinstance(value, bool):
        raise ConfigurationError(
            f"config file: {where}.tokenizer must be true, false or one of {kinds}"
        )
    if not value:
        if "tokenizer_timeout" in entry or "tokenizer_bytes" in entry:
            raise ConfigurationError(
                f"config file: {where} sets tokenizer_timeout or tokenizer_bytes "
                "without a tokenizer"
            )
        return None
    endpoint = TOKENIZERS.get(profile)
    if endpoint is None:
        raise ConfigurationError(
            f"config file: {where}.tokenizer = true: profile {profile!r} has no tokenizer "
            f"endpoint (name its kind instead: one of {kinds})"
        )
    return endpoint


_CONDITIONS = {"background", "thinking", "subagent"}


def _rule(i: int, entry: Any, names: set[str]) -> Rule:
    where = f"routes[{i}]"
    if not isinstance(entry, Mapping):
        raise ConfigurationError(f"config file: {where} must be a table")
    known = {"name", "upstreams", "model", "min_input_tokens", "tools", *_CONDITIONS}
    unknown = sorted(set(entry) - known)
    if unknown:
        raise ConfigurationError(f"config file: {where}: unknown key {unknown[0]!r}")
    upstreams = _strings(entry, "upstreams", where)
    if not upstreams:
        raise ConfigurationError(f"config file: {where} names no upstreams")
    for name in upstreams:
        if name not in names:
            raise ConfigurationError(f"config file: {where}: no upstream named {name!r}")
    tokens = _field(entry, "min_input_tokens", int, where)
    return Rule(
        name=_field(entry, "name", str, where) or f"routes[{i}]",
        upstreams=upstreams,
        model=_strings(entry, "model", where),
        background=_field(entry, "background", bool, where),
        thinking=_field(entry, "thinking", bool, where),
        min_input_tokens=_positive(tokens, f"{where}.min_input_tokens"),
        subagent=_field(entry, "subagent", bool, where),
        tools=_strings(entry, "tools", where),
    )


def _options(table: Any) -> Options:
    if not isinstance(table, Mapping):
        raise ConfigurationError("config file: [routing] must be a table")
    values: dict[str, Any] = {}
    for field in attrs.fields(Options):
        if field.name.startswith("_") or field.name not in table:
            continue
        if field.name == "background_models":
            values[field.name] = _strings(table, field.name, "routing")
            continue
        if field.name == "failover_on_timeout":
            values[field.name] = _field(table, field.name, bool, "routing")
            continue
        kind: type | tuple[type, ...] = int if field.name == "max_attempts" else (int, float)
        value = _field(table, field.name, kind, "routing")
        if value < 0 or (value == 0 and field.name in ("max_attempts", "first_byte_timeout")):
            raise ConfigurationError(f"config file: routing.{field.name} is out of range")
        values[field.name] = value
    return Options(**values)


def parse_routing(
    data: Mapping[str, Any],
    environ: Mapping[str, str] | None = None,
    fallback: Credential | None = None,
    drop_billing_header: bool = True,
) -> Routing | None:
    """The routing of a parsed config file (``None``: it has no ``[[upstreams]]``).
    *fallback*: the credential of an upstream that names none (the gateway's own);
    *drop_billing_header*: an upstream's when its entry does not say (``[context]``'s)."""
    environ = os.environ if environ is None else environ
    raw = data.get("upstreams")
    if raw is None:
        if "routes" in data:
            raise ConfigurationError("config file: [[routes]] need [[upstreams]]")
        return None
    if not isinstance(raw, list) or not raw:
        raise ConfigurationError("config file: [[upstreams]] must be a non-empty array of tables")
    upstreams = [
        _upstream(i, entry, environ, fallback, drop_billing_header) for i, entry in enumerate(raw)
    ]
    names = [u.name for u in upstreams]
    if len(set(names)) != len(names):
        raise ConfigurationError("config file: two [[upstreams]] have the same name")
    rules_raw = data.get("routes", [])
    if not isinstance(rules_raw, list):
        raise ConfigurationError("config file: [[routes]] must be an array of tables")
    rules = tuple(_rule(i, entry, set(names)) for i, entry in enumerate(rules_raw))
    return Routing(tuple(upstreams), rules, _options(data.get("routing", {})))


@attrs.define
class Routed:
    """One request's route: its rule, its body (to frame it again for another upstream), the
    model it asked for (after the ``[[models]]`` map) and the upstream it is framed for."""

    rule: Rule
    body: Mapping[str, Any]
    requested: str | None
    upstream: str
    framed: tuple[str | None, Profile, str]  #: (model, profile, family) of the current framing
