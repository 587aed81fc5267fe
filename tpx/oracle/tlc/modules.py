"""Read TLA+ modules and stage a spec, with the modules it EXTENDS or INSTANCEs, into a
run's work directory."""

from __future__ import annotations

import contextlib
import re
from collections.abc import Mapping
from pathlib import Path

from tpx.errors import (
    SpecConfigError,
    TLCConfigError,
)
from tpx.oracle.tlc.cfg import _strip_comments

__all__ = ["module_name", "read_module", "stage_modules"]

_MODULE_NAME = re.compile(r"-{4,}\s*MODULE\s+(\w+)\s*-{4,}")


def module_name(source: str, path: Path) -> str:
    m = _MODULE_NAME.search(source)
    return m.group(1) if m else path.stem


def read_module(path: Path) -> str:
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


def stage_modules(spec: Path, work: Path, extra_modules: Mapping[str, str]) -> dict[str, str]:
    """Write *spec*, the modules next to it that it (or an extra module) EXTENDS or INSTANCEs,
    transitively, and *extra_modules* into *work*; return module name -> text. Other files
    next to the spec are not read (standard modules come from the jar)."""
    sources: dict[str, str] = {}
    text = read_module(spec)
    (work / spec.name).write_text(text, encoding="utf-8")
    sources[module_name(text, spec)] = text
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
            dep = read_module(path)
            (work / path.name).write_text(dep, encoding="utf-8")
            sources[module_name(dep, path)] = dep
            todo.append(dep)
    return sources
