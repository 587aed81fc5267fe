"""What the context-window preflight costs the gateway core, side by side.

    .venv/bin/python -m benchmarks.context_cost [--rounds 3000]

``Gateway.handle`` (TPX, in-process, no I/O) on the first turn Claude Code 2.1.197 sent
(tests/fixtures/clients/claude-code/2.1.197/bash/002-post-v1-messages.json, about 75 KB), its
first user text ending with the round's number (each round's messages differ, as a session's
turns do). Three settings take turns, a round each:

* ``off``: ``[context] preflight = false``;
* ``spared``: the default window (200K): the size test spares counting;
* ``counted``: a 131,072-token window: every turn is translated a second time and counted;
* ``vllm``: ``spared`` with the vLLM profile, and ``tokenizer``: the same with ``[context]
  tokenizer = true``: a turn the size test spares is not asked about either (the endpoint is
  asked only for a turn near its window).

Prints the median and 90th percentile of each, in microseconds.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import attrs
import orjson

from tpx.gateway.context.config import ContextConfig
from tpx.gateway.core import Gateway, Request, Turn
from tpx.gateway.settings import Credential, Settings
from tpx.transport.exchange import Provider
from tpx.transport.translate.profiles import get_profile

__all__ = ["main"]

TURN = (
    Path(__file__).resolve().parent.parent
    / "tests/fixtures/clients/claude-code/2.1.197/bash/002-post-v1-messages.json"
)


def _gateway(context: ContextConfig, profile: str = "generic") -> Gateway:
    settings = Settings(
        provider=Provider.TPX,
        base_url="http://upstream.test",
        credential=Credential("token"),
        secret=b"secret",
        model="m",
        profile=get_profile(profile),
    )
    return Gateway(attrs.evolve(settings, context=context))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3000)
    rounds = parser.parse_args().rounds
    body = orjson.loads(TURN.read_bytes())["body"]
    bodies = []
    for i in range(50):
        changed = orjson.loads(orjson.dumps(body))
        changed["messages"][0]["content"][-1]["text"] += f" {i}"
        bodies.append(orjson.dumps(changed))
    gateways = {
        "off": _gateway(ContextConfig(preflight=False)),
        "spared": _gateway(ContextConfig()),
        "counted": _gateway(ContextConfig(window=131_072)),
        "vllm": _gateway(ContextConfig(), "vllm"),
        "tokenizer": _gateway(ContextConfig(tokenizer=True), "vllm"),
    }
    times: dict[str, list[float]] = {name: [] for name in gateways}
    headers = {"content-type": "application/json"}
    for i in range(rounds + 20):
        for name, gateway in gateways.items():
            request = Request("POST", "/v1/messages", "", headers, bodies[i % len(bodies)])
            started = time.perf_counter()
            result = gateway.handle(request)
            took = time.perf_counter() - started
            assert isinstance(result, Turn)
            result.close()
            if i >= 20:  # the first rounds warm the caches
                times[name].append(took)
    for name, taken in times.items():
        ordered = sorted(taken)
        median = statistics.median(ordered) * 1e6
        p90 = ordered[int(len(ordered) * 0.9)] * 1e6
        print(f"{name:9} median {median:8.1f} us   p90 {p90:8.1f} us")


if __name__ == "__main__":
    main()
