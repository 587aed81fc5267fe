"""``tpx serve``: run the gateway with uvicorn (uvloop, httptools).

``tpx serve [--host 127.0.0.1] [--port 8082] [--workers N] [--config FILE.toml]
[--log-bodies] [--monitor] [--trace-dir DIR] [--metrics-auth]``. Flags win over the
environment, which wins over the TOML file (:mod:`tpx.gateway.settings`). ``--port 0``
picks a free port. Once the socket is bound one line goes to stderr::

    tpx serve: listening on http://127.0.0.1:8082 (provider TPX, 1 worker)

then clients poll ``GET /healthz`` until 200. SIGTERM / SIGINT: no new connections, and
running streams may finish for ``limits.shutdown_grace`` seconds.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import secrets
import sys
from pathlib import Path
from typing import Any

__all__ = ["add_serve_parser", "serve"]

_ARGS_ENV = "TPX_GATEWAY_WORKER_ARGS"


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a port number, got {text!r}") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"a port is 0..65535, got {value}")
    return value


def _workers(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of workers, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"--workers must be >= 1, got {value}")
    return value


def add_serve_parser(sub: Any) -> argparse.ArgumentParser:
    """Register ``serve`` on the ``tpx`` subparsers (called by :mod:`tpx.cli`)."""
    serve_p: argparse.ArgumentParser = sub.add_parser(
        "serve",
        help="run the gateway (Messages API on loopback) for real clients",
        description="Run the gateway: a Messages API server (POST /v1/messages) in front of "
        "the provider selected from the environment. See README 'The gateway'.",
    )
    serve_p.add_argument("--host", default=None, help="bind address (default 127.0.0.1)")
    serve_p.add_argument("--port", type=_port, default=None, help="port (default 8082; 0: any)")
    serve_p.add_argument("--workers", type=_workers, default=None, help="worker processes")
    serve_p.add_argument("--config", type=Path, default=None, help="TOML settings file")
    serve_p.add_argument(
        "--profile",
        default=None,
        help="the TPX upstream's kind (openai, vllm, sglang, ollama, llama.cpp, deepseek, "
        "gemini, openrouter, generic); else TPX_PROFILE, else [upstream] profile, else generic",
    )
    serve_p.add_argument(
        "--log-bodies", action="store_true", help="log request/response bodies (redacted)"
    )
    serve_p.add_argument(
        "--monitor",
        action="store_true",
        help="check every exchange's spec steps against the gateway spec's mirror; a step "
        "the spec does not allow fails the request closed (logged, counted in /metrics)",
    )
    serve_p.add_argument(
        "--trace-dir", type=Path, default=None, help="write one JSON-lines trace per exchange"
    )
    serve_p.add_argument(
        "--metrics-auth",
        action="store_true",
        help="GET /metrics needs the gateway key (TPX_GATEWAY_KEY) too; else it is open",
    )
    serve_p.set_defaults(func=serve)
    return serve_p


def _settings(args: argparse.Namespace) -> Any:
    from tpx.gateway.settings import load_settings

    return load_settings(
        config_file=args.config,
        host=args.host,
        port=args.port,
        workers=args.workers,
        log_bodies=args.log_bodies,
        trace_dir=args.trace_dir,
        monitor=args.monitor,
        profile=args.profile,
        metrics_auth=getattr(args, "metrics_auth", False),
    )


def _trace_dir(path: Path) -> None:
    """Create ``--trace-dir`` and prove it writable, or stop at start with why."""
    from tpx.errors import ConfigurationError

    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = path / f".tpx-probe-{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        raise ConfigurationError(
            f"--trace-dir {path}: cannot write traces there ({exc.strerror or exc})"
        ) from None


def worker_app() -> Any:
    """uvicorn factory for ``--workers N`` (each worker re-reads the settings)."""
    from tpx.gateway.asgi import create_app
    from tpx.gateway.protocol import HeaderTimeoutProtocol

    saved = json.loads(os.environ.get(_ARGS_ENV, "{}"))
    args = argparse.Namespace(
        config=Path(saved["config"]) if saved.get("config") else None,
        host=saved.get("host"),
        port=saved.get("port"),
        workers=saved.get("workers"),
        log_bodies=bool(saved.get("log_bodies")),
        trace_dir=Path(saved["trace_dir"]) if saved.get("trace_dir") else None,
        monitor=bool(saved.get("monitor")),
        profile=saved.get("profile"),
        metrics_auth=bool(saved.get("metrics_auth")),
    )
    _logging()
    settings = _settings(args)
    HeaderTimeoutProtocol.header_timeout = settings.limits.header_timeout
    HeaderTimeoutProtocol.max_header_bytes = settings.limits.max_header_bytes
    return create_app(settings, freeze=True)


def _logging() -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(message)s"))
    log = logging.getLogger("tpx.gateway")
    if not log.handlers:
        log.addHandler(handler)
    log.setLevel(logging.INFO)
    log.propagate = False


def _raise_open_files_limit() -> None:
    """Thousands of open streams need as many sockets (two each): lift the soft limit of
    open files to the hard one (best effort; inherited by ``--workers`` processes)."""
    try:
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if hard == resource.RLIM_INFINITY or hard > soft:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    except (ImportError, OSError, ValueError):
        pass


def serve(args: argparse.Namespace) -> int:
    import uvicorn

    from tpx.gateway.asgi import create_app
    from tpx.gateway.protocol import HeaderTimeoutProtocol

    if args.trace_dir is not None:
        _trace_dir(args.trace_dir)
    settings = _settings(args)
    _logging()
    _raise_open_files_limit()
    HeaderTimeoutProtocol.header_timeout = settings.limits.header_timeout
    HeaderTimeoutProtocol.max_header_bytes = settings.limits.max_header_bytes
    common: dict[str, Any] = {
        "host": settings.host,
        "port": settings.port,
        "loop": "uvloop",
        "http": HeaderTimeoutProtocol,
        "lifespan": "on",
        "access_log": False,
        # the gateway never reads the client's address: no X-Forwarded-* middleware per request
        "proxy_headers": False,
        "log_level": "warning",
        "timeout_graceful_shutdown": max(1, round(settings.limits.shutdown_grace)),
        "timeout_keep_alive": 75,
        "server_header": False,
    }
    if settings.workers > 1:
        # every worker must verify the ids and the thinking signatures the others issued:
        # one shared secret each
        for name in ("TPX_GATEWAY_SECRET", "TPX_THINKING_SECRET"):
            if not (os.environ.get(name) or "").strip():
                os.environ[name] = secrets.token_hex(32)
        os.environ[_ARGS_ENV] = json.dumps(
            {
                "config": str(args.config) if args.config else None,
                "host": args.host,
                "port": args.port,
                "workers": args.workers,
                "log_bodies": args.log_bodies,
                "trace_dir": str(args.trace_dir) if args.trace_dir else None,
                "monitor": args.monitor,
                "profile": args.profile,
                "metrics_auth": args.metrics_auth,
            }
        )
        config = uvicorn.Config(
            "tpx.gateway.cli:worker_app", factory=True, workers=settings.workers, **common
        )
    else:
        config = uvicorn.Config(create_app(settings, freeze=True), **common)
    sock = config.bind_socket()
    host, port = sock.getsockname()[:2]
    print(
        f"tpx serve: listening on http://{host}:{port} (provider {settings.provider.name}, "
        f"{settings.workers} worker{'s' if settings.workers > 1 else ''})",
        file=sys.stderr,
        flush=True,
    )
    if settings.provider.name == "NONE":
        print(
            "tpx serve: warning: no upstream credentials (ANTHROPIC_API_KEY, TPX_OAUTH_TOKEN or "
            "TPX_OAUTH_TOKEN_COMMAND): every exchange fails with MODEL_UNAUTHORIZED",
            file=sys.stderr,
        )
    if settings.gateway_key is None and host not in ("127.0.0.1", "::1", "localhost"):
        print("tpx serve: warning: no TPX_GATEWAY_KEY and not on loopback", file=sys.stderr)
    server = uvicorn.Server(config)
    if settings.workers > 1:
        from uvicorn.supervisors import Multiprocess

        Multiprocess(config, sockets=[sock]).run()
    else:
        server.run(sockets=[sock])
    return 0
