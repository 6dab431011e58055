"""A cluster that changes as the requests judged against it go through (bench data only).

`InMemoryCluster` is immutable and re-indexes every topic when rebuilt; audit traffic over a
large population changes one topic at a time, so this one is a mutable `ClusterState` with a
`version` that counts the changes, and finer ones: of the set of names, of the partition
counts, of any topic's configs, and of each topic, so that a judgement can be kept for as long
as none of the facts it read has changed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace

from kafka_policy_proxy.policy.builders import BROKER_ONLY_DEFAULTS
from kafka_policy_proxy.policy.cluster import InMemoryCluster, is_internal
from kafka_policy_proxy.policy.configs import apply_create
from kafka_policy_proxy.policy.model import (
    Action,
    AlterKind,
    ConfigMap,
    TopicRequest,
    TopicState,
)
from kafka_policy_proxy.policy.usage import TopicUsage


class EvolvingCluster:
    """A `ClusterState` whose topics are created, altered and deleted in place."""

    def __init__(
        self, topics: Iterable[TopicState], brokers: int, defaults: Mapping[str, str | None]
    ) -> None:
        self.brokers = brokers
        self.defaults = ConfigMap(defaults)
        self._topic_defaults = {k: v for k, v in defaults.items() if k not in BROKER_ONLY_DEFAULTS}
        self._by_name: dict[str, TopicState] = {t.name: t for t in topics}
        self._by_id = {t.topic_id: t for t in self._by_name.values() if t.topic_id}
        self._partitions = sum(t.partitions for t in self._by_name.values())
        self._names: tuple[frozenset[str], frozenset[str]] | None = None
        self.version = 0
        self.names_version = 0
        self.partitions_version = 0
        self.configs_version = 0
        self._versions: dict[str, int] = {}
        self.created = 0

    def topic(self, name: str) -> TopicState | None:
        """The current state of the topic with this name, or None."""
        return self._by_name.get(name)

    def topic_by_id(self, topic_id: str) -> TopicState | None:
        """The current state of the topic with this id, or None."""
        return self._by_id.get(topic_id)

    def topic_names(self, *, include_internal: bool = False) -> frozenset[str]:
        """The names of the existing topics (computed again only after a change)."""
        if self._names is None:
            every = frozenset(self._by_name)
            internal = frozenset(n for n, t in self._by_name.items() if is_internal(n, t.internal))
            self._names = (every - internal, every)
        return self._names[include_internal]

    def broker_count(self) -> int:
        """How many brokers the cluster has."""
        return self.brokers

    def broker_default_configs(self) -> ConfigMap:
        """The broker's default topic configs (and num.partitions, default.replication.factor)."""
        return self.defaults

    def total_partitions(self) -> int:
        """The number of partitions over all topics."""
        return self._partitions

    def topic_version(self, name: str) -> int:
        """The version at which this topic last changed (0: never)."""
        return self._versions.get(name, 0)

    def topic_usage(self, name: str) -> TopicUsage | None:
        """Never read here: the traffic deletes no topic an `in_use` rule guards."""
        return None

    def apply(self, request: TopicRequest) -> bool:
        """What an allowed, forwarded request does to the cluster; whether anything changed."""
        current = self._by_name.get(request.name)
        if request.action is Action.CREATE:
            if current is not None:
                return False  # the broker answers TOPIC_ALREADY_EXISTS
            self._put(self._created(request))
            self.created += 1
            self.names_version += 1
            self.partitions_version += 1
        elif request.action is Action.DELETE:
            if current is None:
                return False
            self._drop(current)
            self.names_version += 1
            self.partitions_version += 1
        elif request.action is Action.ALTER and current is not None:
            changed = self._altered(request, current)
            if changed == current:
                return False
            self._drop(current)
            self._put(changed)
            self.partitions_version += changed.partitions != current.partitions
            self.configs_version += changed.configs != current.configs
        else:
            return False  # DeleteRecords and reassignments change no fact a rule reads here
        self.version += 1
        self._versions[request.name] = self.version
        return True

    def snapshot(self) -> InMemoryCluster:
        """The cluster as it is now, immutable (for a snapshot file)."""
        return InMemoryCluster.of(self._by_name.values(), self.brokers, self.defaults)

    def _created(self, request: TopicRequest) -> TopicState:
        wanted = request.requested
        partitions = wanted.partitions or int(self.defaults.get("num.partitions") or 1)
        rf = wanted.replication_factor or int(self.defaults.get("default.replication.factor") or 1)
        configs = wanted.configs or apply_create(wanted.changes, self._topic_defaults)
        number = len(self._by_id) + self.version + 1
        return TopicState(
            name=request.name,
            topic_id=f"{number:08x}-0000-4000-8000-{self.version:012x}",
            partitions=partitions,
            replication_factor=rf,
            assignment=spread(partitions, rf, self.brokers),
            configs=configs,
        )

    def _altered(self, request: TopicRequest, current: TopicState) -> TopicState:
        wanted = request.requested
        if request.alter_kind is AlterKind.PARTITIONS and wanted.partitions:
            count = wanted.partitions
            assignment = spread(count, current.replication_factor, self.brokers)
            return replace(current, partitions=count, assignment=assignment)
        if request.alter_kind is AlterKind.CONFIGS and wanted.configs:
            return replace(current, configs=wanted.configs)
        return current

    def _put(self, state: TopicState) -> None:
        self._by_name[state.name] = state
        if state.topic_id:
            self._by_id[state.topic_id] = state
        self._partitions += state.partitions
        self._names = None

    def _drop(self, state: TopicState) -> None:
        del self._by_name[state.name]
        if state.topic_id:
            self._by_id.pop(state.topic_id, None)
        self._partitions -= state.partitions
        self._names = None


def spread(partitions: int, rf: int, brokers: int) -> tuple[tuple[int, tuple[int, ...]], ...]:
    """Replicas placed round-robin, as the broker's default placement roughly does."""
    return tuple(
        (p, tuple((p + r) % brokers + 1 for r in range(min(rf, brokers))))
        for p in range(partitions)
    )
