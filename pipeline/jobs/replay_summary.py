"""The replay's facts (what its page shows, gathered on the driver) and its summary.

`summary.json` (what `run_replay` returns): requests, actions (requests per recorded action),
unchanged (flip none), rules_changed (of those, the ones whose violated rules differ),
allow_to_deny, deny_to_allow, and for each how many distinct requests, principals, topics and
client ids they are (`distinct`), unknown, errors, the input's `lines` as every job counts
them, new_decisions, unknown_reasons, the judgement cache's lookups and hits (`cache`), the
policy, the snapshot and the outputs.

Among the facts: `distinct` (allow->deny) and `distinct_allowed` (deny->allow): requests
(distinct principal, client id, api, action, resource and validate_only: the same ask of the
same resource), principals, topics, client_ids; `clients`: the applications (client id and
principal) the candidate would break, most requests first, with the topics and rules and one
new violation's message; `sample`: the flipped requests distinct by principal, flip,
resource and the rules behind the flip, the first of each by time, with how many requests
each stands for.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from kafka_policy_proxy.pipeline.jobs.driver_rows import collect_rows
from kafka_policy_proxy.pipeline.jobs.replay_evaluation import (
    ALLOW_TO_DENY,
    DENY_TO_ALLOW,
    NEW_DECISIONS,
    NO_FLIP,
)
from kafka_policy_proxy.pipeline.jobs.replayer import ERROR, UNKNOWN
from kafka_policy_proxy.pipeline.rendering.replay_page import SAMPLE_ROWS, TABLE_ROWS
from kafka_policy_proxy.pipeline.sources.audit_events import ACTIONS, line_summary


def replay_facts(
    spark: SparkSession, decisions: DataFrame, outputs: dict[str, str], counts: dict[str, int]
) -> dict[str, Any]:
    """What the page shows, from the decisions and the `flips` and `bad_lines` just written,
    and the counts observed while evaluating."""
    by_rule = (
        spark.read.parquet(outputs["flips"])
        .groupBy("flip", "rule")
        .agg(F.sum("requests").alias("requests"), F.count(F.lit(1)).alias("principals"))
        .orderBy("flip", F.desc("requests"), "rule")
        .collect()
    )
    # The flips, read once for the five queries below (a small part of the decisions).
    flipped = decisions.where(F.col("flip").isin(ALLOW_TO_DENY, DENY_TO_ALLOW)).persist()
    by_principal = (
        flipped.groupBy("flip", "principal")
        .agg(F.count(F.lit(1)).alias("requests"))
        .orderBy(F.desc("requests"), "flip", "principal")
        .limit(TABLE_ROWS)
        .collect()
    )
    by_resource = (
        flipped.groupBy("flip", "resource_type", "resource")
        .agg(F.count(F.lit(1)).alias("requests"))
        .orderBy(F.desc("requests"), "flip", "resource_type", "resource")
        .limit(TABLE_ROWS)
        .collect()
    )
    # The first request of each (principal, flip, resource, rules), by time.
    first = F.min_by(F.struct("action", "old_rules", "new_messages"), "time")
    sample = (
        flipped.groupBy("principal", "flip", "resource_type", "resource", "flip_rules")
        .agg(F.min("time").alias("time"), first.alias("first"), F.count(F.lit(1)).alias("requests"))
        .orderBy("time", "principal", "resource_type", "resource")
        .select(
            "time",
            "flip",
            "principal",
            "resource_type",
            "resource",
            "first.action",
            "first.old_rules",
            "first.new_messages",
            F.col("flip_rules").alias("rules"),
            "requests",
        )
        .limit(SAMPLE_ROWS)
    )
    distinct = {r["flip"]: _distinct(r) for r in _distinct_counts(flipped)}
    reasons = []
    for flip, limit in ((UNKNOWN, None), (ERROR, TABLE_ROWS)):
        # Unknown reasons name sets of facts, so they are few; error reasons quote bad values.
        counted = (
            decisions.where(F.col("flip") == flip)
            .groupBy("flip", "reason")
            .agg(F.count(F.lit(1)).alias("requests"))
            .orderBy(F.desc("requests"), "reason")
        )
        reasons += (counted if limit is None else counted.limit(limit)).collect()
    bad_lines = spark.read.parquet(outputs["bad_lines"]).collect()
    rules = [r.asDict() for r in by_rule]
    facts = {
        "by_rule": rules,
        "to_deny": [r for r in rules if r["flip"] == ALLOW_TO_DENY],
        "by_principal": [r.asDict() for r in by_principal],
        "by_resource": [r.asDict() for r in by_resource],
        "sample": collect_rows(sample, ("time",)),
        "distinct": distinct.get(ALLOW_TO_DENY, _distinct(None)),
        "distinct_allowed": distinct.get(DENY_TO_ALLOW, _distinct(None)),
        "clients": [r.asDict() for r in _clients(flipped).collect()],
        "cache": {"lookups": counts["requests"], "hits": counts["cache_hits"]},
        "reasons": [r.asDict() for r in reasons],
        "bad_lines": [r.asDict() for r in bad_lines],
    }
    flipped.unpersist()
    return facts


_DISTINCT = ("requests", "principals", "topics", "client_ids")


def _distinct_counts(flipped: DataFrame) -> list[Any]:
    """Per flip: distinct requests, principals, topics and client ids."""
    ask = F.struct("principal", "client_id", "api", "action", "resource_type", "resource")
    return (
        flipped.groupBy("flip")
        .agg(
            F.count_distinct(ask, F.col("validate_only")).alias("requests"),
            F.count_distinct("principal").alias("principals"),
            F.count_distinct("topic").alias("topics"),
            F.count_distinct("client_id").alias("client_ids"),
        )
        .collect()
    )


def _distinct(row: Any) -> dict[str, int]:
    return {k: 0 if row is None else int(row[k]) for k in _DISTINCT}


def _clients(flipped: DataFrame) -> DataFrame:
    """The applications allow->deny flips would break: by client id and principal."""
    return (
        flipped.where(F.col("flip") == ALLOW_TO_DENY)
        .groupBy("client_id", "principal")
        .agg(
            F.count(F.lit(1)).alias("requests"),
            F.count_distinct("topic").alias("topics"),
            F.array_sort(F.array_distinct(F.flatten(F.collect_set("flip_rules")))).alias("rules"),
            F.min(F.try_element_at("new_messages", F.lit(1))).alias("example"),
        )
        .orderBy(F.desc("requests"), "client_id", "principal")
        .limit(TABLE_ROWS)
    )


def replay_summary(
    counts: dict[str, int],
    facts: dict[str, Any],
    *,
    policy_file: str,
    snapshots: Sequence[str],
    cluster_id: str | None,
    outputs: dict[str, str],
) -> dict[str, Any]:
    """The replay's `summary.json`, from the counts observed while evaluating and its facts."""
    reasons = [r for r in facts["reasons"] if r["flip"] == UNKNOWN]
    return {
        "policy": policy_file,
        "snapshot": {"paths": list(snapshots), "cluster_id": cluster_id} if snapshots else None,
        "requests": counts["requests"],
        "actions": {a: counts[f"action:{a}"] for a in ACTIONS},
        "unchanged": counts[f"flip:{NO_FLIP}"],
        "rules_changed": counts["rules_changed"],
        "allow_to_deny": counts[f"flip:{ALLOW_TO_DENY}"],
        "deny_to_allow": counts[f"flip:{DENY_TO_ALLOW}"],
        "distinct": {
            ALLOW_TO_DENY: facts["distinct"],
            DENY_TO_ALLOW: facts["distinct_allowed"],
        },
        "unknown": counts[f"flip:{UNKNOWN}"],
        "errors": counts[f"flip:{ERROR}"],
        "lines": line_summary(counts["requests"], facts["bad_lines"]),
        "new_decisions": {d: counts[f"new:{d}"] for d in NEW_DECISIONS},
        "unknown_reasons": {r["reason"]: r["requests"] for r in reasons},
        "cache": facts["cache"],
        "outputs": outputs,
    }
