"""The figures of a ``make load-cluster`` run, written where its readers look: the full table
into docs/upstreams.md (section ``load-cluster``) and two sentences into the README (section
``load-cluster-summary``), each with the date, the machine and its load average
(:mod:`benchmarks.report`). ``TPX_BENCH_DOC=""`` writes nothing.
"""

from __future__ import annotations

from pathlib import Path

import attrs

from benchmarks.report import markdown_table, write_section

COMMAND = "make load-cluster"


@attrs.frozen
class ClusterRun:
    """What one run measured and checked."""

    conversations: int
    turns: int  #: turns answered
    served: tuple[int, ...]  #: exchanges each replica logged
    victim: int  #: the replica killed
    killed_at: float  #: seconds into the run
    seconds: float
    failed: dict[str, int]  #: failed attempts (each sent again) by kind: a status or an error
    injected: int  #: the 529s the upstream was scripted to answer
    upstream_requests: int
    lost: int  #: conversations without their own final text
    cross_paired: int  #: tool inputs or upstream ledger entries of another conversation

    @property
    def in_flight_lost(self) -> dict[str, int]:
        """The failed attempts that were not the injected 529s: the killed replica's."""
        return {k: v for k, v in self.failed.items() if k != "529"}


def _kinds(failed: dict[str, int]) -> str:
    return ", ".join(f"{v} {k}" for k, v in sorted(failed.items())) or "none"


def table(run: ClusterRun) -> tuple[str, list[str]]:
    """The docs/upstreams.md table and its notes."""
    per_replica = ", ".join(
        f"{n} (killed at {run.killed_at:.1f} s)" if i == run.victim else str(n)
        for i, n in enumerate(run.served)
    )
    rows = [
        ("conversations (3 tool turns of 1-3 parallel calls each)", run.conversations),
        ("turns answered", run.turns),
        (f"exchanges per replica ({len(run.served)} behind HAProxy)", per_replica),
        ("failed attempts of the killed replica, sent again", _kinds(run.in_flight_lost)),
        ("injected 529s, sent again", f"{run.failed.get('529', 0)} of {run.injected}"),
        ("upstream requests", run.upstream_requests),
        ("**conversations lost**", f"**{run.lost}**"),
        ("**tool calls cross-paired**", f"**{run.cross_paired}**"),
        ("seconds (turns per second)", f"{run.seconds:.1f} ({run.turns / run.seconds:.0f})"),
    ]
    notes = [
        "Every failed attempt was answered when the same body was sent again, on another "
        "replica for the killed one's.",
        f"Upstream requests: the {run.turns} turns, the {run.injected} injected 529s and "
        f"{run.upstream_requests - run.turns - run.injected} the killed replica had sent on "
        "when it died (their answers lost with it).",
    ]
    return markdown_table(("figure", "value"), rows), notes


def summary(run: ClusterRun) -> str:
    """Two sentences for the README."""
    killed = sum(run.in_flight_lost.values())
    were = "request it had in flight was" if killed == 1 else "requests it had in flight were"
    return (
        f"{run.conversations:,} conversations ({run.turns:,} turns) through HAProxy to "
        f"{len(run.served)} replicas in {run.seconds:.0f} s, one replica killed "
        f"{run.killed_at:.0f} s in: {run.lost} lost, {run.cross_paired} tool calls "
        f"cross-paired; the {killed} {were} answered on the others when sent again."
    )


def write(run: ClusterRun, upstreams: Path | None = None, readme: Path | None = None) -> None:
    """Both sections (*upstreams*, *readme*: other files than the repository's)."""
    text, notes = table(run)
    write_section("load-cluster", COMMAND, text, notes=notes, doc=upstreams, part_of=None)
    write_section("load-cluster-summary", COMMAND, summary(run), doc=readme, part_of=None)
