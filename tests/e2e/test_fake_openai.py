"""The fake upstream answers like Chat Completions (checked with the official openai SDK) and its
ledger catches lost, invented and cross-paired tool results."""

from __future__ import annotations

from typing import Any

import anyio
import httpx2
import openai
import orjson
import pytest

from tests.e2e.fake_openai import FakeOpenAI

TOOLS: Any = [{"type": "function", "function": {"name": "echo", "parameters": {"type": "object"}}}]


def _client(app: FakeOpenAI) -> openai.AsyncOpenAI:
    http = httpx2.AsyncClient(transport=httpx2.ASGITransport(app=app))
    return openai.AsyncOpenAI(
        api_key="tok", base_url="http://fake/v1", http_client=http, max_retries=0
    )


async def _turn(
    client: openai.AsyncOpenAI, messages: list[Any], stream: bool
) -> tuple[str | None, list[tuple[str, str, str]]]:
    """One turn; returns (text, [(id, name, arguments)])."""
    if not stream:
        reply = await client.chat.completions.create(model="m", messages=messages, tools=TOOLS)
        msg = reply.choices[0].message
        return msg.content, [
            (c.id, c.function.name, c.function.arguments)
            for c in msg.tool_calls or []
            if c.type == "function"
        ]
    text = ""
    calls: dict[int, list[str]] = {}
    events = await client.chat.completions.create(
        model="m",
        messages=messages,
        tools=TOOLS,
        stream=True,
        stream_options={"include_usage": True},
    )
    async for chunk in events:
        for choice in chunk.choices:
            text += choice.delta.content or ""
            for tc in choice.delta.tool_calls or []:
                slot = calls.setdefault(tc.index, ["", "", ""])
                slot[0] += tc.id or ""
                slot[1] += (tc.function.name or "") if tc.function else ""
                slot[2] += (tc.function.arguments or "") if tc.function else ""
    return text or None, [(a, b, c) for a, b, c in (calls[i] for i in sorted(calls))]


async def _conversation(
    client: openai.AsyncOpenAI, cid: str, stream: bool, tamper: bool = False
) -> str:
    messages: list[Any] = [{"role": "user", "content": f"go [conv:{cid}] [turns:3]"}]
    for _ in range(10):
        text, calls = await _turn(client, messages, stream)
        if not calls:
            assert text is not None
            return text
        messages.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": i, "type": "function", "function": {"name": n, "arguments": a}}
                    for i, n, a in calls
                ],
            }
        )
        for i, _, a in calls:
            content = f"result:{a}" if not tamper else "result:{}"
            messages.append({"role": "tool", "tool_call_id": i, "content": content})
    raise AssertionError("conversation did not end")


@pytest.mark.parametrize("stream", [False, True])
def test_load_script_runs_clean_and_parallel(stream: bool) -> None:
    app = FakeOpenAI(script="load", token="tok")

    async def main() -> list[str]:
        client = _client(app)
        results: list[str] = []

        async def one(cid: str) -> None:
            results.append(await _conversation(client, cid, stream))

        async with anyio.create_task_group() as tg:
            for n in range(20):
                tg.start_soon(one, f"c{n}")
        return results

    results = anyio.run(main)
    snap = app.ledger.snapshot()
    assert sorted(results) == sorted(f"final c{n}" for n in range(20))
    assert snap["violations"] == []
    conv = snap["conversations"]["c7"]
    assert conv["final"] is True
    assert [len(conv["emitted"][t]) for t in ("0", "1", "2", "3")] == [1, 2, 3, 0]
    assert conv["streamed"] == (4 if stream else 0)


def test_tampered_results_are_violations() -> None:
    app = FakeOpenAI(script="load")
    anyio.run(lambda: _conversation(_client(app), "bad", True, tamper=True))
    violations = app.ledger.snapshot()["violations"]
    assert violations
    assert all("does not answer" in v for v in violations)


def test_cross_paired_ids_are_violations() -> None:
    app = FakeOpenAI(script="load")

    async def main() -> None:
        client = _client(app)
        _, calls_a = await _turn(client, [{"role": "user", "content": "[conv:a]"}], False)
        _, calls_b = await _turn(client, [{"role": "user", "content": "[conv:b]"}], False)
        (ida, name, args), (idb, _, _) = calls_a[0], calls_b[0]
        call = {"id": idb, "type": "function", "function": {"name": name, "arguments": args}}
        history: list[Any] = [
            {"role": "user", "content": "[conv:a]"},
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": idb, "content": f"result:{args}"},
        ]
        await _turn(client, history, False)
        assert ida != idb

    anyio.run(main)
    violations = app.ledger.snapshot()["violations"]
    assert len(violations) == 2  # the assistant's tool_calls and the tool result both mismatch
    assert all(v.startswith("a turn 0") for v in violations)


def test_fault_fires_once_then_the_turn_is_answered() -> None:
    app = FakeOpenAI(script="bash", command="true")

    async def main() -> None:
        client = _client(app)
        first = [{"role": "user", "content": "[conv:f] [fail-turn:1] [fail-status:503]"}]
        _, calls = await _turn(client, first, True)
        (cid, name, args) = calls[0]
        assert (name, orjson.loads(args)) == ("Bash", {"command": "true"})
        history: list[Any] = [
            *first,
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": cid, "type": "function", "function": {"name": name, "arguments": args}}
                ],
            },
            {"role": "tool", "tool_call_id": cid, "content": "ok"},
        ]
        with pytest.raises(openai.APIStatusError) as err:
            await _turn(client, history, True)
        assert err.value.status_code == 503
        text, calls = await _turn(client, history, True)
        assert (text, calls) == ("tpx-e2e-final f", [])

    anyio.run(main)
    snap = app.ledger.snapshot()
    assert snap["violations"] == []
    assert snap["conversations"]["f"]["faults"] == 1


def test_wrong_token_and_unknown_path() -> None:
    app = FakeOpenAI(token="right")

    async def main() -> tuple[int, int]:
        async with httpx2.AsyncClient(transport=httpx2.ASGITransport(app=app)) as http:
            bad = await http.post(
                "http://fake/v1/chat/completions", json={}, headers={"authorization": "Bearer no"}
            )
            missing = await http.get("http://fake/nope")
            return bad.status_code, missing.status_code

    assert anyio.run(main) == (401, 404)


def test_gated_stream_waits_for_release() -> None:
    app = FakeOpenAI(script="load")

    async def main() -> tuple[bool, list[tuple[str, str, str]]]:
        client = _client(app)
        result: list[tuple[str | None, list[tuple[str, str, str]]]] = []
        messages: Any = [{"role": "user", "content": "[conv:g] [hold:gate]"}]

        async def one() -> None:
            result.append(await _turn(client, messages, True))

        async with anyio.create_task_group() as tg:
            tg.start_soon(one)
            await anyio.sleep(0.3)
            waited = not result
            async with httpx2.AsyncClient(transport=httpx2.ASGITransport(app=app)) as http:
                assert (await http.post("http://fake/_release")).status_code == 200
        return waited, result[0][1]

    waited, calls = anyio.run(main)
    assert waited
    assert [orjson.loads(a) for _, _, a in calls] == [{"conv": "g", "turn": 0, "i": 0}]
