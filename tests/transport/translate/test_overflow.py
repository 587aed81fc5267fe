"""Context-error wordings (tpx.transport.translate.overflow): each profile's forms find the
recorded bodies of its server, with the numbers they carry, and nothing else."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tpx.transport.translate.overflow import FORMS, overflow_in, too_long
from tpx.transport.translate.profiles import PROFILES, get_profile

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "upstream" / "context_errors.json"
CASES: list[dict[str, Any]] = json.loads(FIXTURES.read_text())["cases"]

NOT_ABOUT_THE_WINDOW = [
    {"error": {"message": "temperature must be at most 2", "type": "invalid_request_error"}},
    {"object": "error", "message": "The model `x` does not exist.", "code": 404},
    {"error": {"message": "max_tokens must be at least 1, got 0.", "code": 400}},
    [{"error": {"code": 400, "message": 'Unknown name "store"', "status": "INVALID_ARGUMENT"}}],
]


def test_every_profile_names_known_forms_and_every_form_is_used() -> None:
    named = {n for p in PROFILES.values() if p.name != "generic" for n in p.overflow}
    assert named == set(FORMS) - {"messages-api"}
    assert set(PROFILES["generic"].overflow) == set(FORMS)
    assert all(PROFILES[name].overflow for name in PROFILES)


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c['profile']}-{c['form']}-{c['n']}")
def test_a_servers_context_error_is_found_with_its_numbers(case: dict[str, Any]) -> None:
    body = json.dumps(case["body"])
    for profile in (case["profile"], "generic"):
        found = overflow_in(body, get_profile(profile).overflow)
        assert found is not None
        assert (found.tokens, found.maximum) == (case["n"], case["m"])
    assert overflow_in(body, get_profile(case["profile"]).overflow).form == case["form"]  # type: ignore[union-attr]


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c['profile']}-{c['form']}-{c['n']}")
def test_every_body_says_where_its_server_builds_it(case: dict[str, Any]) -> None:
    source = case["source"]
    if "closed" in source:  # a hosted API with no public source: where the wording is quoted
        assert set(source) == {"closed"}
        assert source["closed"]
        return
    assert set(source) == {"repo", "commit", "path", "where"}
    assert source["repo"].count("/") == 1
    assert source["path"]
    assert source["where"]
    commit = source["commit"]
    assert commit is None or (len(commit) == 40 and int(commit, 16) >= 0)
    if commit is None:  # no stored snapshot of the server has it: the reason is said
        assert "no stored snapshot" in source["where"]


@pytest.mark.parametrize("body", NOT_ABOUT_THE_WINDOW, ids=str)
def test_other_errors_are_not_context_errors(body: Any) -> None:
    for profile in PROFILES.values():
        assert overflow_in(json.dumps(body), profile.overflow) is None


def test_no_forms_find_nothing() -> None:
    assert overflow_in(json.dumps(CASES[0]["body"]), ()) is None


def test_the_messages_wording_is_what_claude_code_looks_for() -> None:
    assert too_long(9000, 8192) == "prompt is too long: 9000 tokens > 8192 maximum"
