"""CreateTopics (key 19), v2-7."""

from __future__ import annotations

import dataclasses
from collections.abc import Hashable
from typing import Any

from kafka_policy_proxy.codec.guarded.base import (
    ErrorChoice,
    GuardedApi,
    Rewrite,
    build,
    element_class,
)
from kafka_policy_proxy.codec.topic_view import CreateTopicItem


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

    def rewrite(self, entry: Any, rewrite: Rewrite) -> Any:
        """A new partition count; config values replaced, or added where the topic had none."""
        changes: dict[str, Any] = {}
        if rewrite.partitions is not None:
            changes["num_partitions"] = rewrite.partitions
        if rewrite.configs:
            values = dict(rewrite.configs)
            configs = [
                dataclasses.replace(c, value=values[c.name]) if c.name in values else c
                for c in entry.configs
            ]
            present = {c.name for c in entry.configs}
            config_cls = element_class(type(entry), "configs")
            configs += [
                build(config_cls, name=name, value=value)
                for name, value in rewrite.configs
                if name not in present
            ]
            changes["configs"] = tuple(configs)
        return dataclasses.replace(entry, **changes)

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
