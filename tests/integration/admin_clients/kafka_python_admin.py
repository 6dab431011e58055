"""kafka-python's KafkaAdminClient as an admin client."""

from __future__ import annotations

import re
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

import kafka.errors
from kafka import KafkaAdminClient
from kafka import TopicPartition as KpTopicPartition
from kafka.admin import ConfigResource as KpConfigResource
from kafka.admin import ConfigResourceType

from tests.integration.admin_clients.interface import AdminHarness
from tests.integration.admin_clients.model import (
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

# kafka-python's DeleteRecords errors name the failed partitions only in the exception text.
_KP_ONE_PARTITION = re.compile(r"Error deleting records from topic (\S+) partition (\d+)")
_KP_PARTITIONS = re.compile(r"([\w.-]+)\(partition=(\d+)\): (\w+)")
# str() of kafka-python's broker errors: "[Error 44] PolicyViolationError: <message>".
_KP_ERROR_TEXT = re.compile(r"\[Error (-?\d+)\] \w+(?:: (.*))?", re.DOTALL)


def _kp_error_name(error: type[kafka.errors.KafkaError] | kafka.errors.KafkaError) -> str:
    errno = getattr(error, "errno", None)
    if isinstance(errno, int):
        return error_name(errno)
    # Client-side errors (timeouts, connection failures) have no Kafka code.
    return error.__name__ if isinstance(error, type) else type(error).__name__


def _kp_outcome(topic: str, code: int, message: str | None) -> TopicOutcome:
    return (
        TopicOutcome(topic, True)
        if code == 0
        else TopicOutcome(topic, False, error_name(code), message)
    )


class KafkaPythonAdmin(AdminHarness):
    """kafka-python's KafkaAdminClient."""

    name = "kafka-python"

    def __init__(self, bootstrap: str, **config: Any) -> None:
        self._client: Any = KafkaAdminClient(
            bootstrap_servers=bootstrap, client_id="admin-harness", **config
        )
        self._closed = False

    def create_topics(
        self, topics: Sequence[NewTopicSpec], validate_only: bool = False
    ) -> list[TopicOutcome]:
        """CreateTopics."""
        specs: dict[str, dict[str, Any]] = {}
        for t in topics:
            spec: dict[str, Any] = {"configs": dict(t.configs)}
            if t.assignment is not None:
                spec["assignments"] = {p: list(r) for p, r in enumerate(t.assignment)}
            if t.partitions is not None:
                spec["num_partitions"] = t.partitions
            if t.replication_factor is not None:
                spec["replication_factor"] = t.replication_factor
            specs[t.name] = spec
        response = self._client.create_topics(
            specs, validate_only=validate_only, raise_errors=False
        )
        by_name = {r["name"]: r for r in response["topics"]}
        return [
            _kp_outcome(t.name, by_name[t.name]["error_code"], by_name[t.name]["error_message"])
            for t in topics
        ]

    def create_partitions(
        self, increases: Sequence[PartitionIncrease], validate_only: bool = False
    ) -> list[TopicOutcome]:
        """CreatePartitions."""
        specs: dict[str, Any] = {
            i.topic: i.total
            if i.assignment is None
            else {"count": i.total, "assignments": [list(r) for r in i.assignment]}
            for i in increases
        }
        response = self._client.create_partitions(
            specs, validate_only=validate_only, raise_errors=False
        )
        by_name = {r.name: r for r in response.results}
        return [
            _kp_outcome(i.topic, by_name[i.topic].error_code, by_name[i.topic].error_message)
            for i in increases
        ]

    def _alter(
        self, resources: list[Any], validate_only: bool, incremental: bool
    ) -> list[TopicOutcome]:
        # raise_on_unknown would first describe each topic and fail the batch client-side.
        results = self._client.alter_configs(
            resources, validate_only=validate_only, raise_on_unknown=False, incremental=incremental
        ).get("topic", {})
        outcomes = []
        for resource in resources:
            text = results[resource.name]
            match = _KP_ERROR_TEXT.fullmatch(text)
            if text == "OK":
                outcomes.append(TopicOutcome(resource.name, True))
                continue
            if match is None:
                outcomes.append(TopicOutcome(resource.name, False, None, text))
                continue
            message = match.group(2)
            outcomes.append(
                _kp_outcome(
                    resource.name, int(match.group(1)), None if message == "None" else message
                )
            )
        return outcomes

    def incremental_alter_configs(
        self, changes: Mapping[str, Sequence[ConfigOp]], validate_only: bool = False
    ) -> list[TopicOutcome]:
        """IncrementalAlterConfigs on topics (topic -> its changes)."""
        resources = [
            KpConfigResource(
                ConfigResourceType.TOPIC, topic, configs={o.name: (o.op, o.value) for o in ops}
            )
            for topic, ops in changes.items()
        ]
        return self._alter(resources, validate_only, incremental=True)

    def alter_configs(
        self, configs: Mapping[str, Mapping[str, str]], validate_only: bool = False
    ) -> list[TopicOutcome]:
        """Legacy AlterConfigs: replaces each topic's dynamic configs (topic -> configs)."""
        resources = [
            KpConfigResource(ConfigResourceType.TOPIC, topic, configs=dict(values))
            for topic, values in configs.items()
        ]
        return self._alter(resources, validate_only, incremental=False)

    def alter_partition_reassignments(
        self, reassignments: Mapping[tuple[str, int], Sequence[int] | None]
    ) -> list[TopicOutcome]:
        """AlterPartitionReassignments: (topic, partition) -> new replicas, or None to cancel."""
        request = {
            KpTopicPartition(t, p): None if r is None else list(r)
            for (t, p), r in reassignments.items()
        }
        topics = [t for t, _ in reassignments]
        try:
            errors = self._client.alter_partition_reassignments(request)
        except kafka.errors.KafkaError as exc:
            # A top-level error fails every partition.
            return fold_per_topic(
                TopicOutcome(t, False, _kp_error_name(exc), str(exc)) for t in topics
            )
        outcomes = []
        for tp in request:
            # Partitions the broker left out of its answer count as failed.
            error = errors.get(tp, kafka.errors.UnknownError)
            # kafka-python keeps the per-partition error class, not the broker's message.
            outcomes.append(
                TopicOutcome(tp.topic, False, _kp_error_name(error), None)
                if error is not None
                else TopicOutcome(tp.topic, True)
            )
        return fold_per_topic(outcomes)

    def _delete(self, topics: list[Any]) -> list[dict[str, Any]]:
        response = self._client.delete_topics(topics, raise_errors=False)
        results: list[dict[str, Any]] = response["topics"]
        return results

    def delete_topics(self, names: Sequence[str]) -> list[TopicOutcome]:
        """DeleteTopics by name."""
        by_name = {r["name"]: r for r in self._delete(list(names))}
        return [
            _kp_outcome(n, by_name[n]["error_code"], by_name[n].get("error_message")) for n in names
        ]

    def delete_topics_by_id(self, ids: Sequence[uuid.UUID]) -> list[TopicOutcome]:
        """DeleteTopics by topic id; each outcome's `topic` is `str(id)`."""
        by_id = {uuid.UUID(str(r["topic_id"])): r for r in self._delete(list(ids))}
        return [
            _kp_outcome(str(i), by_id[i]["error_code"], by_id[i].get("error_message")) for i in ids
        ]

    def delete_records(self, offsets: Mapping[tuple[str, int], int]) -> list[TopicOutcome]:
        """DeleteRecords: (topic, partition) -> delete everything before this offset."""
        topics = [t for t, _ in offsets]
        try:
            self._client.delete_records(
                {KpTopicPartition(t, p): o for (t, p), o in offsets.items()}
            )
        except kafka.errors.KafkaError as exc:
            text = str(exc)
            failed: dict[str, TopicOutcome] = {}
            one = _KP_ONE_PARTITION.search(text)
            if one is not None:
                failed[one.group(1)] = TopicOutcome(one.group(1), False, _kp_error_name(exc), text)
            for topic, _partition, class_name in _KP_PARTITIONS.findall(text):
                error = getattr(kafka.errors, class_name, kafka.errors.UnknownError)
                failed.setdefault(topic, TopicOutcome(topic, False, _kp_error_name(error), text))
            if not failed:
                # Not per partition (e.g. an unknown topic in the leader lookup): all failed.
                failed = {t: TopicOutcome(t, False, _kp_error_name(exc), text) for t in topics}
            return fold_per_topic(failed.get(t, TopicOutcome(t, True)) for t in topics)
        return fold_per_topic(TopicOutcome(t, True) for t in topics)

    def describe_topics(self, names: Sequence[str]) -> dict[str, TopicInfo]:
        """The named topics that exist, described (missing ones are left out)."""
        found = {}
        for topic in self._client.describe_topics(list(names)):
            code = topic["error_code"]
            if code == 0:
                found[topic["name"]] = topic
            elif error_name(code) != "UNKNOWN_TOPIC_OR_PARTITION":
                raise AdminHarnessError(f"describe {topic['name']}: {error_name(code)}")
        if not found:
            return {}
        resources = [KpConfigResource(ConfigResourceType.TOPIC, name) for name in found]
        configs = self._client.describe_configs(resources, config_filter="all").get("topic", {})
        return {
            name: TopicInfo(
                name,
                uuid.UUID(str(topic["topic_id"])),
                {
                    p["partition_index"]: list(p["replica_nodes"])
                    for p in sorted(topic["partitions"], key=lambda p: p["partition_index"])
                },
                {k: ConfigValue(v["value"], v["config_source"]) for k, v in configs[name].items()},
            )
            for name, topic in found.items()
            # A broker that does not know a new topic yet answers no configs for it.
            if configs.get(name)
        }

    def close(self) -> None:
        """Close the client's connections; safe to call twice."""
        if not self._closed:
            self._closed = True
            self._client.close()
