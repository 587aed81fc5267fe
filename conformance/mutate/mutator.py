"""A small seeded AST mutator: every mutation point of a module, each mutant a source text.

Operators (one syntactic change each, on code only -- docstrings, string constants,
annotations, logging calls and ``__repr__`` are left alone):

* ``cmp``    a comparison operator swapped (``==``/``!=``, ``<``/``<=``, ``>``/``>=``,
             ``in``/``not in``, ``is``/``is not``);
* ``bool``   ``and`` <-> ``or``;
* ``not``    ``not x`` -> ``x``;
* ``const``  ``True`` <-> ``False``; a small integer ``n`` (0..64) -> ``n + 1``;
* ``binop``  ``+`` <-> ``-``, ``|`` <-> ``&``;
* ``cond``   an ``if`` / ``while`` / ternary condition negated;
* ``stmt``   a statement (an expression call, an assignment, an augmented assignment, a
             ``raise``, a ``return`` of a value) replaced by ``pass``;
* ``loop``   ``break`` <-> ``continue``.

A mutant's id names it without line numbers, so an edit elsewhere in the file does not
change it::

    <path>::<qualname>::<operator>::<before> => <after>[#k]

*qualname* is the enclosing function (``Class.method``, ``outer.inner``; ``<module>`` at
the top level), *before* / *after* the mutated code (the node, one line: a comparison, a
boolean operation, a constant, a condition as ``if <test>``, a statement replaced by
``pass``), and ``#k`` (k >= 1) the ordinal among mutants with the same id in the file, in
source order. The id changes only when the mutated code itself, its function's name, or
an identical mutation before it in the same function changes. :func:`mutants` lists them
all; :func:`sample` picks a seeded subset (per file, so adding a file changes no other
file's sample).
"""

from __future__ import annotations

import ast
import copy
import random
from collections.abc import Iterator
from pathlib import Path

import attrs

__all__ = ["Mutant", "mutants", "sample"]

_CMP_SWAP: dict[type[ast.cmpop], type[ast.cmpop]] = {
    ast.Eq: ast.NotEq,
    ast.NotEq: ast.Eq,
    ast.Lt: ast.LtE,
    ast.LtE: ast.Lt,
    ast.Gt: ast.GtE,
    ast.GtE: ast.Gt,
    ast.In: ast.NotIn,
    ast.NotIn: ast.In,
    ast.Is: ast.IsNot,
    ast.IsNot: ast.Is,
}
_BIN_SWAP: dict[type[ast.operator], type[ast.operator]] = {
    ast.Add: ast.Sub,
    ast.Sub: ast.Add,
    ast.BitOr: ast.BitAnd,
    ast.BitAnd: ast.BitOr,
}
_SKIP_FUNCTIONS = frozenset({"__repr__", "__reduce_ex__"})
_LOGGING = frozenset({"debug", "info", "warning", "error", "exception"})


@attrs.frozen
class Mutant:
    id: str
    path: str
    line: int
    operator: str
    made: object = attrs.field(repr=False, eq=False)

    @property
    def source(self) -> str:
        """The whole mutated module."""
        return str(self.made)


def _is_docstring(node: ast.stmt) -> bool:
    return (
        isinstance(node, ast.Expr)
        and isinstance(node.value, ast.Constant)
        and isinstance(node.value.value, str)
    )


def _is_logging(node: ast.stmt) -> bool:
    if not isinstance(node, ast.Expr) or not isinstance(node.value, ast.Call):
        return False
    func = node.value.func
    return isinstance(func, ast.Attribute) and func.attr in _LOGGING


