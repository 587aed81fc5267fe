"""A fake OpenAI-compatible upstream with a small context window (plain ASGI).

    python -m tests.e2e.fake_window [--port 0] [--token T] --window N [--profile vllm|llama.cpp]
                                    [--form NAME] [--steps K] [--lines L]

prints ``FAKE_OPENAI_PORT=<port>``, then serves ``POST /v1/chat/completions`` (streaming or not)
and ``GET /_ledger``. Every request's tokens are counted (tiktoken ``cl100k_base``, tpx's own
framing: :func:`tpx.gateway.tokens.count_openai_request`); one above ``--window`` is answered
with the context error the ``--profile`` server sends (HTTP 400, as vLLM or llama.cpp word it;
with ``--form``, that form's body of ``tests/fixtures/upstream/context_errors.json``, its
example numbers made the request's tokens and the window), streamed or not, and nothing else.

The task, per conversation (``[conv:ID]`` in the user text): ``--steps`` Bash calls, each
printing ``--lines`` numbered lines (a few thousand tokens of tool output, so the history
outgrows the window), then a final text ``tpx-e2e-final <ID>``. The script is stateful: a step
is done once its tool result has come back (the result ids seen), so it resumes after the
client compacted its history. A compaction request (the client asking for a summary of the
conversation) is answered with a summary naming the conversation and the steps done; the
ledger keeps the first such request as it arrived (``compaction_request``).
"""

from __future__ import annotations

import argparse
import re
import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from tests.e2e.fake_openai import (
    JSON,
    Call,
    Receive,
    Scope,
    Send,
    _completion,
    _new_id,
    _respond,
    _stream,
    _tags,
    _text_of,
)
from tpx.gateway.tokens import count_openai_request

#: How a request asking for a summary of the conversation (a compaction) reads.
COMPACTION_MARKERS = ("detailed summary of the conversation", "summary of the conversation so far")


#: The context errors as each server builds them (each with where its source builds it).
ERRORS = Path(__file__).resolve().parents[1] / "fixtures" / "upstream" / "context_errors.json"


def fixture_body(profile: str, form: str, tokens: int, window: int) -> tuple[int, JSON]:
    """The status and body of the fixture's first *profile* case of *form*, its example prompt
    tokens and maximum (``n`` and ``m``, where it says them) replaced by *tokens* and
    *window*."""
    cases = orjson.loads(ERRORS.read_bytes())["cases"]
    case = next(c for c in cases if c["profile"] == profile and c["form"] == form)
    text = orjson.dumps(case["body"]).decode()
    for example, actual in ((case["n"], tokens), (case["m"], window)):
        if example is not None:
            text = re.sub(rf"(?<!\d){example}(?!\d)", str(actual), text)
    return case["status"], orjson.loads(text)


def overflow_body(profile: str, tokens: int, window: int) -> JSON:
    """The context error *profile*'s server answers (its own wording)."""
    if profile == "llama.cpp":
        return {
            "error": {
                "code": 400,
                "message": f"request ({tokens} tokens) exceeds the available context size "
                f"({window} tokens), try increasing it",
                "type": "exceed_context_size_error",
                "n_prompt_tokens": tokens,
                "n_ctx": window,
            }
        }
    return {
        "object": "error",
        "message": f"This model's maximum context length is {window} tokens. However, you "
        f"requested {tokens} tokens ({tokens} in the messages, 0 in the completion). Please "
        "reduce the length of the messages or completion.",
        "type": "BadRequestError",
        "param": None,
        "code": 400,
    }


@dataclass
class Task:
    done: set[str] = field(default_factory=set)  #: tool-call ids whose results came back
    emitted: set[str] = field(default_factory=set)
    requests: int = 0
    refused: int = 0
    compactions: int = 0
    final: bool = False


