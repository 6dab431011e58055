"""The report tests' input: one report over a mixed input, read by the table and page tests.

The input mixes topic records (schema 1 and 2), admin API calls and broker config changes
(allowed, denied, audit-would-deny) with bad lines, given as a directory, a glob and a file:
URI. Run once by the `mixed_report` fixture of test_report.py: the tests only read it.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from harness.audit_data import (
    ConfigCall,
    admin_events,
    broker_config_events,
    example_cluster,
    generate_events,
    write_events,
)
from kafka_policy_proxy.pipeline.jobs.report import run_report
from kafka_policy_proxy.policy.builders import create_request
from kafka_policy_proxy.policy.cluster import InMemoryCluster
from kafka_policy_proxy.policy.decision_log import V2_FIELDS, Stamp, decision_record
from kafka_policy_proxy.policy.engine import CompiledPolicy
from kafka_policy_proxy.policy.judge import ClusterFacts, judge
from kafka_policy_proxy.policy.loader import load_policy
from kafka_policy_proxy.policy.model import Principal

REPO = Path(__file__).resolve().parents[4]
POLICY = REPO / "examples" / "policy.yaml"
EVENTS = 3000
SPACING = timedelta(seconds=9)  # 3000 events over seven and a half hours
ADMIN_CALLS = [("CreateAcls", "User:alice"), ("ElectLeaders", "User:bob")] * 3
CONFIG_CALLS: list[ConfigCall] = [
    ("User:platform-admin", "broker", "1", [("num.io.threads", "SET", "8")]),
    ("User:alice", "broker", "1", [("num.io.threads", "SET", "8")]),
    ("User:platform-admin", "broker", "2", [("num.io.threads", "SET", "2")]),
    ("User:platform-admin", "cluster_default", "", [("log.segment.bytes", "SET", "1048576")]),
    ("User:platform-admin", "cluster_default", "", [("log.retention.ms", "SET", "7776000000")]),
    ("User:platform-admin", "broker_logger", "1", [("kafka.server", "SET", "DEBUG")]),
    ("User:bob", "group", "g1", [("consumer.session.timeout.ms", "SET", "45000")]),
] * 2
V1_EVENTS = 200  # topic records rewritten as schema 1


@dataclass(frozen=True)
class Run:
    """The report's input events, the file with the bad lines, its outputs and summary."""

    events: list[dict[str, Any]]
    malformed_file: str
    out: Path
    summary: dict[str, Any]
    inputs: list[str]


def v1(event: dict[str, Any]) -> dict[str, Any]:
    """The event as schema 1 wrote it: without the v2 fields."""
    return {k: v for k, v in event.items() if k not in V2_FIELDS} | {"schema": 1}


def table(spark: SparkSession, out: Path, name: str) -> list[dict[str, Any]]:
    """A Parquet output as dicts, its times as epoch microseconds."""
    df = spark.read.parquet(str(out / name))
    # Epoch numbers, not datetimes: collected timestamps take the driver's local zone.
    columns = [
        F.unix_micros(c).alias(c) if c in ("hour", "first_seen", "last_seen") else F.col(c)
        for c in df.columns
    ]
    return [row.asDict() for row in df.select(*columns).collect()]


def self_contained(html: str) -> list[str]:
    """The page's images, each checked to be inlined; nothing it loads or links reaches out."""
    # A violation message may quote a URL as text (the policy's own help link): only what the
    # browser would fetch or follow counts.
    away = r"""["']?\s*(?:https?:|//)"""
    outward = rf"(?:src|href|action)\s*=\s*{away}|url\(\s*{away}|@import"
    assert not re.search(outward, html, re.I), re.findall(f".{{40}}(?:{outward}).{{40}}", html)
    images = re.findall(r'<img[^>]*src="([^"]*)"', html)
    assert all(src.startswith("data:image/png;base64,") for src in images), [
        src[:60] for src in images
    ]
    return images


