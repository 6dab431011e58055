"""Judging with live facts fails closed: no cluster state, or no current state the rules need."""

from __future__ import annotations

from collections.abc import Collection

from kafka_policy_proxy.policy.builders import (
    delete_topic_request,
    incremental_alter_configs_request,
)
from kafka_policy_proxy.policy.cluster import InMemoryCluster
from kafka_policy_proxy.policy.decision_log import is_unknown_topic
from kafka_policy_proxy.policy.loader import load_policy
from kafka_policy_proxy.policy.model import ConfigMap, Fact, Principal, TopicState
from kafka_policy_proxy.proxy.cluster.live_facts import LiveFacts
from kafka_policy_proxy.proxy.cluster.unavailable import ClusterStateUnavailable

POLICY = load_policy(
    """
version: 1
rules:
  - name: partitions
    partitions: {max: 6}
  - name: cleanup
    configs:
      cleanup.policy: {immutable: true}
"""
)
ALICE = Principal("User:alice")


class FakeReader:
    """A cluster-state reader that answers from memory, or fails."""

    def __init__(self, cluster: InMemoryCluster | None) -> None:
        self.cluster = cluster
        self.asked: list[frozenset[Fact]] = []
        self.fresh: list[frozenset[Fact]] = []
        self.ids: list[frozenset[str]] = []

    async def snapshot(
        self,
        facts: Collection[Fact],
        topics: Collection[str] = (),
        topic_ids: Collection[str] = (),
        *,
        fresh: Collection[Fact] = (),
        since: float | None = None,
    ) -> InMemoryCluster:
        self.asked.append(frozenset(facts))
        self.fresh.append(frozenset(fresh) if since is not None else frozenset())
        self.ids.append(frozenset(topic_ids))
        if self.cluster is None:
            raise ClusterStateUnavailable("cannot connect to any bootstrap server (refused)")
        return self.cluster

    def mark(self) -> int:
        return 0

    def unknown_ids(self, topic_ids: Collection[str]) -> set[str]:
        return set()

    def known_ids(self, topic_ids: Collection[str]) -> set[str]:
        return set()


def live(reader: FakeReader) -> LiveFacts:
    return LiveFacts(reader)  # type: ignore[arg-type]


async def test_unreadable_cluster_state_denies_every_topic() -> None:
    request = incremental_alter_configs_request(
        "orders.v1", [("cleanup.policy", "SET", "compact")], principal=ALICE
    )
    [verdict] = await live(FakeReader(None)).judge(POLICY, [request])
    assert verdict.decision is not None and not verdict.decision.allowed
    assert verdict.decision.message.startswith("[cluster-state] the proxy cannot read")
    assert "refused" in verdict.decision.message


async def test_missing_current_state_is_an_unknown_topic_when_rules_need_it() -> None:
    request = incremental_alter_configs_request(
        "orders.v1", [("cleanup.policy", "SET", "compact")], principal=ALICE
    )
    [verdict] = await live(FakeReader(InMemoryCluster())).judge(POLICY, [request])
    assert verdict.decision is not None and not verdict.decision.allowed
    assert is_unknown_topic(verdict.decision)
    assert "topic 'orders.v1' does not exist" in verdict.decision.message


async def test_known_current_state_is_judged_by_the_rules() -> None:
    current = TopicState(
        name="orders.v1",
        partitions=3,
        replication_factor=1,
        configs=ConfigMap({"cleanup.policy": "delete"}),
    )
    request = incremental_alter_configs_request(
        "orders.v1", [("cleanup.policy", "SET", "compact")], principal=ALICE
    )
    reader = FakeReader(InMemoryCluster(topics=(current,)))
    [verdict] = await live(reader).judge(POLICY, [request])
    assert verdict.decision is not None and not verdict.decision.allowed
    assert verdict.decision.violations[0].rule == "cleanup"
    assert Fact.TOPIC_STATE in reader.asked[0]


async def test_a_policy_that_needs_no_facts_reads_nothing() -> None:
    policy = load_policy("version: 1\nrules:\n  - name: names\n    name_pattern: '[a-z0-9.]+'\n")
    request = incremental_alter_configs_request(
        "orders.v1", [("retention.ms", "SET", "1000")], principal=ALICE
    )
    reader = FakeReader(None)
    [verdict] = await live(reader).judge(policy, [request])
    assert verdict.decision is not None and verdict.decision.allowed
    assert reader.asked == []


class CreatedLater(FakeReader):
    """A reader whose cluster shows the topic only from the `after`th read of its id on."""

    def __init__(self, cluster: InMemoryCluster, after: int) -> None:
        super().__init__(InMemoryCluster())
        self.later, self.after, self.id_reads = cluster, after, 0

    async def snapshot(
        self,
        facts: Collection[Fact],
        topics: Collection[str] = (),
        topic_ids: Collection[str] = (),
        *,
        fresh: Collection[Fact] = (),
        since: float | None = None,
    ) -> InMemoryCluster:
        if topic_ids:
            self.id_reads += 1
            if self.id_reads >= self.after:
                self.cluster = self.later
        return await super().snapshot(facts, topics, topic_ids, fresh=fresh, since=since)


PROTECTED = InMemoryCluster((TopicState("protected.orders", "0f6c9a1e", 1, 1),))
PROTECTING = load_policy(
    """
version: 1
rules:
  - name: protected
    match: {topic: 'protected\\..+', actions: [delete]}
    deny: true
"""
)


async def test_an_id_created_a_moment_ago_is_resolved_by_a_fresh_read() -> None:
    reader = CreatedLater(PROTECTED, after=3)
    facts = LiveFacts(reader, (0.0, 0.0, 0.0))  # type: ignore[arg-type]
    request = delete_topic_request(None, "0f6c9a1e", principal=ALICE)
    [verdict] = await facts.judge(PROTECTING, [request])
    assert verdict.decision is not None and not verdict.decision.allowed
    assert verdict.request.name == "protected.orders"
    # The first read and two re-reads of the id, then the batch judged again on what they found.
    assert reader.id_reads == 4
    assert all(fresh == frozenset(Fact) for fresh in reader.fresh)


async def test_an_id_still_unknown_after_the_retries_stays_undecided() -> None:
    reader = CreatedLater(PROTECTED, after=5)
    facts = LiveFacts(reader, (0.0, 0.0, 0.0))  # type: ignore[arg-type]
    request = delete_topic_request(None, "0f6c9a1e", principal=ALICE)
    [verdict] = await facts.judge(PROTECTING, [request])
    assert verdict.decision is None
    assert reader.id_reads == 4
    assert len(reader.asked) == 4
