"""Scripted fake upstreams (OpenAI-compatible and Anthropic) for httpx2.MockTransport.

Stateless like the gateway: each reply is decided from the request alone. A request whose
last turn carries tool results is answered with text ("done: <results>"); any other is
answered with tool calls (``calls`` parallel calls, ids derived from the conversation's
first user text so every conversation's ids are its own). A user text containing
``FAIL529`` gets one 529 per distinct body before the normal answer (``failures`` counts
them); ``SILENT`` makes a stream pause (the gateway pings); ``BREAK`` makes a stream end
before its terminal event. ``reasoning`` (OpenAI-compatible only): every reply also carries
that text as ``reasoning_content`` (DeepSeek's field), which the gateway turns into a
signed thinking block.
"""

from __future__ import annotations

import hashlib
import threading
import time
from typing import Any

import httpx2
import orjson


def _first_text(messages: list[Any]) -> str:
    for message in messages:
        content = message.get("content")
        if isinstance(content, str):
            return content
        if isinstance(content, list):
            for block in content:
                if isinstance(block, dict) and block.get("type") == "text":
                    return str(block["text"])
    return ""


class FakeUpstream:
    """Both fakes; ``provider`` picks the protocol. Records every request it saw."""

    def __init__(
        self,
        provider: str = "TPX",
        *,
        calls: int = 2,
        pause: float = 0.0,
        reasoning: str | None = None,
    ) -> None:
        self.provider = provider
        self.reasoning = reasoning
        self.calls = calls
        self.pause = pause
        self.seen: list[dict[str, Any]] = []
        self.headers: list[httpx2.Headers] = []
        self.failures = 0
        self._failed: set[bytes] = set()
        self.emitted: dict[str, list[str]] = {}  # conversation tag -> wire ids emitted
        #: a stream tagged TAIL ends its body (after its last event) only once this is set
        self.tail = threading.Event()

    def transport(self) -> httpx2.MockTransport:
        return httpx2.MockTransport(self.handle)

    def handle(self, request: httpx2.Request) -> httpx2.Response:
        body = orjson.loads(request.content) if request.content else {}
        self.seen.append(body)
        self.headers.append(request.headers)
        if request.url.path.endswith("/count_tokens"):
            return httpx2.Response(200, json={"input_tokens": 42})
        if request.url.path.endswith("/models"):
            return httpx2.Response(200, json={"data": [{"type": "model", "id": "claude-x"}]})
        messages = body.get("messages", [])
        tag = _first_text(messages)
        if "FAIL529" in tag:
            digest = hashlib.sha256(request.content).digest()
            if digest not in self._failed:
                self._failed.add(digest)
                self.failures += 1
                return httpx2.Response(
                    529,
                    json={
                        "type": "error",
                        "error": {"type": "overloaded_error", "message": "busy"},
                    },
                )
        if self.provider == "TPX":
            answered = bool(messages) and messages[-1].get("role") == "tool"
            results = [m["content"] for m in messages if m.get("role") == "tool"]
        else:
            last = messages[-1]["content"] if messages else ""
            results = [
                b.get("content")
                for b in (last if isinstance(last, list) else [])
                if b.get("type") == "tool_result"
            ]
            answered = bool(results)
        key = hashlib.sha256(tag.encode()).hexdigest()[:8]
        turn = sum(1 for m in messages if m.get("role") == "assistant")
        ids = [f"call_{key}_{turn}_{i}" for i in range(self.calls)]
        if not answered:
            self.emitted.setdefault(tag, []).extend(ids)
        text = f"done: {results}" if answered else "calling tools"
        stream = body.get("stream") is True
        if self.provider == "TPX":
            return self._openai(body, text, [] if answered else ids, stream, tag)
        return self._anthropic(body, text, [] if answered else ids, stream, tag)

    # -- OpenAI-compatible ---------------------------------------------------------

    def _openai(
        self, body: dict[str, Any], text: str, ids: list[str], stream: bool, tag: str
    ) -> httpx2.Response:
        calls = [
            {"id": i, "type": "function", "function": {"name": "ls", "arguments": '{"p": "."}'}}
            for i in ids
        ]
        finish = "tool_calls" if ids else "stop"
        if not stream:
            message: dict[str, Any] = {"role": "assistant", "content": text}
            if self.reasoning is not None:
                message["reasoning_content"] = self.reasoning
            if calls:
                message["tool_calls"] = calls
            return httpx2.Response(
                200,
                json={
                    "id": "c1",
                    "object": "chat.completion",
                    "model": body.get("model", "m"),
                    "created": 0,
                    "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                    "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
                },
            )

        def chunk(delta: dict[str, Any], reason: str | None = None) -> bytes:
            data = {
                "id": "c1",
                "object": "chat.completion.chunk",
                "model": body.get("model", "m"),
                "choices": [{"index": 0, "delta": delta, "finish_reason": reason}],
            }
            return b"data: " + orjson.dumps(data) + b"\n\n"

        parts = []
        if self.reasoning is not None:
            parts.append(chunk({"role": "assistant", "reasoning_content": self.reasoning}))
        parts.append(chunk({"role": "assistant", "content": text}))
        for n, call in enumerate(calls):
            parts.append(chunk({"tool_calls": [{"index": n, **call}]}))
        parts.append(chunk({}, finish))
        if "BREAK" not in tag:
            parts.append(b"data: [DONE]\n\n")
        return self._sse(parts, tag)

    # -- Anthropic -------------------------------------------------------------------

    def _anthropic(
        self, body: dict[str, Any], text: str, ids: list[str], stream: bool, tag: str
    ) -> httpx2.Response:
        content: list[dict[str, Any]] = [{"type": "text", "text": text}]
        content += [{"type": "tool_use", "id": i, "name": "ls", "input": {"p": "."}} for i in ids]
        message = {
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "model": body.get("model", "claude-x"),
            "content": content,
            "stop_reason": "tool_use" if ids else "end_turn",
            "stop_sequence": None,
            "usage": {"input_tokens": 10, "output_tokens": 5},
        }
        if not stream:
            return httpx2.Response(200, json=message)

        def event(data: dict[str, Any]) -> bytes:
            return f"event: {data['type']}\ndata: ".encode() + orjson.dumps(data) + b"\n\n"

        start = {**message, "content": [], "stop_reason": None}
        parts = [event({"type": "message_start", "message": start})]
        for n, block in enumerate(content):
            empty = {**block, "input": {}} if block["type"] == "tool_use" else {**block, "text": ""}
            parts.append(event({"type": "content_block_start", "index": n, "content_block": empty}))
            delta = (
                {"type": "input_json_delta", "partial_json": orjson.dumps(block["input"]).decode()}
                if block["type"] == "tool_use"
                else {"type": "text_delta", "text": block["text"]}
            )
            parts.append(event({"type": "content_block_delta", "index": n, "delta": delta}))
            parts.append(event({"type": "content_block_stop", "index": n}))
        parts.append(
            event(
                {
                    "type": "message_delta",
                    "delta": {"stop_reason": message["stop_reason"], "stop_sequence": None},
                    "usage": {"output_tokens": 5},
                }
            )
        )
        if "BREAK" not in tag:
            parts.append(event({"type": "message_stop"}))
        return self._sse(parts, tag)

    def _sse(self, parts: list[bytes], tag: str) -> httpx2.Response:
        pause = self.pause if "SILENT" in tag else 0.0
        tail = self.tail if "TAIL" in tag else None

        class Body(httpx2.SyncByteStream, httpx2.AsyncByteStream):
            def __iter__(self) -> Any:
                for n, part in enumerate(parts):
                    if n == 1 and pause:
                        time.sleep(pause)
                    yield part

            async def __aiter__(self) -> Any:
                import asyncio

                for n, part in enumerate(parts):
                    if n == 1 and pause:
                        await asyncio.sleep(pause)
                    yield part
                for _ in range(1000):  # TAIL: the body's end held back (at most 10 s)
                    if tail is None or tail.is_set():
                        break
                    await asyncio.sleep(0.01)

        return httpx2.Response(200, headers={"content-type": "text/event-stream"}, stream=Body())
