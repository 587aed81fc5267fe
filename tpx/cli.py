"""tpx: check the TLA+ spec with TLC or with its Python mirror, and validate traces.

  tpx tlc [SPEC] [--config CFG]         model-check any spec with TLC
  tpx explore [SPEC] [--config CFG]     explore the mirrored spec with the Python mirror
  tpx check-trace FILE... [--tlc]       validate recorded traces against the spec
  tpx graph [SPEC] -o OUT.svg           draw the state graph, covered part highlighted
  tpx serve [--host H] [--port P]       run the gateway (Messages API) in front of a provider
  tpx audit URL [--live]                audit any Messages endpoint against the spec

SPEC defaults to the TpxTransport spec shipped inside the package, CFG to the .cfg
beside SPEC. tlc and explore print the same one-screen summary so they can be
compared side by side; both exit non-zero on any violation. The mirror refuses a
spec that differs from the one it mirrors (use tpx tlc for it). Bad input ends
with one `tpx: error: ...` line and exit code 2; SIGINT exits 130, SIGTERM 143,
after the JVM and the work folder are gone.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import signal
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any, TextIO

from tpx.errors import TLCConfigError, TpxError
from tpx.oracle.tlc.values import format_value

if TYPE_CHECKING:
    from tpx.oracle.model.explore import ExploreResult

#: Exit codes of a run stopped by a signal (128 + the signal number).
EXIT_SIGINT = 130
EXIT_SIGTERM = 143


class Terminated(BaseException):
    """Raised in the main thread by SIGTERM, so every ``finally`` (JVM, work folder) runs."""


def default_spec() -> Path:
    """The TpxTransport spec shipped inside the package (a copy of the repo's spec/)."""
    from tpx.oracle.model import TRANSPORT

    return TRANSPORT.spec_path


def _spec_of(args: argparse.Namespace) -> Path:
    spec: Path | None = args.spec
    return default_spec() if spec is None else spec


def _cfg_for(spec: Path, cfg: Path | None) -> Path:
    return cfg if cfg is not None else spec.with_suffix(".cfg")


def _require_file(path: Path, what: str) -> None:
    if not path.exists():
        raise TpxError(f"{path}: no such {what} file")
    if not path.is_file():
        raise TpxError(f"{path}: is not a file (a {what} file is needed)")


def _fresh_output(path: Path, force: bool) -> None:
    """Refuse to overwrite an existing file silently."""
    if path.exists() and not force:
        raise TpxError(f"{path} exists; pass --force to overwrite it")


class _Throttle:
    """Lets a progress line through at most every *every* seconds (the first one too)."""

    def __init__(self, every: float) -> None:
        self.every = every
        self.started = time.monotonic()
        self.last = self.started

    def due(self) -> bool:
        now = time.monotonic()
        if now - self.last < self.every:
            return False
        self.last = now
        return True

    def elapsed(self) -> float:
        return max(time.monotonic() - self.started, 1e-9)


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
    out: TextIO | None = None,
    *,
    full: bool = False,
) -> None:
    """Print the one-screen summary both commands share. A counterexample shows its first
    state whole and then, per step, only the variables that changed (all with *full*)."""

    out = sys.stdout if out is None else out

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
        how = "full states" if full else "first state, then what changed"
        print(f"  counterexample ({how}):", file=out)
        before: Any = None
        for i, (action, state) in enumerate(trace, 1):
            names = [
                n
                for n in sorted(state)
                if full or before is None or n not in before or before[n] != state[n]
            ]
            note = "" if names or full else "  (nothing changed)"
            print(f"    {i}: {action}{note}", file=out)
            for name in names:
                print(f"         /\\ {name} = {format_value(state[name])}", file=out)
            before = state


