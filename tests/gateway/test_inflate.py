"""tpx.gateway.inflate: upstream reply bodies decoded in bounded pieces and size-capped; the
gateway answers a hostile upstream (a gzip bomb, a huge body, an endless stream) with a
Messages-shaped 502 (the RSS of a real ``tpx serve``: tests/security/test_upstream_bounds.py)."""

from __future__ import annotations

import gzip
import zlib
from typing import Any

import anthropic
import httpx2
import pytest

import tpx.sdk
from tests.gateway.conftest import GATEWAY_KEY, make_settings, serving
from tests.gateway.scripted import (
    COMPLETION,
    ScriptedUpstream,
    by_marker,
    compressed,
    gzip_completion,
    huge_completion,
    long_stream,
)
from tpx.errors import ProtocolError
from tpx.gateway.asgi import create_app
from tpx.gateway.inflate import PIECE, Decoder
from tpx.gateway.settings import Credential

MiB = 1 << 20
#: A credential with no word of the error messages in it (the redaction hides fragments).
TOKEN = "tok-9f8e7d6c5b4a3210"


def _decode(coding: str, data: bytes, limit: int, chunk: int) -> list[bytes]:
    decoder = Decoder({"content-encoding": coding}, limit, "TPX", "limits.test")
    pieces = []
    for start in range(0, len(data), chunk):
        piece = decoder.decode(data[start : start + chunk])
        while piece:
            pieces.append(piece)
            piece = decoder.more()
    pieces.append(decoder.flush())
    return pieces


def _raw_deflate(data: bytes) -> bytes:
    compressor = zlib.compressobj(6, zlib.DEFLATED, -zlib.MAX_WBITS)
    return compressor.compress(data) + compressor.flush()


TEXT = b"".join(b"line %d of a reply\n" % i for i in range(40_000))
ENCODINGS = {
    "": TEXT,
    "identity": TEXT,
    "gzip": gzip.compress(TEXT),
    "x-gzip": gzip.compress(TEXT),
    "deflate": zlib.compress(TEXT),
    " Deflate ": _raw_deflate(TEXT),  # some servers send raw deflate; case and spaces vary
}


@pytest.mark.parametrize("coding", sorted(ENCODINGS))
@pytest.mark.parametrize("chunk", [7, 4096, 1 << 30])
def test_every_supported_coding_decodes_in_any_chunking(coding: str, chunk: int) -> None:
    pieces = _decode(coding, ENCODINGS[coding], 10 * MiB, chunk)
    assert b"".join(pieces) == TEXT
    assert max(map(len, pieces)) <= max(PIECE, chunk)


def _unbounded_step(self: Decoder, inflater: Any, data: bytes) -> bytes:
    """A seeded bug: a decoding step without the piece bound (httpx2's own decoders)."""
    return self._count(inflater.decompress(data))


