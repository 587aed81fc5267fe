"""``[[upstreams]]`` with a tokenizer endpoint each: count_tokens and the preflight count with
the endpoint of the upstream a request goes to, against that upstream's window, and a
failover sends a request only to an upstream it fits. The gateway and two fake upstreams
run on real loopback sockets; the fakes' tokenizers differ (one counts a word as one token
with vLLM's ``/tokenize``, the other as three with llama.cpp's), as do their windows."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import orjson
import pytest

import tpx.sdk
from tpx.errors import ConfigurationError
from tpx.gateway.asgi import GatewayApp, create_app
from tpx.gateway.context.tokenizer import TOKENIZERS
from tpx.gateway.pool import UpstreamPool
from tpx.gateway.settings import Settings, load_settings

from ..conftest import GUARD, lifespan, post_unread, released, request_body, serving, until
from .test_gateway_context import _reply

ENV = {"TPX_OAUTH_TOKEN": "tok", "TPX_BASE_URL": "http://127.0.0.1:9/v1"}
WORDS = 2000
TEXT = "word " * WORDS
#: what each fake's endpoint counts for a one-message request of TEXT: vLLM's count (one a
#: word), llama.cpp's tokens (three a word) plus tpx's framing (3 a message, 3 the reply)
COUNT_A = WORDS
COUNT_B = 3 * WORDS + 6
MIN_OUTPUT = 1024


def _event(delta: dict[str, Any], finish: str | None = None) -> bytes:
    choice = {"index": 0, "delta": delta, "finish_reason": finish}
    chunk = {"id": "c1", "object": "chat.completion.chunk", "model": "m", "choices": [choice]}
    return b"data: " + orjson.dumps(chunk) + b"\n\n"


#: a streamed reply (Chat Completions events)
_STREAM = _event({"role": "assistant", "content": "ok"}) + _event({}, "stop") + b"data: [DONE]\n\n"


class _Fake:
    """One upstream: ``/tokenize`` counts *factor* tokens a word (``vllm``: ``{"count"}`` of
    the chat; ``llama.cpp``: ``{"tokens"}`` of the text); chat completions answer *status*
    (200: a reply, streamed when asked), held until :attr:`release` is set when *hold*.
    Keeps each chat request's body and counts the tokenizer calls."""

    def __init__(
        self, kind: str, factor: int, status: int = 200, hold: bool = False, held: bool = False
    ) -> None:
        self.kind = kind
        self.factor = factor
        self.status = status
        self.hold = hold
        self.held = held  #: /tokenize too, until released or its caller goes away
        self.release = threading.Event()
        self.tokenized = 0
        self.left = 0  #: tokenizer calls whose caller went away while held
        self.sent: list[dict[str, Any]] = []

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            await lifespan(receive, send)
            return
        data = orjson.loads(await request_body(receive))
        status = 200
        if scope["path"] == "/tokenize":
            self.tokenized += 1
            if self.held and not await released(self.release, receive):
                self.left += 1
                return
            reply = self._count(data)
        else:
            self.sent.append(data)
            while self.hold and not self.release.is_set():
                await asyncio.sleep(0.01)
            status = self.status
            if status == 200 and data.get("stream"):  # a streamed turn: its events
                events = [(b"content-type", b"text/event-stream")]
                await send({"type": "http.response.start", "status": 200, "headers": events})
                await send({"type": "http.response.body", "body": _STREAM})
                return
            reply = _reply() if status == 200 else {"error": {"message": "overloaded"}}
        headers = [(b"content-type", b"application/json")]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": orjson.dumps(reply)})

    def _count(self, data: dict[str, Any]) -> dict[str, Any]:
        if self.kind == "llama.cpp":
            return {"tokens": [1] * (self.factor * len(data["content"].split()))}
        words = 0
        for message in data["messages"]:
            content = message.get("content")
            if isinstance(content, list):
                content = " ".join(p.get("text", "") for p in content)
            words += len(str(content or "").split())
        return {"count": self.factor * words}


CONFIG = """
[context]
discover = false
min_output = 1024
tokenizer_timeout = {{timeout}}

[routing]
probe_interval = 0

[limits]
max_upstream = {{max_upstream}}
ping_interval = {{ping}}

[[upstreams]]
name = "a"
base_url = "{url_a}/v1"
profile = "vllm"
models = ["model-a"]
context_window = {window_a}
tokenizer = true
{{extra_a}}

[[upstreams]]
name = "b"
base_url = "{url_b}/v1"
profile = "generic"
models = ["model-b", "model-a"]
context_window = {window_b}
tokenizer = "llama.cpp"

[[routes]]
name = "ab"
model = ["ab-*"]
upstreams = ["a", "b"]

[[routes]]
name = "ba"
model = ["ba-*"]
upstreams = ["b", "a"]

[[routes]]
name = "only-a"
model = ["a-*"]
upstreams = ["a"]
"""


