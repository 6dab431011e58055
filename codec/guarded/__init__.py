"""The guarded admin APIs: one codec per API key, all with the same interface."""

from __future__ import annotations

from kafka_policy_proxy.codec.guarded.base import Denial, GuardedApi, Rewrite, Slot, SplitPlan
from kafka_policy_proxy.codec.guarded.configs import AlterConfigs, IncrementalAlterConfigs
from kafka_policy_proxy.codec.guarded.create_partitions import CreatePartitions
from kafka_policy_proxy.codec.guarded.create_topics import CreateTopics
from kafka_policy_proxy.codec.guarded.delete_records import DeleteRecords
from kafka_policy_proxy.codec.guarded.delete_topics import DeleteTopics
from kafka_policy_proxy.codec.guarded.reassignments import AlterPartitionReassignments

_APIS: dict[int, GuardedApi] = {
    api.api_key: api
    for api in (
        CreateTopics(),
        CreatePartitions(),
        AlterConfigs(),
        IncrementalAlterConfigs(),
        AlterPartitionReassignments(),
        DeleteTopics(),
        DeleteRecords(),
    )
}

GUARDED_API_KEYS = frozenset(_APIS)


def guarded_api(api_key: int) -> GuardedApi | None:
    """The codec for a guarded API key, or None if the proxy does not police that API."""
    return _APIS.get(api_key)


__all__ = [
    "GUARDED_API_KEYS",
    "Denial",
    "GuardedApi",
    "Rewrite",
    "Slot",
    "SplitPlan",
    "guarded_api",
]
