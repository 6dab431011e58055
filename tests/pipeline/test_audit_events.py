"""Reading audit logs: the explicit schema, and every bad line counted with its reason."""

from __future__ import annotations

import json
from pathlib import Path

from pyspark.sql import SparkSession

from pipeline.audit_events import read_audit
from policy.decision_log import RESOURCE_FIELDS, TRACE_FIELDS, V2_FIELDS
from policy.loader import load_policy
from tests.pipeline.audit_data import (
    admin_events,
    broker_config_events,
    example_cluster,
    generate_events,
    write_events,
)

REPO = Path(__file__).resolve().parents[2]


def test_good_events_are_read_with_every_field(spark: SparkSession, tmp_path: Path) -> None:
    policy = load_policy((REPO / "examples" / "policy.yaml").read_text(), "policy.yaml")
    events = list(generate_events(policy, example_cluster(), 200))
    write_events(tmp_path / "audit.jsonl", events)
    audit = read_audit(spark, [str(tmp_path)])
    rows = sorted(audit.events.collect(), key=lambda r: r["time"])
    assert audit.malformed.count() == 0
    assert len(rows) == 200
    for row, event in zip(rows, events, strict=True):
        assert row["principal"] == event["principal"]
        assert row["decision"] == event["decision"]
        assert row["time"].strftime("%Y-%m-%dT%H:%M:%S.%fZ") == event["time"]
        assert [v["rule"] for v in row["violations"]] == [v["rule"] for v in event["violations"]]
        assert json.loads(row["request"]) == event["request"]


def test_malformed_lines_are_counted_with_a_reason(spark: SparkSession, tmp_path: Path) -> None:
    policy = load_policy((REPO / "examples" / "policy.yaml").read_text(), "policy.yaml")
    good = [json.dumps(e) for e in generate_events(policy, example_cluster(), 5)]
    wrong_schema = json.loads(good[0]) | {"schema": 3}
    missing = {k: v for k, v in json.loads(good[1]).items() if k != "principal"}
    lines = [
        *good,
        "not json",
        good[2][:-5],
        json.dumps(wrong_schema),
        json.dumps(missing),
        json.dumps(json.loads(good[3]) | {"time": "yesterday"}),
        json.dumps(json.loads(good[4]) | {"decision": "maybe"}),
    ]
    (tmp_path / "a.jsonl").write_text("\n".join(lines) + "\n")
    audit = read_audit(spark, [str(tmp_path / "*.jsonl")])
    problems = sorted(r["problem"] for r in audit.malformed.collect())
    assert audit.events.count() == 5
    assert problems == sorted(
        [
            "not a JSON object of the audit schema",
            "not a JSON object of the audit schema",
            "schema version 3",
            "missing field principal",
            "not a JSON object of the audit schema",
            "unknown decision maybe",
        ]
    )


def test_v1_events_still_read_with_the_trace_fields_null(
    spark: SparkSession, tmp_path: Path
) -> None:
    policy = load_policy((REPO / "examples" / "policy.yaml").read_text(), "policy.yaml")
    v2 = list(generate_events(policy, example_cluster(), 4))
    v1 = [{k: v for k, v in e.items() if k not in V2_FIELDS} | {"schema": 1} for e in v2[:2]]
    write_events(tmp_path / "audit.jsonl", [*v1, *v2[2:]])
    audit = read_audit(spark, [str(tmp_path)])
    rows = sorted(audit.events.collect(), key=lambda r: r["time"])
    assert audit.malformed.count() == 0
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
    assert [r["problem"] for r in audit.malformed.collect()] == ["missing field topic"]
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
