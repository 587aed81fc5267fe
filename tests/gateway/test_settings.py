"""Settings (flags > env > TOML), the model map, token commands (refresh on 401), signed ids."""

from __future__ import annotations

import asyncio
import itertools
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import anthropic
import httpx2
import orjson
import pytest

import tpx.sdk
from tpx.errors import ConfigurationError, UnauthorizedError
from tpx.gateway import credential as credential_module
from tpx.gateway.asgi import create_app
from tpx.gateway.settings import BACKOFF_FIRST, BACKOFF_MAX, Credential, Settings, load_settings
from tpx.gateway.token_command import run_token_command
from tpx.transport.exchange import Provider
from tpx.transport.translate.ids import sign_caller_id, to_caller_id, verify_signed_id

from .conftest import serving
from .fakes import FakeUpstream

CONFIG = """
[server]
port = 9999
[upstream]
base_url = "http://file.test/v1"
model = "big-model"
[limits]
max_body_bytes = 1000
ping_interval = 2.5
[[models]]
match = "*haiku*"
model = "small-model"
max_tokens = 100
[[models]]
match = "*"
max_tokens = 8000
"""


def _config(tmp_path: Path) -> Path:
    path = tmp_path / "tpx.toml"
    path.write_text(CONFIG)
    return path


def test_flags_beat_env_beat_file(tmp_path: Path) -> None:
    env = {"TPX_OAUTH_TOKEN": "s3cr3t", "TPX_BASE_URL": "http://env.test"}
    settings = load_settings(env=env, config_file=_config(tmp_path), port=1234)
    assert settings.provider is Provider.TPX
    assert settings.port == 1234
    assert settings.base_url == "http://env.test"
    assert settings.model == "big-model"
    assert settings.limits.max_body_bytes == 1000
    assert settings.limits.ping_interval == 2.5
    from_file = load_settings(env={"TPX_OAUTH_TOKEN": "s3cr3t"}, config_file=_config(tmp_path))
    assert from_file.port == 9999
    assert from_file.base_url == "http://file.test"
    assert "s3cr3t" not in repr(from_file)


def test_profile_flag_beats_env_beats_file(tmp_path: Path) -> None:
    path = tmp_path / "profile.toml"
    path.write_text('[upstream]\nprofile = "gemini"\n')
    env = {"TPX_OAUTH_TOKEN": "s3cr3t", "TPX_BASE_URL": "http://env.test"}
    assert load_settings(env=env).profile.name == "generic"
    assert load_settings(env=env, config_file=path).profile.name == "gemini"
    with_env = {**env, "TPX_PROFILE": "DeepSeek"}
    assert load_settings(env=with_env, config_file=path).profile.name == "deepseek"
    flagged = load_settings(env=with_env, config_file=path, profile="openai")
    assert flagged.profile.name == "openai"
    assert "profile='openai'" in repr(flagged)
    with pytest.raises(ConfigurationError, match="unknown upstream profile"):
        load_settings(env={**env, "TPX_PROFILE": "nope"})
    path.write_text("[upstream]\nprofile = 3\n")
    with pytest.raises(ConfigurationError, match="wrong type"):
        load_settings(env=env, config_file=path)


def test_thinking_secret_from_env_only_and_never_shown(tmp_path: Path) -> None:
    env = {"TPX_OAUTH_TOKEN": "s3cr3t", "TPX_BASE_URL": "http://env.test"}
    unset = load_settings(env=env)
    assert unset.thinking_secret is None
    set_ = load_settings(env={**env, "TPX_THINKING_SECRET": " think-KEY-42 "})
    assert set_.thinking_secret == "think-KEY-42"
    assert "think-KEY-42" not in repr(set_) + str(set_) + repr(set_.signer)
    assert "think-KEY-42" in set_.secret_values()  # redacted from logs and errors
    text = "I reason."
    same = load_settings(env={**env, "TPX_THINKING_SECRET": "think-KEY-42"})
    assert same.signer.verify(text, set_.signer.sign(text))
    assert not unset.signer.verify(text, set_.signer.sign(text))


