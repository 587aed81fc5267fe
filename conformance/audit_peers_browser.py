"""An audit report as a browser shows it with no network: Chromium (Debian's ``chromium``
package) headless, run in a network namespace of its own (``unshare -n``: no interface but
loopback, which is down), with every host name unresolvable and every request sent to a
proxy that is not there besides; the DOM it built is what :func:`tpx.audit.report_dom.problems`
reads.

Where no Chromium is installed, :func:`dom` says so and the report is read as written (its
structure only).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import attrs

__all__ = ["BROWSERS", "Rendered", "browser", "dom"]

#: the executables tried, in order (Debian names it ``chromium``)
BROWSERS = ("chromium", "chromium-browser", "google-chrome")
#: Chromium's own cut of the network, whatever the namespace
NO_NETWORK = (
    "--proxy-server=127.0.0.1:9",
    "--host-resolver-rules=MAP * ~NOTFOUND",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
)


@attrs.frozen
class Rendered:
    """The document a reader gets, and how it was had."""

    document: str
    #: ``"chromium (no network namespace)"``, ... or ``""``: no browser, the file as written
    by: str


def browser() -> str | None:
    """The path of an installed Chromium, if any."""
    for name in BROWSERS:
        found = shutil.which(name)
        if found:
            return found
    return None


def _namespace() -> list[str]:
    """``unshare -n`` where it works here (root, or user namespaces allowed), else nothing."""
    unshare = shutil.which("unshare")
    if unshare is None:
        return []
    for prefix in ([unshare, "-n"], [unshare, "-r", "-n"]):
        done = subprocess.run([*prefix, "true"], capture_output=True, timeout=30, check=False)
        if done.returncode == 0:
            return prefix
    return []


def dom(path: Path, timeout: float = 120) -> Rendered:
    """The DOM of the report at *path* as headless Chromium builds it, offline."""
    exe = browser()
    if exe is None:
        return Rendered(path.read_text(encoding="utf-8"), "")
    prefix = _namespace()
    with tempfile.TemporaryDirectory(prefix="audit-browser-") as profile:
        cmd = [*prefix, exe, "--headless", "--disable-gpu", f"--user-data-dir={profile}"]
        if os.geteuid() == 0:
            cmd.append("--no-sandbox")  # Chromium refuses root otherwise
        cmd += [*NO_NETWORK, "--dump-dom", path.resolve().as_uri()]
        done = subprocess.run(cmd, capture_output=True, timeout=timeout, check=False)
    if done.returncode != 0 or not done.stdout.strip():
        tail = done.stderr.decode(errors="replace")[-2000:]
        raise RuntimeError(f"{exe} could not render {path} (exit {done.returncode}):\n{tail}")
    where = "a network namespace of its own" if prefix else "no network namespace"
    return Rendered(done.stdout.decode("utf-8"), f"headless {Path(exe).name} ({where})")
