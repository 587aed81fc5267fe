"""The error tree's mapping helpers: HTTP status + provider body, httpx2 failures."""

from __future__ import annotations

import datetime
import email.utils
import ssl

import httpx2
import orjson
import pytest

from tpx import errors
from tpx.transport._http import error_from_httpx, ssl_cause

SECRET = "sk-ant-SECRET-0123456789"


def _anthropic_error(kind: str, message: str) -> bytes:
    return orjson.dumps({"type": "error", "error": {"type": kind, "message": message}})


def _openai_error(message: str, kind: str = "invalid_request_error") -> bytes:
    return orjson.dumps({"error": {"message": message, "type": kind, "code": "x"}})


@pytest.mark.parametrize(
    ("status", "cls", "error_type"),
    [
        (401, errors.UnauthorizedError, "authentication_error"),
        (403, errors.UnauthorizedError, "permission_error"),
        (429, errors.RateLimitedError, "rate_limit_error"),
        (503, errors.OverloadedError, "overloaded_error"),
        (529, errors.OverloadedError, "overloaded_error"),
        (400, errors.HTTPStatusError, "invalid_request_error"),
        (404, errors.HTTPStatusError, "not_found_error"),
        (413, errors.HTTPStatusError, "invalid_request_error"),  # not an SDK error type
        (418, errors.HTTPStatusError, "invalid_request_error"),
        (500, errors.HTTPStatusError, "api_error"),
        (502, errors.HTTPStatusError, "api_error"),
        (307, errors.HTTPStatusError, "api_error"),
    ],
)
def test_status_maps_to_error_class(
    status: int, cls: type[errors.ModelError], error_type: str
) -> None:
    error = errors.error_for_status(status, {}, b"", provider="ANTHROPIC")
    assert type(error) is cls
    assert error.status == status
    assert error.error_type == error_type
    assert error.provider == "ANTHROPIC"
    body = error.body()
    assert body["type"] == "error"
    assert body["error"]["type"] == error_type
    assert body["error"]["message"].startswith(f"{cls.code}: ANTHROPIC returned HTTP {status}")


def test_anthropic_error_body_message_and_type_are_read() -> None:
    error = errors.error_for_status(
        400, {}, _anthropic_error("invalid_request_error", "max_tokens: required"), provider="A"
    )
    assert isinstance(error, errors.HTTPStatusError)
    assert error.message == "A returned HTTP 400: max_tokens: required"
    assert error.error_type == "invalid_request_error"


def test_openai_error_body_message_is_read_and_foreign_type_ignored() -> None:
    error = errors.error_for_status(500, {}, _openai_error("boom", kind="server_error"))
    assert error.message == "provider returned HTTP 500: boom"
    assert error.error_type == "api_error"


def test_openai_error_known_type_is_kept() -> None:
    error = errors.error_for_status(409, {}, _openai_error("conflict", "invalid_request_error"))
    assert error.error_type == "invalid_request_error"
    assert error.status == 409


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (b'{"error": "plain string"}', "plain string"),
        (b'{"message": "top-level"}', "top-level"),
        (b"<html>\n  <b>Bad   gateway</b>\n</html>", "<html> <b>Bad gateway</b> </html>"),
        (b"[1, 2]", "[1, 2]"),
    ],
)
def test_other_bodies_give_a_readable_message(body: bytes, expected: str) -> None:
    error = errors.error_for_status(502, {}, body)
    assert error.message == f"provider returned HTTP 502: {expected}"


def test_empty_body_message() -> None:
    assert errors.error_for_status(500, {}, b"").message == "provider returned HTTP 500"


def test_long_provider_message_is_truncated() -> None:
    error = errors.error_for_status(500, {}, _openai_error("x" * 5000))
    assert len(error.message) < 600
    assert error.message.endswith("...")


@pytest.mark.parametrize(
    "body",
    [
        _anthropic_error("authentication_error", f"invalid x-api-key {SECRET}"),
        _openai_error(f"Incorrect API key provided: {SECRET}"),
        f"bad key {SECRET}".encode(),
    ],
)
def test_provider_error_echoing_the_key_is_redacted(body: bytes) -> None:
    error = errors.error_for_status(401, {}, body, secrets=[SECRET, None])
    assert SECRET not in error.message
    assert SECRET not in str(error)
    assert SECRET not in repr(error)
    assert SECRET not in orjson.dumps(error.body()).decode()
    assert "[REDACTED]" in error.message


def test_retry_after_seconds_kept_on_429() -> None:
    error = errors.error_for_status(429, {"Retry-After": "17"}, b"")
    assert isinstance(error, errors.RateLimitedError)
    assert error.retry_after == 17.0


