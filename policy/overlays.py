"""Cluster overlays for offline judging: a cluster seen with one topic replaced or removed.

`WithTopic` is a snapshot in which a recorded event's topic has the state the event recorded
(replay); `OtherTopics` is a cluster without one topic, the cluster that topic would be
created in (scan). Both answer every `ClusterState` question from the base cluster otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass

from kafka_policy_proxy.policy.cluster import ClusterState
from kafka_policy_proxy.policy.model import ConfigMap, TopicState
from kafka_policy_proxy.policy.usage import TopicUsage


@dataclass(frozen=True, slots=True)
class WithTopic:
    """A cluster in which one topic has a given state: that state wins over the base's."""

    base: ClusterState
    state: TopicState

    def topic(self, name: str) -> TopicState | None:
        """The given state for its topic, else the base's."""
        return self.state if name == self.state.name else self.base.topic(name)

    def topic_by_id(self, topic_id: str) -> TopicState | None:
        """The given state for its topic id, else the base's."""
        return self.state if topic_id == self.state.topic_id else self.base.topic_by_id(topic_id)

    def topic_names(self, *, include_internal: bool = False) -> frozenset[str]:
        """The base's names, with the given topic (it exists)."""
        names = self.base.topic_names(include_internal=include_internal)
        if self.state.name in names or (self.state.internal and not include_internal):
            return names  # the same set each time: rules cache indexes by its identity
        return names | {self.state.name}

    def broker_count(self) -> int:
        """The base's broker count."""
        return self.base.broker_count()

    def broker_default_configs(self) -> ConfigMap:
        """The base's broker defaults."""
        return self.base.broker_default_configs()

    def total_partitions(self) -> int:
        """The base's total, with the given topic counted at its given partition count."""
        known = self.base.topic(self.state.name)
        before = known.partitions if known is not None else 0
        return self.base.total_partitions() - before + self.state.partitions

    def topic_usage(self, name: str) -> TopicUsage | None:
        """The base's in-use facts."""
        return self.base.topic_usage(name)


@dataclass(frozen=True, slots=True)
class OtherTopics:
    """A cluster without one of its topics: the cluster that topic would be created in."""

    base: ClusterState
    name: str

    def topic(self, name: str) -> TopicState | None:
        """Another topic's state; None for the topic left out."""
        return None if name == self.name else self.base.topic(name)

    def topic_by_id(self, topic_id: str) -> TopicState | None:
        """Another topic's state by id; None for the topic left out."""
        found = self.base.topic_by_id(topic_id)
        return None if found is None or found.name == self.name else found

    def topic_names(self, *, include_internal: bool = False) -> frozenset[str]:
        """The other topics' names."""
        names = self.base.topic_names(include_internal=include_internal)
        return names - {self.name} if self.name in names else names

    def broker_count(self) -> int:
        """The base's broker count."""
        return self.base.broker_count()

    def broker_default_configs(self) -> ConfigMap:
        """The base's broker defaults."""
        return self.base.broker_default_configs()

    def total_partitions(self) -> int:
        """The other topics' partitions, internal ones included."""
        own = self.base.topic(self.name)
        return self.base.total_partitions() - (own.partitions if own is not None else 0)

    def topic_usage(self, name: str) -> TopicUsage | None:
        """The base's in-use facts of another topic; None for the topic left out."""
        return None if name == self.name else self.base.topic_usage(name)
