"""``tpx audit`` needs nothing but the installed package: no module of ``tpx`` imports the
repository's ``conformance``, ``tests`` or ``benchmarks`` (read from every module's syntax
tree, imports inside functions included), none reads a file of the checkout beside the
package, and the recorded Claude Code turn the audit's clients send is package data."""

from __future__ import annotations

import ast
import json
from importlib import resources
from pathlib import Path

import tpx
from tpx.audit import claude_code

PACKAGE = Path(tpx.__file__).parent
REPO = PACKAGE.parent
#: top-level packages of the checkout that the wheel does not hold
NOT_INSTALLED = ("conformance", "tests", "benchmarks")
FIXTURE = REPO / "tests/fixtures/clients/claude-code/2.1.197/tour/003-post-v1-messages.json"


def _imports(tree: ast.AST, module: str) -> list[tuple[int, str]]:
    """(line, module name) of every import in *tree*, relative ones resolved against
    *module*, and every ``importlib.import_module("...")`` / ``__import__("...")`` of a
    literal name."""
    out: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".")[: -node.level]
                name = ".".join([*base, *([node.module] if node.module else [])])
            else:
                name = node.module or ""
            out.append((node.lineno, name))
        elif isinstance(node, ast.Call) and node.args:
            fn = node.func
            called = fn.attr if isinstance(fn, ast.Attribute) else getattr(fn, "id", "")
            arg = node.args[0]
            if called in ("import_module", "__import__") and isinstance(arg, ast.Constant):
                out.append((node.lineno, str(arg.value)))
    return out


def _modules() -> list[tuple[Path, str]]:
    out = []
    for path in sorted(PACKAGE.rglob("*.py")):
        # a package's __init__ keeps its name: a relative import counts from its folder
        out.append((path, ".".join(path.relative_to(REPO).with_suffix("").parts)))
    return out


def test_the_import_walk_sees_every_kind_of_import() -> None:
    source = (
        "import conformance.replay\n"
        "def f():\n"
        "    from tests.audit import conftest\n"
        "    importlib.import_module('benchmarks.x')\n"
        "from .. import sibling\n"
    )
    names = sorted(n for _, n in _imports(ast.parse(source), "tpx.audit.run"))
    assert names == ["benchmarks.x", "conformance.replay", "tests.audit", "tpx"]
    assert _imports(ast.parse("from . import x"), "tpx.audit.__init__") == [(1, "tpx.audit")]


def test_no_module_of_tpx_imports_the_checkout() -> None:
    modules = _modules()
    assert len(modules) > 100
    found = [
        f"{path.relative_to(REPO)}:{line}: {name}"
        for path, module in modules
        for line, name in _imports(ast.parse(path.read_text(encoding="utf-8")), module)
        if name.split(".")[0] in NOT_INSTALLED
    ]
    assert found == []


def test_no_module_of_tpx_reads_the_checkout_beside_it() -> None:
    """A path built from ``__file__`` must stay inside the package (``parents[k]`` of a
    module ``d`` folders deep in ``tpx`` leaves it from ``k = d``)."""
    found = []
    for path, _ in _modules():
        depth = len(path.relative_to(PACKAGE).parts) - 1
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (
                isinstance(node, ast.Subscript)
                and isinstance(node.value, ast.Attribute)
                and node.value.attr == "parents"
                and "__file__" in ast.unparse(node.value)
                and isinstance(node.slice, ast.Constant)
                and isinstance(node.slice.value, int)
                and node.slice.value >= depth
            ):
                found.append(f"{path.relative_to(REPO)}:{node.lineno}: {ast.unparse(node)}")
    assert found == []


def test_the_recorded_claude_code_turn_is_package_data() -> None:
    packaged = resources.files("tpx.audit") / "data" / "claude-code-2.1.197-turn.json"
    assert packaged.is_file()
    assert str(claude_code.RECORDING) == str(packaged)
    record = json.loads(packaged.read_text(encoding="utf-8"))
    assert record["headers"]["User-Agent"].startswith("claude-cli/2.1.197")
    # the copy is the recording of the fixtures, byte for byte
    assert packaged.read_bytes() == FIXTURE.read_bytes()
    members = claude_code.tail_members(stream=True)
    assert list(members)[:2] == ["system", "tools"]
    assert members["stream"] is True
    assert claude_code.TOOL in members["tools"]
