"""The abstraction's building blocks: shape by structure, planted ids, swap detection."""

from __future__ import annotations

import orjson
import pytest

from conformance.abstraction import (
    Wire,
    assemble_messages,
    classify,
    is_stream,
    observe,
    sse_events,
    stream_pairs,
    wire_pairs,
)
from conformance.fakes import MARK, FakeCaller, FakeProvider, mock_client, planted_id
from tpx.oracle.model import Config
from tpx.oracle.values import ModelValue
from tpx.transport import boot


def test_classify_by_structure() -> None:
    anthropic, tpx = FakeProvider("messages"), FakeProvider("openai", "spaces")
    assert classify(anthropic.native_reply(["t1"])) == "messages"
    assert classify(tpx.native_reply(["t1"])) == "openai"
    request = FakeCaller().request()
    assert classify(orjson.dumps(request)) == "messages"
    assert classify({"messages": [{"role": "system", "content": "x"}]}) == "openai"
    assert classify(b"<html>") == "unknown"
    assert classify({"messages": [{"role": "user", "content": "hi"}]}) == "unknown"


def test_planted_ids() -> None:
    assert planted_id({"probe": MARK + "t2"}) == "t2"
    assert planted_id(f"{MARK}t1 done") == "t1"
    assert planted_id("nothing") is None
    assert planted_id(f"{MARK}t1 {MARK}t2") == "?"


def test_foreign_ids_are_unique_and_styled() -> None:
    for style in ("openai", "mistral", "spaces"):
        fake = FakeProvider("openai", style)
        pairs = wire_pairs(orjson.loads(fake.native_reply(["t1", "t2", "t3"])), "openai")
        ids = [fid for fid, _ in pairs]
        assert len(set(ids)) == 3
        assert [aid for _, aid in pairs] == ["t1", "t2", "t3"]
        assert {fake.table[f] for f in ids} == {"t1", "t2", "t3"}
        if style == "mistral":
            assert all(len(i) == 9 and i.isalnum() for i in ids)
        if style == "spaces":
            assert all(" " in i for i in ids)
    with pytest.raises(ValueError, match="not valid"):
        FakeProvider("messages").reset(id_style="spaces")


def test_swapped_tool_results_are_a_pairing_problem() -> None:
    anthropic, tpx = FakeProvider("messages"), FakeProvider("openai")
    client = mock_client(anthropic, tpx)
    t = boot(api_key="k", anthropic_base_url="https://anthropic.fake.test", env={}, client=client)
    reply = anthropic.native_reply(["t1", "t2"])
    (f1, _), (f2, _) = wire_pairs(orjson.loads(reply), "messages")
    results = [
        {"type": "tool_result", "tool_use_id": f1, "content": f"{MARK}t2"},
        {"type": "tool_result", "tool_use_id": f2, "content": f"{MARK}t1"},
    ]
    body = {"system": "s", "messages": [{"role": "user", "content": results}]}
    wire = Wire()
    wire.request(orjson.dumps(body))
    obs = observe(
        t,
        has_key=True,
        has_token=False,
        config=Config.of(2, 3),
        wire=wire,
        fake=anthropic,
        sent=body,
        delivered=None,
    )
    assert obs.state.wireIds == frozenset()
    assert obs.state.reqIds == {ModelValue("t1"), ModelValue("t2")}
    assert len(obs.problems) == 2
    assert all("PairingInv" in p for p in obs.problems)
    client.close()


def test_streams_are_classified_and_their_ids_recovered() -> None:
    for layout in range(4):
        anthropic = FakeProvider("messages", layout=layout)
        tpx = FakeProvider("openai", "mistral", layout=layout)
        m = b"".join(anthropic.pieces(anthropic.stream_events(["t1", "t2"])))
        o = b"".join(tpx.pieces(tpx.stream_events(["t2", "t1"])))
        assert is_stream(m)
        assert is_stream(o)
        assert not is_stream(anthropic.native_reply(["t1"]))
        assert classify(m) == "messages"
        assert classify(o) == "openai"
        assert classify(m + o) == "unknown"
        assert [aid for _, aid in stream_pairs(m, "messages")] == ["t1", "t2"]
        pairs = stream_pairs(o, "openai")
        assert [aid for _, aid in pairs] == ["t2", "t1"]
        assert {tpx.table[fid] for fid, _ in pairs} == {"t1", "t2"}
        # the planted marker is split across fragments: only assembly finds it
        assert MARK.encode() not in m
        (shape,) = (k for k in tpx.drawn if k.startswith("shape:"))
        if shape in ("shape:indexed", "shape:interleaved"):  # (other shapes send calls whole)
            assert MARK.encode() not in o


def test_caller_side_assembly() -> None:
    anthropic = FakeProvider("messages", seed=6)  # seed 6 draws a plain first reply
    events = anthropic.stream_events(["t1"])
    assert not anthropic.drawn.keys() - {"shape:events", "flag:max_tokens"}
    data = b"".join(events)
    message = assemble_messages(data)
    assert message is not None
    assert message["content"][0] == {"type": "text", "text": "probing"}
    assert message["content"][1]["input"] == {"probe": MARK + "t1"}
    # the terminal event without its blank line is no complete event for the caller
    assert assemble_messages(data.removesuffix(b"\n")) is None
    assert message["stop_reason"] == "tool_use"
    assert [planted_id(u.get("input")) for u in message["content"][1:]] == ["t1"]
    assert assemble_messages(b"".join(events[:-1])) is None  # no message_stop
    assert assemble_messages(b"".join(FakeProvider("openai").stream_events(["t1"]))) is None
    assert sse_events(b"event: a\r\ndata: 1\r\ndata: 2\r\n\r\n: note\n\ndata: x") == [("a", "1\n2")]


def test_streamed_delivery_of_chunks_is_not_messages() -> None:
    """A caller handed Chat Completions chunks: gotShape is openai, whatever the exchange did."""
    anthropic, tpx = FakeProvider("messages"), FakeProvider("openai")
    client = mock_client(anthropic, tpx)
    t = boot(oauth_token="tok", tpx_base_url="https://tpx.fake.test/v1", env={}, client=client)
    chunks = b"".join(tpx.stream_events(["t1"]))
    obs = observe(
        t,
        has_key=False,
        has_token=True,
        config=Config.of(2, 3),
        wire=Wire(),
        fake=tpx,
        sent=None,
        delivered=chunks,
    )
    assert obs.state.gotShape == "openai"
    assert obs.state.pending == frozenset()
    client.close()
