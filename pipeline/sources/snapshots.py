"""Reading cluster snapshots (docs/snapshot.md): one cluster line, topic lines, an end line."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import BooleanType, LongType, StringType, StructField, StructType

from kafka_policy_proxy.policy.cluster import InMemoryCluster
from kafka_policy_proxy.policy.model import TopicState
from kafka_policy_proxy.policy.offline.snapshot_format import (
    ClusterLine,
    SnapshotError,
    TopicLine,
    parse_line,
    snapshot_cluster,
)

__all__ = ["SnapshotError", "check_complete", "read_clusters", "read_snapshot_lines"]

KINDS = ("cluster", "topic", "end")

# Only what routing and checks need; the full line goes to Python as text.
_HEAD = StructType(
    [
        StructField("kind", StringType()),
        StructField("cluster_id", StringType()),
        StructField("name", StringType()),
        StructField("topic_id", StringType()),
        StructField("partitions", LongType()),
        StructField("internal", BooleanType()),
        StructField("topics", LongType()),
    ]
)


def read_snapshot_lines(spark: SparkSession, paths: Sequence[str]) -> DataFrame:
    """Every snapshot line: source, line, kind, cluster_id, name, partitions, internal, problem."""
    lines = spark.read.text(list(paths)).select(
        F.input_file_name().alias("source"), F.col("value").alias("line")
    )
    head = F.from_json("line", _HEAD)
    parsed = (
        lines.where(F.trim("line") != "")
        .withColumn("head", head)
        .select("source", "line", "head.*")
    )
    problem = (
        # Before anything reads the text: Python cannot take a line that is not UTF-8.
        F.when(~F.is_valid_utf8("line"), F.lit("not valid UTF-8"))
        .when(F.col("kind").isNull(), F.lit("not a snapshot line"))
        .when(~F.col("kind").isin(*KINDS), F.format_string("unknown line kind %s", "kind"))
        .when(F.col("cluster_id").isNull(), F.lit("missing field cluster_id"))
        .when((F.col("kind") == "topic") & F.col("name").isNull(), F.lit("missing field name"))
    )
    return parsed.withColumn("problem", problem)


def check_complete(lines: DataFrame) -> list[str]:
    """Why the snapshots are not usable, if so: bad lines, no cluster or end line, a wrong
    count, clusters mixed in a file or given in two, a topic (or topic id) given twice."""
    bad = [
        f"{r['source']}: {r['count']} line(s): {r['problem']}"
        for r in lines.where(F.col("problem").isNotNull())
        .groupBy("source", "problem")
        .count()
        .collect()
    ]
    problems = []
    files = lines.groupBy("source").agg(
        F.sum(F.when(F.col("kind") == "cluster", 1).otherwise(0)).alias("clusters"),
        F.sum(F.when(F.col("kind") == "topic", 1).otherwise(0)).alias("topic_lines"),
        F.max(F.when(F.col("kind") == "end", F.col("topics"))).alias("declared"),
    )
    for row in files.collect():
        if row["clusters"] != 1:
            problems.append(f"{row['source']}: {row['clusters']} cluster lines, expected 1")
        if row["declared"] is None:
            problems.append(f"{row['source']}: no end line: the snapshot is incomplete")
        elif row["declared"] != row["topic_lines"]:
            problems.append(
                f"{row['source']}: {row['topic_lines']} topic lines, the end line says "
                f"{row['declared']}: the snapshot is incomplete"
            )
    if bad:
        return sorted(bad + problems)  # lines unread: nothing more to say about their clusters
    return sorted(problems + _structure_problems(lines) + _given_twice(lines))


def _structure_problems(lines: DataFrame) -> list[str]:
    """Snapshots that mix clusters in one file, or give one cluster in several files."""
    ids: dict[str, set[str]] = defaultdict(set)
    sources: dict[str, set[str]] = defaultdict(set)
    heads = (F.col("kind") == "cluster").alias("head")
    for row in lines.select("source", "cluster_id", heads).distinct().collect():
        ids[row["source"]].add(row["cluster_id"])
        if row["head"]:
            sources[row["cluster_id"]].add(row["source"])
    problems = [
        f"{source}: lines of {len(found)} clusters ({', '.join(sorted(found))}), expected 1"
        for source, found in ids.items()
        if len(found) > 1
    ]
    problems += [
        f"cluster {cluster_id} is in {len(found)} snapshots ({', '.join(sorted(found))}): "
        "give one snapshot per cluster"
        for cluster_id, found in sources.items()
        if len(found) > 1
    ]
    return problems


def _given_twice(lines: DataFrame) -> list[str]:
    # A cluster's topics by name (and by id) would keep one line of two: scan judged both.
    problems = []
    topics = lines.where(F.col("kind") == "topic")
    for key in ("name", "topic_id"):
        for row in (
            topics.where(F.col(key).isNotNull())
            .groupBy("source", key)
            .count()
            .where(F.col("count") > 1)
            .orderBy("source", key)
            .limit(10)
            .collect()
        ):
            label = "topic" if key == "name" else "topic id"
            problems.append(f"{row['source']}: {label} {row[key]} given {row['count']} times")
    return problems


def read_clusters(spark: SparkSession, paths: Sequence[str]) -> dict[str, InMemoryCluster]:
    """The snapshots as in-memory clusters by cluster id, on the driver; refuses bad input."""
    lines = read_snapshot_lines(spark, paths).cache()
    try:
        problems = check_complete(lines)
        if problems:
            raise SnapshotError("; ".join(problems))
        heads: dict[str, ClusterLine] = {}
        topics: dict[str, list[TopicState]] = defaultdict(list)
        for row in lines.where(F.col("kind") != "end").select("line").toLocalIterator():
            line = parse_line(row["line"])
            if isinstance(line, ClusterLine):
                heads[str(line.cluster_id)] = line
            elif isinstance(line, TopicLine):
                topics[str(line.cluster_id)].append(line.state)
    finally:
        lines.unpersist()
    return {
        cluster_id: snapshot_cluster(head, topics[cluster_id]) for cluster_id, head in heads.items()
    }