def _cmd_tlc(args: argparse.Namespace) -> int:
    from tpx.oracle.tlc import run_tlc

    spec = _spec_of(args)
    cfg = _cfg_for(spec, args.config)
    _require_file(spec, "spec")
    _require_file(cfg, "cfg")
    if args.dump_graph is not None:
        _fresh_output(args.dump_graph, args.force)

    def progress(p: Any) -> None:
        print(
            f"tlc: depth {p.depth}: {p.generated:,} generated, {p.distinct:,} distinct, "
            f"{p.left:,} left on queue",
            file=sys.stderr,
            flush=True,
        )

    try:
        result = run_tlc(
            spec,
            cfg,
            workers=args.workers,
            timeout=args.timeout,
            dump_dot=args.dump_graph,
            on_progress=progress,
        )
    except TLCConfigError as exc:
        raise _condensed(exc, spec, cfg) from None
    if result.verdict.kind == "error":
        first = _tlc_reason(result.verdict.message or "")
        raise TpxError(
            f"{cfg}: TLC could not evaluate the model (TLC exit {result.exit_code}); "
            f"check the constants' values\nTLC said: {first}"
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
        full=args.full,
    )
    return 0 if result.verdict.kind == "ok" else (result.exit_code or 1)


_BOILERPLATE = (
    "TLC threw an unexpected exception",
    "This was probably caused by",
    "See the User Output",
    "The exception was a",
    "Residual stack trace",
    "***Parse Error***",
    "tla2sany.",
    "*** Abort messages",
    "Fatal errors while parsing",
    "Module definition starting",
)


def _condensed(exc: TpxError, spec: Path, cfg: Path) -> TpxError:
    """A TLC rejection as one line naming the file to blame (the spec for a parse or
    semantic error, else the cfg) and TLC's own words on a second line."""
    head, _, rest = str(exc).partition("\n")
    blame = spec if "parse the spec" in head else cfg
    said = [
        ln.strip().lstrip(": ").strip()
        for ln in rest.splitlines()
        if ln.strip() and not ln.strip().lstrip(": ").startswith(_BOILERPLATE)
    ]
    detail = " ".join(said[:2])
    if len(detail) > 300:
        detail = detail[:297] + "..."
    named = head.rstrip(":") if str(blame) in head else f"{blame}: {head.rstrip(':')}"
    return TpxError(named + (f"\nTLC said: {detail}" if detail else ""))


def _tlc_reason(message: str) -> str:
    """The line of TLC's error text that says what went wrong (its ``Reason:``, else the
    exception's own line, else the first line), without Java's preamble."""
    lines = [ln.strip().lstrip(": ").strip() for ln in message.splitlines() if ln.strip()]
    if "Reason:" in lines and lines.index("Reason:") + 1 < len(lines):
        return lines[lines.index("Reason:") + 1]
    for ln in lines:
        if ln.startswith("Attempted") or "Error" in ln or "error" in ln:
            return ln
    return lines[0] if lines else "no message"


def _mirror_checks(spec: Path, cfg: Path) -> tuple[Any, Any]:
    """The mirror's Config for *spec* / *cfg* and what the cfg asks to check (refusing a
    spec that is not the mirrored one, or a cfg naming what the mirror does not define)."""
    from tpx.oracle.model import Config
    from tpx.oracle.model.gateway import GATEWAY
    from tpx.oracle.model.gateway import Config as GatewayConfig
    from tpx.oracle.model.gateway.overlap import OVERLAP, OverlapConfig
    from tpx.oracle.model.registry import check_mirrored

    _require_file(spec, "spec")
    _require_file(cfg, "cfg")
    checked = check_mirrored(spec, cfg)
    config_of: Any = {GATEWAY: GatewayConfig, OVERLAP: OverlapConfig}.get(checked.mirror, Config)
    try:
        config = config_of.from_constants(dict(checked.model.constants))
    except TpxError as exc:
        raise TpxError(f"{cfg}: {exc}") from None
    return config, checked


def _refines(step: Any, config: Any, s: Any, t: Any) -> bool:
    """A refinement step property of the gateway mirror, on the step s -> t."""
    return bool(step(s, t, config))


