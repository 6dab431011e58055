"""The topic policy filter: denied topics answered by the proxy, allowed ones forwarded, merged."""

from __future__ import annotations

import importlib
import uuid
from pathlib import Path
from typing import Any

import pytest

from harness.messages import build
from kafka_policy_proxy.codec.registry import decode_exact, encode, request_class, response_class
from kafka_policy_proxy.policy.cluster import InMemoryCluster
from kafka_policy_proxy.policy.engine import CompiledPolicy
from kafka_policy_proxy.policy.loader import load_policy
from kafka_policy_proxy.policy.model import ConfigMap, Fact, TopicState
from kafka_policy_proxy.proxy.filters.api import Answer, Forward, ForwardModified
from kafka_policy_proxy.proxy.filters.topic_policy import TopicPolicyFilter
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
INVALID_REQUEST = 42
UNKNOWN_TOPIC_ID = 100


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


PROTECTING = load_policy(
    """
version: 1
rules:
  - name: protected
    match: {topic: 'protected\\..+', actions: [delete]}
    deny: true
    message: protected topic
"""
)
PROTECTED_ID = uuid.UUID("0f6c9a1e-3b0a-4a8e-9d51-2f9f7e3c1a01")
OPEN_ID = uuid.UUID("5d2e7b44-1c9a-4f0e-8e2b-6a7c3d9f0b12")
UNKNOWN_ID = uuid.UUID("9a8b7c6d-5e4f-4a3b-8c2d-1e0f9a8b7c6d")
CLUSTER = InMemoryCluster(
    (
        TopicState("protected.orders", str(PROTECTED_ID), 1, 1),
        TopicState("open.orders", str(OPEN_ID), 1, 1),
    )
)


def delete_by_id(*ids: uuid.UUID, names: tuple[str | None, ...] = ()) -> Any:
    m = importlib.import_module(request_class(20, 6).__module__)
    names = names or (None,) * len(ids)
    topics = tuple(
        build(m.DeleteTopicState, name=name, topic_id=i) for name, i in zip(names, ids, strict=True)
    )
    return build(m.DeleteTopicsRequest, topics=topics, timeout=30_000)


def deleted(*results: tuple[str, uuid.UUID, int]) -> bytes:
    m = importlib.import_module(response_class(20, 6).__module__)
    responses = tuple(
        build(m.DeletableTopicResult, name=n, topic_id=i, error_code=e, error_message=None)
        for n, i, e in results
    )
    return encode(build(m.DeleteTopicsResponse, throttle_time=0, responses=responses))


def delete_results(body: bytes) -> list[tuple[str | None, uuid.UUID | None, int]]:
    response: Any = decode_exact(response_class(20, 6), body)
    return [(r.name, r.topic_id, int(r.error_code)) for r in response.responses]


async def test_an_unknown_topic_id_is_answered_by_the_proxy_never_forwarded(
    records: Records,
) -> None:
    reader = FakeReader(CLUSTER)
    f = TopicPolicyFilter(lambda: PROTECTING, live_facts(reader, (0.0, 0.0)), records.recorder, -1)
    verdict = await f.on_request(context(20, 6, delete_by_id(UNKNOWN_ID)))
    assert isinstance(verdict, Answer)
    assert delete_results(verdict.body) == [(None, UNKNOWN_ID, UNKNOWN_TOPIC_ID)]
    # Read afresh from the cluster, then twice more before answering, and nothing recorded.
    assert len(reader.asked) == 3
    assert all(fresh == frozenset(Fact) for fresh in reader.fresh)
    assert records.read() == []


async def test_a_denied_delete_by_id_answers_with_the_resolved_name(records: Records) -> None:
    reader = FakeReader(CLUSTER)
    f = TopicPolicyFilter(lambda: PROTECTING, live_facts(reader), records.recorder, -1)
    ctx = context(20, 6, delete_by_id(PROTECTED_ID, UNKNOWN_ID, OPEN_ID))
    verdict = await f.on_request(ctx)
    assert isinstance(verdict, ForwardModified) and verdict.hook is not None
    forwarded: Any = decode_exact(request_class(20, 6), verdict.frame, ctx.body_offset())
    assert [t.topic_id for t in forwarded.topics] == [OPEN_ID]
    merged = verdict.hook(deleted(("open.orders", OPEN_ID, 0)))
    assert isinstance(merged, bytes)
    assert delete_results(merged) == [
        ("protected.orders", PROTECTED_ID, POLICY_VIOLATION),
        (None, UNKNOWN_ID, UNKNOWN_TOPIC_ID),
        ("open.orders", OPEN_ID, 0),
    ]
    [record] = [r for r in records.read() if r["decision"] == "denied"]
    assert record["topic"] == "protected.orders"


