"""``pip install tpx; tpx audit URL`` works without the checkout: the wheel is built,
installed into a fresh venv (``--no-deps``, no index: its dependencies are this
environment's, read through a ``.pth`` file, so nothing is downloaded), and that venv's
``tpx audit`` audits that venv's ``tpx serve``, every check passing, from a folder outside
the checkout."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from tests.audit.test_report import serve_for_audit
from tests.e2e.procs import free_port

REPO = Path(__file__).parents[2]


def _run(cmd: list[str], cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG", "TMPDIR")}
    return subprocess.run(
        cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )


def _installed(tmp_path: Path) -> Path:
    """A fresh venv holding the wheel built from the checkout; its ``bin`` folder."""
    wheels = tmp_path / "wheels"
    built = _run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(wheels), str(REPO)],
        tmp_path,
    )
    assert built.returncode == 0, built.stderr
    (wheel,) = wheels.glob("tpx-*.whl")
    venv = tmp_path / "venv"
    made = _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], tmp_path)
    assert made.returncode == 0, made.stderr
    python = venv / "bin" / "python"
    purelib = _run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], tmp_path
    )
    # this environment's packages (the dependencies), after the venv's own; the editable
    # install of the checkout stays out (a .pth file of that folder is not read)
    deps = sysconfig.get_paths()["purelib"]
    (Path(purelib.stdout.strip()) / "tpx-test-deps.pth").write_text(deps + "\n")
    pip = [sys.executable, "-m", "pip", "--python", str(python), "install"]
    installed = _run([*pip, "--no-deps", "--no-index", "-q", str(wheel)], tmp_path)
    assert installed.returncode == 0, installed.stderr
    return venv / "bin"


@pytest.mark.slow
def test_the_installed_tpx_audits_the_installed_tpx_serve(tmp_path: Path) -> None:
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    bin_dir = _installed(tmp_path)
    where = _run(
        [
            str(bin_dir / "python"),
            "-c",
            "import importlib.util, tpx; print(tpx.__file__); "
            "print(importlib.util.find_spec('conformance'), importlib.util.find_spec('tests'))",
        ],
        outside,
    )
    assert where.returncode == 0, where.stderr
    module, missing = where.stdout.splitlines()
    assert module.startswith(str(tmp_path / "venv")), module
    assert missing == "None None"  # the checkout is not importable there
    upstream = free_port()
    serve, url = serve_for_audit(tmp_path, upstream, tpx=[str(bin_dir / "tpx")], cwd=outside)
    try:
        report = outside / "audit.json"
        audit = _run(
            [
                str(bin_dir / "tpx"),
                "audit",
                url,
                "--key",
                "audit-key",
                "--upstream-listen",
                f"127.0.0.1:{upstream}",
                "--report",
                str(report),
            ],
            outside,
        )
    finally:
        serve.terminate()
        serve.wait(30)
    assert audit.returncode == 0, audit.stdout + audit.stderr
    assert "verdict: every check passes" in audit.stdout
    doc = json.loads(report.read_text(encoding="utf-8"))
    assert doc["ok"] is True
    assert {c["status"] for c in doc["checks"]} == {"pass"}
    assert doc["behaviours"] > 500
