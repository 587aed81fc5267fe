"""The fake upstreams of the HTTP replay: one ASGI app speaking both protocols, scripted
per behaviour step, recording the exact bytes of both directions.

``POST .../chat/completions`` is the OpenAI-compatible upstream (TPX), ``POST
.../messages`` the Anthropic one. A request belongs to the conversation whose tag
``[conv:KEY]`` its first user text carries (the client puts it there); a request of no
conversation that names the Messages API (``anthropic-version``) is answered as that API
answers ``GET /v1/models`` and ``POST /v1/messages/count_tokens``. The fake never
decides a reply by itself: each request is queued on its conversation's
:class:`Channel` and held until the replay resolves its :class:`Plan` (the behaviour's
``ProviderReply`` / ``ProviderFail``), or until the gateway closes it (``ClientGone``):
the handler watches the connection while it holds the request.

Every tool call the fake emits is a call of its own, ``KEY_T_N`` (conversation key,
local tool name, the channel's counter), named twice, both planted by the fake: by its
wire id ``call_KEY_T_N`` (OpenAI) / ``toolu_KEY_T_N`` (Anthropic), and by its arguments
``{"conv": KEY, "tool": T, "call": "KEY_T_N"}``. The client answers a call with the
content ``output of KEY_T_N`` (the call its tool_use's input names), so every result on
either wire names the call it answers (:mod:`tpx.audit.binding`).
:attr:`Channel.rounds` lists the calls of every reply, in emission order. The
abstraction reads ids and calls back from these bytes only.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import re
from collections.abc import Awaitable, Callable, Iterator, MutableMapping
from typing import Any

import attrs
import orjson

__all__ = [
    "FAIL_KINDS",
    "STREAM_FAIL_KINDS",
    "WIRE_ID",
    "Channel",
    "FakeUpstreams",
    "Plan",
    "UpstreamExchange",
    "conv_tag",
]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

_TAG = re.compile(rb"\[conv:([A-Za-z0-9]+)\]")
#: a tool id the fake emitted: prefix, conversation key, local tool name, counter
WIRE_ID = re.compile(r"(?:call|toolu)_([A-Za-z0-9]+)_(t[0-9]+)_([0-9]+)")

#: how ProviderFail fails, in rotation: an HTTP error the gateway relays, or a body
#: that is not the provider's (a protocol failure)
FAIL_KINDS: tuple[str, ...] = ("500", "529", "429", "503", "garbage")
#: the same for a streamed request, plus a stream broken off before its terminal event
#: (the connection closed mid-stream)
STREAM_FAIL_KINDS: tuple[str, ...] = (*FAIL_KINDS, "break")


#: ``Plan("fail", fail="context")``: the upstream's answer to a prompt longer than its
#: context (OpenAI's wording and code; the Messages API's own for the Anthropic side)
CONTEXT_ERROR = {
    "error": {
        "message": "This model's maximum context length is 4096 tokens. However, your "
        "messages resulted in 9000 tokens. Please reduce the length of the messages.",
        "type": "invalid_request_error",
        "param": "messages",
        "code": "context_length_exceeded",
    }
}
CONTEXT_ERROR_MESSAGES = {
    "type": "error",
    "error": {
        "type": "invalid_request_error",
        "message": "prompt is too long: 9000 tokens > 4096 maximum",
    },
}


def conv_tag(key: str) -> str:
    return f"[conv:{key}]"


@attrs.frozen
class Plan:
    """What the fake answers: ``reply`` emitting tool calls named *tools* (local names,
    ``t1`` ...), or ``fail`` of kind *fail* (:data:`FAIL_KINDS`)."""

    kind: str
    tools: tuple[str, ...] = ()
    fail: str = ""


@attrs.define(eq=False)
class UpstreamExchange:
    """One request the gateway sent upstream, and what came of it."""

    seq: int  # arrival order among its behaviour's requests (:meth:`FakeUpstreams.channel`)
    path: str
    headers: dict[str, str]
    body: bytes
    plan: asyncio.Future[Plan]
    status: int | None = None  # what the fake answered (None: closed before a reply)
    response: bytes | None = None
    closed: bool = False  # the gateway closed the request before any reply
    done: asyncio.Event = attrs.field(factory=asyncio.Event)

    @property
    def replied(self) -> bool:
        """A 200 reply went out (the spec's ProviderReply)."""
        return self.status == 200 and self.response is not None


@attrs.define(eq=False)
class Channel:
    """One conversation's upstream wire: every exchange in order, new ones queued."""

    key: str
    #: numbers its requests in arrival order (shared by the channels of one behaviour)
    numbering: Iterator[int]
    exchanges: list[UpstreamExchange] = attrs.field(factory=list)
    arrivals: asyncio.Queue[UpstreamExchange] = attrs.field(factory=asyncio.Queue)
    emitted: int = 0
    #: the calls (``KEY_T_N``) of every reply with tool calls, in emission order
    rounds: list[tuple[str, ...]] = attrs.field(factory=list)


class FakeUpstreams:
    """The ASGI app (run it under uvicorn on the replay's event loop)."""

    def __init__(self) -> None:
        self.channels: dict[str, Channel] = {}
        self.strays: list[bytes] = []  # requests carrying no conversation tag
        self._seq = itertools.count(1)

    def channel(self, key: str, numbering: Iterator[int] | None = None) -> Channel:
        """The channel of the conversation *key*; a new one numbers its requests with
        *numbering* (the channels of one behaviour share one, so the numbers say the
        order of that behaviour's requests whatever else is in flight; by default the
        fake's own count)."""
        ch = self.channels.get(key)
        if ch is None:
            ch = self.channels[key] = Channel(key, self._seq if numbering is None else numbering)
        return ch

    def forget(self, key: str) -> None:
        self.channels.pop(key, None)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        parts: list[bytes] = []
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            parts.append(message.get("body", b""))
            if not message.get("more_body", False):
                break
        body = b"".join(parts)
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        match = _TAG.search(body)
        endpoint = _messages_endpoint(scope, headers)
        if match is None and endpoint is not None:
            await _respond(send, 200, endpoint)
            return
        if match is None:
            self.strays.append(body)
            await _respond(send, 400, b'{"error": "no conversation tag"}')
            return
        ch = self.channel(match.group(1).decode())
        loop = asyncio.get_running_loop()
        seq = next(ch.numbering)
        ex = UpstreamExchange(seq, scope["path"], headers, body, loop.create_future())
        ch.exchanges.append(ex)
        ch.arrivals.put_nowait(ex)

        async def gone() -> None:
            while (await receive())["type"] != "http.disconnect":
                pass

        watcher = asyncio.ensure_future(gone())
        try:
            waits: set[asyncio.Future[Any]] = {ex.plan, watcher}
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
            if not ex.plan.done():  # the gateway closed the request: ClientGone
                ex.closed = True
                return
            plan = ex.plan.result()
            status, data = self._answer(ch, ex, plan)
            ex.status, ex.response = status, data
            with contextlib.suppress(OSError):
                if not _is_sse(data):
                    extra = [(b"retry-after", b"7")] if status in (429, 529) else []
                    await _respond(send, status, data, extra)
                elif plan.fail == "break":  # half the stream, then the connection closes
                    await _start_stream(send)
                    await send({"type": "http.response.body", "body": data, "more_body": True})
                else:
                    await _start_stream(send)
                    await send({"type": "http.response.body", "body": data})
        finally:
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watcher
            ex.done.set()

    # -- replies --------------------------------------------------------------------------

    def _answer(self, ch: Channel, ex: UpstreamExchange, plan: Plan) -> tuple[int, bytes]:
        status, data = self._reply(ch, ex, plan)
        request = orjson.loads(ex.body)
        if request.get("stream") is not True and plan.fail == "break":
            return 200, data[: len(data) // 2]  # a reply cut short: not JSON
        if status != 200 or request.get("stream") is not True or data.startswith(b"<"):
            return status, data
        events = (
            _openai_stream(orjson.loads(data))
            if "choices" in orjson.loads(data)
            else (_messages_stream(orjson.loads(data)))
        )
        if plan.fail == "break":
            events = events[: len(events) // 2]
        return 200, b"".join(events)

    def _reply(self, ch: Channel, ex: UpstreamExchange, plan: Plan) -> tuple[int, bytes]:
        openai = ex.path.endswith("/chat/completions")
        broken = plan.kind == "fail" and plan.fail == "break"
        if broken:
            plan = Plan("reply", ("t0",))  # a tool call begun, never finished
        if plan.kind == "fail":
            if plan.fail == "garbage":
                return 200, b"<html>not an API reply</html>"
            if plan.fail == "context":  # the prompt does not fit the model's context
                return 400, orjson.dumps(CONTEXT_ERROR if openai else CONTEXT_ERROR_MESSAGES)
            status = int(plan.fail)
            if openai:
                return status, orjson.dumps({"error": {"message": "scripted", "type": "server"}})
            kind = {529: "overloaded_error", 429: "rate_limit_error"}.get(status, "api_error")
            return status, orjson.dumps(
                {"type": "error", "error": {"type": kind, "message": "scripted"}}
            )
        calls = []
        for tool in plan.tools:
            ch.emitted += 1
            calls.append((tool, ch.emitted))
        if calls and not broken:
            ch.rounds.append(tuple(f"{ch.key}_{t}_{n}" for t, n in calls))
        model = orjson.loads(ex.body).get("model", "m")
        if openai:
            tool_calls = [
                {
                    "id": f"call_{ch.key}_{t}_{n}",
                    "type": "function",
                    "function": {
                        "name": "lookup",
                        "arguments": orjson.dumps(_planted(ch.key, t, n)).decode(),
                    },
                }
                for t, n in calls
            ]
            message: dict[str, Any] = {"role": "assistant", "content": f"reply {ch.key}"}
            if tool_calls:
                message["tool_calls"] = tool_calls
            return 200, orjson.dumps(
                {
                    "id": f"chatcmpl-{ch.key}-{ex.seq}",
                    "object": "chat.completion",
                    "created": 0,
                    "model": model,
                    "choices": [
                        {
                            "index": 0,
                            "message": message,
                            "finish_reason": "tool_calls" if tool_calls else "stop",
                        }
                    ],
                    "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
                }
            )
        content: list[dict[str, Any]] = [{"type": "text", "text": f"reply {ch.key}"}]
        content += [
            {
                "type": "tool_use",
                "id": f"toolu_{ch.key}_{t}_{n}",
                "name": "lookup",
                "input": _planted(ch.key, t, n),
            }
            for t, n in calls
        ]
        return 200, orjson.dumps(
            {
                "id": f"msg_{ch.key}_{ex.seq}",
                "type": "message",
                "role": "assistant",
                "model": model,
                "content": content,
                "stop_reason": "tool_use" if calls else "end_turn",
                "stop_sequence": None,
                "usage": {"input_tokens": 10, "output_tokens": 5},
            }
        )


def _planted(key: str, tool: str, n: int) -> dict[str, str]:
    """A call's input: the call it is, named."""
    return {"conv": key, "tool": tool, "call": f"{key}_{tool}_{n}"}


#: the Messages API's answers to ``GET /v1/models`` and ``POST /v1/messages/count_tokens``
#: (the requests of no conversation a pass-through endpoint hands on)
MODELS_PAGE = {
    "data": [
        {
            "type": "model",
            "id": "claude-scripted",
            "display_name": "Scripted",
            "created_at": "2025-01-01T00:00:00Z",
        }
    ],
    "has_more": False,
    "first_id": "claude-scripted",
    "last_id": "claude-scripted",
}
COUNTED = {"input_tokens": 10}


def _messages_endpoint(scope: Scope, headers: dict[str, str]) -> bytes | None:
    """The Messages API's answer to a request of no conversation (``anthropic-version``
    names the API): the models page, a token count; ``None`` for anything else."""
    if "anthropic-version" not in headers:
        return None
    path, method = scope["path"], scope.get("method")
    if method == "GET" and path.endswith("/models"):
        return orjson.dumps(MODELS_PAGE)
    if method == "POST" and path.endswith("/messages/count_tokens"):
        return orjson.dumps(COUNTED)
    return None


async def _respond(
    send: Send, status: int, body: bytes, extra: list[tuple[bytes, bytes]] | None = None
) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                *(extra or []),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


def _is_sse(data: bytes) -> bool:
    return data.startswith((b"data:", b"event:"))


async def _start_stream(send: Send) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": 200,
            "headers": [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache")],
        }
    )


def _openai_stream(completion: dict[str, Any]) -> list[bytes]:
    """A Chat Completions chunk stream saying what *completion* says: the text, each tool
    call in two fragments, the finish reason, the usage, ``[DONE]``."""
    message = completion["choices"][0]["message"]

    def chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> bytes:
        data = {
            "id": completion["id"],
            "object": "chat.completion.chunk",
            "created": 0,
            "model": completion["model"],
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
            **extra,
        }
        return b"data: " + orjson.dumps(data) + b"\n\n"

    out = [chunk({"role": "assistant", "content": message.get("content") or ""})]
    for n, call in enumerate(message.get("tool_calls") or []):
        args = call["function"]["arguments"]
        head = {"index": n, "id": call["id"], "type": "function"}
        out.append(
            chunk({"tool_calls": [{**head, "function": {"name": "lookup", "arguments": args[:5]}}]})
        )
        out.append(chunk({"tool_calls": [{"index": n, "function": {"arguments": args[5:]}}]}))
    out.append(chunk({}, completion["choices"][0]["finish_reason"]))
    final = {**orjson.loads(out[-1][6:]), "choices": [], "usage": completion["usage"]}
    out.append(b"data: " + orjson.dumps(final) + b"\n\n")
    out.append(b"data: [DONE]\n\n")
    return out


def _messages_stream(message: dict[str, Any]) -> list[bytes]:
    """A Messages event stream saying what *message* says (tool inputs in two fragments)."""

    def event(data: dict[str, Any]) -> bytes:
        return f"event: {data['type']}\ndata: ".encode() + orjson.dumps(data) + b"\n\n"

    start = {**message, "content": [], "stop_reason": None}
    out = [event({"type": "message_start", "message": start})]
    for n, block in enumerate(message["content"]):
        if block["type"] == "tool_use":
            empty = {**block, "input": {}}
            text = orjson.dumps(block["input"]).decode()
            deltas = [{"type": "input_json_delta", "partial_json": p} for p in (text[:5], text[5:])]
        else:
            empty = {**block, "text": ""}
            deltas = [{"type": "text_delta", "text": block["text"]}]
        out.append(event({"type": "content_block_start", "index": n, "content_block": empty}))
        out += [event({"type": "content_block_delta", "index": n, "delta": d}) for d in deltas]
        out.append(event({"type": "content_block_stop", "index": n}))
    out.append(
        event(
            {
                "type": "message_delta",
                "delta": {"stop_reason": message["stop_reason"], "stop_sequence": None},
                "usage": {"output_tokens": 5},
            }
        )
    )
    out.append(event({"type": "message_stop"}))
    return out
