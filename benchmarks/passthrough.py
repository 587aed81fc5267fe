"""The floor under ``tpx serve``'s added latency: the same HTTP stack doing no work.

    python -m benchmarks.passthrough PORT UPSTREAM_URL PLAIN_BODY STREAM_BODY
                                                    (started by benchmarks.gateway_latency)

uvicorn (httptools, uvloop, tpx's own protocol class) takes the Messages request, and the
upstream gets the Chat Completions body tpx would send (the files PLAIN_BODY / STREAM_BODY,
translated once by the benchmark),
through one ``httpx2.AsyncClient`` on the transport ``tpx serve`` uses
(:class:`tpx.gateway.h1.H1Transport`); the upstream's bytes go back as they come. No
parsing, translation, pairing, ids, logging or metrics: what is left of a request's cost is
the two HTTP hops themselves. ``tpx`` minus ``floor`` in the same run is what tpx's own
work adds.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import httpx2
import uvicorn

from tests.e2e.procs import UPSTREAM_TOKEN
from tpx.gateway.h1 import H1Transport
from tpx.gateway.protocol import HeaderTimeoutProtocol


def app_for(upstream: str, bodies: dict[bool, bytes]) -> Any:
    client = httpx2.AsyncClient(transport=H1Transport(), timeout=60)
    url = httpx2.URL(upstream)
    headers = httpx2.Headers(  # normalized once, as tpx.gateway.upstream keeps them
        [
            ("Host", url.netloc.decode("ascii")),
            *client.headers.items(),
            ("authorization", f"Bearer {UPSTREAM_TOKEN}"),
            ("content-type", "application/json"),
        ]
    )
    extensions = {"timeout": httpx2.Timeout(60).as_dict()}

    async def app(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        body = b""
        more = True
        while more:
            message = await receive()
            body += message.get("body", b"")
            more = message.get("more_body", False)
        stream = b'"stream":true' in body
        # built as tpx.gateway.upstream builds its requests (the URL parsed once, the
        # headers normalized once)
        content = bodies[stream]
        request = httpx2.Request(
            "POST",
            url,
            headers=headers,
            stream=httpx2.ByteStream(content),
            extensions=extensions,
        )
        request.headers["Content-Length"] = str(len(content))
        request.read()
        response = await client.send(request, stream=True)
        try:
            kind = b"text/event-stream" if stream else b"application/json"
            await send(
                {"type": "http.response.start", "status": 200, "headers": [(b"content-type", kind)]}
            )
            async for chunk in response.aiter_raw():
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b""})
        finally:
            await response.aclose()

    return app


def main() -> None:
    port, upstream = int(sys.argv[1]), sys.argv[2]
    bodies = {False: Path(sys.argv[3]).read_bytes(), True: Path(sys.argv[4]).read_bytes()}
    uvicorn.run(
        app_for(upstream, bodies),
        host="127.0.0.1",
        port=port,
        loop="uvloop",
        http=HeaderTimeoutProtocol,
        access_log=False,
        proxy_headers=False,
        log_level="warning",
        server_header=False,
    )


if __name__ == "__main__":
    main()