@pytest.mark.parametrize("seeded", [False, True], ids=["real", "unbounded-step-bug"])
def test_a_bomb_is_decoded_in_bounded_pieces_and_stopped_at_the_limit(
    seeded: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """64 MiB of gzip zeros in one 64 KB chunk: no piece beyond PIECE, stopped past the
    limit; the seeded bug inflates the whole chunk at once (one 64 MiB piece)."""
    if seeded:
        monkeypatch.setattr(Decoder, "_step", _unbounded_step)
    bomb = gzip.compress(b"\0" * 64 * MiB)
    assert len(bomb) < 100_000
    decoder = Decoder({"content-encoding": "gzip"}, 8 * MiB, "TPX", "limits.test")
    pieces: list[int] = []

    def drain() -> None:
        piece = decoder.decode(bomb)
        while piece:
            pieces.append(len(piece))
            piece = decoder.more()

    with pytest.raises(ProtocolError, match=r"larger than 8388608 bytes \(limits.test\)") as info:
        drain()
    assert info.value.status == 502
    largest = max(pieces, default=0)
    if seeded:
        assert largest == 0  # the first and only step was the whole 64 MiB
    else:
        assert 0 < largest <= PIECE


@pytest.mark.parametrize(
    ("coding", "data", "problem"),
    [
        ("br", b"x", "content-encoding 'br'"),
        ("gzip, gzip", b"x", "content-encoding 'gzip, gzip'"),
        ("gzip", b"not gzip at all", "does not decode"),
        ("gzip", gzip.compress(TEXT)[:-12], "does not decode"),  # cut short
        ("deflate", zlib.compress(TEXT)[:50] + b"\xff" * 50, "does not decode"),
    ],
)
def test_codings_refused_and_corrupt_bodies_are_protocol_errors(
    coding: str, data: bytes, problem: str
) -> None:
    with pytest.raises(ProtocolError, match=problem):
        _decode(coding, data, 10 * MiB, 4096)


def test_an_identity_body_is_only_counted() -> None:
    decoder = Decoder({}, 10, "TPX", "limits.test")
    chunk = b"0123456789"
    assert decoder.decode(chunk) is chunk
    assert decoder.more() == b""
    assert decoder.flush() == b""
    with pytest.raises(ProtocolError, match="larger than 10 bytes"):
        decoder.decode(b"!")


# -- the gateway in front of a hostile upstream ------------------------------------------------


def _turn(marker: str, stream: bool = False) -> dict[str, Any]:
    return {
        "model": "claude-x",
        "max_tokens": 64,
        "stream": stream,
        "messages": [{"role": "user", "content": marker}],
    }


HOSTILE = by_marker(
    {
        b"GZIP-OK": compressed(gzip.compress(COMPLETION)),
        b"GZIP-BOMB": compressed(gzip_completion(24 * MiB)),
        b"HUGE": huge_completion(24 * MiB),
        b"LONG-STREAM": long_stream(6 * MiB),
    }
)


def _post(turns: list[dict[str, Any]]) -> tuple[list[httpx2.Response], list[bytes]]:
    limits = {"max_upstream_body": 8 * MiB, "max_upstream_stream": 4 * MiB}
    with ScriptedUpstream(HOSTILE) as upstream:
        settings = make_settings(
            "TPX",
            base_url=upstream.url,
            gateway_key=GATEWAY_KEY,
            credential=Credential(TOKEN),
            limits=limits,
        )
        headers = {"x-api-key": GATEWAY_KEY}
        with serving(create_app(settings)) as url, httpx2.Client(base_url=url, timeout=60) as c:
            replies = [c.post("/v1/messages", json=turn, headers=headers) for turn in turns]
        return replies, [head for head, _ in upstream.requests]


def _bad_gateway(reply: httpx2.Response, limit: str) -> None:
    assert reply.status_code == 502, reply.text[:200]
    error = reply.json()
    assert error["type"] == "error"
    assert error["error"]["type"] == "api_error"
    assert "MODEL_PROTOCOL" in error["error"]["message"]
    assert limit in error["error"]["message"]


def test_a_hostile_upstream_gets_its_client_a_502_and_a_fair_one_still_works() -> None:
    """A gzip bomb decoding to a valid 24 MiB reply, a plain 24 MiB reply (limit 8 MiB), a
    stream of 6 MiB (limit 4 MiB): 502 each, Messages-shaped; a compressed fair reply is
    decoded; the gateway asks for identity."""
    turns = [_turn("GZIP-OK"), _turn("GZIP-BOMB"), _turn("HUGE"), _turn("LONG-STREAM", True)]
    turns.append(_turn("fine", True))
    (fair, bomb, huge, endless, after), heads = _post(turns)
    assert fair.status_code == 200
    assert fair.json()["content"][0]["text"] == "hello"
    _bad_gateway(bomb, "limits.max_upstream_body")
    _bad_gateway(huge, "limits.max_upstream_body")
    _bad_gateway(endless, "limits.max_upstream_stream")
    assert after.status_code == 200
    assert "hello" in after.text
    assert all(b"\r\naccept-encoding: identity\r\n" in head.lower() for head in heads)


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
@pytest.mark.parametrize("made", ["streamed", "in-memory"])
def test_the_in_process_client_is_bounded_too(stream: bool, made: str) -> None:
    """The sync upstream (tpx.sdk's in-process client): a gzip bomb streamed by the
    transport is decoded bounded, a reply an injected transport made in memory is only
    size-checked; both are 502s."""
    bomb = gzip_completion(6 * MiB)
    content_type = "text/event-stream" if stream else "application/json"

    def upstream(request: httpx2.Request) -> httpx2.Response:
        if made == "streamed":
            headers = {"content-encoding": "gzip", "content-type": content_type}
            return httpx2.Response(200, headers=headers, stream=httpx2.ByteStream(bomb))
        return httpx2.Response(
            200, headers={"content-type": content_type}, content=b"x" * (6 * MiB)
        )

    limits = {"max_upstream_body": 2 * MiB, "max_upstream_stream": 1 * MiB}
    settings = make_settings("TPX", credential=Credential(TOKEN), limits=limits)
    with (
        tpx.sdk.anthropic_client(
            settings=settings, upstream=httpx2.MockTransport(upstream), max_retries=0
        ) as client,
        pytest.raises(anthropic.APIStatusError) as info,
    ):
        client.messages.create(
            model="m", max_tokens=8, stream=stream, messages=[{"role": "user", "content": "hi"}]
        )
    assert info.value.status_code == 502
    assert "larger than" in str(info.value)
