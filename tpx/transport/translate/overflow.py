"""Context-window errors: how each kind of upstream says a request is too long, as data.

Claude Code compacts its conversation when an error's message contains
``prompt is too long`` (the Messages API's wording: ``prompt is too long: N tokens > M
maximum``). Chat Completions servers say it their own way; each form below is one known
wording, a regular expression over the error body as the server sends it, with named groups
``n`` (the prompt's tokens) and ``m`` (the most the server takes) where the wording carries
them. A :class:`~tpx.transport.translate.profiles.Profile` names the forms its server sends
(``overflow``); :func:`overflow_in` finds one in an error body and :func:`too_long` writes the
Messages wording.

Forms (as the servers word them, late 2026; where each message is built in the server's own
source is recorded beside its body in ``tests/fixtures/upstream/context_errors.json``):

* OpenAI: ``code: "context_length_exceeded"``, ``This model's maximum context length is M
  tokens. However, your messages resulted in N tokens ...`` (older) or ``Your input exceeds
  the context window of this model ...`` (newer, no numbers).
* vLLM: ``This model's maximum context length is M tokens. However, you requested N tokens
  (X in the messages, Y in the completion) ...``; newer: ``... maximum context length is M
  tokens. However, your request has N input tokens ...`` (the prompt alone), ``'max_tokens' ...
  is too large: ... maximum context length is M tokens and your request has N input tokens
  ...`` (with the reply), and, from its renderer, ``You passed N input tokens (or characters)
  and requested X output tokens. However, the model's context length is only T tokens,
  resulting in a maximum input length of M tokens ...``.
* llama.cpp: ``type: "exceed_context_size_error"``, ``the request exceeds the available
  context size ...`` with ``n_prompt_tokens`` and ``n_ctx`` beside the message.
* Ollama: ``the prompt is longer than the context length currently available to the model
  ...`` (chat), ``the input length exceeds the context length`` (embeddings), and, from its
  hosted models, ``prompt too long; exceeded max context length by K tokens``.
* SGLang: ``The input (N tokens) is longer than the model's context length (M tokens).`` or
  ``Requested token count exceeds the model's maximum context length of M tokens. You
  requested a total of T tokens: N tokens from the input messages ...``.
* DeepSeek: the OpenAI wording ``This model's maximum context length is M tokens. However,
  you requested N tokens ...``.
* Gemini (OpenAI compatibility): ``The input token count (N) exceeds the maximum number of
  tokens allowed (M).``
* OpenRouter: ``This endpoint's maximum context length is M tokens. However, you requested
  about N tokens ...``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

import attrs

from tpx import _safe

__all__ = ["FORMS", "Overflow", "OverflowForm", "overflow_in", "too_long"]


@attrs.frozen
class OverflowForm:
    """One wording of "the request does not fit": *pattern* searched in the error text;
    groups ``n`` / ``m`` (prompt tokens / the maximum) when the wording carries them, or
    *n_field* / *m_field*: members of the error object that carry them (llama.cpp)."""

    name: str
    pattern: re.Pattern[str]
    n_field: str | None = None
    m_field: str | None = None


def _form(name: str, pattern: str, **fields: str) -> OverflowForm:
    return OverflowForm(name, re.compile(pattern, re.IGNORECASE | re.DOTALL), **fields)


#: Every known wording, by name (a profile lists the names its server uses).
FORMS: Mapping[str, OverflowForm] = {
    form.name: form
    for form in (
        _form(
            "openai-max-context",
            r"maximum context length is (?P<m>\d+) tokens\.?\s*However, (?:your messages "
            r"resulted in|you requested)(?: about)? (?P<n>\d+) tokens",
        ),
        _form("openai-code", r"context_length_exceeded"),
        _form("openai-window", r"input exceeds the context window"),
        _form(
            "vllm-input-tokens",
            r"maximum context length is (?P<m>\d+) tokens and your request has (?P<n>\d+) "
            r"input tokens",
        ),
        _form(
            "vllm-request-has",
            r"maximum context length is (?P<m>\d+) tokens\.\s*However, your request has "
            r"(?P<n>\d+) input tokens",
        ),
        _form(
            "vllm-passed",
            r"You passed (?:(?P<n>\d+) input tokens|\d+ input characters) and requested \d+ "
            r"output tokens\.\s*However, the model's context length is only \d+ tokens, "
            r"resulting in a maximum input length of (?P<m>\d+) tokens",
        ),
        _form(
            "llama.cpp-context-size",
            r"(?:exceed_context_size_error\W*)?(?:request \((?P<n>\d+) tokens\) )?"
            r"exceeds the available context size"
            r"(?: \((?P<m>\d+) tokens\))?|exceed_context_size_error",
            n_field="n_prompt_tokens",
            m_field="n_ctx",
        ),
        _form("ollama-exceeded", r"prompt too long; exceeded (?:max )?context length"),
        _form("ollama-input-length", r"input length exceeds the context length"),
        _form(
            "ollama-prompt-longer",
            r"prompt is longer than the context length currently available",
        ),
        _form(
            "sglang-input-longer",
            r"input \((?P<n>\d+) tokens\) is longer than the model's context length "
            r"\((?P<m>\d+) tokens\)",
        ),
        _form(
            "sglang-requested",
            r"maximum context length of (?P<m>\d+) tokens\. You requested a total of \d+ "
            r"tokens: (?P<n>\d+) tokens from the input",
        ),
        _form(
            "gemini-token-count",
            r"input token count \(?(?P<n>\d+)\)? exceeds the maximum number of tokens "
            r"allowed \(?(?P<m>\d+)\)?",
        ),
        _form(
            "openrouter-endpoint",
            r"endpoint's maximum context length is (?P<m>\d+) tokens\.?\s*However, you "
            r"requested(?: about)? (?P<n>\d+) tokens",
        ),
        _form("messages-api", r"prompt is too long"),
    )
}


@attrs.frozen
class Overflow:
    """A context error found: its form, and the numbers it carried (``None``: not said)."""

    form: str
    tokens: int | None
    maximum: int | None


def too_long(tokens: int, maximum: int) -> str:
    """The Messages API's wording, which Claude Code compacts on."""
    return f"prompt is too long: {tokens} tokens > {maximum} maximum"


def _fields(body: str) -> Mapping[str, object]:
    """The error object's members (``{"error": {...}}``, a list of those, or the object)."""
    try:
        data = _safe.loads(body)
    except (ValueError, TypeError):
        return {}
    if isinstance(data, list) and data:
        data = data[0]
    if not isinstance(data, dict):
        return {}
    inner = data.get("error")
    return inner if isinstance(inner, dict) else data


def overflow_in(text: str | bytes, forms: tuple[str, ...]) -> Overflow | None:
    """The first of *forms* found in *text* (an upstream error body or message), else ``None``.
    A form whose wording carries no numbers leaves them ``None``."""
    if not forms:
        return None
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    for name in forms:
        form = FORMS[name]
        found = form.pattern.search(text)
        if found is None:
            continue
        groups = found.groupdict()
        tokens = int(groups["n"]) if groups.get("n") else None
        maximum = int(groups["m"]) if groups.get("m") else None
        if form.n_field is not None or form.m_field is not None:
            fields = _fields(text)
            n, m = fields.get(form.n_field or ""), fields.get(form.m_field or "")
            tokens = n if isinstance(n, int) and not isinstance(n, bool) else tokens
            maximum = m if isinstance(m, int) and not isinstance(m, bool) else maximum
        return Overflow(name, tokens, maximum)
    return None
