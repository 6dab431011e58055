"""DeleteRecords (key 21), v0-2: no message field in any version, so 44 without a message."""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

from kafka_policy_proxy.codec.guarded.base import ErrorChoice, GuardedApi, build, element_class
from kafka_policy_proxy.codec.topic_view import DeleteRecordsItem

INVALID_LOW_WATERMARK = -1


class DeleteRecords(GuardedApi):
    """Truncation of partitions up to an offset."""

    api_key = 21
    results_field = "topics"
    # The broker collapses topic-partitions into a map and answers each topic once.
    answers_each_copy = False

    def item(self, request: Any, index: int, entry: Any) -> DeleteRecordsItem:
        """The topic's (partition, offset) pairs."""
        return DeleteRecordsItem(
            index=index,
            topic=entry.name,
            offsets=tuple((p.partition_index, p.offset) for p in entry.partitions),
        )

    def key(self, entry: Any) -> Hashable:
        """The topic name."""
        return entry.name  # type: ignore[no-any-return]

    def result_keys(self, result: Any) -> tuple[Hashable, ...]:
        """The topic name."""
        return (result.name,)

    def synthetic(self, result_cls: type[Any], copies: list[Any], error: ErrorChoice) -> Any:
        """One error per distinct partition over all copies, as the broker would collapse them."""
        partition_cls = element_class(result_cls, "partitions")
        error_code, _ = error(partition_cls)
        seen: dict[int, None] = {}
        for entry in copies:
            for p in entry.partitions:
                seen.setdefault(p.partition_index)
        partitions = tuple(
            build(
                partition_cls,
                partition_index=index,
                low_watermark=INVALID_LOW_WATERMARK,
                error_code=error_code,
            )
            for index in seen
        )
        return build(result_cls, name=copies[0].name, partitions=partitions)