def test_retry_after_kept_on_overload() -> None:
    assert errors.error_for_status(529, {"retry-after": "2.5"}, b"").retry_after == 2.5
    assert errors.error_for_status(503, {}, b"").retry_after is None


def test_retry_after_ms_wins() -> None:
    headers = {"retry-after-ms": "1500", "retry-after": "9"}
    assert errors.parse_retry_after(headers) == 1.5


def test_retry_after_http_date() -> None:
    when = datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=3600)
    seconds = errors.parse_retry_after({"retry-after": email.utils.format_datetime(when)})
    assert seconds is not None
    assert 3000 < seconds <= 3600


def test_retry_after_date_in_the_past_is_zero() -> None:
    assert errors.parse_retry_after({"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"}) == 0.0


@pytest.mark.parametrize("raw", ["soon", "-1", "nan", "inf", ""])
def test_unreadable_retry_after_is_none(raw: str) -> None:
    assert errors.parse_retry_after({"retry-after": raw}) is None
    assert errors.parse_retry_after({"retry-after-ms": raw}) is None


def test_error_message_from_body_shapes() -> None:
    assert errors.error_message_from_body(_anthropic_error("overloaded_error", "busy")) == (
        "busy",
        "overloaded_error",
    )
    assert errors.error_message_from_body(_openai_error("m", "insufficient_quota")) == ("m", None)
    assert errors.error_message_from_body(b"not json") == (None, None)
    assert errors.error_message_from_body(b'{"error": {"message": 3}}') == (None, None)


def test_model_error_defaults_and_new_keyword() -> None:
    error = errors.RateLimitedError("slow down", retry_after=4.0)
    assert (error.status, error.retry_after, error.code) == (429, 4.0, "MODEL_RATE_LIMITED")
    assert errors.NetworkError("x").retry_after is None


def test_configuration_error_is_a_value_error() -> None:
    assert issubclass(errors.ConfigurationError, errors.TpxError)
    assert issubclass(errors.ConfigurationError, ValueError)


# -- httpx2 failures ----------------------------------------------------------------


def _request() -> httpx2.Request:
    return httpx2.Request("POST", "https://api.example.test/v1/messages")


@pytest.mark.parametrize(
    ("exc", "cls", "needle"),
    [
        (httpx2.ConnectTimeout("t"), errors.TimeoutError, "connect timeout"),
        (httpx2.ReadTimeout("t"), errors.TimeoutError, "read timeout"),
        (httpx2.WriteTimeout("t"), errors.TimeoutError, "write timeout"),
        (httpx2.PoolTimeout("t"), errors.TimeoutError, "pool timeout"),
        (httpx2.ConnectError("refused"), errors.NetworkError, "ConnectError"),
        (httpx2.ReadError("reset"), errors.NetworkError, "ReadError"),
        (httpx2.WriteError("pipe"), errors.NetworkError, "WriteError"),
        (httpx2.RemoteProtocolError("eof"), errors.NetworkError, "RemoteProtocolError"),
        (httpx2.NetworkError("net"), errors.NetworkError, "NetworkError"),
        (httpx2.ProxyError("proxy"), errors.NetworkError, "ProxyError"),
        (httpx2.DecodingError("gzip"), errors.ProtocolError, "undecodable"),
    ],
)
def test_httpx_errors_map(exc: httpx2.HTTPError, cls: type[errors.ModelError], needle: str) -> None:
    error = error_from_httpx(exc, provider="TPX")
    assert type(error) is cls
    assert needle in error.message
    assert error.provider == "TPX"


def _connect_error_caused_by(cause: BaseException) -> httpx2.ConnectError:
    try:
        try:
            raise cause
        except BaseException as inner:
            raise httpx2.ConnectError("handshake failed", request=_request()) from inner
    except httpx2.ConnectError as outer:
        return outer


def test_ssl_error_in_cause_chain_is_tls() -> None:
    cause = ssl.SSLCertVerificationError(1, "[SSL: CERTIFICATE_VERIFY_FAILED] self-signed")
    exc = _connect_error_caused_by(cause)
    assert ssl_cause(exc) is cause
    error = error_from_httpx(exc, provider="ANTHROPIC")
    assert isinstance(error, errors.TLSError)
    assert error.code == "MODEL_TLS"
    assert "CERTIFICATE_VERIFY_FAILED" in error.message


def test_plain_ssl_error_deep_in_chain_is_tls() -> None:
    inner = _connect_error_caused_by(ssl.SSLError(1, "wrong version number"))
    outer = httpx2.ConnectError("outer")
    outer.__cause__ = inner
    assert isinstance(error_from_httpx(outer, provider="TPX"), errors.TLSError)


def test_non_ssl_cause_is_network() -> None:
    exc = _connect_error_caused_by(ConnectionRefusedError(111, "refused"))
    assert ssl_cause(exc) is None
    assert isinstance(error_from_httpx(exc, provider="TPX"), errors.NetworkError)


