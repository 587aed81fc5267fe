"""TLC model configuration (.cfg) files: read, write, adjust.

:func:`parse_cfg` reads the keywords ``SPECIFICATION``, ``INIT``, ``NEXT``,
``CONSTANT(S)``, ``INVARIANT(S)``, ``PROPERTY``/``PROPERTIES`` and
``CHECK_DEADLOCK TRUE|FALSE`` with ``\\*`` and ``(* *)`` comments. In a cfg a
bare identifier is a model value, so ``X = X`` declares the model value
``X``. :func:`render_cfg` writes a cfg TLC 2.15 accepts: it never emits
``CHECK_DEADLOCK`` (unknown to 2.15); the runner turns that setting into the
``-deadlock`` command-line flag instead.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import attrs

from tpx.errors import SpecConfigError
from tpx.oracle.tlc.values import TLAValueSyntaxError, _parse_tokens, format_value
from tpx.oracle.values import TLAValue

#: A path argument: ``str`` or any ``os.PathLike`` (``pathlib.Path`` included).
StrPath = str | os.PathLike[str]

__all__ = ["ModelConfig", "StrPath", "load_cfg", "parse_cfg", "render_cfg", "with_constants"]


@attrs.frozen
class ModelConfig:
    """What a TLC cfg file says (``None`` / empty where the file is silent)."""

    specification: str | None = None
    init: str | None = None
    next: str | None = None
    constants: dict[str, TLAValue] = attrs.field(factory=dict)
    invariants: tuple[str, ...] = ()
    properties: tuple[str, ...] = ()
    check_deadlock: bool | None = None
    substitutions: dict[str, str] = attrs.field(factory=dict)
    """``CONSTANT C <- Op``: the constant is replaced by the spec's definition ``Op``."""
    constraints: tuple[str, ...] = ()
    """CONSTRAINT(S): state constraints (states violating one are not explored further)."""
    action_constraints: tuple[str, ...] = ()
    """ACTION_CONSTRAINT(S)."""
    symmetry: tuple[str, ...] = ()
    """SYMMETRY: permutation sets (e.g. ``Permutations(ToolIds)``) defined in the spec."""
    view: tuple[str, ...] = ()
    """VIEW: the state function TLC fingerprints instead of the whole state."""
    alias: tuple[str, ...] = ()
    """ALIAS (TLC 2.16+; 2.15 refuses it, and says so)."""

    def mirror_free(self) -> list[str]:
        """The keywords in this cfg that only TLC applies (the Python mirror does not)."""
        out = [
            kw
            for kw, used in (
                ("CONSTRAINT", self.constraints),
                ("ACTION_CONSTRAINT", self.action_constraints),
                ("SYMMETRY", self.symmetry),
                ("VIEW", self.view),
                ("ALIAS", self.alias),
            )
            if used
        ]
        if self.substitutions:
            out.append("`<-` substitution")
        return out


#: Keywords whose arguments are a list of operator names, and the field that keeps them.
_NAME_LISTS = {
    "INVARIANT": "invariants",
    "INVARIANTS": "invariants",
    "PROPERTY": "properties",
    "PROPERTIES": "properties",
    "CONSTRAINT": "constraints",
    "CONSTRAINTS": "constraints",
    "ACTION_CONSTRAINT": "action_constraints",
    "ACTION_CONSTRAINTS": "action_constraints",
    "SYMMETRY": "symmetry",
    "VIEW": "view",
    "ALIAS": "alias",
}

_KEYWORDS = {
    "SPECIFICATION": "specification",
    "INIT": "init",
    "NEXT": "next",
    "CONSTANT": "constants",
    "CONSTANTS": "constants",
    "CHECK_DEADLOCK": "check_deadlock",
    **_NAME_LISTS,
}
#: Keywords of newer TLCs that TLC 2.15 does not know.
_UNSUPPORTED = frozenset({"POSTCONDITION"})

