"""CreateTopics (key 19), v2-7."""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

from codec.guarded.base import ErrorChoice, GuardedApi, build
from codec.topic_view import CreateTopicItem


class CreateTopics(GuardedApi):
    """Topics to create: partitions, replication factor or explicit assignment, and configs."""

    api_key = 19
    results_field = "topics"
    answers_each_copy = False

    def item(self, request: Any, index: int, entry: Any) -> CreateTopicItem:
        """The topic as asked for."""
        return CreateTopicItem(
            index=index,
            topic=entry.name,
            num_partitions=entry.num_partitions,
            replication_factor=entry.replication_factor,
            assignments=tuple((a.partition_index, tuple(a.broker_ids)) for a in entry.assignments),
            configs=tuple((c.name, c.value) for c in entry.configs),
        )

    def key(self, entry: Any) -> Hashable:
        """The topic name."""
        return entry.name  # type: ignore[no-any-return]

    def result_keys(self, result: Any) -> tuple[Hashable, ...]:
        """The topic name."""
        return (result.name,)

    def synthetic(self, result_cls: type[Any], copies: list[Any], error: ErrorChoice) -> Any:
        """An error result shaped like the broker's own (no id, -1 counts, no configs)."""
        error_code, error_message = error(result_cls)
        return build(
            result_cls,
            name=copies[0].name,
            topic_id=None,
            error_code=error_code,
            error_message=error_message,
            num_partitions=-1,
            replication_factor=-1,
            configs=(),
        )
