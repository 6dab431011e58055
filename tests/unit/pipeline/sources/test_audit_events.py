"""Reading audit logs: the explicit schema, and every bad line kept with its kind and reason."""

from __future__ import annotations

import json
from pathlib import Path

from pyspark.sql import SparkSession

from harness.audit_data import (
    admin_events,
    bad_lines,
    broker_config_events,
    example_cluster,
    generate_events,
    write_events,
)
from kafka_policy_proxy.pipeline.sources.audit_events import UNREADABLE, classified, read_audit
from kafka_policy_proxy.pipeline.sources.audit_lines import SAMPLE_BYTES, sample
from kafka_policy_proxy.policy.decision_log import RESOURCE_FIELDS, TRACE_FIELDS, V2_FIELDS
from kafka_policy_proxy.policy.loader import load_policy

REPO = Path(__file__).resolve().parents[4]
EXAMPLE = load_policy((REPO / "examples" / "policy.yaml").read_text(), "policy.yaml")
GOOD = list(generate_events(EXAMPLE, example_cluster(), 40))


def test_a_line_spark_cannot_read_as_the_classifier_did_is_malformed(
    spark: SparkSession, tmp_path: Path
) -> None:
    event = json.dumps(GOOD[0])
    assert GOOD[0]["decision"] == "allowed"
    nested = '{"a": ' * 1010 + "{}" + "}" * 1010  # orjson reads 1,024 levels, Spark 1,000
    lines = [
        '{"decision": "denied", ' + event[1:],  # both readers keep the last
        '{"validate_only": "nope", ' + event[1:],  # Spark's reader fails on the first
        event.replace('"request": {', '"request": {"deep": ' + nested + ", ", 1),
    ]
    assert lines[2] != event
    (tmp_path / "audit.jsonl").write_text("\n".join(lines) + "\n")
    read = read_audit(spark, [str(tmp_path)]).lines.orderBy("line").collect()
    assert [(r["kind"], r["problem"], r["decision"]) for r in read] == [
        (None, None, "allowed"),
        ("malformed", UNREADABLE, None),
        ("malformed", UNREADABLE, None),
    ]
    assert read[1]["sample"] == lines[1][:SAMPLE_BYTES]
    # In an audit topic record alike.
    records = [
        ("kafka:audit/0", i, '{"specversion": "1.0", "data": ' + line + "}")
        for i, line in enumerate(lines)
    ]
    frame = spark.createDataFrame(records, "source string, line long, value string")
    got = classified(frame, envelope=True).lines.orderBy("line").collect()
    assert [(r["kind"], r["problem"], r["decision"]) for r in got] == [
        (None, None, "allowed"),
        ("malformed", UNREADABLE, None),
        ("malformed", UNREADABLE, None),
    ]


def test_good_events_are_read_with_every_field(spark: SparkSession, tmp_path: Path) -> None:
    events = list(generate_events(EXAMPLE, example_cluster(), 200))
    write_events(tmp_path / "audit.jsonl", events)
    audit = read_audit(spark, [str(tmp_path)])
    rows = sorted(audit.events.collect(), key=lambda r: r["time"])
    assert audit.quarantine.count() == 0
    assert len(rows) == 200
    for row, event in zip(rows, events, strict=True):
        assert row["principal"] == event["principal"]
        assert row["decision"] == event["decision"]
        assert row["validate_only"] is event["validate_only"]
        assert row["time"].strftime("%Y-%m-%dT%H:%M:%S.%fZ") == event["time"]
        assert [v["rule"] for v in row["violations"]] == [v["rule"] for v in event["violations"]]
        assert json.loads(row["request"]) == event["request"]


def test_bad_lines_keep_file_line_kind_reason_and_sample(
    spark: SparkSession, tmp_path: Path
) -> None:
    bad = bad_lines(GOOD)
    good = [json.dumps(e) for e in GOOD[:5]]
    # Good and bad lines interleaved over two files: every line number is where it is.
    first = [good[0], *(line for line, _, _ in bad[:10]), good[1]]
    second = [*(line for line, _, _ in bad[10:]), *good[2:]]
    (tmp_path / "a.jsonl").write_text("\n".join(first) + "\n", encoding="utf-8")
    (tmp_path / "b.jsonl").write_text("\n".join(second) + "\n", encoding="utf-8")
    audit = read_audit(spark, [str(tmp_path / "*.jsonl")])
    rows = audit.quarantine.orderBy("source", "line").collect()
    assert audit.events.count() == 5
    expected = [("a.jsonl", i + 2, *fault) for i, fault in enumerate(bad[:10])]
    expected += [("b.jsonl", i + 1, *fault) for i, fault in enumerate(bad[10:])]
    assert [
        (Path(r["source"]).name, r["line"], r["sample"], r["kind"], r["problem"]) for r in rows
    ] == [(name, n, sample(line), kind, reason) for name, n, line, kind, reason in expected]


