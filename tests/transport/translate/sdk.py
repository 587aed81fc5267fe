"""Validators that check emitted bodies against the official SDK types.

Pydantic ignores (TypedDict) or keeps (SDK models: ``extra="allow"``) unknown keys,
so validation alone would accept misspelt fields. Each validator therefore
validates strictly and then proves nothing was ignored: the validated value, fully
materialised, must equal the input (TypedDicts), or no model in the tree may hold
extra fields (models).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import pydantic
from anthropic.types import Message, MessageCreateParams
from openai.types.chat import ChatCompletion
from openai.types.chat.completion_create_params import (
    CompletionCreateParamsNonStreaming,
    CompletionCreateParamsStreaming,
)

__all__ = [
    "SDKMismatch",
    "validate_messages_request",
    "validate_messages_response",
    "validate_openai_request",
    "validate_openai_response",
]

_NON_STREAMING: pydantic.TypeAdapter[Any] = pydantic.TypeAdapter(CompletionCreateParamsNonStreaming)
_STREAMING: pydantic.TypeAdapter[Any] = pydantic.TypeAdapter(CompletionCreateParamsStreaming)
_MESSAGES_REQUEST: pydantic.TypeAdapter[Any] = pydantic.TypeAdapter(MessageCreateParams)

#: Non-standard assistant-message fields tpx emits on purpose (earlier reasoning going
#: back: ``reasoning_content`` for DeepSeek / vLLM / SGLang / llama.cpp, ``reasoning`` for
#: Ollama / OpenRouter).
_EXTENSIONS = ("reasoning_content", "reasoning")
#: Non-standard top-level fields some profiles take, with the shape each must have.
_TOP_EXTENSIONS: dict[str, Any] = {
    "chat_template_kwargs": lambda v: v in ({"enable_thinking": True}, {"enable_thinking": False}),
    "thinking": lambda v: v in ({"type": "enabled"}, {"type": "disabled"}),
    "reasoning": lambda v: (
        v == {"enabled": True}
        or (
            isinstance(v, dict)
            and set(v) == {"effort"}
            and v["effort"] in ("none", "minimal", "low", "medium", "high", "xhigh")
        )
    ),
}


class SDKMismatch(AssertionError):
    """A body the official SDK types do not accept exactly."""


def _materialise(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {key: _materialise(item) for key, item in value.items()}
    if isinstance(value, list | tuple | Iterator):
        return [_materialise(item) for item in value]
    if type(value).__name__ == "ValidatorIterator":  # pydantic's lazy Iterable
        return [_materialise(item) for item in value]
    return value


def _typed_dict(adapter: pydantic.TypeAdapter[Any], body: Mapping[str, Any]) -> None:
    try:
        validated = adapter.validate_python(body, strict=True)
        materialised = _materialise(validated)
    except pydantic.ValidationError as exc:
        raise SDKMismatch(str(exc)) from exc
    if materialised != _materialise(body):
        raise SDKMismatch(f"fields ignored or coerced by the SDK type: {materialised!r}")


def _strip_extensions(body: Mapping[str, Any]) -> dict[str, Any]:
    for key, valid in _TOP_EXTENSIONS.items():
        if key in body and not valid(body[key]):
            raise SDKMismatch(f"extension field {key} has an unexpected shape: {body[key]!r}")
    messages = []
    for message in body.get("messages", []):
        if message.get("role") == "assistant":
            for key in _EXTENSIONS:
                if key in message and not isinstance(message[key], str):
                    raise SDKMismatch(f"assistant {key} must be a string")
            message = {key: value for key, value in message.items() if key not in _EXTENSIONS}
        messages.append(message)
    top = {key: value for key, value in body.items() if key not in _TOP_EXTENSIONS}
    return {**top, "messages": messages}


def validate_openai_request(body: Mapping[str, Any]) -> None:
    """Raise :class:`SDKMismatch` unless *body* is exactly a Chat Completions create body."""
    stripped = _strip_extensions(body)
    adapter = _STREAMING if body.get("stream") else _NON_STREAMING
    _typed_dict(adapter, stripped)


def validate_messages_request(body: Mapping[str, Any]) -> None:
    """Raise :class:`SDKMismatch` unless *body* is exactly a Messages create body."""
    _typed_dict(_MESSAGES_REQUEST, body)


def _no_extras(model: pydantic.BaseModel, path: str) -> None:
    extra = model.model_extra
    if extra:
        raise SDKMismatch(f"unknown fields at {path}: {sorted(extra)}")
    for name in type(model).model_fields:
        value = getattr(model, name)
        _walk(value, f"{path}.{name}")


def _walk(value: Any, path: str) -> None:
    if isinstance(value, pydantic.BaseModel):
        _no_extras(value, path)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            _walk(item, f"{path}[{index}]")
    elif isinstance(value, dict):
        for key, item in value.items():
            _walk(item, f"{path}.{key}")


def _model(cls: type[pydantic.BaseModel], body: Mapping[str, Any]) -> pydantic.BaseModel:
    try:
        model = cls.model_validate(body, strict=True)
    except pydantic.ValidationError as exc:
        raise SDKMismatch(str(exc)) from exc
    _no_extras(model, cls.__name__)
    return model


def validate_messages_response(body: Mapping[str, Any]) -> Message:
    """Raise :class:`SDKMismatch` unless *body* is exactly a Messages ``Message``."""
    model = _model(Message, body)
    assert isinstance(model, Message)
    return model


def validate_openai_response(body: Mapping[str, Any]) -> ChatCompletion:
    """Raise :class:`SDKMismatch` unless *body* is exactly a ``ChatCompletion``."""
    model = _model(ChatCompletion, body)
    assert isinstance(model, ChatCompletion)
    return model
