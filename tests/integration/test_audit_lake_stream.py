"""`pipeline ingest --topic`: the audit topic into the lake, on the real cluster, exactly once.

The records are what the proxy's Kafka sink produces (`proxy.audit.kafka_sink.envelope`), and bad
ones of every kind; the job runs as an operator runs it, `--once`, twice: the second run reads
only what was produced since, through the checkpoint, and adds no decision twice. (A
micro-batch run again after a crash is written once:
tests/unit/pipeline/sources/test_audit_stream.py.)
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from pyspark.sql import SparkSession

from harness.audit_data import bad_lines, example_cluster, generate_events
from kafka_policy_proxy.pipeline.sources.lake import committed, read_lake
from kafka_policy_proxy.policy.loader import load_policy
from kafka_policy_proxy.proxy.audit.kafka_sink import envelope

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def _produce(bootstrap: str, topic: str, values: list[str | bytes | None]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "log_level": 3})
    for i, value in enumerate(values):
        raw = value.encode() if isinstance(value, str) else value
        producer.produce(topic, key=str(i % 7).encode(), value=raw)
    assert producer.flush(30) == 0


def _ingest(bootstrap: str, topic: str, lake: Path) -> dict[str, Any]:
    done = subprocess.run(
        [
            str(BIN / "kafka-policy-proxy"),
            "pipeline",
            "ingest",
            "--topic",
            topic,
            "--bootstrap-server",
            bootstrap,
            "--lake",
            str(lake),
            "--once",
            "--master",
            "local[2]",
        ],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def test_the_audit_topic_is_ingested_exactly_once(
    kafka: Any, spark: SparkSession, tmp_path: Path
) -> None:
    topic = f"audit-lake-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap_servers})
    admin.create_topics([NewTopic(topic, num_partitions=3, replication_factor=3)])[topic].result(30)
    policy = load_policy((REPO / "examples" / "policy.yaml").read_text(), "policy.yaml")
    events = list(generate_events(policy, example_cluster(), 300, seed=11))
    wrap = lambda record: json.dumps(envelope(record, "kafka-policy-proxy/test"))  # noqa: E731
    faults = bad_lines(events)
    # Every fault class inside an envelope (a blank line cannot be an object: sent bare).
    bad: list[str | bytes | None] = [
        line if not line.strip() else wrap(json.loads(line)) for line, _, _ in faults[6:]
    ]
    bad += ["", "not json", json.dumps({"data": events[0]}), wrap(events[0])[:-3]]
    bad += [wrap(events[0]).encode().replace(b'"data"', b'"\xffdata"'), None]  # a tombstone
    _produce(kafka.bootstrap_servers, topic, [wrap(e) for e in events[:200]] + bad)
    lake = tmp_path / "lake"
    first = _ingest(kafka.bootstrap_servers, topic, lake)
    lines = first["lines"]
    assert lines["events"] == 200
    assert lines["blank"] == 1
    assert lines["unknown_version"] == 2
    assert lines["malformed"] == len(bad) - 3
    assert lines["malformed_by_problem"]["not a CloudEvents 1.0 envelope"] == 1
    assert lines["malformed_by_problem"]["not valid UTF-8"] == 1
    assert lines["malformed_by_problem"]["record with no value"] == 1
    assert all(source.startswith(f"kafka:{topic}/") for source in lines["bad_by_file"])
    assert first["repeated_events"] == 0
    # Produced since: only these are read, through the checkpoint. 150-199 are sent again (a
    # producer's retry without idempotence): the lake keeps each decision once.
    _produce(kafka.bootstrap_servers, topic, [wrap(e) for e in events[150:]])
    second = _ingest(kafka.bootstrap_servers, topic, lake)
    assert second["lines"]["total"] == second["lines"]["events"] == 100
    assert second["repeated_events"] == 50
    audit = read_lake(spark, str(lake))
    rows = audit.events.select("decision_id").collect()
    assert sorted(r["decision_id"] for r in rows) == sorted(e["decision_id"] for e in events)
    assert audit.quarantine.count() == len(bad)
    # Each quarantined record keeps where it was: its partition and offset.
    quarantined = audit.quarantine.collect()
    assert all(r["source"].startswith(f"kafka:{topic}/") and r["line"] >= 0 for r in quarantined)
    assert len(committed(spark, str(lake))) == len(first["batches"]) + len(second["batches"])
