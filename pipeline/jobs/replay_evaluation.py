"""The replay on Spark: every audit line with its recorded and new decision, and the flip.

Requests are judged on the executors by an Arrow UDF over the typed request columns
(`pipeline.sources.typed_requests`; the JSON text only for rows without them), one
`Replayer` per Python worker (the policy compiled and the cluster rebuilt once per process,
`pipeline.worker_cache`) and one judgement cache per task (`pipeline.jobs.replay_batches`:
each distinct request judged once), each at its event's recorded time (as epoch microseconds,
so that no session time zone comes between). `cached` says whether the cache had a row's
decision: the replay counts its hits. A flip compares whether the request would go through:
audit-would-deny counts as allowed. `flip_rules` are the rules behind a flip: for allow->deny
the candidate's enforce-mode violations, for deny->allow the recorded enforce-mode violations
(which no longer deny); empty otherwise.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa  # type: ignore[import-untyped]
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.pandas.functions import arrow_udf

from kafka_policy_proxy.pipeline.jobs.replay_batches import BatchJudge
from kafka_policy_proxy.pipeline.jobs.replayer import ERROR, UNKNOWN, Replayer
from kafka_policy_proxy.pipeline.sources.audit_events import AuditInput, resource, resource_type
from kafka_policy_proxy.pipeline.sources.typed_requests import TYPED_REQUEST_COLUMN
from kafka_policy_proxy.pipeline.worker_cache import compiled, shipped_cluster
from kafka_policy_proxy.policy.decision_log import PASSED, Outcome

ALLOW_TO_DENY = "allow->deny"
DENY_TO_ALLOW = "deny->allow"
NO_FLIP = "none"
ALLOWED = tuple(o.value for o in Outcome if o in PASSED)
NEW_DECISIONS = (*(o.value for o in Outcome), UNKNOWN, ERROR)
FLIPS = (NO_FLIP, ALLOW_TO_DENY, DENY_TO_ALLOW, UNKNOWN, ERROR)

RESULT = pa.struct(
    [
        pa.field("decision", pa.string()),
        pa.field("rules", pa.list_(pa.string())),
        pa.field("messages", pa.list_(pa.string())),
        pa.field("denying", pa.list_(pa.string())),
        pa.field("reason", pa.string()),
        pa.field("cached", pa.bool_()),
    ]
)
RESULT_DDL = (
    "decision string, rules array<string>, messages array<string>, denying array<string>, "
    "reason string, cached boolean"
)
# What each event recorded of the request, kept as it is in the decisions.
RECORD_COLUMNS = (
    "time",
    "principal",
    "client_id",
    "api",
    "action",
    "resource_type",
    "resource",
    "topic",
    "validate_only",
)
DECISION_COLUMNS = (
    *RECORD_COLUMNS,
    "old_decision",
    "old_rules",
    "new_decision",
    "new_rules",
    "new_messages",
    "flip",
    "flip_rules",
    "reason",
)


def replay_batch(
    judge: BatchJudge,
    typed: pa.StructArray | None,
    texts: pa.Array,
    micros: pa.Array | None = None,
    in_use: pa.Array | None = None,
) -> pa.StructArray:
    """Replay a batch of requests (typed, else their JSON text), each at its event's time
    (epoch microseconds) with its event's `in_use`: a RESULT per row."""
    rows, cached = judge.judge(typed, texts, micros, in_use)
    columns: list[list[Any]] = [list(c) for c in zip(*rows, strict=True)] if rows else [[]] * 5
    columns.append(cached)
    return pa.StructArray.from_arrays(
        [pa.array(c, f.type) for c, f in zip(columns, RESULT, strict=True)], fields=list(RESULT)
    )


