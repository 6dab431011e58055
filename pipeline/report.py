"""The `report` job: who is being denied what, and is it getting better?

One scan of the audit JSON (bad lines included, with their reason) feeds one fine-grained
aggregate, cached on local disk. `decisions` and `violations` are its rows as
they are; an aggregate of it over the whole input (no hour, so small) gives the other tables,
which are ranked on the driver. Each table is Parquet under `out/`, overwritten; times are
UTC instants, counts are longs:

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
  URI), kind and reason (`pipeline.audit_lines`); they are never counted as events.

The ranked tables, `would_deny` and `bad_lines` are sorted; the others are in no order.
`report.html` (self-contained), its charts as PNG files and `summary.json` (what `run_report`
returns) sit next to them; the summary counts the events per decision and per recorded action
(`actions`, every action of the record's schema, zeros included), and the input's `lines`, as
the replay's summary does.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, date, datetime, time, timedelta
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, StringType, StructField, StructType, TimestampType
from pyspark.storagelevel import StorageLevel

from pipeline.audit_events import (
    ACTIONS,
    DECISIONS,
    AuditInput,
    about_topic,
    line_summary,
    resource,
    resource_type,
)
from pipeline.html_report import (
    Chart,
    Periods,
    Report,
    Table,
    bar_chart,
    percent,
    period_end,
    small_multiples,
    time_chart,
    utc,
)
from pipeline.lake import AuditSource, as_source
from pipeline.output import write_report, write_text

EVENT_KEYS = (
    "principal",
    "topic",
    "action",
    "api",
    "resource_type",
    "resource",
    "decision",
    "mode",
)
TOP = 10  # rows in the summary and the bar charts
TRENDS = 9  # rules with a trend chart of their own
TABLE_ROWS = 25  # rows in the HTML tables; the Parquet tables have them all
# Beyond a week, hourly points are too many to read: the chart switches to days, and beyond
# MAX_PERIODS of those to the first longer step that fits (a clock years off, one event in
# the year 1, must not make a chart of 740,000 days).
HOURLY_SPAN = timedelta(days=7)
MAX_PERIODS = 1100
LONG_STEPS = tuple(timedelta(weeks=w) for w in (1, 4, 52, 520))

_SHUFFLE_PARTITIONS = "spark.sql.shuffle.partitions"
_CACHE_COMPRESSED = "spark.sql.inMemoryColumnarStorage.compressed"
_RULE = StructType([StructField("rule", StringType()), StructField("rule_mode", StringType())])


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
        totals = _rows(_totals(whole))
        small = {name: _rows(df) for name, df in small_aggregates(whole).items()}
    finally:
        whole.unpersist()
    # Three columns of the table just written: cheaper than another pass over the cache.
    decisions = spark.read.parquet(outputs["decisions"])
    hourly = _rows(
        decisions.groupBy("hour", "decision").agg(F.sum("events").alias("events")), ("hour",)
    )
    by_action = _rows(
        decisions.groupBy("action", "decision").agg(F.sum("events").alias("events")), ()
    )
    ordered = _ordered(small)
    trending = [r["rule"] for r in ordered["top_denied_rules"][:TRENDS]]
    rule_hours = _rows(
        spark.read.parquet(outputs["violations"])
        .where(_denied() & (F.col("rule_mode") == "enforce") & F.col("rule").isin(*trending))
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
    facts = _facts(totals, hourly, by_action, ordered)
    facts["rule_hours"] = rule_hours
    summary = _summary(facts, outputs)
    write_report(spark, base, "report", _html(facts, source.label))
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


def fine_aggregate(audit: AuditInput) -> DataFrame:
    """Every line counted once by file, kind and problem, or by hour, event keys and rule."""
    # Columns: source, kind, problem, hour, the EVENT_KEYS, rule, rule_mode, events,
    # first_seen, last_seen. A good event gives one row with a null rule (its decision) and
    # one row per distinct rule it violated, so `decisions` and `violations` are these rows
    # as they are, without another shuffle. A bad line gives one row with only source, kind
    # and problem set. Two checks of one rule can fail in one event: the rule counts once
    # (every violation names its rule: the schema requires it).
    # Field arrays zipped, not a lambda per element: Spark evaluates lambdas row by row,
    # uncompiled (a third of this aggregation's time at 1M events).
    rules = F.array_distinct(
        F.arrays_zip(
            F.col("violations.rule").alias("rule"), F.col("violations.mode").alias("rule_mode")
        )
    )
    no_rule = F.array(F.lit(None).cast(_RULE))
    good = _good()
    # Bad lines may still have fields parsed (a wrong schema version has all): blank them so
    # they never count as events.
    rows = audit.lines.select(
        F.when(~good, F.col("source")).alias("source"),
        "kind",
        "problem",
        F.when(good, F.col("time")).alias("time"),
        F.when(good, _utc_hour(F.col("time"))).alias("hour"),
        *(F.when(good, _key(key)).alias(key) for key in EVENT_KEYS),
        F.explode(F.when(good, F.concat(no_rule, rules)).otherwise(no_rule)).alias("violation"),
    )
    return rows.groupBy(
        "source",
        "kind",
        "problem",
        "hour",
        *EVENT_KEYS,
        F.col("violation.rule").alias("rule"),
        F.col("violation.rule_mode").alias("rule_mode"),
    ).agg(
        F.count(F.lit(1)).alias("events"),
        F.min("time").alias("first_seen"),
        F.max("time").alias("last_seen"),
    )


_RESOURCE_KEYS = {"resource_type": resource_type, "resource": resource}


def _key(name: str) -> Column:
    # Only a record of no topic keeps its resource in the aggregate: a topic record's is its
    # topic (`_output` puts it back), and would double the biggest key of the shuffle.
    if name in _RESOURCE_KEYS:
        return F.when(~about_topic(), F.col(name))
    return F.col(name)


def _output(name: str) -> Column:
    # Null in the aggregate exactly for topic records: the same expressions as on the input.
    return _RESOURCE_KEYS[name]().alias(name) if name in _RESOURCE_KEYS else F.col(name)


def big_tables(fine: DataFrame) -> dict[str, DataFrame]:
    """`decisions` and `violations`: rows of `fine_aggregate` as they are, no reshuffle."""
    good = fine.where(_good())
    keys = [_output(key) for key in EVENT_KEYS]
    return {
        "decisions": good.where(F.col("rule").isNull()).select("hour", *keys, "events"),
        "violations": good.where(F.col("rule").isNotNull()).select(
            "hour", *keys, "rule", "rule_mode", "events"
        ),
    }


def whole_input(fine: DataFrame) -> DataFrame:
    """`fine_aggregate` over the whole input: no hour, action, api or mode; small."""
    return fine.groupBy(
        "source", "kind", "problem", "principal", "topic", "decision", "rule", "rule_mode"
    ).agg(
        F.sum("events").alias("events"),
        F.min("first_seen").alias("first_seen"),
        F.max("last_seen").alias("last_seen"),
    )


def small_aggregates(whole: DataFrame) -> dict[str, DataFrame]:
    """The small tables from `whole_input`, not yet ranked or sorted (one row per key)."""
    good = whole.where(_good())
    events = good.where(F.col("rule").isNull())
    violated = good.where(F.col("rule").isNotNull())
    seen = (F.min("first_seen").alias("first_seen"), F.max("last_seen").alias("last_seen"))
    denied = _denied()
    principals = (
        events.groupBy("principal")
        # One row per (principal, topic, decision) here: counting the denied rows with a
        # topic counts the distinct topics denied.
        .agg(
            _sum_if(denied, "events").alias("denials"),
            F.sum("events").alias("events"),
            F.count(F.when(denied, F.col("topic"))).alias("topics"),
            F.min(F.when(denied, F.col("first_seen"))).alias("first_seen"),
            F.max(F.when(denied, F.col("last_seen"))).alias("last_seen"),
        )
        .where(F.col("denials") > 0)
    )
    rules = (
        violated.where(_denied() & (F.col("rule_mode") == "enforce"))
        .groupBy("rule")
        .agg(
            F.sum("events").alias("denials"),
            F.countDistinct("principal").alias("principals"),
            F.countDistinct("topic").alias("topics"),
            *seen,
        )
    )
    would_deny = (
        violated.where(F.col("rule_mode") == "audit")
        .groupBy("rule", "principal")
        .agg(
            _sum_if(F.col("decision") == "audit-would-deny", "events").alias("would_deny"),
            _sum_if(_denied(), "events").alias("denied_anyway"),
            F.sum("events").alias("fired"),
            F.countDistinct("topic").alias("topics"),
            *seen,
        )
    )
    malformed = whole.where(~_good()).select(
        "source", "kind", "problem", F.col("events").alias("lines")
    )
    return {
        "top_denied_principals": principals,
        "top_denied_rules": rules,
        "would_deny": would_deny,
        "bad_lines": malformed,
    }


def _ordered(small: dict[str, list[dict[str, Any]]]) -> dict[str, list[dict[str, Any]]]:
    def ranked(rows: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
        rows = sorted(rows, key=lambda r: (-r["denials"], r[name]))
        return [{"rank": i, **row} for i, row in enumerate(rows, 1)]

    return {
        "top_denied_principals": ranked(small["top_denied_principals"], "principal"),
        "top_denied_rules": ranked(small["top_denied_rules"], "rule"),
        "would_deny": sorted(
            small["would_deny"],
            key=lambda r: (-r["would_deny"], -r["fired"], r["rule"], r["principal"]),
        ),
        "bad_lines": sorted(
            small["bad_lines"], key=lambda r: (-r["lines"], r["source"], r["problem"])
        ),
    }


def _totals(whole: DataFrame) -> DataFrame:
    return (
        whole.where(_good() & F.col("rule").isNull())
        .groupBy("decision")
        .agg(
            F.sum("events").alias("events"),
            F.min("first_seen").alias("first_seen"),
            F.max("last_seen").alias("last_seen"),
        )
    )


def _good() -> Column:
    return F.col("problem").isNull()


def _denied() -> Column:
    return F.col("decision") == "denied"


def _utc_hour(time: Column) -> Column:
    # Epoch arithmetic, not date_trunc: the hour stays UTC whatever the session time zone.
    seconds = F.unix_seconds(time)
    return F.timestamp_seconds(seconds - F.pmod(seconds, F.lit(3600)))


def _sum_if(condition: Column, column: str) -> Column:
    return F.coalesce(F.sum(F.when(condition, F.col(column))), F.lit(0))


def _rows(
    df: DataFrame, times: Sequence[str] = ("first_seen", "last_seen")
) -> list[dict[str, Any]]:
    # Timestamps travel as epoch microseconds: collected, they would take the driver's zone.
    selected = df.select(
        *(F.unix_micros(F.col(c)).alias(c) if c in times else F.col(c) for c in df.columns)
    )
    rows = [row.asDict() for row in selected.collect()]
    epoch = datetime(1970, 1, 1, tzinfo=UTC)
    for row in rows:
        for column in times:
            if row.get(column) is not None:
                row[column] = epoch + timedelta(microseconds=row[column])
    return rows


def _iso(moment: datetime | None) -> str | None:
    return None if moment is None else moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _facts(
    totals: list[dict[str, Any]],
    hourly: list[dict[str, Any]],
    by_action: list[dict[str, Any]],
    tables: dict[str, list[dict[str, Any]]],
) -> dict[str, Any]:
    by_decision = dict.fromkeys(DECISIONS, 0)
    for row in totals:
        by_decision[row["decision"]] = row["events"]
    actions = {action: dict.fromkeys(DECISIONS, 0) for action in ACTIONS}
    for row in by_action:
        actions[row["action"]][row["decision"]] = row["events"]
    per_rule: dict[str, dict[str, Any]] = {}
    for row in tables["would_deny"]:
        entry = per_rule.setdefault(
            row["rule"],
            {"rule": row["rule"], "would_deny": 0, "denied_anyway": 0, "fired": 0, "principals": 0},
        )
        for key in ("would_deny", "denied_anyway", "fired"):
            entry[key] += row[key]
        entry["principals"] += row["would_deny"] > 0
    return {
        "decisions": by_decision,
        "actions": actions,
        "first": min((r["first_seen"] for r in totals), default=None),
        "last": max((r["last_seen"] for r in totals), default=None),
        "hourly": hourly,
        "principals": tables["top_denied_principals"],
        "rules": tables["top_denied_rules"],
        "audit_rules": sorted(
            per_rule.values(), key=lambda r: (-r["would_deny"], -r["fired"], r["rule"])
        ),
        "would_deny": [r for r in tables["would_deny"] if r["would_deny"] > 0],
        "bad_lines": tables["bad_lines"],
    }


def _summary(facts: dict[str, Any], outputs: dict[str, str]) -> dict[str, Any]:
    def jsonable(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [
            {k: _iso(v) if isinstance(v, datetime) else v for k, v in row.items()}
            for row in rows[:TOP]
        ]

    return {
        "events": sum(facts["decisions"].values()),
        "decisions": dict(facts["decisions"]),
        "actions": {action: sum(counts.values()) for action, counts in facts["actions"].items()},
        "lines": line_summary(sum(facts["decisions"].values()), facts["bad_lines"]),
        "time_range": {"first": _iso(facts["first"]), "last": _iso(facts["last"])},
        "top_principals": jsonable(facts["principals"]),
        "top_rules": jsonable(facts["rules"]),
        "audit_rules": jsonable(facts["audit_rules"]),
        "outputs": outputs,
    }


def _html(facts: dict[str, Any], audit: str) -> Report:
    decisions = facts["decisions"]
    total = sum(decisions.values())
    lines = line_summary(total, facts["bad_lines"])
    bad = lines["total"] - total
    notes = [f"Input: {audit}."]
    if total == 0:
        notes.append("There are no decision events in the input: nothing to report.")
    if bad:
        notes.append(
            f"{bad:,} line(s) are not events (blank, malformed or of an unknown schema "
            "version) and are not counted as events: see the last table."
        )
    parts: list[Table | Chart] = []
    if total:
        periods = periods_of(facts)
        parts.append(_time_chart(facts, periods))
        if facts["rule_hours"]:
            parts.append(_rule_trends(facts, periods))
    if facts["rules"]:
        top = facts["rules"][:TOP]
        parts.append(
            bar_chart(
                f"Denials by rule (top {TOP})",
                [r["rule"] for r in top],
                [r["denials"] for r in top],
                "denied events",
            )
        )
    if facts["principals"]:
        top = facts["principals"][:TOP]
        parts.append(
            bar_chart(
                f"Denials by principal (top {TOP})",
                [r["principal"] for r in top],
                [r["denials"] for r in top],
                "denied events",
            )
        )
    parts += [
        Table(
            "Decisions by action",
            ["action", "events", *DECISIONS],
            [
                [action, sum(counts.values()), *counts.values()]
                for action, counts in facts["actions"].items()
                if any(counts.values())
            ],
            "no decisions",
        ),
        Table(
            _shown("Top denied principals", facts["principals"], "top_denied_principals"),
            [
                "rank",
                "principal",
                "denials",
                "events",
                "denial rate",
                "topics",
                "first denial",
                "last denial",
            ],
            [
                [
                    r["rank"],
                    r["principal"],
                    r["denials"],
                    r["events"],
                    percent(r["denials"], r["events"]),
                    r["topics"],
                    *_seen(r),
                ]
                for r in facts["principals"][:TABLE_ROWS]
            ],
            "no denials",
        ),
        Table(
            _shown("Top rules by denials (enforce mode)", facts["rules"], "top_denied_rules"),
            [
                "rank",
                "rule",
                "denials",
                "share of denied events",
                "principals",
                "topics",
                "first denial",
                "last denial",
            ],
            [
                [
                    r["rank"],
                    r["rule"],
                    r["denials"],
                    percent(r["denials"], decisions["denied"]),
                    r["principals"],
                    r["topics"],
                    *_seen(r),
                ]
                for r in facts["rules"][:TABLE_ROWS]
            ],
            "no rule denied anything",
        ),
        Table(
            "Audit-mode rules: what enforcing them would deny",
            [
                "rule",
                "would deny (now allowed)",
                "denied anyway",
                "fired",
                "principals that would be denied",
            ],
            [
                [r["rule"], r["would_deny"], r["denied_anyway"], r["fired"], r["principals"]]
                for r in facts["audit_rules"]
            ],
            "no audit-mode rule fired",
        ),
        Table(
            _shown("Audit-mode rules: who would be denied", facts["would_deny"], "would_deny"),
            ["rule", "principal", "would deny", "topics", "first fired", "last fired"],
            [
                [r["rule"], r["principal"], r["would_deny"], r["topics"], *_seen(r)]
                for r in facts["would_deny"][:TABLE_ROWS]
            ],
            "nobody",
        ),
        Table(
            "Lines that are not events, by file and reason",
            ["file", "kind", "reason", "lines"],
            [[r["source"], r["kind"], r["problem"], r["lines"]] for r in facts["bad_lines"]],
            "every line is an event",
        ),
    ]
    return Report(
        "Audit report: who is being denied what",
        figures=[
            ("events", total),
            ("allowed", _with_rate(decisions["allowed"], total)),
            ("denied", _with_rate(decisions["denied"], total)),
            ("audit-would-deny", _with_rate(decisions["audit-would-deny"], total)),
            ("malformed lines", lines["malformed"]),
            ("blank lines", lines["blank"]),
            ("unknown schema versions", lines["unknown_version"]),
            ("first event", utc(facts["first"])),
            ("last event", utc(facts["last"])),
        ],
        notes=notes,
        parts=parts,
    )


def _shown(title: str, rows: Sequence[Any], table: str) -> str:
    if len(rows) <= TABLE_ROWS:
        return title
    return f"{title}: the first {TABLE_ROWS} of {len(rows):,} (all in {table}/)"


def _seen(row: dict[str, Any]) -> list[str | None]:
    return [utc(row["first_seen"]), utc(row["last_seen"])]


def _with_rate(count: int, total: int) -> str:
    return f"{count:,} ({percent(count, total)})"


def periods_of(facts: dict[str, Any]) -> Periods:
    """Hours, or days beyond a week, from the first event's to the last's; a period the data
    does not cover from start to end (the first began earlier, the last ends later) is
    partial."""
    first: datetime = facts["first"]
    last: datetime = facts["last"]
    step = timedelta(hours=1)
    if last - first > HOURLY_SPAN:
        steps = (timedelta(days=1), *LONG_STEPS)
        step = next((s for s in steps if (last - first) / s < MAX_PERIODS), steps[-1])
    start = _bucket(first, step)
    # Every period from the first to the last, so quiet ones show as zeros, not as gaps.
    starts = [start]
    while (following := _following(starts[-1], step)) is not None and following <= last:
        starts.append(following)
    # Events are stamped to the microsecond: the last second of a period counts as its end.
    return Periods(
        starts,
        step,
        first_partial=first > start,
        last_partial=last < period_end(starts[-1], step) - timedelta(seconds=1),
    )


def _following(start: datetime, step: timedelta) -> datetime | None:
    try:
        return start + step
    except OverflowError:
        return None  # no period starts after the year 9999


def _bucket(moment: datetime, step: timedelta) -> datetime:
    if step < timedelta(days=1):
        return moment.replace(minute=0, second=0, microsecond=0)
    # Whole steps of days from 0001-01-01, a Monday: weeks start on Mondays.
    ordinal = moment.toordinal()
    day = date.fromordinal(ordinal - (ordinal - 1) % step.days)
    return datetime.combine(day, time(), moment.tzinfo)


def _per(periods: Periods) -> str:
    if periods.step < timedelta(days=1):
        return "hour"
    if periods.step == timedelta(days=1):
        return "day"
    weeks = periods.step.days // 7
    return "week" if weeks == 1 else f"{weeks} weeks"


def _time_chart(facts: dict[str, Any], periods: Periods) -> Chart:
    counts: dict[tuple[datetime, str], int] = defaultdict(int)
    for row in facts["hourly"]:
        counts[_bucket(row["hour"], periods.step), row["decision"]] += row["events"]
    series: dict[str, Sequence[float]] = {
        d: [float(counts[t, d]) for t in periods.starts] for d in DECISIONS
    }
    totals = [sum(series[d][i] for d in DECISIONS) for i in range(len(periods.starts))]
    rate = [d / t if t else 0.0 for d, t in zip(series["denied"], totals, strict=True)]
    per = _per(periods)
    return time_chart(
        f"Decisions per {per} (UTC)", periods, series, f"events per {per}", ("denial rate", rate)
    )


def _rule_trends(facts: dict[str, Any], periods: Periods) -> Chart:
    counts: dict[tuple[datetime, str], int] = defaultdict(int)
    for row in facts["rule_hours"]:
        counts[_bucket(row["hour"], periods.step), row["rule"]] += row["events"]
    rules = [r["rule"] for r in facts["rules"][:TRENDS]]
    series: dict[str, Sequence[float]] = {
        rule: [float(counts[t, rule]) for t in periods.starts] for rule in rules
    }
    per = _per(periods)
    return small_multiples(f"Denials per {per}, by rule", periods, series, f"denials per {per}")
