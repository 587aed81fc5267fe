"""``document`` blocks: a file part where the profile has them, else their text (pypdf)."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from tpx.errors import ProtocolError, UnsupportedError
from tpx.transport.translate import request_to_openai
from tpx.transport.translate.documents import pdf_text

from .clients import client_requests
from .sdk import validate_openai_request


def _pdf_data() -> str:
    body = client_requests()["python-sdk/documents"]
    data: str = body["messages"][0]["content"][0]["source"]["data"]
    return data


PDF = _pdf_data()


def _request(*blocks: dict[str, Any]) -> dict[str, Any]:
    return {
        "model": "m",
        "max_tokens": 10,
        "messages": [{"role": "user", "content": [*blocks, {"type": "text", "text": "Sum up."}]}],
    }


def _doc(source: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"type": "document", "source": source, **extra}


def test_pdf_text_is_extracted_with_pypdf() -> None:
    assert pdf_text(base64.b64decode(PDF)) == "tpx fixture"


def test_pdf_is_a_file_part_for_openai() -> None:
    source = {"type": "base64", "media_type": "application/pdf", "data": PDF}
    translation = request_to_openai(_request(_doc(source, title="r.pdf")), profile="openai")
    assert translation.body["messages"][0]["content"][0] == {
        "type": "file",
        "file": {"filename": "r.pdf", "file_data": f"data:application/pdf;base64,{PDF}"},
    }
    assert translation.warnings == ()
    validate_openai_request(translation.body)


def test_pdf_is_its_text_elsewhere_with_a_warning() -> None:
    source = {"type": "base64", "media_type": "application/pdf", "data": PDF}
    request = _request(_doc(source, title="r.pdf", context="quarterly"))
    translation = request_to_openai(request, profile="vllm")
    assert translation.body["messages"][0]["content"][0] == {
        "type": "text",
        "text": '<document title="r.pdf">\n<context>quarterly</context>\ntpx fixture\n</document>',
    }
    assert any("extracted text" in w for w in translation.warnings)
    validate_openai_request(translation.body)


@pytest.mark.parametrize("profile", ["openai", "generic"])
def test_text_and_content_sources_are_text_everywhere(profile: str) -> None:
    text = _doc({"type": "text", "media_type": "text/plain", "data": "plain"})
    content = _doc(
        {
            "type": "content",
            "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}],
        }
    )
    parts = request_to_openai(_request(text, content), profile=profile).body["messages"][0][
        "content"
    ]
    assert parts[:2] == [
        {"type": "text", "text": "<document>\nplain\n</document>"},
        {"type": "text", "text": "<document>\na\n\nb\n</document>"},
    ]


def test_a_document_inside_a_tool_result_is_text_in_the_tool_message() -> None:
    source = {"type": "base64", "media_type": "application/pdf", "data": PDF}
    request = {
        "model": "m",
        "max_tokens": 10,
        "messages": [
            {"role": "user", "content": "read it"},
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": "toolu_1", "name": "Read", "input": {}}],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_1", "content": [_doc(source)]}
                ],
            },
        ],
    }
    body = request_to_openai(request, profile="openai").body  # file parts, but not in tools
    assert body["messages"][2] == {
        "role": "tool",
        "tool_call_id": "toolu_1",
        "content": "<document>\ntpx fixture\n</document>",
    }


@pytest.mark.parametrize(
    ("source", "error"),
    [
        ({"type": "url", "url": "https://example.test/a.pdf"}, UnsupportedError),
        ({"type": "file", "file_id": "file_1"}, UnsupportedError),
        ({"type": "base64", "media_type": "application/msword", "data": "AAAA"}, UnsupportedError),
        ({"type": "base64", "media_type": "application/pdf", "data": "%%%"}, ProtocolError),
        (
            {
                "type": "base64",
                "media_type": "application/pdf",
                "data": base64.b64encode(b"not a pdf").decode(),
            },
            UnsupportedError,
        ),
        ({"type": "base64", "media_type": "application/pdf", "data": ""}, ProtocolError),
    ],
)
def test_documents_that_cannot_be_carried_are_refused_never_dropped(
    source: dict[str, Any], error: type
) -> None:
    with pytest.raises(error):
        request_to_openai(_request(_doc(source)), profile="generic")
