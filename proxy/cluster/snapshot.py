"""A cluster snapshot: every topic of a cluster as JSON Lines (see docs/snapshot.md).

The cluster is read over the proxy's own cluster-state connection (ClusterStateReader), page by
page: DescribeTopicPartitions where the broker has it (Kafka 3.8+ in KRaft mode), else one
all-topics Metadata for the names and then Metadata per batch; each batch's DescribeConfigs is
written before the next page is fetched, so memory does not grow with the number of topics.
"""

from __future__ import annotations

import json
import ssl
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any, TextIO, TypeVar

from kio.schema.api_versions.v0.request import ApiVersionsRequest
from kio.schema.describe_topic_partitions.v0.request import (
    Cursor,
    DescribeTopicPartitionsRequest,
)
from kio.schema.errors import ErrorCode
from kio.schema.metadata.v12.request import MetadataRequestTopic
from kio.schema.types import TopicName
from kio.static.primitive import i32

from kafka_policy_proxy.policy.model import ConfigMap, Fact, TopicState
from kafka_policy_proxy.proxy.cluster.client import SaslLogin
from kafka_policy_proxy.proxy.cluster.reader import ClusterStateReader
from kafka_policy_proxy.proxy.cluster.requests import (
    kafka_error,
    metadata_request,
    topic_from_metadata,
)
from kafka_policy_proxy.proxy.cluster.unavailable import ClusterStateUnavailable
from kafka_policy_proxy.proxy.config import HostPort

T = TypeVar("T")

SCHEMA = 1
DEFAULT_TIMEOUT_S = 30.0
# Kafka caps a DescribeTopicPartitions page at max.request.partition.size.limit (2000).
PARTITION_PAGE = 2000
# Topics per DescribeConfigs request (and per Metadata request without DescribeTopicPartitions).
CONFIG_BATCH = 200
DESCRIBE_TOPIC_PARTITIONS = 75

# DescribeConfigs' config_source codes, under the names Kafka's Admin API gives them.
CONFIG_SOURCES: Mapping[int, str] = {
    0: "UNKNOWN",
    1: "DYNAMIC_TOPIC_CONFIG",
    2: "DYNAMIC_BROKER_CONFIG",
    3: "DYNAMIC_DEFAULT_BROKER_CONFIG",
    4: "STATIC_BROKER_CONFIG",
    5: "DEFAULT_CONFIG",
    6: "DYNAMIC_BROKER_LOGGER_CONFIG",
    7: "DYNAMIC_CLIENT_METRICS_CONFIG",
    8: "DYNAMIC_GROUP_CONFIG",
}


def parse_bootstrap(text: str) -> list[tuple[str, int]]:
    """'host:port,host:port' as (host, port) pairs; ValueError names a bad entry."""
    servers = []
    for part in text.split(","):
        try:
            address = HostPort.parse(part)
        except ValueError:
            raise ValueError(f"--bootstrap-server: {part.strip()!r} is not host:port") from None
        servers.append((address.host, address.port))
    return servers


async def write_snapshot(
    bootstrap_servers: str,
    out: TextIO,
    *,
    sasl: SaslLogin | None = None,
    tls: ssl.SSLContext | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    partition_page: int = PARTITION_PAGE,
    config_batch: int = CONFIG_BATCH,
    describe_topic_partitions: bool = True,
) -> int:
    """Write the snapshot's lines to `out` batch by batch; return the number of topic lines.

    `describe_topic_partitions=False` pages with Metadata even where the broker has
    DescribeTopicPartitions (as for older brokers).
    """
    reader = ClusterStateReader(
        parse_bootstrap(bootstrap_servers), request_timeout_s=timeout_s, sasl=sasl, tls=tls
    )
    try:
        taken_at = datetime.now(UTC)
        cluster = await reader.request(metadata_request(()), "the broker list")
        defaults = (await reader.snapshot({Fact.BROKER_DEFAULTS})).broker_default_configs()
        cluster_id = cluster.cluster_id
        _write(
            out,
            {
                "kind": "cluster",
                "schema": SCHEMA,
                "cluster_id": cluster_id,
                "taken_at": taken_at.strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
                "bootstrap_servers": bootstrap_servers,
                "controller_id": int(cluster.controller_id) if cluster.controller_id >= 0 else None,
                "brokers": [
                    {"id": int(b.node_id), "host": b.host, "port": int(b.port), "rack": b.rack}
                    for b in sorted(cluster.brokers, key=lambda b: int(b.node_id))
                ],
                "defaults": dict(sorted(defaults.items())),
            },
        )
        if describe_topic_partitions and await _supports(reader, DESCRIBE_TOPIC_PARTITIONS):
            topics = _paged_topics(reader, partition_page)
        else:
            topics = _listed_topics(reader, config_batch)
        count = 0
        async for batch in _batches(topics, config_batch):
            configs = await reader.topic_configs([state.name for state in batch])
            for state in batch:
                _write(out, topic_line(cluster_id, state, configs[state.name]))
            count += len(batch)
        _write(out, {"kind": "end", "cluster_id": cluster_id, "topics": count})
        return count
    finally:
        await reader.close()


