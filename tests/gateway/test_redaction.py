"""tpx.gateway.redaction: the prepared secrets and the fast redactor (same result as redact)."""

from __future__ import annotations

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tpx.errors import redact, secret_forms
from tpx.exchange import Exchange, Provider
from tpx.gateway.core import Gateway
from tpx.gateway.redaction import Redactor, prepared
from tpx.gateway.settings import Credential
from tpx.gateway.turn import Conversation

from .conftest import make_settings

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
