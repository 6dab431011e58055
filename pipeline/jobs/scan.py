"""The `scan` job: which of the topics that already exist break today's policy?

Every topic of the snapshots is evaluated, on the executors, as if it were being created now
with its current state, in the cluster made of the other topics of its snapshot
(`pipeline.jobs.scan_evaluation` has the full rules). Internal topics
(`policy.cluster.is_internal`: Kafka's own, or flagged internal) are not evaluated; they are
counted as skipped, and still count in the other topics' cluster facts. Snapshots that are
incomplete, malformed, or give one cluster twice are refused before anything is evaluated;
one whose topic lines lack `config_sources` is judged on effective values only, and the
summary warns once for it.

Outputs under `out/` (Parquet, overwritten), plus `scan.html` (`pipeline.rendering.scan_page`)
and `summary.json`:

- `violations`: cluster_id, topic, owner, rule, mode, message (one row per violation);
- `topics`: cluster_id, topic, partitions, replication_factor, decision (`compliant`,
  `violating`, `audit-only`), rules (the violated rules, in policy order), owner;
- `clusters`: cluster_id, brokers, topics, compliant, violating, audit_only, skipped_internal,
  violations.

`owner` is the team of the policy's `owners:` that owns the topic, or `(unowned)`. With
`teams` (the default when the policy has owners), each team also gets its own report beside
the whole one (`pipeline.jobs.scan_teams`), and the summary and `scan.html` count by team.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pyspark import Broadcast
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import ArrayType, LongType, MapType, StringType, StructField, StructType
from pyspark.storagelevel import StorageLevel

from kafka_policy_proxy.pipeline.jobs.scan_evaluation import (
    EVALUATED,
    topic_evaluator,
)
from kafka_policy_proxy.pipeline.jobs.scan_teams import (
    ByOwner,
    by_owner,
    clear_team_reports,
    team_rows,
    write_team_reports,
)
from kafka_policy_proxy.pipeline.jobs.team_report import RESULTS_SHOWN, ScanRun
from kafka_policy_proxy.pipeline.rendering.html_page import page_files
from kafka_policy_proxy.pipeline.rendering.scan_page import VIOLATIONS_SHOWN, scan_page
from kafka_policy_proxy.pipeline.sources.hadoop_files import write_files, write_text
from kafka_policy_proxy.pipeline.sources.snapshots import (
    SnapshotError,
    check_complete,
    read_snapshot_lines,
)
from kafka_policy_proxy.pipeline.worker_cache import cluster_json, compiled
from kafka_policy_proxy.policy.cluster import INTERNAL_TOPICS, InMemoryCluster, is_internal
from kafka_policy_proxy.policy.exceptions import rfc3339
from kafka_policy_proxy.policy.model import Principal, TopicState, freeze_assignment
from kafka_policy_proxy.policy.owners import UNOWNED, owner_of

DEFAULT_PRINCIPAL = Principal().name

# What the cluster facts need from the cluster and topic lines; the assignment stays JSON text.
_FACTS = StructType(
    [
        StructField("brokers", ArrayType(StructType([StructField("id", LongType())]))),
        StructField("defaults", MapType(StringType(), StringType())),
        StructField("topic_id", StringType()),
        StructField("replication_factor", LongType()),
        StructField("assignment", StringType()),
    ]
)


def _without_sources(lines: DataFrame) -> list[str]:
    """One warning per snapshot whose topic lines lack `config_sources`."""
    lacking = F.get_json_object("line", "$.config_sources").isNull()
    rows = (
        lines.where((F.col("kind") == "topic") & lacking)
        .groupBy("source")
        .count()
        .orderBy("source")
        .collect()
    )
    return [
        f"{r['source']}: {r['count']:,} topic line(s) without config_sources (a snapshot from an "
        "older writer?): which configs were set on those topics and which are broker defaults "
        "is not known, so `required` and `forbidden` are not judged for them and value checks "
        "name the effective value"
        for r in rows
    ]


def _clusters(lines: DataFrame) -> tuple[dict[str, InMemoryCluster], dict[str, list[str]]]:
    """Each cluster's facts on the driver (topic metadata, no configs), and its internal topics."""
    rows = (
        lines.where(F.col("kind").isin("cluster", "topic"))
        .select(
            "kind",
            "cluster_id",
            "name",
            "partitions",
            "internal",
            F.from_json("line", _FACTS).alias("facts"),
        )
        .select("kind", "cluster_id", "name", "partitions", "internal", "facts.*")
        .collect()
    )
    topics: dict[str, list[TopicState]] = defaultdict(list)
    internal: dict[str, list[str]] = defaultdict(list)
    for row in rows:
        if row["kind"] == "topic":
            state = TopicState(
                name=row["name"],
                topic_id=row["topic_id"],
                partitions=row["partitions"] or 0,
                replication_factor=row["replication_factor"] or 0,
                assignment=freeze_assignment(json.loads(row["assignment"] or "[]")),
                internal=bool(row["internal"]),
            )
            topics[row["cluster_id"]].append(state)
            if is_internal(state.name, state.internal):
                internal[row["cluster_id"]].append(state.name)
    clusters = {
        r["cluster_id"]: InMemoryCluster.of(
            topics[r["cluster_id"]], len(r["brokers"] or ()) or 1, r["defaults"]
        )
        for r in rows
        if r["kind"] == "cluster"
    }
    return clusters, {cluster_id: internal[cluster_id] for cluster_id in clusters}