def _points(tree: ast.Module) -> Iterator[tuple[ast.AST, str, int]]:
    """(node, operator, variant) of every mutation point, in a deterministic order."""
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            if node.name in _SKIP_FUNCTIONS:
                skip.update(id(n) for n in ast.walk(node))
            for arg in (*node.args.args, *node.args.kwonlyargs):
                if arg.annotation is not None:
                    skip.update(id(n) for n in ast.walk(arg.annotation))
            if node.returns is not None:
                skip.update(id(n) for n in ast.walk(node.returns))
        elif isinstance(node, ast.AnnAssign):
            skip.update(id(n) for n in ast.walk(node.annotation))
        elif (
            (isinstance(node, ast.stmt) and (_is_docstring(node) or _is_logging(node)))
            or isinstance(node, ast.Import | ast.ImportFrom)
            or (
                isinstance(node, ast.Assign)
                and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets)
            )
        ):
            skip.update(id(n) for n in ast.walk(node))
    for node in ast.walk(tree):
        if id(node) in skip or not hasattr(node, "lineno"):
            continue
        if isinstance(node, ast.Compare):
            for k, op in enumerate(node.ops):
                if type(op) in _CMP_SWAP:
                    yield node, "cmp", k
        elif isinstance(node, ast.BoolOp):
            yield node, "bool", 0
        elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            yield node, "not", 0
        elif isinstance(node, ast.Constant):
            if isinstance(node.value, bool) or (
                isinstance(node.value, int) and 0 <= node.value <= 64
            ):
                yield node, "const", 0
        elif isinstance(node, ast.BinOp) and type(node.op) in _BIN_SWAP:
            yield node, "binop", 0
        elif isinstance(node, ast.If | ast.While | ast.IfExp):
            yield node, "cond", 0
        elif isinstance(node, ast.Break | ast.Continue):
            yield node, "loop", 0
        if isinstance(node, ast.Expr | ast.Assign | ast.AugAssign | ast.Raise) or (
            isinstance(node, ast.Return) and node.value is not None
        ):
            yield node, "stmt", 0


def _mutate(node: ast.AST, operator: str, variant: int) -> ast.AST:
    """The replacement for *node* (a mutated copy)."""
    new = copy.deepcopy(node)
    if operator == "cmp":
        assert isinstance(new, ast.Compare)
        new.ops[variant] = _CMP_SWAP[type(new.ops[variant])]()
    elif operator == "bool":
        assert isinstance(new, ast.BoolOp)
        new.op = ast.Or() if isinstance(new.op, ast.And) else ast.And()
    elif operator == "not":
        assert isinstance(new, ast.UnaryOp)
        return new.operand
    elif operator == "const":
        assert isinstance(new, ast.Constant)
        value = new.value
        assert isinstance(value, int)
        new.value = (not value) if isinstance(value, bool) else value + 1
    elif operator == "binop":
        assert isinstance(new, ast.BinOp)
        new.op = _BIN_SWAP[type(new.op)]()
    elif operator == "cond":
        assert isinstance(new, ast.If | ast.While | ast.IfExp)
        new.test = ast.UnaryOp(op=ast.Not(), operand=new.test)
    elif operator == "loop":
        return ast.Continue() if isinstance(new, ast.Break) else ast.Break()
    elif operator == "stmt":
        return ast.Pass()
    return new


class _Replace(ast.NodeTransformer):
    def __init__(self, target: ast.AST, replacement: ast.AST) -> None:
        self.target = target
        self.replacement = replacement

    def visit(self, node: ast.AST) -> ast.AST:
        if node is self.target:
            return ast.copy_location(self.replacement, node)
        visited: ast.AST = super().visit(node)
        return visited


@attrs.frozen
class _Point:
    id: str
    path: str
    line: int
    operator: str
    variant: int
    key: tuple[object, ...]
    """the node's type and span (finds it again in a fresh parse)"""


def _key(node: ast.AST) -> tuple[object, ...]:
    return (
        type(node),
        getattr(node, "lineno", None),
        getattr(node, "col_offset", None),
        getattr(node, "end_lineno", None),
        getattr(node, "end_col_offset", None),
    )


_HOLDERS = (ast.expr, ast.keyword, ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Return, ast.Expr)


def _scopes(tree: ast.Module) -> tuple[dict[int, str], dict[int, ast.AST]]:
    """Each node's enclosing qualname (``<module>`` at the top level) and its parent."""
    qualname: dict[int, str] = {}
    parent: dict[int, ast.AST] = {}

    def visit(node: ast.AST, scope: list[str]) -> None:
        qualname[id(node)] = ".".join(scope) or "<module>"
        inner = scope
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            inner = [*scope, node.name]
        for child in ast.iter_child_nodes(node):
            parent[id(child)] = node
            visit(child, inner)

    visit(tree, [])
    return qualname, parent


