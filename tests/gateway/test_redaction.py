"""tpx.gateway.redaction: the prepared secrets and the fast redactor (same result as redact)."""

from __future__ import annotations

import concurrent.futures
import time
from pathlib import Path

import httpx2
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tpx.errors import redact, secret_forms
from tpx.gateway.core import LOG_FIELD_LIMIT, Gateway
from tpx.gateway.redaction import CLEAN_TEXTS, Redactor, prepared
from tpx.gateway.settings import Credential
from tpx.gateway.turn import Conversation
from tpx.transport.exchange import Exchange, Provider

from .conftest import GATEWAY_KEY, UPSTREAM_TOKEN, make_settings

SECRETS = ("tok-upstream-SECRET-1234", "gw-key-0001", "abcd", "thinking-secret-\u00e9\u00e8")
FORMS = secret_forms(SECRETS)


@st.composite
def texts(draw: st.DrawFn) -> str:
    """Texts made of noise and pieces of the secrets' forms (whole, cut, around markers)."""
    parts = []
    for _ in range(draw(st.integers(0, 6))):
        kind = draw(st.sampled_from(["noise", "piece", "marker"]))
        if kind == "noise":
            parts.append(draw(st.text(max_size=20)))
        elif kind == "piece":
            form = draw(st.sampled_from(FORMS))
            start = draw(st.integers(0, len(form)))
            end = draw(st.integers(start, len(form)))
            parts.append(form[start:end])
        else:
            parts.append(draw(st.sampled_from(["\u2026", "...", ".."])))
    return "".join(parts)


@settings(max_examples=600, deadline=None)
@given(texts())
def test_redactor_equals_redact(text: str) -> None:
    assert Redactor(FORMS)(text) == redact(text, FORMS)


_SHARED = Redactor(FORMS)


def _agrees_twice(redactor: Redactor, text: str) -> bool:
    """A redactor met by many texts (as the gateway's is) gives redact's result every time."""
    return redactor(text) == redactor(text) == redact(text, FORMS)


@settings(max_examples=600, deadline=None)
@given(texts())
def test_a_shared_redactor_equals_redact_every_time(text: str) -> None:
    assert _agrees_twice(_SHARED, text)
    assert _agrees_twice(_SHARED, "x" + text)


class _RemembersEverything(Redactor):
    """A seeded bug: every text it was given is taken as clean the next time."""

    def __init__(self, forms: tuple[str, ...]) -> None:
        super().__init__(forms)
        self.seen: set[str] = set()

    def __call__(self, text: str) -> str:
        if text in self.seen:
            return text
        self.seen.add(text)
        return super().__call__(text)


def test_a_redactor_that_remembers_dirty_texts_is_caught() -> None:
    assert not _agrees_twice(_RemembersEverything(FORMS), f"key {SECRETS[0]} here")


def test_the_clean_texts_remembered_are_bounded() -> None:
    redactor = Redactor(FORMS)
    for i in range(3 * CLEAN_TEXTS):
        assert redactor(f"req_{i:08d}") == f"req_{i:08d}"
    assert 0 < len(redactor._clean) <= CLEAN_TEXTS
    long = "y" * 300
    redactor(long)
    assert long not in redactor._clean


_WINDOWS = {f[i : i + 8] for f in FORMS if len(f) >= 8 for i in range(len(f) - 7)}
_STARTS = {f[:k] for f in FORMS for k in range(4, len(f))}


@settings(max_examples=600, deadline=None)
@given(texts())
def test_redact_leaves_no_run_of_8_and_no_start_before_a_cut(text: str) -> None:
    out = redact(text, FORMS)
    assert not any(out[i : i + 8] in _WINDOWS for i in range(len(out) - 7)), out
    assert not any(form in out for form in FORMS if len(form) < 8), out
    for marker in ("\u2026", "..."):
        for piece in out.split(marker)[:-1]:
            assert not any(piece[-k:] in _STARTS for k in range(4, len(piece) + 1)), out


