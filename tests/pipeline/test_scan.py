"""The scan job: every existing topic judged as if created now, in the cluster of the others."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from pipeline.scan import run_scan
from pipeline.snapshots import SnapshotError
from policy.builders import create_request
from policy.cluster import InMemoryCluster, is_internal
from policy.loader import PolicyError, load_policy
from policy.model import (
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
from policy.overlays import OtherTopics

REPO = Path(__file__).resolve().parents[2]
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
    """The snapshot of `cluster` as JSON Lines (pipeline/snapshots.py's format)."""
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


@pytest.mark.parametrize("principal", ["User:ANONYMOUS", "User:platform-admin"])
def test_example_policy_violations_match_the_engine(
    spark: SparkSession, tmp_path: Path, principal: str
) -> None:
    paths = write_snapshots(tmp_path / "snapshots", [PROD, STAGING, EMPTY])
    out = tmp_path / "out"
    summary = run_scan(spark, str(EXAMPLE_POLICY), paths, str(out), principal=principal)

    expected = engine_violations(EXAMPLE_POLICY.read_text(), [PROD, STAGING, EMPTY], principal)
    assert violation_rows(spark, out) == expected
    topics = {(r["cluster_id"], r["topic"]): r for r in table(spark, out, "topics")}
    assert set(topics) == set(EXPECTED_RULES)
    if principal == "User:ANONYMOUS":
        assert {k: r["rules"] for k, r in topics.items()} == EXPECTED_RULES
        assert topics["prod", "orders.v1"]["decision"] == "compliant"
        assert topics["prod", "events.views"]["decision"] == "audit-only"
        assert topics["prod", "billing_v1"]["decision"] == "violating"
        messages = {(c, t, rule): m for c, t, rule, _, m in expected}
        assert (
            "sets retention.ms to 7776000000 (90d)"
            in messages["prod", "metrics.raw", "retention-bounds"]
        )
        assert (
            "gets the broker default min.insync.replicas = 1"
            in messages["staging", "staging.orders", "durability"]
        )
        assert (
            "collides with existing topic 'billing_v1'"
            in (messages["prod", "billing.v1", "metric-name-collision"])
        )
    else:
        # The platform team is exempt from naming, partition count and replication.
        assert all(
            not {"topic-naming", "partition-count", "replication"} & set(r["rules"])
            for r in topics.values()
        )
    assert topics["prod", "payments.refunds"]["partitions"] == 1
    assert topics["prod", "logs.audit"]["replication_factor"] == 2

    clusters = {r["cluster_id"]: r for r in table(spark, out, "clusters")}
    assert clusters["prod"]["topics"] == 11
    assert clusters["prod"]["skipped_internal"] == 1
    assert clusters["prod"]["brokers"] == 3
    assert clusters["empty"] == {
        "cluster_id": "empty",
        "brokers": 3,
        "topics": 0,
        "compliant": 0,
        "violating": 0,
        "audit_only": 0,
        "skipped_internal": 0,
        "violations": 0,
    }
    decisions = [r["decision"] for r in topics.values()]
    assert summary["topics"] == 13
    assert summary["violations"] == len(expected)
    assert summary["violating"] == decisions.count("violating")
    assert summary["audit_only"] == decisions.count("audit-only")
    assert summary["compliant"] == decisions.count("compliant")
    assert summary["skipped_internal"] == 1
    assert summary["principal"] == principal
    assert sum(summary["violations_by_rule"].values()) == len(expected)
    assert json.loads((out / "summary.json").read_text()) == summary
    html = (out / "scan.html").read_text()
    assert principal in html
    assert "metrics.raw" in html
    assert "data:image/png;base64," in html


def test_cluster_facts_exclude_the_topic_under_evaluation(
    spark: SparkSession, tmp_path: Path
) -> None:
    policy = tmp_path / "small.yaml"
    policy.write_text(SMALL_POLICY)
    at_limit = Cluster("at-limit", 3, {}, [Topic(f"t{i}", 4) for i in range(3)])
    over = Cluster("over", 3, {}, [Topic(f"u{i}", 3) for i in range(4)])
    crowded = Cluster("crowded", 3, {}, [Topic(f"v{i:03}", 1) for i in range(205)])
    paths = write_snapshots(tmp_path / "snapshots", [at_limit, over, crowded])
    out = tmp_path / "out"
    summary = run_scan(spark, str(policy), paths, str(out))

    expected = []
    for topic in over.topics:
        expected.append(
            ("over", topic.name, "topic-limit", "enforce",
             f"[topic-limit] topic {topic.name!r} would be topic number 4; the limit is 3 topics")
        )  # fmt: skip
    for topic in crowded.topics:
        expected.append(
            ("crowded", topic.name, "topic-limit", "enforce",
             f"[topic-limit] topic {topic.name!r} would be topic number 205; the limit is 3 "
             "topics")
        )  # fmt: skip
        expected.append(
            ("crowded", topic.name, "partition-budget", "enforce",
             f"[partition-budget] topic {topic.name!r} would bring the cluster to 205 "
             "partitions; the budget is 12")
        )  # fmt: skip
    assert violation_rows(spark, out) == sorted(expected)
    assert violation_rows(spark, out) == engine_violations(
        SMALL_POLICY, [at_limit, over, crowded], "User:ANONYMOUS"
    )
    assert summary["violations"] == 414
    assert summary["by_cluster"]["at-limit"]["compliant"] == 3
    html = (out / "scan.html").read_text()
    assert "the first 200 of 414" in html
    assert html.count("would be topic number") + html.count("would bring the cluster") == 200


def test_a_snapshot_without_config_sources_warns_and_judges_only_values(
    spark: SparkSession, tmp_path: Path
) -> None:
    directory = tmp_path / "snapshots"
    paths = write_snapshots(directory, [PROD, STAGING])
    prod = directory / "prod.jsonl"
    lines = [json.loads(line) for line in prod.read_text().splitlines()]
    for line in lines:
        line.pop("config_sources", None)
    prod.write_text("".join(json.dumps(line) + "\n" for line in lines))
    out = tmp_path / "out"
    summary = run_scan(spark, str(EXAMPLE_POLICY), paths, str(out))

    (warning,) = summary["warnings"]
    assert warning.startswith(f"{prod.as_uri()}: 12 topic line(s) without config_sources")
    assert "`required` and `forbidden` are not judged" in warning
    topics = {(r["cluster_id"], r["topic"]): r["rules"] for r in table(spark, out, "topics")}
    # The unclean election set on events.clicks is `forbidden`: not judged without sources.
    assert topics["prod", "events.clicks"] == []
    assert topics["prod", "metrics.raw"] == ["retention-bounds"]
    messages = {(c, t, rule): m for c, t, rule, _, m in violation_rows(spark, out)}
    assert messages["prod", "metrics.raw", "retention-bounds"] == (
        "[retention-bounds] topic 'metrics.raw' has retention.ms = 7776000000 (90d); "
        "the limit is 2592000000 (30d)"
    )
    assert not any("broker default" in m or " sets " in m for (c, *_), m in messages.items()
                   if c == "prod")  # fmt: skip
    # The snapshot with sources is judged as before.
    assert (
        "gets the broker default min.insync.replicas = 1"
        in (messages["staging", "staging.orders", "durability"])
    )
    assert f"Warning: {warning}." in (out / "scan.html").read_text()


def test_an_empty_cluster_gives_an_empty_report(spark: SparkSession, tmp_path: Path) -> None:
    paths = write_snapshots(tmp_path / "snapshots", [EMPTY])
    out = tmp_path / "out"
    summary = run_scan(spark, str(EXAMPLE_POLICY), paths, str(out))
    assert summary["clusters"] == 1
    assert summary["topics"] == summary["violations"] == 0
    assert summary["violations_by_rule"] == {}
    assert table(spark, out, "violations") == []
    assert table(spark, out, "topics") == []
    assert [r["topics"] for r in table(spark, out, "clusters")] == [0]
    assert "no topic breaks the policy" in (out / "scan.html").read_text()


@pytest.mark.parametrize(
    ("files", "problem"),
    [
        ({"prod.jsonl": snapshot_lines(PROD, declared=13)}, "the snapshot is incomplete"),
        ({"prod.jsonl": snapshot_lines(PROD)[:-1]}, "no end line"),
        (
            {"a.jsonl": snapshot_lines(STAGING), "b.jsonl": snapshot_lines(STAGING)},
            "cluster staging is in 2 snapshots",
        ),
        (
            {"mixed.jsonl": snapshot_lines(STAGING)[:1] + snapshot_lines(PROD)[1:3]
             + snapshot_lines(STAGING)[-1:]},
            "lines of 2 clusters",
        ),
        (
            # A topic twice: the clusters replay builds would keep one of the two lines.
            {"prod.jsonl": [*snapshot_lines(PROD, declared=len(PROD.topics) + 1)[:-1],
                            snapshot_lines(PROD)[1],
                            snapshot_lines(PROD, declared=len(PROD.topics) + 1)[-1]]},
            "given 2 times",
        ),
    ],
)  # fmt: skip
def test_bad_snapshots_are_refused(
    spark: SparkSession, tmp_path: Path, files: dict[str, list[str]], problem: str
) -> None:
    for name, lines in files.items():
        (tmp_path / name).write_text("\n".join(lines) + "\n")
    with pytest.raises(SnapshotError, match=problem):
        run_scan(spark, str(EXAMPLE_POLICY), [str(tmp_path)], str(tmp_path / "out"))
    assert not (tmp_path / "out").exists()


def test_a_bad_policy_is_refused_naming_the_file(spark: SparkSession, tmp_path: Path) -> None:
    policy = tmp_path / "bad.yaml"
    policy.write_text("version: 1\nrules:\n  - name: x\n    partitions: {min: 0}\n")
    paths = write_snapshots(tmp_path / "snapshots", [STAGING])
    with pytest.raises(PolicyError, match=r"bad\.yaml"):
        run_scan(spark, str(policy), paths, str(tmp_path / "out"))


def test_the_collision_rule_answers_for_the_names_it_is_handed() -> None:
    """The scan hands out "every topic but this one" per topic; the collision index built for
    the first is reused for the others, and never answers for names it was not handed."""
    policy = load_policy("version: 1\nrules:\n  - name: collision\n    name_collision: true\n")

    def rules(name: str, cluster: InMemoryCluster | OtherTopics) -> list[str]:
        request = create_request(name, principal=Principal())
        return [v.rule for v in policy.evaluate(request, cluster).violations]

    full = InMemoryCluster.of([TopicState("a.b"), TopicState("a_b"), TopicState("x")])
    assert rules("x", OtherTopics(full, "x")) == []
    assert rules("a.b", OtherTopics(full, "a.b")) == ["collision"]
    assert rules("a_b", OtherTopics(full, "a_b")) == ["collision"]
    assert OtherTopics(full, "a_b").topic_names(include_internal=True) == {"a.b", "x"}
    # a_b deleted, then c_d created: fewer names reuse the index, new ones rebuild it.
    assert rules("a.b", InMemoryCluster.of([TopicState("a.b")])) == []
    assert rules("c.d", InMemoryCluster.of([TopicState("a.b"), TopicState("c_d")])) == ["collision"]
