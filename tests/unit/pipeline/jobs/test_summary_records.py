"""A summary record (schema 3: one request's many topics) through the lake, the report and
replay: the report counts its topics by decision and rule, replay says it is not replayable."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml
from pyspark.sql import SparkSession

from harness.audit_data import write_events
from kafka_policy_proxy.pipeline.jobs.replay import run_replay
from kafka_policy_proxy.pipeline.jobs.replayer import NOT_REPLAYABLE
from kafka_policy_proxy.pipeline.jobs.report import run_report
from kafka_policy_proxy.pipeline.sources.audit_lines import MALFORMED, Problem, classify
from kafka_policy_proxy.pipeline.sources.audit_source import AuditSource
from kafka_policy_proxy.pipeline.sources.lake import ingest
from kafka_policy_proxy.policy.builders import create_request
from kafka_policy_proxy.policy.decision_ids import new_decision_id
from kafka_policy_proxy.policy.decision_log import (
    Stamp,
    decision_record,
    summary_record,
)
from kafka_policy_proxy.policy.decision_summary import summarise
from kafka_policy_proxy.policy.judge import ClusterFacts, judge
from kafka_policy_proxy.policy.model import Decision, TopicRequest
from tests.unit.pipeline.jobs.report_inputs import table
from tests.unit.policy.helpers import ALICE, cluster, compile_rules

RULES = {"rules": [{"name": "small", "partitions": {"max": 3}}]}


def _stamp(second: int) -> Stamp:
    return Stamp(
        f"2026-11-27T21:00:{second:02d}.000000Z", new_decision_id(), "sha256:r", "c1", "p",
        1, "h:1", "CreateTopics", 19, 7,
    )  # fmt: skip


def _judged(sizes: list[int]) -> list[tuple[TopicRequest, Decision]]:
    asked = [create_request(f"t.{i}", n, principal=ALICE) for i, n in enumerate(sizes)]
    verdicts = judge(compile_rules(*RULES["rules"]), asked, ClusterFacts(cluster()))
    return [(v.request, v.decision) for v in verdicts if v.decision is not None]


def _events() -> list[dict[str, Any]]:
    # Three topic records (1 allowed, 2 denied), then one request of 1,000 topics summarised.
    each = [decision_record(r, d, _stamp(i)) for i, (r, d) in enumerate(_judged([1, 6, 6]))]
    many = _judged([1] * 400 + [6] * 600)
    summary = summarise([d for _, d in many], 20)
    whole = summary_record(
        many[0][0], _stamp(10), decision=summary.decision, mode=summary.mode,
        violations=summary.violations, summary=summary.fields,
    )  # fmt: skip
    return [*each, whole]


def test_the_report_counts_a_summary_s_topics_and_replay_calls_it_not_replayable(
    spark: SparkSession, tmp_path: Path
) -> None:
    write_events(tmp_path / "audit.jsonl", _events())
    lake = (tmp_path / "lake").as_uri()
    ingest(spark, [str(tmp_path / "audit.jsonl")], lake)
    out = tmp_path / "report"
    report = run_report(spark, AuditSource(lake=lake), out.as_uri())
    assert report["decisions"]["allowed"] == 401 and report["decisions"]["denied"] == 602
    assert sum(report["decisions"].values()) == 1003
    assert report["lines"]["events"] == report["lines"]["total"] == 4  # lines, not topics
    [rule] = table(spark, out, "top_denied_rules")
    assert (rule["rule"], rule["denials"]) == ("small", 602)
    policy = tmp_path / "policy.yaml"
    policy.write_text(yaml.safe_dump(RULES))
    replay = run_replay(spark, str(policy), AuditSource(lake=lake), (tmp_path / "r").as_uri())
    assert replay["requests"] == 4 and replay["unknown"] == 1
    assert replay["unknown_reasons"] == {NOT_REPLAYABLE: 1}


def test_a_summary_is_good_only_as_schema_3_of_resource_type_topics() -> None:
    whole = _events()[-1]
    assert classify(json.dumps(whole)) is None
    exactly = Problem(
        MALFORMED, "field summary: exactly in schema 3 records, of resource type topics"
    )
    assert classify(json.dumps(whole | {"schema": 2})) == exactly
    no_summary = {k: v for k, v in whole.items() if k != "summary"}
    assert classify(json.dumps(no_summary)) == Problem(MALFORMED, "missing field summary")
    as_topic = whole | {"resource_type": "topic", "topic": "t.0"}
    assert classify(json.dumps(as_topic)) == exactly
