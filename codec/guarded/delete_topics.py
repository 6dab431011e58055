"""DeleteTopics (key 20), v1-6; v6 names topics by name or by id."""

from __future__ import annotations

import dataclasses
from collections.abc import Hashable
from typing import Any

from kafka_policy_proxy.codec.guarded.base import Denial, ErrorChoice, GuardedApi, build
from kafka_policy_proxy.codec.topic_view import DeleteTopicItem

TOPIC_IDS_VERSION = 6


class DeleteTopics(GuardedApi):
    """Topic deletions; before v5 the response has no message field, so -1 by default."""

    api_key = 20
    results_field = "responses"
    result_key_fields = ("name", "topic_id")
    answers_each_copy = False

    def entries_field_of(self, request: Any) -> str:
        """`topic_names` (v1-5, plain names) or `topics` (v6, name and/or id)."""
        return "topics" if request.__version__ >= TOPIC_IDS_VERSION else "topic_names"

    def item(self, request: Any, index: int, entry: Any) -> DeleteTopicItem:
        """The topic name, or id, to delete."""
        if isinstance(entry, str):
            return DeleteTopicItem(index=index, topic=entry)
        return DeleteTopicItem(index=index, topic=entry.name, topic_id=entry.topic_id)

    def key(self, entry: Any) -> Hashable:
        """By name when a name is given (as the broker does), else by id."""
        if isinstance(entry, str):
            return ("name", entry)
        if entry.name is not None:
            return ("name", entry.name)
        if entry.topic_id is not None:
            return ("id", entry.topic_id)
        return ("none",)

    def result_keys(self, result: Any) -> tuple[Hashable, ...]:
        """A v6 result carries the resolved name and id, so it answers either."""
        keys: list[Hashable] = []
        if result.name is not None:
            keys.append(("name", result.name))
        topic_id = getattr(result, "topic_id", None)
        if topic_id is not None:
            keys.append(("id", topic_id))
        return tuple(keys) or (("none",),)

    def resolved(self, entry: Any, denial: Denial | None) -> Any:
        """A v6 entry named by id alone, with the name the proxy resolved it to."""
        if isinstance(entry, str) or entry.name is not None or denial is None or not denial.name:
            return entry
        return dataclasses.replace(entry, name=denial.name)

    def synthetic(self, result_cls: type[Any], copies: list[Any], error: ErrorChoice) -> Any:
        """An error result naming the topic as the client did."""
        error_code, error_message = error(result_cls)
        entry = copies[0]
        name = entry if isinstance(entry, str) else entry.name
        topic_id = None if isinstance(entry, str) else entry.topic_id
        return build(
            result_cls,
            name=name,
            topic_id=topic_id,
            error_code=error_code,
            error_message=error_message,
        )