def _explore_gateway(
    config: Any, checked: Any, check_deadlock: bool, progress: Any
) -> ExploreResult:
    """``tpx explore spec/TpxGateway.tla``: the gateway mirror, checking only what the cfg
    names (``Refinement`` as a step property, its Init conjunct on every initial state)."""
    import attrs

    from tpx.oracle.model.explore import Verdict
    from tpx.oracle.model.gateway import INVARIANTS as GW_INVARIANTS
    from tpx.oracle.model.gateway import PROPERTIES as GW_PROPERTIES
    from tpx.oracle.model.gateway import Init
    from tpx.oracle.model.gateway.explore import explore as explore_gateway
    from tpx.oracle.model.gateway.refinement import (
        RefinementInit,
        RefinementStep,
        RefinementUpToErrorsStep,
    )

    invariants = [(n, f) for n, f in GW_INVARIANTS if n in checked.invariants]
    properties = [(n, f) for n, f in GW_PROPERTIES if n in checked.properties]
    for name, step in (
        ("Refinement", RefinementStep),
        ("RefinementUpToErrors", RefinementUpToErrorsStep),
    ):
        if name not in checked.properties:
            continue
        properties.append((name, functools.partial(_refines, step, config)))
        if not all(RefinementInit(s, config) for s in Init(config)):
            return attrs.evolve(
                explore_gateway(config, check_deadlock=False, next=lambda s, c: ()),
                verdict=Verdict("action_property", name),
            )
    return explore_gateway(
        config,
        check_deadlock=check_deadlock,
        invariants=invariants,
        properties=properties,
        on_progress=progress,
    )


def _cmd_explore(args: argparse.Namespace) -> int:
    from tpx.oracle.model import INVARIANTS, SelectionStable
    from tpx.oracle.model.explore import Progress, explore
    from tpx.oracle.model.packed import explore_packed

    spec = _spec_of(args)
    cfg_path = _cfg_for(spec, args.config)
    config, checked = _mirror_checks(spec, cfg_path)
    model = checked.model
    check_deadlock = True if model.check_deadlock is None else model.check_deadlock
    throttle = _Throttle(args.progress)

    def progress(p: Progress) -> None:
        if throttle.due():
            rate = p.generated / throttle.elapsed()
            print(
                f"explore: depth {p.depth}: {p.generated:,} generated, {p.distinct:,} "
                f"distinct, {p.queue:,} on queue, {rate:,.0f} states/s",
                file=sys.stderr,
                flush=True,
            )

    if checked.mirror.module in ("TpxGateway", "TpxGatewayOverlap"):
        if checked.mirror.module == "TpxGateway":
            result = _explore_gateway(config, checked, check_deadlock, progress)
        else:
            from tpx.oracle.model.gateway import overlap

            result = overlap.explore(
                config,
                check_deadlock=check_deadlock,
                invariants=checked.invariants,
                checked=checked.properties,
                on_progress=progress,
            )
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
            full=args.full,
        )
        return result.exit_code
    invariants = [(n, f) for n, f in INVARIANTS if n in checked.invariants]
    everything = len(invariants) == len(INVARIANTS) and "SelectionStable" in checked.properties
    if args.readable or not everything:
        result = explore(
            config,
            check_deadlock=check_deadlock,
            invariants=invariants,
            properties=[("SelectionStable", SelectionStable)]
            if "SelectionStable" in checked.properties
            else [],
            on_progress=progress,
        )
    else:
        result = explore_packed(config, check_deadlock=check_deadlock, on_progress=progress)
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
        full=args.full,
    )
    return result.exit_code


def _refuse_mismatched_traces(args: argparse.Namespace, *, gateway: bool) -> None:
    """A trace read the wrong way is a usage error (exit 2) naming the right flags, never a
    verdict: the kinds ``tpx serve`` writes say what they are on their first line."""
    from tpx.oracle import tracecheck_gateway as gateway_traces

    gateway_flags = "--spec spec/TpxGateway.tla"
    if args.exchange and not gateway:
        raise TpxError(f"--exchange reads gateway exchange traces: add {gateway_flags}")
    for path in args.files:
        kind = gateway_traces.trace_kind(path)
        if kind == gateway_traces.EXCHANGE_TRACE and not (gateway and args.exchange):
            raise TpxError(
                f"{path} is a `tpx serve --trace-dir` exchange trace: check it with "
                f"{gateway_flags} --exchange"
            )
        if kind == gateway_traces.CONVERSATION_TRACE and (not gateway or args.exchange):
            raise TpxError(
                f"{path} is a `tpx serve --monitor` conversation trace: check it with "
                f"{gateway_flags} (without --exchange)"
            )