def test_httpx_error_messages_are_redacted() -> None:
    error = error_from_httpx(httpx2.ReadError(f"echo {SECRET}"), provider="A", secrets=[SECRET])
    assert SECRET not in error.message


@pytest.mark.parametrize(
    "exc",
    [
        httpx2.ReadTimeout("t"),
        httpx2.ConnectError("refused"),
        httpx2.DecodingError("gzip"),
        _connect_error_caused_by(ssl.SSLError(1, "wrong version number")),
    ],
)
def test_httpx_error_messages_keep_the_exception_class_and_are_not_chained(
    exc: httpx2.HTTPError,
) -> None:
    error = error_from_httpx(exc, provider="TPX")
    assert type(exc).__name__ in error.message
    assert error.__cause__ is None
    assert error.__context__ is None


def test_httpx_error_messages_are_redacted_in_escaped_forms_too() -> None:
    secret = "tok\nSECRET-é"
    value = f"Bearer {secret}".encode()
    exc = httpx2.LocalProtocolError(f"Illegal header value {value!r}")
    plain = error_from_httpx(exc, provider="TPX", secrets=[secret])
    assert "SECRET" in plain.message  # exact-string redaction alone misses the bytes repr
    error = error_from_httpx(exc, provider="TPX", secrets=errors.secret_forms([secret]))
    assert "SECRET" not in error.message
    assert "LocalProtocolError" in error.message
    assert "[REDACTED]" in error.message


_TOKEN = "sk-proj-Q7wE3rT9yU1iO5pA8sD2fG6hJ4kL0zXcVbNm"


def test_a_provider_message_is_shown_whole_or_withheld_whole() -> None:
    forms = errors.secret_forms([_TOKEN])
    quoting = {"error": {"message": f"The model `{_TOKEN[:20]}...` does not exist"}}
    error = errors.error_for_status(404, {}, orjson.dumps(quoting), secrets=forms)
    assert (
        error.message == f"provider returned HTTP 404: The model `{_TOKEN[:20]}...` does not exist"
    )
    echoing = {"error": {"message": f"The model `{_TOKEN}` does not exist"}}
    error = errors.error_for_status(404, {}, orjson.dumps(echoing), secrets=forms)
    assert error.message == "provider returned HTTP 404: [REDACTED]"
    assert error.body()["error"]["type"] == "not_found_error"
    long = {"error": {"message": "x" * 490 + _TOKEN}}  # whole before the cut, withheld
    error = errors.error_for_status(400, {}, orjson.dumps(long), secrets=forms)
    assert error.message == "provider returned HTTP 400: [REDACTED]"


def test_a_401_is_withheld_for_any_piece_of_the_credential() -> None:
    forms = errors.secret_forms([_TOKEN])
    body = {"error": {"message": f"Incorrect API key provided: {_TOKEN[:12]}****{_TOKEN[-4:]}"}}
    error = errors.error_for_status(401, {}, orjson.dumps(body), secrets=forms)
    assert error.message == "provider returned HTTP 401: [REDACTED]"
    assert isinstance(error, errors.UnauthorizedError)
    plain = {"error": {"message": "invalid x-api-key"}}
    error = errors.error_for_status(401, {}, orjson.dumps(plain), secrets=forms)
    assert error.message == "provider returned HTTP 401: invalid x-api-key"


def test_withheld_and_redact_differ_as_the_rules_say() -> None:
    forms = errors.secret_forms([_TOKEN])
    text = f"quoting {_TOKEN[3:15]} and {_TOKEN[:6]}..."
    assert errors.withheld(text, forms) == text  # pieces only: shown whole
    assert errors.redact(text, forms) == "quoting [REDACTED] and [REDACTED]..."
    assert errors.withheld(f"a {_TOKEN} b", forms) == errors.WITHHELD


@pytest.mark.parametrize(
    "body",
    [
        _openai_error("This model's maximum context length is 4096 tokens.", "x"),
        orjson.dumps({"error": {"message": "too big", "code": "context_length_exceeded"}}),
        orjson.dumps({"error": {"message": "the request exceeds the available context size"}}),
    ],
)
def test_a_context_overflow_says_prompt_is_too_long(body: bytes) -> None:
    error = errors.error_for_status(400, {}, body, provider="TPX")
    assert error.status == 400
    assert error.error_type == "invalid_request_error"
    assert error.body()["error"]["message"].startswith(f"{error.code}: prompt is too long: ")


def test_another_400_keeps_its_words() -> None:
    error = errors.error_for_status(400, {}, _openai_error("bad tool schema"), provider="TPX")
    assert "prompt is too long" not in error.body()["error"]["message"]
