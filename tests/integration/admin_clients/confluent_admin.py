"""confluent-kafka (librdkafka) as an admin client; BrokerView, the cluster as a broker sees it."""

from __future__ import annotations

import time
import uuid
import warnings
from collections.abc import Mapping, Sequence
from concurrent.futures import Future
from typing import Any

from confluent_kafka import KafkaError, KafkaException, TopicCollection, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    NewTopic,
    OffsetSpec,
    ResourceType,
)

from tests.integration.admin_clients.interface import AdminHarness
from tests.integration.admin_clients.model import (
    PYTHON_TIMEOUT,
    AdminHarnessError,
    ConfigOp,
    ConfigValue,
    NewTopicSpec,
    PartitionIncrease,
    TopicInfo,
    TopicOutcome,
    error_name,
    fold_per_topic,
)


def _confluent_outcome(topic: str, future: Future[Any]) -> TopicOutcome:
    try:
        future.result(timeout=PYTHON_TIMEOUT)
    except KafkaException as exc:
        error: KafkaError = exc.args[0]
        # librdkafka's own names differ (UNKNOWN_TOPIC_OR_PART); local errors (< -1) keep theirs.
        name = error_name(error.code()) if error.code() >= -1 else error.name()
        return TopicOutcome(topic, False, name, error.str())
    return TopicOutcome(topic, True)


def _confluent_uuid(topic_id: Any) -> uuid.UUID:
    mask = (1 << 64) - 1
    high = topic_id.get_most_significant_bits() & mask
    return uuid.UUID(int=(high << 64) | (topic_id.get_least_significant_bits() & mask))


def _confluent_found(name: str, future: Future[Any]) -> Any:
    """The future's result, or None if the answering broker does not know the topic (yet)."""
    outcome = _confluent_outcome(name, future)
    if outcome.ok:
        return future.result()
    if outcome.error != "UNKNOWN_TOPIC_OR_PARTITION":
        raise AdminHarnessError(f"describe {name}: {outcome.error}: {outcome.message}")
    return None


def _confluent_describe(client: AdminClient, names: Sequence[str]) -> dict[str, TopicInfo]:
    if not names:
        return {}
    futures = client.describe_topics(TopicCollection(list(names)))
    described = {name: _confluent_found(name, future) for name, future in futures.items()}
    resources = [ConfigResource(ResourceType.TOPIC, name) for name, d in described.items() if d]
    if not resources:
        return {}
    # Another broker may answer this; one that does not know a new topic yet leaves it out.
    configs = {
        resource.name: _confluent_found(resource.name, future)
        for resource, future in client.describe_configs(resources).items()
    }
    return {
        name: TopicInfo(
            name,
            _confluent_uuid(d.topic_id),
            {p.id: [node.id for node in p.replicas] for p in d.partitions},
            {
                k: ConfigValue(e.value, ConfigSource(e.source).name)
                for k, e in configs[name].items()
            },
        )
        for name, d in described.items()
        if d and configs[name]
    }


def _confluent_config(bootstrap: str, config: Mapping[str, Any] | None) -> dict[str, Any]:
    return {"bootstrap.servers": bootstrap, "client.id": "admin-harness", **(config or {})}


