"""What the scan tests share: clusters as snapshots record them, and the scan's expected answer
computed straight with the engine."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession

from kafka_policy_proxy.policy.cluster import InMemoryCluster, is_internal
from kafka_policy_proxy.policy.loader import load_policy
from kafka_policy_proxy.policy.model import (
    Action,
    ConfigChange,
    ConfigMap,
    ConfigOp,
    ConfigSource,
    Principal,
    RequestedState,
    TopicRequest,
    TopicState,
)

REPO = Path(__file__).resolve().parents[4]
EXAMPLE_POLICY = REPO / "examples" / "policy.yaml"
DAY_MS = 86_400_000
PROD_DEFAULTS = {
    "retention.ms": str(7 * DAY_MS),
    "cleanup.policy": "delete",
    "min.insync.replicas": "2",
    "unclean.leader.election.enable": "false",
    "max.message.bytes": "1048588",
    "compression.type": "producer",
    "segment.bytes": "1073741824",
    "segment.ms": str(7 * DAY_MS),
}
STAGING_DEFAULTS = PROD_DEFAULTS | {"min.insync.replicas": "1"}
SMALL_POLICY = """\
version: 1
rules:
  - name: topic-limit
    cluster: {max_topics: 3}
  - name: partition-budget
    cluster: {max_total_partitions: 12}
  - name: placement
    replication: {explicit_assignment: false}
