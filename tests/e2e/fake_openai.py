"""A scripted fake OpenAI-compatible upstream (Chat Completions), as a plain ASGI app.

    python -m tests.e2e.fake_openai [--port 0] [--token T] [--script bash|load] [--command CMD]

prints ``FAKE_OPENAI_PORT=<port>`` once it listens on 127.0.0.1, then serves
``POST /v1/chat/completions`` (streaming or not) and ``GET /_ledger`` (what it received, JSON).

Stateless script: a request's *conversation* is the ``[conv:ID]`` tag found in its user messages
(``default`` without one) and its *turn* the number of assistant messages in its history, so a
retried request gets the same reply. Tags in the user text steer a conversation:

- ``[fail-turn:N]`` / ``[fail-status:S]``: answer turn N once with HTTP S (default 529) before
  answering it normally (the retry); ``[retry-after:S]``: that answer's ``retry-after``
  (default 0); ``--no-faults``: these tags are ignored;
- ``[turns:T]``: the ``load`` script asks for tools on turns 0..T-1 (default 3), then ends;
- ``[hold:SECONDS]``: a streamed reply pauses that long after its first chunk (open streams);
  ``[hold:gate]`` pauses until ``POST /_release`` (at most 300 s), so a test can keep any number
  of streams open at once without guessing how long opening them takes;
- ``[flood:MB]``: a streamed reply carries MB megabytes of text (16 KiB deltas, written as
  fast as the gateway reads them): a client that never reads its stream;
- ``[reasoning:1]``: every reply carries ``reasoning_content`` (``reasoning <conv> turn <n>``),
  streamed as its own deltas first; the ledger counts assistant turns that come back carrying
  reasoning (``reasoning_back``).

Scripts: ``bash`` asks for one ``Bash`` tool call (``--command``) then answers text containing
``tpx-e2e-final``; ``load`` asks on turn k for ``1 + k % 3`` parallel ``echo`` calls whose
arguments name the conversation, turn and position, then answers ``final <conv>``.

Several fakes behind one gateway (``--shared``): earlier turns another fake answered are not
flagged; the ids their history carries are recorded as ``adopted``. ``--ledger-file PATH``: the
ledger is also written there after every request (it survives the process being killed).

Every tool call id is random and recorded with its conversation. On each request the ledger
checks that the history echoes, for every earlier turn, exactly the ids emitted for THIS
conversation on that turn (the assistant ``tool_calls`` and one ``role: tool`` message each, no
extra, none missing) and, for ``load``, that each tool message's content is ``result:<args>``
of its own call. Any mismatch is a violation listed by ``/_ledger``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import re
import secrets
import socket
import time
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass, field
from typing import Any

import orjson

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
JSON = dict[str, Any]

TAG = re.compile(
    r"\[(conv|fail-turn|fail-status|retry-after|turns|hold|reasoning|flood):([\w.-]+)\]"
)
DEFAULT_COMMAND = "echo tpx-e2e-ok > tpx-e2e.txt"


@dataclass
class Call:
    id: str
    name: str
    arguments: str


@dataclass
class Conversation:
    emitted: dict[int, list[Call]] = field(default_factory=dict)
    requests: int = 0
    faults: int = 0
    final: bool = False
    max_turn: int = 0
    streamed: int = 0
    reasoning_back: int = 0
    #: ``--shared``: the ids of earlier turns another upstream emitted, as this one saw them
    adopted: dict[int, list[str]] = field(default_factory=dict)


@dataclass
class Ledger:
    """What the upstream emitted and received, per conversation, and every violation seen."""

    conversations: dict[str, Conversation] = field(default_factory=dict)
    violations: list[str] = field(default_factory=list)
    requests: int = 0
    faults_fired: set[tuple[str, int]] = field(default_factory=set)

    def snapshot(self) -> JSON:
        return {
            "requests": self.requests,
            "violations": self.violations[:100],
            "violation_count": len(self.violations),
            "conversations": {
                cid: {
                    "requests": c.requests,
                    "faults": c.faults,
                    "final": c.final,
                    "max_turn": c.max_turn,
                    "streamed": c.streamed,
                    "reasoning_back": c.reasoning_back,
                    "adopted": {str(t): ids for t, ids in c.adopted.items()},
                    "emitted": {
                        str(t): [[k.id, k.name, k.arguments] for k in calls]
                        for t, calls in c.emitted.items()
                    },
                }
                for cid, c in self.conversations.items()
            },
        }


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return ""


def _tags(messages: list[JSON]) -> dict[str, str]:
    tags: dict[str, str] = {}
    for m in messages:
        if m.get("role") == "user":
            for key, value in TAG.findall(_text_of(m.get("content"))):
                tags.setdefault(key, value)
    return tags


def _new_id() -> str:
    return "call_" + secrets.token_hex(12)


@dataclass
class FakeOpenAI:
    """The ASGI app. ``token``: the bearer token required (None: any)."""

    script: str = "bash"
    command: str = DEFAULT_COMMAND
    token: str | None = None
    ledger: Ledger = field(default_factory=Ledger)
    gate: asyncio.Event = field(default_factory=asyncio.Event)
    #: other upstreams serve the same conversations (a gateway's failover)
    shared: bool = False
    #: where the ledger is written after every request (it outlives a killed process)
    ledger_file: str | None = None
    #: ``[fail-turn:N]`` tags fire here (off: another upstream of a gateway fails, not this one)
    faults: bool = True

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            while True:
                msg = await receive()
                if msg["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif msg["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        if scope["type"] != "http":
            return
        body = bytearray()
        while True:
            msg = await receive()
            body += msg.get("body", b"")
            if not msg.get("more_body"):
                break
        path: str = scope["path"]
        if scope["method"] == "GET" and path == "/_ledger":
            await _respond(send, 200, self.ledger.snapshot())
            return
        if scope["method"] == "POST" and path == "/_release":
            self.gate.set()
            await _respond(send, 200, {"released": True})
            return
        if scope["method"] != "POST" or path not in ("/v1/chat/completions", "/chat/completions"):
            await _respond(
                send, 404, {"error": {"message": f"no route {path}", "type": "not_found"}}
            )
            return
        if self.token is not None:
            headers = dict(scope["headers"])
            if headers.get(b"authorization", b"") != f"Bearer {self.token}".encode():
                await _respond(
                    send, 401, {"error": {"message": "bad token", "type": "invalid_request_error"}}
                )
                return
        try:
            request: JSON = orjson.loads(body)
        except orjson.JSONDecodeError:
            await _respond(send, 400, {"error": {"message": "not JSON", "type": "invalid_request"}})
            return
        try:
            await self.complete(request, send)
        finally:
            if self.ledger_file is not None:
                with open(self.ledger_file, "wb") as out:
                    out.write(orjson.dumps(self.ledger.snapshot()))

    async def complete(self, request: JSON, send: Send) -> None:
        messages: list[JSON] = request.get("messages", [])
        tags = _tags(messages)
        cid = tags.get("conv", "default")
        turn = sum(1 for m in messages if m.get("role") == "assistant")
        ledger = self.ledger
        ledger.requests += 1
        conv = ledger.conversations.setdefault(cid, Conversation())
        conv.requests += 1
        conv.max_turn = max(conv.max_turn, turn)
        side = not request.get("tools")
        if not side:
            self._check(cid, conv, messages)
            fail_turn = tags.get("fail-turn")
            if (
                self.faults
                and fail_turn is not None
                and int(fail_turn) == turn
                and (cid, turn) not in ledger.faults_fired
            ):
                ledger.faults_fired.add((cid, turn))
                conv.faults += 1
                status = int(tags.get("fail-status", "529"))
                error = {"message": "upstream overloaded (scripted)", "type": "server_error"}
                after = tags.get("retry-after", "0")
                await _respond(send, status, {"error": error}, retry_after=after)
                return
        text, calls = self._reply(cid, conv, turn, tags, side)
        reasoning = f"reasoning {cid} turn {turn}" if tags.get("reasoning") == "1" else None
        if any(m.get("reasoning_content") or m.get("reasoning") for m in messages):
            conv.reasoning_back += 1
        if request.get("stream"):
            conv.streamed += 1
            hold = tags.get("hold", "0")
            wait = self.gate if hold == "gate" else float(hold)
            flood = int(float(tags.get("flood", "0")) * (1 << 20))
            await _stream(send, request, text, calls, wait, reasoning, flood)
        else:
            await _respond(send, 200, _completion(request, text, calls, reasoning))

    def _reply(
        self, cid: str, conv: Conversation, turn: int, tags: dict[str, str], side: bool
    ) -> tuple[str | None, list[Call]]:
        if side:
            return "side reply", []
        if turn in conv.emitted:  # a retry of a turn already answered: new ids, same shape
            names = [(c.name, c.arguments) for c in conv.emitted[turn]]
            calls = [Call(_new_id(), n, a) for n, a in names]
            conv.emitted[turn] = calls
            return (None if calls else self._final(cid)), calls
        if self.script == "bash":
            calls = (
                [Call(_new_id(), "Bash", orjson.dumps({"command": self.command}).decode())]
                if turn == 0
                else []
            )
        else:
            turns = int(tags.get("turns", "3"))
            calls = (
                [
                    Call(
                        _new_id(),
                        "echo",
                        orjson.dumps({"conv": cid, "turn": turn, "i": i}).decode(),
                    )
                    for i in range(1 + turn % 3)
                ]
                if turn < turns
                else []
            )
        conv.emitted[turn] = calls
        if not calls:
            conv.final = True
            return self._final(cid), []
        return None, calls

    def _final(self, cid: str) -> str:
        return f"tpx-e2e-final {cid}" if self.script == "bash" else f"final {cid}"

    def _check(self, cid: str, conv: Conversation, messages: list[JSON]) -> None:
        """The history must echo exactly this conversation's emitted ids, turn by turn."""
        turn = 0
        i = 0
        while i < len(messages):
            m = messages[i]
            i += 1
            if m.get("role") != "assistant":
                continue
            emitted = conv.emitted.get(turn)
            seen = [c.get("id") for c in m.get("tool_calls") or []]
            if emitted is None and self.shared:  # another upstream answered that turn
                conv.adopted[turn] = [str(i) for i in seen]
                while i < len(messages) and messages[i].get("role") == "tool":
                    i += 1
                turn += 1
                continue
            if emitted is None:
                self.ledger.violations.append(
                    f"{cid} turn {turn}: history has a turn never emitted"
                )
            elif seen != [c.id for c in emitted]:
                self.ledger.violations.append(
                    f"{cid} turn {turn}: assistant tool_calls {seen} != emitted "
                    f"{[c.id for c in emitted]}"
                )
            results: list[JSON] = []
            while i < len(messages) and messages[i].get("role") == "tool":
                results.append(messages[i])
                i += 1
            if emitted is not None:
                self._check_results(cid, turn, emitted, results)
            turn += 1

    def _check_results(self, cid: str, turn: int, emitted: list[Call], results: list[JSON]) -> None:
        got = sorted(str(r.get("tool_call_id")) for r in results)
        if got != sorted(c.id for c in emitted):
            self.ledger.violations.append(
                f"{cid} turn {turn}: tool results {got} != emitted {sorted(c.id for c in emitted)}"
            )
            return
        if self.script != "load":
            return
        by_id = {c.id: c for c in emitted}
        for r in results:
            call = by_id[str(r["tool_call_id"])]
            content = _text_of(r.get("content"))
            if content != f"result:{call.arguments}":
                self.ledger.violations.append(
                    f"{cid} turn {turn}: result {content!r} does not answer {call.arguments}"
                )