def _cmd_check_trace(args: argparse.Namespace) -> int:
    from tpx.oracle.itf import TraceFormatError
    from tpx.oracle.model import Config
    from tpx.oracle.tracecheck import (
        TraceReport,
        check_trace,
        check_traces_tlc,
        load_trace,
        validate_trace,
    )

    spec = _spec_of(args)
    cfg_path = _cfg_for(spec, args.config)
    from tpx.oracle import tracecheck_gateway as gateway_traces

    if gateway_traces.is_gateway_spec(spec):  # gateway traces, one conversation or several
        from tpx.oracle.model.gateway import Config as GatewayConfig

        if args.tlc:
            raise TpxError("--tlc does not check gateway traces; the mirror does")
        gw_config, _ = _mirror_checks(spec, cfg_path)
        assert isinstance(gw_config, GatewayConfig)
        _refuse_mismatched_traces(args, gateway=True)
        retry = gw_config.GatewayRetry
        lines, code = gateway_traces.check_files(
            args.files, gateway_retry=retry, exchange=args.exchange
        )
        print("\n".join(lines))
        return code
    if args.tlc:
        _require_file(spec, "spec")
        _require_file(cfg_path, "cfg")
        try:
            config = Config.from_cfg(cfg_path)
        except TpxError as exc:
            raise TpxError(
                f"{cfg_path}: {exc}" if str(cfg_path) not in str(exc) else str(exc)
            ) from None
        invariants: tuple[str, ...] = ()
        properties: tuple[str, ...] = ()
    else:
        config, checked = _mirror_checks(spec, cfg_path)
        if checked.mirror.module == "TpxGatewayOverlap":
            raise TpxError(
                f"{spec}: check-trace reads traces of TpxTransport and TpxGateway; "
                f"model-check TpxGatewayOverlap with `tpx explore {spec}` or `tpx tlc {spec}`"
            )
        invariants, properties = checked.invariants, checked.properties
    _refuse_mismatched_traces(args, gateway=False)
    # one line per file, in the order given: a verdict, or why the file is no trace
    outcome: dict[int, str] = {}
    loaded: list[tuple[int, list[Any], list[str | None]]] = []
    errors = rejected = 0
    for n, path in enumerate(args.files):
        try:
            states, actions = load_trace(path)
            validate_trace(states)
            report = (
                None
                if args.tlc
                else check_trace(
                    states, config, actions=actions, invariants=invariants, properties=properties
                )
            )
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
        try:
            reports: list[TraceReport] = check_traces_tlc(
                [states for _, states, _ in loaded],
                config,
                actions=[actions for _, _, actions in loaded],
                spec=spec,
                cfg=cfg_path,
                timeout=args.timeout,
            )
        except TLCConfigError as exc:
            raise _condensed(exc, spec, cfg_path) from None
        for (n, _, _), report in zip(loaded, reports, strict=True):
            outcome[n] = str(report)
            rejected += not report.accepted
    for n, path in enumerate(args.files):
        print(f"{path}: {outcome[n]}")
    return 2 if errors else 1 if rejected else 0


def _cmd_graph(args: argparse.Namespace) -> int:
    from tpx.oracle.graphviz import coverage_summary, read_covered, render_coverage
    from tpx.oracle.model.explore import explore

    spec = _spec_of(args)
    cfg_path = _cfg_for(spec, args.config)
    config, _ = _mirror_checks(spec, cfg_path)
    out: Path = args.output
    _fresh_output(out, args.force)
    graph = explore(config, check_deadlock=False, keep_graph=True).graph
    assert graph is not None
    covered = read_covered(args.covered, config)
    for path, verdict in covered.rejected:
        print(f"tpx: warning: {path}: {verdict}; not counted as covered", file=sys.stderr)
    for path, why in covered.unreadable:
        print(f"tpx: warning: {path}: ERROR: {why}; not counted as covered", file=sys.stderr)
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


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("tpx")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown (not installed)"