def run_scan(
    spark: SparkSession,
    policy_file: str,
    snapshots: Sequence[str],
    out: str,
    *,
    principal: str = DEFAULT_PRINCIPAL,
    now: datetime | None = None,
    teams: bool | None = None,
) -> dict[str, Any]:
    """Evaluate every existing topic of the snapshots against the policy, at the instant
    `now` (the exceptions in force; default: the scan's start); write the outputs.

    `teams`: also write a report per owner; None: when the policy has `owners:`.
    """
    now = now or datetime.now(UTC)
    started = now.strftime("%Y-%m-%dT%H:%M:%SZ")
    policy_text = Path(policy_file).read_text(encoding="utf-8")
    policy = compiled(policy_text, policy_file)  # PolicyError, naming the file, before Spark
    owners = policy.document.owners
    if teams is None:
        teams = bool(owners or policy.budgets)
    lines = read_snapshot_lines(spark, snapshots).persist(StorageLevel.MEMORY_AND_DISK)
    evaluated: DataFrame | None = None
    shipped: Broadcast[dict[str, str]] | None = None
    try:
        problems = check_complete(lines)
        if problems:
            raise SnapshotError("; ".join(problems))
        warnings = _without_sources(lines)
        clusters, internal_topics = _clusters(lines)
        skipped = {cluster_id: len(names) for cluster_id, names in internal_topics.items()}
        if not clusters:
            raise SnapshotError(f"no snapshot lines in {', '.join(snapshots)}")
        shipped = spark.sparkContext.broadcast({c: cluster_json(s) for c, s in clusters.items()})
        # policy.cluster.is_internal, on the lines.
        internal = F.coalesce(F.col("internal"), F.lit(False)) | F.col("name").isin(
            *INTERNAL_TOPICS
        )
        evaluated = (
            lines.where((F.col("kind") == "topic") & ~internal)
            .select("cluster_id", "line")
            # A snapshot file is one input split: spread its topics over the executors.
            .repartition(spark.sparkContext.defaultParallelism)
            .mapInPandas(
                topic_evaluator(
                    policy_text, str(Path(policy_file).resolve()), principal, shipped, now
                ),
                EVALUATED,
            )
            .persist(StorageLevel.MEMORY_AND_DISK)
        )
        results = _write_tables(
            spark, evaluated, clusters, skipped, rule_names=policy.rule_names, out=out
        )
    finally:
        lines.unpersist()
        if evaluated is not None:
            evaluated.unpersist()
        if shipped is not None:
            shipped.unpersist()
    clear_team_reports(spark, out)
    by_team: dict[str, dict[str, Any]] = {}
    if teams:
        run = ScanRun(policy_file, list(snapshots), principal, started)
        internal_owners = Counter(
            owner_of(policy.document, name, policy.budgets) or UNOWNED
            for names in internal_topics.values()
            for name in names
        )
        # The owners: map's teams in its order, then the teams budgets name (a per-principal
        # budget's users are known only from the topics).
        named = {row["owner"] for row in results.by_owner.counts} | set(internal_owners)
        rows = team_rows(
            results.by_owner,
            teams=[*owners, *sorted(named - set(owners) - {UNOWNED})],
            rule_names=policy.rule_names,
            skipped=internal_owners,
        )
        by_team = write_team_reports(spark, out, rows, owners, run)
    summary = _summary(policy_file, snapshots, principal, out, results) | {
        "warnings": warnings,
        "now": rfc3339(now),
    }
    if teams:
        summary["teams"] = by_team
    page = scan_page(
        summary, clusters=results.clusters, by_rule=results.by_rule, shown=results.shown
    )
    write_files(spark, out, page_files("scan", page))
    write_text(spark, out, "summary.json", json.dumps(summary, indent=2, sort_keys=True) + "\n")
    return summary