_TOKEN = re.compile(
    r"""
    (?P<ws>\s+)
  | (?P<string>"(?:[^"\\\n]|\\.)*")
  | (?P<int>-?\d+)
  | (?P<ident>[A-Za-z_][A-Za-z0-9_]*)
  | (?P<punct><<|>>|\|->|:>|@@|\.\.|<-|[{}\[\](),=])
    """,
    re.VERBOSE,
)


def _strip_comments(text: str) -> str:
    """Blank out ``\\*`` line comments and (nested) ``(* *)`` block comments, keeping newlines."""
    out: list[str] = []
    i, depth, n = 0, 0, len(text)
    in_string = False
    while i < n:
        two = text[i : i + 2]
        ch = text[i]
        if depth == 0 and in_string:
            out.append(ch)
            if ch == "\\" and i + 1 < n:
                out.append(text[i + 1])
                i += 2
                continue
            in_string = ch != '"'
            i += 1
        elif two == "(*":
            depth += 1
            out.append("  ")
            i += 2
        elif depth and two == "*)":
            depth -= 1
            out.append("  ")
            i += 2
        elif depth:
            out.append("\n" if ch == "\n" else " ")
            i += 1
        elif two == "\\*":
            end = text.find("\n", i)
            end = n if end < 0 else end
            out.append(" " * (end - i))
            i = end
        else:
            in_string = ch == '"'
            out.append(ch)
            i += 1
    if depth:
        raise SpecConfigError(f"line {text.count(chr(10), 0, n) + 1}: unterminated (* comment")
    return "".join(out)


def parse_cfg(text: str, *, source: str = "<cfg>") -> ModelConfig:
    """Read a TLC cfg. Raises :class:`SpecConfigError` naming the offending line."""
    clean = _strip_comments(text)

    def line_of(pos: int) -> int:
        return clean.count("\n", 0, pos) + 1

    def fail(pos: int, why: str) -> SpecConfigError:
        return SpecConfigError(f"{source}, line {line_of(pos)}: {why}")

    tokens: list[tuple[str, str, int]] = []
    pos = 0
    while pos < len(clean):
        m = _TOKEN.match(clean, pos)
        if m is None:
            raise fail(pos, f"unexpected character {clean[pos]!r}")
        if m.lastgroup != "ws":
            assert m.lastgroup is not None
            tokens.append((m.lastgroup, m.group(), pos))
        pos = m.end()

    fields: dict[str, Any] = {"constants": {}, "substitutions": {}}
    fields.update({f: [] for f in _NAME_LISTS.values()})
    seen_single: set[str] = set()
    i = 0

    def at_keyword(j: int) -> bool:
        return j >= len(tokens) or (tokens[j][0] == "ident" and tokens[j][1] in _KEYWORDS)

    while i < len(tokens):
        kind, word, wpos = tokens[i]
        if kind != "ident" or word not in _KEYWORDS:
            if word in _UNSUPPORTED:
                raise fail(wpos, f"the cfg keyword {word} is not known to TLC 2.15")
            raise fail(wpos, f"expected a cfg keyword (SPECIFICATION, INIT, ...), found {word!r}")
        field = _KEYWORDS[word]
        i += 1
        if field in ("specification", "init", "next", "check_deadlock"):
            if field in seen_single:
                raise fail(wpos, f"{word} given twice")
            seen_single.add(field)
            if i >= len(tokens) or tokens[i][0] != "ident" or at_keyword(i):
                raise fail(
                    wpos,
                    f"{word} needs "
                    + ("TRUE or FALSE" if field == "check_deadlock" else "an operator name"),
                )
            arg = tokens[i][1]
            if field == "check_deadlock":
                if arg not in ("TRUE", "FALSE"):
                    raise fail(tokens[i][2], f"CHECK_DEADLOCK needs TRUE or FALSE, found {arg!r}")
                fields[field] = arg == "TRUE"
            else:
                fields[field] = arg
            i += 1
        elif field in _NAME_LISTS.values():
            start = i
            while not at_keyword(i) and tokens[i][0] == "ident":
                fields[field].append(tokens[i][1])
                i += 1
            if i == start:
                raise fail(wpos, f"{word} needs at least one operator name")
        else:  # constants
            start = i
            while not at_keyword(i):
                nkind, name, npos = tokens[i]
                if nkind != "ident":
                    raise fail(npos, f"expected a constant name, found {name!r}")
                if i + 1 >= len(tokens) or tokens[i + 1][1] not in ("=", "<-"):
                    raise fail(npos, f"expected '=' after the constant {name}")
                if name in fields["constants"] or name in fields["substitutions"]:
                    raise fail(npos, f"constant {name} assigned twice")
                if at_keyword(i + 2):
                    raise fail(npos, f"constant {name} has no value")
                if tokens[i + 1][1] == "<-":
                    if tokens[i + 2][0] != "ident":
                        raise fail(npos, f"{name} <- needs an operator name")
                    fields["substitutions"][name] = tokens[i + 2][1]
                    i += 3
                    continue
                try:
                    value, i = _parse_tokens(clean, tokens, i + 2)
                except TLAValueSyntaxError as exc:
                    # the value parser quotes the whole text it was given: keep only its reason
                    why = re.sub(r" at offset \d+ in .*$", "", str(exc), flags=re.DOTALL)
                    if why.startswith("expected '}'") or why.startswith("expected '>>'"):
                        why += " (an unclosed set or tuple?)"
                    raise fail(npos, f"bad value for constant {name}: {why}") from None
                fields["constants"][name] = value
            if i == start:
                raise fail(wpos, f"{word} needs at least one assignment")

    if fields.get("specification") and (fields.get("init") or fields.get("next")):
        raise SpecConfigError(f"{source}: SPECIFICATION cannot be combined with INIT/NEXT")
    if not fields.get("specification") and bool(fields.get("init")) != bool(fields.get("next")):
        raise SpecConfigError(f"{source}: INIT and NEXT must be given together")
    return ModelConfig(
        specification=fields.get("specification"),
        init=fields.get("init"),
        next=fields.get("next"),
        constants=fields["constants"],
        check_deadlock=fields.get("check_deadlock"),
        substitutions=fields["substitutions"],
        **{f: tuple(fields[f]) for f in set(_NAME_LISTS.values())},
    )


