"""The reads behind the cluster-state reader's facts, each over one connection: what it asks the
cluster and how the answer becomes facts (proxy/cluster/reader.py caches and shares them)."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import replace
from typing import Any

from kio.schema.errors import ErrorCode
from kio.schema.metadata.v12.request import MetadataRequestTopic
from kio.schema.types import TopicName

from kafka_policy_proxy.policy.model import ConfigMap, TopicState
from kafka_policy_proxy.proxy.cluster.broker_defaults import DEFAULT_SOURCES, topic_defaults
from kafka_policy_proxy.proxy.cluster.client import KafkaClient
from kafka_policy_proxy.proxy.cluster.connection import ClusterConnection
from kafka_policy_proxy.proxy.cluster.discovery import BrokerDiscovery, brokers_request
from kafka_policy_proxy.proxy.cluster.fact_cache import ALL_TOPICS, BROKER_DEFAULTS, Key, name_key
from kafka_policy_proxy.proxy.cluster.requests import (
    BROKER_RESOURCE,
    TOPIC_RESOURCE,
    describe_configs_request,
    kafka_error,
    metadata_request,
    topic_from_metadata,
)
from kafka_policy_proxy.proxy.cluster.unavailable import ReadFailed

# Metadata errors that mean "no such topic" rather than "cannot tell".
_ABSENT = frozenset(
    {
        ErrorCode.unknown_topic_or_partition,
        ErrorCode.unknown_topic_id,
        ErrorCode.invalid_topic_exception,
    }
)
# DescribeConfigs' config_source for a value set on the topic itself.
DYNAMIC_TOPIC_CONFIG = 1
# Names or ids a message lists before "and N more".
LISTED = 3


async def fetch_all(conn: ClusterConnection, keys: list[Key]) -> dict[Key, Any]:
    """Every topic (Metadata only) and the broker count."""
    response = await conn.call(metadata_request(None))
    for topic in response.topics:
        if topic.error_code is not ErrorCode.none:
            raise ReadFailed(f"Metadata for topic {topic.name!r}: {kafka_error(topic.error_code)}")
    topics = tuple(topic_from_metadata(t) for t in response.topics)
    return {ALL_TOPICS: (topics, len(response.brokers))}


async def fetch_named(conn: ClusterConnection, keys: list[Key]) -> dict[Key, TopicState | None]:
    """The named topics' states with their configs; None for an absent one."""
    names = [key[1] for key in keys]
    response = await conn.call(
        metadata_request(
            tuple(MetadataRequestTopic(topic_id=None, name=TopicName(n)) for n in names)
        )
    )
    found = await _with_configs(conn, response.topics)
    return {name_key(name): found.get(name) for name in names}


async def fetch_ids(conn: ClusterConnection, keys: list[Key]) -> dict[Key, TopicState | None]:
    """The states of the topics with these ids, with their configs; None for an unknown id."""
    wanted: dict[Key, uuid.UUID] = {}
    for key in keys:
        with contextlib.suppress(ValueError):
            topic_id = uuid.UUID(key[1])
            # The zero id is Kafka's "no id": it never names a topic.
            if topic_id.int:
                wanted[key] = topic_id
    found: dict[str, TopicState] = {}
    if wanted:
        request = tuple(MetadataRequestTopic(topic_id=i, name=None) for i in wanted.values())
        response = await conn.call(metadata_request(request))
        states = await _with_configs(conn, response.topics)
        found = {str(s.topic_id): s for s in states.values()}
    return {key: found.get(str(wanted.get(key))) for key in keys}


async def _with_configs(
    conn: ClusterConnection, metadata_topics: Iterable[Any]
) -> dict[str, TopicState]:
    """Topic states from Metadata topics, with their effective configs; absent ones left out."""
    states: dict[str, TopicState] = {}
    for topic in metadata_topics:
        if topic.error_code in _ABSENT:
            continue
        if topic.error_code is not ErrorCode.none:
            label = topic.name if topic.name is not None else topic.topic_id
            raise ReadFailed(f"Metadata for topic {label!r}: {kafka_error(topic.error_code)}")
        states[topic.name] = topic_from_metadata(topic)
    if not states:
        return states
    entries = await topic_configs(conn, list(states))
    return {
        name: replace(
            state,
            configs=ConfigMap((c.name, c.value) for c in entries[name]),
            overrides=frozenset(
                c.name for c in entries[name] if c.config_source == DYNAMIC_TOPIC_CONFIG
            ),
        )
        for name, state in states.items()
    }


async def topic_configs(
    conn: ClusterConnection, names: Sequence[str]
) -> dict[str, tuple[Any, ...]]:
    """Every config entry DescribeConfigs returns per topic; any error fails all."""
    response = await conn.call(describe_configs_request(TOPIC_RESOURCE, names))
    entries: dict[str, tuple[Any, ...]] = {}
    for result in response.results:
        if result.error_code is not ErrorCode.none:
            detail = kafka_error(result.error_code, result.error_message)
            raise ReadFailed(f"DescribeConfigs for topic {result.resource_name!r}: {detail}")
        entries[result.resource_name] = result.configs
    missing = set(names) - entries.keys()
    if missing:
        raise ReadFailed(f"DescribeConfigs left out topic(s) {quoted(sorted(missing))}")
    return entries


async def fetch_defaults(
    discovery: BrokerDiscovery, conn: ClusterConnection, keys: list[Key]
) -> dict[Key, ConfigMap]:
    """The connected broker's defaults for topic configs (and creates)."""
    client = await conn.connected()
    node_ids = (
        [conn.node_id] if conn.node_id is not None else await _broker_ids(discovery, conn, client)
    )
    # A broker describes only its own configs and answers INVALID_REQUEST for other ids,
    # so asking for every id finds the one this connection reached.
    request = describe_configs_request(BROKER_RESOURCE, [str(n) for n in node_ids], DEFAULT_SOURCES)
    response = await conn.call(request, client)
    errors = []
    for result in response.results:
        if result.error_code is ErrorCode.none:
            conn.node_id = int(result.resource_name)
            return {BROKER_DEFAULTS: topic_defaults({c.name: c.value for c in result.configs})}
        detail = kafka_error(result.error_code, result.error_message)
        errors.append(f"broker {result.resource_name}: {detail}")
    raise ReadFailed(f"DescribeConfigs on {conn.address}: {'; '.join(errors) or 'no result'}")


async def _broker_ids(
    discovery: BrokerDiscovery, conn: ClusterConnection, client: KafkaClient
) -> list[int]:
    response = await conn.call(brokers_request(), client)
    return sorted(discovery.learn(response).nodes)


def quoted(names: Sequence[str]) -> str:
    """The first few names, quoted, then how many more (a message must not grow with them)."""
    listed = ", ".join(repr(n) for n in names[:LISTED])
    return listed if len(names) <= LISTED else f"{listed} and {len(names) - LISTED} more"
