"""Which lines of which audit files an ingest takes: every line of a log once, however it moved.

A file already ingested is known by its size and mtime wherever it now is (a rotated log is
renamed, not changed). Any other file is matched by its first line: the proxy starts every
log with an event, whose time and decision id no other log shares. A file that starts like a
log already in the lake is that log, grown, renamed, copied or compressed since: the ingest
takes only its lines beyond those in the lake. So a live log is taken a part at a time, and
the same log rotated and then compressed is never counted twice.

A last line with no newline yet (the proxy was writing it) is left for a later ingest rather
than quarantined as a cut line and then taken again whole. A compressed file is a closed log:
it is taken to its end.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql import Column, SparkSession
from pyspark.sql import functions as F

from kafka_policy_proxy.pipeline.sources.hadoop_files import FileStatus, compressed, head, last_byte


@dataclass(frozen=True)
class Take:
    """The lines one ingest takes from one file: those after `after`, through `through`."""

    file: FileStatus
    head: str | None
    after: int = 0  # the lines of this log already in the lake
    through: int | None = None  # None: to the end of the file
    open_line: bool = False  # the last line (`through` + 1) has no newline yet

    def lines(self) -> Column | None:
        """The condition on `line` that keeps the lines taken; None: every line."""
        condition = None
        if self.after:
            condition = F.col("line") > self.after
        if self.through is not None:
            upto = F.col("line") <= self.through
            condition = upto if condition is None else condition & upto
        return condition

    def manifest(self, lines: Mapping[str, Any]) -> dict[str, Any]:
        """The manifest's entry for this file, with the counts of the lines taken."""
        return {
            "path": self.file.path,
            "size": self.file.size,
            "mtime": self.file.mtime,
            "head": self.head,
            "after": self.after,
            "through": self.after + lines["total"],
            "open_line": self.open_line,
            "lines": dict(lines),
        }


@dataclass
class IngestPlan:
    """What one ingest takes, what it already has, and why it leaves anything."""

    takes: list[Take] = field(default_factory=list)
    known: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def counts(self) -> dict[str, int]:
        """Files by what the ingest does with them."""
        return {
            "ingested": sum(1 for t in self.takes if not t.after),
            "known_log": sum(1 for t in self.takes if t.after),
            "already_ingested": len(self.known),
            "skipped": len(self.skipped),
        }


def plan_ingest(
    spark: SparkSession, files: Sequence[FileStatus], batches: Sequence[Mapping[str, Any]]
) -> IngestPlan:
    """The lines to take from `files`, given the committed batches' manifests."""
    entries = [entry for batch in batches for entry in batch["files"]]
    by_identity = {(e["size"], e["mtime"]): e for e in entries}
    in_lake: dict[str, int] = {}  # a log's first-line hash -> its lines in the lake
    for entry in entries:
        if entry.get("head"):
            in_lake[entry["head"]] = max(in_lake.get(entry["head"], 0), _through(entry))
    plan = IngestPlan()
    taking: dict[str, str] = {}  # first-line hash -> the file of this run that takes it
    for file in files:
        entry = by_identity.get((file.size, file.mtime))
        if entry is not None:
            plan.known.append(file.path)
            if entry.get("open_line"):
                plan.warnings.append(
                    f"{file.path}: its last line ({_through(entry) + 1}) has no newline and "
                    "was not ingested (a log cut short mid-line?)"
                )
            continue
        first = fingerprint(spark, file.path)
        if first is not None and first in taking:
            plan.skipped.append(file.path)
            plan.warnings.append(
                f"{file.path} starts with the same line as {taking[first]}: the same log "
                "(copied or compressed?), not ingested twice in one run; the next ingest "
                "takes any lines it has beyond those"
            )
            continue
        if first is not None:
            taking[first] = file.path
        after = in_lake.get(first, 0) if first is not None else 0
        through = None
        open_line = _open_line(spark, file)
        if open_line:
            through = spark.read.text(file.path).count() - 1
            plan.warnings.append(
                f"{file.path}: its last line ({through + 1}) has no newline yet (being "
                "written?): left for a later ingest"
            )
        plan.takes.append(Take(file, first, after, through, open_line))
    return plan


def fingerprint(spark: SparkSession, path: str) -> str | None:
    """A hash of the file's first line that is not blank (with the blank ones before it)."""
    lines = head(spark, path).split(b"\n")
    for at, line in enumerate(lines):
        if line.strip():
            # A first line longer than the head is hashed as far as the head reaches: that,
            # too, stays the same as the log grows.
            return hashlib.sha256(b"\n".join(lines[: at + 1])).hexdigest()[:32]
    return None  # only blank lines so far: matched by size and mtime alone


def _open_line(spark: SparkSession, file: FileStatus) -> bool:
    return not compressed(spark, file.path) and last_byte(spark, file) not in (b"", b"\n")


def _through(entry: Mapping[str, Any]) -> int:
    # A manifest written before `through` was kept: the whole file, from its first line.
    through = entry.get("through")
    return int(entry["lines"]["total"] if through is None else through)
