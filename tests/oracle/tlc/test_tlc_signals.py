"""`tpx tlc` stopped by SIGTERM or SIGINT: the JVM's process group is killed and waited
for, the work folder removed, and the exit code is the conventional one (143 / 130)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tpx.errors import JavaNotFoundError
from tpx.oracle.tlc import find_java

from .conftest import ROOT
from .test_tlc_runner import STARTUP_BOUND_S, assert_gone, big_cfg, jvm_runs, pid_recording_java


def _default_sigint() -> None:
    """In the child before exec: SIGINT's default disposition. A process started with SIGINT
    ignored keeps ignoring it (a background job's convention, which Python follows); this
    test is about a foreground ``tpx tlc`` that receives it."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.tlc
@pytest.mark.parametrize(("sig", "code"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_signal_stops_tlc_cleanly(
    sig: signal.Signals, code: int, tmp_path: Path, real_java: str
) -> None:
    java, pidfile = pid_recording_java(tmp_path, real_java)
    work_root = tmp_path / "tmp"
    work_root.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "JAVA_HOME"}
    env.update(PATH=f"{java.parent}{os.pathsep}{env['PATH']}", TMPDIR=str(work_root))
    proc = subprocess.Popen(
        [sys.executable, "-m", "tpx.cli", "tlc", "--config", str(big_cfg(tmp_path))],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=_default_sigint,
    )
    try:
        deadline = time.monotonic() + STARTUP_BOUND_S
        while not jvm_runs(pidfile) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert jvm_runs(pidfile), "the JVM never started"
        assert any(work_root.iterdir())  # the run's work folder exists while TLC runs
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == code, err
    assert re.search(r"tpx: (terminated|interrupted)", err)
    assert "Traceback" not in err
    assert_gone(pidfile)
    assert list(work_root.iterdir()) == []  # work folder removed


def test_java_home_is_honoured(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, real_java: str
) -> None:
    home = tmp_path / "jdk"
    (home / "bin").mkdir(parents=True)
    java = home / "bin" / "java"
    java.write_text(f'#!/bin/sh\nexec {real_java} "$@"\n')
    java.chmod(0o755)
    monkeypatch.setenv("JAVA_HOME", str(home))
    assert find_java() == str(java)
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "nowhere"))
    with pytest.raises(JavaNotFoundError, match=r"JAVA_HOME=.*nowhere has no bin/java"):
        find_java()


def test_readme_run_tlc_example_passes_mypy_strict(tmp_path: Path) -> None:
    """Paths are ``str | os.PathLike`` everywhere public: the README's TLC example (which
    passes plain strings) type-checks under ``mypy --strict``."""
    blocks = re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), re.S)
    (block,) = [b for b in blocks if "run_tlc(" in b]
    example = tmp_path / "readme_tlc.py"
    example.write_text(block)
    proc = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", str(example)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