def _usage() -> JSON:
    return {"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110}


def _completion(
    request: JSON, text: str | None, calls: list[Call], reasoning: str | None = None
) -> JSON:
    message: JSON = {"role": "assistant", "content": text}
    if reasoning is not None:
        message["reasoning_content"] = reasoning
    if calls:
        message["tool_calls"] = [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
            for c in calls
        ]
    return {
        "id": "chatcmpl-" + secrets.token_hex(8),
        "object": "chat.completion",
        "created": int(time.time()),
        "model": request.get("model", "fake"),
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": "tool_calls" if calls else "stop",
            }
        ],
        "usage": _usage(),
    }


async def _respond(send: Send, status: int, payload: JSON, retry_after: str | None = None) -> None:
    data = orjson.dumps(payload)
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode())]
    if retry_after is not None:
        headers.append((b"retry-after", retry_after.encode()))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": data})


async def _stream(
    send: Send,
    request: JSON,
    text: str | None,
    calls: list[Call],
    hold: float | asyncio.Event,
    reasoning: str | None = None,
    flood: int = 0,
) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": 200,
            "headers": [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache")],
        }
    )
    base = {
        "id": "chatcmpl-" + secrets.token_hex(8),
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": request.get("model", "fake"),
    }

    def chunk(delta: JSON, finish: str | None = None) -> bytes:
        body = {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
        return b"data: " + orjson.dumps(body) + b"\n\n"

    async def emit(data: bytes) -> None:
        await send({"type": "http.response.body", "body": data, "more_body": True})

    await emit(chunk({"role": "assistant", "content": ""}))
    if isinstance(hold, asyncio.Event):
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(hold.wait(), 300)
    elif hold > 0:
        await asyncio.sleep(hold)
    if reasoning is not None:
        half = len(reasoning) // 2
        await emit(chunk({"reasoning_content": reasoning[:half]}))
        await emit(chunk({"reasoning_content": reasoning[half:]}))
    piece = "x" * (16 << 10)
    for _ in range(flood // len(piece)):
        await emit(chunk({"content": piece}))
    if text is not None:
        half = len(text) // 2
        await emit(chunk({"content": text[:half]}))
        await emit(chunk({"content": text[half:]}))
    # Parallel calls: every call's header first, then the argument halves interleaved.
    for i, c in enumerate(calls):
        head = {"index": i, "id": c.id, "type": "function"}
        await emit(chunk({"tool_calls": [{**head, "function": {"name": c.name, "arguments": ""}}]}))
    for part in (0, 1):
        for i, c in enumerate(calls):
            cut = len(c.arguments) // 2
            piece = c.arguments[:cut] if part == 0 else c.arguments[cut:]
            await emit(chunk({"tool_calls": [{"index": i, "function": {"arguments": piece}}]}))
    await emit(chunk({}, "tool_calls" if calls else "stop"))
    if (request.get("stream_options") or {}).get("include_usage"):
        usage = {**base, "choices": [], "usage": _usage()}
        await emit(b"data: " + orjson.dumps(usage) + b"\n\n")
    await send({"type": "http.response.body", "body": b"data: [DONE]\n\n", "more_body": False})


def main() -> None:
    import uvicorn

    parser = argparse.ArgumentParser(description="scripted fake OpenAI-compatible upstream")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--token", default=None)
    parser.add_argument("--script", choices=("bash", "load"), default="bash")
    parser.add_argument("--command", default=DEFAULT_COMMAND)
    parser.add_argument("--shared", action="store_true")
    parser.add_argument("--ledger-file", default=None)
    parser.add_argument("--no-faults", action="store_true")
    args = parser.parse_args()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", args.port))
    app = FakeOpenAI(
        script=args.script,
        command=args.command,
        token=args.token,
        shared=args.shared,
        ledger_file=args.ledger_file,
        faults=not args.no_faults,
    )
    config = uvicorn.Config(
        app, log_level="warning", access_log=False, backlog=4096, timeout_keep_alive=30
    )
    print(f"FAKE_OPENAI_PORT={sock.getsockname()[1]}", flush=True)
    uvicorn.Server(config).run(sockets=[sock])


if __name__ == "__main__":
    main()
