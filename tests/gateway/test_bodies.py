"""tpx.gateway.bodies: a kept tail gives exactly what ``orjson.loads`` gives, and is never
changed by the requests that share it."""

from __future__ import annotations

import copy
import json
import pickle
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given, settings

from tests.fuzz.strategies import json_member_runs
from tests.gateway.bodies_oracle import read_as_orjson
from tpx._safe import MAX_DEPTH, parsed_too_deep
from tpx.gateway.bodies import BodyReader
from tpx.transport.translate.profiles import PROFILES, get_profile
from tpx.transport.translate.tools import FrozenJSONList, translate_tools

TOUR = Path(__file__).parents[1] / "fixtures/clients/claude-code/2.1.197/tour"


def _tour() -> list[bytes]:
    files = sorted(TOUR.glob("*-post-v1-messages*.json"))
    return [orjson.dumps(json.loads(f.read_text())["body"]) for f in files]


def test_a_claude_code_session_parses_its_tail_once() -> None:
    reader = BodyReader()
    bodies = _tour()
    for body in bodies:  # the first two turns: seen, then kept
        read_as_orjson(reader, body)
    assert reader.kept == 1
    assert len(reader) == 1
    hits = reader.hits
    for body in bodies:
        decoded = read_as_orjson(reader, body)
        assert decoded is not None
        assert decoded.tail is not None
    assert reader.hits == hits + len(bodies)


def test_a_kept_tail_gets_each_request_its_own_dict() -> None:
    reader = BodyReader()
    body = _tour()[0]
    for _ in range(3):
        reader.read(body)
    one, two = reader.read(body), reader.read(body)
    assert one.tail is not None
    assert one.value is not two.value
    one.value["max_tokens"] = 1  # the gateway's model map replaces members
    assert two.value["max_tokens"] != 1
    assert one.value["tools"] is two.value["tools"]  # the shared part: read-only
    assert isinstance(one.value["tools"], FrozenJSONList)


def test_no_tail_is_kept_when_the_cache_is_off_or_the_body_small() -> None:
    for reader in (BodyReader(0), BodyReader(min_body=10**9)):
        for body in _tour() * 3:
            assert reader.read(body).tail is None
        assert reader.kept == 0
        assert len(reader) == 0


def test_the_cache_keeps_at_most_its_capacity_least_recently_used_first() -> None:
    reader = BodyReader(2, min_body=0, min_tail=0)

    def body(tail: int, head: int = 0) -> bytes:
        return b'{"model":"m%d","messages":[],"system":"%s","n":%d}' % (head, b"s" * 40, tail)

    for n in range(3):
        reader.read(body(n))
        reader.read(body(n, 1))  # kept the second time
    assert len(reader) == 2
    assert reader.read(body(0, 2)).tail is None  # the oldest went
    assert reader.read(body(2, 2)).tail is not None
    reader.read(body(1, 3))  # used: now the most recent
    reader.read(body(5))
    reader.read(body(5, 1))  # a third tail: 2 goes, not 1
    assert reader.read(body(1, 4)).tail is not None
    assert reader.read(body(2, 4)).tail is None


@settings(max_examples=300, deadline=None)
@given(json_member_runs())
def test_a_kept_tail_reads_every_body_exactly_as_orjson_does(
    drawn: tuple[bytes, list[bytes], bytes],
) -> None:
    first, heads, tail = drawn
    reader = BodyReader(min_body=0, min_tail=0)
    read_as_orjson(reader, first)
    read_as_orjson(reader, first)  # kept, when its tail can be
    for head in heads:  # valid heads, hostile heads, heads cut anywhere
        read_as_orjson(reader, head + tail)


def test_a_needle_inside_the_messages_is_not_taken_for_the_tail() -> None:
    text = ',"system":"not here"}]'
    reader = BodyReader(min_body=0, min_tail=0)
    body = orjson.dumps(
        {"model": "m", "messages": [{"role": "user", "content": text}], "system": "s" * 64}
    )
    for _ in range(3):
        decoded = read_as_orjson(reader, body)
    assert decoded is not None
    assert decoded.tail is not None
    assert decoded.tail.text == b',"system":"' + b"s" * 64 + b'"}'


