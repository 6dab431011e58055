"""Shared builders for the policy tests."""

from __future__ import annotations

from typing import Any

from kafka_policy_proxy.policy.builders import BROKER_ONLY_DEFAULTS
from kafka_policy_proxy.policy.cluster import InMemoryCluster
from kafka_policy_proxy.policy.decision_log import json_schema
from kafka_policy_proxy.policy.engine import CompiledPolicy
from kafka_policy_proxy.policy.loader import load_policy
from kafka_policy_proxy.policy.model import ConfigMap, Principal, TopicState

ALICE = Principal("User:alice", "alice-cli", "10.0.0.7")
ADMIN = Principal("User:platform-admin", "ops", "10.0.0.8")

DEFAULTS = {
    "num.partitions": "1",
    "default.replication.factor": "3",
    "retention.ms": "604800000",
    "cleanup.policy": "delete",
    "min.insync.replicas": "2",
}


def compile_rules(*rules: dict[str, Any], **top: Any) -> CompiledPolicy:
    """Compile a policy from rule mappings."""
    return load_policy({"rules": list(rules), **top}, "test")


def topic(name: str, partitions: int = 6, rf: int = 3, **configs: str) -> TopicState:
    """An existing topic whose effective configs are the defaults plus `configs`."""
    effective = {k: v for k, v in DEFAULTS.items() if k not in BROKER_ONLY_DEFAULTS}
    effective.update({k.replace("_", "."): v for k, v in configs.items()})
    assignment = tuple((p, tuple((p + i) % 3 for i in range(rf))) for p in range(partitions))
    return TopicState(
        name=name,
        topic_id=f"id-{name}",
        partitions=partitions,
        replication_factor=rf,
        assignment=assignment,
        configs=ConfigMap(effective),
    )


def cluster(*topics: TopicState, brokers: int = 3) -> InMemoryCluster:
    """An in-memory cluster with the standard defaults."""
    return InMemoryCluster.of(topics, brokers, DEFAULTS)


# The record fields written only where they apply, in the schema's order: overrides changed
# the request; budgets judged it; exceptions waived; a summary record; an in_use rule read facts.
OPTIONAL = ("overrides", "rewritten", "budgets", "waived", "summary", "in_use")


def always() -> list[str]:
    """The fields every topic decision record has, in the schema's order."""
    return [p for p in json_schema()["properties"] if p not in OPTIONAL]