def replay_udf(
    policy_text: str, policy_name: str, cluster_text: str | None
) -> Callable[[Column, Column, Column, Column], Column]:
    """The Arrow UDF: (typed request, request JSON where untyped, time in epoch microseconds,
    in_use JSON) -> struct<decision, rules, messages, denying, reason, cached>."""

    def replay(
        batches: Iterator[tuple[pa.Array, pa.Array, pa.Array, pa.Array]],
    ) -> Iterator[pa.Array]:
        # Compiled once per worker process and reused by every task and batch; the judgement
        # cache lives as long as the task.
        cluster = None if cluster_text is None else shipped_cluster(cluster_text)
        judge = BatchJudge(Replayer(compiled(policy_text, policy_name), cluster))
        for typed, texts, micros, in_use in batches:
            yield replay_batch(judge, typed, texts, micros, in_use)

    # The kind (iterator of arrays) comes from the type hints; the stubs only know it spelled out.
    return arrow_udf(replay, RESULT_DDL)  # type: ignore[call-overload, no-any-return]


def flip_column(old: Column, new: Column) -> Column:
    """allow->deny, deny->allow, none, or the new decision when it is unknown or error."""
    was, now = old.isin(*ALLOWED), new.isin(*ALLOWED)
    return (
        F.when(new.isin(UNKNOWN, ERROR), new)
        .when(was & ~now, F.lit(ALLOW_TO_DENY))
        .when(~was & now, F.lit(DENY_TO_ALLOW))
        .otherwise(F.lit(NO_FLIP))
    )


def replay_lines(
    policy_text: str, policy_name: str, audit: AuditInput, cluster: str | None
) -> DataFrame:
    """Every audit line: `problem` (null for a good event) and, for good ones, the decisions."""
    good = F.col("problem").isNull()
    evaluate = replay_udf(policy_text, policy_name, cluster)
    enforced = F.filter("violations", lambda v: v["mode"] == "enforce")
    # A schema 1 record's resource is its topic.
    recorded = {c: F.col(c) for c in RECORD_COLUMNS}
    recorded |= {"resource_type": resource_type(), "resource": resource()}
    staged = audit.lines.select(
        "problem",
        *(column.alias(name) for name, column in recorded.items()),
        F.col("decision").alias("old_decision"),
        F.col("violations.rule").alias("old_rules"),
        F.transform(enforced, lambda v: v["rule"]).alias("old_denying"),
        # Bad lines skip the evaluation (a null request comes back as an error, then dropped).
        # The text crosses to Python only where the typed columns cannot stand for it.
        evaluate(
            F.when(good, F.col(TYPED_REQUEST_COLUMN)),
            F.when(good & F.col(TYPED_REQUEST_COLUMN).isNull(), F.col("request")),
            F.unix_micros(F.col("time")),
            F.col("in_use"),
        ).alias("new"),
    )
    flip = flip_column(F.col("old_decision"), F.col("new.decision"))
    no_rules = F.array().cast("array<string>")
    return staged.select(
        "problem",
        *RECORD_COLUMNS,
        "old_decision",
        "old_rules",
        F.col("new.decision").alias("new_decision"),
        F.col("new.rules").alias("new_rules"),
        F.col("new.messages").alias("new_messages"),
        flip.alias("flip"),
        F.when(flip == ALLOW_TO_DENY, F.col("new.denying"))
        .when(flip == DENY_TO_ALLOW, F.col("old_denying"))
        .otherwise(no_rules)
        .alias("flip_rules"),
        F.col("new.reason").alias("reason"),
        F.col("new.cached").alias("cached"),
    )


def flip_counts(decisions: DataFrame) -> DataFrame:
    """flip, rule, principal, requests: allow->deny and deny->allow by rule and principal."""
    return (
        decisions.where(F.col("flip").isin(ALLOW_TO_DENY, DENY_TO_ALLOW))
        .select("flip", "principal", F.explode_outer("flip_rules").alias("rule"))
        .groupBy("flip", "rule", "principal")
        .agg(F.count(F.lit(1)).alias("requests"))
        .orderBy("flip", F.desc("requests"), "rule", "principal")
        .coalesce(1)
    )