def test_redactor_catches_every_8_character_piece_at_every_offset() -> None:
    redactor = Redactor(FORMS)
    secret = SECRETS[0]
    for start in range(len(secret) - 7):
        piece = secret[start : start + 8]
        for pad in range(6):
            text = "x" * pad + piece + "y" * pad
            assert redactor(text) == redact(text, FORMS)
            assert piece not in redactor(text)


def test_redactor_keeps_clean_text_and_short_forms() -> None:
    redactor = Redactor(FORMS)
    clean = '{"request_id":"req_tpx00112233","model":"claude-sonnet-4-5","status":200}'
    assert redactor(clean) is clean
    assert redactor("key abcd here") == redact("key abcd here", FORMS) == "key [REDACTED] here"
    assert Redactor(())("anything") == "anything"


def test_prepared_is_cached_per_values() -> None:
    assert prepared(SECRETS) is prepared(SECRETS)
    assert prepared(SECRETS).forms == FORMS
    assert prepared(SECRETS[:1]) is not prepared(SECRETS)


def test_conversation_with_prepared_secrets_redacts_and_scrubs_as_an_exchange_does() -> None:
    plain = Exchange(Provider.TPX, secrets=SECRETS[:3], thinking_secret=SECRETS[3])
    fast = Conversation(Provider.TPX, [], prepared=prepared(SECRETS), thinking_secret=plain._signer)
    assert fast._secrets == plain._secrets
    assert fast._signer is plain._signer
    echo = b'{"text":"' + SECRETS[0].encode() + b'"}'
    assert fast._scrub.reply(echo) == plain._scrub.reply(echo)
    assert b"SECRET" not in fast._scrub.reply(echo)[0]


def test_conversation_refuses_prepared_with_raw_secrets() -> None:
    with pytest.raises(TypeError, match="prepared="):
        Conversation(Provider.TPX, [], prepared=prepared(SECRETS), secrets=SECRETS)
    with pytest.raises(TypeError, match="prepared="):
        Conversation(Provider.TPX, [], prepared=prepared(SECRETS), thinking_secret="raw")


def test_log_line_redacts_values_and_keeps_the_keys(caplog: pytest.LogCaptureFixture) -> None:
    # a credential made of words shares 8 characters with a key ("upstream")
    word_token = "tpx-e2e-upstream-token"
    settings = make_settings("TPX", credential=Credential(word_token))
    gateway = Gateway(settings)
    caplog.set_level("INFO", logger="tpx.gateway")
    record = {
        "request_id": "req_tpx0",
        "model": f"m {word_token} {word_token[:10]}\u2026",
        "actions": ["CallerSend", f"x{word_token}"],
        "upstream_status": 200,
        "upstream_model": "upstream-model",
    }
    gateway.log(record, failed=False)
    (line,) = [r.getMessage() for r in caplog.records]
    logged = orjson.loads(line)
    assert set(logged) == set(record)
    assert logged["upstream_status"] == 200
    assert logged["actions"][0] == "CallerSend"
    for value in (logged["model"], logged["actions"][1], logged["upstream_model"]):
        assert value == redact(value, prepared(settings.secret_values()).forms)
    assert "upstream-t" not in line
    assert "tpx-e2e-u" not in line
    assert logged["upstream_model"] == "[REDACTED]model"  # "-upstream-": a run of the token


