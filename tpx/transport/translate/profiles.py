"""Upstream profiles: what each kind of Chat Completions server accepts, as data.

The translator never asks *which* server it talks to; it reads the fields of one
:class:`Profile` record. A new upstream is a new record (or ``attrs.evolve`` of one),
never a new ``if`` in the translator.

Choosing a profile: the ``profile=`` keyword of the translate entry points (a name or
a :class:`Profile`); the transport's ``boot(profile=...)`` / ``aboot`` argument, else
the ``TPX_PROFILE`` environment variable, else :data:`DEFAULT_PROFILE` (``generic``).
:func:`get_profile` resolves a name; an unknown name raises ``ConfigurationError``.

Facts behind each record (public documentation, late 2026; see each record's comment):

* OpenAI: ``max_completion_tokens`` (``max_tokens`` is deprecated and refused by
  reasoning models); ``reasoning_effort`` minimal .. high (``xhigh`` only on some
  models, so Anthropic's ``max`` asks for ``high``); system/developer
  messages anywhere; ``file`` content parts (PDF as ``file_data`` data URL);
  no reasoning text in Chat Completions replies, so none goes back.
* vLLM / SGLang: ``max_tokens``; reasoning switched by the chat template,
  ``chat_template_kwargs: {"enable_thinking": bool}`` (Qwen3 and similar); replies
  carry ``reasoning`` (vLLM >= 0.26; ``reasoning_content`` before) and templates read
  ``reasoning_content`` of earlier assistant turns; many chat templates refuse a system
  message that is not first, so mid-conversation system text becomes tagged user text.
* llama.cpp (``llama-server --jinja``): the same ``chat_template_kwargs`` switch and
  ``reasoning_content`` both ways; JSON Schema turned into a grammar (``$schema`` dropped).
* Ollama (``/v1/chat/completions``): ``max_tokens``, ``reasoning_effort`` (``"none"``
  turns thinking off), replies and history carry ``reasoning``.
* DeepSeek: ``thinking: {"type": "enabled"|"disabled"}`` plus ``reasoning_effort``
  (low/high/max; medium -> high); ``reasoning_content`` of assistant turns with tool
  calls MUST be sent back (400 otherwise); ``response_format`` is ``json_object`` only.
* Gemini (OpenAI compatibility endpoint): ``reasoning_effort`` low/medium/high, and
  ``"none"`` turns thinking off (``"minimal"`` is refused); any field it does not know
  is a 400 ("Unknown name ...: Cannot find field", seen for ``store``, ``reasoning``,
  ``top_k``), so ``user`` is not sent; function declarations take an OpenAPI 3.0 subset
  of JSON Schema (``const``, ``additionalProperties``, ``$schema``, ``format`` beyond a
  few, ``propertyNames`` ... are refused), so schemas keep only an allow-list of keywords
  (``const`` becomes a one-value ``enum``).
* OpenRouter: ``reasoning: {"effort": ...}`` (``"none"`` disables), ``reasoning`` on
  replies and assistant history, ``file`` parts for PDFs; it routes to many providers,
  so mid-conversation system text becomes tagged user text.
* ``generic``: the conservative choice for an unknown server: ``max_tokens``, no
  reasoning control, conservative schemas, system text folded into user turns,
  PDFs as extracted text, ``json_object`` plus the schema in the prompt.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Literal

import attrs

from tpx._safe import quote
from tpx.errors import ConfigurationError
from tpx.transport.translate.overflow import FORMS

__all__ = [
    "DEFAULT_PROFILE",
    "EFFORT_LADDER",
    "GEMINI_SCHEMA_KEYWORDS",
    "PROFILES",
    "Profile",
    "get_profile",
    "profile_from_env",
]

#: Effort names from least to most; a profile lists the subset its server takes.
EFFORT_LADDER: tuple[str, ...] = ("minimal", "low", "medium", "high", "xhigh", "max")

SystemPlacement = Literal["anywhere", "first", "user"]
ReasoningControl = Literal[
    "none", "reasoning_effort", "reasoning_object", "enable_thinking", "deepseek"
]
StructuredOutput = Literal["json_schema", "json_object"]

#: Keywords of Gemini's OpenAPI 3.0 schema subset that tpx keeps (everything else goes).
GEMINI_SCHEMA_KEYWORDS = frozenset(
    {
        "type",
        "description",
        "properties",
        "required",
        "items",
        "enum",
        "nullable",
        "anyOf",
        "minimum",
        "maximum",
        "minItems",
        "maxItems",
        "minLength",
        "maxLength",
        "pattern",
        "title",
        "default",
    }
)


@attrs.frozen(cache_hash=True)
class Profile:
    """What one kind of upstream accepts (data only; see the module docstring).

    ``schema_keep``: JSON-Schema keywords kept (``None``: all); ``schema_drop``: keywords
    removed (applied after ``schema_keep``); ``openapi_subset``: write schemas as
    OpenAPI 3.0 does (:mod:`tpx.transport.translate.schema`).
    ``token_field``: ``max_tokens`` or ``max_completion_tokens``; ``max_tokens_ceiling``:
    clamp (with a warning) above it, ``None`` never clamps.
    ``system``: where a ``role: system`` message from the middle of ``messages`` goes:
    ``anywhere`` (kept in place), ``first`` (appended to the first system message),
    ``user`` (tagged text ``<system-message>...</system-message>`` in the user turn at
    that place).
    ``reasoning``: how thinking is asked for (``none``: it cannot be; a warning);
    ``efforts``: the effort names the server takes (subset of :data:`EFFORT_LADDER`);
    ``disable_effort``: the effort value that turns thinking off (``None``: cannot be).
    ``reasoning_back``: the assistant-message field earlier (verified) reasoning goes
    back in (``None``: it is not sent).
    ``file_parts``: PDFs travel as ``file`` parts (else as extracted text).
    ``structured``: ``json_schema`` or ``json_object`` (+ the schema as prompt text).
    ``user_field`` / ``user_max``: whether ``user`` is sent, and its longest value
    (longer ids are hashed).
    ``overflow``: the names of the context-error wordings the server sends
    (:data:`tpx.transport.translate.overflow.FORMS`).
    ``drop_billing_header``: a first system block that is Claude Code's
    ``x-anthropic-billing-header: ...`` line is not sent (it varies between versions and
    requests, and as the prompt's first bytes it defeats a server's prefix cache).
    """

    name: str
    token_field: Literal["max_tokens", "max_completion_tokens"] = "max_tokens"
    max_tokens_ceiling: int | None = None
    schema_keep: frozenset[str] | None = None
    schema_drop: frozenset[str] = frozenset()
    openapi_subset: bool = False
    system: SystemPlacement = "user"
    reasoning: ReasoningControl = "none"
    efforts: tuple[str, ...] = ()
    disable_effort: str | None = None
    reasoning_back: str | None = None
    file_parts: bool = False
    structured: StructuredOutput = "json_schema"
    user_field: bool = True
    user_max: int = 64
    overflow: tuple[str, ...] = ()
    drop_billing_header: bool = True

    def effort(self, wanted: str) -> str | None:
        """The server's effort name for *wanted*: the highest allowed level not above it,
        else the lowest allowed one (``None`` when the profile names no efforts)."""
        if not self.efforts:
            return None
        if wanted in self.efforts:
            return wanted
        rank = EFFORT_LADDER.index(wanted) if wanted in EFFORT_LADDER else len(EFFORT_LADDER)
        below = [e for e in self.efforts if EFFORT_LADDER.index(e) <= rank]
        return below[-1] if below else self.efforts[0]


_NO_SCHEMA_META = frozenset({"$schema"})
_OPENAI_OVERFLOW = ("openai-max-context", "openai-code", "openai-window")

PROFILES: Mapping[str, Profile] = {
    profile.name: profile
    for profile in (
        Profile(
            "openai",
            token_field="max_completion_tokens",
            system="anywhere",
            reasoning="reasoning_effort",
            efforts=("minimal", "low", "medium", "high"),  # xhigh: only some models
            file_parts=True,
            overflow=_OPENAI_OVERFLOW,
        ),
        Profile(
            "vllm",
            reasoning="enable_thinking",
            reasoning_back="reasoning_content",
            overflow=(
                "openai-max-context",
                "vllm-request-has",
                "vllm-input-tokens",
                "vllm-passed",
            ),
        ),
        Profile(
            "sglang",
            reasoning="enable_thinking",
            reasoning_back="reasoning_content",
            overflow=("sglang-input-longer", "sglang-requested", "openai-max-context"),
        ),
        Profile(
            "llama.cpp",
            schema_drop=_NO_SCHEMA_META,
            reasoning="enable_thinking",
            reasoning_back="reasoning_content",
            overflow=("llama.cpp-context-size",),
        ),
        Profile(
            "ollama",
            schema_drop=_NO_SCHEMA_META,
            reasoning="reasoning_effort",
            efforts=("low", "medium", "high"),
            disable_effort="none",
            reasoning_back="reasoning",
            overflow=("ollama-prompt-longer", "ollama-exceeded", "ollama-input-length"),
        ),
        Profile(
            "deepseek",
            schema_drop=_NO_SCHEMA_META,
            system="first",
            reasoning="deepseek",
            efforts=("low", "high", "max"),
            reasoning_back="reasoning_content",
            structured="json_object",
            overflow=_OPENAI_OVERFLOW,
        ),
        Profile(
            "gemini",
            schema_keep=GEMINI_SCHEMA_KEYWORDS,
            openapi_subset=True,
            system="first",
            reasoning="reasoning_effort",
            efforts=("low", "medium", "high"),
            disable_effort="none",
            user_field=False,
            overflow=("gemini-token-count",),
        ),
        Profile(
            "openrouter",
            schema_drop=_NO_SCHEMA_META,
            reasoning="reasoning_object",
            efforts=("minimal", "low", "medium", "high", "xhigh"),
            disable_effort="none",
            reasoning_back="reasoning",
            file_parts=True,
            overflow=("openrouter-endpoint", "openai-max-context"),
        ),
        Profile(
            "generic",
            schema_keep=GEMINI_SCHEMA_KEYWORDS,
            openapi_subset=True,
            structured="json_object",
            overflow=tuple(FORMS),
        ),
    )
}

#: The profile used when none is named (conservative: any server takes its output).
DEFAULT_PROFILE: Profile = PROFILES["generic"]


def get_profile(profile: str | Profile | None) -> Profile:
    """*profile* as a :class:`Profile` (``None`` -> :data:`DEFAULT_PROFILE`)."""
    if profile is None:
        return DEFAULT_PROFILE
    if isinstance(profile, Profile):
        return profile
    if isinstance(profile, str):
        found = PROFILES.get(profile.strip().lower())
        if found is not None:
            return found
        raise ConfigurationError(
            f"unknown upstream profile {quote(profile)}; known: {', '.join(sorted(PROFILES))}"
        )
    raise ConfigurationError(f"profile must be a name or a Profile, got {type(profile).__name__}")


def profile_from_env(
    explicit: str | Profile | None = None, env: Mapping[str, str] | None = None
) -> Profile:
    """*explicit* if given, else ``TPX_PROFILE`` from *env* (default ``os.environ``),
    else :data:`DEFAULT_PROFILE`."""
    if explicit is not None:
        return get_profile(explicit)
    environ = os.environ if env is None else env
    raw = environ.get("TPX_PROFILE")
    return get_profile(raw) if raw and raw.strip() else DEFAULT_PROFILE
