"""The Streams topology filter: internal topics a heartbeat would create are judged first."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from kio.schema.errors import ErrorCode
from kio.schema.streams_group_heartbeat.v0.response import StreamsGroupHeartbeatResponse

from harness.streams_messages import Internal, heartbeat
from kafka_policy_proxy.codec.registry import decode_exact
from kafka_policy_proxy.policy.cluster import InMemoryCluster
from kafka_policy_proxy.policy.engine import CompiledPolicy
from kafka_policy_proxy.policy.loader import load_policy
from kafka_policy_proxy.policy.model import TopicState
from kafka_policy_proxy.proxy.filters.api import Answer, Forward, Verdict
from kafka_policy_proxy.proxy.filters.streams_topology import StreamsTopologyFilter
from tests.unit.proxy.contexts import context, settle
from tests.unit.proxy.enforcement_fakes import FakeReader, Records, live_facts

POLICY = load_policy(
    """
version: 1
rules:
  - name: small
    partitions: {max: 12}
  - name: no-unclean
    configs:
      unclean.leader.election.enable: {values: ['false']}
  - name: streams-internal-topics
    streams: {}
"""
)
ORDERS = TopicState(name="orders", partitions=6, replication_factor=1)


@pytest.fixture
def records(tmp_path: Path) -> Records:
    return Records(tmp_path)


async def judge(
    reader: FakeReader, records: Records, request: Any, policy: CompiledPolicy | None = POLICY
) -> Verdict:
    ctx = context(88, 0, request)
    flt = StreamsTopologyFilter(lambda: policy, live_facts(reader), records.recorder)
    verdict: Verdict = await settle(flt.on_request(ctx))
    return verdict


def answered(verdict: Verdict) -> Any:
    assert isinstance(verdict, Answer)
    return decode_exact(StreamsGroupHeartbeatResponse, verdict.body)


async def test_the_issues_changelog_is_refused_and_recorded(records: Records) -> None:
    # The issue's heartbeat: a changelog with a 1 s retention and unclean election, given
    # 1,000 partitions by a repartition topic (a changelog may not declare a count).
    hostile = Internal(
        "app-store-changelog",
        0,
        1,
        {"retention.ms": "1000", "unclean.leader.election.enable": "true"},
    )
    reader = FakeReader(InMemoryCluster(topics=(ORDERS,)))
    request = heartbeat(
        "app",
        sources=["orders"],
        changelogs=[hostile],
        repartitions=[Internal("app-by-key-repartition", 1000)],
    )
    response = answered(await judge(reader, records, request))
    assert response.error_code is ErrorCode.streams_invalid_topology
    assert "app-store-changelog" in response.error_message
    found = {r["topic"]: r for r in records.read()}
    changelog = found["app-store-changelog"]
    assert (changelog["action"], changelog["decision"]) == ("create", "denied")
    assert changelog["api"] == "StreamsGroupHeartbeat"
    assert changelog["request"]["requested"]["partitions"] == 1000
    assert {v["rule"] for v in changelog["violations"]} == {"small", "no-unclean"}
    assert found["app-by-key-repartition"]["decision"] == "denied"


async def test_an_allowed_topology_goes_on_recorded_and_is_then_re_read(records: Records) -> None:
    reader = FakeReader(InMemoryCluster(topics=(ORDERS,)))
    request = heartbeat(
        "app",
        sources=["orders"],
        changelogs=[Internal("app-store-changelog", configs={"cleanup.policy": "compact"})],
    )
    verdict = await judge(reader, records, request)
    assert isinstance(verdict, Forward) and verdict.hook is not None
    [record] = records.read()
    assert record["decision"] == "allowed"
    assert record["request"]["requested"]["partitions"] == 6  # as many as the source topic
    assert verdict.hook(b"answer") == b"answer"
    assert reader.invalidated == ["app-store-changelog"]


async def test_a_changelog_without_the_source_topics_partitions_is_bounded(
    records: Records,
) -> None:
    wide = TopicState(name="wide", partitions=100, replication_factor=1)
    reader = FakeReader(InMemoryCluster(topics=(wide,)))
    request = heartbeat("app", sources=["wide"], changelogs=[Internal("app-s-changelog")])
    response = answered(await judge(reader, records, request))
    assert "100" in response.error_message  # over max_partitions 12


async def test_streams_rules_apply_to_the_internal_topics(records: Records) -> None:
    reader = FakeReader(InMemoryCluster(topics=(ORDERS,)))
    compacted = Internal("app-by-key-repartition", 6, configs={"cleanup.policy": "compact"})
    request = heartbeat("app", sources=["orders"], repartitions=[compacted])
    response = answered(await judge(reader, records, request))
    assert "compacting it drops records" in response.error_message


async def test_existing_internal_topics_are_not_judged(records: Records) -> None:
    existing = TopicState(name="app-store-changelog", partitions=1000, replication_factor=1)
    reader = FakeReader(InMemoryCluster(topics=(ORDERS, existing)))
    hostile = Internal("app-store-changelog", 1000, 1)
    request = heartbeat("app", sources=["orders"], changelogs=[hostile])
    assert await judge(reader, records, request) == Forward()
    assert records.read() == []


async def test_a_denial_names_a_few_topics_and_counts_the_rest(records: Records) -> None:
    reader = FakeReader(InMemoryCluster(topics=(ORDERS,)))
    many = [Internal(f"app-s{i}-changelog", 1000) for i in range(10)]
    request = heartbeat("app", sources=["orders"], changelogs=many)
    response = answered(await judge(reader, records, request))
    assert response.error_message.endswith("; and 7 more")
    written = records.read()
    assert len(written) == 10
    # Each reason named ends with its own decision's id; the others are in their records.
    for record in written[:3]:
        assert f"[small] topic '{record['topic']}' " in response.error_message
        assert f" (decision {record['decision_id']});" in response.error_message
    assert all(r["decision_id"] not in response.error_message for r in written[3:])


async def test_unreadable_cluster_state_is_answered_retriable(records: Records) -> None:
    reader = FakeReader()
    reader.unavailable = True
    request = heartbeat("app", sources=["orders"], changelogs=[Internal("app-s-changelog")])
    response = answered(await judge(reader, records, request))
    assert response.error_code is ErrorCode.coordinator_not_available


async def test_plain_heartbeats_are_not_looked_at(records: Records) -> None:
    reader = FakeReader()
    assert await judge(reader, records, heartbeat("app", member_epoch=5)) == Forward()
    join = heartbeat("app", sources=["orders"], changelogs=[Internal("app-s-changelog", 1000)])
    assert await judge(reader, records, join, policy=None) == Forward()
    assert reader.asked == []


async def test_an_oversized_topology_is_refused_before_it_is_decoded(records: Records) -> None:
    reader = FakeReader(InMemoryCluster(topics=(ORDERS,)))
    many = [Internal(f"app-s{i}-changelog") for i in range(50)]
    request = heartbeat("app", sources=["orders"], changelogs=many)
    flt = StreamsTopologyFilter(lambda: POLICY, live_facts(reader), records.recorder, 40)
    response = answered(await settle(flt.on_request(context(88, 0, request))))
    assert response.error_code is ErrorCode.streams_invalid_topology
    assert response.error_message == "the topology has over 40 elements"
    assert reader.asked == [] and records.read() == []
