"""``tpx audit URL``: the command line of :mod:`tpx.audit.run`.

Gateway mode (the default) starts the scripted OpenAI-compatible upstream on
``--upstream-listen`` (``127.0.0.1:8999``): start the endpoint under test first, configured
with ``http://HOST:PORT/v1`` as its OpenAI-compatible upstream and :data:`UPSTREAM_KEY` as
that upstream's key, and any model name. Pass-through mode (``--messages-upstream``): the
scripted upstream speaks the Messages API instead; configure the endpoint with
``http://HOST:PORT`` as its Anthropic base URL and :data:`UPSTREAM_API_KEY` as its API key.
``--live`` audits a real model behind URL with the checks that need no scripted upstream.
The table goes to stdout; ``--report FILE.html`` or ``FILE.json`` writes the report (and
each failure's trace in ``FILE.traces/``). Exit code: 0 every check passes, 1 a check
fails, 2 bad usage or an endpoint that cannot be reached.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

from tpx.audit.lanes import JOBS
from tpx.errors import ConfigurationError

__all__ = ["PROFILES", "UPSTREAM_API_KEY", "UPSTREAM_KEY", "add_audit_parser"]

#: the key the endpoint under test sends the scripted upstream (the upstream checks it)
UPSTREAM_KEY = "conformance-oauth-token"
#: ``--messages-upstream``: the API key it sends the scripted Messages upstream
UPSTREAM_API_KEY = "sk-ant-conformance-key"
#: ``--profile``: the cfgs whose behaviours the audit replays
PROFILES = ("small", "full")


def _listen(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    if not host or not port.isdigit() or not 0 <= int(port) < 65536:
        raise argparse.ArgumentTypeError(f"{text!r} is not HOST:PORT")
    return host, int(port)


def _jobs(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of at least 1")
    return int(text)


def add_audit_parser(sub: Any) -> None:
    aud = sub.add_parser(
        "audit",
        help="audit any Messages endpoint (a gateway or an engine) against the spec",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    aud.add_argument("url", help="the endpoint's base URL (it serves /v1/messages)")
    aud.add_argument("--key", default="audit-key", help="the key the endpoint's clients send")
    mode = aud.add_mutually_exclusive_group()
    mode.add_argument(
        "--upstream-listen",
        type=_listen,
        default=("127.0.0.1", 8999),
        metavar="HOST:PORT",
        help="where the scripted upstream listens (default 127.0.0.1:8999)",
    )
    mode.add_argument("--live", action="store_true", help="a real model is behind URL")
    aud.add_argument(
        "--messages-upstream",
        action="store_true",
        help="pass-through mode: the scripted upstream speaks the Messages API (configure "
        f"the endpoint with http://HOST:PORT as its Anthropic base URL and the key "
        f"{UPSTREAM_API_KEY}); the behaviours are those of a gateway with an Anthropic key",
    )
    aud.add_argument(
        "--profile",
        choices=PROFILES,
        default="small",
        help="small: every behaviour of the three small cfgs (two conversations; "
        "three turns with retries; two parallel calls); full: also an edge cover of "
        "spec/TpxGateway.cfg (default small)",
    )
    aud.add_argument(
        "--jobs",
        type=_jobs,
        default=JOBS,
        metavar="N",
        help=f"the behaviours in flight together (default {JOBS}; 1: one at a time); the "
        "result is the same whatever N",
    )
    aud.add_argument("--model", default="claude-sonnet-4-5", help="--live: the model to ask")
    aud.add_argument("--report", type=Path, default=None, metavar="FILE.html|FILE.json")
    aud.set_defaults(func=_cmd_audit)


def _cmd_audit(args: argparse.Namespace) -> int:
    import httpx2

    from tpx.audit import report

    if args.live and args.messages_upstream:
        raise ConfigurationError("--messages-upstream is a scripted upstream: not with --live")
    if args.report is not None and args.report.suffix not in (".html", ".json"):
        raise ConfigurationError(f"--report {args.report}: the file must end in .html or .json")
    try:
        httpx2.get(args.url.rstrip("/") + "/v1/models", timeout=30)  # is anything there?
    except httpx2.TransportError as exc:
        print(f"tpx: error: {args.url}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    except httpx2.InvalidURL as exc:
        raise ConfigurationError(f"{args.url}: {exc}") from None
    try:
        if args.live:
            from tpx.audit.endpoints import audit_live

            result = audit_live(args.url, args.key, args.model)
        else:
            result = _gateway(args)
    except httpx2.TransportError as exc:
        print(f"tpx: error: {args.url}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    print(report.summary(result))
    if args.report is not None:
        traces = report.write(result, args.report)
        print(
            f"report: {args.report}" + (f" (traces in {args.report.stem}.traces/)" * bool(traces))
        )
    return 0 if result.ok else 1


def _gateway(args: argparse.Namespace) -> Any:
    from tpx.audit.harness import Harness
    from tpx.audit.run import FULL_CFGS, SMALL_CFGS, audit_gateway

    configs = FULL_CFGS if args.profile == "full" else SMALL_CFGS
    try:
        harness = Harness(listen=args.upstream_listen)
    except OSError as exc:
        raise ConfigurationError(f"--upstream-listen: {exc.strerror or exc}") from None
    try:
        for _ in range(500):  # until the scripted upstream accepts connections
            if harness.started():
                break
            time.sleep(0.01)
        upstream = "messages" if args.messages_upstream else "openai"
        where = (
            f"{harness.upstream_url} (Messages API, key {UPSTREAM_API_KEY})"
            if args.messages_upstream
            else f"{harness.upstream_url}/v1 (key {UPSTREAM_KEY})"
        )
        print(f"scripted upstream: {where}", file=sys.stderr)
        return audit_gateway(
            harness, args.url, args.key, configs=configs, upstream=upstream, jobs=args.jobs
        )
    finally:
        harness.close()
