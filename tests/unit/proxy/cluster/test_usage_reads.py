"""The in-use read against scripted brokers: what it asks whom, and the facts it makes."""

from __future__ import annotations

from types import SimpleNamespace as NS
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from kafka_policy_proxy.policy.usage import GroupUsage
from kafka_policy_proxy.proxy.cluster.unavailable import ReadFailed
from kafka_policy_proxy.proxy.cluster.usage_reads import read_usage
from tests.unit.codec.consumer_bytes import assignment, batch, subscription

OK = ErrorCode.none
NODES = {1: ("b1", 9092), 2: ("b2", 9092)}
LEADERS = {0: 1, 1: 2}
LISTED = {
    1: [("live", "classic", "Stable"), ("stopped", "classic", "Empty")],
    2: [("new", "consumer", "Stable"), ("idle", "classic", "Empty")],
}
COMMITS = {"live": {0: 9}, "stopped": {0: 5, 1: 0}, "new": {}, "idle": {}}


class Cluster:
    """Answers each request as a two-broker cluster would; records (broker, API) asked."""

    def __init__(self, fail: str | None = None) -> None:
        self.asked: list[tuple[int, str]] = []
        self.fail = fail

    async def call(self, message: Any) -> Any:  # the bootstrap connection: broker 0
        return self.answer(0, message)

    async def connect(self, host: str, port: int) -> Any:
        node = next(n for n, (h, _) in NODES.items() if h == host)
        cluster = self

        class Client:
            async def request(self, message: Any) -> Any:
                return cluster.answer(node, message)

            async def close(self) -> None:
                pass

        return Client()

    def answer(self, node: int, message: Any) -> Any:
        api = type(message).__name__.removesuffix("Request")
        self.asked.append((node, api))
        error = ErrorCode.coordinator_not_available if api == self.fail else OK
        return getattr(self, api.lower())(node, message, error)

    def metadata(self, node: int, message: Any, error: ErrorCode) -> Any:
        parts = [NS(partition_index=p, leader_id=n) for p, n in LEADERS.items()]
        return NS(
            brokers=[NS(node_id=n, host=h, port=p) for n, (h, p) in NODES.items()],
            topics=[NS(name="orders", error_code=OK, partitions=parts)],
        )

    def listoffsets(self, node: int, message: Any, error: ErrorCode) -> Any:
        [topic] = message.topics
        [p] = topic.partitions
        latest = int(p.timestamp) == -3
        answer = NS(
            partition_index=p.partition_index,
            error_code=error,
            offset=10,
            timestamp=7000 if latest else -1,
        )
        return NS(topics=[NS(name="orders", partitions=[answer])])

    def listgroups(self, node: int, message: Any, error: ErrorCode) -> Any:
        groups = [NS(group_id=g, group_type=t, group_state=s) for g, t, s in LISTED[node]]
        return NS(error_code=error, groups=groups)

    def findcoordinator(self, node: int, message: Any, error: ErrorCode) -> Any:
        where = {g: n for n, gs in LISTED.items() for g, _, _ in gs}
        return NS(
            coordinators=[
                NS(
                    key=k,
                    node_id=where[k],
                    host=NODES[where[k]][0],
                    port=9092,
                    error_code=error,
                    error_message=None,
                )
                for k in message.coordinator_keys
            ]
        )

    def offsetfetch(self, node: int, message: Any, error: ErrorCode) -> Any:
        groups = []
        for g in message.groups:
            parts = [
                NS(
                    partition_index=p,
                    committed_offset=COMMITS[g.group_id].get(p, -1),
                    error_code=OK,
                )
                for p in g.topics[0].partition_indexes
            ]
            groups.append(
                NS(
                    group_id=g.group_id,
                    error_code=error,
                    topics=[NS(name="orders", partitions=parts)],
                )
            )
        return NS(groups=groups)

    def describegroups(self, node: int, message: Any, error: ErrorCode) -> Any:
        members = {
            "live": [
                NS(
                    member_metadata=subscription(1, "orders"),
                    member_assignment=assignment(("orders", [0, 1])),
                )
            ],
        }
        return NS(
            groups=[
                NS(
                    group_id=g,
                    error_code=error,
                    protocol_type="consumer",
                    members=members.get(g, []),
                )
                for g in message.groups
            ]
        )

    def consumergroupdescribe(self, node: int, message: Any, error: ErrorCode) -> Any:
        member = NS(
            subscribed_topic_names=["clicks"],
            subscribed_topic_regex="ord.*",
            assignment=NS(topic_partitions=[]),
        )
        return NS(
            groups=[NS(group_id=g, error_code=error, members=[member]) for g in message.group_ids]
        )

    def fetch(self, node: int, message: Any, error: ErrorCode) -> Any:
        [topic] = message.topics
        [p] = topic.partitions
        assert int(p.partition_max_bytes) == 4096
        records = batch(0, 8, 4000, 4500)  # offsets 0-7, first written at 4000
        part = NS(partition_index=p.partition, error_code=error, records=records)
        return NS(error_code=OK, responses=[NS(topic="orders", partitions=[part])])


async def test_the_read_makes_the_facts_the_judge_needs() -> None:
    cluster = Cluster()
    usage = (await read_usage(cluster, cluster.connect, ["orders"], 10, 9000))["orders"]  # type: ignore[arg-type]
    assert (usage.read_at, usage.latest, usage.ends, usage.groups_listed) == (
        9000,
        ((0, 7000), (1, 7000)),
        ((0, 10), (1, 10)),
        4,
    )
    assert usage.groups == (
        GroupUsage("live", "Stable", members=True, committed=((0, 9),)),
        GroupUsage("new", "Stable", members=True),  # a KIP-848 group, by its regex
        # Dated by the batch holding offset 4; offset 0 cannot be dated.
        GroupUsage("stopped", "Empty", committed=((0, 5), (1, 0)), consumed_at=((0, 4000),)),
    )
    # ListGroups to every broker, ListOffsets twice to each leader, one batched
    # FindCoordinator, then each coordinator's groups (only those not Empty described), and one
    # Fetch (only the stopped group).
    assert sorted(cluster.asked) == sorted(
        [
            (0, "Metadata"),
            (1, "ListGroups"),
            (2, "ListGroups"),
            (1, "ListOffsets"),
            (1, "ListOffsets"),
            (2, "ListOffsets"),
            (2, "ListOffsets"),
            (0, "FindCoordinator"),
            (1, "OffsetFetch"),
            (1, "DescribeGroups"),
            (2, "OffsetFetch"),
            (2, "ConsumerGroupDescribe"),
            (1, "Fetch"),
        ]
    )


async def test_more_groups_than_the_bound_are_counted_not_examined() -> None:
    cluster = Cluster()
    usage = (await read_usage(cluster, cluster.connect, ["orders"], 3, 9000))["orders"]  # type: ignore[arg-type]
    assert (usage.groups, usage.groups_listed) == ((), 4)
    assert not {api for _, api in cluster.asked} & {"FindCoordinator", "OffsetFetch", "Fetch"}


@pytest.mark.parametrize(
    "api",
    ["ListGroups", "FindCoordinator", "OffsetFetch", "DescribeGroups", "ListOffsets", "Fetch"],
)
async def test_any_error_fails_the_read(api: str) -> None:
    cluster = Cluster(fail=api)
    with pytest.raises(ReadFailed, match="COORDINATOR_NOT_AVAILABLE"):
        await read_usage(cluster, cluster.connect, ["orders"], 10, 9000)  # type: ignore[arg-type]