def test_selection_is_boots() -> None:
    both = load_settings(env={"ANTHROPIC_API_KEY": "k", "TPX_OAUTH_TOKEN": "t"})
    assert both.provider is Provider.ANTHROPIC
    assert load_settings(env={}).provider is Provider.NONE
    with pytest.raises(ConfigurationError):
        load_settings(env={"TPX_OAUTH_TOKEN": "t"})  # no TPX_BASE_URL


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("[[models]]\nmodel = 'x'\n", "needs a string 'match'"),
        ("[limits]\nbody_timeout = 'slow'\n", "wrong type"),
        ("not = [toml", "not valid TOML"),
        ("[limits]\nping_interval = 0\n", r"limits.ping_interval must be > 0"),
        ("[limits]\ntail_cache = -1\n", r"limits.tail_cache must be >= 0"),
    ],
)
def test_bad_config_files(tmp_path: Path, text: str, problem: str) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(ConfigurationError, match=problem):
        load_settings(env={}, config_file=path)


def test_limits_take_fractions_and_the_tail_cache_may_be_off(tmp_path: Path) -> None:
    path = tmp_path / "limits.toml"
    path.write_text("[limits]\nping_interval = 0.05\ntail_cache = 0\n")
    limits = load_settings(env={}, config_file=path).limits
    assert limits.ping_interval == 0.05
    assert limits.tail_cache == 0


def test_model_map_and_ceiling(tmp_path: Path) -> None:
    fake = FakeUpstream("TPX")
    env = {"TPX_OAUTH_TOKEN": "tok", "TPX_BASE_URL": "http://up.test"}
    settings = load_settings(env=env, config_file=_config(tmp_path))
    with tpx.sdk.anthropic_client(settings=settings, upstream=fake.transport()) as client:
        for model in ("claude-haiku-4", "claude-opus-5"):
            client.messages.create(
                model=model, max_tokens=64000, messages=[{"role": "user", "content": "hi"}]
            )
    assert (fake.seen[0]["model"], fake.seen[0]["max_tokens"]) == ("small-model", 100)
    assert (fake.seen[1]["model"], fake.seen[1]["max_tokens"]) == ("big-model", 8000)


def test_token_command_is_rerun_once_on_401(tmp_path: Path) -> None:
    counter = tmp_path / "n"
    script = tmp_path / "token.py"
    script.write_text(
        "import pathlib\n"
        f"p = pathlib.Path({str(counter)!r})\n"
        "n = int(p.read_text()) + 1 if p.exists() else 1\n"
        "p.write_text(str(n))\n"
        "print(f'token-{n}')\n"
    )
    env = {"TPX_OAUTH_TOKEN_COMMAND": f"{sys.executable} {script}", "TPX_BASE_URL": "http://u.t"}
    settings = load_settings(env=env)
    assert settings.provider is Provider.TPX
    fake = FakeUpstream("TPX")
    seen: list[str] = []

    def upstream(request: httpx2.Request) -> httpx2.Response:
        seen.append(request.headers["authorization"])
        if request.headers["authorization"] == "Bearer token-1":
            return httpx2.Response(401, json={"error": {"message": "expired"}})
        return fake.handle(request)

    with tpx.sdk.anthropic_client(
        settings=settings, upstream=httpx2.MockTransport(upstream)
    ) as client:
        reply = client.messages.create(
            model="m", max_tokens=8, messages=[{"role": "user", "content": "hi"}]
        )
    assert reply.stop_reason == "tool_use"
    assert seen == ["Bearer token-1", "Bearer token-2"]
    assert "token-" not in repr(settings)