@dataclass(frozen=True)
class _Results:
    """What the report needs from the tables, collected on the driver."""

    clusters: list[dict[str, Any]]  # one row of CLUSTERS per cluster
    by_rule: list[dict[str, Any]]  # rule, mode, violations, topics; in policy order
    shown: list[dict[str, Any]]  # the first violations, by cluster, topic and rule order
    by_owner: ByOwner  # the same, by owner


CLUSTERS = StructType(
    [
        StructField("cluster_id", StringType()),
        StructField("brokers", LongType()),
        StructField("topics", LongType()),
        StructField("compliant", LongType()),
        StructField("violating", LongType()),
        StructField("audit_only", LongType()),
        StructField("skipped_internal", LongType()),
        StructField("violations", LongType()),
    ]
)
_COUNTED = ("topics", "compliant", "violating", "audit_only", "violations")


def _write_tables(
    spark: SparkSession,
    evaluated: DataFrame,
    clusters: Mapping[str, InMemoryCluster],
    skipped: Mapping[str, int],
    *,
    rule_names: Sequence[str],
    out: str,
) -> _Results:
    base = out.rstrip("/")
    evaluated.drop("violations").write.mode("overwrite").parquet(f"{base}/topics")
    violations = _violations(evaluated)
    violations.drop("position").write.mode("overwrite").parquet(f"{base}/violations")

    aggregates = by_owner(evaluated, violations, shown=max(VIOLATIONS_SHOWN, RESULTS_SHOWN))
    counts: dict[str, Counter[str]] = defaultdict(Counter)
    for r in aggregates.counts:
        counts[r["cluster_id"]].update({key: r[key] or 0 for key in _COUNTED})
    rows = [
        {
            "cluster_id": cluster_id,
            "brokers": clusters[cluster_id].broker_count(),
            **{key: counts[cluster_id][key] for key in _COUNTED},
            "skipped_internal": skipped[cluster_id],
        }
        for cluster_id in sorted(clusters)
    ]
    spark.createDataFrame(
        [tuple(r[f] for f in CLUSTERS.fieldNames()) for r in rows], CLUSTERS
    ).write.mode("overwrite").parquet(f"{base}/clusters")

    by_rule: dict[tuple[str, str], Counter[str]] = defaultdict(Counter)
    for r in aggregates.rules:
        by_rule[r["rule"], r["mode"]].update(violations=r["violations"], topics=r["topics"])
    order = {rule: i for i, rule in enumerate(rule_names)}
    shown = sorted(aggregates.first, key=lambda r: (r["cluster_id"], r["topic"], r["position"]))
    return _Results(
        rows,
        [
            {"rule": rule, "mode": mode, **totals}
            for (rule, mode), totals in sorted(
                by_rule.items(), key=lambda i: (order.get(i[0][0], len(order)), i[0][1])
            )
        ],
        [{k: v for k, v in r.items() if k != "position"} for r in shown[:VIOLATIONS_SHOWN]],
        aggregates,
    )


def _violations(evaluated: DataFrame) -> DataFrame:
    """One row per violation, with its position among its topic's."""
    return evaluated.select(
        "cluster_id", "topic", "owner", F.posexplode("violations").alias("position", "v")
    ).select("cluster_id", "topic", "owner", "position", "v.rule", "v.mode", "v.message")


def _summary(
    policy_file: str, snapshots: Sequence[str], principal: str, out: str, results: _Results
) -> dict[str, Any]:
    totals = {key: sum(r[key] for r in results.clusters) for key in (*_COUNTED, "skipped_internal")}
    by_rule: Counter[str] = Counter()
    for r in results.by_rule:
        by_rule[r["rule"]] += r["violations"]
    return {
        "job": "scan",
        "policy": policy_file,
        "snapshots": list(snapshots),
        "principal": principal,
        "out": out,
        "clusters": len(results.clusters),
        **totals,
        "violations_by_rule": dict(by_rule),
        "by_cluster": {
            r["cluster_id"]: {k: v for k, v in r.items() if k != "cluster_id"}
            for r in results.clusters
        },
    }
