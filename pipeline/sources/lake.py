"""The audit lake: audit lines as Parquet, partitioned by date, ingested incrementally.

Layout under the lake's root (docs/pipeline.md#the-audit-lake):

- `table=events/date=YYYY-MM-DD/batch=B/`: good events, the UTC date of their `time`;
- `table=quarantine/date=__HIVE_DEFAULT_PARTITION__/batch=B/`: the lines that are not;
- `table=rollup_*/date=.../batch=B/`: the batch's rollups (`pipeline.sources.lake_rollups`),
  what reports read;
- `_manifest/B.json`: one per committed batch, naming each file it read (path, size,
  mtime, first-line hash, the lines it took) with its line counts and the events it did not
  add again (`repeated`), and `rollups` (their version; absent in batches without them).

Both tables have the columns of `pipeline.sources.audit_events` (LINE_COLUMNS, then the
event's, with the request's typed columns: `pipeline.sources.typed_requests`). A batch counts
once its manifest is written: readers keep only committed batches, so a run that died
half-way leaves files nobody reads, and the next run ingests its files again. Which lines
of which files a batch takes (each line of a log once, however the log was grown, renamed or
compressed since): `pipeline.sources.ingest_files`. Each decision is added once: an event
whose `decision_id` the lake already has is dropped (`drop_repeated`); the rollups are written
after that, from what the batch keeps (the manifest's line counts with them), so the manifest
commits both. Jobs read the lake, or
raw files, through `pipeline.sources.audit_source`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime
from functools import reduce
from typing import Any
from urllib.parse import unquote, urlparse

from pyspark.sql import DataFrame, Row, SparkSession
from pyspark.sql import functions as F

from kafka_policy_proxy.pipeline.sources.audit_events import (
    LINE_COLUMNS,
    AuditInput,
    event_columns,
    line_summary,
    read_audit,
)
from kafka_policy_proxy.pipeline.sources.hadoop_files import (
    exists,
    list_files,
    read_tasks,
    read_text,
    remove,
    write_text,
)
from kafka_policy_proxy.pipeline.sources.ingest_files import Take, plan_ingest
from kafka_policy_proxy.pipeline.sources.lake_layout import EVENTS, MANIFEST, QUARANTINE
from kafka_policy_proxy.pipeline.sources.lake_rollups import VERSION as ROLLUPS_VERSION
from kafka_policy_proxy.pipeline.sources.lake_rollups import write_rollups
from kafka_policy_proxy.pipeline.sources.typed_requests import TYPED_REQUEST


class IngestConflict(RuntimeError):
    """Another ingest committed some of the same files while this one ran."""


def ingest(spark: SparkSession, paths: Sequence[str], lake: str) -> dict[str, Any]:
    """Add the audit lines not yet in the lake as one batch; return what was done."""
    lake = lake.rstrip("/")
    before = committed(spark, lake)
    plan = plan_ingest(spark, list_files(spark, paths), before)
    summary: dict[str, Any] = {
        "lake": lake,
        "batch": None,
        "files": plan.counts(),
        "lines": line_summary(0, ()),
        "repeated_events": 0,
        "warnings": plan.warnings,
    }
    if not plan.takes:
        return summary
    batch = datetime.now(UTC).strftime("%Y%m%dT%H%M%S%fZ")
    write_batch(spark, lake, batch, _taken(spark, plan.takes))
    batch, repeated = drop_repeated(spark, lake, batch, before)
    counts = write_rollups(spark, lake, batch)
    files = []
    for take in plan.takes:
        mine = [r for r in counts if _key(r["source"]) == _key(take.file.path)]
        again = sum(n for source, n in repeated.items() if _key(source) == _key(take.file.path))
        files.append(take.manifest(batch_lines(mine)) | {"repeated": again})
    # Two ingests at once (a schedule that overlaps a slow run) would both take these files:
    # the second to finish discards its batch. Only the moments between this check and the
    # commit can still race.
    rivals = _rivals(committed(spark, lake), {b["batch"] for b in before}, files)
    if rivals:
        forget(spark, lake, batch)
        raise IngestConflict(
            f"{lake}: another ingest committed {', '.join(rivals)} from the same files while "
            "this one ran; this batch was discarded, so nothing counts twice. Run ingest again "
            "to take what is left, and never run two ingests into one lake at once"
        )
    # Committed even if no line was new (a compressed copy of a log already in): the next
    # ingest knows the file by its size and mtime without reading it again.
    commit(spark, lake, batch, files, rollups=ROLLUPS_VERSION)
    summary["batch"] = batch
    summary["lines"] = batch_lines(counts)
    summary["repeated_events"] = sum(repeated.values())
    if repeated:
        summary["warnings"].append(_repeated_warning(repeated))
    return summary


def _rivals(
    batches: Sequence[dict[str, Any]], seen: set[str], files: Sequence[dict[str, Any]]
) -> list[str]:
    """The batches committed since `seen` that read one of these files (or logs)."""
    identities = {(f["size"], f["mtime"]) for f in files}
    heads = {f["head"] for f in files if f["head"]}
    return [
        b["batch"]
        for b in batches
        if b["batch"] not in seen
        and any((f["size"], f["mtime"]) in identities or f.get("head") in heads for f in b["files"])
    ]


def _taken(spark: SparkSession, takes: Sequence[Take]) -> DataFrame:
    # Whole new files in one read; each file taken in part in a read of its own, filtered by
    # line number (numbered from the start of the file: the condition cannot be pushed down).
    whole = [t.file.path for t in takes if t.lines() is None]
    parts = [read_audit(spark, whole).lines] if whole else []
    for take in takes:
        condition = take.lines()
        if condition is not None:
            parts.append(read_audit(spark, [take.file.path]).lines.where(condition))
    return reduce(DataFrame.unionAll, parts)


def write_batch(spark: SparkSession, lake: str, batch: str, lines: DataFrame) -> None:
    """Write `lines` (`AuditInput.lines`) as the lake's batch `batch`, not yet committed (its
    counts come with its rollups: `write_rollups`)."""
    table = F.when(F.col("problem").isNull(), F.lit(EVENTS)).otherwise(F.lit(QUARANTINE))
    (
        lines.withColumn("table", table)
        .withColumn("date", F.to_date("time"))
        .withColumn("batch", F.lit(batch))
        .write.mode("append")
        .partitionBy("table", "date", "batch")
        .parquet(lake)
    )


def drop_repeated(
    spark: SparkSession, lake: str, batch: str, before: Sequence[dict[str, Any]]
) -> tuple[str, dict[str, int]]:
    """Keep each decision once: a written batch's events whose `decision_id` a committed batch
    has, or an earlier line of this batch (by source, then line), are dropped. Returns the
    batch as it now is (rewritten under another name if anything was dropped) and the events
    dropped per source."""
    # The same decision reaches a lake twice when one log is ingested from two places the
    # first-line match cannot tie together (the proxy's file log and its audit topic, a log
    # re-assembled by hand), or when the topic holds a record twice. v1 records have no id.
    repeated = _repeats(spark, lake, batch, [b["batch"] for b in before])
    if repeated is None:
        return batch, {}
    repeated = repeated.persist()
    try:
        by_source = repeated.groupBy("source").agg(F.count(F.lit(1)).alias("lines"))
        dropped = {r["source"]: r["lines"] for r in by_source.collect()}
        if not dropped:
            return batch, {}
        lines = (
            _tables(spark, lake)
            .where(F.col("batch") == batch)
            .join(repeated, ["source", "line"], "left_anti")
            .select(*LINE_COLUMNS, *event_columns())
        )
        again = repeated_name(batch)
        write_batch(spark, lake, again, lines)
    finally:
        repeated.unpersist()
    forget(spark, lake, batch)
    return again, dropped


def _repeats(spark: SparkSession, lake: str, batch: str, names: list[str]) -> DataFrame | None:
    """(source, line) of the batch's events whose id the batches `names` or an earlier line
    of the batch has; None when no two ids can be equal."""
    try:
        written = list_files(spark, [f"{lake}/table={EVENTS}/date=*/batch={batch}"])
    except FileNotFoundError:
        return None  # no event in this batch
    # An event's date is its partition's: only those dates of the lake can hold its id.
    dates = sorted({_partition(f.path, "date") for f in written})
    events = spark.read.option("basePath", lake).parquet(f"{lake}/table={EVENTS}")
    mine = events.where((F.col("batch") == batch) & F.col("decision_id").isNotNull())
    names = [name for name in names if name != batch]  # an earlier attempt's
    earlier = events.where(F.col("batch").isin(*names) & F.col("date").isin(*dates))
    # First by a 64-bit hash of the id, grouped as a number (a fraction of the cost of
    # grouping the strings), in tasks of several files (one each costs more than its work);
    # then exactly, among the ids whose hashes clash, if any.
    hashed = F.xxhash64("decision_id")
    hashes = mine.select(hashed.alias("hash")).unionByName(earlier.select(hashed.alias("hash")))
    hashes = hashes.coalesce(max(spark.sparkContext.defaultParallelism, len(written) // 8))
    clashing = hashes.groupBy("hash").count().where(F.col("count") > 1).select("hash")
    if clashing.isEmpty():
        return None
    mine = mine.withColumn("hash", hashed).join(clashing, "hash")
    earlier = earlier.withColumn("hash", hashed).join(clashing, "hash")
    # The lake's copy sorts first (an empty source): it stays, and this batch's goes.
    order = F.struct("source", "line").alias("order")
    first = F.struct(F.lit("").alias("source"), F.lit(0).cast("long").alias("line"))
    ids = mine.select("decision_id", order).unionByName(
        earlier.select("decision_id", first.alias("order"))
    )
    kept = (
        ids.groupBy("decision_id")
        .agg(F.count(F.lit(1)).alias("copies"), F.min("order").alias("kept"))
        .where(F.col("copies") > 1)
    )
    return mine.join(kept, "decision_id").where(order != F.col("kept")).select("source", "line")


def _partition(path: str, column: str) -> str:
    """The value of a Hive partition `column` in a file's path."""
    return next(
        unquote(part.split("=", 1)[1]) for part in path.split("/") if part.startswith(f"{column}=")
    )