def _tiny_segments(
    policy: CompiledPolicy, cluster: InMemoryCluster, count: int, start: datetime
) -> list[dict[str, Any]]:
    """Creates whose segment.bytes and segment.ms are both too small: segment-size twice."""
    events = []
    for i in range(count):
        principal = Principal(("User:carol", "User:bob")[i % 2], "client-1", "10.0.0.7:5000")
        configs = [("segment.bytes", str(1 << 20)), ("segment.ms", "60000")]
        request = create_request(f"orders.tiny-{i}", 6, 3, configs=configs, principal=principal)
        (verdict,) = judge(policy, [request], ClusterFacts(cluster))
        assert verdict.decision is not None
        events.append(
            decision_record(
                verdict.request,
                verdict.decision,
                Stamp(
                    time=(start + timedelta(minutes=13 * i)).strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
                    decision_id=f"tiny-{i}",
                    policy_revision=policy.revision,
                    cluster_id=None,
                    proxy_id="proxy-1",
                    conn=1,
                    client=principal.address,
                    api="CreateTopics",
                    api_key=19,
                    api_version=7,
                ),
            )
        )
    return events


def run_mixed_report(spark: SparkSession, root: Path) -> Run:
    """One report over events given as a directory, a glob and a file: URI, bad lines mixed in."""
    policy = load_policy(POLICY.read_text(), "policy.yaml")
    cluster = example_cluster()
    admin = list(admin_events(policy, ADMIN_CALLS))
    configs = list(broker_config_events(policy, CONFIG_CALLS, cluster))
    topics = EVENTS - 20 - len(admin) - len(configs)
    events = list(generate_events(policy, cluster, topics, seed=7, spacing=SPACING))
    events[:V1_EVENTS] = [v1(e) for e in events[:V1_EVENTS]]
    events += _tiny_segments(policy, cluster, 20, datetime(2026, 10, 1, 0, 5, tzinfo=UTC))
    # Records of no topic spread over the three inputs (and next to the bad lines).
    for i, config in enumerate(configs):
        events.insert(150 * i + 75, config)
    for i, call in enumerate(admin):
        events.insert(500 * i + 200, call)
    (root / "dir").mkdir()
    (root / "glob").mkdir()
    write_events(root / "dir" / "audit.jsonl", events[:1000])
    write_events(root / "glob" / "audit-1.jsonl", events[1000:2000])
    good = [json.dumps(e) for e in events[2000:]]
    config = json.loads(json.dumps(configs[0]))
    # A violation that lost its rule name: the schema requires one.
    denied = json.loads(next(line for line in good[4:] if '"decision": "denied"' in line))
    denied["violations"][0].pop("rule")
    bad = [
        "",
        json.dumps(denied),
        "not json",
        good[0][:-7],  # a line cut short
        json.dumps(json.loads(good[1]) | {"schema": 4}),
        json.dumps({k: v for k, v in json.loads(good[2]).items() if k != "principal"}),
        json.dumps({k: v for k, v in json.loads(good[3]).items() if k != "principal"}),
        # Records of no topic that break the record's own rules.
        json.dumps(config | {"topic": "orders.v1"}),
        json.dumps(config | {"resource_type": "topic", "topic": "orders.v1"}),
        json.dumps(v1(config)),
        json.dumps(config | {"action": "alter_cluster"}),
        json.dumps(config | {"resource_type": "controller"}),
    ]
    # Bad lines in between good ones; the good ones they were made from are kept too.
    mixed = [*good[:300], *bad, *good[300:]]
    malformed_file = root / "last.jsonl"
    malformed_file.write_text("\n".join(mixed) + "\n")
    out = root / "out"
    inputs = [str(root / "dir"), str(root / "glob" / "*.jsonl"), malformed_file.as_uri()]
    summary = run_report(spark, inputs, str(out), drill_down=True)
    return Run(events, malformed_file.name, out, summary, inputs)
