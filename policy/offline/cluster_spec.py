"""A described cluster: broker count, default topic configs and existing topics, as the
offline tools read it, and the in-memory cluster state it builds."""

from __future__ import annotations

from pydantic import Field, model_validator

from kafka_policy_proxy.policy import builders
from kafka_policy_proxy.policy.cluster import InMemoryCluster
from kafka_policy_proxy.policy.model import ConfigMap, TopicState, freeze_assignment
from kafka_policy_proxy.policy.offline.request_spec import Configs, Replicas, Strict


class TopicSpec(Strict):
    """An existing topic; `configs` are its own settings, laid over the broker defaults.

    `overrides` are the configs set on the topic itself, which a new default does not reach;
    without it every config counts as inherited (as where DescribeConfigs did not say).
    """

    name: str
    topic_id: str | None = None
    partitions: int = 1
    replication_factor: int = 1
    assignment: dict[int, Replicas] | None = None
    configs: Configs = Field(default_factory=dict)
    overrides: list[str] | None = None
    internal: bool = False
    marked_for_deletion: bool = False

    @model_validator(mode="after")
    def _overrides_have_values(self) -> TopicSpec:
        missing = [key for key in self.overrides or () if key not in self.configs]
        if missing:
            raise ValueError(f"overrides without a value in `configs`: {', '.join(missing)}")
        return self


class ClusterSpec(Strict):
    """A described cluster: broker count, default topic configs and existing topics."""

    brokers: int = Field(default=3, ge=1)
    defaults: Configs = Field(default_factory=dict)
    topics: list[TopicSpec] = Field(default_factory=list)

    def build(self) -> InMemoryCluster:
        """The in-memory ClusterState this describes."""
        defaults = {
            k: v for k, v in self.defaults.items() if k not in builders.BROKER_ONLY_DEFAULTS
        }
        return InMemoryCluster.of(
            (
                TopicState(
                    name=t.name,
                    topic_id=t.topic_id,
                    partitions=t.partitions,
                    replication_factor=t.replication_factor,
                    assignment=freeze_assignment((t.assignment or {}).items()),
                    configs=ConfigMap({**defaults, **t.configs}),
                    internal=t.internal,
                    marked_for_deletion=t.marked_for_deletion,
                    overrides=None if t.overrides is None else frozenset(t.overrides),
                )
                for t in self.topics
            ),
            self.brokers,
            self.defaults,
        )
