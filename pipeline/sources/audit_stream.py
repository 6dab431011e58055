"""`pipeline ingest --topic`: the audit topic into the lake with Spark Structured Streaming.

Needs Spark's Kafka source (`spark-sql-kafka-0-10`) on the classpath: the command line adds
it to `spark.jars.packages`, resolved from Maven.

Each micro-batch of records is classified like a log line (the event is the `data` of the
record's CloudEvents envelope; `source` is `kafka:<topic>/<partition>` and `line` the offset)
and written as one lake batch, named after the checkpoint and the micro-batch id, then
committed with its manifest (`pipeline.sources.lake`). Exactly once: Spark runs a
micro-batch that was not checkpointed again with the same offsets and id; its earlier attempt
is removed (`forget`, manifest first) before it is written again, and readers never see a
batch before its manifest. A record whose decision the lake already has (the topic holds it
twice, or a file ingest took it first) is dropped (`pipeline.sources.lake.drop_repeated`);
then the micro-batch's rollups are written (`pipeline.sources.lake_rollups`), committed by the
same manifest.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

from pyspark.sql import DataFrame, Row, SparkSession
from pyspark.sql import functions as F

from kafka_policy_proxy.pipeline.sources.audit_events import classified
from kafka_policy_proxy.pipeline.sources.lake import (
    batch_lines,
    commit,
    committed,
    drop_repeated,
    forget,
    repeated_name,
    write_batch,
)
from kafka_policy_proxy.pipeline.sources.lake_rollups import VERSION as ROLLUPS
from kafka_policy_proxy.pipeline.sources.lake_rollups import write_rollups

CHECKPOINTS = "_checkpoints"


def stream_ingest(
    spark: SparkSession,
    *,
    topic: str,
    bootstrap: str,
    lake: str,
    checkpoint: str | None = None,
    kafka: Mapping[str, str] = {},
    once: bool = False,
    interval: str = "1 minute",
) -> dict[str, Any]:
    """Ingest the audit topic until it is drained (`once`) or forever; return what was done."""
    lake = lake.rstrip("/")
    checkpoint = checkpoint or f"{lake}/{CHECKPOINTS}/{topic}"
    # Batch names unique to this checkpoint: a new checkpoint never rewrites another's batches.
    prefix = f"kafka-{topic}-{hashlib.sha256(checkpoint.encode()).hexdigest()[:8]}"
    reader = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
    )
    for key, value in kafka.items():
        reader = reader.option(f"kafka.{key}", value)
    records = reader.load().select(
        F.format_string("kafka:%s/%d", "topic", "partition").alias("source"),
        F.col("offset").alias("line"),
        F.col("value").cast("string").alias("value"),
    )
    counted: list[Row] = []
    batches: list[str] = []
    repeated: list[int] = []
    # The lake's batches, read once: a continuous stream would read every manifest again per
    # micro-batch. One committed meanwhile by a file ingest is not seen here; that ingest
    # compares its own events with this stream's batches.
    known = committed(spark, lake)

    def write(batch: DataFrame, batch_id: int) -> None:
        name = f"{prefix}-{batch_id:012d}"
        about = {"topic": topic, "checkpoint": checkpoint, "batch_id": batch_id}
        written, counts, dropped = write_records(spark, lake, name, batch, about, before=known)
        known.append({"batch": written})
        counted.extend(counts)
        batches.append(written)
        repeated.append(sum(dropped.values()))

    writer = records.writeStream.foreachBatch(write).option("checkpointLocation", checkpoint)
    trigger = writer.trigger(availableNow=True) if once else writer.trigger(processingTime=interval)
    trigger.start().awaitTermination()
    return {
        "lake": lake,
        "topic": topic,
        "checkpoint": checkpoint,
        "batches": batches,
        "lines": batch_lines(counted),
        "repeated_events": sum(repeated),
    }


def write_records(
    spark: SparkSession,
    lake: str,
    name: str,
    records: DataFrame,
    about: Mapping[str, Any],
    *,
    before: Sequence[dict[str, Any]],
) -> tuple[str, list[Row], dict[str, int]]:
    """Write audit topic records (source, line, value) as the lake's batch `name` and commit
    it, replacing an earlier attempt; its events already in the batches `before` are dropped.
    Return the batch's name as written, its counts (`write_rollups`) and the events dropped
    per source."""
    for attempt in (name, repeated_name(name)):
        forget(spark, lake, attempt)
    write_batch(spark, lake, name, classified(records, envelope=True).lines)
    name, repeated = drop_repeated(spark, lake, name, before)
    counts = write_rollups(spark, lake, name)
    about = {**about, "repeated": sum(repeated.values())}
    commit(spark, lake, name, [], kafka=about, lines=batch_lines(counts), rollups=ROLLUPS)
    return name, counts, repeated
