"""Running ``TPX_OAUTH_TOKEN_COMMAND``: bounded in time and in output.

The command runs through the shell in a session of its own (so the whole process group
is killed when it overruns), with no stdin and its stderr discarded. At most
:data:`MAX_OUTPUT` bytes of its stdout are read: a command printing more, or still running
after its time limit, is killed and counts as failed. Nothing the command printed is ever
shown: failures say only what went wrong (:class:`~tpx.errors.UnauthorizedError`).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading

from tpx.errors import UnauthorizedError

__all__ = ["MAX_OUTPUT", "TIMEOUT", "run_token_command"]

#: The most a token command may print (a bearer token is a few kB at most).
MAX_OUTPUT = 64 * 1024
#: Seconds a token command may run (``[upstream] token_timeout``).
TIMEOUT = 30.0

_NAME = "TPX_OAUTH_TOKEN_COMMAND"


def _kill(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)


def run_token_command(
    command: str, *, timeout: float = TIMEOUT, max_output: int = MAX_OUTPUT
) -> str:
    """The token *command* prints (stripped). Raises :class:`UnauthorizedError` when it
    cannot be run, runs longer than *timeout* seconds, prints more than *max_output*
    bytes or nothing, or exits with a non-zero status."""
    try:
        proc = subprocess.Popen(
            command,
            shell=True,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
    except (OSError, ValueError):
        raise UnauthorizedError(f"{_NAME} could not be run (its output is not shown)") from None
    overran = threading.Event()

    def overrun() -> None:
        overran.set()
        _kill(proc)

    timer = threading.Timer(timeout, overrun)
    timer.daemon = True
    timer.start()
    try:
        assert proc.stdout is not None
        output = proc.stdout.read(max_output + 1)
        if len(output) > max_output:
            _kill(proc)
        proc.stdout.close()
        status = proc.wait()
    finally:
        timer.cancel()
        if proc.poll() is None:  # an exception on the way: nothing is left running
            _kill(proc)
            proc.wait()
    if overran.is_set():
        raise UnauthorizedError(f"{_NAME} did not finish within {timeout:g} s (it was stopped)")
    if len(output) > max_output:
        raise UnauthorizedError(
            f"{_NAME} printed more than {max_output} bytes (it was stopped; its output is "
            "not shown)"
        )
    token = output.decode("utf-8", "replace").strip()
    if status != 0 or not token:
        raise UnauthorizedError(
            f"{_NAME} exited with status {status} or printed no token (its output is not shown)"
        )
    return token
