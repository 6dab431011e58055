"""The admin operations the policy tests run, one interface for every client."""

from __future__ import annotations

import uuid
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence

from tests.integration.admin_clients.model import (
    ConfigOp,
    NewTopicSpec,
    NotSupportedByClient,
    PartitionIncrease,
    TopicInfo,
    TopicOutcome,
)


class AdminHarness(ABC):
    """The admin operations the policy tests run, the same for every client."""

    name: str

    @abstractmethod
    def create_topics(
        self, topics: Sequence[NewTopicSpec], validate_only: bool = False
    ) -> list[TopicOutcome]:
        """CreateTopics."""

    @abstractmethod
    def create_partitions(
        self, increases: Sequence[PartitionIncrease], validate_only: bool = False
    ) -> list[TopicOutcome]:
        """CreatePartitions."""

    @abstractmethod
    def incremental_alter_configs(
        self, changes: Mapping[str, Sequence[ConfigOp]], validate_only: bool = False
    ) -> list[TopicOutcome]:
        """IncrementalAlterConfigs on topics (topic -> its changes)."""

    def alter_configs(
        self, configs: Mapping[str, Mapping[str, str]], validate_only: bool = False
    ) -> list[TopicOutcome]:
        """Legacy AlterConfigs: replaces each topic's dynamic configs (topic -> configs)."""
        raise NotSupportedByClient(f"{self.name} has no legacy AlterConfigs")

    def alter_partition_reassignments(
        self, reassignments: Mapping[tuple[str, int], Sequence[int] | None]
    ) -> list[TopicOutcome]:
        """AlterPartitionReassignments: (topic, partition) -> new replicas, or None to cancel."""
        raise NotSupportedByClient(f"{self.name} has no AlterPartitionReassignments")

    @abstractmethod
    def delete_topics(self, names: Sequence[str]) -> list[TopicOutcome]:
        """DeleteTopics by name."""

    def delete_topics_by_id(self, ids: Sequence[uuid.UUID]) -> list[TopicOutcome]:
        """DeleteTopics by topic id; each outcome's `topic` is `str(id)`."""
        raise NotSupportedByClient(f"{self.name} cannot delete topics by id")

    @abstractmethod
    def delete_records(self, offsets: Mapping[tuple[str, int], int]) -> list[TopicOutcome]:
        """DeleteRecords: (topic, partition) -> delete everything before this offset."""

    @abstractmethod
    def describe_topics(self, names: Sequence[str]) -> dict[str, TopicInfo]:
        """The named topics that exist, described (missing ones are left out)."""

    def topic_id(self, name: str) -> uuid.UUID | None:
        """The id of topic `name`, or None if it does not exist."""
        info = self.describe_topics([name]).get(name)
        return None if info is None else info.topic_id

    @abstractmethod
    def close(self) -> None:
        """Release the client; safe to call twice."""

    def supports(self, operation: str) -> bool:
        """Whether this client implements `operation` (a method name of this class)."""
        return getattr(type(self), operation) is not getattr(AdminHarness, operation)

    def __enter__(self) -> AdminHarness:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