def test_a_key_in_both_head_and_tail_is_read_in_full() -> None:
    reader = BodyReader(min_body=0, min_tail=0)
    tail = b',"system":"' + b"s" * 64 + b'","n":1}'
    for _ in range(2):
        reader.read(b'{"model":"m","messages":[]' + tail)
    assert len(reader) == 1
    twice = b'{"n":7,"model":"m","messages":[]' + tail  # n: the tail's value wins
    decoded = read_as_orjson(reader, twice)
    assert decoded is not None
    assert decoded.tail is None
    assert decoded.value["n"] == 1


@pytest.mark.parametrize("where", ["head", "tail"])
def test_the_depth_verdict_is_the_bodys(where: str) -> None:
    for depth in (MAX_DEPTH - 2, MAX_DEPTH - 1, MAX_DEPTH, MAX_DEPTH + 1):
        deep = "[" * depth + "]" * depth
        head = '{"model":"m","messages":[]' + (f',"deep":{deep}' if where == "head" else "")
        tail = ',"system":"' + "s" * 40 + '"' + (f',"deep2":{deep}' if where == "tail" else "")
        reader = BodyReader(min_body=0, min_tail=0)
        for _ in range(3):
            decoded = read_as_orjson(reader, (head + tail + "}").encode())
        assert decoded is not None
        assert decoded.tail is not None
        # a member replaced by a shallower one (the model map) counts as it is now
        decoded.value["deep2" if where == "tail" else "deep"] = "x"
        assert decoded.too_deep() == parsed_too_deep(decoded.value)


# -- FrozenJSONList -------------------------------------------------------------------------


def _tools() -> list[Any]:
    tools: list[Any] = orjson.loads(_tour()[0])["tools"]
    return tools


def test_a_frozen_list_cannot_be_changed_and_copies_are_plain_lists() -> None:
    frozen = FrozenJSONList([1, 2], b"[1,2]")
    changes: list[Callable[[], object]] = [
        lambda: frozen.append(3),
        lambda: frozen.extend([3]),
        lambda: frozen.insert(0, 3),
        lambda: frozen.pop(),
        lambda: frozen.remove(1),
        lambda: frozen.clear(),
        lambda: frozen.sort(),
        lambda: frozen.reverse(),
        lambda: frozen.__setitem__(0, 3),
        lambda: frozen.__delitem__(0),
        lambda: frozen.__iadd__([3]),
        lambda: frozen.__imul__(2),
    ]
    for change in changes:
        with pytest.raises(TypeError):
            change()
    assert frozen == [1, 2]
    assert orjson.dumps(frozen) == frozen.json
    for copied in (copy.copy(frozen), copy.deepcopy(frozen), pickle.loads(pickle.dumps(frozen))):
        assert copied.__class__ is list
        assert copied == [1, 2]


@pytest.mark.parametrize("name", sorted(PROFILES))
def test_frozen_tools_translate_as_plain_ones_do(name: str) -> None:
    profile = get_profile(name)
    tools = _tools()
    plain_warnings: list[str] = []
    frozen_warnings: list[str] = []
    plain = translate_tools(tools, profile, plain_warnings.append)
    for _ in range(2):  # a miss, then a hit
        frozen = translate_tools(
            FrozenJSONList(tools, orjson.dumps(tools)), profile, frozen_warnings.append
        )
        assert isinstance(frozen, FrozenJSONList)
        assert frozen == plain
        assert frozen.json == orjson.dumps(plain)
    assert frozen_warnings == plain_warnings * 2


# -- through the gateway --------------------------------------------------------------------