SPEC_HELP = "the .tla spec (default: the TpxTransport spec shipped with tpx)"
CFG_HELP = "the TLC model configuration (default: SPEC with suffix .cfg)"
FULL_HELP = "print every state of a counterexample whole (default: only what changed)"


def _add_tlc(sub: Any) -> None:
    tlc = sub.add_parser(
        "tlc",
        help="model-check a spec with TLC",
        description="Model-check SPEC with TLC 2.15 under CFG and print the summary. The cfg "
        "may use every keyword TLC 2.15 knows: CONSTANT(S) (with `<-` substitutions), "
        "INIT/NEXT, SPECIFICATION, INVARIANT(S), PROPERTY(IES), CONSTRAINT(S), "
        "ACTION_CONSTRAINT(S), SYMMETRY, VIEW (ALIAS is passed on for newer jars), and "
        "CHECK_DEADLOCK (which becomes -deadlock). Exit 0 when no error is found, TLC's exit "
        "code on a violation (11 deadlock, 12 invariant, 13 property), 2 on bad input.",
    )
    tlc.add_argument("spec", nargs="?", type=Path, default=None, help=SPEC_HELP)
    tlc.add_argument("--config", type=Path, default=None, help=CFG_HELP)
    tlc.add_argument(
        "--workers", type=_positive_int, default=1, help="TLC worker threads (default: 1)"
    )
    tlc.add_argument(
        "--timeout",
        type=_positive_seconds,
        default=None,
        help="seconds before TLC is killed (default: no limit)",
    )
    tlc.add_argument(
        "--dump-graph",
        type=Path,
        default=None,
        metavar="FILE",
        help="also write TLC's state graph (dot source) to exactly FILE (default: none)",
    )
    tlc.add_argument("--force", action="store_true", help="overwrite an existing --dump-graph")
    tlc.add_argument("--full", action="store_true", help=FULL_HELP)
    tlc.set_defaults(func=_cmd_tlc)


def _add_explore(sub: Any) -> None:
    exp = sub.add_parser(
        "explore",
        help="explore the mirrored spec with the Python mirror",
        description="Explore SPEC under CFG with the Python mirror, breadth first, checking "
        "exactly the cfg's INVARIANT(S) and PROPERTY(IES), and print the same summary as "
        "`tpx tlc`. SPEC must be, token for token (comments and layout aside), the spec the "
        "mirror implements; any other spec is refused: check it with `tpx tlc`. A progress "
        "line goes to stderr every few seconds.",
    )
    exp.add_argument("spec", nargs="?", type=Path, default=None, help=SPEC_HELP)
    exp.add_argument("--config", type=Path, default=None, help=CFG_HELP)
    exp.add_argument(
        "--readable",
        action="store_true",
        help="use the readable explorer, not the packed one (default: packed)",
    )
    exp.add_argument("--full", action="store_true", help=FULL_HELP)
    exp.add_argument(
        "--progress",
        type=_positive_seconds,
        default=5.0,
        metavar="SECONDS",
        help="seconds between progress lines on stderr (default: 5)",
    )
    exp.set_defaults(func=_cmd_explore)


