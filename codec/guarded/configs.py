"""AlterConfigs (key 33, v0-2) and IncrementalAlterConfigs (key 44, v0-1)."""

from __future__ import annotations

import dataclasses
from abc import abstractmethod
from collections import Counter
from collections.abc import Hashable, Sequence
from typing import Any

from kafka_policy_proxy.codec.errors import CodecError
from kafka_policy_proxy.codec.guarded.base import (
    ErrorChoice,
    GuardedApi,
    Rewrite,
    build,
    element_class,
)
from kafka_policy_proxy.codec.topic_view import (
    AlterConfigsItem,
    ConfigOp,
    ConfigResourceItem,
    IncrementalAlterConfigsItem,
)

TOPIC_RESOURCE = 2
BROKER_RESOURCE = 4
ALTER_CONFIGS = 33
# ConfigAdminManager.preprocess's own words for a repeated resource.
DUPLICATE_RESOURCE = "Each resource must appear at most once."
CONFIG_OPS: dict[int, ConfigOp] = {0: "SET", 1: "DELETE", 2: "APPEND", 3: "SUBTRACT"}


class _ConfigResources(GuardedApi):
    """Shared shape: an array of (type, name) resources, topics and others."""

    results_field = "responses"
    result_key_fields = ("resource_type", "resource_name")
    entries_field = "resources"
    # ConfigAdminManager.preprocess refuses every copy of a repeated resource, one by one.
    answers_each_copy = True

    def is_topic(self, entry: Any) -> bool:
        """Whether the resource is a topic (the others are config resources of their own)."""
        return entry.resource_type == TOPIC_RESOURCE  # type: ignore[no-any-return]

    def resource_items(self, request: Any) -> list[ConfigResourceItem]:
        """Every resource that is not a topic, in request order."""
        return [
            ConfigResourceItem(
                index=index,
                resource_type=int(entry.resource_type),
                name=entry.resource_name,
                ops=self.ops(request, entry),
                replace=self.api_key == ALTER_CONFIGS,
            )
            for index, entry in enumerate(self.entries(request))
            if not self.is_topic(entry)
        ]

    @abstractmethod
    def ops(self, request: Any, entry: Any) -> tuple[tuple[str, ConfigOp, str | None], ...]:
        """The resource's changes as (name, op, value)."""

    def changes_broker_configs(self, request: Any) -> bool:
        """Whether any resource is a broker (a name) or the cluster-wide default (empty name)."""
        return any(e.resource_type == BROKER_RESOURCE for e in self.entries(request))

    def rewrite(self, entry: Any, rewrite: Rewrite) -> Any:
        """Topic config values replaced; added only where the request is a full replacement."""
        values = dict(rewrite.configs)
        configs = [
            dataclasses.replace(c, value=values[c.name]) if self.sets(c) and c.name in values else c
            for c in entry.configs
        ]
        if self.api_key == ALTER_CONFIGS:
            present = {c.name for c in entry.configs}
            config_cls = element_class(type(entry), "configs")
            configs += [
                build(config_cls, name=name, value=value)
                for name, value in rewrite.configs
                if name not in present
            ]
        return dataclasses.replace(entry, configs=tuple(configs))

    def sets(self, config: Any) -> bool:
        """Whether a config entry sets a value (rather than removing or editing a list)."""
        return True

    def key(self, entry: Any) -> Hashable:
        """(resource type, resource name), as the broker keys resources."""
        return (entry.resource_type, entry.resource_name)

    def result_keys(self, result: Any) -> tuple[Hashable, ...]:
        """(resource type, resource name)."""
        return ((result.resource_type, result.resource_name),)

    def synthetic(self, result_cls: type[Any], copies: list[Any], error: ErrorChoice) -> Any:
        """An error result for the topic resource."""
        error_code, error_message = error(result_cls)
        return build(
            result_cls,
            error_code=error_code,
            error_message=error_message,
            resource_type=copies[0].resource_type,
            resource_name=copies[0].resource_name,
        )


class AlterConfigs(_ConfigResources):
    """Legacy AlterConfigs: the full replacement set of a resource's dynamic configs."""

    api_key = ALTER_CONFIGS

    def ops(self, request: Any, entry: Any) -> tuple[tuple[str, ConfigOp, str | None], ...]:
        """Every named config is a SET (the rest are removed)."""
        return tuple((c.name, "SET", c.value) for c in entry.configs)

    def refused_locally(self, keys: Sequence[Hashable]) -> dict[int, str]:
        """Every copy of a repeated resource, topic or not: a 4.1.1 broker never answers those."""
        counts = Counter(keys)
        return {i: DUPLICATE_RESOURCE for i, key in enumerate(keys) if counts[key] > 1}

    def item(self, request: Any, index: int, entry: Any) -> AlterConfigsItem | None:
        """The topic's replacement configs, or None for broker and other resources."""
        if not self.is_topic(entry):
            return None
        return AlterConfigsItem(
            index=index,
            topic=entry.resource_name,
            configs=tuple((c.name, c.value) for c in entry.configs),
        )


class IncrementalAlterConfigs(_ConfigResources):
    """IncrementalAlterConfigs: SET/DELETE/APPEND/SUBTRACT per key."""

    api_key = 44

    def item(self, request: Any, index: int, entry: Any) -> IncrementalAlterConfigsItem | None:
        """The topic's operations, or None for broker and other resources."""
        if not self.is_topic(entry):
            return None
        return IncrementalAlterConfigsItem(
            index=index, topic=entry.resource_name, ops=self.ops(request, entry)
        )

    def sets(self, config: Any) -> bool:
        """Only SET operations carry a value an override may replace."""
        return CONFIG_OPS.get(config.config_operation) == "SET"

    def ops(self, request: Any, entry: Any) -> tuple[tuple[str, ConfigOp, str | None], ...]:
        """The operations, by name; an operation code this codec cannot name is a CodecError."""
        ops = []
        for config in entry.configs:
            op = CONFIG_OPS.get(config.config_operation)
            if op is None:
                # A policy cannot judge an operation it cannot name: fail closed.
                raise CodecError(
                    self.api_key,
                    int(request.__version__),
                    f"unknown config operation {config.config_operation} for {config.name!r}",
                )
            ops.append((config.name, op, config.value))
        return tuple(ops)
