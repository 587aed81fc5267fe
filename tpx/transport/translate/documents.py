"""``document`` blocks -> Chat Completions content parts.

A PDF (base64 source) becomes a ``file`` part (``file_data`` data URL + ``filename``)
where the profile has them (OpenAI, OpenRouter); elsewhere its text, extracted with
pypdf, goes as a tagged text part, with a warning that layout, images and scanned
pages are lost. A plain-text source (``type: text``) and a content source (text
blocks) are text in every profile. A URL source is refused (tpx does not fetch the
caller's URLs), as is a PDF pypdf cannot read or one with no extractable text --
never a silent drop.
"""

from __future__ import annotations

import base64
import binascii
import functools
import io
from collections.abc import Callable, Mapping
from typing import Any, NoReturn

from tpx._safe import quote
from tpx.errors import ProtocolError, UnsupportedError
from tpx.transport.translate.profiles import Profile

__all__ = ["document_part", "pdf_text"]

#: Longest PDF (decoded bytes) tpx extracts text from.
MAX_PDF_BYTES = 32 * 1024 * 1024


def _bad(message: str) -> NoReturn:
    raise ProtocolError(
        f"invalid Messages request: {message}", status=400, error_type="invalid_request_error"
    )


def _unsupported(message: str) -> NoReturn:
    raise UnsupportedError(f"cannot translate to Chat Completions: {message}")


def pdf_text(data: bytes) -> str:
    """The text of a PDF, page by page (pypdf); UnsupportedError if it cannot be read."""
    if len(data) > MAX_PDF_BYTES:
        _unsupported(f"a PDF document over {MAX_PDF_BYTES} bytes")
    import pypdf  # lazily: only requests carrying a PDF pay for the import
    from pypdf.errors import PyPdfError

    try:
        reader = pypdf.PdfReader(io.BytesIO(data))
        pages = [page.extract_text() or "" for page in reader.pages]
    except (PyPdfError, ValueError, KeyError, TypeError, AttributeError, IndexError) as exc:
        _unsupported(f"a PDF document pypdf cannot read ({type(exc).__name__})")
    return "\n\n".join(text.strip() for text in pages if text.strip())


@functools.lru_cache(maxsize=32)
def _pdf_text_of(data: str) -> str:
    """:func:`pdf_text` of base64 *data*, cached: a client sends the same PDF back in
    every later turn of the conversation (errors are not cached)."""
    try:
        raw = base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        _bad("base64 document source holds invalid base64")
    return pdf_text(raw)


def _tagged(text: str, block: Mapping[str, Any]) -> dict[str, Any]:
    title = block.get("title")
    head = f'<document title="{title}">' if isinstance(title, str) and title else "<document>"
    context = block.get("context")
    if isinstance(context, str) and context:
        head += f"\n<context>{context}</context>"
    return {"type": "text", "text": f"{head}\n{text}\n</document>"}


def document_part(
    block: Mapping[str, Any], profile: Profile, warn: Callable[[str], None]
) -> dict[str, Any]:
    """The content part for one ``document`` block under *profile*."""
    source = block.get("source")
    if not isinstance(source, Mapping):
        _bad("document block without a source object")
    kind = source.get("type")
    if kind == "base64":
        media_type = source.get("media_type")
        data = source.get("data")
        if not isinstance(data, str) or not data:
            _bad("base64 document source needs non-empty data")
        if media_type != "application/pdf":
            _unsupported(f"base64 documents of type {quote(media_type)} (only application/pdf)")
        if profile.file_parts:
            title = block.get("title")
            name = title if isinstance(title, str) and title else "document.pdf"
            return {
                "type": "file",
                "file": {"filename": name, "file_data": f"data:application/pdf;base64,{data}"},
            }
        text = _pdf_text_of(data)
        if not text:
            _unsupported("a PDF document without extractable text (scanned pages?)")
        warn(
            f"PDF document sent as extracted text: profile {profile.name!r} has no file "
            "parts (layout, images and scanned pages are lost)"
        )
        return _tagged(text, block)
    if kind == "text":
        data = source.get("data")
        if not isinstance(data, str):
            _bad("text document source needs a string data")
        return _tagged(data, block)
    if kind == "content":
        content = source.get("content")
        if isinstance(content, str):
            return _tagged(content, block)
        if not isinstance(content, list):
            _bad("content document source needs a string or a list of blocks")
        texts: list[str] = []
        for inner in content:
            if not isinstance(inner, Mapping) or inner.get("type") != "text":
                _unsupported("document content sources with blocks other than text")
            inner_text = inner.get("text")
            if not isinstance(inner_text, str):
                _bad("text block without a string text")
            texts.append(inner_text)
        return _tagged("\n\n".join(texts), block)
    if kind in ("url", "file"):
        _unsupported(f"document sources of type {quote(kind)} (tpx does not fetch them)")
    _unsupported(f"document source of type {quote(kind)}")
