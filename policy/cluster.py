"""The cluster facts rules may read, as a sync interface, plus an in-memory implementation."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from kafka_policy_proxy.policy.model import EMPTY_CONFIGS, JSON, ConfigMap, TopicState
from kafka_policy_proxy.policy.usage import TopicUsage

# Kafka's own internal topics; the broker marks them internal in Metadata too.
INTERNAL_TOPICS = frozenset(
    {"__consumer_offsets", "__transaction_state", "__share_group_state", "__cluster_metadata"}
)


def is_internal(name: str | None, flagged: bool = False) -> bool:
    """Whether a topic is internal: one of Kafka's own, or flagged internal by the broker."""
    return flagged or name in INTERNAL_TOPICS


@runtime_checkable
class ClusterState(Protocol):
    """Cluster facts, read synchronously; the proxy fills them from a snapshot."""

    def topic(self, name: str) -> TopicState | None:
        """The current state of the topic with this name, or None if it does not exist."""
        ...

    def topic_by_id(self, topic_id: str) -> TopicState | None:
        """The current state of the topic with this id, or None if it does not exist."""
        ...

    def topic_names(self, *, include_internal: bool = False) -> frozenset[str]:
        """The names of the existing topics."""
        ...

    def broker_count(self) -> int:
        """How many brokers the cluster has."""
        ...

    def broker_default_configs(self) -> ConfigMap:
        """The broker's default topic configs, keyed by topic config name (`retention.ms`)."""
        ...

    def total_partitions(self) -> int:
        """The number of partitions over all topics, internal ones included."""
        ...

    def topic_usage(self, name: str) -> TopicUsage | None:
        """The topic's latest writes and consumer groups, or None if they were not read."""
        ...


@dataclass(frozen=True, slots=True)
class InMemoryCluster:
    """A `ClusterState` held in memory: for tests, the offline tools and the Spark jobs."""

    topics: tuple[TopicState, ...] = ()
    brokers: int = 1
    defaults: ConfigMap = EMPTY_CONFIGS
    usage: tuple[TopicUsage, ...] = ()
    _by_name: Mapping[str, TopicState] = field(init=False, repr=False, compare=False)
    _by_id: Mapping[str, TopicState] = field(init=False, repr=False, compare=False)
    _names: tuple[frozenset[str], frozenset[str]] = field(init=False, repr=False, compare=False)
    _partitions: int = field(init=False, repr=False, compare=False)
    _usage: Mapping[str, TopicUsage] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # Computed once: the engine may ask for these on every request.
        object.__setattr__(self, "_by_name", {t.name: t for t in self.topics})
        object.__setattr__(self, "_by_id", {t.topic_id: t for t in self.topics if t.topic_id})
        everything = frozenset(t.name for t in self.topics)
        internal = frozenset(t.name for t in self.topics if is_internal(t.name, t.internal))
        object.__setattr__(self, "_names", (everything - internal, everything))
        object.__setattr__(self, "_partitions", sum(t.partitions for t in self.topics))
        object.__setattr__(self, "_usage", {u.topic: u for u in self.usage})

    @classmethod
    def of(
        cls,
        topics: Iterable[TopicState] = (),
        brokers: int = 1,
        defaults: Mapping[str, str | None] | None = None,
        usage: Iterable[TopicUsage] = (),
    ) -> InMemoryCluster:
        """Build from any iterables and mappings."""
        return cls(tuple(topics), brokers, ConfigMap(defaults or {}), tuple(usage))

    def topic(self, name: str) -> TopicState | None:
        """The current state of the topic with this name, or None."""
        return self._by_name.get(name)

    def topic_by_id(self, topic_id: str) -> TopicState | None:
        """The current state of the topic with this id, or None."""
        return self._by_id.get(topic_id)

    def topic_names(self, *, include_internal: bool = False) -> frozenset[str]:
        """The names of the existing topics."""
        return self._names[include_internal]

    def broker_count(self) -> int:
        """How many brokers the cluster has."""
        return self.brokers

    def broker_default_configs(self) -> ConfigMap:
        """The broker's default topic configs."""
        return self.defaults

    def total_partitions(self) -> int:
        """The number of partitions over all topics."""
        return self._partitions

    def topic_usage(self, name: str) -> TopicUsage | None:
        """The topic's in-use facts, if they were read or described."""
        return self._usage.get(name)

    def to_dict(self) -> JSON:
        """Return a JSON-ready dict."""
        data: JSON = {
            "topics": [t.to_dict() for t in self.topics],
            "brokers": self.brokers,
            "defaults": dict(self.defaults),
        }
        if self.usage:
            data["usage"] = [u.to_dict() for u in self.usage]
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> InMemoryCluster:
        """Rebuild from `to_dict()` output."""
        return cls.of(
            (TopicState.from_dict(t) for t in data.get("topics") or ()),
            data.get("brokers", 1),
            data.get("defaults") or {},
            (TopicUsage.from_dict(u) for u in data.get("usage") or ()),
        )