"""


@dataclass(frozen=True)
class Topic:
    """A topic as a snapshot records it; `overrides` are the configs set on the topic."""

    name: str
    partitions: int = 6
    replication_factor: int = 3
    overrides: dict[str, str] = field(default_factory=dict)
    internal: bool = False


@dataclass(frozen=True)
class Cluster:
    """A cluster as a snapshot records it."""

    cluster_id: str
    brokers: int
    defaults: dict[str, str]
    topics: Sequence[Topic]


def assignment(topic: Topic, brokers: int) -> list[list[Any]]:
    """Replicas spread over the brokers, as the broker would place them."""
    return [
        [p, [(p + k) % brokers + 1 for k in range(topic.replication_factor)]]
        for p in range(topic.partitions)
    ]


def snapshot_lines(cluster: Cluster, *, declared: int | None = None) -> list[str]:
    """The snapshot of `cluster` as JSON Lines (docs/snapshot.md's format)."""
    lines: list[dict[str, Any]] = [
        {
            "kind": "cluster",
            "schema": 1,
            "cluster_id": cluster.cluster_id,
            "taken_at": "2026-11-22T04:47:01.123456Z",
            "bootstrap_servers": "b:9092",
            "controller_id": 1,
            "brokers": [
                {"id": i, "host": "b", "port": 9092, "rack": None}
                for i in range(1, cluster.brokers + 1)
            ],
            "defaults": cluster.defaults,
        }
    ]
    for topic in cluster.topics:
        sources = {k: "STATIC_BROKER_CONFIG" for k in cluster.defaults}
        sources |= {k: "DYNAMIC_TOPIC_CONFIG" for k in topic.overrides}
        lines.append(
            {
                "kind": "topic",
                "cluster_id": cluster.cluster_id,
                "name": topic.name,
                "topic_id": f"id-{cluster.cluster_id}-{topic.name}",
                "partitions": topic.partitions,
                "replication_factor": topic.replication_factor,
                "assignment": assignment(topic, cluster.brokers),
                "configs": cluster.defaults | topic.overrides,
                "config_sources": sources,
                "internal": topic.internal,
                "marked_for_deletion": False,
            }
        )
    count = len(cluster.topics) if declared is None else declared
    lines.append({"kind": "end", "cluster_id": cluster.cluster_id, "topics": count})
    return [json.dumps(line) for line in lines]


def write_snapshots(directory: Path, clusters: Iterable[Cluster]) -> list[str]:
    """One snapshot file per cluster; returns their paths."""
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for cluster in clusters:
        path = directory / f"{cluster.cluster_id}.jsonl"
        path.write_text("\n".join(snapshot_lines(cluster)) + "\n")
        paths.append(str(path))
    return paths


PROD = Cluster(
    "prod",
    3,
    PROD_DEFAULTS,
    [
        Topic("orders.v1"),
        Topic("Orders-Legacy"),
        Topic("payments.refunds", partitions=1),
        Topic("logs.audit", replication_factor=2),
        Topic("metrics.raw", overrides={"retention.ms": str(90 * DAY_MS)}),
        Topic("billing.v1"),
        Topic("billing_v1"),
        Topic("sandbox.alice", overrides={"retention.ms": str(2 * DAY_MS)}),
        Topic("events.clicks", overrides={"unclean.leader.election.enable": "true"}),
        Topic("events.views", overrides={"segment.ms": "60000"}),
        Topic("__consumer_offsets", partitions=50, internal=True),
        Topic("__canary", partitions=1),
    ],
)
STAGING = Cluster(
    "staging",
    1,
    STAGING_DEFAULTS,
    [Topic("staging.orders", partitions=3, replication_factor=1), Topic("billing.v1", 3, 1)],
)
EMPTY = Cluster("empty", 3, PROD_DEFAULTS, [])

# Derived by hand from examples/policy.yaml, for the default principal.
EXPECTED_RULES = {
    ("prod", "orders.v1"): [],
    ("prod", "Orders-Legacy"): ["topic-naming"],
    ("prod", "payments.refunds"): ["partition-count"],
    ("prod", "logs.audit"): ["replication"],
    ("prod", "metrics.raw"): ["retention-bounds"],
    ("prod", "billing.v1"): ["metric-name-collision"],
    ("prod", "billing_v1"): ["topic-naming", "metric-name-collision"],
    ("prod", "sandbox.alice"): ["sandbox-retention"],
    ("prod", "events.clicks"): ["durability"],
    ("prod", "events.views"): ["segment-size"],
    # Named like Kafka's own, but not one of them nor flagged internal: judged like any topic.
    ("prod", "__canary"): ["topic-naming", "partition-count"],
    ("staging", "staging.orders"): ["replication", "durability"],
    ("staging", "billing.v1"): ["replication", "durability"],
}


def engine_violations(
    policy_text: str, clusters: Iterable[Cluster], principal: str
) -> list[tuple[str, str, str, str, str]]:
    """The violations computed straight with the engine: each non-internal topic created in a
    cluster of the other topics, its overrides named, its placement left to the broker."""
    policy = load_policy(policy_text, "policy")
    rows = []
    for cluster in clusters:
        states = {
            t.name: TopicState(
                name=t.name,
                partitions=t.partitions,
                replication_factor=t.replication_factor,
                configs=ConfigMap(cluster.defaults | t.overrides),
                internal=t.internal,
            )
            for t in cluster.topics
        }
        for topic in cluster.topics:
            if is_internal(topic.name, topic.internal):
                continue
            others = [s for name, s in states.items() if name != topic.name]
            request = TopicRequest(
                topic=topic.name,
                action=Action.CREATE,
                principal=Principal(principal),
                requested=RequestedState(
                    partitions=topic.partitions,
                    replication_factor=topic.replication_factor,
                    generated_assignment=True,
                    configs=ConfigMap(cluster.defaults | topic.overrides),
                    changes=tuple(
                        ConfigChange(k, ConfigOp.SET, v) for k, v in topic.overrides.items()
                    ),
                    config_source=ConfigSource.CREATE,
                ),
            )
            decision = policy.evaluate(
                request, InMemoryCluster.of(others, cluster.brokers, cluster.defaults)
            )
            rows += [
                (cluster.cluster_id, topic.name, v.rule, v.mode.value, v.message)
                for v in decision.violations
            ]
    return sorted(rows)


def table(spark: SparkSession, out: Path, name: str) -> list[dict[str, Any]]:
    """A Parquet output as dicts."""
    return [r.asDict(recursive=True) for r in spark.read.parquet(str(out / name)).collect()]


def violation_rows(spark: SparkSession, out: Path) -> list[tuple[str, str, str, str, str]]:
    """The violations table as sorted tuples."""
    return sorted(
        (r["cluster_id"], r["topic"], r["rule"], r["mode"], r["message"])
        for r in table(spark, out, "violations")
    )