async def test_a_delete_by_id_the_broker_accepted_is_known_deleted(records: Records) -> None:
    reader = FakeReader(CLUSTER)
    f = TopicPolicyFilter(lambda: PROTECTING, live_facts(reader), records.recorder, -1)
    verdict = await f.on_request(context(20, 6, delete_by_id(OPEN_ID)))
    assert isinstance(verdict, Forward) and verdict.hook is not None
    body = deleted(("open.orders", OPEN_ID, 0))
    assert verdict.hook(body) == body
    assert reader.invalidated == ["open.orders"]
    assert reader.deleted_topics == [("open.orders", str(OPEN_ID))]


async def test_a_delete_the_broker_refused_is_only_forgotten(records: Records) -> None:
    reader = FakeReader(CLUSTER)
    f = TopicPolicyFilter(lambda: PROTECTING, live_facts(reader), records.recorder, -1)
    verdict = await f.on_request(context(20, 6, delete_by_id(OPEN_ID)))
    assert isinstance(verdict, Forward) and verdict.hook is not None
    verdict.hook(deleted(("open.orders", OPEN_ID, 41)))
    assert reader.deleted_topics == []
    assert set(reader.invalidated) == {"open.orders"}


async def test_an_entry_with_a_name_and_an_id_is_refused(records: Records) -> None:
    reader = FakeReader(CLUSTER)
    f = TopicPolicyFilter(lambda: PROTECTING, live_facts(reader), records.recorder, -1)
    request = delete_by_id(PROTECTED_ID, names=("open.orders",))
    verdict = await f.on_request(context(20, 6, request))
    assert isinstance(verdict, Answer)
    assert delete_results(verdict.body) == [("open.orders", PROTECTED_ID, INVALID_REQUEST)]


BROKER_POLICY = load_policy(
    """
version: 1
rules:
  - name: retention
    configs:
      retention.ms: {max: 7d}
broker_configs:
  - name: ops
    principals: ['User:ops']
    resources: [cluster_default]
    keys: [log.retention.ms]
"""
)


def alter_cluster_default(value: str) -> Any:
    m = importlib.import_module(request_class(44, 1).__module__)
    config = build(m.AlterableConfig, name="log.retention.ms", config_operation=0, value=value)
    resource = build(m.AlterConfigsResource, resource_type=4, resource_name="", configs=(config,))
    return build(m.IncrementalAlterConfigsRequest, resources=(resource,), validate_only=False)


def altered(error_code: int = 0, resource_type: int = 4, resource_name: str = "") -> bytes:
    r = importlib.import_module(response_class(44, 1).__module__)
    result = build(
        r.AlterConfigsResourceResponse,
        error_code=error_code,
        error_message=None,
        resource_type=resource_type,
        resource_name=resource_name,
    )
    return encode(build(r.IncrementalAlterConfigsResponse, throttle_time=0, responses=(result,)))


def altered_errors(body: bytes) -> list[tuple[str, int, str | None]]:
    response: Any = decode_exact(response_class(44, 1), body)
    return [(r.resource_name, int(r.error_code), r.error_message) for r in response.responses]


async def test_a_cluster_default_no_rule_grants_is_answered_and_recorded(
    records: Records,
) -> None:
    reader = FakeReader()
    ctx = context(44, 1, alter_cluster_default("1"), principal="User:app")
    verdict = await topic_policy(reader, records, BROKER_POLICY).on_request(ctx)
    assert isinstance(verdict, Answer)
    ((name, code, message),) = altered_errors(verdict.body)
    assert (name, code) == ("", POLICY_VIOLATION)
    assert message is not None and "User:app may not change log.retention.ms" in message
    assert reader.asked == []  # denied by the grants alone
    (record,) = records.read()
    assert (record["action"], record["resource_type"], record["resource"]) == (
        "alter_broker_config",
        "cluster",
        "",
    )
    assert record["decision"] == "denied" and record["principal"] == "User:app"


