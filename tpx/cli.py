"""The ``tpx`` command line.

``tpx tlc [SPEC] [--config CFG] [--workers N] [--dump-graph FILE]`` model-checks
with TLC; ``tpx explore [SPEC] [--config CFG]`` explores the same model with the
Python mirror. Both print the same one-screen summary so they can be compared
side by side, and both exit non-zero on any violation or error.

``tpx check-trace FILE... [--config CFG] [--tlc]`` validates recorded traces (ITF or
JSON lines, see :mod:`tpx.tracecheck`) against the spec, one verdict (or ERROR) line
per file; ``tpx graph [SPEC] [--config CFG] [--covered FILE...] -o OUT.svg`` draws the
state graph with the part the (accepted) traces cover highlighted (see
:mod:`tpx.graphviz`).

Bad input (unreadable or non-UTF-8 files, a cfg TLC or the mirror cannot use, bad
numbers) ends with one ``tpx: error: ...`` line and exit code 2, never a traceback.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

from tpx.errors import TpxError
from tpx.tlc.values import format_value

DEFAULT_SPEC = Path("spec/TpxTransport.tla")


def _cfg_for(spec: Path, cfg: Path | None) -> Path:
    return cfg if cfg is not None else spec.with_suffix(".cfg")


def summary(
    tool: str,
    spec: Path,
    cfg: Path,
    verdict: object,
    initial: int | None,
    generated: int | None,
    distinct: int | None,
    depth: int | None,
    duration_s: float,
    trace: Sequence[tuple[str, Any]] = (),
    out: TextIO = sys.stdout,
) -> None:
    """Print the one-screen summary both commands share."""

    def fig(v: int | None) -> str:
        return "-" if v is None else f"{v:,}"

    print(f"{tool}: {spec} with {cfg}", file=out)
    print(f"  verdict    {verdict}", file=out)
    print(f"  initial    {fig(initial)}", file=out)
    print(f"  generated  {fig(generated)}", file=out)
    print(f"  distinct   {fig(distinct)}", file=out)
    print(f"  depth      {fig(depth)}", file=out)
    print(f"  time       {duration_s:.2f} s", file=out)
    if trace:
        print("  counterexample:", file=out)
        for i, (action, state) in enumerate(trace, 1):
            print(f"    {i}: {action}", file=out)
            for name in sorted(state):
                print(f"         /\\ {name} = {format_value(state[name])}", file=out)


def _cmd_tlc(args: argparse.Namespace) -> int:
    from tpx.tlc import run_tlc

    spec: Path = args.spec
    cfg = _cfg_for(spec, args.config)

    def progress(p: Any) -> None:
        print(
            f"  ... depth {p.depth}: {p.generated} generated, {p.distinct} distinct, "
            f"{p.left} left on queue",
            file=sys.stderr,
            flush=True,
        )

    result = run_tlc(
        spec,
        cfg,
        workers=args.workers,
        timeout=args.timeout,
        dump_dot=args.dump_graph,
        on_progress=progress,
    )
    trace = [(step.action, step.state) for step in result.trace]
    summary(
        "tlc",
        spec,
        cfg,
        result.verdict,
        result.initial,
        result.generated,
        result.distinct,
        result.depth,
        result.duration_s,
        trace,
    )
    return 0 if result.verdict.kind == "ok" else (result.exit_code or 1)


def _read_spec(spec: Path) -> str:
    try:
        return spec.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise TpxError(f"{spec} is not UTF-8 text (byte {exc.start}: {exc.reason})") from None
    except OSError as exc:
        raise TpxError(f"cannot read the spec {spec}: {exc.strerror or exc}") from None


def _cmd_explore(args: argparse.Namespace) -> int:
    from tpx.model import Config
    from tpx.model.explore import explore
    from tpx.model.packed import explore_packed
    from tpx.tlc.cfg import load_cfg

    spec: Path = args.spec
    cfg_path = _cfg_for(spec, args.config)
    module = re.search(r"MODULE\s+(\w+)", _read_spec(spec))
    if module is None or module.group(1) != "TpxTransport":
        raise TpxError(
            f"{spec}: the mirror models module TpxTransport only "
            f"(found {module.group(1) if module else 'no module'}); use `tpx tlc` for other specs"
        )
    cfg = load_cfg(cfg_path)
    config = Config.from_constants(dict(cfg.constants))
    check_deadlock = True if cfg.check_deadlock is None else cfg.check_deadlock
    run = explore if args.readable else explore_packed
    result = run(config, check_deadlock=check_deadlock)
    summary(
        "explore",
        spec,
        cfg_path,
        result.verdict,
        result.initial,
        result.generated,
        result.distinct,
        result.depth,
        result.duration_s,
        result.trace,
    )
    return result.exit_code


def _cmd_check_trace(args: argparse.Namespace) -> int:
    from tpx.itf import TraceFormatError
    from tpx.model import Config
    from tpx.tracecheck import (
        TraceReport,
        check_trace,
        check_traces_tlc,
        load_trace,
        validate_trace,
    )

    spec: Path = args.spec
    cfg_path = _cfg_for(spec, args.config)
    config = Config.from_cfg(cfg_path)
    # one line per file, in the order given: a verdict, or why the file is no trace
    outcome: dict[int, str] = {}
    loaded: list[tuple[int, list[Any], list[str | None]]] = []
    errors = rejected = 0
    for n, path in enumerate(args.files):
        try:
            states, actions = load_trace(path)
            validate_trace(states)
            report = None if args.tlc else check_trace(states, config, actions=actions)
        except TraceFormatError as exc:
            outcome[n] = f"ERROR: {exc}"
            errors += 1
            continue
        if report is None:
            loaded.append((n, states, actions))
        else:
            outcome[n] = str(report)
            rejected += not report.accepted
    if loaded:
        reports: list[TraceReport] = check_traces_tlc(
            [states for _, states, _ in loaded],
            config,
            actions=[actions for _, _, actions in loaded],
            spec=spec,
            cfg=cfg_path,
            timeout=args.timeout,
        )
        for (n, _, _), report in zip(loaded, reports, strict=True):
            outcome[n] = str(report)
            rejected += not report.accepted
    for n, path in enumerate(args.files):
        print(f"{path}: {outcome[n]}")
    return 2 if errors else 1 if rejected else 0


def _cmd_graph(args: argparse.Namespace) -> int:
    from tpx.graphviz import coverage_summary, read_covered, render_coverage
    from tpx.model import Config
    from tpx.model.explore import explore

    spec: Path = args.spec
    cfg_path = _cfg_for(spec, args.config)
    config = Config.from_cfg(cfg_path)
    graph = explore(config, check_deadlock=False, keep_graph=True).graph
    assert graph is not None
    covered = read_covered(args.covered, config)
    for path, verdict in covered.rejected:
        print(f"tpx: warning: {path}: {verdict}; not counted as covered", file=sys.stderr)
    for path, why in covered.unreadable:
        print(f"tpx: warning: {path}: ERROR: {why}; not counted as covered", file=sys.stderr)
    out: Path = args.output
    fmt = args.format or (out.suffix.lstrip(".") or "svg")
    render_coverage(graph, covered.states, covered.edges, out, fmt=fmt)
    print(f"{out}: {coverage_summary(graph, covered.states, covered.edges)}")
    return 2 if covered.unreadable else 1 if covered.rejected else 0


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _positive_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, got {text}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tpx", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)

    tlc = sub.add_parser("tlc", help="model-check a spec with TLC")
    tlc.add_argument("spec", nargs="?", type=Path, default=DEFAULT_SPEC)
    tlc.add_argument("--config", type=Path, default=None, help="cfg file (default: SPEC.cfg)")
    tlc.add_argument("--workers", type=_positive_int, default=1, help="TLC worker threads (>= 1)")
    tlc.add_argument(
        "--timeout", type=_positive_seconds, default=None, help="seconds before TLC is killed"
    )
    tlc.add_argument("--dump-graph", type=Path, default=None, help="write the state graph (dot)")
    tlc.set_defaults(func=_cmd_tlc)

    exp = sub.add_parser("explore", help="explore the spec with the Python mirror")
    exp.add_argument("spec", nargs="?", type=Path, default=DEFAULT_SPEC)
    exp.add_argument("--config", type=Path, default=None, help="cfg file (default: SPEC.cfg)")
    exp.add_argument(
        "--readable", action="store_true", help="use the readable explorer, not the packed one"
    )
    exp.set_defaults(func=_cmd_explore)

    chk = sub.add_parser(
        "check-trace",
        help="validate recorded traces (ITF or JSON lines) against the spec",
        description="Prints FILE: ACCEPTED, FILE: REJECTED at step N (property): reason, or "
        "FILE: ERROR: why (not a trace) per file, in order. Exit 0 if all are accepted, "
        "1 if any is rejected, 2 if any is no trace.",
    )
    chk.add_argument("files", nargs="+", type=Path, metavar="FILE")
    chk.add_argument("--spec", type=Path, default=DEFAULT_SPEC)
    chk.add_argument("--config", type=Path, default=None, help="cfg file (default: SPEC.cfg)")
    chk.add_argument("--tlc", action="store_true", help="check with TLC (one run for all files)")
    chk.add_argument(
        "--timeout", type=_positive_seconds, default=None, help="seconds before TLC is killed"
    )
    chk.set_defaults(func=_cmd_check_trace)

    gra = sub.add_parser(
        "graph",
        help="draw the state graph, covered states/edges highlighted",
        description="Draws every reachable state and step of the mirror's graph; states and "
        "steps seen in the --covered traces are green, the rest grey. Without --covered "
        "nothing is covered (the picture shows the whole graph, uncovered). Each covered "
        "trace is checked with the mirror first: a rejected or unreadable one counts for "
        "nothing and gets a warning; the picture is still drawn, and the exit code is 1 "
        "if any trace was rejected, 2 if any file is no trace.",
    )
    gra.add_argument("spec", nargs="?", type=Path, default=DEFAULT_SPEC)
    gra.add_argument("--config", type=Path, default=None, help="cfg file (default: SPEC.cfg)")
    gra.add_argument(
        "--covered",
        type=Path,
        nargs="*",
        default=[],
        metavar="FILE",
        help="traces (ITF or JSON lines) whose states and steps count as covered",
    )
    gra.add_argument("-o", "--output", type=Path, required=True, help="output file (.svg, .dot)")
    gra.add_argument("--format", default=None, help="dot output format (default: from -o suffix)")
    gra.set_defaults(func=_cmd_graph)

    from tpx.gateway.cli import add_serve_parser  # the gateway (tpx/gateway/cli.py)

    add_serve_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        code: int = args.func(args)
    except TpxError as exc:
        print(f"tpx: error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # e.g. an output file in a missing directory
        print(f"tpx: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("tpx: interrupted", file=sys.stderr)
        return 130
    return code


if __name__ == "__main__":
    raise SystemExit(main())