def repeated_name(batch: str) -> str:
    """The name a batch is rewritten under when `drop_repeated` drops some of its events."""
    return f"{batch}-once"


def _repeated_warning(repeated: dict[str, int]) -> str:
    where = ", ".join(f"{n:,} from {source}" for source, n in sorted(repeated.items()))
    return (
        f"{sum(repeated.values()):,} event(s) were already in the lake (the same decision_id) "
        f"and were not added again: {where}"
    )


def commit(
    spark: SparkSession, lake: str, batch: str, files: list[dict[str, Any]], **about: Any
) -> None:
    """Commit a written batch: its manifest, naming the files it read (and anything else
    `about` it), is what readers see."""
    manifest = {"batch": batch, "committed": datetime.now(UTC).isoformat(), "files": files}
    manifest.update(about)
    write_text(spark, f"{lake}/{MANIFEST}", f"{batch}.json", json.dumps(manifest, indent=1))


def forget(spark: SparkSession, lake: str, batch: str) -> None:
    """Remove a batch, committed or not: its manifest first, so readers never see it half
    gone."""
    remove(spark, f"{lake}/{MANIFEST}/{batch}.json")
    remove(spark, f"{lake}/table=*/date=*/batch={batch}")


def batch_lines(counts: Sequence[Row]) -> dict[str, Any]:
    """`line_summary` of a batch's counts (`write_rollups`)."""
    events = sum(r["lines"] for r in counts if r["kind"] is None)
    return line_summary(events, [r.asDict() for r in counts if r["kind"] is not None])


