"""The per-topic views the policy layer evaluates."""

from __future__ import annotations

import dataclasses
import uuid

import pytest

from harness.messages import build
from kafka_policy_proxy.codec.errors import CodecError
from kafka_policy_proxy.codec.guarded import guarded_api
from kafka_policy_proxy.codec.guarded.base import element_class
from kafka_policy_proxy.codec.registry import encode, request_class
from kafka_policy_proxy.codec.topic_view import (
    AlterConfigsItem,
    CreatePartitionsItem,
    CreateTopicItem,
    DeleteRecordsItem,
    DeleteTopicItem,
    IncrementalAlterConfigsItem,
    ReassignmentItem,
)


def _decoded(key: int, version: int, **fields: object) -> object:
    """Build, encode and decode through the guarded codec, as the proxy would see it."""
    api = guarded_api(key)
    assert api is not None
    return api.decode_request(version, encode(build(request_class(key, version), **fields)))


def _items(key: int, request: object) -> list[object]:
    api = guarded_api(key)
    assert api is not None
    return list(api.topic_items(request))


def test_create_topics_item() -> None:
    cls = request_class(19, 7)
    topic_cls = element_class(cls, "topics")
    assignment_cls = element_class(topic_cls, "assignments")
    config_cls = element_class(topic_cls, "configs")
    explicit = build(
        topic_cls,
        name="explicit",
        num_partitions=-1,
        replication_factor=-1,
        assignments=(build(assignment_cls, partition_index=0, broker_ids=(1, 2)),),
        configs=(build(config_cls, name="cleanup.policy", value=None),),
    )
    default = build(
        topic_cls,
        name="default",
        num_partitions=-1,
        replication_factor=-1,
        assignments=(),
        configs=(),
    )
    request = _decoded(19, 7, topics=(explicit, default), timeout=1000, validate_only=False)
    assert _items(19, request) == [
        CreateTopicItem(
            index=0,
            topic="explicit",
            num_partitions=-1,
            replication_factor=-1,
            assignments=((0, (1, 2)),),
            configs=(("cleanup.policy", None),),
        ),
        CreateTopicItem(
            index=1,
            topic="default",
            num_partitions=-1,
            replication_factor=-1,
            assignments=(),
            configs=(),
        ),
    ]
    assert {item.action for item in _items(19, request)} == {"create"}  # type: ignore[attr-defined]


def test_items_are_immutable_plain_data() -> None:
    item = DeleteTopicItem(index=0, topic="a")
    with pytest.raises(dataclasses.FrozenInstanceError):
        item.topic = "b"  # type: ignore[misc]
    assert dataclasses.asdict(item) == {
        "index": 0,
        "topic": "a",
        "topic_id": None,
        "action": "delete",
    }


def test_alter_configs_item_is_the_full_replacement_set() -> None:
    resource_cls = element_class(request_class(33, 2), "resources")
    config_cls = element_class(resource_cls, "configs")
    configs = (
        build(config_cls, name="retention.ms", value="1"),
        build(config_cls, name="x", value=None),
    )
    resources = (build(resource_cls, resource_type=2, resource_name="t", configs=configs),)
    request = _decoded(33, 2, resources=resources, validate_only=False)
    assert _items(33, request) == [
        AlterConfigsItem(index=0, topic="t", configs=(("retention.ms", "1"), ("x", None)))
    ]
    assert _items(33, request)[0].action == "alter"  # type: ignore[attr-defined]


def test_incremental_alter_configs_ops_are_named() -> None:
    resource_cls = element_class(request_class(44, 1), "resources")
    config_cls = element_class(resource_cls, "configs")
    ops = tuple(
        build(config_cls, name=f"k{op}", config_operation=op, value=None if op == 1 else "v")
        for op in range(4)
    )
    resources = (build(resource_cls, resource_type=2, resource_name="t", configs=ops),)
    request = _decoded(44, 1, resources=resources, validate_only=False)
    assert _items(44, request) == [
        IncrementalAlterConfigsItem(
            index=0,
            topic="t",
            ops=(
                ("k0", "SET", "v"),
                ("k1", "DELETE", None),
                ("k2", "APPEND", "v"),
                ("k3", "SUBTRACT", "v"),
            ),
        )
    ]


def test_unknown_config_operation_on_a_topic_fails_closed() -> None:
    resource_cls = element_class(request_class(44, 0), "resources")
    config_cls = element_class(resource_cls, "configs")
    bad = (build(config_cls, name="retention.ms", config_operation=9, value="1"),)
    topic = build(resource_cls, resource_type=2, resource_name="t", configs=bad)
    request = _decoded(44, 0, resources=(topic,), validate_only=False)
    with pytest.raises(CodecError, match="unknown config operation 9") as caught:
        _items(44, request)
    assert (caught.value.api_key, caught.value.api_version) == (44, 0)
    # The same operation on a broker resource is the broker's business.
    broker = dataclasses.replace(topic, resource_type=4)
    assert _items(44, dataclasses.replace(request, resources=(broker,))) == []


def test_create_partitions_item() -> None:
    topic_cls = element_class(request_class(37, 3), "topics")
    assignment_cls = element_class(topic_cls, "assignments")
    topics = (
        build(topic_cls, name="a", count=4, assignments=None),
        build(
            topic_cls, name="b", count=2, assignments=(build(assignment_cls, broker_ids=(3, 1)),)
        ),
    )
    request = _decoded(37, 3, topics=topics, timeout=1000, validate_only=False)
    assert _items(37, request) == [
        CreatePartitionsItem(index=0, topic="a", count=4, assignments=None),
        CreatePartitionsItem(index=1, topic="b", count=2, assignments=((3, 1),)),
    ]


def test_reassignment_item_keeps_cancellations() -> None:
    topic_cls = element_class(request_class(45, 1), "topics")
    partition_cls = element_class(topic_cls, "partitions")
    partitions = (
        build(partition_cls, partition_index=0, replicas=(1, 2, 3)),
        build(partition_cls, partition_index=1, replicas=None),
    )
    request = _decoded(
        45, 1, topics=(build(topic_cls, name="a", partitions=partitions),), timeout=1
    )
    assert _items(45, request) == [
        ReassignmentItem(index=0, topic="a", partitions=((0, (1, 2, 3)), (1, None)))
    ]


def test_delete_records_item() -> None:
    topic_cls = element_class(request_class(21, 2), "topics")
    partition_cls = element_class(topic_cls, "partitions")
    partitions = (
        build(partition_cls, partition_index=0, offset=-1),
        build(partition_cls, partition_index=3, offset=9),
    )
    request = _decoded(
        21, 2, topics=(build(topic_cls, name="a", partitions=partitions),), timeout=1
    )
    assert _items(21, request) == [DeleteRecordsItem(index=0, topic="a", offsets=((0, -1), (3, 9)))]
    assert _items(21, request)[0].action == "delete_records"  # type: ignore[attr-defined]


def test_delete_topics_items_by_name_and_by_id() -> None:
    assert _items(20, _decoded(20, 4, topic_names=("a", "b"), timeout=1)) == [
        DeleteTopicItem(index=0, topic="a"),
        DeleteTopicItem(index=1, topic="b"),
    ]
    state_cls = element_class(request_class(20, 6), "topics")
    topic_id = uuid.uuid4()
    topics = (
        build(state_cls, name="a", topic_id=None),
        build(state_cls, name=None, topic_id=topic_id),
    )
    assert _items(20, _decoded(20, 6, topics=topics, timeout=1)) == [
        DeleteTopicItem(index=0, topic="a"),
        DeleteTopicItem(index=1, topic=None, topic_id=topic_id),
    ]
