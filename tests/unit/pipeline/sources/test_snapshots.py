"""Reading snapshots: complete ones become clusters; incomplete or bad ones are refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from kafka_policy_proxy.pipeline.sources.snapshots import SnapshotError, read_clusters


def _snapshot(cluster_id: str, topics: list[tuple[str, int]], *, end: bool = True) -> list[str]:
    lines = [
        {
            "kind": "cluster",
            "schema": 1,
            "cluster_id": cluster_id,
            "taken_at": "2026-11-22T04:47:01.123456Z",
            "bootstrap_servers": "b:9092",
            "controller_id": 1,
            "brokers": [{"id": i, "host": "b", "port": 9092, "rack": None} for i in (1, 2, 3)],
            "defaults": {"retention.ms": "604800000"},
        }
    ]
    for name, partitions in topics:
        lines.append(
            {
                "kind": "topic",
                "cluster_id": cluster_id,
                "name": name,
                "topic_id": f"id-{name}",
                "partitions": partitions,
                "replication_factor": 3,
                "assignment": [[p, [1, 2, 3]] for p in range(partitions)],
                "configs": {"retention.ms": "86400000"},
                "config_sources": {"retention.ms": "DYNAMIC_TOPIC_CONFIG"},
                "internal": name.startswith("__"),
                "marked_for_deletion": False,
            }
        )
    if end:
        lines.append({"kind": "end", "cluster_id": cluster_id, "topics": len(topics)})
    return [json.dumps(line) for line in lines]


def test_complete_snapshots_become_clusters(spark: SparkSession, tmp_path: Path) -> None:
    (tmp_path / "a.jsonl").write_text("\n".join(_snapshot("A", [("x", 3), ("__y", 50)])) + "\n")
    (tmp_path / "b.jsonl").write_text("\n".join(_snapshot("B", [])) + "\n")
    clusters = read_clusters(spark, [str(tmp_path)])
    assert set(clusters) == {"A", "B"}
    a = clusters["A"]
    assert a.broker_count() == 3
    assert a.total_partitions() == 53
    assert a.topic_names() == frozenset({"x"})
    assert a.topic_names(include_internal=True) == frozenset({"x", "__y"})
    topic = a.topic("x")
    assert topic is not None
    assert topic.configs["retention.ms"] == "86400000"
    assert topic.assignment[2] == (2, (1, 2, 3))
    assert a.broker_default_configs() == {"retention.ms": "604800000"}
    assert clusters["B"].topic_names(include_internal=True) == frozenset()


@pytest.mark.parametrize(
    ("lines", "problem"),
    [
        (_snapshot("A", [("x", 1)], end=False), "no end line"),
        (_snapshot("A", [("x", 1)])[:1] + _snapshot("A", [("x", 1)])[2:], "0 topic lines"),
        ([*_snapshot("A", [("x", 1)]), "{oops"], "not a snapshot line"),
        (_snapshot("A", [])[1:], "0 cluster lines"),
        (
            _snapshot("A", [("x", 1), ("y", 2)])[:2] + _snapshot("A", [("x", 2), ("y", 1)])[1:],
            "topic x given 2 times",
        ),
        (
            _snapshot("A", [("x", 1)])[:2] + _snapshot("B", [("y", 1)])[1:2]
            + _snapshot("A", [("x", 1), ("y", 1)])[-1:],
            "lines of 2 clusters",
        ),
    ],
)  # fmt: skip
def test_bad_snapshots_are_refused(
    spark: SparkSession, tmp_path: Path, lines: list[str], problem: str
) -> None:
    (tmp_path / "s.jsonl").write_text("\n".join(lines) + "\n")
    with pytest.raises(SnapshotError, match=problem):
        read_clusters(spark, [str(tmp_path / "s.jsonl")])


def test_a_snapshot_line_that_is_not_utf8_is_refused_not_a_crash(
    spark: SparkSession, tmp_path: Path
) -> None:
    text = "\n".join(_snapshot("A", [("x", 1)])) + "\n"
    (tmp_path / "s.jsonl").write_bytes(
        text.replace('"x"', '"x\udcff"').encode("utf-8", "surrogateescape")
    )
    with pytest.raises(SnapshotError, match=r"1 line\(s\): not valid UTF-8"):
        read_clusters(spark, [str(tmp_path / "s.jsonl")])
