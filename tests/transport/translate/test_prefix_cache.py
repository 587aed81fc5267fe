"""Prefix-cache friendliness: Claude Code's billing-header system block is not sent to TPX
upstreams (a profile switch), so a session's translated prompts grow by appending: the
previous turn's prompt is a prefix of the next one's, even when the header changes."""

from __future__ import annotations

import copy
import itertools
import json
from pathlib import Path
from typing import Any

import attrs
import orjson
import pytest

from tpx.transport.translate import request_to_openai
from tpx.transport.translate.profiles import PROFILES, Profile, get_profile

RECORDED = Path(__file__).resolve().parents[2] / "fixtures" / "clients" / "claude-code" / "2.1.197"
SESSIONS = sorted(p for p in RECORDED.iterdir() if p.is_dir())


def _turns(session: Path) -> list[dict[str, Any]]:
    return [
        json.loads(f.read_text())["body"] for f in sorted(session.glob("*-post-v1-messages.json"))
    ]


def _prompt(body: dict[str, Any], profile: Profile) -> bytes:
    """What the model reads, in order: the tools, then the messages (rendered as JSON)."""
    translated = request_to_openai(body, model="m", profile=profile).body
    return orjson.dumps(translated.get("tools")) + orjson.dumps(translated["messages"])[:-1]


def _other_header(body: dict[str, Any]) -> dict[str, Any]:
    """*body* with the billing header another request of the same CLI sent (``...363``)."""
    changed = copy.deepcopy(body)
    changed["system"][0]["text"] = changed["system"][0]["text"].replace(".c0d;", ".363;")
    assert changed != body
    return changed


@pytest.mark.parametrize("profile", sorted(PROFILES))
@pytest.mark.parametrize("session", SESSIONS, ids=lambda p: p.name)
def test_each_turn_extends_the_previous_turns_prompt(session: Path, profile: str) -> None:
    turns = _turns(session)
    assert len(turns) >= 2
    chosen = get_profile(profile)
    for earlier, later in itertools.pairwise(turns):
        before = _prompt(earlier, chosen)
        after = _prompt(_other_header(later), chosen)
        assert after.startswith(before), session.name


def test_the_billing_header_is_not_sent_and_the_switch_keeps_it() -> None:
    body = _turns(SESSIONS[0])[0]
    assert body["system"][0]["text"].startswith("x-anthropic-billing-header:")
    for keep in (False, True):
        profile = attrs.evolve(get_profile("vllm"), drop_billing_header=not keep)
        first = request_to_openai(body, model="m", profile=profile).body["messages"][0]
        text = orjson.dumps(first["content"]).decode()
        assert ("x-anthropic-billing-header" in text) is keep
        assert "You are a Claude agent" in text


def test_with_the_header_kept_a_changed_header_breaks_the_prefix() -> None:
    earlier, later = _turns(SESSIONS[0])[:2]
    profile = attrs.evolve(get_profile("vllm"), drop_billing_header=False)
    assert not _prompt(_other_header(later), profile).startswith(_prompt(earlier, profile))


def test_only_a_first_block_is_taken_for_the_header() -> None:
    body = {
        "model": "m",
        "max_tokens": 8,
        "system": [
            {"type": "text", "text": "You are helpful."},
            {"type": "text", "text": "x-anthropic-billing-header: quoted later"},
        ],
        "messages": [{"role": "user", "content": "hi"}],
    }
    first = request_to_openai(body, model="m", profile="vllm").body["messages"][0]
    assert "x-anthropic-billing-header: quoted later" in orjson.dumps(first).decode()