def _line(node: ast.AST) -> str:
    return " ".join(ast.unparse(node).split())


def _snippets(
    node: ast.AST, operator: str, variant: int, parent: ast.AST | None
) -> tuple[str, str]:
    """(before, after): the mutated code, one line each (see the module docstring)."""
    new = _mutate(node, operator, variant)
    if operator == "stmt":
        return _line(node), "pass"
    if operator == "loop":
        return _line(node), _line(new)
    if operator == "cond":
        assert isinstance(node, ast.If | ast.While | ast.IfExp)
        assert isinstance(new, ast.If | ast.While | ast.IfExp)
        word = {ast.If: "if", ast.While: "while", ast.IfExp: "ifexp"}[type(node)]
        return f"{word} {_line(node.test)}", f"{word} {_line(new.test)}"
    if operator == "const" and isinstance(parent, _HOLDERS):
        # a bare constant says little: show the expression holding it, when it is short
        twin = copy.deepcopy(parent)
        for field, value in ast.iter_fields(parent):
            if value is node:
                setattr(twin, field, new)
            elif isinstance(value, list) and any(v is node for v in value):
                setattr(twin, field, [new if v is node else copy.deepcopy(v) for v in value])
        before, after = _line(parent), _line(twin)
        if len(before) <= 80:
            return before, after
    return _line(node), _line(new)


def mutants(path: Path, root: Path) -> list[Mutant]:
    """Every mutant of the module at *path* (ids relative to *root*), in order; a mutant's
    source is made when first read (:attr:`Mutant.source`)."""
    text = path.read_text(encoding="utf-8")
    rel = path.resolve().relative_to(root.resolve()).as_posix()
    tree = ast.parse(text)
    qualname, parent = _scopes(tree)
    points = sorted(
        _points(tree),
        key=lambda p: (getattr(p[0], "lineno", 0), getattr(p[0], "col_offset", 0)),
    )
    out: list[Mutant] = []
    seen: dict[str, int] = {}
    for node, operator, variant in points:
        line = getattr(node, "lineno", 0)
        before, after = _snippets(node, operator, variant, parent.get(id(node)))
        base = f"{rel}::{qualname[id(node)]}::{operator}::{before} => {after}"
        k = seen.get(base, 0)
        seen[base] = k + 1
        point = _Point(base if k == 0 else f"{base}#{k}", rel, line, operator, variant, _key(node))
        out.append(Mutant(point.id, rel, line, operator, _Source(text, point)))
    return out


class _Source:
    """A mutant's module text, made on first use (parse, replace one node, unparse)."""

    def __init__(self, text: str, point: _Point) -> None:
        self._text = text
        self._point = point
        self._made: str | None = None

    def __str__(self) -> str:
        if self._made is None:
            tree = ast.parse(self._text)
            twin = _find(tree, self._point.key)
            if twin is None:
                raise LookupError(f"{self._point.id}: the node is gone")
            mutated = _Replace(twin, _mutate(twin, self._point.operator, self._point.variant))
            new = ast.fix_missing_locations(mutated.visit(tree))
            self._made = ast.unparse(new)
            compile(self._made, self._point.path, "exec")
        return self._made


def _find(tree: ast.AST, key: tuple[object, ...]) -> ast.AST | None:
    return next((node for node in ast.walk(tree) if _key(node) == key), None)


def sample(all_mutants: list[Mutant], per_file: int, seed: int) -> list[Mutant]:
    """A seeded subset: up to *per_file* mutants of each file (each file drawn with its own
    seeded generator: adding a file changes no other file's sample), in source order."""
    by_file: dict[str, list[Mutant]] = {}
    for m in all_mutants:
        by_file.setdefault(m.path, []).append(m)
    picked: list[Mutant] = []
    for path in sorted(by_file):
        group = by_file[path]
        rng = random.Random(f"{seed}:{path}")
        picked += group if len(group) <= per_file else rng.sample(group, per_file)
    return sorted(picked, key=lambda m: (m.path, m.line, m.id))
