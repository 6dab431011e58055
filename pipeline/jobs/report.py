"""The `report` job: who is being denied what, is it getting better, and what to act on.

It reads only the rollups (`pipeline.sources.lake_rollups`): the lake's, kept at ingest and
summed across its batches, or, from raw files (a one-off run) and from lake batches ingested
before rollups were kept, derived from the events (`pipeline.jobs.report_rollups`: one small
Spark job per rollup table, collected to the driver). Everything else is computed on the
driver (`pipeline.jobs.report_facts`). A window (`since`, `until`) reads only the rollups of
its dates, then keeps the hours (per-day rollups: the days) from the hour of `since` to before
`until`; bad lines, which have no time, are left out of a windowed report.

Each table is Parquet under `out/`, overwritten; times are UTC instants, counts are longs:

- `top_denied_principals`: rank, principal, denials, events, topics, first_seen, last_seen.
  Denied events per principal (records of no topic included), all its events (so denials /
  events is its denial rate), the distinct topics denied, the first and last denial; rank 1
  has the most denials, ties by name. Only principals with denials.
- `top_denied_rules`: rank, rule, denials, principals, topics, first_seen, last_seen. Denied
  events in which the rule was violated in enforce mode (an event denied by two rules counts
  for both; a rule listed twice in one event, two of its checks failed, counts once).
- `would_deny`: rule, principal, would_deny, denied_anyway, fired, topics, first_seen,
  last_seen, for rules violated in audit mode (audit rules, or every rule of a dry-run
  policy). `would_deny` counts the events that were allowed (decision audit-would-deny) and
  would fail if the rule were enforced; `denied_anyway` the events an enforce rule denied
  anyway; `fired` every time the rule fired. `topics`, `first_seen` and `last_seen` are over
  every firing.
- `bad_lines`: source, kind, problem, lines, first_line, sample. Lines that are not good
  events, by file (as a URI), kind and reason (`pipeline.sources.audit_lines`), with the first
  one's line number and first 200 bytes; they are never counted as events.

With `drill_down`, also the drill-down tables, from the events (a pass over all of them, as
big as the lake's events: the lake itself is the drill-down dataset, docs/pipeline.md):

- `decisions`: hour, principal, topic, action, api, resource_type, resource, decision, mode,
  events. `hour` is the event time truncated to the UTC hour; `topic` is null for the records
  of no topic (`admin_api`, `alter_broker_config`), whose resource is `resource_type` and
  `resource` (a schema 1 record's are `topic` and its topic).
- `violations`: the same keys, then rule, rule_mode, events: one count per (event, violated
  rule).

The ranked tables, `would_deny` and `bad_lines` are sorted. `report.html`
(`pipeline.rendering.report_page`), its charts as PNG files and `summary.json` (what
`run_report` returns, `pipeline.jobs.report_summary`) sit next to them.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, StringType, StructField, StructType, TimestampType
from pyspark.storagelevel import StorageLevel

from kafka_policy_proxy.pipeline.jobs.report_aggregation import big_tables, fine_aggregate
from kafka_policy_proxy.pipeline.jobs.report_facts import report_facts
from kafka_policy_proxy.pipeline.jobs.report_rollups import Window, collect_rollups
from kafka_policy_proxy.pipeline.jobs.report_summary import report_summary
from kafka_policy_proxy.pipeline.rendering.html_page import page_files
from kafka_policy_proxy.pipeline.rendering.report_page import report_page
from kafka_policy_proxy.pipeline.sources.audit_events import AuditInput
from kafka_policy_proxy.pipeline.sources.audit_source import AuditSource, as_source
from kafka_policy_proxy.pipeline.sources.hadoop_files import write_files, write_text

_SHUFFLE_PARTITIONS = "spark.sql.shuffle.partitions"
_CACHE_COMPRESSED = "spark.sql.inMemoryColumnarStorage.compressed"


def _schema(*fields: tuple[str, Any]) -> StructType:
    return StructType([StructField(name, kind()) for name, kind in fields])


_SEEN = (("first_seen", TimestampType), ("last_seen", TimestampType))
# The small tables are ranked on the driver and written from there, with these columns.
SMALL_TABLES = {
    "top_denied_principals": _schema(
        ("rank", LongType),
        ("principal", StringType),
        ("denials", LongType),
        ("events", LongType),
        ("topics", LongType),
        *_SEEN,
    ),
    "top_denied_rules": _schema(
        ("rank", LongType),
        ("rule", StringType),
        ("denials", LongType),
        ("principals", LongType),
        ("topics", LongType),
        *_SEEN,
    ),
    "would_deny": _schema(
        ("rule", StringType),
        ("principal", StringType),
        ("would_deny", LongType),
        ("denied_anyway", LongType),
        ("fired", LongType),
        ("topics", LongType),
        *_SEEN,
    ),
    "bad_lines": _schema(
        ("source", StringType),
        ("kind", StringType),
        ("problem", StringType),
        ("lines", LongType),
        ("first_line", LongType),
        ("sample", StringType),
    ),
}


def run_report(
    spark: SparkSession,
    audit: AuditSource | Sequence[str],
    out: str,
    *,
    since: datetime | None = None,
    until: datetime | None = None,
    drill_down: bool = False,
) -> dict[str, Any]:
    """Write the report tables, report.html and summary.json under `out`; return the summary."""
    base = out.rstrip("/")
    outputs: dict[str, str] = {}
    source = as_source(audit)
    window = Window(since, until)
    rollup, warnings = collect_rollups(spark, source, window)
    facts, tables = report_facts(rollup, window)
    for name, rows in tables.items():
        outputs[name] = f"{base}/{name}"
        schema = SMALL_TABLES[name]
        data = [tuple(row[f.name] for f in schema.fields) for row in rows]
        frame = spark.createDataFrame(data, schema).coalesce(1)
        frame.write.mode("overwrite").parquet(outputs[name])
    if drill_down:
        outputs |= _drill_down(spark, source.read(spark, with_request=False), window, base)
    outputs["report"] = f"{base}/report.html"
    outputs["summary"] = f"{base}/summary.json"
    summary = report_summary(facts, outputs, warnings)
    write_files(spark, base, page_files("report", report_page(facts, source.label)))
    write_text(spark, base, "summary.json", json.dumps(summary, indent=2, sort_keys=True) + "\n")
    return summary


def _drill_down(
    spark: SparkSession, lines: AuditInput, window: Window, base: str
) -> dict[str, str]:
    """Write `decisions` and `violations` from the events of the window; return their paths."""
    rows = lines.lines
    if window.since is not None:
        since = window.since.astimezone(UTC).replace(minute=0, second=0, microsecond=0)
        rows = rows.where(F.col("problem").isNotNull() | (F.col("time") >= F.lit(since)))
    if window.until is not None:
        rows = rows.where(F.col("problem").isNotNull() | (F.col("time") < F.lit(window.until)))
    splits = rows.rdd.getNumPartitions()
    # One Parquet file per ~8 input splits (~1 GB of JSON) rather than one per split, in
    # whole rounds of the cores: 5 writing tasks on 2 cores leave one idle a third of the time.
    cores = spark.sparkContext.defaultParallelism
    files = cores * max(1, -(-splits // (8 * cores)))
    fine = fine_aggregate(AuditInput(rows))
    outputs = {name: f"{base}/{name}" for name in ("decisions", "violations")}
    try:
        with _big_aggregation(spark, splits):
            # On local disk: it can be bigger than the heap (~600 MB for 10 million events),
            # and in memory it would fight the aggregations for it.
            fine.persist(StorageLevel.DISK_ONLY)
            # The first write scans the input and fills the cache; the second reads the cache.
            tables: dict[str, DataFrame] = big_tables(fine)
            for name, path in outputs.items():
                tables[name].coalesce(files).write.mode("overwrite").parquet(path)
    finally:
        fine.unpersist()
    return outputs


@contextmanager
def _big_aggregation(spark: SparkSession, splits: int) -> Iterator[None]:
    # Set while the plan is made and run, then restored. With few shuffle partitions (8 on a
    # laptop), 10 million events aggregate into ~2 million rows per task, which spill and
    # fall back to sorting: one partition per input split keeps each in memory. The cache's
    # own compression costs more CPU than the scan of the JSON saves: it is on local disk.
    shuffle = spark.conf.get(_SHUFFLE_PARTITIONS) or "200"  # never unset: 200 is the default
    settings = {
        _SHUFFLE_PARTITIONS: str(max(int(shuffle), splits)),
        _CACHE_COMPRESSED: "false",
    }
    previous = {key: spark.conf.get(key) for key in settings}
    for key, value in settings.items():
        spark.conf.set(key, value)
    try:
        yield
    finally:
        for key, old in previous.items():
            if old is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, old)
