"""A summary record: one request's many topic decisions as counts and a bounded sample."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from kafka_policy_proxy.policy.builders import create_request
from kafka_policy_proxy.policy.decision_log import (
    SUMMARY_SCHEMA_VERSION,
    DecisionRecord,
    Stamp,
    json_schema,
    summary_record,
)
from kafka_policy_proxy.policy.decision_reader import RequestReader, Summarised
from kafka_policy_proxy.policy.decision_summary import MAX_MESSAGE_CHARS, summarise
from kafka_policy_proxy.policy.judge import ClusterFacts, judge
from kafka_policy_proxy.policy.model import Decision
from tests.unit.policy.helpers import ALICE, cluster, compile_rules

POLICY = compile_rules(
    {"name": "small", "partitions": {"max": 3}},
    {"name": "named", "match": {"topic_prefix": "x."}, "partitions": {"max": 1}},
)


def _stamp() -> Stamp:
    return Stamp("2026-11-27T21:00:00.000000Z", "d" * 32, "sha256:r", "c1", "p", 1, "h:1",
                 "CreateTopics", 19, 7)  # fmt: skip


def _decisions(requests: list[tuple[str, int]]) -> list[Decision]:
    asked = [create_request(t, p, principal=ALICE) for t, p in requests]
    verdicts = judge(POLICY, asked, ClusterFacts(cluster()))
    return [v.decision for v in verdicts if v.decision is not None]


def test_counts_every_topic_by_decision_and_rule_and_samples_a_bounded_few() -> None:
    # 1,000 allowed, 9,000 denied by `small`, and one late topic denied by `named` too.
    decisions = _decisions(
        [(f"a.{i}", 1) for i in range(1000)] + [(f"b.{i}", 6) for i in range(9000)] + [("x.y", 6)]
    )
    summary = summarise(decisions, sample_size=20)
    assert summary.decision == "denied"
    assert summary.fields["topics"] == 10_001
    assert summary.fields["counts"] == [
        {"decision": "denied", "rule": None, "rule_mode": None, "topics": 9001},
        {"decision": "allowed", "rule": None, "rule_mode": None, "topics": 1000},
        {"decision": "denied", "rule": "named", "rule_mode": "enforce", "topics": 1},
        {"decision": "denied", "rule": "small", "rule_mode": "enforce", "topics": 9001},
    ]
    sample = summary.fields["sample"]
    # The first 20, then the first of each rule not yet seen: `small` at b.0, `named` at x.y.
    assert [s["topic"] for s in sample] == [f"a.{i}" for i in range(20)] + ["b.0", "x.y"]
    assert sample[-1] == {"topic": "x.y", "decision": "denied", "rules": ["small", "named"]}
    assert summary.fields["unsampled"] == 10_001 - 22
    assert [v["rule"] for v in summary.violations] == ["small", "named"]


def test_the_sample_never_exceeds_twice_its_size_and_messages_are_cut() -> None:
    rules = [{"name": f"r{i}", "match": {"topic": f"t{i}"}, "partitions": {"max": 1}}
             for i in range(50)]  # fmt: skip
    decisions = judge(
        compile_rules(*rules),
        [create_request(f"t{i}", 2, principal=ALICE) for i in range(50)],
        ClusterFacts(cluster()),
    )
    summary = summarise([v.decision for v in decisions if v.decision is not None], 5)
    assert len(summary.fields["sample"]) == 10
    assert len(summary.violations) == 50  # every rule once: bounded by the policy, not the request
    assert all(len(v["message"]) <= MAX_MESSAGE_CHARS for v in summary.violations)


def test_a_summary_record_follows_the_schema_and_replay_reads_it_as_a_summary() -> None:
    decisions = _decisions([(f"b.{i}", 6) for i in range(300)])
    summary = summarise(decisions, 20)
    first = create_request("b.0", 6, principal=ALICE)
    record = summary_record(
        first,
        _stamp(),
        decision=summary.decision,
        mode=summary.mode,
        violations=summary.violations,
        summary=summary.fields,
    )
    assert record["schema"] == SUMMARY_SCHEMA_VERSION
    assert (record["resource_type"], record["resource"], record["topic"]) == (
        "topics",
        "CreateTopics",
        None,
    )
    assert list(record) == [*list(json_schema()["properties"])[:-4], "summary"]
    DecisionRecord.model_validate(record)
    assert len(json.dumps(record)) < 8_000  # 300 topics, one bounded record
    read = RequestReader().read(json.dumps(record["request"]))
    assert read == Summarised(api="CreateTopics", topics=300)
    # A summary is schema 3 only, and a schema 3 record is a summary.
    with pytest.raises(ValidationError, match="go together"):
        DecisionRecord.model_validate(record | {"schema": 2})
    with pytest.raises(ValidationError, match="go together"):
        DecisionRecord.model_validate({k: v for k, v in record.items() if k != "summary"})
