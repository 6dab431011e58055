"""The `scan` job: which of the topics that already exist break today's policy?

Every topic of the snapshots is evaluated, on the executors, as if it were being created now
with its current state, in the cluster made of the other topics of its snapshot:

- a `create` request with the topic's partition count, replication factor and replica
  assignment. The assignment counts as placed by the broker: an existing topic's placement
  says nothing about how it was asked for (and reassignments move replicas anyway), so a rule
  with `explicit_assignment: false` flags no existing topic;
- the requested configs are the topic's effective configs; the configs *named* in the request
  are those set on the topic itself (source DYNAMIC_TOPIC_CONFIG). So `forbidden` and
  `required` look at what someone set on the topic, and a value check says "sets retention.ms
  to ..." for a topic override and "gets the broker default retention.ms = ..." otherwise.
  A snapshot without `config_sources` does not say which is which: its topics name every
  effective config, `required` and `forbidden` are not judged, value checks say "has
  retention.ms = ...", and the summary warns once per such snapshot;
- existing topics have no creator principal: every topic is evaluated as one configurable
  principal (default User:ANONYMOUS), so rules whose `match` selects principals apply as they
  would to that principal;
- the cluster's topic names and total partitions exclude the topic under evaluation, so a
  cluster at exactly `max_topics` is not flagged and a topic does not count against its own
  partition budget; a cluster over a cluster-wide limit has every topic flagged by it (none
  could be created today). The other topics answer `topic()` with their metadata (no
  configs), as the proxy's all-topics read does. Broker count and defaults are the snapshot's.

Each topic is judged by the one judge (`policy.judge`) with a fact source that gives the
cluster of the other topics and folds nothing into the request (it already holds the topic's
state). Internal topics (`policy.cluster.is_internal`: Kafka's own, or flagged internal) are
not evaluated; they are counted as skipped, and still count in the other topics' cluster
facts. Snapshots that are incomplete,
malformed, or give one cluster twice are refused before anything is evaluated.

Outputs under `out/` (Parquet, overwritten), plus `scan.html` and `summary.json`:

- `violations`: cluster_id, topic, rule, mode, message (one row per violation);
- `topics`: cluster_id, topic, partitions, replication_factor, decision (`compliant`,
  `violating`, `audit-only`), rules (the violated rules, in policy order);
- `clusters`: cluster_id, brokers, topics, compliant, violating, audit_only, skipped_internal,
  violations.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pandas as pd  # type: ignore[import-untyped]
from pyspark import Broadcast
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import (
    ArrayType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
)
from pyspark.storagelevel import StorageLevel

from pipeline.html_report import Chart, Report, Table, bar_chart
from pipeline.output import write_report, write_text
from pipeline.snapshots import SnapshotError, check_complete, read_snapshot_lines
from pipeline.worker_cache import cluster_json, compiled, shipped_cluster
from policy.builders import create_request
from policy.cluster import INTERNAL_TOPICS, ClusterState, InMemoryCluster, is_internal
from policy.decision_log import Outcome, outcome
from policy.engine import CompiledPolicy
from policy.judge import FactQuery, Facts, judge
from policy.model import (
    ConfigSource,
    Principal,
    TopicRequest,
    TopicState,
    Violation,
    freeze_assignment,
)
from policy.offline.snapshot_format import SET_ON_TOPIC, TopicLine, parse_line
from policy.overlays import OtherTopics
from policy.overrides import describe

DEFAULT_PRINCIPAL = Principal().name
COMPLIANT, VIOLATING, AUDIT_ONLY = "compliant", "violating", "audit-only"
# The record's decisions as the scan names them.
DECISIONS = {
    Outcome.ALLOWED: COMPLIANT,
    Outcome.DENIED: VIOLATING,
    Outcome.AUDIT_WOULD_DENY: AUDIT_ONLY,
}
VIOLATIONS_SHOWN = 200

VIOLATION = StructType(
    [
        StructField("rule", StringType()),
        StructField("mode", StringType()),
        StructField("message", StringType()),
    ]
)
EVALUATED = StructType(
    [
        StructField("cluster_id", StringType()),
        StructField("topic", StringType()),
        StructField("partitions", LongType()),
        StructField("replication_factor", LongType()),
        StructField("decision", StringType()),
        StructField("rules", ArrayType(StringType())),
        StructField("violations", ArrayType(VIOLATION)),
    ]
)
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


@dataclass(frozen=True, slots=True)
class AsIfCreated:
    """A `FactSource` for a topic judged as a create: the cluster of the other topics."""

    cluster: ClusterState
    name: str

    def read(self, query: FactQuery) -> Facts:
        """The other topics; nothing folded in (the request already holds the topic's state)."""
        return Facts(OtherTopics(self.cluster, self.name), frozenset())


def scan_request(
    topic: TopicState, sources: Mapping[str, str] | None, principal: Principal
) -> TopicRequest:
    """The topic as a CreateTopics request for its current state (see the module docstring)."""
    if sources is None:
        # Which were set on the topic is not known: every config named, judged on values only.
        named, config_source = sorted(topic.configs), ConfigSource.SNAPSHOT
    else:
        named = sorted(n for n, source in sources.items() if source == SET_ON_TOPIC)
        config_source = ConfigSource.CREATE
    request = create_request(
        topic.name,
        topic.partitions,
        topic.replication_factor,
        configs=[(n, topic.configs.get(n)) for n in named],
        principal=principal,
    )
    # The snapshot's effective configs are the truth: broker defaults the cluster line may not
    # list (static configs, synonyms) are already folded in.
    requested = replace(
        request.requested,
        assignment=topic.assignment,
        generated_assignment=True,
        configs=topic.configs,
        config_source=config_source,
    )
    return replace(request, requested=requested)


def scan_topic(
    policy: CompiledPolicy, cluster: ClusterState, line: TopicLine, principal: Principal
) -> tuple[Any, ...]:
    """One topic line judged: a row of EVALUATED."""
    topic = line.state
    request = scan_request(topic, line.config_sources, principal)
    (verdict,) = judge(policy, (request,), AsIfCreated(cluster, topic.name))
    decision = verdict.decision
    assert decision is not None  # a create by name is always decided
    if decision.overrides:
        # The topic exists as it is: what the policy would have changed at its creation, it
        # does not comply with.
        changed = tuple(
            Violation(o.rule, f"[{o.rule}] {describe(topic.name, o)}") for o in decision.overrides
        )
        decision = replace(decision, allowed=False, violations=decision.violations + changed)
    violations = [
        {"rule": v.rule, "mode": v.mode.value, "message": v.message} for v in decision.violations
    ]
    return (
        line.cluster_id,
        topic.name,
        topic.partitions,
        topic.replication_factor,
        DECISIONS[outcome(decision)],
        list(dict.fromkeys(v.rule for v in decision.violations)),
        violations,
    )


def _evaluator(
    policy_text: str, policy_name: str, principal: str, clusters: Broadcast[dict[str, str]]
) -> Any:
    def evaluate(batches: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        # Compiled and rebuilt once per worker process, reused by every task and batch.
        policy = compiled(policy_text, policy_name)
        who = Principal(principal)
        # shipped_cluster hashes the whole text: look each cluster up once per task.
        rebuilt: dict[str, InMemoryCluster] = {}
        for batch in batches:
            rows = []
            for cluster_id, text in zip(batch["cluster_id"], batch["line"], strict=True):
                cluster = rebuilt.get(cluster_id)
                if cluster is None:
                    cluster = rebuilt[cluster_id] = shipped_cluster(clusters.value[cluster_id])
                line = parse_line(text)
                assert isinstance(line, TopicLine)  # only topic lines are sent here
                rows.append(scan_topic(policy, cluster, line, who))
            yield pd.DataFrame(rows, columns=EVALUATED.fieldNames())

    return evaluate


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


def _clusters(lines: DataFrame) -> tuple[dict[str, InMemoryCluster], dict[str, int]]:
    """Each cluster's facts on the driver (topic metadata, no configs), and its internal count."""
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
    internal: Counter[str] = Counter()
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
            internal[row["cluster_id"]] += is_internal(state.name, state.internal)
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
) -> dict[str, Any]:
    """Evaluate every existing topic of the snapshots against the policy; write the outputs."""
    policy_text = Path(policy_file).read_text(encoding="utf-8")
    policy = compiled(policy_text, policy_file)  # PolicyError, naming the file, before Spark
    lines = read_snapshot_lines(spark, snapshots).persist(StorageLevel.MEMORY_AND_DISK)
    evaluated: DataFrame | None = None
    shipped: Broadcast[dict[str, str]] | None = None
    try:
        problems = check_complete(lines)
        if problems:
            raise SnapshotError("; ".join(problems))
        warnings = _without_sources(lines)
        clusters, skipped = _clusters(lines)
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
                _evaluator(policy_text, str(Path(policy_file).resolve()), principal, shipped),
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
    summary = _summary(policy_file, snapshots, principal, out, results) | {"warnings": warnings}
    write_report(spark, out, "scan", _html(summary, results))
    write_text(spark, out, "summary.json", json.dumps(summary, indent=2, sort_keys=True) + "\n")
    return summary


@dataclass(frozen=True)
class _Results:
    """What the report needs from the tables, collected on the driver."""

    clusters: list[dict[str, Any]]  # one row of CLUSTERS per cluster
    by_rule: list[dict[str, Any]]  # rule, mode, violations, topics; in policy order
    shown: list[dict[str, Any]]  # the first violations, by cluster, topic and rule order


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
_DECISION_COLUMNS = {"compliant": COMPLIANT, "violating": VIOLATING, "audit_only": AUDIT_ONLY}
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
    violations = evaluated.select(
        "cluster_id", "topic", F.posexplode("violations").alias("position", "v")
    ).select("cluster_id", "topic", "position", "v.rule", "v.mode", "v.message")
    violations.drop("position").write.mode("overwrite").parquet(f"{base}/violations")

    counts = {
        r["cluster_id"]: r.asDict()
        for r in evaluated.groupBy("cluster_id")
        .agg(
            F.count("*").alias("topics"),
            *(
                F.sum((F.col("decision") == decision).cast("long")).alias(column)
                for column, decision in _DECISION_COLUMNS.items()
            ),
            F.sum(F.size("violations")).alias("violations"),
        )
        .collect()
    }
    rows = [
        {
            "cluster_id": cluster_id,
            "brokers": clusters[cluster_id].broker_count(),
            **{key: counts.get(cluster_id, {}).get(key, 0) for key in _COUNTED},
            "skipped_internal": skipped[cluster_id],
        }
        for cluster_id in sorted(clusters)
    ]
    spark.createDataFrame(
        [tuple(r[f] for f in CLUSTERS.fieldNames()) for r in rows], CLUSTERS
    ).write.mode("overwrite").parquet(f"{base}/clusters")

    by_rule = violations.groupBy("rule", "mode").agg(
        F.count("*").alias("violations"), F.countDistinct("cluster_id", "topic").alias("topics")
    )
    order = {rule: i for i, rule in enumerate(rule_names)}
    shown = violations.orderBy("cluster_id", "topic", "position").limit(VIOLATIONS_SHOWN)
    return _Results(
        rows,
        sorted(
            (r.asDict() for r in by_rule.collect()),
            key=lambda r: (order.get(r["rule"], len(order)), r["mode"]),
        ),
        [r.asDict() for r in shown.drop("position").collect()],
    )


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


def _html(summary: Mapping[str, Any], results: _Results) -> Report:
    principal = summary["principal"]
    notes = [
        f"Policy {summary['policy']}; snapshots: {', '.join(summary['snapshots'])}.",
        f"Every topic is evaluated as if {principal} created it now, with its current "
        "partition count, replication factor and configs, in the cluster made of the other "
        "topics of its snapshot. Existing topics have no creator: rules that select "
        f"principals apply as they would to {principal}.",
        "Replica placement counts as the broker's, so rules against explicit assignments flag "
        "no existing topic. Configs set on the topic (DYNAMIC_TOPIC_CONFIG) count as set in "
        "the request; the others as the broker defaults the topic gets.",
        "A cluster over a cluster-wide limit has every topic flagged by that rule: none of "
        "them could be created today.",
        f"Internal topics are not evaluated: {summary['skipped_internal']:,} skipped.",
        *(f"Warning: {w}." for w in summary["warnings"]),
    ]
    parts: list[Table | Chart] = []
    if results.by_rule:
        largest = sorted(results.by_rule, key=lambda r: -r["violations"])
        parts.append(
            bar_chart(
                "Violations by rule",
                [r["rule"] for r in largest],
                [r["violations"] for r in largest],
                "violations",
            )
        )
    parts.append(
        Table(
            "Rules",
            ("rule", "mode", "violations", "topics"),
            [(r["rule"], r["mode"], r["violations"], r["topics"]) for r in results.by_rule],
            empty="no topic breaks the policy",
        )
    )
    parts.append(
        Table(
            "Clusters",
            (
                "cluster",
                "brokers",
                "topics",
                "compliant",
                "violating",
                "audit-only",
                "internal skipped",
                "violations",
            ),
            [
                (
                    r["cluster_id"],
                    r["brokers"],
                    r["topics"],
                    r["compliant"],
                    r["violating"],
                    r["audit_only"],
                    r["skipped_internal"],
                    r["violations"],
                )
                for r in results.clusters
            ],
        )
    )
    total = summary["violations"]
    title = "Violations"
    if total > len(results.shown):
        title = f"Violations: the first {len(results.shown):,} of {total:,} (all in violations/)"
    parts.append(
        Table(
            title,
            ("cluster", "topic", "rule", "mode", "message"),
            [
                (r["cluster_id"], r["topic"], r["rule"], r["mode"], r["message"])
                for r in results.shown
            ],
            empty="no violations",
        )
    )
    figures = [
        ("Clusters", summary["clusters"]),
        ("Topics scanned", summary["topics"]),
        ("Violating", summary["violating"]),
        ("Audit-only", summary["audit_only"]),
        ("Compliant", summary["compliant"]),
        ("Internal skipped", summary["skipped_internal"]),
        ("Violations", total),
    ]
    return Report("Policy scan of existing topics", figures, notes, parts)
