"""AlterConfigs (key 33, v0-2) and IncrementalAlterConfigs (key 44, v0-1)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable, Sequence
from typing import Any

from codec.errors import CodecError
from codec.guarded.base import ErrorChoice, GuardedApi, build
from codec.topic_view import AlterConfigsItem, ConfigOp, IncrementalAlterConfigsItem

TOPIC_RESOURCE = 2
BROKER_RESOURCE = 4
# ConfigAdminManager.preprocess's own words for a repeated resource.
DUPLICATE_RESOURCE = "Each resource must appear at most once."
CONFIG_OPS: dict[int, ConfigOp] = {0: "SET", 1: "DELETE", 2: "APPEND", 3: "SUBTRACT"}


class _ConfigResources(GuardedApi):
    """Shared shape: an array of (type, name) resources; only topic resources are policed."""

    results_field = "responses"
    entries_field = "resources"
    # ConfigAdminManager.preprocess refuses every copy of a repeated resource, one by one.
    answers_each_copy = True

    def is_topic(self, entry: Any) -> bool:
        """Only topic resources are policed; broker, logger and others pass through."""
        return entry.resource_type == TOPIC_RESOURCE  # type: ignore[no-any-return]

    def changes_broker_configs(self, request: Any) -> bool:
        """Whether any resource is a broker (a name) or the cluster-wide default (empty name)."""
        return any(e.resource_type == BROKER_RESOURCE for e in self.entries(request))

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
    """Legacy AlterConfigs: the full replacement set of a topic's dynamic configs."""

    api_key = 33

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
        return IncrementalAlterConfigsItem(index=index, topic=entry.resource_name, ops=tuple(ops))
