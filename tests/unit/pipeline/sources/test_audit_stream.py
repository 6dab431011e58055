"""Audit topic records into the lake: a micro-batch run again is written once (the envelope's
checks: test_audit_lines.py; the Kafka part runs on the real cluster:
tests/integration/test_audit_lake_stream.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession

from harness.audit_data import example_cluster, generate_events
from kafka_policy_proxy.pipeline.sources.audit_stream import write_records
from kafka_policy_proxy.pipeline.sources.lake import committed, read_lake
from kafka_policy_proxy.policy.loader import load_policy
from kafka_policy_proxy.proxy.audit.kafka_sink import envelope

REPO = Path(__file__).resolve().parents[4]
EVENTS = list(
    generate_events(
        load_policy((REPO / "examples" / "policy.yaml").read_text(), "policy.yaml"),
        example_cluster(),
        40,
        seed=5,
    )
)


def wrapped(event: Any) -> str:
    """The event as the audit topic's record value: a CloudEvents envelope."""
    return json.dumps(envelope(event, "kafka-policy-proxy/test"))


def test_a_micro_batch_run_again_is_written_once(spark: SparkSession, tmp_path: Path) -> None:
    lake = str(tmp_path / "lake")
    rows = [("kafka:audit/0", i, wrapped(e)) for i, e in enumerate(EVENTS)]
    rows.append(("kafka:audit/0", len(EVENTS), "not json"))
    records = spark.createDataFrame(rows, "source string, line long, value string")
    about = {"topic": "audit", "checkpoint": "cp", "batch_id": 0}
    # Spark runs a micro-batch again when it died before its checkpoint: same records, same id.
    for _ in range(2):
        before = committed(spark, lake)  # the first attempt, once it is committed
        _, counts, _ = write_records(spark, lake, "kafka-audit-0", records, about, before=before)
    assert sum(r["lines"] for r in counts if r["kind"] is None) == len(EVENTS)
    audit = read_lake(spark, lake)
    ids = [r["decision_id"] for r in audit.events.select("decision_id").collect()]
    assert sorted(ids) == sorted(e["decision_id"] for e in EVENTS)
    assert [(r["line"], r["problem"]) for r in audit.quarantine.collect()] == [
        (len(EVENTS), "not valid JSON")
    ]
    [manifest] = committed(spark, lake)
    assert manifest["kafka"] == {**about, "repeated": 0}
    assert manifest["lines"]["events"] == len(EVENTS)
