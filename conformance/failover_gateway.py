"""A real ``tpx serve`` in front of the scripted upstreams of the failover replay
(:mod:`conformance.pool_upstreams`): its config file, its process (``--monitor`` and a
seeded bug of :mod:`conformance.serve` when asked) and its ``/metrics``.

The config routes a request by the model it asks for (``to-u1``: ``u1`` first, ``to-u2``:
``u2`` first), so the replay chooses the upstream a request starts on; cooldowns last an
hour (they end only when a recovery probe passes, which the replay scripts), probes run
every few milliseconds, and nothing waits on time unless ``first_byte_timeout`` is given.
"""

from __future__ import annotations

import collections
import re
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import attrs
import httpx2

from tpx.audit.harness import OAUTH_TOKEN, launch, serve_env, stop_serving

__all__ = ["FailoverGateway", "config_text", "cooling", "metrics", "probes_ok", "violations"]

_LISTENING = re.compile(r"listening on (http://[0-9.]+:[0-9]+)")
_SAMPLE = re.compile(r"^(\w+)\{([^}]*)\} (\S+)$")


def config_text(urls: dict[str, str], *, first_byte_timeout: float = 600.0) -> str:
    """The TOML of a gateway over *urls* (upstream name -> base URL)."""
    names = sorted(urls)
    out = [
        "[routing]",
        f"max_attempts = {len(names)}",
        "retry_after_max = 2.0",
        "cooldown = 3600.0",
        "cooldown_max = 3600.0",
        "probe_interval = 0.02",
        f"first_byte_timeout = {first_byte_timeout!r}",
        "",
        "[limits]",
        "ping_interval = 600.0",
        "",
        "[context]",
        "default = 20000",
        "",
    ]
    for n in names:
        out += ["[[upstreams]]", f'name = "{n}"', f'base_url = "{urls[n]}"', 'models = ["m"]', ""]
    for n in names:
        order = ", ".join(f'"{x}"' for x in [n, *(x for x in names if x != n)])
        out += [
            "[[routes]]",
            f'name = "{n}-first"',
            f'model = ["to-{n}"]',
            f"upstreams = [{order}]",
            "",
        ]
    return "\n".join(out)


@attrs.define(eq=False)
class FailoverGateway:
    """One running ``tpx serve`` over the scripted upstreams."""

    url: str
    bug: str | None
    monitor: bool
    popen: subprocess.Popen[str]
    tail: collections.deque[str]
    drain: threading.Thread
    folder: tempfile.TemporaryDirectory[str]

    @classmethod
    def start(
        cls,
        urls: dict[str, str],
        *,
        bug: str | None = None,
        monitor: bool = False,
        first_byte_timeout: float = 600.0,
    ) -> FailoverGateway:
        folder = tempfile.TemporaryDirectory(prefix="tpx-failover-")
        config = Path(folder.name) / "gateway.toml"
        config.write_text(config_text(urls, first_byte_timeout=first_byte_timeout), "utf-8")
        env = serve_env()
        env["TPX_OAUTH_TOKEN"] = OAUTH_TOKEN
        cmd = [sys.executable, "-m", "conformance.serve"]
        if bug is not None:
            cmd += ["--bug", bug]
        cmd += ["--", "serve", "--host", "127.0.0.1", "--port", "0", "--config", str(config)]
        if monitor:
            cmd.append("--monitor")
        popen, match, tail, drainer = launch(cmd, env, _LISTENING)
        gw = cls(match.group(1), bug, monitor, popen, tail, drainer, folder)
        for _ in range(3000):
            try:
                if httpx2.get(gw.url + "/healthz", timeout=30).status_code == 200:
                    return gw
            except httpx2.TransportError:
                pass
            if popen.poll() is not None:
                break
            threading.Event().wait(0.02)  # start-up only
        gw.stop()
        raise RuntimeError("tpx serve never became healthy:\n" + gw.output())

    def output(self) -> str:
        return "\n".join(self.tail)

    def stop(self) -> None:
        stop_serving(self.popen, self.drain)
        self.folder.cleanup()


async def metrics(http: httpx2.AsyncClient, gw: FailoverGateway) -> dict[tuple[str, str], float]:
    """``/metrics`` as (name, labels) -> value (labels rendered, sorted)."""
    return samples_of((await http.get(gw.url + "/metrics")).text)


def samples_of(text: str) -> dict[tuple[str, str], float]:
    """A ``/metrics`` page's text as (name, labels) -> value (labels rendered, sorted)."""
    out: dict[tuple[str, str], float] = {}
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        m = _SAMPLE.match(line)
        if m:
            labels = ",".join(sorted(m.group(2).split(",")))
            out[(m.group(1), labels)] = float(m.group(3))
        elif " " in line:
            name, _, value = line.rpartition(" ")
            out[(name, "")] = float(value)
    return out


VIOLATIONS = "tpx_gateway_monitor_violations_total"


def violations(samples: dict[tuple[str, str], float]) -> dict[str, int]:
    """The steps ``--monitor`` stopped, by the property it named (from :func:`metrics`)."""
    out: dict[str, int] = {}
    for (name, labels), value in samples.items():
        if name == VIOLATIONS and value:
            prop = labels.split('"')[1]
            out[prop] = out.get(prop, 0) + int(value)
    return out


def cooling(samples: dict[tuple[str, str], float], name: str) -> bool:
    """The gateway holds upstream *name* in cooldown (from :func:`metrics`)."""
    return samples.get(("tpx_gateway_upstream_cooling", f'upstream="{name}"'), 0.0) > 0


def probes_ok(samples: dict[tuple[str, str], float], name: str) -> float:
    """The healthy recovery probes of upstream *name* the gateway counted."""
    return sum(
        v
        for (metric, labels), v in samples.items()
        if metric == "tpx_gateway_upstream_probes_total"
        and f'upstream="{name}"' in labels
        and 'result="ok"' in labels
    )