async def test_a_granted_default_is_checked_against_every_inheriting_topic(
    records: Records,
) -> None:
    orders = TopicState(
        name="orders", topic_id=str(uuid.uuid4()), partitions=1, overrides=frozenset()
    )
    reader = FakeReader(InMemoryCluster.of([orders], 3, {"retention.ms": "86400000"}))
    ctx = context(44, 1, alter_cluster_default(str(30 * 86_400_000)), principal="User:ops")
    verdict = await topic_policy(reader, records, BROKER_POLICY).on_request(ctx)
    assert isinstance(verdict, Answer)
    ((_, code, message),) = altered_errors(verdict.body)
    assert code == POLICY_VIOLATION and message is not None
    assert "would put 1 topic that inherit it outside the topic rules: orders" in message
    assert records.read()[0]["request"]["outside"] == ["orders"]


async def test_an_allowed_broker_config_change_drops_the_cached_facts(records: Records) -> None:
    reader = FakeReader()
    ctx = context(44, 1, alter_cluster_default("3600000"), principal="User:ops")
    verdict = await topic_policy(reader, records, BROKER_POLICY).on_request(ctx)
    assert isinstance(verdict, Forward) and verdict.hook is not None
    assert verdict.hook(altered()) == altered()
    assert reader.defaults_invalidated == 1
    # What the broker accepted is awaited on the reader's broker before the next read.
    ((item),) = reader.applied
    assert (item.resource_type, item.name, item.ops) == (
        4,
        "",
        (("log.retention.ms", "SET", "3600000"),),
    )


async def test_a_broker_config_change_the_broker_refused_is_not_awaited(records: Records) -> None:
    reader = FakeReader()
    ctx = context(44, 1, alter_cluster_default("3600000"), principal="User:ops")
    verdict = await topic_policy(reader, records, BROKER_POLICY).on_request(ctx)
    assert isinstance(verdict, Forward) and verdict.hook is not None
    assert verdict.hook(altered(42)) == altered(42)
    assert (reader.defaults_invalidated, reader.applied) == (1, [])
    assert records.read()[0]["decision"] == "allowed"


ORDERS = TopicState(
    "orders",
    partitions=3,
    replication_factor=3,
    configs=ConfigMap({"retention.ms": "86400000", "cleanup.policy": "delete"}),
    overrides=frozenset({"retention.ms"}),
)
SET, DELETE = 0, 1


def alter_topic(*ops: tuple[str, int, str | None], api_version: int = 1) -> Any:
    m = importlib.import_module(request_class(44, api_version).__module__)
    configs = tuple(
        build(m.AlterableConfig, name=n, config_operation=op, value=v) for n, op, v in ops
    )
    resource = build(
        m.AlterConfigsResource, resource_type=2, resource_name="orders", configs=configs
    )
    return build(m.IncrementalAlterConfigsRequest, resources=(resource,), validate_only=False)


def topic_altered(error_code: int = 0) -> bytes:
    return altered(error_code, resource_type=2, resource_name="orders")


async def test_a_config_set_the_broker_accepted_is_cached_as_its_new_state(
    records: Records,
) -> None:
    reader = FakeReader(InMemoryCluster.of([ORDERS], 3))
    ctx = context(
        44, 1, alter_topic(("retention.ms", SET, "3600000"), ("segment.ms", SET, "60000"))
    )
    verdict = await topic_policy(reader, records).on_request(ctx)
    assert isinstance(verdict, Forward) and verdict.hook is not None
    assert verdict.hook(topic_altered()) == topic_altered()
    assert reader.invalidated == []
    [state] = reader.changed_states
    assert state.configs == {
        "retention.ms": "3600000",
        "cleanup.policy": "delete",
        "segment.ms": "60000",
    }
    assert state.overrides == {"retention.ms", "segment.ms"}
    assert (state.partitions, state.replication_factor) == (3, 3)


async def test_a_config_change_the_broker_refused_is_dropped_not_cached(records: Records) -> None:
    reader = FakeReader(InMemoryCluster.of([ORDERS], 3))
    ctx = context(44, 1, alter_topic(("retention.ms", SET, "3600000")))
    verdict = await topic_policy(reader, records).on_request(ctx)
    assert isinstance(verdict, Forward) and verdict.hook is not None
    verdict.hook(topic_altered(error_code=40))  # INVALID_CONFIG
    assert (reader.changed_states, reader.invalidated) == ([], ["orders"])


async def test_a_config_delete_is_dropped_its_default_is_not_the_proxys_to_guess(
    records: Records,
) -> None:
    reader = FakeReader(InMemoryCluster.of([ORDERS], 3))
    ctx = context(44, 1, alter_topic(("retention.ms", DELETE, None)))
    verdict = await topic_policy(reader, records).on_request(ctx)
    assert isinstance(verdict, Forward) and verdict.hook is not None
    verdict.hook(topic_altered())
    assert (reader.changed_states, reader.invalidated) == ([], ["orders"])