def topic_line(cluster_id: str | None, state: TopicState, entries: Sequence[Any]) -> dict[str, Any]:
    """A topic's line: its state (as TopicState.to_dict) with DescribeConfigs' config entries."""
    entries = sorted(entries, key=lambda e: str(e.name))  # stable order, for diffs
    configs = ConfigMap((e.name, e.value) for e in entries)
    sources = {e.name: CONFIG_SOURCES.get(int(e.config_source), "UNKNOWN") for e in entries}
    line: dict[str, Any] = {"kind": "topic", "cluster_id": cluster_id}
    for key, value in replace(state, configs=configs).to_dict().items():
        line[key] = value
        if key == "configs":
            line["config_sources"] = sources
    return line


def _write(out: TextIO, line: Mapping[str, Any]) -> None:
    out.write(json.dumps(line, separators=(",", ":")) + "\n")


async def _supports(reader: ClusterStateReader, api_key: int) -> bool:
    response = await reader.request(ApiVersionsRequest(), "the broker's API versions")
    if response.error_code is not ErrorCode.none:
        raise ClusterStateUnavailable(
            f"cannot read the broker's API versions: {kafka_error(response.error_code)}"
        )
    return any(int(api.api_key) == api_key for api in response.api_keys)


async def _paged_topics(reader: ClusterStateReader, page: int) -> AsyncIterator[TopicState]:
    """Every topic in name order from DescribeTopicPartitions pages; a topic may span pages."""
    cursor: Cursor | None = None
    current: Any = None  # the last topic of a page, which the next page may continue
    while True:
        request = DescribeTopicPartitionsRequest(
            topics=(), response_partition_limit=i32(page), cursor=cursor
        )
        response = await reader.request(request, "the topic list")
        for topic in response.topics:
            _check(topic, "DescribeTopicPartitions")
            if current is not None and topic.name == current.name:
                current = replace(current, partitions=current.partitions + topic.partitions)
                continue
            if current is not None:
                yield topic_from_metadata(current)
            current = topic
        if response.next_cursor is None:
            break
        following = Cursor(
            topic_name=response.next_cursor.topic_name,
            partition_index=response.next_cursor.partition_index,
        )
        # A cursor that does not move would page forever.
        if following == cursor:
            raise ClusterStateUnavailable(
                "cannot read the topic list from the cluster: DescribeTopicPartitions returned "
                f"the same cursor ({following.topic_name!r}, {following.partition_index}) again"
            )
        cursor = following
    if current is not None:
        yield topic_from_metadata(current)


async def _listed_topics(reader: ClusterStateReader, batch: int) -> AsyncIterator[TopicState]:
    """Every topic in name order: names from one all-topics Metadata, then Metadata per batch."""
    names = await _topic_names(reader)
    for start in range(0, len(names), batch):
        chunk = names[start : start + batch]
        request = metadata_request(
            tuple(MetadataRequestTopic(topic_id=None, name=TopicName(n)) for n in chunk)
        )
        response = await reader.request(request, f"the metadata of {len(chunk)} topic(s)")
        for topic in sorted(response.topics, key=lambda t: str(t.name)):
            _check(topic, "Metadata")
            yield topic_from_metadata(topic)


async def _topic_names(reader: ClusterStateReader) -> list[str]:
    # Only the names outlive this call: the full answer is dropped before paging starts.
    response = await reader.request(metadata_request(None), "the topic list")
    return sorted(str(topic.name) for topic in response.topics)


def _check(topic: Any, api: str) -> None:
    if topic.error_code is not ErrorCode.none:
        raise ClusterStateUnavailable(
            f"cannot read topic {topic.name!r} from the cluster: {api} answered "
            f"{kafka_error(topic.error_code)}"
        )


async def _batches(items: AsyncIterator[T], size: int) -> AsyncIterator[list[T]]:
    batch: list[T] = []
    async for item in items:
        batch.append(item)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch
