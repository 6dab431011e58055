"""CreatePartitions (key 37), v0-3."""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

from kafka_policy_proxy.codec.guarded.base import ErrorChoice, GuardedApi, build
from kafka_policy_proxy.codec.topic_view import CreatePartitionsItem


class CreatePartitions(GuardedApi):
    """Partition increases: the new total count and, optionally, replicas for new partitions."""

    api_key = 37
    results_field = "results"
    answers_each_copy = False

    def item(self, request: Any, index: int, entry: Any) -> CreatePartitionsItem:
        """The topic's new count and assignment."""
        assignments = (
            None
            if entry.assignments is None
            else tuple(tuple(a.broker_ids) for a in entry.assignments)
        )
        return CreatePartitionsItem(
            index=index, topic=entry.name, count=entry.count, assignments=assignments
        )

    def key(self, entry: Any) -> Hashable:
        """The topic name."""
        return entry.name  # type: ignore[no-any-return]

    def result_keys(self, result: Any) -> tuple[Hashable, ...]:
        """The topic name."""
        return (result.name,)

    def synthetic(self, result_cls: type[Any], copies: list[Any], error: ErrorChoice) -> Any:
        """An error result for the topic."""
        error_code, error_message = error(result_cls)
        return build(
            result_cls, name=copies[0].name, error_code=error_code, error_message=error_message
        )