def test_signed_ids_round_trip_and_refuse_tampering() -> None:
    unsigned = to_caller_id("call_1", 0)
    signed = sign_caller_id(unsigned, b"k1")
    assert signed != unsigned
    assert verify_signed_id(signed, b"k1") == unsigned
    assert verify_signed_id(signed, b"k2") is None
    assert verify_signed_id(unsigned, b"k1") is None
    assert verify_signed_id(signed.replace("call_1", "call_2"), b"k1") is None
    with pytest.raises(ValueError, match="canonical"):
        sign_caller_id("toolu_1", b"k1")


# -- key rotation ---------------------------------------------------------------------------


def _env(gateway_secret: str, thinking_secret: str) -> dict[str, str]:
    return {
        "TPX_OAUTH_TOKEN": "tok-rotation-0001",
        "TPX_BASE_URL": "http://u.t",
        "TPX_GATEWAY_SECRET": gateway_secret,
        "TPX_THINKING_SECRET": thinking_secret,
        "TPX_PROFILE": "vllm",  # verified thinking goes back as reasoning_content
    }


def test_secrets_list_a_current_key_and_older_ones_never_shown() -> None:
    settings = load_settings(env=_env(" id-new, id-old\tid-older ", "think-new,think-old"))
    assert settings.secret == b"id-new"
    assert settings.previous_secrets == (b"id-old", b"id-older")
    assert settings.id_keys == (b"id-new", b"id-old", b"id-older")
    assert {"think-new", "think-old"} <= set(settings.secret_values())
    for shown in (repr(settings), str(settings)):
        assert "id-" not in shown
        assert "think-" not in shown
    single = load_settings(env=_env("only-key", "think"))
    assert (single.secret, single.previous_secrets) == (b"only-key", ())


def _first_turn(fake: FakeUpstream, env: dict[str, str]) -> Any:
    """A gateway with *env* answers a first turn: its (tool_use) reply."""
    with tpx.sdk.anthropic_client(env=env, upstream=fake.transport()) as client:
        return client.messages.create(
            model="m", max_tokens=64, messages=[{"role": "user", "content": "hi"}]
        )


def _second_turn(fake: FakeUpstream, env: dict[str, str], reply: Any) -> Any:
    """A gateway with *env* takes the next turn of the conversation *reply* began (its tool
    ids and thinking signature come back): the raw HTTP reply."""
    blocks = [block.model_dump(exclude_none=True) for block in reply.content]
    results = [
        {"type": "tool_result", "tool_use_id": block["id"], "content": "ok"}
        for block in blocks
        if block["type"] == "tool_use"
    ]
    assert results
    messages: list[Any] = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": blocks},
        {"role": "user", "content": results},
    ]
    with tpx.sdk.anthropic_client(env=env, upstream=fake.transport(), max_retries=0) as client:
        return client.messages.with_raw_response.create(model="m", max_tokens=64, messages=messages)


