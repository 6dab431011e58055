"""Plugins loaded by dotted path in the plugin tests."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kafka_policy_proxy.policy.cluster import ClusterState
from kafka_policy_proxy.policy.model import TopicRequest
from kafka_policy_proxy.policy.plugins import PolicyPlugin, PolicyViolation

CLOSED: list[str] = []


class OwnerTag(PolicyPlugin):
    """Denies creating topics whose name does not start with the configured team."""

    def __init__(self, config: Mapping[str, Any]) -> None:
        super().__init__(config)
        self.team = str(config["team"])

    def validate_create_topic(self, request: TopicRequest, cluster: ClusterState) -> None:
        if not request.name.startswith(self.team + "."):
            raise PolicyViolation(f"topic {request.name!r} must start with {self.team!r}.")

    def validate_delete_topic(self, request: TopicRequest, cluster: ClusterState) -> None:
        if cluster.broker_count() < 3:
            raise PolicyViolation("no deletes on a degraded cluster")

    def close(self) -> None:
        CLOSED.append(self.team)


class Broken(PolicyPlugin):
    """Fails on every create."""

    def validate_create_topic(self, request: TopicRequest, cluster: ClusterState) -> None:
        raise KeyError("boom")


class FailsToStart(PolicyPlugin):
    """Its constructor fails."""

    def __init__(self, config: Mapping[str, Any]) -> None:
        raise RuntimeError("no database")


class NotAPlugin:
    """Not a PolicyPlugin."""
