"""Which TLA+ modules have a Python mirror, and the check that a given spec is one of them.

The mirror knows which spec it mirrors: each mirrored module ships, inside the package
(``tpx/oracle/specs/<Module>.tla`` and ``.cfg``, identical to the repository's ``spec/`` copies),
the exact text the mirror implements. Before the mirror explores a spec or judges a
trace against it, :func:`check_mirrored` compares the given spec with the shipped one by
:func:`~tpx.oracle.model.fingerprint.fingerprint` (tokens, comments and whitespace ignored) and
refuses any difference, naming the first differing line; and it checks the cfg's
``SPECIFICATION`` / ``INIT`` / ``NEXT`` / ``INVARIANT(S)`` / ``PROPERTY(IES)`` names
against what the mirror defines, as TLC checks them against the module, so that only the
named checks run. A mirror registers itself with one line::

    register(MirroredSpec("TpxGateway", invariants=(...), properties=(...)))

in its package's ``__init__`` or its module (listed in :data:`MIRROR_PACKAGES`, so a
lookup imports it), with ``spec/TpxGateway.tla`` / ``.cfg`` copied to ``tpx/oracle/specs/``.
"""

from __future__ import annotations

import functools
import importlib
import os
from importlib import resources
from pathlib import Path

import attrs

from tpx.errors import TpxError
from tpx.oracle.model.fingerprint import fingerprint, first_difference, tokens
from tpx.oracle.tlc.cfg import ModelConfig, load_cfg

__all__ = [
    "MIRROR_PACKAGES",
    "MirrorCheck",
    "MirroredSpec",
    "SpecMismatchError",
    "check_mirrored",
    "lookup",
    "mirrored",
    "register",
    "shipped_dir",
]


class SpecMismatchError(TpxError):
    """The given spec or cfg is not what the mirror implements: use ``tpx tlc``."""


def shipped_dir() -> Path:
    """The folder of the specs shipped inside the package (``tpx/oracle/specs``)."""
    return Path(str(resources.files("tpx.oracle") / "specs"))


@attrs.frozen
class MirroredSpec:
    """A TLA+ module with a Python mirror, and the names the mirror defines."""

    module: str
    """The module name (``---- MODULE TpxTransport ----``)."""
    invariants: tuple[str, ...]
    """State predicates the mirror can check (the names a cfg's INVARIANT may list)."""
    properties: tuple[str, ...] = ()
    """Temporal / action properties the mirror can check (PROPERTY names)."""
    specifications: tuple[str, ...] = ("Spec",)
    """Names a cfg's SPECIFICATION may give."""
    init: str = "Init"
    next: str = "Next"

    @property
    def spec_path(self) -> Path:
        """The shipped ``.tla`` the mirror implements."""
        return shipped_dir() / f"{self.module}.tla"

    @property
    def cfg_path(self) -> Path:
        """The shipped default ``.cfg``."""
        return shipped_dir() / f"{self.module}.cfg"

    @functools.cached_property
    def source(self) -> str:
        return self.spec_path.read_text(encoding="utf-8")

    @functools.cached_property
    def fingerprint(self) -> str:
        return fingerprint(self.source)


_REGISTRY: dict[str, MirroredSpec] = {}

#: Packages whose import registers their mirrors (each calls :func:`register` once).
MIRROR_PACKAGES: list[str] = [
    "tpx.oracle.model",
    "tpx.oracle.model.gateway",
    "tpx.oracle.model.gateway.overlap",
]


def register(spec: MirroredSpec) -> MirroredSpec:
    """Add (or replace) a mirrored module; returns it."""
    _REGISTRY[spec.module] = spec
    return spec


def _load_all() -> None:
    for package in MIRROR_PACKAGES:
        importlib.import_module(package)


def lookup(module: str) -> MirroredSpec | None:
    """The mirror of *module*, or ``None``."""
    _load_all()
    return _REGISTRY.get(module)


def mirrored() -> tuple[str, ...]:
    """The registered module names, sorted."""
    _load_all()
    return tuple(sorted(_REGISTRY))


