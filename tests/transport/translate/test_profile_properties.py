"""Property: every profile translates any tool history (with mid-conversation system
messages and reasoning options) into a body its SDK type accepts, pairing kept."""

from __future__ import annotations

from typing import Any

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tpx.transport.translate import PROFILES, request_bytes_to_openai, request_to_openai

from .sdk import validate_openai_request
from .strategies import messages_history

_SETTINGS = settings(deadline=None, max_examples=30, suppress_health_check=[HealthCheck.too_slow])
_OPTIONS = st.fixed_dictionaries(
    {},
    optional={
        "thinking": st.sampled_from(
            [
                {"type": "adaptive"},
                {"type": "disabled"},
                {"type": "enabled", "budget_tokens": 1024},
                {"type": "enabled", "budget_tokens": 31999},
            ]
        ),
        "output_config": st.sampled_from([{"effort": e} for e in ("low", "medium", "high", "max")]),
        "context_management": st.just(
            {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]}
        ),
        "metadata": st.sampled_from([{"user_id": "u"}, {"user_id": "x" * 300}]),
    },
)


def _with_system_messages(request: dict[str, Any], where: list[bool]) -> dict[str, Any]:
    """*request* with a ``role: system`` message after user messages (where *where* says)."""
    messages: list[dict[str, Any]] = []
    users = 0
    for message in request["messages"]:
        messages.append(message)
        if message["role"] == "user":
            if where[users % len(where)]:
                messages.append({"role": "system", "content": f"reminder {users}"})
            users += 1
    return {**request, "messages": messages}


@_SETTINGS
@given(
    case=messages_history(),
    where=st.lists(st.booleans(), min_size=1, max_size=4),
    options=_OPTIONS,
)
def test_every_profile_keeps_pairing_and_validates(
    case: tuple[dict[str, Any], list[list[str | None]]],
    where: list[bool],
    options: dict[str, Any],
) -> None:
    request = {**_with_system_messages(case[0], where), **options}
    reminder_texts = [m["content"] for m in request["messages"] if m["role"] == "system"]
    reminders = len(reminder_texts)
    for name, profile in PROFILES.items():
        body = request_to_openai(request, profile=name).body
        validate_openai_request(body)
        assert orjson.loads(request_bytes_to_openai(orjson.dumps(request), profile=name)) == body
        messages = body["messages"]
        for index, message in enumerate(messages):
            calls = [call["id"] for call in message.get("tool_calls", ())]
            if calls:  # answered at once, in order, whatever the system placement
                answers = messages[index + 1 : index + 1 + len(calls)]
                assert [m.get("tool_call_id") for m in answers] == calls, name
        dumped = orjson.dumps(body).decode()
        for text in reminder_texts:  # every system text reaches the upstream
            assert text in dumped, name
        if profile.system != "anywhere":
            assert sum(m["role"] == "system" for m in messages) <= 1, name
        elif reminders:
            assert sum(m["role"] == "system" for m in messages) == reminders, name
