"""The Messages API's endpoints a client calls directly, checked without the replay:
``count_tokens`` and ``/v1/models`` (both modes), and ``tpx audit --live`` (a real model
behind the URL: the checks that need no scripted upstream).
"""

from __future__ import annotations

import time
from typing import Any

import httpx2
import orjson

from tpx.audit import checks
from tpx.audit.findings import Failure, Result

__all__ = ["JSON_HEADERS", "audit_live", "endpoint_failures", "kept_headers", "text_of"]

JSON_HEADERS = {"content-type": "application/json"}


def text_of(data: bytes | None, limit: int = 6000) -> str:
    if data is None:
        return ""
    text = data.decode("utf-8", "replace")
    return text if len(text) <= limit else text[:limit] + f"... ({len(text)} characters)"


def kept_headers(headers: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in headers.items() if k in ("content-type", "retry-after", "request-id")}


def endpoint_failures(result: Result, counted: httpx2.Response, models: httpx2.Response) -> None:
    for name, response, found in (
        (
            "count_tokens",
            counted,
            checks.count_tokens_problems(counted.status_code, counted.content),
        ),
        ("models", models, checks.models_problems(models.status_code, models.content)),
    ):
        result.ran.add("CountTokens" if name == "count_tokens" else "Models")
        for check, message in found:
            if check == "ErrorShape":
                check = "CountTokens" if name == "count_tokens" else "Models"
            request = response.request
            result.add(
                Failure(
                    check,
                    message,
                    f"POST {request.url.path}" if request.method == "POST" else request.url.path,
                    [f"{request.method} {request.url.path}"],
                    [
                        {
                            "conversation": "",
                            "request": text_of(request.content),
                            "status": response.status_code,
                            "headers": {},
                            "answer": text_of(response.content),
                        }
                    ],
                    [],
                )
            )


def audit_live(url: str, key: str, model: str, *, timeout: float = 120.0) -> Result:
    """The checks that need no scripted upstream, against a real model at *url*."""
    start = time.monotonic()
    result = Result(url, "live")
    headers = {"x-api-key": key, "anthropic-version": "2023-06-01", **JSON_HEADERS}
    tool = {
        "name": "lookup",
        "description": "Look a word up.",
        "input_schema": {"type": "object", "properties": {"word": {"type": "string"}}},
    }
    with httpx2.Client(base_url=url.rstrip("/"), headers=headers, timeout=timeout) as http:
        turns: list[tuple[str, dict[str, Any]]] = []
        base = {"model": model, "max_tokens": 256}
        ask = [{"role": "user", "content": "Look up the word 'audit' with the lookup tool."}]
        forced = {**base, "messages": ask, "tools": [tool], "tool_choice": {"type": "any"}}
        turns.append(("plain, a tool call forced", forced))
        turns.append(("streamed, a tool call forced", {**forced, "stream": True}))
        turns.append(("missing max_tokens", {"model": model, "messages": ask}))
        for where, body in turns:
            response = http.post("/v1/messages", content=orjson.dumps(body))
            result.requests += 1
            found: list[checks.Problem]
            message: Any = None
            if response.status_code >= 400:
                found = checks.error_problems(response.status_code, response.content, where)
                if "max_tokens" not in body and response.status_code != 400:
                    found.append(("ErrorShape", f"{where}: answered {response.status_code}"))
            elif body.get("stream"):
                found, message = checks.stream_problems(response.content, where)
            else:
                message = orjson.loads(response.content)
                found = checks.message_problems(message, where)
            if "max_tokens" not in body and response.status_code == 200:
                found.append(("ErrorShape", f"{where}: answered 200, not 400"))
            if isinstance(message, dict):
                uses = [b for b in message.get("content", []) if b.get("type") == "tool_use"]
                if uses:
                    found += _live_round(http, body, message, uses, where)
                    result.requests += 2
                    result.ran.add("Refusal")
            for check, text in found:
                result.add(
                    Failure(
                        check,
                        text,
                        where,
                        ["POST /v1/messages"],
                        [
                            {
                                "conversation": "",
                                "request": text_of(orjson.dumps(body)),
                                "status": response.status_code,
                                "headers": kept_headers(dict(response.headers)),
                                "answer": text_of(response.content),
                            }
                        ],
                        [],
                    )
                )
        counted = http.post(
            "/v1/messages/count_tokens",
            content=orjson.dumps({"model": model, "messages": ask}),
        )
        models = http.get("/v1/models")
        endpoint_failures(result, counted, models)
    result.ran |= {"ShapeInv", "MessageId", "Usage", "PairingInv", "ErrorShape"}
    result.seconds = time.monotonic() - start
    return result


def _live_round(
    http: httpx2.Client,
    body: dict[str, Any],
    message: dict[str, Any],
    uses: list[dict[str, Any]],
    where: str,
) -> list[checks.Problem]:
    """The tool calls answered: a correct round is taken (200), an invented id refused 400."""
    answers = [
        {"type": "tool_result", "tool_use_id": u["id"], "content": "an examination"} for u in uses
    ]
    history = [*body["messages"], {"role": "assistant", "content": message["content"]}]
    good = {**body, "stream": False, "tool_choice": {"type": "auto"}}
    good["messages"] = [*history, {"role": "user", "content": answers}]
    found: list[checks.Problem] = []
    response = http.post("/v1/messages", content=orjson.dumps(good))
    if response.status_code != 200:
        found.append(
            ("PairingInv", f"{where}: the calls answered, the endpoint said {response.status_code}")
        )
    forged = [*answers, {"type": "tool_result", "tool_use_id": "toolu_forged", "content": "x"}]
    bad = {**good, "messages": [*history, {"role": "user", "content": forged}]}
    response = http.post("/v1/messages", content=orjson.dumps(bad))
    if response.status_code != 400:
        found.append(
            ("Refusal", f"{where}: a result for an id never issued answered {response.status_code}")
        )
    return found
