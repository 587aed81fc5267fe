"""The kill rates of one or more campaign reports taken together.

``python -m conformance.mutate.tally [--file PATH ...] REPORT [REPORT ...]``

Each report is the ``--report`` file (``.json``) a ``python -m conformance.mutate`` run wrote,
or what that run printed (its ``[n/N] verdict id (seconds): why`` lines: a campaign stopped
before its end wrote no ``.json``). A mutant
judged in more than one report takes its verdict from the last report naming it (a survivor
judged again, with ``--only-from``, after new conformance cases). Survivors listed in
``conformance/mutate/equivalent.txt`` (as it is now) are not counted. Prints the overall and
per-file kill rates in the format a campaign prints, then every survivor: listed equivalent
(with its reason) or not; ``--file`` (repeatable) keeps only the mutants of that file.
``--current`` keeps only the mutants of the sample a campaign would draw from the code as it
is now (``--per-file`` and ``--seed`` as for ``python -m conformance.mutate``: a file that
changed since a report draws a different sample), and names those no report judged.
Exit status 1 when a survivor is not listed (or, with ``--current``, a mutant is unjudged).
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

from conformance.mutate.__main__ import ROOT, equivalents, per_file
from conformance.mutate.mutator import mutants, sample

__all__ = ["current", "main", "merged", "verdicts"]

#: A verdict line of a campaign's output.
_LINE = re.compile(r"^\[\d+/\d+\] (killed|survived) +(.+?) \((\d+(?:\.\d+)?) s\): (.*)$")


def verdicts(path: Path) -> list[dict[str, object]]:
    """The verdicts of one report: its ``.json``, or the verdict lines of a campaign's output."""
    text = path.read_text()
    if path.suffix == ".json":
        return list(json.loads(text)["results"])
    out: list[dict[str, object]] = []
    for line in text.splitlines():
        found = _LINE.match(line)
        if found:
            verdict, ident, seconds, why = found.groups()
            out.append({"id": ident, "verdict": verdict, "why": why, "seconds": float(seconds)})
    return out


def merged(paths: list[Path]) -> list[dict[str, object]]:
    """The verdicts of *paths*, one per mutant id, the last report's winning."""
    by_id: dict[str, dict[str, object]] = {}
    for path in paths:
        for result in verdicts(path):
            by_id[str(result["id"])] = result
    return list(by_id.values())


def current(paths: list[str], per_file: int, seed: int) -> list[str]:
    """The ids a campaign over *paths* (relative to the repository root) would judge now."""
    every = [m for path in paths for m in mutants(ROOT / path, ROOT)]
    return [m.id for m in (every if per_file == 0 else sample(every, per_file, seed))]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m conformance.mutate.tally")
    parser.add_argument("--file", action="append", default=None, help="only this mutated file")
    parser.add_argument(
        "--current", action="store_true", help="only the sample drawn from the code now"
    )
    parser.add_argument("--per-file", type=int, default=30, help="with --current (0: all)")
    parser.add_argument("--seed", type=int, default=12, help="with --current")
    parser.add_argument("reports", nargs="+", type=Path)
    args = parser.parse_args(argv)
    results = [
        r
        for r in merged(args.reports)
        if not args.file or str(r["id"]).split("::", 1)[0] in args.file
    ]
    unjudged: list[str] = []
    if args.current:
        files = args.file or sorted({str(r["id"]).split("::", 1)[0] for r in results})
        wanted = current(files, args.per_file, args.seed)
        judged = {str(r["id"]) for r in results}
        unjudged = [i for i in wanted if i not in judged]
        results = [r for r in results if str(r["id"]) in set(wanted)]
    equivalent = equivalents()
    killed = sum(1 for r in results if r["verdict"] == "killed")
    survivors = [str(r["id"]) for r in results if r["verdict"] == "survived"]
    listed = [i for i in survivors if i in equivalent]
    unexplained = [i for i in survivors if i not in equivalent]
    counted = len(results) - len(listed)
    rate = 100.0 * killed / counted if counted else 100.0
    print(
        f"kill rate: {killed}/{counted} = {rate:.1f}% ({len(results)} mutants, "
        f"{len(listed)} equivalent, {len(survivors)} survived)"
    )
    for line in per_file(results, equivalent):
        print(f"  {line}")
    for ident in listed:
        print(f"  equivalent {ident}: {equivalent[ident]}")
    for ident in unexplained:
        print(f"  SURVIVOR   {ident}")
    for ident in unjudged:
        print(f"  UNJUDGED   {ident}")
    return 1 if unexplained or unjudged else 0


if __name__ == "__main__":
    raise SystemExit(main())
