"""The replay's facts (what its page shows, gathered on the driver) and its summary.

`summary.json` (what `run_replay` returns): requests, actions (requests per recorded action),
unchanged (flip none), rules_changed (of those, the ones whose violated rules differ),
allow_to_deny, deny_to_allow, unknown, errors, the input's `lines` as every job counts them,
new_decisions, unknown_reasons, the policy, the snapshot and the outputs.
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
    spark: SparkSession, decisions: DataFrame, outputs: dict[str, str]
) -> dict[str, Any]:
    """What the page shows, from the decisions and the `flips` and `bad_lines` just written."""
    by_rule = (
        spark.read.parquet(outputs["flips"])
        .groupBy("flip", "rule")
        .agg(F.sum("requests").alias("requests"), F.count(F.lit(1)).alias("principals"))
        .orderBy("flip", F.desc("requests"), "rule")
        .collect()
    )
    flipped = decisions.where(F.col("flip").isin(ALLOW_TO_DENY, DENY_TO_ALLOW))
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
    sample = (
        flipped.orderBy("time", "principal", "resource_type", "resource")
        .select(
            "time",
            "flip",
            "principal",
            "resource_type",
            "resource",
            "action",
            "old_rules",
            "new_messages",
        )
        .limit(SAMPLE_ROWS)
    )
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
    return {
        "by_rule": rules,
        "to_deny": [r for r in rules if r["flip"] == ALLOW_TO_DENY],
        "by_principal": [r.asDict() for r in by_principal],
        "by_resource": [r.asDict() for r in by_resource],
        "sample": collect_rows(sample, ("time",)),
        "reasons": [r.asDict() for r in reasons],
        "bad_lines": [r.asDict() for r in bad_lines],
    }


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
        "unknown": counts[f"flip:{UNKNOWN}"],
        "errors": counts[f"flip:{ERROR}"],
        "lines": line_summary(counts["requests"], facts["bad_lines"]),
        "new_decisions": {d: counts[f"new:{d}"] for d in NEW_DECISIONS},
        "unknown_reasons": {r["reason"]: r["requests"] for r in reasons},
        "outputs": outputs,
    }
