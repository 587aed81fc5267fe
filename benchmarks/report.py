"""Benchmark tables written into docs/performance.md, so the figures there are the last run's.

Each benchmark renders its table as Markdown and calls :func:`write_section` (or adds its
rows to a :class:`Rows`), which replaces what stands between the section's two markers::

    <!-- bench:NAME -->
    ...replaced on every run...
    <!-- /bench:NAME -->

The section says the command that measured it, the date (UTC) and the machine (OS, CPU
model, cores, Python, load average), then the table. A few sections live in another
document (:data:`HOMES`: the token estimate's figures in docs/context.md and README.md, the
cluster's in docs/upstreams.md and README.md, the audit's timing in docs/audit.md).
``TPX_BENCH_DOC`` names another file to write to; set to the empty string, nothing is
written. A missing or doubled marker is an error (:class:`ReportError`), never a silent
skip: the section names are :data:`SECTIONS`.
"""

from __future__ import annotations

import datetime
import os
import platform
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "performance.md"
ENV = "TPX_BENCH_DOC"

#: Every section a benchmark writes (its document, HOMES or DOC, holds one marker pair each).
SECTIONS = (
    "translate",
    "native",
    "monitor",
    "explore",
    "replay",
    "gateway",
    "routing",
    "monitor-gateway",
    "routing-gateway",
    "context-counts",
    "context-summary",
    "load-cluster",
    "load-cluster-summary",
    "audit-timing",
    "baseline",
)

#: The sections that live in another document than :data:`DOC` (by default).
HOMES: dict[str, Path] = {
    "context-counts": ROOT / "docs" / "context.md",
    "context-summary": ROOT / "README.md",
    "load-cluster": ROOT / "docs" / "upstreams.md",
    "load-cluster-summary": ROOT / "README.md",
    "audit-timing": ROOT / "docs" / "audit.md",
}


class ReportError(Exception):
    """The document has no (or more than one) place for a section."""


def cpu_model() -> str:
    """The CPU's model name (Linux ``/proc/cpuinfo``; else what ``platform`` says)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"


def machine() -> str:
    """One line: OS and architecture, CPU model, cores, Python, load average now."""
    try:
        load = "load average " + " / ".join(f"{x:.1f}" for x in os.getloadavg())
    except OSError:
        load = "load average unknown"
    return (
        f"{platform.system()} {platform.machine()}, {cpu_model()}, {os.cpu_count()} cores, "
        f"{platform.python_implementation()} {platform.python_version()}, {load}"
    )


def now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A Markdown table; every row must have one cell per header."""
    for row in rows:
        if len(row) != len(headers):
            raise ValueError(f"row {row!r} has {len(row)} cells, the table {len(headers)}")
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines)


def render(
    command: str,
    table: str,
    *,
    notes: Sequence[str] = (),
    when: str | None = None,
    host: str | None = None,
    part_of: str | None = "make bench",
) -> str:
    """The body of a section: provenance line, the table, then the notes as a list.
    *part_of*: the make target that runs *command* (``None``: none does)."""
    made = f" (part of `{part_of}`)" if part_of else ""
    head = f"Written by `{command}`{made} on {when or now()}; machine: {host or machine()}."
    parts = [head, "", table]
    if notes:
        parts += ["", *(f"- {note}" for note in notes)]
    return "\n".join(parts)


def target(doc: Path | None = None, name: str | None = None) -> Path | None:
    """Where sections go: *doc*, else ``$TPX_BENCH_DOC`` (empty: nowhere), else section
    *name*'s home (:data:`HOMES`, else DOC)."""
    if doc is not None:
        return doc
    chosen = os.environ.get(ENV)
    if chosen is None:
        return HOMES.get(name or "", DOC)
    return Path(chosen) if chosen else None


def replace_section(text: str, name: str, body: str) -> str:
    """*text* with the part between section *name*'s markers replaced by *body*."""
    start, end = f"<!-- bench:{name} -->", f"<!-- /bench:{name} -->"
    if text.count(start) != 1 or text.count(end) != 1:
        raise ReportError(f"expected one {start} and one {end} marker")
    i = text.index(start) + len(start)
    j = text.index(end)
    if j < i:
        raise ReportError(f"{end} comes before {start}")
    return text[:i] + "\n" + body.strip("\n") + "\n" + text[j:]


def write_section(
    name: str,
    command: str,
    table: str,
    *,
    notes: Sequence[str] = (),
    doc: Path | None = None,
    when: str | None = None,
    host: str | None = None,
    part_of: str | None = "make bench",
) -> Path | None:
    """Write section *name* into the document; returns its path (``None``: not written).
    *part_of*: the target whose run writes it too (``None``: none but *command*)."""
    if name not in SECTIONS:
        raise ReportError(f"unknown section {name!r} (known: {', '.join(SECTIONS)})")
    path = target(doc, name)
    if path is None:
        return None
    body = render(command, table, notes=notes, when=when, host=host, part_of=part_of)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ReportError(f"{path}: cannot read it ({exc.strerror})") from None
    try:
        updated = replace_section(text, name, body)
    except ReportError as exc:
        raise ReportError(f"{path}: {exc}") from None
    path.write_text(updated, encoding="utf-8")
    return path


class Rows:
    """A section whose rows come from several tests of one run (parametrized cases): each
    :meth:`add` rewrites the section with every row measured so far in this process."""

    def __init__(self, name: str, command: str, headers: Sequence[str]) -> None:
        self.name = name
        self.command = command
        self.headers = tuple(headers)
        self.rows: list[tuple[object, ...]] = []

    def add(self, *row: object, notes: Sequence[str] = (), doc: Path | None = None) -> None:
        self.rows.append(tuple(row))
        table = markdown_table(self.headers, self.rows)
        write_section(self.name, self.command, table, notes=notes, doc=doc)
