"""The requests the proxy sends to read cluster state, and the mapping of their answers."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from kio.schema.describe_configs.v4.request import DescribeConfigsRequest, DescribeConfigsResource
from kio.schema.errors import ErrorCode
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
from kio.static.primitive import i8

from kafka_policy_proxy.policy.model import TopicState, freeze_assignment

TOPIC_RESOURCE = i8(2)
BROKER_RESOURCE = i8(4)


def metadata_request(topics: tuple[MetadataRequestTopic, ...] | None) -> MetadataRequest:
    """Metadata v12 for these topics (None: all, empty: none), never auto-creating one."""
    return MetadataRequest(
        topics=topics, allow_auto_topic_creation=False, include_topic_authorized_operations=False
    )


def describe_configs_request(
    resource_type: i8, names: Iterable[str], keys: tuple[str, ...] | None = None
) -> DescribeConfigsRequest:
    """DescribeConfigs v4 for these configs (None: every one) of these resources, without
    synonyms or docs."""
    return DescribeConfigsRequest(
        resources=tuple(
            DescribeConfigsResource(
                resource_type=resource_type, resource_name=name, configuration_keys=keys
            )
            for name in names
        ),
        include_synonyms=False,
        include_documentation=False,
    )


def topic_from_metadata(topic: Any) -> TopicState:
    """A topic's state (no configs) from a Metadata or DescribeTopicPartitions response topic."""
    # A partition error (say, no leader) leaves its replica list valid: not a failure here.
    assignment = freeze_assignment((p.partition_index, p.replica_nodes) for p in topic.partitions)
    return TopicState(
        name=topic.name,
        topic_id=None if topic.topic_id is None else str(topic.topic_id),
        partitions=len(assignment),
        # As Kafka's tools report it: the replica count of the first partition.
        replication_factor=len(assignment[0][1]) if assignment else 0,
        assignment=assignment,
        internal=bool(topic.is_internal),
    )


def kafka_error(code: ErrorCode, message: str | None = None) -> str:
    """A Kafka error as `NAME (code)`, with the broker's message if any."""
    text = f"{code.name.upper()} ({code.value})"
    return f"{text}: {message}" if message else text
