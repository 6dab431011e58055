"""The report's aggregation: one fine-grained pass over the audit lines, and the tables from it.

`fine_aggregate` counts every line once: a good event by UTC hour, the event keys and each
rule it violated; a bad line by file, kind and problem. `decisions` and `violations` are its
rows as they are; `whole_input` sums it over the whole input (no hour, so small) for the
tables ranked on the driver (`small_aggregates`, then `ranked`).
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import ArrayType, LongType, StringType, StructField, StructType

from kafka_policy_proxy.pipeline.sources.audit_events import (
    AuditInput,
    about_topic,
    resource,
    resource_type,
)

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

# One counted row of an event: its decision (null: the event's own), rule and mode (null: the
# decision's row) and topics (null: 1). A summary record's `summary.counts` has this shape.
_RULE = StructType(
    [
        StructField("decision", StringType()),
        StructField("rule", StringType()),
        StructField("rule_mode", StringType()),
        StructField("topics", LongType()),
    ]
)
_RESOURCE_KEYS = {"resource_type": resource_type, "resource": resource}

Rows = list[dict[str, Any]]


def fine_aggregate(audit: AuditInput) -> DataFrame:
    """Every line counted once by file, kind and problem, or by hour, event keys and rule."""
    # Columns: source, kind, problem, hour, the EVENT_KEYS, rule, rule_mode, events, records,
    # first_seen, last_seen. A good event gives one row with a null rule (its decision) and
    # one row per distinct rule it violated, so `decisions` and `violations` are these rows
    # as they are, without another shuffle. A bad line gives one row with only source, kind
    # and problem set. Two checks of one rule can fail in one event: the rule counts once
    # (every violation names its rule: the schema requires it).
    # A summary record (schema 3) gives its own counts: one row per decision and one per
    # decision and rule, each weighing its topics, so that it counts as the topic records it
    # stands for would have.
    # Field arrays zipped, not a lambda per element: Spark evaluates lambdas row by row,
    # uncompiled (a third of this aggregation's time at 1M events). The zip pads the empty
    # decision and topics arrays with nulls.
    nothing = F.array().cast(ArrayType(StringType()))
    rules = F.array_distinct(
        F.arrays_zip(
            nothing.alias("decision"),
            F.col("violations.rule").alias("rule"),
            F.col("violations.mode").alias("rule_mode"),
            nothing.cast(ArrayType(LongType())).alias("topics"),
        ).cast(ArrayType(_RULE))
    )
    no_rule = F.array(F.lit(None).cast(_RULE))
    good = good_lines()
    counted = F.when(~good, no_rule).when(
        F.col("summary").isNotNull(), F.col("summary.counts").cast(ArrayType(_RULE))
    )
    # Bad lines may still have fields parsed (a wrong schema version has all): blank them so
    # they never count as events.
    rows = audit.lines.select(
        F.when(~good, F.col("source")).alias("source"),
        "kind",
        "problem",
        F.when(good, F.col("time")).alias("time"),
        F.when(good, _utc_hour(F.col("time"))).alias("hour"),
        *(F.when(good, _key(key)).alias(key) for key in EVENT_KEYS),
        F.posexplode(counted.otherwise(F.concat(no_rule, rules))).alias("at", "violation"),
    ).withColumn("decision", F.coalesce(F.col("violation.decision"), F.col("decision")))
    return rows.groupBy(
        "source",
        "kind",
        "problem",
        "hour",
        *EVENT_KEYS,
        F.col("violation.rule").alias("rule"),
        F.col("violation.rule_mode").alias("rule_mode"),
    ).agg(
        F.sum(F.coalesce(F.col("violation.topics"), F.lit(1))).alias("events"),
        # Lines, not decisions: a line's first row counts it (a summary stands for many).
        F.count(F.when(F.col("at") == 0, True)).alias("records"),
        F.min("time").alias("first_seen"),
        F.max("time").alias("last_seen"),
    )


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
    good = fine.where(good_lines())
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
        F.sum("records").alias("records"),
        F.min("first_seen").alias("first_seen"),
        F.max("last_seen").alias("last_seen"),
    )


def small_aggregates(whole: DataFrame) -> dict[str, DataFrame]:
    """The small tables from `whole_input`, not yet ranked or sorted (one row per key)."""
    good = whole.where(good_lines())
    events = good.where(F.col("rule").isNull())
    violated = good.where(F.col("rule").isNotNull())
    seen = (F.min("first_seen").alias("first_seen"), F.max("last_seen").alias("last_seen"))
    denied = denied_events()
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
        violated.where(denied_events() & (F.col("rule_mode") == "enforce"))
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
            _sum_if(denied_events(), "events").alias("denied_anyway"),
            F.sum("events").alias("fired"),
            F.countDistinct("topic").alias("topics"),
            *seen,
        )
    )
    malformed = whole.where(~good_lines()).select(
        "source", "kind", "problem", F.col("events").alias("lines")
    )
    return {
        "top_denied_principals": principals,
        "top_denied_rules": rules,
        "would_deny": would_deny,
        "bad_lines": malformed,
    }


def ranked(small: dict[str, Rows]) -> dict[str, Rows]:
    """The small tables collected, ranked (rank 1: the most denials, ties by name) or sorted."""

    def by_denials(rows: Rows, name: str) -> Rows:
        rows = sorted(rows, key=lambda r: (-r["denials"], r[name]))
        return [{"rank": i, **row} for i, row in enumerate(rows, 1)]

    return {
        "top_denied_principals": by_denials(small["top_denied_principals"], "principal"),
        "top_denied_rules": by_denials(small["top_denied_rules"], "rule"),
        "would_deny": sorted(
            small["would_deny"],
            key=lambda r: (-r["would_deny"], -r["fired"], r["rule"], r["principal"]),
        ),
        "bad_lines": sorted(
            small["bad_lines"], key=lambda r: (-r["lines"], r["source"], r["problem"])
        ),
    }


def decision_totals(whole: DataFrame) -> DataFrame:
    """Events, first and last seen per decision, from `whole_input`."""
    return (
        whole.where(good_lines() & F.col("rule").isNull())
        .groupBy("decision")
        .agg(
            F.sum("events").alias("events"),
            F.sum("records").alias("records"),
            F.min("first_seen").alias("first_seen"),
            F.max("last_seen").alias("last_seen"),
        )
    )


def good_lines() -> Column:
    """Whether a row is of good events (not bad lines)."""
    return F.col("problem").isNull()


def denied_events() -> Column:
    """Whether a row is of denied events."""
    return F.col("decision") == "denied"


def _utc_hour(time: Column) -> Column:
    # Epoch arithmetic, not date_trunc: the hour stays UTC whatever the session time zone.
    seconds = F.unix_seconds(time)
    return F.timestamp_seconds(seconds - F.pmod(seconds, F.lit(3600)))


def _sum_if(condition: Column, column: str) -> Column:
    return F.coalesce(F.sum(F.when(condition, F.col(column))), F.lit(0))