class ConfluentAdmin(AdminHarness):
    """confluent-kafka's AdminClient (librdkafka)."""

    name = "confluent"

    def __init__(self, bootstrap: str, config: Mapping[str, Any] | None = None) -> None:
        self._client = AdminClient(_confluent_config(bootstrap, config))

    def create_topics(
        self, topics: Sequence[NewTopicSpec], validate_only: bool = False
    ) -> list[TopicOutcome]:
        """CreateTopics."""
        new = []
        for t in topics:
            # librdkafka wants the partition count and no replication factor (even -1) next to
            # an assignment.
            if t.assignment is not None:
                assignment = [list(r) for r in t.assignment]
                topic = NewTopic(t.name, len(assignment), replica_assignment=assignment)
            else:
                topic = NewTopic(
                    t.name,
                    -1 if t.partitions is None else t.partitions,
                    -1 if t.replication_factor is None else t.replication_factor,
                )
            topic.config = dict(t.configs)
            new.append(topic)
        futures = self._client.create_topics(new, validate_only=validate_only)
        return [_confluent_outcome(t.name, futures[t.name]) for t in topics]

    def create_partitions(
        self, increases: Sequence[PartitionIncrease], validate_only: bool = False
    ) -> list[TopicOutcome]:
        """CreatePartitions."""
        new = [
            NewPartitions(i.topic, i.total)
            if i.assignment is None
            else NewPartitions(i.topic, i.total, replica_assignment=[list(r) for r in i.assignment])
            for i in increases
        ]
        futures = self._client.create_partitions(new, validate_only=validate_only)
        return [_confluent_outcome(i.topic, futures[i.topic]) for i in increases]

    def incremental_alter_configs(
        self, changes: Mapping[str, Sequence[ConfigOp]], validate_only: bool = False
    ) -> list[TopicOutcome]:
        """IncrementalAlterConfigs on topics (topic -> its changes)."""
        resources = [
            ConfigResource(
                ResourceType.TOPIC,
                topic,
                incremental_configs=[
                    ConfigEntry(o.name, o.value, incremental_operation=AlterConfigOpType[o.op])
                    for o in ops
                ],
            )
            for topic, ops in changes.items()
        ]
        futures = self._client.incremental_alter_configs(resources, validate_only=validate_only)
        return [_confluent_outcome(r.name, futures[r]) for r in resources]

    def alter_configs(
        self, configs: Mapping[str, Mapping[str, str]], validate_only: bool = False
    ) -> list[TopicOutcome]:
        """Legacy AlterConfigs: replaces each topic's dynamic configs (topic -> configs)."""
        resources = [
            ConfigResource(ResourceType.TOPIC, topic, set_config=dict(values))
            for topic, values in configs.items()
        ]
        with warnings.catch_warnings():
            # Deprecated in confluent-kafka, and exactly what this method is for.
            warnings.simplefilter("ignore", DeprecationWarning)
            futures = self._client.alter_configs(resources, validate_only=validate_only)
        return [_confluent_outcome(r.name, futures[r]) for r in resources]

    def delete_topics(self, names: Sequence[str]) -> list[TopicOutcome]:
        """DeleteTopics by name."""
        futures = self._client.delete_topics(list(names))
        return [_confluent_outcome(name, futures[name]) for name in names]

    def delete_records(self, offsets: Mapping[tuple[str, int], int]) -> list[TopicOutcome]:
        """DeleteRecords: (topic, partition) -> delete everything before this offset."""
        partitions = [TopicPartition(t, p, o) for (t, p), o in offsets.items()]
        futures = self._client.delete_records(partitions)
        return fold_per_topic(_confluent_outcome(tp.topic, futures[tp]) for tp in partitions)

    def describe_topics(self, names: Sequence[str]) -> dict[str, TopicInfo]:
        """The named topics that exist, described (missing ones are left out)."""
        return _confluent_describe(self._client, names)

    def close(self) -> None:
        """Nothing to release: librdkafka's admin handle goes with the object."""


class BrokerView:
    """The cluster as a broker reports it (confluent-kafka against the broker's own address)."""

    def __init__(self, bootstrap: str) -> None:
        self._client = AdminClient(_confluent_config(bootstrap, {"client.id": "broker-view"}))

    def topics(self) -> set[str]:
        """Every topic name, internal ones included."""
        return set(self._client.list_topics(timeout=PYTHON_TIMEOUT).topics)

    def describe(self, topic: str) -> TopicInfo | None:
        """Partitions, replica assignment and configs (with sources) of `topic`, or None."""
        return _confluent_describe(self._client, [topic]).get(topic)

    def low_watermarks(self, topic: str) -> dict[int, int]:
        """Partition -> earliest offset (what DeleteRecords moves)."""
        info = self.describe(topic)
        if info is None:
            raise AdminHarnessError(f"topic {topic!r} does not exist")
        request = {TopicPartition(topic, p): OffsetSpec.earliest() for p in info.partitions}
        deadline = time.monotonic() + PYTHON_TIMEOUT
        while True:
            futures = self._client.list_offsets(request)
            try:
                return {
                    tp.partition: f.result(timeout=PYTHON_TIMEOUT).offset
                    for tp, f in futures.items()
                }
            except KafkaException as exc:
                # Leadership moves (reassignments) leave librdkafka's metadata stale a moment.
                if not exc.args[0].retriable() or time.monotonic() > deadline:
                    raise
            time.sleep(0.2)
