"""The topic policy filter: denied topics answered by the proxy, allowed ones forwarded, merged."""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

import pytest

from codec.registry import decode_exact, encode, request_class, response_class
from policy.engine import CompiledPolicy
from policy.loader import load_policy
from proxy.filter import Answer, Forward, ForwardModified
from proxy.filters.topic_policy import TopicPolicyFilter
from tests.messages import build
from tests.unit.proxy.contexts import context
from tests.unit.proxy.enforcement_fakes import FakeReader, Records, create_topics, live_facts

POLICY = load_policy(
    """
version: 1
rules:
  - name: partitions
    partitions: {max: 6}
  - name: cleanup
    configs:
      cleanup.policy: {immutable: true}
"""
)
POLICY_VIOLATION = 44


@pytest.fixture
def records(tmp_path: Path) -> Records:
    return Records(tmp_path)


def topic_policy(
    reader: FakeReader, records: Records, policy: CompiledPolicy | None = POLICY
) -> TopicPolicyFilter:
    return TopicPolicyFilter(lambda: policy, live_facts(reader), records.recorder, -1)


def created(*names: str) -> bytes:
    m = importlib.import_module(response_class(19, 7).__module__)
    results = tuple(
        build(
            m.CreatableTopicResult,
            name=name,
            topic_id=None,
            error_code=0,
            error_message=None,
            topic_config_error_code=0,
            num_partitions=1,
            replication_factor=1,
            configs=(),
        )
        for name in names
    )
    return encode(build(m.CreateTopicsResponse, throttle_time=0, topics=results))


def errors(body: bytes) -> list[tuple[str, int]]:
    response: Any = decode_exact(response_class(19, 7), body)
    return [(t.name, int(t.error_code)) for t in response.topics]


async def test_denied_topics_are_answered_and_the_rest_forwarded_then_merged(
    records: Records,
) -> None:
    reader = FakeReader()
    ctx = context(19, 7, create_topics(("big", 64), ("small", 3)), principal="User:alice")
    verdict = await topic_policy(reader, records).on_request(ctx)
    assert isinstance(verdict, ForwardModified) and verdict.hook is not None
    forwarded: Any = decode_exact(request_class(19, 7), verdict.frame, ctx.body_offset())
    assert [t.name for t in forwarded.topics] == ["small"]
    merged = verdict.hook(created("small"))
    assert isinstance(merged, bytes)
    assert errors(merged) == [("big", POLICY_VIOLATION), ("small", 0)]
    assert reader.invalidated == ["small"]


async def test_every_decision_is_one_complete_record(records: Records) -> None:
    ctx = context(19, 7, create_topics(("big", 64), ("small", 3)), principal="User:alice")
    await topic_policy(FakeReader(), records).on_request(ctx)
    big, small = records.read()
    assert (big["topic"], big["decision"]) == ("big", "denied")
    assert (small["topic"], small["decision"]) == ("small", "allowed")
    assert big["decision_id"] != small["decision_id"]
    for record in (big, small):
        assert record["policy_revision"] == POLICY.revision
        assert (record["cluster_id"], record["proxy_id"]) == ("c1", "proxy-a:9192")
        assert (record["principal"], record["client"]) == ("User:alice", "10.0.0.7:50000")
        assert (record["api"], record["api_key"], record["api_version"]) == ("CreateTopics", 19, 7)


async def test_all_denied_never_reaches_the_broker(records: Records) -> None:
    ctx = context(19, 7, create_topics(("big", 64)))
    verdict = await topic_policy(FakeReader(), records).on_request(ctx)
    assert isinstance(verdict, Answer)
    assert errors(verdict.body) == [("big", POLICY_VIOLATION)]


async def test_unreadable_cluster_state_denies_a_change_the_rules_must_check(
    records: Records,
) -> None:
    reader = FakeReader()
    reader.unavailable = True
    m = importlib.import_module(request_class(44, 1).__module__)
    resource = build(
        m.AlterConfigsResource,
        resource_type=2,
        resource_name="orders",
        configs=(build(m.AlterableConfig, name="cleanup.policy", config_operation=0, value="x"),),
    )
    request = build(m.IncrementalAlterConfigsRequest, resources=(resource,), validate_only=False)
    verdict = await topic_policy(reader, records).on_request(context(44, 1, request))
    assert isinstance(verdict, Answer)
    [record] = records.read()
    assert record["decision"] == "denied"
    assert record["violations"][0]["rule"] == "cluster-state"


async def test_validate_only_leaves_the_cache_alone(records: Records) -> None:
    reader = FakeReader()
    ctx = context(19, 7, create_topics(("small", 3), validate_only=True))
    verdict = await topic_policy(reader, records).on_request(ctx)
    assert isinstance(verdict, Forward) and verdict.hook is not None
    assert verdict.hook(created("small")) == created("small")
    assert reader.invalidated == []


async def test_without_a_policy_everything_is_forwarded_unjudged(records: Records) -> None:
    reader = FakeReader()
    verdict = await topic_policy(reader, records, None).on_request(
        context(19, 7, create_topics(("big", 64)))
    )
    assert isinstance(verdict, Forward)
    assert reader.asked == [] and records.read() == []