def committed(spark: SparkSession, lake: str) -> list[dict[str, Any]]:
    """The manifests of the lake's committed batches, oldest first."""
    directory = f"{lake.rstrip('/')}/{MANIFEST}"
    if not exists(spark, directory):
        return []
    batches = []
    for file in list_files(spark, [directory]):
        try:
            batches.append(json.loads(read_text(spark, file.path)))
        except ValueError:
            continue  # cut short while being written: that batch was never committed
    return sorted(batches, key=lambda b: b["batch"])


def read_lake(
    spark: SparkSession,
    lake: str,
    *,
    with_request: bool = True,
    batches: Sequence[str] | None = None,
) -> AuditInput:
    """Every line of the lake's committed batches (or of those named `batches`), as
    `read_audit` reads raw files."""
    lake = lake.rstrip("/")
    names = [b["batch"] for b in committed(spark, lake)] if batches is None else list(batches)
    if not names:
        raise FileNotFoundError(f"{lake}: no ingested batch (run `pipeline ingest` first)")
    tables = _tables(spark, lake)
    # A lake ingested before the typed request columns has none: replay reads the text.
    columns = [
        F.col(c) if c in tables.columns else F.lit(None).cast(TYPED_REQUEST).alias(c)
        for c in (*LINE_COLUMNS, *event_columns(with_request=with_request))
    ]
    lines = tables.where(F.col("batch").isin(*names)).select(*columns)
    # The session reads a file per task (audit logs' line numbers need it), and the lake has
    # many small files (a batch's, per input file and date): ~32 MiB of them per task (about
    # 250,000 events), small enough for the report's partial aggregation to stay in memory.
    paths = [f"{lake}/table={name}" for name in (EVENTS, QUARANTINE)]
    return AuditInput(lines.coalesce(read_tasks(spark, [p for p in paths if exists(spark, p)])))


def _tables(spark: SparkSession, lake: str) -> DataFrame:
    # Only the two tables: anything else kept under the root is not read.
    tables = [f"{lake}/table={name}" for name in (EVENTS, QUARANTINE)]
    # Merged: batches ingested before a column was added (summary, schema 3) read it as null.
    reader = spark.read.option("basePath", lake).option("mergeSchema", "true")
    return reader.parquet(*(t for t in tables if exists(spark, t)))


def _key(uri: str) -> tuple[str, str, str]:
    # Spark names a file file:///a%20b, Hadoop file:/a b: the same file.
    parsed = urlparse(uri)
    return (parsed.scheme or "file", parsed.netloc, unquote(parsed.path))
