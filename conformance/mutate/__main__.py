"""``make mutate``: mutation testing with the conformance suite alone as the judge.

``python -m conformance.mutate [--per-file N] [--seed S] [--timeout SECONDS] [--only ID...]
[--only-from FILE] [--target PATH] [--list] [--report FILE]``

Mutant ids hold spaces (``<path>::<function>::<operator>::<before> => <after>[#k]``): quote
each ``--only`` id, or put them in a file, one per line (``--only-from``; a line of
``equivalent.txt`` works too, the reason after `` | `` is ignored).

1. The files of ``conformance/mutate/targets.txt`` are mutated by
   :mod:`conformance.mutate.mutator` (every mutation point; ``--per-file`` picks a seeded
   sample of each file's, 0 = all).
2. The judge (:mod:`conformance.mutate.judge`: the seed cfg's minimum edge cover through
   the transport, plain and streamed, computed once from TLC's graph and pickled; then the
   gateway conformance through the gateway core) is the conformance suite alone.
3. The unmutated code must pass the judge; then each mutant is judged in its own process
   (``nice -n 10``), on a private copy of ``tpx/`` and ``conformance/`` holding the mutated
   file, with a timeout (a mutant that hangs is killed by the timeout).
4. It prints each mutant's verdict, the kill rate (killed / (mutants - equivalent)) and
   the survivors. ``conformance/mutate/equivalent.txt`` lists the mutants judged
   equivalent, one ``<id> | <reason>`` per line; those are not counted. Exit status 1 when
   a survivor is not listed there (or ``--fail-under`` is not met).
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
import pickle
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from conformance.mutate.mutator import Mutant, mutants, sample

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
TARGETS = HERE / "targets.txt"
EQUIVALENT = HERE / "equivalent.txt"


def targets(path: Path = TARGETS) -> list[Path]:
    """The files to mutate (``targets.txt``: one path per line, ``#`` comments)."""
    lines = (line.split("#", 1)[0].strip() for line in path.read_text().splitlines())
    return [ROOT / line for line in lines if line]


def equivalents(path: Path = EQUIVALENT) -> dict[str, str]:
    """Mutant id -> the reason it is equivalent (``equivalent.txt``)."""
    out: dict[str, str] = {}
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        ident, _, reason = line.rpartition(" | ")  # an id may hold "|" (a | b => a & b)
        if not ident:
            ident, reason = line, ""
        if not reason.strip():
            raise SystemExit(f"{path}: {ident.strip()} needs a reason")
        out[ident.strip()] = reason.strip()
    return out


def _ids_in(path: Path, known: set[str]) -> list[str]:
    """Mutant ids, one a line (``#`` comments; a `` | reason`` tail is ignored)."""
    out = []
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if line and not line.startswith("#"):
            out.append(line if line in known else (line.rpartition(" | ")[0] or line))
    return out


def _behaviours(cache: Path) -> None:
    from conformance.replay import edge_cover, tlc_graph
    from tpx.oracle.model import Config

    cover = edge_cover(tlc_graph())
    cache.write_bytes(pickle.dumps((Config.of(2, 3), cover)))


def _run_judge(
    workdir: Path, cache: Path, timeout: float, mutated: str = ""
) -> tuple[str, str, float]:
    start = time.monotonic()
    env = {**os.environ, "PYTHONPATH": str(workdir), "PYTHONDONTWRITEBYTECODE": "1"}
    cmd = ["nice", "-n", "10", sys.executable, "-m", "conformance.mutate.judge", str(cache)]
    if mutated:
        cmd.append(mutated)
    try:
        done = subprocess.run(
            cmd, cwd=workdir, env=env, capture_output=True, text=True, timeout=timeout
        )
    except subprocess.TimeoutExpired:
        return "killed", f"timeout after {timeout:.0f} s", time.monotonic() - start
    took = time.monotonic() - start
    why = (done.stdout.strip().splitlines() or done.stderr.strip().splitlines()[-1:] or [""])[-1]
    if done.returncode == 0:
        return "survived", why, took
    return "killed", why, took


def _pristine(base: Path) -> Path:
    """A copy of the code and the judge as they are when the campaign starts (edits made
    while it runs do not change the judge half-way)."""
    pristine = base / "pristine"
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for name in (
        "tpx",
        "conformance",
        "spec",
        "tests/gateway",
        "tests/oracle/model",
        "tests/fixtures/clients",  # the Claude Code bodies of the HTTP replay (tpx.audit)
    ):
        shutil.copytree(ROOT / name, pristine / name, ignore=ignore)
    # the gateway conformance runs under pytest with the project's configuration; the live
    # gateway bugs use the gateway test helpers (tests/gateway) and the reference monitor
    # (tests/oracle/model/gateway)
    for name in ("pyproject.toml", "tests/__init__.py"):
        shutil.copy2(ROOT / name, pristine / name)
    return pristine


def _workdir(base: Path) -> Path:
    work = base / "work"
    if work.exists():
        shutil.rmtree(work)
    shutil.copytree(base / "pristine", work)
    return work


def _diff(m: Mutant) -> str:
    original = (ROOT / m.path).read_text(encoding="utf-8")
    import ast

    before = ast.unparse(ast.parse(original)).splitlines()
    after = m.source.splitlines()
    lines = [
        line
        for line in difflib.unified_diff(before, after, lineterm="", n=0)
        if line[:1] in "+-" and not line.startswith(("+++", "---"))
    ]
    return " / ".join(x.strip() for x in lines)[:200]


def per_file(results: list[dict[str, object]], equivalent: dict[str, str]) -> list[str]:
    """One line per mutated file: judged, killed, equivalent, survived, the kill rate."""
    table: dict[str, list[int]] = {}
    for r in results:
        ident = str(r["id"])
        row = table.setdefault(ident.split("::", 1)[0], [0, 0, 0, 0])
        row[0] += 1
        if r["verdict"] == "killed":
            row[1] += 1
        elif ident in equivalent:
            row[2] += 1
        else:
            row[3] += 1
    lines = []
    for path, (n, k, e, s) in sorted(table.items()):
        rate = 100.0 * k / (n - e) if n > e else 100.0
        lines.append(
            f"{path}: {k}/{n - e} = {rate:.1f}% killed ({n} mutants, {e} equivalent, {s} survived)"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m conformance.mutate")
    parser.add_argument("--per-file", type=int, default=30, help="mutants per file (0: all)")
    parser.add_argument("--seed", type=int, default=12)
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds per mutant")
    parser.add_argument("--only", nargs="*", default=None, help="judge these mutant ids")
    parser.add_argument(
        "--only-from", type=Path, default=None, help="judge the mutant ids in FILE (one a line)"
    )
    parser.add_argument(
        "--target",
        action="append",
        default=None,
        help="only this file of targets.txt (repeatable; a prefix such as tpx/gateway/ works)",
    )
    parser.add_argument("--list", action="store_true", help="list the mutants and stop")
    parser.add_argument("--report", type=Path, default=ROOT / ".mutate" / "report.json")
    parser.add_argument("--fail-under", type=float, default=90.0, help="kill rate, percent")
    args = parser.parse_args(argv)

    files = [
        p
        for p in targets()
        if not args.target or any(p.relative_to(ROOT).as_posix().startswith(t) for t in args.target)
    ]
    every = [m for path in files for m in mutants(path, ROOT)]
    known = {m.id for m in every}
    wanted = [*(args.only or []), *(_ids_in(args.only_from, known) if args.only_from else [])]
    unknown = sorted(set(wanted) - known)
    if unknown:
        print("no such mutant: " + "; ".join(unknown), file=sys.stderr)
        return 2
    chosen = (
        [m for m in every if m.id in set(wanted)]
        if wanted
        else (every if args.per_file == 0 else sample(every, args.per_file, args.seed))
    )
    equivalent = equivalents()
    print(f"{len(every)} mutants in {len(files)} files; judging {len(chosen)}", flush=True)
    if args.list:
        for m in chosen:
            print(f"{m.id}  {_diff(m)}")
        return 0
    with tempfile.TemporaryDirectory(prefix="tpx-mutate-") as tmp:
        base = Path(tmp)
        cache = base / "behaviours.pickle"
        _behaviours(cache)
        _pristine(base)
        verdict, why, took = _run_judge(_workdir(base), cache, args.timeout * 3)
        print(f"baseline (unmutated): {verdict}: {why} ({took:.1f} s)", flush=True)
        if verdict != "survived":
            print("the unmutated code does not pass the judge: nothing to measure")
            return 2
        results: list[dict[str, object]] = []
        for n, m in enumerate(chosen, start=1):
            work = _workdir(base)
            (work / m.path).write_text(m.source, encoding="utf-8")
            verdict, why, took = _run_judge(work, cache, args.timeout, m.path)
            results.append({"id": m.id, "verdict": verdict, "why": why, "seconds": round(took, 1)})
            print(f"[{n}/{len(chosen)}] {verdict:8} {m.id} ({took:.1f} s): {why}", flush=True)
    killed = [r for r in results if r["verdict"] == "killed"]
    survivors = [r for r in results if r["verdict"] == "survived"]
    judged_equivalent = [r for r in survivors if r["id"] in equivalent]
    unexplained = [r for r in survivors if r["id"] not in equivalent]
    judged_files = {p.relative_to(ROOT).as_posix() for p in files}
    stale = sorted(
        i
        for i in set(equivalent) - {str(r["id"]) for r in survivors} - {m.id for m in every}
        if i.split("::", 1)[0] in judged_files
    )
    counted = len(results) - len(judged_equivalent)
    rate = 100.0 * len(killed) / counted if counted else 100.0
    by_id = {m.id: m for m in chosen}
    print()
    print(
        f"kill rate: {len(killed)}/{counted} = {rate:.1f}% "
        f"({len(results)} mutants, {len(judged_equivalent)} equivalent, "
        f"{len(survivors)} survived)"
    )
    for line in per_file(results, equivalent):
        print(f"  {line}")
    for r in judged_equivalent:
        print(f"  equivalent {r['id']}: {equivalent[str(r['id'])]}")
    for r in unexplained:
        print(f"  SURVIVOR   {r['id']}: {_diff(by_id[str(r['id'])])}")
    for ident in stale:
        print(f"  stale equivalent entry (no such mutant): {ident}")
    args.report.parent.mkdir(parents=True, exist_ok=True)
    args.report.write_text(json.dumps({"rate": rate, "results": results}, indent=1))
    print(f"report: {args.report}")
    return 1 if unexplained or rate < args.fail_under else 0


if __name__ == "__main__":
    raise SystemExit(main())