def _upstream_bytes(provider: str, cache: int, bodies: list[bytes]) -> tuple[list[bytes], Any]:
    """What the upstream received for *bodies* sent through an in-process gateway (each
    body three times: the tail is kept from the second; then to count_tokens, whose answer
    is added), and the gateway's reader."""
    import httpx2

    import tpx.sdk
    from tests.gateway.conftest import make_settings
    from tests.gateway.fakes import FakeUpstream

    fake = FakeUpstream(provider)
    received: list[bytes] = []

    def handle(request: httpx2.Request) -> httpx2.Response:
        received.append(request.content)
        return fake.handle(request)

    settings = make_settings(provider, limits={"tail_cache": cache})
    client = tpx.sdk.anthropic_client(settings=settings, upstream=httpx2.MockTransport(handle))
    http = client._client
    for body in bodies:
        for stream in (False, True, False):
            data = body if not stream else body[:-1] + b',"stream":true}'
            response = http.post(
                "http://tpx.in-process/v1/messages?beta=true",
                content=data,
                headers={"content-type": "application/json", "anthropic-version": "2023-06-01"},
            )
            assert response.status_code == 200, response.text[:300]
        counted = http.post(
            "http://tpx.in-process/v1/messages/count_tokens",
            content=body,
            headers={"content-type": "application/json", "anthropic-version": "2023-06-01"},
        )
        assert counted.status_code == 200, counted.text[:300]
        received.append(counted.content)  # what the client got (TPX: counted locally)
    reader = client._client._transport.gateway.bodies  # type: ignore[attr-defined]
    return received, reader


def _plain(body: bytes) -> bytes:
    value = orjson.loads(body)
    value.pop("stream", None)
    value.pop("context_management", None)  # the fake's replies carry no thinking to clear
    return orjson.dumps(value)


@pytest.mark.parametrize("provider", ["TPX", "ANTHROPIC"])
def test_the_upstream_gets_the_same_bytes_with_the_tail_kept(provider: str) -> None:
    bodies = [_plain(b) for b in _tour()]
    cold, cold_reader = _upstream_bytes(provider, 0, bodies)
    warm, reader = _upstream_bytes(provider, 16, bodies)
    assert cold_reader.hits == 0
    assert reader.hits > 0
    assert warm == cold
    # nothing any of those exchanges did changed what the later ones share
    for tail in list(reader._tails.values()):
        for kept in tail:
            assert kept.members == orjson.loads(b"{" + kept.text[1:])


def test_a_tail_written_otherwise_than_orjson_writes_it_is_kept_too() -> None:
    """A tail that is orjson's own text is kept from the body's values; one written
    otherwise (here: escapes orjson does not write) is parsed, with the same result."""
    for system in ('"\\u00e9t\\u00e9 ' + "s" * 40 + '"', '"' + "s" * 40 + '"'):
        reader = BodyReader(min_body=0, min_tail=0)
        tail = f',"system":{system},"tools":[{{"name":"t","input_schema":{{}}}}]}}\n'
        for head in ('{"model":"a","messages":[]', '{"model":"b","messages":[1]'):
            read_as_orjson(reader, (head + tail).encode())
        assert reader.kept == 1
        decoded = read_as_orjson(reader, b'{"model":"c","messages":[2]' + tail.encode())
        assert decoded is not None
        assert decoded.tail is not None
        tools = decoded.value["tools"]
        assert isinstance(tools, FrozenJSONList)
        assert tools.json == orjson.dumps(tools)


@pytest.mark.parametrize("capacity", [16, 2], ids=["all-kept", "evicting"])
def test_threads_share_one_reader(capacity: int) -> None:
    """The in-process sync client may call the core from threads: a reader shared by
    them keeps giving what orjson gives while tails are kept, used and (with room for 2
    of the 6 tails) evicted."""
    import threading

    variants = [b[:-1] + b',"x":%d}' % n for b in _tour()[:2] for n in range(3)]
    reader = BodyReader(capacity)
    expected = {body: orjson.loads(body) for body in variants}
    failures: list[BaseException] = []

    def work(offset: int) -> None:
        try:
            for i in range(120):
                body = variants[(i * 7 + offset) % len(variants)]
                assert reader.read(body).value == expected[body]
        except BaseException as exc:  # reported below
            failures.append(exc)

    if capacity >= len(variants):
        for body in variants * 2:  # every tail kept before the threads start
            reader.read(body)
    hits = reader.hits
    threads = [threading.Thread(target=work, args=(n,)) for n in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
    assert len(reader) <= capacity
    if capacity >= len(variants):  # all kept, none evicted: every reading a hit
        assert reader.hits - hits == len(threads) * 120
