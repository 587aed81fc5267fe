"""Exact counts for ``count_tokens`` from the upstream's own tokenizer endpoint, per profile.

With ``[context] tokenizer = true`` (one upstream) or an ``[[upstreams]]`` entry's
``tokenizer`` (that upstream: :mod:`tpx.gateway.context.placement`), and a server that exposes its
tokenizer, ``POST /v1/messages/count_tokens`` and the preflight of a turn that may come near
its window ask the upstream (through the gateway's upstream client, once a request, bounded
in time and size: :mod:`tpx.gateway.context.asked`):

* vLLM: ``POST /tokenize`` ``{"model", "messages", "tools", "add_generation_prompt": true}``:
  the chat template applied, ``count`` is exact;
* SGLang: ``POST /v1/tokenize`` ``{"model", "prompt"}`` and llama.cpp: ``POST /tokenize``
  ``{"content"}``: the request's texts (what :func:`tpx.gateway.tokens.count_openai_request`
  counts) tokenized exactly, plus tpx's framing (3 tokens a message, 3 for the reply).

When the endpoint fails or answers something else, the count is the estimate
(:mod:`tpx.gateway.context.counting`): no request fails because of it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

import attrs
import orjson

from tpx import _safe
from tpx.gateway.wire import JSON, UpstreamCall

__all__ = ["TOKENIZERS", "TokenizerEndpoint", "framing", "texts"]


def texts(body: Mapping[str, Any]) -> list[str]:
    """The texts of a Chat Completions request, in the order tpx counts them."""
    out: list[str] = []
    for message in body.get("messages", []):
        content = message.get("content")
        if isinstance(content, str):
            out.append(content)
        elif isinstance(content, list):
            out += [p["text"] for p in content if p.get("type") == "text" and "text" in p]
        for call in message.get("tool_calls") or []:
            function = call.get("function", {})
            out += [str(function.get("name", "")), str(function.get("arguments", ""))]
        if isinstance(message.get("reasoning_content"), str):
            out.append(message["reasoning_content"])
    if body.get("tools"):
        out.append(orjson.dumps(body["tools"]).decode())
    return out


def framing(body: Mapping[str, Any]) -> int:
    """tpx's framing tokens: 3 a message, 3 to prime the reply."""
    return 3 + 3 * len(body.get("messages", []))


@attrs.frozen
class TokenizerEndpoint:
    """Where a kind of server tokenizes: *path*, and whether it takes the chat (``chat``: the
    template applied, the count exact) or a text (``prompt`` / ``content``: the texts joined)."""

    path: str
    shape: Literal["chat", "prompt", "content"]

    def call(self, body: Mapping[str, Any], model: str | None) -> UpstreamCall:
        payload: dict[str, Any]
        if self.shape == "chat":
            payload = {"messages": body.get("messages", []), "add_generation_prompt": True}
            if body.get("tools"):
                payload["tools"] = body["tools"]
        else:
            payload = {self.shape: "\n".join(texts(body))}
        if model is not None and self.shape != "content":
            payload = {"model": model, **payload}
        return UpstreamCall("POST", self.path, (("content-type", JSON),), orjson.dumps(payload))

    def read(self, status: int, reply: bytes, body: Mapping[str, Any]) -> int | None:
        """The count in the endpoint's reply (``None``: not a count)."""
        if status != 200:
            return None
        try:
            data = _safe.loads(reply)
        except (ValueError, TypeError):
            return None
        if not isinstance(data, dict):
            return None
        count = data.get("count")
        if not (isinstance(count, int) and not isinstance(count, bool)):
            tokens = data.get("tokens")
            if not isinstance(tokens, list):
                return None
            count = len(tokens)
        return count if self.shape == "chat" else count + framing(body)


#: The tokenizer endpoint of each profile that has one.
TOKENIZERS: Mapping[str, TokenizerEndpoint] = {
    "vllm": TokenizerEndpoint("/tokenize", "chat"),
    "sglang": TokenizerEndpoint("/v1/tokenize", "prompt"),
    "llama.cpp": TokenizerEndpoint("/tokenize", "content"),
}
