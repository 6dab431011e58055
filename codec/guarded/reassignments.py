"""AlterPartitionReassignments (key 45), v0-1."""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

from kio.schema.errors import ErrorCode

from kafka_policy_proxy.codec.guarded.base import (
    ZERO_THROTTLE,
    ErrorChoice,
    GuardedApi,
    build,
    element_class,
)
from kafka_policy_proxy.codec.topic_view import ReassignmentItem


class AlterPartitionReassignments(GuardedApi):
    """Target replicas per partition; a null replica list cancels an ongoing reassignment."""

    api_key = 45
    results_field = "responses"
    # ReplicationControlManager answers every topic entry in order, copies included.
    answers_each_copy = True

    def item(self, request: Any, index: int, entry: Any) -> ReassignmentItem:
        """The topic's target replicas by partition."""
        return ReassignmentItem(
            index=index,
            topic=entry.name,
            partitions=tuple(
                (p.partition_index, None if p.replicas is None else tuple(p.replicas))
                for p in entry.partitions
            ),
        )

    def key(self, entry: Any) -> Hashable:
        """The topic name."""
        return entry.name  # type: ignore[no-any-return]

    def result_keys(self, result: Any) -> tuple[Hashable, ...]:
        """The topic name."""
        return (result.name,)

    def synthetic(self, result_cls: type[Any], copies: list[Any], error: ErrorChoice) -> Any:
        """An error for each requested partition (the error fields live on partitions)."""
        partition_cls = element_class(result_cls, "partitions")
        error_code, error_message = error(partition_cls)
        partitions = tuple(
            build(
                partition_cls,
                partition_index=p.partition_index,
                error_code=error_code,
                error_message=error_message,
            )
            for p in copies[0].partitions
        )
        return build(result_cls, name=copies[0].name, partitions=partitions)

    def empty_response(
        self, response_cls: type[Any], request: Any, results: tuple[Any, ...]
    ) -> Any:
        """No top-level error; v1 echoes the request's replication-factor flag."""
        return build(
            response_cls,
            throttle_time=ZERO_THROTTLE,
            allow_replication_factor_change=getattr(
                request, "allow_replication_factor_change", True
            ),
            error_code=ErrorCode.none,
            error_message=None,
            responses=results,
        )
