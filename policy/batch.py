"""The new names of one batch of creates, as the name-collision check sees them.

Kafka maps '.' to '_' in metric names, so `a.b` and `a_b` collide. The broker refuses a
create that collides with an existing topic; two colliding names in one CreateTopics are
judged as if created in request order: the first is kept, every later one collides with it.
A name given twice is not a collision: the broker refuses every copy (INVALID_REQUEST).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from kafka_policy_proxy.policy.cluster import ClusterState
from kafka_policy_proxy.policy.model import Action, ConfigMap, TopicRequest, TopicState
from kafka_policy_proxy.policy.usage import TopicUsage


def collision_key(name: str) -> str:
    """The metric-name form of a topic name: Kafka maps '.' to '_' there."""
    return name.replace(".", "_")


class BatchCluster:
    """A `ClusterState` that also knows the first new name of the batch for each collision key."""

    __slots__ = ("_cluster", "first_new_names")

    def __init__(self, cluster: ClusterState, first_new_names: Mapping[str, str]) -> None:
        self._cluster = cluster
        self.first_new_names = first_new_names

    def earlier_collision(self, name: str) -> str | None:
        """The name requested before `name` in this batch that collides with it, if any."""
        first = self.first_new_names.get(collision_key(name))
        # The first name with this key comes first in the batch: any other name comes later.
        return first if first is not None and first != name else None

    def topic(self, name: str) -> TopicState | None:
        """As the wrapped cluster."""
        return self._cluster.topic(name)

    def topic_by_id(self, topic_id: str) -> TopicState | None:
        """As the wrapped cluster."""
        return self._cluster.topic_by_id(topic_id)

    def topic_names(self, *, include_internal: bool = False) -> frozenset[str]:
        """As the wrapped cluster: the batch's names do not exist yet."""
        return self._cluster.topic_names(include_internal=include_internal)

    def broker_count(self) -> int:
        """As the wrapped cluster."""
        return self._cluster.broker_count()

    def broker_default_configs(self) -> ConfigMap:
        """As the wrapped cluster."""
        return self._cluster.broker_default_configs()

    def total_partitions(self) -> int:
        """As the wrapped cluster."""
        return self._cluster.total_partitions()

    def topic_usage(self, name: str) -> TopicUsage | None:
        """As the wrapped cluster."""
        return self._cluster.topic_usage(name)


def with_new_names(cluster: ClusterState, requests: Iterable[TopicRequest]) -> ClusterState:
    """The cluster, wrapped with the batch's new names when two of them collide."""
    first: dict[str, str] = {}
    colliding = False
    for request in requests:
        if request.action is Action.CREATE and request.name:
            kept = first.setdefault(collision_key(request.name), request.name)
            colliding = colliding or kept != request.name
    # Most batches hold no colliding pair: their checks then read the cluster unwrapped.
    return BatchCluster(cluster, first) if colliding else cluster
