"""A cluster-state reader in memory and a decision recorder to a file, for the policy filters."""

from __future__ import annotations

import importlib
import json
from collections.abc import Callable, Collection, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from harness.messages import build
from kafka_policy_proxy.codec.registry import request_class
from kafka_policy_proxy.policy.cluster import InMemoryCluster
from kafka_policy_proxy.policy.model import Fact
from kafka_policy_proxy.proxy.audit.file_sink import AuditLog
from kafka_policy_proxy.proxy.audit.recorder import DecisionRecorder
from kafka_policy_proxy.proxy.cluster.live_facts import LiveFacts
from kafka_policy_proxy.proxy.cluster.unavailable import ClusterStateUnavailable


class FakeReader:
    """Answers from memory, or fails; remembers what it was asked and what was invalidated."""

    def __init__(self, cluster: InMemoryCluster | None = None) -> None:
        self.cluster = cluster if cluster is not None else InMemoryCluster()
        self.unavailable = False
        self.asked: list[tuple[frozenset[Fact], frozenset[str]]] = []
        self.invalidated: list[str] = []
        self.changed_states: list[Any] = []  # TopicStates cached after an accepted change
        self.deleted_topics: list[tuple[str | None, str | None]] = []
        self.forgotten_ids: list[str] = []
        self.defaults_invalidated = 0
        self.applied: list[Any] = []  # the broker config changes to wait for
        self.fresh: list[frozenset[Fact]] = []  # the facts each snapshot had to read fresh
        self.usage_asked: list[tuple[frozenset[str], int]] = []  # in-use reads: topics, bound

    async def snapshot(
        self,
        facts: Collection[Fact],
        topics: Collection[str] = (),
        topic_ids: Collection[str] = (),
        *,
        fresh: Collection[Fact] = (),
        since: float | None = None,
    ) -> InMemoryCluster:
        self.asked.append((frozenset(facts), frozenset(topics)))
        self.fresh.append(frozenset(fresh) if since is not None else frozenset())
        if self.unavailable:
            raise ClusterStateUnavailable("cannot connect to any bootstrap server (refused)")
        return self.cluster

    async def usage(self, topics: Collection[str], max_groups: int) -> dict[str, Any]:
        self.usage_asked.append((frozenset(topics), max_groups))
        if self.unavailable:
            raise ClusterStateUnavailable("cannot read the in-use facts (refused)")
        found = {t: self.cluster.topic_usage(t) for t in topics}
        return {t: u for t, u in found.items() if u is not None}

    def mark(self) -> int:
        return 0

    def unknown_ids(self, topic_ids: Collection[str]) -> set[str]:
        return set()

    def known_ids(self, topic_ids: Collection[str]) -> set[str]:
        return set()

    def invalidate(self, topic: str) -> None:
        self.invalidated.append(topic)

    def changed(self, state: Any) -> None:
        self.changed_states.append(state)

    def deleted(self, topic: str | None, topic_id: str | None) -> None:
        self.deleted_topics.append((topic, topic_id))

    def forget_ids(self, topic_ids: Collection[str]) -> None:
        self.forgotten_ids.extend(topic_ids)

    def invalidate_broker_defaults(self, changes: Sequence[Any] = ()) -> None:
        self.defaults_invalidated += 1
        self.applied.extend(changes)


def live_facts(
    reader: FakeReader,
    resolve_retry_s: Sequence[float] = (0.0,),
    clock: Callable[[], datetime] = lambda: datetime.now(UTC),
) -> LiveFacts:
    """LiveFacts over the fake reader; an unknown id is re-read once, without a pause."""
    return LiveFacts(reader, resolve_retry_s, clock=clock)  # type: ignore[arg-type]


class Records:
    """A decision recorder writing to a file, and the records it wrote."""

    def __init__(self, directory: Path) -> None:
        self.path = directory / "audit.jsonl"
        self.sink = AuditLog(self.path)
        self.recorder = DecisionRecorder(
            [self.sink], proxy_id="proxy-a:9192", cluster_id=lambda: "c1"
        )

    def read(self) -> list[dict[str, Any]]:
        """The records written so far."""
        if not self.path.exists():
            return []
        return [json.loads(line) for line in self.path.read_text().splitlines()]


def create_topics(*topics: tuple[str, int], validate_only: bool = False) -> Any:
    """A CreateTopics v7 request for (name, partitions) pairs."""
    m = importlib.import_module(request_class(19, 7).__module__)
    return build(
        m.CreateTopicsRequest,
        topics=tuple(
            build(
                m.CreatableTopic,
                name=name,
                num_partitions=partitions,
                replication_factor=1,
                assignments=(),
                configs=(),
            )
            for name, partitions in topics
        ),
        timeout=30_000,
        validate_only=validate_only,
    )