def _add_check_trace(sub: Any) -> None:
    chk = sub.add_parser(
        "check-trace",
        help="validate recorded traces (ITF or JSON lines) against the spec",
        description="Prints `FILE: ACCEPTED`, `FILE: REJECTED at step N (property): reason` or "
        "`FILE: ERROR: why` (not a trace) per file, in order. The mirror (default) refuses a "
        "spec it does not mirror; --tlc checks any spec. A gateway trace whose steps name "
        "their conversation (`CallerSend(c1)`) holds several conversations, interleaved, and "
        "is also checked for ids crossing between them (NoCrossPairing). Exit 0 if all are "
        "accepted, 1 if any is rejected, 2 if any is no trace.",
    )
    chk.add_argument("files", nargs="+", type=Path, metavar="FILE", help="trace files")
    chk.add_argument("--spec", type=Path, default=None, help=SPEC_HELP)
    chk.add_argument("--config", type=Path, default=None, help=CFG_HELP)
    chk.add_argument(
        "--tlc", action="store_true", help="check with TLC, one run for all files (default: mirror)"
    )
    chk.add_argument(
        "--exchange",
        action="store_true",
        help="gateway spec: the files are `tpx serve --trace-dir` exchange traces (a file "
        "`tpx serve` wrote names its kind; read the wrong way it is a usage error, exit 2)",
    )
    chk.add_argument(
        "--timeout",
        type=_positive_seconds,
        default=None,
        help="seconds before TLC is killed (default: no limit)",
    )
    chk.set_defaults(func=_cmd_check_trace)


def _add_graph(sub: Any) -> None:
    gra = sub.add_parser(
        "graph",
        help="draw the state graph, covered states/edges highlighted",
        description="Draws every reachable state and step of the mirror's graph; states and "
        "steps seen in the --covered traces are green, the rest grey. Without --covered "
        "nothing is covered. Each covered trace is checked with the mirror first: a rejected "
        "or unreadable one counts for nothing and gets a warning; the picture is still drawn, "
        "and the exit code is 1 if any trace was rejected, 2 if any file is no trace. Writes "
        "exactly OUT (never a .dot beside it) and never overwrites a file without --force.",
    )
    gra.add_argument("spec", nargs="?", type=Path, default=None, help=SPEC_HELP)
    gra.add_argument("--config", type=Path, default=None, help=CFG_HELP)
    gra.add_argument(
        "--covered",
        type=Path,
        nargs="*",
        default=[],
        metavar="FILE",
        help="traces (ITF or JSON lines) whose states and steps count as covered (default: none)",
    )
    gra.add_argument(
        "-o", "--output", type=Path, required=True, metavar="OUT", help="output file (.svg, .dot)"
    )
    gra.add_argument(
        "--format", default=None, help="dot output format (default: OUT's suffix, else svg)"
    )
    gra.add_argument("--force", action="store_true", help="overwrite an existing OUT")
    gra.set_defaults(func=_cmd_graph)


#: Subcommands: each adds its parser. Other packages append theirs here
#: (e.g. ``tpx serve``): a callable taking the subparsers object.
SUBCOMMANDS: list[Callable[[Any], None]] = [_add_tlc, _add_explore, _add_check_trace, _add_graph]


def _add_serve(sub: Any) -> None:
    from tpx.gateway.cli import add_serve_parser  # the gateway (tpx/gateway/cli.py)

    add_serve_parser(sub)


SUBCOMMANDS.append(_add_serve)


def _add_audit(sub: Any) -> None:
    from tpx.audit.cli import add_audit_parser  # the audit (tpx/audit/cli.py)

    add_audit_parser(sub)


SUBCOMMANDS.append(_add_audit)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tpx",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"tpx {_version()}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for add in SUBCOMMANDS:
        add(sub)
    return parser


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    raise Terminated


@contextlib.contextmanager
def _sigterm_raises() -> Iterator[None]:
    """In the main thread: SIGTERM raises :class:`Terminated` (cleanup runs) instead of
    killing the interpreter on the spot."""
    try:
        previous = signal.signal(signal.SIGTERM, _on_sigterm)
    except ValueError:  # not the main thread: leave signals alone
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        with _sigterm_raises():
            code: int = args.func(args)
    except TpxError as exc:
        print(f"tpx: error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # e.g. an output file in a missing directory
        print(f"tpx: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("tpx: interrupted (SIGINT)", file=sys.stderr)
        return EXIT_SIGINT
    except Terminated:
        print("tpx: terminated (SIGTERM)", file=sys.stderr)
        return EXIT_SIGTERM
    return code


if __name__ == "__main__":
    raise SystemExit(main())
