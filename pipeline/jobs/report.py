"""The `report` job: who is being denied what, and is it getting better?

One scan of the audit JSON (bad lines included, with their reason) feeds one fine-grained
aggregate (`pipeline.jobs.report_aggregation`), cached on local disk. `decisions` and
`violations` are its rows as they are; an aggregate of it over the whole input (no hour, so
small) gives the other tables, which are ranked on the driver. Each table is Parquet under
`out/`, overwritten; times are UTC instants, counts are longs:

- `decisions`: hour, principal, topic, action, api, resource_type, resource, decision, mode,
  events. `hour` is the event time truncated to the UTC hour; `topic` is null for the records of
  no topic (`admin_api`, `alter_broker_config`), whose resource (the API, the broker, the
  cluster default "", ...) is `resource_type` and `resource` (a schema 1 record's are `topic`
  and its topic); `decision` is allowed, denied or audit-would-deny; `mode` is the policy's
  (audit when it ran as a dry run).
- `violations`: hour, principal, topic, action, api, resource_type, resource, decision, mode,
  rule, rule_mode, events.
  One count per (event, violated rule): an event breaking two rules counts once for each; a
  rule listed twice in one event (two of its checks failed) counts once.
- `top_denied_principals`: rank, principal, denials, events, topics, first_seen, last_seen.
  Denied events per principal over the whole input (records of no topic included), all its
  events (so denials / events is its denial rate), the distinct topics denied, the first and
  last denial; rank 1 has the most denials, ties by name. Only principals with denials.
- `top_denied_rules`: rank, rule, denials, principals, topics, first_seen, last_seen. Denied
  events in which the rule was violated in enforce mode (an event denied by two rules counts
  for both).
- `would_deny`: rule, principal, would_deny, denied_anyway, fired, topics, first_seen,
  last_seen, for rules violated in audit mode (audit rules, or every rule of a dry-run
  policy). `would_deny` counts the events that were allowed (decision audit-would-deny) and
  would fail if the rule were enforced; `denied_anyway` the events an enforce rule denied
  anyway; `fired` = would_deny + denied_anyway, every time the rule fired. `topics`,
  `first_seen` and `last_seen` are over every firing.
- `bad_lines`: source, kind, problem, lines. Lines that are not good events, by file (as a
  URI), kind and reason (`pipeline.sources.audit_lines`); they are never counted as events.

The ranked tables, `would_deny` and `bad_lines` are sorted; the others are in no order.
`report.html` (self-contained, `pipeline.rendering.report_page`), its charts as PNG files and
`summary.json` (what `run_report` returns, `pipeline.jobs.report_summary`) sit next to them;
the summary counts the events per decision and per recorded action
(`actions`, every action of the record's schema, zeros included), and the input's `lines`, as
the replay's summary does.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, StringType, StructField, StructType, TimestampType
from pyspark.storagelevel import StorageLevel

from kafka_policy_proxy.pipeline.jobs.driver_rows import collect_rows
from kafka_policy_proxy.pipeline.jobs.report_aggregation import (
    big_tables,
    decision_totals,
    denied_events,
    fine_aggregate,
    ranked,
    small_aggregates,
    whole_input,
)
from kafka_policy_proxy.pipeline.jobs.report_summary import report_facts, report_summary
from kafka_policy_proxy.pipeline.rendering.html_page import page_files
from kafka_policy_proxy.pipeline.rendering.report_page import TRENDS, report_page
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
        ("source", StringType), ("kind", StringType), ("problem", StringType), ("lines", LongType)
    ),
}


def run_report(spark: SparkSession, audit: AuditSource | Sequence[str], out: str) -> dict[str, Any]:
    """Write the report tables, report.html and summary.json under `out`; return the summary."""
    base = out.rstrip("/")
    outputs: dict[str, str] = {}
    source = as_source(audit)
    lines = source.read(spark, with_request=False)
    splits = lines.lines.rdd.getNumPartitions()
    # One Parquet file per ~8 input splits (~1 GB of JSON) rather than one per split, in
    # whole rounds of the cores: 5 writing tasks on 2 cores leave one idle a third of the time.
    cores = spark.sparkContext.defaultParallelism
    files = cores * max(1, -(-splits // (8 * cores)))
    fine = fine_aggregate(lines)
    try:
        # Only this aggregation is big: the others get the session's partitions.
        with _big_aggregation(spark, splits):
            # On local disk: it can be bigger than the heap (~600 MB for 10 million events),
            # and in memory it would fight the aggregations for it.
            fine.persist(StorageLevel.DISK_ONLY)
            # The first write scans the JSON and fills the cache; the second reads the cache.
            tables = big_tables(fine)
            outputs["decisions"] = f"{base}/decisions"
            tables["decisions"].coalesce(files).write.mode("overwrite").parquet(
                outputs["decisions"]
            )
        outputs["violations"] = f"{base}/violations"
        tables["violations"].coalesce(files).write.mode("overwrite").parquet(outputs["violations"])
        whole = whole_input(fine).persist(StorageLevel.MEMORY_AND_DISK)
        whole.count()  # filled from `fine` while it is still cached
    finally:
        fine.unpersist()
    try:
        totals = collect_rows(decision_totals(whole))
        small = {name: collect_rows(df) for name, df in small_aggregates(whole).items()}
    finally:
        whole.unpersist()
    # Three columns of the table just written: cheaper than another pass over the cache.
    decisions = spark.read.parquet(outputs["decisions"])
    hourly = collect_rows(
        decisions.groupBy("hour", "decision").agg(F.sum("events").alias("events")), ("hour",)
    )
    by_action = collect_rows(
        decisions.groupBy("action", "decision").agg(F.sum("events").alias("events")), ()
    )
    ordered = ranked(small)
    trending = [r["rule"] for r in ordered["top_denied_rules"][:TRENDS]]
    rule_hours = collect_rows(
        spark.read.parquet(outputs["violations"])
        .where(denied_events() & (F.col("rule_mode") == "enforce") & F.col("rule").isin(*trending))
        .groupBy("hour", "rule")
        .agg(F.sum("events").alias("events")),
        ("hour",),
    )
    for name, rows in ordered.items():
        outputs[name] = f"{base}/{name}"
        schema = SMALL_TABLES[name]
        data = [tuple(row[f.name] for f in schema.fields) for row in rows]
        frame = spark.createDataFrame(data, schema).coalesce(1)
        frame.write.mode("overwrite").parquet(outputs[name])
    outputs["report"] = f"{base}/report.html"
    outputs["summary"] = f"{base}/summary.json"
    facts = report_facts(totals, hourly, by_action, ordered)
    facts["rule_hours"] = rule_hours
    summary = report_summary(facts, outputs)
    write_files(spark, base, page_files("report", report_page(facts, source.label)))
    write_text(spark, base, "summary.json", json.dumps(summary, indent=2, sort_keys=True) + "\n")
    return summary


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