def load_cfg(path: StrPath) -> ModelConfig:
    """Read a cfg file. Raises :class:`SpecConfigError` if missing or malformed."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise SpecConfigError(
            f"cfg file {p} is not UTF-8 text (byte {exc.start}: {exc.reason})"
        ) from None
    except OSError as exc:
        raise SpecConfigError(f"cannot read cfg file {p}: {exc.strerror or exc}") from exc
    return parse_cfg(text, source=str(p))


def render_cfg(cfg: ModelConfig) -> str:
    """Write *cfg* as a cfg TLC 2.15 accepts. ``check_deadlock`` is NOT written
    (TLC 2.15 has no CHECK_DEADLOCK keyword; pass ``-deadlock`` instead)."""
    lines: list[str] = []
    if cfg.specification:
        lines.append(f"SPECIFICATION {cfg.specification}")
    if cfg.init:
        lines.append(f"INIT {cfg.init}")
    if cfg.next:
        lines.append(f"NEXT {cfg.next}")
    if cfg.constants or cfg.substitutions:
        lines.append("CONSTANTS")
        lines.extend(f"    {name} = {format_value(v)}" for name, v in cfg.constants.items())
        lines.extend(f"    {name} <- {op}" for name, op in cfg.substitutions.items())
    for keyword, names in (
        ("INVARIANT", cfg.invariants),
        ("PROPERTY", cfg.properties),
        ("CONSTRAINT", cfg.constraints),
        ("ACTION_CONSTRAINT", cfg.action_constraints),
        ("SYMMETRY", cfg.symmetry),
        ("VIEW", cfg.view),
        ("ALIAS", cfg.alias),
    ):
        if names:
            lines.append(keyword)
            lines.extend(f"    {name}" for name in names)
    return "\n".join(lines) + "\n"


def with_constants(cfg: ModelConfig, **consts: TLAValue) -> ModelConfig:
    """A copy of *cfg* with the given constants set (added or replaced)."""
    return attrs.evolve(cfg, constants={**cfg.constants, **consts})
