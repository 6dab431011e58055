"""The scan job on a snapshot of the real cluster, taken by `kafka-policy-proxy snapshot`.

Other tests share the cluster, so the policy's rules select only this module's topic prefix:
every other topic must come out compliant.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from kafka_policy_proxy.pipeline.jobs.scan import run_scan
from tests.integration.admin_clients import ConfluentAdmin, NewTopicSpec

pytestmark = pytest.mark.integration

CLI = Path(sys.executable).parent / "kafka-policy-proxy"
PREFIX = f"scan-{uuid.uuid4().hex[:8]}."
DAY_MS = 86_400_000
ISR2 = {"min.insync.replicas": "2"}
SPECS = (
    NewTopicSpec(f"{PREFIX}ok", 3, 3, configs=ISR2),
    NewTopicSpec(f"{PREFIX}long", 3, 2, configs=ISR2 | {"retention.ms": str(30 * DAY_MS)}),
    NewTopicSpec(f"{PREFIX}single", 1, 3, configs=ISR2),
    NewTopicSpec(
        f"{PREFIX}unclean", 2, 3, configs=ISR2 | {"unclean.leader.election.enable": "true"}
    ),
    NewTopicSpec(f"{PREFIX}defaults", 2, 3),
)
POLICY = f"""\
version: 1
rules:
  - name: retention-cap
    match: {{topic_prefix: "{PREFIX}"}}
    configs:
      retention.ms: {{max: 7d}}
  - name: min-partitions
    match: {{topic_prefix: "{PREFIX}"}}
    partitions: {{min: 2}}
  - name: no-unclean
    match: {{topic_prefix: "{PREFIX}"}}
    configs:
      unclean.leader.election.enable: {{forbidden: true}}
  - name: min-isr
    mode: audit
    match: {{topic_prefix: "{PREFIX}"}}
    configs:
      min.insync.replicas: {{min: 2}}
owners:
  unclean-owners:
    topics: ['{re.escape(PREFIX)}unclean']
  scan-team:
    topic_prefixes: ["{PREFIX}"]
"""
# topic -> (decision, [(rule, mode, message)]); the broker default min.insync.replicas is 1.
EXPECTED = {
    f"{PREFIX}ok": ("compliant", []),
    f"{PREFIX}long": (
        "violating",
        [
            (
                "retention-cap",
                "enforce",
                f"[retention-cap] topic '{PREFIX}long' sets retention.ms to 2592000000 (30d); "
                "the limit is 604800000 (7d)",
            )
        ],
    ),
    f"{PREFIX}single": (
        "violating",
        [
            (
                "min-partitions",
                "enforce",
                f"[min-partitions] topic '{PREFIX}single' asks for 1 partition; the minimum is 2",
            )
        ],
    ),
    f"{PREFIX}unclean": (
        "violating",
        [
            (
                "no-unclean",
                "enforce",
                f"[no-unclean] topic '{PREFIX}unclean' sets unclean.leader.election.enable, "
                "which may not be set",
            )
        ],
    ),
    f"{PREFIX}defaults": (
        "audit-only",
        [
            (
                "min-isr",
                "audit",
                f"[min-isr] topic '{PREFIX}defaults' gets the broker default "
                "min.insync.replicas = 1; the minimum is 2",
            )
        ],
    ),
}


@pytest.fixture(scope="module")
def topics(kafka: Any) -> Iterator[list[str]]:
    """This module's topics, created straight on the brokers (no proxy), deleted afterwards."""
    admin = ConfluentAdmin(kafka.bootstrap_servers)
    try:
        outcomes = admin.create_topics(SPECS)
        assert all(o.ok for o in outcomes), outcomes
        yield [spec.name for spec in SPECS]
        admin.delete_topics([spec.name for spec in SPECS])
    finally:
        admin.close()


@pytest.fixture(scope="module")
def snapshot(kafka: Any, topics: list[str], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A snapshot by the CLI that has this module's topics (the first broker learns of new
    topics a moment after the controller)."""
    path = tmp_path_factory.mktemp("scan") / "cluster.jsonl"
    deadline = time.monotonic() + 30
    while True:
        result = subprocess.run(
            [str(CLI), "snapshot", "--bootstrap-server", kafka.bootstrap_servers, "--out", path],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert result.returncode == 0, result.stderr
        names = {json.loads(line).get("name") for line in path.read_text().splitlines()}
        if set(topics) <= names:
            return path
        assert time.monotonic() < deadline, "the snapshot never had the topics"
        time.sleep(0.5)


def test_exactly_the_topics_that_break_the_policy_are_flagged(
    spark: SparkSession, snapshot: Path, tmp_path: Path
) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text(POLICY)
    out = tmp_path / "out"
    summary = run_scan(spark, str(policy), [str(snapshot)], str(out))

    topics = {r["topic"]: r for r in spark.read.parquet(str(out / "topics")).collect()}
    violations = spark.read.parquet(str(out / "violations")).collect()
    ours = {name: row for name, row in topics.items() if name.startswith(PREFIX)}
    assert {name: row["decision"] for name, row in ours.items()} == {
        name: decision for name, (decision, _) in EXPECTED.items()
    }
    found: dict[str, list[tuple[str, str, str]]] = {name: [] for name in EXPECTED}
    for v in violations:
        found.setdefault(v["topic"], []).append((v["rule"], v["mode"], v["message"]))
    assert found == {name: expected for name, (_, expected) in EXPECTED.items()}
    for spec in SPECS:
        assert ours[spec.name]["partitions"] == spec.partitions
        assert ours[spec.name]["replication_factor"] == spec.replication_factor
    # Everyone else's topics: none selected, all compliant; Kafka's own are not evaluated.
    assert all(r["decision"] == "compliant" for n, r in topics.items() if n not in ours)
    assert not any(name.startswith("__") for name in topics)
    assert summary["clusters"] == 1
    assert summary["topics"] == len(topics)
    assert summary["violating"] == 3
    assert summary["audit_only"] == 1

    # One report per team: the first team listed claims `unclean`, the prefix the rest;
    # everyone else's topics are nobody's here, and break nothing.
    index = json.loads((out / "teams.json").read_text())
    reports = {t["team"]: json.loads((out / t["report"]).read_text()) for t in index["teams"]}
    assert list(reports) == ["unclean-owners", "scan-team", "(unowned)"]
    listed = {
        team: sorted({r["resource"]["name"] for r in report["results"]})
        for team, report in reports.items()
    }
    assert listed == {
        "unclean-owners": [f"{PREFIX}unclean"],
        "scan-team": sorted(f"{PREFIX}{n}" for n in ("defaults", "long", "single")),
        "(unowned)": [],
    }
    assert reports["scan-team"]["summary"] == {
        "pass": 1, "fail": 2, "warn": 1, "error": 0, "skip": 0
    }  # fmt: skip
    assert reports["unclean-owners"]["summary"]["fail"] == 1
    unowned = reports["(unowned)"]["summary"]
    assert unowned["pass"] == len(topics) - len(EXPECTED)
    assert unowned["skip"] == summary["skipped_internal"]
    assert {name: row["owner"] for name, row in ours.items()} == {
        name: "unclean-owners" if name.endswith("unclean") else "scan-team" for name in EXPECTED
    }