@attrs.frozen
class MirrorCheck:
    """A spec and cfg the mirror may run: which mirror, and what the cfg asks it to check."""

    mirror: MirroredSpec
    model: ModelConfig
    invariants: tuple[str, ...]
    """The cfg's INVARIANT names, in its order (only these are checked)."""
    properties: tuple[str, ...]
    """The cfg's PROPERTY names, in its order (only these are checked)."""


def _module_name(source: str) -> str | None:
    toks = tokens(source)
    if len(toks) >= 3 and toks[0].text == "----" and toks[1].text == "MODULE":
        return toks[2].text
    return None


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise SpecMismatchError(
            f"{path} is not UTF-8 text (byte {exc.start}: {exc.reason})"
        ) from None
    except OSError as exc:
        raise SpecMismatchError(f"cannot read the spec {path}: {exc.strerror or exc}") from None


def _line(source: str, n: int) -> str:
    lines = source.splitlines()
    return lines[n - 1].strip() if 0 < n <= len(lines) else "(end of file)"


def check_spec(spec: str | os.PathLike[str]) -> MirroredSpec:
    """The mirror of *spec*; :class:`SpecMismatchError` unless *spec* is, token for token,
    a module the mirror implements."""
    path = Path(spec)
    source = _read(path)
    name = _module_name(source)
    mirror = lookup(name) if name is not None else None
    if mirror is None:
        found = f"module {name}" if name else "no ---- MODULE ... ---- header"
        raise SpecMismatchError(
            f"{path}: the mirror implements {', '.join(mirrored())} only (found {found}); "
            f"model-check other specs with `tpx tlc {path}`"
        )
    if fingerprint(source) != mirror.fingerprint:
        diff = first_difference(tokens(source), tokens(mirror.source))
        assert diff is not None
        here, there = diff
        raise SpecMismatchError(
            f"{path} differs from the {mirror.module} the mirror implements, first at "
            f"line {here}: {_line(source, here)!r} (the mirrored spec, line {there}: "
            f"{_line(mirror.source, there)!r}); the mirror only explores the spec it "
            f"mirrors: model-check this one with `tpx tlc {path}`"
        )
    return mirror


def _names(
    cfg: Path, keyword: str, given: tuple[str, ...], known: tuple[str, ...], module: str
) -> None:
    for name in given:
        if name not in known:
            raise SpecMismatchError(
                f"{cfg}: {keyword} {name} is not defined in {module} (TLC refuses it too); "
                f"the mirror defines {', '.join(known) or 'none'}"
            )


def check_mirrored(
    spec: str | os.PathLike[str], cfg: str | os.PathLike[str] | None = None
) -> MirrorCheck:
    """Check that the mirror may run *spec* with *cfg* (default: the ``.cfg`` beside the
    spec) and what the cfg asks it to check. Raises :class:`SpecMismatchError` (the spec
    differs from the mirrored one, or the cfg names something the mirror does not define)
    or :class:`~tpx.errors.SpecConfigError` (the cfg is unreadable)."""
    mirror = check_spec(spec)
    cfg_path = Path(spec).with_suffix(".cfg") if cfg is None else Path(cfg)
    model = load_cfg(cfg_path)
    m = mirror.module
    only_tlc = model.mirror_free()
    if only_tlc:
        raise SpecMismatchError(
            f"{cfg_path}: uses {', '.join(only_tlc)}, which only TLC applies; "
            f"model-check it with `tpx tlc {spec} --config {cfg_path}`"
        )
    if model.specification is not None:
        _names(cfg_path, "SPECIFICATION", (model.specification,), mirror.specifications, m)
    elif model.init is not None or model.next is not None:
        _names(cfg_path, "INIT", (model.init or "",), (mirror.init,), m)
        _names(cfg_path, "NEXT", (model.next or "",), (mirror.next,), m)
    else:
        raise SpecMismatchError(f"{cfg_path}: names neither SPECIFICATION nor INIT/NEXT")
    _names(cfg_path, "INVARIANT", model.invariants, mirror.invariants, m)
    _names(cfg_path, "PROPERTY", model.properties, mirror.properties, m)
    return MirrorCheck(mirror, model, model.invariants, model.properties)