def _config(
    tmp_path: Path,
    url_a: str,
    url_b: str,
    window_a: int,
    window_b: int,
    extra_a: str,
    timeout: float,
    max_upstream: int = 64,
    ping: float = 10.0,
) -> Path:
    path = tmp_path / "gateway.toml"
    text = CONFIG.format(url_a=url_a, url_b=url_b, window_a=window_a, window_b=window_b)
    text = text.replace("{extra_a}", extra_a).replace("{timeout}", str(timeout))
    text = text.replace("{ping}", str(ping))
    path.write_text(text.replace("{max_upstream}", str(max_upstream)))
    return path


@contextlib.contextmanager
def _gateway(
    tmp_path: Path,
    a: _Fake,
    b: _Fake,
    *,
    window_a: int = 8000,
    window_b: int = 12000,
    extra_a: str = "",
    timeout: float = 5.0,
    max_upstream: int = 64,
    ping: float = 10.0,
) -> Iterator[tuple[str, GatewayApp]]:
    with serving(a) as url_a, serving(b) as url_b:
        path = _config(
            tmp_path, url_a, url_b, window_a, window_b, extra_a, timeout, max_upstream, ping
        )
        app = create_app(load_settings(env=ENV, config_file=path))
        with serving(app) as url:
            yield url, app


def _turn(model: str, max_tokens: int = 7000) -> dict[str, Any]:
    return {
        "model": model,
        "max_tokens": max_tokens,
        "messages": [{"role": "user", "content": TEXT}],
    }


def _post(url: str, path: str, body: dict[str, Any]) -> httpx2.Response:
    return httpx2.post(f"{url}{path}", json=body, timeout=GUARD)


def _fakes(**b: Any) -> tuple[_Fake, _Fake]:
    return _Fake("vllm", 1), _Fake("llama.cpp", 3, **b)


def test_count_tokens_counts_with_the_endpoint_of_the_upstream_the_route_picks(
    tmp_path: Path,
) -> None:
    a, b = _fakes()
    with _gateway(tmp_path, a, b) as (url, _):
        first_a = _post(url, "/v1/messages/count_tokens", _turn("ab-model"))
        first_b = _post(url, "/v1/messages/count_tokens", _turn("ba-model"))
    assert first_a.json() == {"input_tokens": COUNT_A}
    assert first_b.json() == {"input_tokens": COUNT_B}
    assert (a.tokenized, b.tokenized) == (1, 1)  # each asked for its own route's count only
    assert a.sent == b.sent == []


