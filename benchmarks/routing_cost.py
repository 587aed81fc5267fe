"""What routing over ``[[upstreams]]`` adds to the CPU time of one request.

Run: ``python -m benchmarks.routing_cost [--rounds 2000]``. For every recorded Claude Code turn
(``tests/fixtures/clients/claude-code``), the sans-I/O core (``Gateway.handle``) is timed with
one upstream and with three upstreams behind five routing rules (every condition is evaluated: a
turn reaches the last rule, a background call the one before it), interleaved; then the pool's
decisions for the routed turn (the plan, the pick, the target, in flight up and down, the
success). Every turn is closed once timed, as the gateway closes it when its exchange ends (its
log line written, its slot of ``limits.max_in_flight`` freed). Printed: the p50 of each, the p50
of the per-round difference and the p50 of what routing adds to a request in a round (the routed
``Gateway.handle`` plus the pool's decisions, minus the one upstream's ``Gateway.handle``), in
milliseconds of thread CPU time, against the bound routing is held to (:data:`BOUND_MS`). The
table goes into docs/performance.md (``benchmarks/report.py``).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.corpus import claude_code_bytes
from benchmarks.report import markdown_table, write_section
from tpx.gateway.core import Gateway, Request, Turn
from tpx.gateway.dispatch import Dispatcher, Plan, first
from tpx.gateway.settings import Settings, load_settings

#: What routing may add to a request: milliseconds of CPU time, p50.
BOUND_MS = 0.05

#: Every window far above the recorded turns (the largest, ~30,000 tokens, counted with the
#: estimate's margin, comes near the default 200,000): no turn is placed by its size, in
#: either gateway, so the two differ only in routing (the preflight: benchmarks/context_cost.py).
WIDE = "\n[context]\ndefault = 1000000\ndiscover = false\n"

ROUTED = (
    """
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
tools = ["web_search*"]
upstreams = ["cloud"]

[[routes]]
min_input_tokens = 500000
upstreams = ["cloud"]

[[routes]]
subagent = true
upstreams = ["small", "big"]

[[routes]]
background = true
upstreams = ["small", "cloud"]

[[routes]]
upstreams = ["big", "cloud"]
"""
    + WIDE
)
PLAIN = '[upstream]\nmodel = "big-model"\n' + WIDE
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
    """The CPU time of ``Gateway.handle`` on *body*; the turn closed after it."""
    request = Request("POST", "/v1/messages", "", HEADERS, body)
    began = time.thread_time()
    result = gateway.handle(request)
    spent = time.thread_time() - began
    assert isinstance(result, Turn), result
    result.close()
    return spent


def _decide(gateway: Gateway, dispatcher: Dispatcher, body: bytes) -> float:
    """The CPU time of the pool's decisions for the routed turn of *body* (as
    ``UpstreamPool.open`` takes them for an attempt that succeeds); the turn closed after."""
    turn = gateway.handle(Request("POST", "/v1/messages", "", HEADERS, body))
    assert isinstance(turn, Turn), turn
    assert turn.routed is not None
    routing = dispatcher.routing
    assert turn.routed.rule in routing.rules[-2:], turn.routed.rule  # every condition evaluated
    began = time.thread_time()
    plan = Plan(turn.routed.rule.upstreams)
    step = first(dispatcher, plan, 0.0)
    turn.target(routing.upstream(step.upstream))
    dispatcher.began(step.upstream)
    dispatcher.succeeded(step.upstream)
    dispatcher.ended(step.upstream)
    spent = time.thread_time() - began
    turn.close()
    return spent


def _ms(seconds: list[float]) -> float:
    return statistics.median(seconds) * 1000.0


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
    total: list[float] = []
    for _ in range(20):  # warm up: the kept request tails, the translations
        for body in bodies:
            _handle(plain, body)
            _handle(routed, body)
            _decide(routed, dispatcher, body)
    for n in range(args.rounds):
        body = bodies[n % len(bodies)]
        a = _handle(plain, body)
        b = _handle(routed, body)
        d = _decide(routed, dispatcher, body)
        one.append(a)
        many.append(b)
        added.append(b - a)
        decided.append(d)
        total.append(b + d - a)
    # every turn was closed: none is left in flight, in the gateways nor in the pool
    assert plain.in_flight == routed.in_flight == 0, (plain.in_flight, routed.in_flight)
    assert all(h.in_flight == 0 for h in dispatcher.health.values())
    rows = [
        ("`Gateway.handle`, one upstream", f"{_ms(one):.4f}"),
        ("`Gateway.handle`, `[[upstreams]]` routed", f"{_ms(many):.4f}"),
        ("added by routing to `Gateway.handle` (per-round difference)", f"{_ms(added):.4f}"),
        ("the pool's decisions (plan, pick, target, in flight, success)", f"{_ms(decided):.4f}"),
        ("**added by routing to a request** (per round: both above)", f"**{_ms(total):.4f}**"),
    ]
    met = _ms(total) <= BOUND_MS
    verdict = f"routing adds {_ms(total):.4f} ms p50 to a request: {'within' if met else 'ABOVE'}"
    verdict += f" the bound of {BOUND_MS} ms"
    print(f"{len(bodies)} recorded Claude Code turns, {args.rounds} rounds (thread CPU, p50)")
    for label, value in rows:
        print(f"  {label.replace('`', '').replace('*', ''):66} {value.strip('*'):>8} ms")
    print(verdict)
    command = ".venv/bin/python -m benchmarks.routing_cost " + " ".join(sys.argv[1:])
    table = markdown_table(("thread CPU time, p50", "ms"), rows)
    notes = [
        f"{len(bodies)} recorded Claude Code turns, {args.rounds} rounds, interleaved; "
        "every condition of the five rules is evaluated (a turn reaches the last rule, "
        "a background call the one before it).",
        f"Bound: routing adds at most {BOUND_MS} ms p50 to a request; this run: "
        f"{'within' if met else 'ABOVE'} it.",
    ]
    written = write_section("routing", command.strip(), table, notes=notes)
    if written is not None:
        print(f"table written to {written}")


if __name__ == "__main__":
    main()