def _huge_model(size: int) -> str:
    """A model name made of 5 characters of the gateway key and cut markers: the text that
    made every position of a log line a candidate for the fragment search."""
    unit = GATEWAY_KEY[:5] + "..."
    return (unit * (size // len(unit) + 1))[:size]


def test_a_huge_log_field_costs_the_event_loop_little(caplog: pytest.LogCaptureFixture) -> None:
    settings = make_settings("TPX", gateway_key=GATEWAY_KEY)
    gateway = Gateway(settings)
    caplog.set_level("INFO", logger="tpx.gateway")
    record = {"request_id": "req_tpx0", "endpoint": "messages", "model": _huge_model(30_000_000)}
    began = time.thread_time()
    gateway.log(record, failed=True)
    spent = time.thread_time() - began
    assert spent < 0.05, f"{spent * 1000:.1f} ms of CPU for one log line"
    (line,) = [r.getMessage() for r in caplog.records]
    logged = orjson.loads(line)["model"]
    assert len(logged) <= 4 * LOG_FIELD_LIMIT  # cut first (its pieces then redacted)
    assert GATEWAY_KEY[:8] not in line


def test_redaction_cost_is_linear_and_small() -> None:
    """The worst text (a hit of the prefilter at every position, a cut marker every 8
    characters) costs CPU linear in its length: four times the text, well under eight times
    the CPU (a search of every position in every form grew faster). Measured side by side
    in one run, the least of three tries each; the absolute cost per MB is the benchmark's
    (``python -m benchmarks.redaction_cost``)."""
    forms = secret_forms((GATEWAY_KEY, UPSTREAM_TOKEN, "0123456789abcdef" * 4))

    def cost(size: int) -> float:
        text = _huge_model(size)
        spent = []
        for _ in range(3):
            began = time.thread_time()
            redacted = redact(text, forms)
            spent.append(time.thread_time() - began)
            assert GATEWAY_KEY[:5] not in redacted  # each is a secret's start, cut
        return min(spent)

    small, large = cost(250_000), cost(1_000_000)
    assert large < 8 * max(small, 1e-3), f"{small * 1000:.0f} ms, then {large * 1000:.0f} ms"


#: a request the gateway refuses after reading it whole (a tool_result nothing asked for),
#: so its model name is in the log line
_UNPAIRED = [
    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_x", "content": "a"}]}
]


@pytest.mark.slow
@pytest.mark.e2e
def test_a_huge_refused_request_does_not_hold_a_concurrent_healthz(tmp_path: Path) -> None:
    """Through ``tpx serve`` (its own process): a refused request whose model name is 30 MB
    of the gateway key's first characters and cut markers, and /healthz asked meanwhile
    answers within 100 ms beyond what the same request with a plain name costs (parsing
    30 MB of JSON): the log line's redaction holds the event loop for nothing like the
    7.6 s a 1.3 MB name once did."""
    from tests.e2e import procs

    def worst_healthz(url: str, model: str) -> float:
        body = orjson.dumps({"model": model, "max_tokens": 1, "messages": _UNPAIRED})
        headers = {"x-api-key": procs.GATEWAY_KEY, "content-type": "application/json"}
        worst = 0.0
        with httpx2.Client(base_url=url, timeout=120) as client:
            client.get("/healthz")
            with concurrent.futures.ThreadPoolExecutor(1) as pool:
                posted = pool.submit(client.post, "/v1/messages", content=body, headers=headers)
                while not posted.done():
                    began = time.perf_counter()
                    assert client.get("/healthz").status_code == 200
                    worst = max(worst, time.perf_counter() - began)
                assert posted.result().status_code == 400
        return worst

    unit = procs.GATEWAY_KEY[:5] + "..."
    hostile = (unit * (30_000_000 // len(unit) + 1))[:30_000_000]
    with (
        procs.fake_upstream(tmp_path, "bash") as upstream,
        procs.gateway(tmp_path, upstream) as served,
    ):
        # the best of two rounds each (a shared machine's noise is not the request's)
        plain = min(worst_healthz(served.url, "m" * len(hostile)) for _ in range(2))
        worst = min(worst_healthz(served.url, hostile) for _ in range(2))
    assert worst < plain + 0.1, f"/healthz: {worst * 1000:.0f} ms (plain: {plain * 1000:.0f} ms)"
