"""The context-window contract's seeded bugs: each one, applied to the code, fails the tests.

    .venv/bin/python -m tests.gateway.context.seeded_bugs

Each entry of :data:`BUGS` is (file, text, bug, tests): the text replaced by the bug in the
file, the tests run (``pytest -x``), the file restored from git (``git checkout -- FILE``)
whatever happens. Prints ``CAUGHT`` or ``MISSED`` per bug; exits 1 when one is missed. Run it
in a clean work tree: it rewrites files in place while it runs.
"""

from __future__ import annotations

import subprocess
import sys

PREFLIGHT = "tests/gateway/context/test_tokenizer_preflight.py"
BOUNDS = "tests/gateway/context/test_tokenizer_bounds.py"
UPSTREAMS = "tests/gateway/context/test_upstreams_tokenizer.py"
SYNC = "tests/gateway/context/test_tokenizer_sync_bounds.py"

BUGS = [
    (
        "tpx/gateway/context/asked.py",
        "        self._resumed = False\n",
        "        self._resumed = False\n        estimate()\n",
        "tests/gateway/context/test_tokenizer.py",
    ),
    (
        "tpx/gateway/context/gate.py",
        "        return self.count(sizing.translated, sizing.maximum)",
        "        return self.count(sizing.translated, None)",
        "tests/gateway/context/test_bounded_count.py",
    ),
    # the tokenizer endpoint asked twice a request (the sync shell, the ASGI shell)
    (
        "tpx/sdk.py",
        "            result = result.resume(ask_sync(result, self.upstream))",
        "            ask_sync(result, self.upstream)\n"
        "            result = result.resume(ask_sync(result, self.upstream))",
        PREFLIGHT,
    ),
    (
        "tpx/gateway/asgi.py",
        "                outcome = await _unless_gone(ask(result, self.upstream), receive)",
        "                await ask(result, self.upstream)\n"
        "                outcome = await _unless_gone(ask(result, self.upstream), receive)",
        PREFLIGHT,
    ),
    (
        "tpx/sdk.py",
        "            result = result.resume(await ask(result, self.upstream))",
        "            await ask(result, self.upstream)\n"
        "            result = result.resume(await ask(result, self.upstream))",
        PREFLIGHT,
    ),
    # the preflight ignoring the tokenizer endpoint (the estimate counts)
    (
        "tpx/gateway/core.py",
        "return self.context.asked(self, label, translated, upstream_model, go, maximum, log)",
        "return go(None)",
        PREFLIGHT,
    ),
    # no fallback: on a transport error (sync, async), on a timeout, on a count no request
    # of that size has, on a reply past the size bound
    (
        "tpx/gateway/context/asked.py",
        "    except Exception as error:  # the endpoint never fails the request\n",
        "    except errors.TimeoutError as error:\n",
        PREFLIGHT,
    ),
    (
        "tpx/gateway/context/asked.py",
        "    except Exception as error:  # the endpoint never fails the request (a timeout",
        "    except TimeoutError as error:  # (",
        PREFLIGHT,
    ),
    (
        "tpx/gateway/context/asked.py",
        "        async with asyncio.timeout_at(deadline):\n            response = await",
        "        async with asyncio.timeout_at(None):\n            response = await",
        f"{PREFLIGHT} tests/gateway/context/test_tokenizer_loopback.py",
    ),
    (
        "tpx/gateway/context/asked.py",
        "if tokens is not None and not 0 <= tokens <= len(self.call.body) + SLACK:",
        "if tokens is not None and tokens < 0:",
        PREFLIGHT,
    ),
    (
        "tpx/gateway/context/asked.py",
        "Decoder.of(response, asked.limit,",
        "Decoder.of(response, 1 << 30,",
        PREFLIGHT,
    ),
    # a refusal on the estimate said to be the endpoint's count
    (
        "tpx/gateway/context/placement.py",
        '"counted": "tokenizer" if counted is not None and counted.exact else "estimate",',
        '"counted": "tokenizer",',
        PREFLIGHT,
    ),
    # count_tokens counting a huge request in full
    (
        "tpx/gateway/core.py",
        "answer(Count(self.context.count(translated, self.context.ceiling()), exact=False))",
        "answer(Count(self.context.count(translated), exact=False))",
        "tests/gateway/context/test_bounded_count.py",
    ),
    (
        "tpx/gateway/tokens.py",
        "        if stop_above is not None and total > stop_above:\n"
        "            break\n    return total",
        "    return total",
        "tests/gateway/context/test_bounded_count.py",
    ),
    (
        "tpx/gateway/context/preflight.py",
        "    if input_tokens > maximum:",
        "    if input_tokens > window:",
        "tests/gateway/context/test_preflight.py tests/gateway/context/test_gateway_context.py",
    ),
    (
        "tpx/gateway/context/gate.py",
        '            body["max_tokens"] = verdict.max_tokens',
        "            pass",
        "tests/gateway/context/test_gateway_context.py",
    ),
    (
        "tpx/gateway/turn.py",
        "                event = self._too_long_event(event)",
        "                pass",
        "tests/gateway/context/test_gateway_context.py",
    ),
    (
        "tpx/gateway/turn.py",
        "            return self.error_response(error, self._too_long(status, body))\n"
        "        self._sign_message",
        "            return self.error_response(error)\n        self._sign_message",
        "tests/gateway/context/test_gateway_context.py",
    ),
    (
        "tpx/gateway/context/gate.py",
        "if not self.active or not self.config.rewrite_errors:",
        "if not self.active:",
        "tests/gateway/context/test_gateway_context.py",
    ),
    (
        "tpx/transport/translate/request.py",
        "if position == 0 and st.profile.drop_billing_header",
        "if position == 1 and st.profile.drop_billing_header",
        "tests/transport/translate/test_prefix_cache.py",
    ),
    (
        "tpx/gateway/context/counting.py",
        "MARGIN = 1.20",
        "MARGIN = 1.10",
        "tests/gateway/context/test_counting.py",
    ),
    (
        "tpx/gateway/context/counting.py",
        "ALLOWANCE = 64",
        "ALLOWANCE = 0",
        "tests/gateway/context/test_counting.py",
    ),
    (
        "tpx/gateway/context/preflight.py",
        "math.ceil(body_bytes * margin) + ALLOWANCE + SLACK",
        "body_bytes + SLACK",
        "tests/gateway/context/test_preflight.py",
    ),
    (
        "tpx/transport/translate/overflow.py",
        '            n_field="n_prompt_tokens",\n',
        "",
        "tests/transport/translate/test_overflow.py",
    ),
    (
        "tpx/gateway/context/gate.py",
        "        target = self.aliases.get(model)",
        "        target = None",
        "tests/gateway/context/test_gateway_context.py",
    ),
    (
        "tpx/gateway/context/discover.py",
        "        if windows.configured(model):\n            continue\n",
        "",
        "tests/gateway/context/test_discover.py",
    ),
    (
        "tpx/gateway/context/tokenizer.py",
        'return count if self.shape == "chat" else count + framing(body)',
        "return count",
        "tests/gateway/context/test_tokenizer.py",
    ),
    (
        "tpx/gateway/tokens.py",
        "    return _count(text)\n\n\ndef _count",
        "    return _count(text) + 1\n\n\ndef _count",
        "tests/gateway/context/test_counting.py",
    ),
    # the tokenizer endpoint's calls: held to the upstream slots, their latency their own,
    # cancelled when the client leaves
    (
        "tpx/gateway/context/asked.py",
        "            await slots.acquire()\n",
        "            pass\n",
        BOUNDS,
    ),
    (
        "tpx/gateway/context/asked.py",
        "        slots.release()\n",
        "        pass\n",
        BOUNDS,
    ),
    (
        "tpx/gateway/context/asked.py",
        'if isinstance(error, TimeoutError):\n            return "busy"',
        'if isinstance(error, TimeoutError):\n            return "timeout"',
        BOUNDS,
    ),
    (
        "tpx/gateway/context/asked.py",
        "attrs.evolve(call, timeout=timeout, latency=False)",
        "attrs.evolve(call, timeout=timeout)",
        BOUNDS,
    ),
    (
        "tpx/gateway/upstream.py",
        "if self._observe is not None and observed:",
        "if self._observe is not None:",
        BOUNDS,
    ),
    (
        "tpx/gateway/context/asked.py",
        "        asked.gateway.metrics.tokenizer_latency.observe(time.perf_counter() - began)\n"
        "    return response.status_code, body\n",
        "    return response.status_code, body\n",
        BOUNDS,
    ),
    (
        "tpx/gateway/asgi.py",
        "outcome = await _unless_gone(ask(result, self.upstream), receive)",
        "outcome = await ask(result, self.upstream)",
        BOUNDS,
    ),
    (
        "tpx/gateway/context/asked.py",
        "        host.log(log, failed=True)\n",
        "        pass\n",
        BOUNDS,
    ),
    (
        "tpx/gateway/core.py",
        "upstream_model, go, maximum, log)",
        "upstream_model, go, maximum)",
        BOUNDS,
    ),
    # [[upstreams]]: counted with another upstream's endpoint (the route's first; the first
    # upstream's client asked), count_tokens not routed, the call not holding its upstream's
    # concurrency, a failover sent to an upstream it does not fit or not clamped for it, the
    # model's window in place of the upstream's, the placed upstream not tried first, a
    # refusal against the upstream with the least room
    (
        "tpx/gateway/context/placement.py",
        "        upstream = self.routing.upstream(name)\n",
        "        upstream = self.routing.upstream(self.candidates[0])\n",
        UPSTREAMS,
    ),
    (
        "tpx/gateway/pool.py",
        "return await ask(asked, self.clients[name], holds)",
        "return await ask(asked, self.clients[placement.candidates[0]], holds)",
        UPSTREAMS,
    ),
    (
        "tpx/gateway/core.py",
        "if routing is not None and self.context.active:  # counted as its route's upstream",
        "if routing is None and self.context.active:",
        UPSTREAMS,
    ),
    (
        "tpx/gateway/pool.py",
        "            holds.append(limit)\n",
        "            pass\n",
        UPSTREAMS,
    ),
    (
        "tpx/gateway/pool.py",
        "while isinstance(step, Attempt) and not await self.fits(turn, step.upstream):",
        "while isinstance(step, Attempt) and not True:",
        UPSTREAMS,
    ),
    (
        "tpx/gateway/pool.py",
        "again = placement is not None and placement.apply(name)",
        "again = False",
        UPSTREAMS,
    ),
    (
        "tpx/gateway/context/gate.py",
        "        if upstream is not None and upstream.context_window is not None:\n",
        "        if False:\n",
        UPSTREAMS,
    ),
    (
        "tpx/gateway/pool.py",
        "        if turn.placement is not None:  # placed on an upstream it fits",
        "        if False:  #",
        UPSTREAMS,
    ),
    (
        "tpx/gateway/context/placement.py",
        "name = max(refused, key=",
        "name = min(refused, key=",
        UPSTREAMS,
    ),
    # ... not holding one of the pool's slots, not watched for the client leaving, or not
    # logged when it left
    (
        "tpx/gateway/pool.py",
        "        holds = [self.slots]\n",
        "        holds = []\n",
        UPSTREAMS,
    ),
    (
        "tpx/gateway/asgi.py",
        "placed = await _unless_gone(self._place(result, large), receive)",
        "placed = await self._place(result, large)",
        UPSTREAMS,
    ),
    (
        "tpx/gateway/context/asked.py",
        "        host.log(log, failed=True)\n",
        "        pass\n",
        UPSTREAMS,
    ),
    # a failover that counted for the next upstream while a ping reached the client
    (
        "tpx/gateway/pool.py",
        "            if moved and turn.placement is not None and turn.started:\n",
        "            if moved and False:\n",
        UPSTREAMS,
    ),
    # the sync client: a tokenizer call taking no slot or keeping it, a turn taking none
    (
        "tpx/gateway/context/asked.py",
        "    if not upstream.slots.acquire(timeout=asked.timeout):",
        "    if not True:",
        SYNC,
    ),
    (
        "tpx/gateway/context/asked.py",
        "        upstream.slots.release()\n",
        "        pass\n",
        SYNC,
    ),
    (
        "tpx/gateway/drive.py",
        "    with upstream.slots:\n        yield from _turn_sync(turn, upstream)",
        "    with contextlib.nullcontext():\n        yield from _turn_sync(turn, upstream)",
        SYNC,
    ),
]


def main() -> int:
    missed = 0
    for path, old, new, tests in BUGS:
        with open(path) as handle:
            source = handle.read()
        assert source.count(old) == 1, (path, old)
        with open(path, "w") as handle:
            handle.write(source.replace(old, new))
        try:
            run = subprocess.run(
                [sys.executable, "-m", "pytest", "-p", "no:xdist", "-q", "-x", *tests.split()],
                capture_output=True,
                text=True,
                check=False,
            )
        finally:
            subprocess.run(["git", "checkout", "--", path], check=True)
        last = (run.stdout.strip().splitlines() or [""])[-1]
        missed += run.returncode == 0
        verdict = "CAUGHT" if run.returncode else "MISSED"
        print(f"{verdict} {path}: {old.strip()[:50]!r} -> {new.strip()[:30]!r}: {last}", flush=True)
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