@pytest.mark.parametrize("seeded", [False, True], ids=["real", "current-key-only-bug"])
def test_ids_and_thinking_signed_under_a_key_still_listed_verify_after_rotation(
    seeded: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Gateway A signs with k1; B lists k2 (current) and k1: A's tool ids and thinking
    signatures verify there (the thinking goes back upstream as reasoning); C lists only
    k2: A's id is refused with the Messages-shaped 400, before the wire (a thinking
    signature under a retired key: tests/transport/translate/test_ids.py). The seeded bug, ids
    verified with the current key only, is refused at B."""
    if seeded:
        monkeypatch.setattr(Settings, "id_keys", property(lambda self: (self.secret,)))
    fake = FakeUpstream("TPX", reasoning="thought-7f3a")
    first = _first_turn(fake, _env("k1", "t1"))
    assert [block.type for block in first.content][:1] == ["thinking"]
    if seeded:
        with pytest.raises(anthropic.BadRequestError, match="is not a tool_use id"):
            _second_turn(fake, _env("k2, k1", "t2 t1"), first)
        return
    rotated = _second_turn(fake, _env("k2, k1", "t2 t1"), first)
    assert rotated.http_response.status_code == 200
    forwarded = orjson.dumps(fake.seen[-1]).decode()
    assert "thought-7f3a" in forwarded  # the signature verified under the older key
    # a reply of the rotated gateway is signed with its current key
    again = _first_turn(fake, _env("k2, k1", "t2 t1"))
    ids = [block.id for block in again.content if block.type == "tool_use"]
    unsigned = verify_signed_id(ids[0], b"k2")
    assert unsigned is not None
    assert verify_signed_id(ids[0], b"k1") is None
    retired = FakeUpstream("TPX", reasoning="thought-7f3a")
    with pytest.raises(anthropic.BadRequestError) as info:
        _second_turn(retired, _env("k2", "t2"), first)
    error = info.value.response
    assert error.status_code == 400
    body = error.json()
    assert body["type"] == "error"
    assert body["error"]["type"] == "invalid_request_error"
    assert "is not a tool_use id this gateway issued" in body["error"]["message"]
    assert not retired.seen  # refused before the wire


# -- the token command: single flight, backoff, bounds ---------------------------------------


def _counting_command(tmp_path: Path) -> tuple[str, Path]:
    """A token command printing ``token-N`` on its N-th run (runs counted in a file)."""
    counter = tmp_path / "runs"
    script = tmp_path / "token.py"
    script.write_text(
        "import fcntl, pathlib\n"
        f"p = pathlib.Path({str(counter)!r})\n"
        "with open(p, 'a+') as f:\n"
        "    fcntl.flock(f, fcntl.LOCK_EX)\n"
        "    f.seek(0)\n"
        "    n = len(f.read()) + 1\n"
        "    f.write('x')\n"
        "print(f'token-{n}')\n"
    )
    return f"{sys.executable} {script}", counter


def _runs(counter: Path) -> int:
    return len(counter.read_text()) if counter.exists() else 0


def _always_run(self: Credential, refused: str) -> str | None:
    """A seeded bug: every 401 runs the command (no single flight, no backoff)."""
    return self.refresh()


@pytest.mark.parametrize("seeded", [False, True], ids=["real", "run-per-401-bug"])
def test_concurrent_401s_run_the_token_command_once(
    tmp_path: Path, seeded: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Five turns in flight together all meet a 401 for the first token: ONE run of the
    command makes the token all five are re-sent with (the seeded bug: five runs)."""
    if seeded:
        monkeypatch.setattr(Credential, "refresh_after", _always_run)
    command, counter = _counting_command(tmp_path)
    settings = load_settings(env={"TPX_OAUTH_TOKEN_COMMAND": command, "TPX_BASE_URL": "http://u.t"})
    assert _runs(counter) == 1
    fake = FakeUpstream("TPX")

    async def upstream(request: httpx2.Request) -> httpx2.Response:
        if request.headers["authorization"] == "Bearer token-1":
            await asyncio.sleep(0.3)  # all five are refused together
            return httpx2.Response(401, json={"error": {"message": "expired"}})
        return fake.handle(request)

    app = create_app(settings, transport=httpx2.MockTransport(upstream))
    body = {"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]}
    with (
        serving(app) as url,
        httpx2.Client(base_url=url, timeout=30) as client,
        ThreadPoolExecutor(5) as pool,
    ):
        replies = list(pool.map(lambda _: client.post("/v1/messages", json=body), range(5)))
    assert [reply.status_code for reply in replies] == [200] * 5
    assert _runs(counter) == (6 if seeded else 2)


def test_a_token_the_upstream_keeps_refusing_is_not_remade_within_the_backoff(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every token gets a 401: the first 401 runs the command, the next ones within the
    backoff do not (the 401 stands); once the delay has passed, one run again (the first
    delay shortened from 1 s to keep the test fast)."""
    monkeypatch.setattr(credential_module, "BACKOFF_FIRST", 0.3)
    command, counter = _counting_command(tmp_path)
    settings = load_settings(env={"TPX_OAUTH_TOKEN_COMMAND": command, "TPX_BASE_URL": "http://u.t"})
    seen: list[str] = []

    def upstream(request: httpx2.Request) -> httpx2.Response:
        seen.append(request.headers["authorization"])
        return httpx2.Response(401, json={"error": {"message": "no"}})

    messages = [{"role": "user", "content": "hi"}]
    with tpx.sdk.anthropic_client(
        settings=settings, upstream=httpx2.MockTransport(upstream), max_retries=0
    ) as client:

        def turn() -> int:
            with pytest.raises(anthropic.APIStatusError) as info:
                client.messages.create(model="m", max_tokens=8, messages=messages)  # type: ignore[arg-type]
            return info.value.status_code

        statuses = [turn() for _ in range(4)]
        assert _runs(counter) == 2  # at load, then once for the first 401
        assert seen == [
            "Bearer token-1",
            "Bearer token-2",
            "Bearer token-2",
            "Bearer token-2",
            "Bearer token-2",
        ]
        time.sleep(0.4)
        statuses.append(turn())
        assert _runs(counter) == 3
        statuses.append(turn())
        assert _runs(counter) == 3  # the delay doubled
    assert set(statuses) == {502}  # the upstream refused the gateway
    assert "token-" not in repr(settings)


def test_a_token_command_printing_too_much_or_overrunning_is_stopped(tmp_path: Path) -> None:
    flood = f"{sys.executable} -c \"import sys; sys.stdout.write('x' * 50_000_000)\""
    with pytest.raises(UnauthorizedError, match=r"printed more than 65536 bytes") as info:
        load_settings(env={"TPX_OAUTH_TOKEN_COMMAND": flood, "TPX_BASE_URL": "http://u.t"})
    assert "xxxx" not in str(info.value)
    config = tmp_path / "tpx.toml"
    config.write_text("[upstream]\ntoken_timeout = 0.5\n")
    began = time.monotonic()
    with pytest.raises(UnauthorizedError, match=r"did not finish within 0.5 s"):
        load_settings(
            env={"TPX_OAUTH_TOKEN_COMMAND": "echo tok; sleep 30", "TPX_BASE_URL": "http://u.t"},
            config_file=config,
        )
    assert time.monotonic() - began < 5


def test_a_token_command_is_killed_with_its_children() -> None:
    """The shell's background child holding stdout is killed too (a session of its own)."""
    began = time.monotonic()
    with pytest.raises(UnauthorizedError, match="did not finish"):
        run_token_command("sleep 30 & echo tok", timeout=0.5)
    assert time.monotonic() - began < 5


class _Clock:
    """A stand-in for the ``time`` module in tpx.gateway.settings: a clock the test moves."""

    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now


def test_the_backoff_doubles_up_to_its_ceiling_and_starts_over_once_a_token_works(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The gaps between 401-driven runs (the upstream refusing every token): 1, 2, 4, ...
    seconds up to 60; a reply that is not a 401 starts them over."""
    clock = _Clock()
    monkeypatch.setattr(credential_module, "time", clock)
    credential = Credential.from_command("echo tok-same", ttl=10_000)

    def runs_until(end: float) -> list[float]:
        ran = []
        while clock.now < end:
            if credential.refresh_after("tok-same") is not None:
                ran.append(clock.now)
            clock.now += 0.5
        return ran

    ran = runs_until(clock.now + 300)
    gaps = [b - a for a, b in itertools.pairwise(ran)]
    assert gaps[:7] == [BACKOFF_FIRST * 2**n for n in range(6)] + [BACKOFF_MAX]
    assert set(gaps[6:]) == {BACKOFF_MAX}
    credential.worked()
    clock.now += BACKOFF_MAX
    again = runs_until(clock.now + 4)
    assert [b - a for a, b in itertools.pairwise(again)] == [BACKOFF_FIRST, 2.0]
