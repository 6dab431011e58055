"""The snapshot format parser: complete snapshots become clusters; incomplete ones are refused."""

from __future__ import annotations

import json
from typing import Any

import pytest

from kafka_policy_proxy.policy.cluster import InMemoryCluster
from kafka_policy_proxy.policy.offline.snapshot_format import (
    SnapshotError,
    TopicLine,
    parse_line,
    parse_snapshot,
)


def snapshot(*topics: tuple[str, int, bool]) -> list[str]:
    """A snapshot as `kafka-policy-proxy snapshot` writes it (docs/snapshot.md)."""
    lines: list[dict[str, Any]] = [
        {
            "kind": "cluster",
            "schema": 1,
            "cluster_id": "C1",
            "taken_at": "2026-11-22T06:18:59.335506Z",
            "bootstrap_servers": "k:9092",
            "controller_id": 1,
            "brokers": [{"id": i, "host": "k", "port": 9092, "rack": None} for i in (1, 2, 3)],
            "defaults": {"num.partitions": "1", "retention.ms": "604800000"},
        }
    ]
    for name, partitions, internal in topics:
        lines.append(
            {
                "kind": "topic",
                "cluster_id": "C1",
                "name": name,
                "topic_id": f"id-{name}",
                "partitions": partitions,
                "replication_factor": 3,
                "assignment": [[p, [1, 2, 3]] for p in range(partitions)],
                "configs": {"retention.ms": "86400000"},
                "config_sources": {"retention.ms": "DYNAMIC_TOPIC_CONFIG"},
                "internal": internal,
                "marked_for_deletion": False,
            }
        )
    lines.append({"kind": "end", "cluster_id": "C1", "topics": len(topics)})
    return [json.dumps(line, separators=(",", ":")) for line in lines]


def _twice(lines: list[str], old: str, new: str) -> list[str]:
    """The snapshot with its third line's `old` (a name or topic id) replaced by `new`."""
    return [*lines[:2], lines[2].replace(f'"{old}"', f'"{new}"'), *lines[3:]]


def test_a_complete_snapshot_is_the_cluster_it_describes() -> None:
    parsed = parse_snapshot(snapshot(("orders", 3, False), ("__consumer_offsets", 50, True)))
    cluster = parsed.cluster
    assert parsed.cluster_id == "C1"
    assert cluster.broker_count() == 3
    assert cluster.total_partitions() == 53
    assert cluster.topic_names() == {"orders"}
    assert cluster.topic_names(include_internal=True) == {"orders", "__consumer_offsets"}
    assert cluster.broker_default_configs()["num.partitions"] == "1"
    orders = cluster.topic_by_id("id-orders")
    assert orders is not None and orders.configs["retention.ms"] == "86400000"
    assert orders.assignment[2] == (2, (1, 2, 3))


def test_a_topic_line_keeps_its_config_sources() -> None:
    line = parse_line(snapshot(("orders", 1, False))[1])
    assert isinstance(line, TopicLine)
    assert line.config_sources == {"retention.ms": "DYNAMIC_TOPIC_CONFIG"}
    assert line.state.name == "orders" and line.cluster_id == "C1"


def test_the_configs_set_on_the_topic_are_its_overrides() -> None:
    data = json.loads(snapshot(("orders", 1, False))[1])
    data["configs"]["cleanup.policy"] = "delete"
    data["config_sources"]["cleanup.policy"] = "DYNAMIC_DEFAULT_BROKER_CONFIG"
    line = parse_line(json.dumps(data))
    assert isinstance(line, TopicLine)
    assert line.state.overrides == {"retention.ms"}
    assert line.state.inherits("cleanup.policy") and not line.state.inherits("retention.ms")
    # Shipped to the Spark workers as the cluster's JSON, the overrides travel along.
    shipped = InMemoryCluster.from_dict(InMemoryCluster.of([line.state]).to_dict())
    assert shipped.topic("orders") == line.state


def test_a_line_without_config_sources_leaves_inheritance_unknown() -> None:
    data = json.loads(snapshot(("orders", 1, False))[1])
    del data["config_sources"]
    line = parse_line(json.dumps(data))
    assert isinstance(line, TopicLine)
    assert line.state.overrides is None and line.state.inherits("retention.ms")
    assert line.config_sources is None


def test_config_sources_that_are_not_an_object_are_refused() -> None:
    data = json.loads(snapshot(("orders", 1, False))[1])
    data["config_sources"] = ["DYNAMIC_TOPIC_CONFIG"]
    with pytest.raises(SnapshotError, match="bad topic line"):
        parse_line(json.dumps(data))


@pytest.mark.parametrize(
    ("lines", "problem"),
    [
        (snapshot(("x", 1, False))[:-1], "no end line"),
        (snapshot(("x", 1, False))[:1] + snapshot(("x", 1, False))[2:], "0 topic lines"),
        (snapshot(("x", 1, False))[1:], "the cluster line must come first"),
        ([*snapshot()[:1], *snapshot()], "the cluster line must come first, and once"),
        ([*snapshot(), snapshot()[0]], "a line after the end line"),
        (["{oops", *snapshot()], "line 1: not a snapshot line"),
        ([snapshot()[0].replace('"schema":1', '"schema":2'), *snapshot()[1:]], "schema 2"),
        ([*snapshot()[:1], '{"kind":"topic","cluster_id":"C1"}'], "bad topic line"),
        ([*snapshot()[:1], '{"kind":"broker"}', *snapshot()[1:]], "unknown line kind"),
        (_twice(snapshot(("x", 1, False), ("y", 1, False)), "y", "x"), "line 3: topic x given"),
        (
            _twice(snapshot(("x", 1, False), ("y", 1, False)), "id-y", "id-x"),
            "line 3: topic id id-x given twice",
        ),
        (
            [*snapshot(("x", 1, False))[:1], snapshot(("x", 1, False))[1].replace("C1", "C2"),
             *snapshot(("x", 1, False))[2:]],
            "line 2: a line of cluster C2 in the snapshot of cluster C1",
        ),
    ],
)  # fmt: skip
def test_bad_snapshots_are_refused(lines: list[str], problem: str) -> None:
    with pytest.raises(SnapshotError, match=problem):
        parse_snapshot(lines)
