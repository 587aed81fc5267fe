"""What routing over ``[[upstreams]]`` adds to the CPU time of one request.

Run: ``python -m benchmarks.routing_cost [--rounds 2000]``. For every recorded Claude Code turn
(``tests/fixtures/clients/claude-code``), the sans-I/O core (``Gateway.handle``) is timed with
one upstream and with three upstreams behind five routing rules (the request reaches the last
rule, so every condition is evaluated), interleaved; then the pool's decisions for the routed
turn (the plan, the pick, the target, in flight up and down, the success). Printed: the p50 of
each and the p50 of the per-round difference, in milliseconds of thread CPU time.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from benchmarks.corpus import claude_code_bytes
from tpx.gateway.core import Gateway, Request, Turn
from tpx.gateway.dispatch import Dispatcher, Plan, first
from tpx.gateway.settings import Settings, load_settings

ROUTED = """
[[upstreams]]
name = "small"
base_url = "http://127.0.0.1:8001/v1"
models = ["small-model"]

[[upstreams]]
name = "big"
base_url = "http://127.0.0.1:8000/v1"
models = ["big-model"]

[[upstreams]]
name = "cloud"
base_url = "http://127.0.0.1:8002/v1"
models = ["cloud-model"]

[[routes]]
background = true
upstreams = ["small", "cloud"]

[[routes]]
tools = ["web_search*"]
upstreams = ["cloud"]

[[routes]]
min_input_tokens = 500000
upstreams = ["cloud"]

[[routes]]
subagent = true
upstreams = ["small", "big"]

[[routes]]
upstreams = ["big", "cloud"]
"""
PLAIN = '[upstream]\nmodel = "big-model"\n'
ENV = {
    "TPX_OAUTH_TOKEN": "t",
    "TPX_BASE_URL": "http://127.0.0.1:8000/v1",
    "TPX_GATEWAY_SECRET": "s",
}
HEADERS = {"content-type": "application/json", "anthropic-version": "2023-06-01"}


def _settings(text: str) -> Settings:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "gateway.toml"
        path.write_text(text)
        return load_settings(env=ENV, config_file=path)


def _handle(gateway: Gateway, body: bytes) -> float:
    request = Request("POST", "/v1/messages", "", HEADERS, body)
    began = time.thread_time()
    result = gateway.handle(request)
    spent = time.thread_time() - began
    assert isinstance(result, Turn), result
    return spent


def _decide(gateway: Gateway, dispatcher: Dispatcher, body: bytes) -> float:
    turn = gateway.handle(Request("POST", "/v1/messages", "", HEADERS, body))
    assert isinstance(turn, Turn)
    assert turn.routed is not None
    routing = dispatcher.routing
    began = time.thread_time()
    plan = Plan(turn.routed.rule.upstreams)
    step = first(dispatcher, plan, 0.0)
    turn.target(routing.upstream(step.upstream))
    dispatcher.began(step.upstream)
    dispatcher.succeeded(step.upstream)
    dispatcher.ended(step.upstream)
    return time.thread_time() - began


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2000)
    args = parser.parse_args()
    plain = Gateway(_settings(PLAIN))
    routed_settings = _settings(ROUTED)
    routed = Gateway(routed_settings)
    assert routed_settings.routing is not None
    dispatcher = Dispatcher(routed_settings.routing)
    bodies = claude_code_bytes()
    one: list[float] = []
    many: list[float] = []
    added: list[float] = []
    decided: list[float] = []
    for _ in range(20):  # warm up: the kept request tails, the translations
        for body in bodies:
            _handle(plain, body)
            _handle(routed, body)
    for n in range(args.rounds):
        body = bodies[n % len(bodies)]
        a = _handle(plain, body)
        b = _handle(routed, body)
        one.append(a)
        many.append(b)
        added.append(b - a)
        decided.append(_decide(routed, dispatcher, body))
    ms = 1000.0
    print(f"{len(bodies)} recorded Claude Code turns, {args.rounds} rounds (thread CPU, p50)")
    print(f"  Gateway.handle, one upstream        {statistics.median(one) * ms:8.4f} ms")
    print(f"  Gateway.handle, [[upstreams]] routed {statistics.median(many) * ms:8.4f} ms")
    print(f"  added by routing (per-round diff)   {statistics.median(added) * ms:8.4f} ms")
    print(f"  pool decisions (plan, pick, target) {statistics.median(decided) * ms:8.4f} ms")


if __name__ == "__main__":
    main()
