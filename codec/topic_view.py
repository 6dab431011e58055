"""Per-topic views of guarded admin requests: plain immutable data for the policy layer.

Config resources that are not topics (brokers, loggers, groups...) get a view of their own.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal
from uuid import UUID

Action = Literal["create", "alter", "delete", "delete_records"]
ConfigOp = Literal["SET", "DELETE", "APPEND", "SUBTRACT"]

# (name, value); value None means the client sent a null value.
Config = tuple[str, str | None]
# (partition index, broker ids)
PartitionReplicas = tuple[int, tuple[int, ...]]


@dataclass(frozen=True, slots=True, kw_only=True)
class TopicItem:
    """One topic entry of a guarded request; `index` is its position in the request's array."""

    index: int
    topic: str | None
    topic_id: UUID | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class CreateTopicItem(TopicItem):
    """CreateTopics: -1 partitions / replication factor means broker default or assignment."""

    topic: str
    num_partitions: int
    replication_factor: int
    assignments: tuple[PartitionReplicas, ...]
    configs: tuple[Config, ...]
    action: Literal["create"] = field(default="create", init=False)


@dataclass(frozen=True, slots=True, kw_only=True)
class AlterConfigsItem(TopicItem):
    """AlterConfigs on a topic: `configs` replaces the whole dynamic config set."""

    topic: str
    configs: tuple[Config, ...]
    action: Literal["alter"] = field(default="alter", init=False)


@dataclass(frozen=True, slots=True, kw_only=True)
class IncrementalAlterConfigsItem(TopicItem):
    """IncrementalAlterConfigs on a topic: (name, op, value) applied to the current configs."""

    topic: str
    ops: tuple[tuple[str, ConfigOp, str | None], ...]
    action: Literal["alter"] = field(default="alter", init=False)


@dataclass(frozen=True, slots=True, kw_only=True)
class CreatePartitionsItem(TopicItem):
    """CreatePartitions: the new total count, and the replicas of each new partition if given."""

    topic: str
    count: int
    assignments: tuple[tuple[int, ...], ...] | None
    action: Literal["alter"] = field(default="alter", init=False)


@dataclass(frozen=True, slots=True, kw_only=True)
class ReassignmentItem(TopicItem):
    """AlterPartitionReassignments: target replicas per partition; None cancels a reassignment."""

    topic: str
    partitions: tuple[tuple[int, tuple[int, ...] | None], ...]
    action: Literal["alter"] = field(default="alter", init=False)


@dataclass(frozen=True, slots=True, kw_only=True)
class DeleteTopicItem(TopicItem):
    """DeleteTopics: by name, or (v6+) by topic id with the name possibly absent."""

    action: Literal["delete"] = field(default="delete", init=False)


@dataclass(frozen=True, slots=True, kw_only=True)
class DeleteRecordsItem(TopicItem):
    """DeleteRecords: (partition, offset) pairs; offset -1 means the high watermark."""

    topic: str
    offsets: tuple[tuple[int, int], ...]
    action: Literal["delete_records"] = field(default="delete_records", init=False)


AnyTopicItem = (
    CreateTopicItem
    | AlterConfigsItem
    | IncrementalAlterConfigsItem
    | CreatePartitionsItem
    | ReassignmentItem
    | DeleteTopicItem
    | DeleteRecordsItem
)


@dataclass(frozen=True, slots=True, kw_only=True)
class ConfigResourceItem:
    """A config resource other than a topic in AlterConfigs or IncrementalAlterConfigs.

    `resource_type` is Kafka's (4 broker, 8 broker logger, 16 client metrics, 32 group);
    `name` is "" for the cluster-wide broker default. `replace` marks the legacy AlterConfigs,
    which removes every dynamic config it does not name (its ops are all SET).
    """

    index: int
    resource_type: int
    name: str
    ops: tuple[tuple[str, ConfigOp, str | None], ...]
    replace: bool
