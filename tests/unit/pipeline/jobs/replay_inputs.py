"""What the replay tests share: the recorded events, the candidate policies, the decisions read.

The events are made by the example policy in the example cluster (`harness.audit_data`), one
every 7 seconds; their fixtures (`events`, `audit`, `snapshot`) are in conftest.py.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from pyspark.sql import SparkSession

from harness.audit_data import ConfigCall, example_cluster, generate_events
from kafka_policy_proxy.policy.loader import load_policy
from kafka_policy_proxy.policy.model import Fact

REPO = Path(__file__).resolve().parents[4]
EXAMPLE = REPO / "examples" / "policy.yaml"
EVENTS = 1500
ALLOWED = ("allowed", "audit-would-deny")
CLUSTER_WIDE = {Fact.TOPIC_NAMES, Fact.BROKER_COUNT, Fact.TOTAL_PARTITIONS, Fact.BUDGET_USAGE}
DAY_MS = 86_400_000
ALICE_THREADS: ConfigCall = ("User:alice", "broker", "1", [("num.io.threads", "SET", "8")])
LONG_RETENTION: ConfigCall = (
    "User:platform-admin",
    "cluster_default",
    "",
    [("log.retention.ms", "SET", str(90 * DAY_MS))],
)
TINY_SEGMENTS: ConfigCall = (
    "User:platform-admin",
    "cluster_default",
    "",
    [("log.segment.bytes", "SET", "1048576")],
)


def recorded_events() -> list[dict[str, Any]]:
    """EVENTS events as the proxy records them, judged by the example policy."""
    policy = load_policy(EXAMPLE.read_text(), str(EXAMPLE))
    return list(generate_events(policy, example_cluster(), EVENTS, seed=7))


def decisions(spark: SparkSession, out: Path) -> dict[tuple[str, str], dict[str, Any]]:
    """The decisions table by (time, topic): one event every 7 s, so the key is unique."""
    rows = spark.read.parquet(str(out / "decisions")).collect()
    by_key = {(r["time"].strftime("%Y-%m-%dT%H:%M:%S.%fZ"), r["topic"]): r.asDict() for r in rows}
    assert len(by_key) == len(rows), f"{len(rows) - len(by_key)} rows share a (time, topic)"
    return by_key


def key(event: dict[str, Any]) -> tuple[str, str]:
    """An event's key in `decisions`."""
    return event["time"], event["topic"]


def enforced(event: dict[str, Any]) -> list[str]:
    """The rules an event violated in enforce mode."""
    return [v["rule"] for v in event["violations"] if v["mode"] == "enforce"]


def candidate(tmp_path: Path, name: str, edit: Callable[[dict[str, Any]], Any]) -> Path:
    """The example policy edited by `edit`, written as `name` under `tmp_path`."""
    document = yaml.safe_load(EXAMPLE.read_text())
    edit(document)
    path = tmp_path / name
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


def grant_alice_threads(document: dict[str, Any]) -> None:
    """The example policy, plus num.io.threads on the brokers for User:alice (up to 16)."""
    document["broker_configs"].append(
        {
            "name": "alice-threads",
            "principals": ["User:alice"],
            "resources": ["broker"],
            "keys": ["num.io.threads"],
            "configs": {"num.io.threads": {"max": 16}},
        }
    )