@dataclass
class FakeWindow:
    window: int
    profile: str = "vllm"
    form: str | None = None
    steps: int = 4
    lines: int = 600
    token: str | None = None
    tasks: dict[str, Task] = field(default_factory=dict)
    largest: int = 0
    compaction_request: JSON | None = None
    violations: list[str] = field(default_factory=list)

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
            await _respond(send, 200, self.snapshot())
            return
        if scope["method"] != "POST" or path != "/v1/chat/completions":
            await _respond(send, 404, {"error": {"message": f"no route {path}"}})
            return
        if self.token is not None:
            headers = dict(scope["headers"])
            if headers.get(b"authorization", b"") != f"Bearer {self.token}".encode():
                await _respond(send, 401, {"error": {"message": "bad token"}})
                return
        await self.complete(orjson.loads(body), send)

    def snapshot(self) -> JSON:
        return {
            "window": self.window,
            "largest_accepted": self.largest,
            "violations": self.violations,
            "compaction_request": self.compaction_request,
            "tasks": {
                cid: {
                    "done": len(t.done),
                    "requests": t.requests,
                    "refused": t.refused,
                    "compactions": t.compactions,
                    "final": t.final,
                }
                for cid, t in self.tasks.items()
            },
        }

    async def complete(self, request: JSON, send: Send) -> None:
        messages: list[JSON] = request.get("messages", [])
        cid = _tags(messages).get("conv", "default")
        task = self.tasks.setdefault(cid, Task())
        task.requests += 1
        tokens = count_openai_request(request)
        if tokens > self.window:
            task.refused += 1
            if self.form is not None:
                status, error = fixture_body(self.profile, self.form, tokens, self.window)
                await _respond(send, status, error)
            else:
                await _respond(send, 400, overflow_body(self.profile, tokens, self.window))
            return
        self.largest = max(self.largest, tokens)
        limit = request.get("max_tokens")
        if isinstance(limit, int) and tokens + limit > self.window:
            self.violations.append(f"{cid}: {tokens} + max_tokens {limit} > {self.window}")
        for m in messages:
            if m.get("role") == "tool":
                task.done.add(str(m.get("tool_call_id")))
        last_user = next((m for m in reversed(messages) if m.get("role") == "user"), {})
        text: str | None
        calls: list[Call] = []
        if any(k in _text_of(last_user.get("content")).lower() for k in COMPACTION_MARKERS):
            task.compactions += 1
            if self.compaction_request is None:
                self.compaction_request = request
            text = (
                f"Summary of the work so far [conv:{cid}]: the user asked for "
                f"{self.steps} listing steps; {len(task.done)} are done."
            )
        elif not request.get("tools"):
            text = "side reply"
        elif len(task.done & task.emitted) >= self.steps:
            task.final = True
            text = f"tpx-e2e-final {cid}"
        else:
            step = len(task.done & task.emitted) + 1
            command = f"seq -f 'step {step} line %g of the listing' 1 {self.lines}"
            call = Call(_new_id(), "Bash", orjson.dumps({"command": command}).decode())
            task.emitted.add(call.id)
            text, calls = None, [call]
        if request.get("stream"):
            await _stream(send, request, text, calls, 0.0)
        else:
            await _respond(send, 200, _completion(request, text, calls))


def main() -> None:
    import uvicorn

    parser = argparse.ArgumentParser(description="fake OpenAI upstream with a small window")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--token", default=None)
    parser.add_argument("--window", type=int, required=True)
    parser.add_argument("--profile", default="vllm")
    parser.add_argument("--form", default=None)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--lines", type=int, default=600)
    args = parser.parse_args()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", args.port))
    app: Any = FakeWindow(
        window=args.window,
        profile=args.profile,
        form=args.form,
        steps=args.steps,
        lines=args.lines,
        token=args.token,
    )
    config = uvicorn.Config(app, log_level="warning", access_log=False)
    print(f"FAKE_OPENAI_PORT={sock.getsockname()[1]}", flush=True)
    uvicorn.Server(config).run(sockets=[sock])


if __name__ == "__main__":
    main()