def test_the_preflight_counts_with_the_routed_upstreams_endpoint_against_its_window(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    a, b = _fakes()
    with caplog.at_level(logging.INFO, "tpx.gateway"), _gateway(tmp_path, a, b) as (url, _):
        reply = _post(url, "/v1/messages", _turn("ab-model"))
    assert reply.status_code == 200, reply.text
    assert [s["max_tokens"] for s in a.sent] == [8000 - COUNT_A]  # a's window less a's count
    assert (a.tokenized, b.tokenized, b.sent) == (1, 0, [])
    line = _line(caplog)
    assert line["upstream"] == "a"
    assert line["context"] == {
        "input_tokens": COUNT_A,
        "window": 8000,
        "clamped": True,
        "counted": "tokenizer",
    }


def test_a_request_goes_to_the_first_upstream_of_its_route_it_fits(tmp_path: Path) -> None:
    a, b = _fakes()
    with _gateway(tmp_path, a, b, window_b=7000) as (url, _):  # b: 6006 > 7000 - 1024
        reply = _post(url, "/v1/messages", _turn("ba-model"))
    assert reply.status_code == 200, reply.text
    assert b.sent == []
    assert b.tokenized == 1
    assert [s["max_tokens"] for s in a.sent] == [8000 - COUNT_A]
    assert a.sent[0]["model"] == "model-a"


def test_a_request_no_upstream_of_its_route_fits_is_refused_before_the_wire(
    tmp_path: Path,
) -> None:
    a, b = _fakes()
    with _gateway(tmp_path, a, b, window_a=3000, window_b=7000) as (url, _):
        reply = _post(url, "/v1/messages", _turn("ab-model"))
    assert reply.status_code == 400
    # refused against the upstream with the most room, with its count
    message = f"prompt is too long: {COUNT_B} tokens > {7000 - MIN_OUTPUT} maximum"
    assert reply.json()["error"]["message"] == message
    assert a.sent == b.sent == []
    assert (a.tokenized, b.tokenized) == (1, 1)


def test_a_failover_to_an_upstream_whose_window_it_does_not_fit_is_never_sent(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    a, b = _Fake("vllm", 1, status=503), _Fake("llama.cpp", 3)
    small_b = _gateway(tmp_path, a, b, window_b=7000)
    with caplog.at_level(logging.INFO, "tpx.gateway"), small_b as (url, _):
        reply = _post(url, "/v1/messages", _turn("ab-model"))
    assert len(a.sent) == 1
    assert b.sent == []  # b's own context error never asked for
    assert b.tokenized == 1  # counted for b before it would be sent there
    assert reply.status_code == 503  # a's answer: the client retries, nothing compacts
    assert _line(caplog)["upstream"] == "a"


def test_a_failover_is_clamped_for_the_window_of_the_upstream_it_moves_to(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    a, b = _Fake("vllm", 1, status=503), _Fake("llama.cpp", 3)
    with caplog.at_level(logging.INFO, "tpx.gateway"), _gateway(tmp_path, a, b) as (url, _):
        reply = _post(url, "/v1/messages", _turn("ab-model"))
    assert reply.status_code == 200, reply.text
    assert [s["max_tokens"] for s in a.sent] == [8000 - COUNT_A]
    assert [s["max_tokens"] for s in b.sent] == [12000 - COUNT_B]  # b's window, b's count
    assert b.sent[0]["model"] == "model-b"
    line = _line(caplog)
    assert line["upstream"] == "b"
    assert line["context"]["input_tokens"] == COUNT_B
    assert line["context"]["window"] == 12000


def test_a_failover_ends_when_a_ping_reached_the_client_while_the_next_upstream_counted(
    tmp_path: Path,
) -> None:
    """A streamed turn: ``a`` answers 503, ``b``'s endpoint is held until the client has a
    ping; the turn then fails as any turn whose reply began does, and ``b`` gets nothing."""
    a, b = _Fake("vllm", 1, status=503), _Fake("llama.cpp", 3, held=True)
    body = {**_turn("ab-model"), "stream": True}
    with _gateway(tmp_path, a, b, ping=0.2) as (url, _):
        seen = b""
        with httpx2.stream("POST", f"{url}/v1/messages", json=body, timeout=GUARD) as reply:
            for chunk in reply.iter_bytes():
                seen += chunk
                if b"event: ping" in seen:
                    b.release.set()
    assert b"event: ping" in seen
    assert b"event: error" in seen
    assert b.tokenized == 1
    assert b.sent == []


def test_a_model_two_upstreams_serve_has_each_upstreams_own_window_there(
    tmp_path: Path,
) -> None:
    """``model-a`` is served by ``a`` (8000) and ``b`` (12000): a failover to ``b`` is clamped
    for b's own window, not the model's smallest."""
    a, b = _Fake("vllm", 1, status=503), _Fake("llama.cpp", 3)
    with _gateway(tmp_path, a, b) as (url, _):
        reply = _post(url, "/v1/messages", _turn("model-a"))  # no rule: a, then b
    assert reply.status_code == 200, reply.text
    assert [(s["model"], s["max_tokens"]) for s in b.sent] == [("model-a", 12000 - COUNT_B)]


def test_the_endpoint_call_holds_its_upstreams_concurrency_slot(tmp_path: Path) -> None:
    """With ``concurrency = 1`` on ``a`` and a turn held there, a count of a request routed
    to ``a`` waits for that slot within ``tokenizer_timeout``: none frees, so the endpoint is
    not asked and the estimate counts (``busy``)."""
    a, b = _Fake("vllm", 1, hold=True), _Fake("llama.cpp", 3)
    small = {"model": "a-model", "max_tokens": 16, "messages": [{"role": "user", "content": "hi"}]}
    with _gateway(tmp_path, a, b, extra_a="concurrency = 1", timeout=0.3) as (url, app):
        pool = app.upstream
        assert isinstance(pool, UpstreamPool)
        held = threading.Thread(target=_post, args=(url, "/v1/messages", small))
        held.start()
        until(lambda: len(a.sent) == 1, "the turn reached a")
        counted = _post(url, "/v1/messages/count_tokens", _turn("a-model"))
        a.release.set()
        held.join(GUARD)
        busy = app.gateway.metrics.registry.get_sample_value(
            "tpx_gateway_tokenizer_fallbacks_total", {"reason": "busy"}
        )
    assert a.tokenized == 0
    assert busy == 1.0
    assert counted.json()["input_tokens"] not in (COUNT_A, COUNT_B)  # the estimate


def test_a_client_gone_while_a_routed_upstreams_endpoint_is_asked_ends_the_request(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The call holds one of the pool's slots (``max_upstream = 1``: the only one) and one of
    its upstream's; the client leaving cancels it, gives both back, sends nothing upstream
    and logs the turn's line with ``client_gone``."""
    caplog.set_level(logging.INFO, logger="tpx.gateway")
    a, b = _Fake("vllm", 1, held=True), _Fake("llama.cpp", 3)
    # the endpoint's timeout longer than the test waits: only the client leaving ends it
    slow = _gateway(tmp_path, a, b, extra_a="concurrency = 2", max_upstream=1, timeout=3 * GUARD)
    with slow as (url, app):
        pool = app.upstream
        assert isinstance(pool, UpstreamPool)
        sock = post_unread(url, "/v1/messages", _turn("ab-model"))
        until(lambda: a.tokenized == 1, "a's endpoint asked")
        held = (pool.slots.locked(), pool._limits["a"]._value)
        sock.close()
        until(lambda: a.left == 1, "the call cancelled")
        until(lambda: "client_gone" in caplog.text, "the turn's line logged")
        until(lambda: not pool.slots.locked(), "the pool's slot given back")
        a.release.set()
        given_back = pool._limits["a"]._value
    assert held == (True, 1)  # the pool's one slot and one of a's two
    assert given_back == 2
    assert a.sent == b.sent == []
    assert app.gateway.in_flight == 0
    lines = [r.getMessage() for r in caplog.records if "client_gone" in r.getMessage()]
    assert len(lines) == 1
    assert orjson.loads(lines[0])["endpoint"] == "messages"


def test_the_async_sdk_places_a_routed_request_with_the_same_counts(tmp_path: Path) -> None:
    a, b = _fakes()
    with serving(a) as url_a, serving(b) as url_b:
        path = _config(tmp_path, url_a, url_b, 8000, 12000, "", 5.0)
        client = tpx.sdk.async_anthropic_client(env=ENV, config_file=path, max_retries=0)

        async def main() -> tuple[int, int]:
            async with client:
                first = await client.messages.count_tokens(
                    model="ba-model", messages=[{"role": "user", "content": TEXT}]
                )
                await client.messages.create(**_turn("ab-model"))
            return first.input_tokens, a.sent[0]["max_tokens"]

        assert asyncio.run(main()) == (COUNT_B, 8000 - COUNT_A)


@pytest.mark.parametrize(
    ("entry", "error"),
    [
        ('profile = "generic"\ntokenizer = true', "profile 'generic' has no tokenizer endpoint"),
        ('profile = "vllm"\ntokenizer = "tiktoken"', "is not a kind of tokenizer endpoint"),
        ('profile = "vllm"\ntokenizer = 1', "tokenizer must be true, false or one of"),
        ('profile = "vllm"\ntokenizer_timeout = 1.0', "without a tokenizer"),
        ('profile = "vllm"\ntokenizer = true\ntokenizer_bytes = 0', "tokenizer_bytes must be > 0"),
        ('profile = "vllm"\ntokenizer = true\ntokenizer_timeout = "2"', "has the wrong type"),
    ],
)
def test_an_upstreams_tokenizer_is_checked_at_start(tmp_path: Path, entry: str, error: str) -> None:
    path = tmp_path / "gateway.toml"
    path.write_text(f'[[upstreams]]\nname = "u"\nbase_url = "http://u.test/v1"\n{entry}\n')
    with pytest.raises(ConfigurationError, match=error):
        load_settings(env=ENV, config_file=path)


def test_an_upstreams_tokenizer_takes_its_kind_and_bounds(tmp_path: Path) -> None:
    path = tmp_path / "gateway.toml"
    path.write_text(
        '[[upstreams]]\nname = "u"\nbase_url = "http://u.test/v1"\nprofile = "generic"\n'
        'tokenizer = "sglang"\ntokenizer_timeout = 0.5\ntokenizer_bytes = 1024\n'
        '[[upstreams]]\nname = "v"\nbase_url = "http://v.test/v1"\nprofile = "vllm"\n'
    )
    settings: Settings = load_settings(env=ENV, config_file=path)
    assert settings.routing is not None
    u, v = settings.routing.upstreams
    assert (u.tokenizer, u.tokenizer_timeout, u.tokenizer_bytes) == (
        TOKENIZERS["sglang"],
        0.5,
        1024,
    )
    assert v.tokenizer is None  # none unless named


def _line(caplog: pytest.LogCaptureFixture) -> dict[str, Any]:
    lines = [
        orjson.loads(r.getMessage())
        for r in caplog.records
        if r.getMessage().startswith("{") and '"endpoint":"messages"' in r.getMessage()
    ]
    assert len(lines) == 1, lines
    line: dict[str, Any] = lines[0]
    return line
