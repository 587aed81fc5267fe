"""``tpx serve --monitor`` with ``[[upstreams]]``: an answer from an upstream in cooldown ends
its cooldown (:meth:`tpx.gateway.dispatch.Dispatcher.succeeded`), and the monitor is told so
(a ``Recover``), so the next request to that upstream is one the spec allows.

The scene, over the scripted upstreams of :mod:`conformance.pool_upstreams`: request A
reaches u1 and is held; B goes to u2 (the less loaded) and is held; C goes to u1 (a tie: the
route's first), which refuses it with a 503: u1 cools down and C moves to u2. Then u1
answers A: its cooldown is over. D, asking for u1 first, must reach u1 and be answered,
with no monitor violation."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx2
import orjson

from conformance.failover_gateway import FailoverGateway, metrics
from conformance.pool_upstreams import Act, Arrival, PoolUpstreams
from tpx.audit.harness import GATEWAY_KEY

GUARD_S = 60.0  # a hang guard only: every wait is for an event


def _body(key: str) -> bytes:
    return orjson.dumps(
        {
            "model": "to-u1",
            "max_tokens": 64,
            "messages": [{"role": "user", "content": f"[conv:{key}] hello"}],
        }
    )


async def _scene() -> tuple[list[str], int, dict[tuple[str, str], float], str]:
    """The upstreams D reached, D's status, the gateway's ``/metrics`` and its log."""
    upstreams = PoolUpstreams(("u1", "u2"))
    await upstreams.start()
    urls = {n: u.url for n, u in upstreams.upstreams.items()}
    gw = await asyncio.to_thread(FailoverGateway.start, urls, monitor=True)
    http = httpx2.AsyncClient(
        base_url=gw.url,
        headers={"x-api-key": GATEWAY_KEY, "anthropic-version": "2023-06-01"},
        timeout=httpx2.Timeout(GUARD_S),
    )

    def send(key: str) -> asyncio.Future[httpx2.Response]:
        return asyncio.ensure_future(
            http.post(
                "/v1/messages", content=_body(key), headers={"content-type": "application/json"}
            )
        )

    async def arrival(key: str) -> Arrival:
        return await asyncio.wait_for(upstreams.queue(key).get(), GUARD_S)

    async def act(ex: Arrival, what: Act) -> None:
        ex.acted.clear()
        ex.acts.put_nowait(what)
        await asyncio.wait_for(ex.acted.wait(), GUARD_S)

    try:
        a = send("A")
        a1 = await arrival("A")
        b = send("B")
        b1 = await arrival("B")
        c = send("C")
        c1 = await arrival("C")
        assert (a1.upstream, b1.upstream, c1.upstream) == ("u1", "u2", "u1")
        await act(c1, Act("refuse", 503))  # u1 cools down; C moves on
        c2 = await arrival("C")
        assert c2.upstream == "u2"
        await act(a1, Act("take"))  # an answer from u1: its cooldown is over
        await act(a1, Act("reply"))
        assert (await asyncio.wait_for(a, GUARD_S)).status_code == 200
        for ex, done in ((b1, b), (c2, c)):
            await act(ex, Act("take"))
            await act(ex, Act("reply"))
            assert (await asyncio.wait_for(done, GUARD_S)).status_code == 200
        d = send("D")
        got = asyncio.ensure_future(arrival("D"))
        either: set[asyncio.Future[Any]] = {got, d}
        await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
        if got.done():
            await act(got.result(), Act("take"))
            await act(got.result(), Act("reply"))
        else:
            got.cancel()
        status = (await asyncio.wait_for(d, GUARD_S)).status_code
        reached = [ex.upstream for ex in upstreams.arrivals.get("D", [])]
        samples = await metrics(http, gw)
    finally:
        await http.aclose()
        await asyncio.to_thread(gw.stop)
        await upstreams.close()
    return reached, status, samples, gw.output()


def test_an_answer_ends_a_cooldown_for_the_monitor_too() -> None:
    reached, status, samples, log = asyncio.run(_scene())
    violations = {
        labels: v
        for (name, labels), v in samples.items()
        if name == "tpx_gateway_monitor_violations_total" and v
    }
    assert violations == {}, log
    assert (reached, status) == (["u1"], 200), log
    assert samples[("tpx_gateway_monitor_steps_total", "")] > 0
