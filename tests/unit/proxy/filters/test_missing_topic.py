"""A change to a topic the facts show missing is answered as the broker would: no violation."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kafka_policy_proxy.codec.registry import decode_exact, response_class
from kafka_policy_proxy.policy.cluster import InMemoryCluster
from kafka_policy_proxy.policy.loader import load_policy
from kafka_policy_proxy.policy.model import ConfigMap, TopicState
from kafka_policy_proxy.proxy.filters.api import Answer
from kafka_policy_proxy.proxy.filters.topic_policy import TopicPolicyFilter
from tests.unit.codec.guarded_cases import CASES
from tests.unit.proxy.contexts import context, settle
from tests.unit.proxy.enforcement_fakes import FakeReader, Records, live_facts

# Every rule here needs the topic's current state for the change it bounds.
POLICY = load_policy(
    """
version: 1
rules:
  - name: growth
    partitions: {max_increase: 10}
  - name: retention
    configs:
      retention.ms: {immutable: true}
  - name: replicas
    replication: {max: 3}
"""
)
UNKNOWN_TOPIC_OR_PARTITION = 3
POLICY_VIOLATION = 44
# (API key, version): IncrementalAlterConfigs, AlterConfigs, CreatePartitions, reassignments.
CHANGES = [(44, 1), (44, 0), (33, 2), (33, 0), (37, 3), (37, 0), (45, 0)]


def _errors(key: int, version: int, body: bytes) -> list[tuple[int, str | None]]:
    case = CASES[key]
    response: Any = decode_exact(response_class(key, version), body)
    return [
        (int(e.error_code), getattr(e, "error_message", None))
        for result in getattr(response, case.results_field)
        for e in case.result_errors(result)
    ]


@pytest.mark.parametrize(("key", "version"), CHANGES)
async def test_a_missing_topic_is_answered_unknown_topic_or_partition(
    key: int, version: int, tmp_path: Path
) -> None:
    records = Records(tmp_path)
    present = TopicState("here", 1, 1, ConfigMap({"retention.ms": "1000"}))
    reader = FakeReader(InMemoryCluster(topics=(present,)))
    bounds = TopicPolicyFilter(lambda: POLICY, live_facts(reader), records.recorder, -1)
    ctx = context(key, version, CASES[key].request(version, ["gone"]))
    verdict = await settle(bounds.on_request(ctx))
    assert isinstance(verdict, Answer)
    for code, message in _errors(key, version, verdict.body):
        assert code == UNKNOWN_TOPIC_OR_PARTITION
        assert message is None or "topic 'gone' does not exist" in message
    (record,) = records.read()
    assert record["decision"] == "unknown-topic"
    assert [v["rule"] for v in record["violations"]] == ["unknown-topic"]


async def test_a_policy_violation_beside_it_keeps_its_own_code(tmp_path: Path) -> None:
    records = Records(tmp_path)
    present = TopicState("here", 1, 1, ConfigMap({"retention.ms": "1000"}))
    reader = FakeReader(InMemoryCluster(topics=(present,)))
    bounds = TopicPolicyFilter(lambda: POLICY, live_facts(reader), records.recorder, -1)
    ctx = context(44, 1, CASES[44].request(1, ["gone", "here"]))
    verdict = await settle(bounds.on_request(ctx))
    assert isinstance(verdict, Answer)
    codes = [code for code, _ in _errors(44, 1, verdict.body)]
    assert codes == [UNKNOWN_TOPIC_OR_PARTITION, POLICY_VIOLATION]
    assert [r["decision"] for r in records.read()] == ["unknown-topic", "denied"]