def test_v1_events_still_read_with_the_trace_fields_null(
    spark: SparkSession, tmp_path: Path
) -> None:
    v2 = list(generate_events(EXAMPLE, example_cluster(), 4))
    v1 = [{k: v for k, v in e.items() if k not in V2_FIELDS} | {"schema": 1} for e in v2[:2]]
    write_events(tmp_path / "audit.jsonl", [*v1, *v2[2:]])
    audit = read_audit(spark, [str(tmp_path)])
    rows = sorted(audit.events.collect(), key=lambda r: r["time"])
    assert audit.quarantine.count() == 0
    assert [r["schema"] for r in rows] == [1, 1, 2, 2]
    for row in rows[:2]:
        assert all(row[name] is None for name in V2_FIELDS)
    for row, event in zip(rows[2:], v2[2:], strict=True):
        assert [row[name] for name in TRACE_FIELDS] == [event[name] for name in TRACE_FIELDS]
        assert row["decision_id"] and row["policy_revision"].startswith("sha256:")


def test_admin_api_and_broker_config_events_are_good_events_without_a_topic(
    spark: SparkSession, tmp_path: Path
) -> None:
    policy = load_policy((REPO / "tests/integration/data/policy.yaml").read_text(), "policy.yaml")
    calls = [("CreateAcls", "User:ANONYMOUS"), ("ElectLeaders", "User:platform-admin")]
    admin = list(admin_events(policy, calls))
    changes = [("User:x", "cluster_default", "", [("log.cleaner.threads", "SET", "2")])]
    (config,) = broker_config_events(policy, changes, example_cluster())
    topics = list(generate_events(policy, example_cluster(), 3))
    no_topic = topics[0] | {"topic": None}
    write_events(tmp_path / "audit.jsonl", [*admin, config, *topics[1:], no_topic])
    audit = read_audit(spark, [str(tmp_path)])
    assert [r["problem"] for r in audit.quarantine.collect()] == [
        "field topic: null in a topic record"
    ]
    rows = {r["decision_id"]: r for r in audit.events.collect()}
    assert len(rows) == 5
    row = rows[config["decision_id"]]
    assert (row["action"], row["resource_type"], row["resource"], row["topic"]) == (
        "alter_broker_config",
        "cluster",
        "",
        None,
    )
    assert json.loads(row["request"]) == config["request"]
    for event in admin:
        row = rows[event["decision_id"]]
        assert (row["action"], row["topic"]) == ("admin_api", None)
        assert [row[name] for name in RESOURCE_FIELDS] == ["api", event["api"]]
        assert row["decision"] == event["decision"]
    assert [rows[e["decision_id"]]["decision"] for e in admin] == ["denied", "allowed"]


def test_a_waived_decision_keeps_its_waivers_in_the_lake_schema(
    spark: SparkSession, tmp_path: Path
) -> None:
    (event,) = generate_events(EXAMPLE, example_cluster(), 1)
    waiver = {
        "rule": "partition-count",
        "exception": "clickstream-backfill",
        "ticket": None,
        "expires": "2030-12-31T23:59:59.000000Z",  # as the proxy writes it
        "message": "[partition-count] topic 'clicks.raw' asks for 96 partitions",
    }
    write_events(tmp_path / "audit.jsonl", [{**event, "waived": [waiver]}, event])
    audit = read_audit(spark, [str(tmp_path)])
    assert audit.quarantine.count() == 0, audit.quarantine.collect()
    rows = audit.events.select("waived").collect()
    waived = [r["waived"] for r in rows]
    assert None in waived  # absent in the record without waivers
    ((row,),) = [w for w in waived if w is not None]
    assert (row["rule"], row["exception"], row["ticket"]) == (
        "partition-count",
        "clickstream-backfill",
        None,
    )
    assert row["expires"].year == 2030
