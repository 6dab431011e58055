"""The Judge fails closed: no cluster state, or no current state where rules need it, denies."""

from __future__ import annotations

from collections.abc import Collection

from policy.builders import incremental_alter_configs_request
from policy.cluster import InMemoryCluster
from policy.loader import load_policy
from policy.model import Fact, Principal, TopicState
from proxy.audit import AuditLog
from proxy.cluster_state import ClusterStateUnavailable
from proxy.enforcement import Judge

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

    async def snapshot(
        self, facts: Collection[Fact], topics: Collection[str] = (), topic_ids: Collection[str] = ()
    ) -> InMemoryCluster:
        self.asked.append(frozenset(facts))
        if self.cluster is None:
            raise ClusterStateUnavailable("cannot connect to any bootstrap server (refused)")
        return self.cluster


def judge(reader: FakeReader) -> Judge:
    return Judge(lambda: POLICY, reader, AuditLog())  # type: ignore[arg-type]


async def test_unreadable_cluster_state_denies_every_topic() -> None:
    request = incremental_alter_configs_request(
        "orders.v1", [("cleanup.policy", "SET", "compact")], principal=ALICE
    )
    [verdict] = await judge(FakeReader(None)).judge(POLICY, [request])
    assert verdict.decision is not None and not verdict.decision.allowed
    assert verdict.decision.message.startswith("[cluster-state] the proxy cannot read")
    assert "refused" in verdict.decision.message


async def test_missing_current_state_denies_when_rules_need_it() -> None:
    request = incremental_alter_configs_request(
        "orders.v1", [("cleanup.policy", "SET", "compact")], principal=ALICE
    )
    [verdict] = await judge(FakeReader(InMemoryCluster())).judge(POLICY, [request])
    assert verdict.decision is not None and not verdict.decision.allowed
    assert "is not in the cluster metadata" in verdict.decision.message


async def test_known_current_state_is_judged_by_the_rules() -> None:
    current = TopicState(
        name="orders.v1", partitions=3, replication_factor=1, configs={"cleanup.policy": "delete"}
    )  # type: ignore[arg-type]
    request = incremental_alter_configs_request(
        "orders.v1", [("cleanup.policy", "SET", "compact")], principal=ALICE
    )
    reader = FakeReader(InMemoryCluster(topics=(current,)))
    [verdict] = await judge(reader).judge(POLICY, [request])
    assert verdict.decision is not None and not verdict.decision.allowed
    assert verdict.decision.violations[0].rule == "cleanup"
    assert Fact.TOPIC_STATE in reader.asked[0]
