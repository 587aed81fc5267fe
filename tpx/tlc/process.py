"""Process control: run the JVM in its own process group, stream its output, and never
leave it behind (timeout, cancel, Ctrl-C, any exception)."""

from __future__ import annotations

import contextlib
import os
import queue
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from tpx.errors import (
    TLCCancelledError,
    TLCCrashError,
    TLCTimeoutError,
)
from tpx.tlc.messages import Progress, ToolOutputParser, parse_progress

__all__ = ["execute", "kill_group"]


def kill_group(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
    proc.wait()


def execute(
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
                kill_group(proc)
                raise TLCCancelledError("TLC run cancelled; the JVM was killed")
            if deadline is not None and time.monotonic() > deadline:
                kill_group(proc)
                raise TLCTimeoutError(f"TLC ran past its {timeout:g} s timeout; the JVM was killed")
        code = proc.wait()
    finally:
        # Ctrl-C, a failing callback, anything: never leave the JVM behind
        kill_group(proc)
        reader.join(timeout=5)
        if proc.stdout is not None:
            proc.stdout.close()
    elapsed = time.monotonic() - started
    return "".join(out), err_path.read_text(encoding="utf-8", errors="replace"), code, elapsed
