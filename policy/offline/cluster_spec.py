"""A described cluster: broker count, default topic configs and existing topics, as the
offline tools read it, and the in-memory cluster state it builds."""

from __future__ import annotations

from datetime import datetime

from pydantic import Field, model_validator

from kafka_policy_proxy.policy import builders
from kafka_policy_proxy.policy.cluster import InMemoryCluster
from kafka_policy_proxy.policy.model import ConfigMap, TopicState, freeze_assignment
from kafka_policy_proxy.policy.offline.request_spec import Configs, Replicas, Strict
from kafka_policy_proxy.policy.usage import GroupUsage, TopicUsage, epoch_ms


class GroupUsageSpec(Strict):
    """A consumer group as the in-use check would find it on the topic."""

    group: str
    state: str = "Empty"
    members: bool = Field(default=False, description="members assigned/subscribed to it")
    committed: dict[int, int] = Field(default_factory=dict, description="partition -> offset")
    consumed_at: dict[int, datetime] = Field(
        default_factory=dict,
        description="partition -> timestamp of the last record consumed (left out: undatable)",
    )

    def build(self) -> GroupUsage:
        """The frozen group usage this describes."""
        return GroupUsage.from_dict(self.model_dump())


class UsageSpec(Strict):
    """A topic's in-use facts: when they were read, its latest writes and consumer groups."""

    read_at: datetime
    latest: dict[int, datetime] = Field(
        default_factory=dict, description="partition -> latest record timestamp"
    )
    ends: dict[int, int] = Field(default_factory=dict, description="partition -> high watermark")
    groups: list[GroupUsageSpec] = Field(default_factory=list)
    groups_listed: int | None = Field(
        default=None, ge=0, description="consumer groups in the cluster; `groups` count if absent"
    )

    def build(self, topic: str) -> TopicUsage:
        """The frozen topic usage this describes."""
        return TopicUsage(
            topic=topic,
            read_at=epoch_ms(self.read_at),
            latest=tuple(sorted((p, epoch_ms(t)) for p, t in self.latest.items())),
            ends=tuple(sorted(self.ends.items())),
            groups=tuple(g.build() for g in self.groups),
            groups_listed=len(self.groups) if self.groups_listed is None else self.groups_listed,
        )


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
    in_use: UsageSpec | None = Field(
        default=None, description="its in-use facts, for `in_use` rules (absent: not read)"
    )

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
            (t.in_use.build(t.name) for t in self.topics if t.in_use is not None),
        )
