"""The report's drill-down aggregation (`report --drill-down`): one fine-grained pass over the
audit lines.

`fine_aggregate` counts every line once: a good event by UTC hour, the event keys and each
rule it violated; a bad line by file, kind and problem. `decisions` and `violations` are its
rows as they are.
"""

from __future__ import annotations

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


def good_lines() -> Column:
    """Whether a row is of good events (not bad lines)."""
    return F.col("problem").isNull()


def _utc_hour(time: Column) -> Column:
    # Epoch arithmetic, not date_trunc: the hour stays UTC whatever the session time zone.
    seconds = F.unix_seconds(time)
    return F.timestamp_seconds(seconds - F.pmod(seconds, F.lit(3600)))
