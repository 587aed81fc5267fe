"""Process control: run the JVM in its own process group, stream its output, and never
leave it behind (timeout, cancel, Ctrl-C, SIGTERM turned into an exception, any exception).

The process is started, read and reaped by a worker thread (:class:`_Child`); the calling
thread only consumes its output lines. An interrupt (``KeyboardInterrupt`` or any other
exception raised in the calling thread by a signal handler) can therefore never land
between the fork and the moment the ``Popen`` object is known: whatever the calling
thread is doing when it is interrupted, its ``finally`` stops the child, and the worker
kills the whole process group and *waits* for it before it ends. (Starting the process
in the calling thread left a window, inside ``Popen.__init__``, where Ctrl-C orphaned a
running JVM and ``Popen.__del__`` warned ``subprocess N is still running``.)
"""

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

from tpx.errors import TLCCancelledError, TLCCrashError, TLCTimeoutError
from tpx.oracle.tlc.messages import Progress, ToolOutputParser, parse_progress

__all__ = ["execute", "kill_group"]

#: How often the calling thread looks at the cancel event and the deadline.
POLL_S = 0.05


def kill_group(proc: subprocess.Popen[str]) -> None:
    """SIGKILL *proc*'s process group (it leads its own session), then wait for *proc*."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
    proc.wait()


class _Child:
    """One child process owned by a worker thread: started, read line by line into
    :attr:`lines` (``None`` at the end), killed on :meth:`stop`, always reaped."""

    def __init__(self, cmd: Sequence[str], cwd: Path, err_path: Path) -> None:
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.code: int | None = None
        self.error: OSError | None = None
        self._cmd = list(cmd)
        self._cwd = cwd
        self._err_path = err_path
        self._lock = threading.Lock()
        self._stopped = False
        self._running = False
        self._proc: subprocess.Popen[str] | None = None
        # not a daemon: the interpreter never exits with the child still unreaped
        self._thread = threading.Thread(target=self._run, name="tlc-child", daemon=False)

    def start(self) -> None:
        """Start the worker (which starts the process). Interrupted at any point, a later
        :meth:`stop` still leaves no process behind."""
        self._thread.start()

    def _run(self) -> None:
        with self._lock:
            if self._stopped:  # stopped before the worker got going: start nothing
                self.lines.put(None)
                return
            self._running = True
        try:
            with self._err_path.open("w", encoding="utf-8") as err:
                proc = subprocess.Popen(
                    self._cmd,
                    cwd=self._cwd,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                    stderr=err,
                    text=True,
                    encoding="utf-8",
                    errors="replace",
                    start_new_session=True,
                )
        except OSError as exc:
            self.error = exc
            self.lines.put(None)
            return
        with self._lock:
            self._proc = proc
            stopped = self._stopped
        try:
            if stopped:
                kill_group(proc)
            assert proc.stdout is not None
            for line in proc.stdout:
                self.lines.put(line)
            self.code = proc.wait()
        finally:
            kill_group(proc)  # the JVM's helpers too; reaps proc
            if proc.stdout is not None:
                proc.stdout.close()
            self.lines.put(None)

    def stop(self) -> None:
        """Kill the process group (now, or as soon as it exists) and wait for the worker."""
        with self._lock:
            self._stopped = True
            running = self._running
            proc = self._proc
        if proc is not None and proc.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
        if running:  # else the worker never ran, or will see _stopped and start nothing
            self._thread.join()


def execute(
    cmd: Sequence[str],
    cwd: Path,
    *,
    timeout: float | None,
    cancel: threading.Event | None,
    on_progress: Callable[[Progress], None] | None,
) -> tuple[str, str, int, float]:
    """Run *cmd* in its own process group; return (stdout, stderr, exit code, seconds).

    Progress messages (2200, 2209) go to *on_progress* as they arrive, in the calling
    thread. On timeout, cancel or any exception in the calling thread the process group
    is killed and reaped before this function returns or raises.
    """
    err_path = cwd / "tlc.stderr"
    started = time.monotonic()
    child = _Child(cmd, cwd, err_path)
    parser = ToolOutputParser()
    out: list[str] = []
    deadline = None if timeout is None else started + timeout
    try:
        child.start()
        while True:
            try:
                line = child.lines.get(timeout=POLL_S)
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
                child.stop()
                raise TLCCancelledError("TLC run cancelled; the JVM was killed")
            if deadline is not None and time.monotonic() > deadline:
                child.stop()
                raise TLCTimeoutError(f"TLC ran past its {timeout:g} s timeout; the JVM was killed")
    finally:
        # Ctrl-C, SIGTERM, a failing callback, anything: never leave the JVM behind
        child.stop()
    if child.error is not None:
        raise TLCCrashError(f"cannot start {cmd[0]}: {child.error}") from child.error
    assert child.code is not None
    elapsed = time.monotonic() - started
    return "".join(out), err_path.read_text(encoding="utf-8", errors="replace"), child.code, elapsed
