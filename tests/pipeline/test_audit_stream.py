"""Audit topic records into the lake: the envelope is checked, and a micro-batch run again is
written once (the Kafka part runs on the real cluster: tests/integration/test_audit_lake_stream.py).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from pipeline.audit_lines import MALFORMED, classify, classify_envelope
from pipeline.audit_stream import write_records
from pipeline.lake import committed, read_lake
from policy.loader import load_policy
from proxy.audit.kafka_sink import envelope
from tests.pipeline.audit_data import bad_lines, example_cluster, generate_events

REPO = Path(__file__).resolve().parents[2]
EVENTS = list(
    generate_events(
        load_policy((REPO / "examples" / "policy.yaml").read_text(), "policy.yaml"),
        example_cluster(),
        40,
        seed=5,
    )
)


def wrapped(event: Any) -> str:
    return json.dumps(envelope(event, "kafka-policy-proxy/test"))


def test_a_good_record_is_a_good_event() -> None:
    assert classify_envelope(wrapped(EVENTS[0])) is None


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (json.dumps({"data": EVENTS[0]}), "not a CloudEvents 1.0 envelope"),
        (
            json.dumps({**envelope(EVENTS[0], "s"), "specversion": "0.3"}),
            "not a CloudEvents 1.0 envelope",
        ),
        (json.dumps([envelope(EVENTS[0], "s")]), "not a CloudEvents 1.0 envelope"),
        (
            json.dumps({**envelope(EVENTS[0], "s"), "data": "{}"}),
            "envelope data: not a JSON object: string",
        ),
        (wrapped(EVENTS[0])[:-2], "not valid JSON"),
    ],
)
def test_a_bad_envelope_is_malformed_with_its_reason(value: str, reason: str) -> None:
    problem = classify_envelope(value)
    assert problem is not None
    assert (problem.kind, problem.reason) == (MALFORMED, reason)


def test_the_event_in_an_envelope_is_judged_as_a_log_line_is() -> None:
    for line, kind, reason in bad_lines(EVENTS):
        if not line.strip() or not line.startswith("{"):
            continue  # not an object: it cannot be an envelope's data
        try:
            event = json.loads(line)
        except ValueError:
            continue
        problem = classify_envelope(wrapped(event))
        assert problem is not None and (problem.kind, problem.reason) == (kind, reason)
        assert classify(line) == problem


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
