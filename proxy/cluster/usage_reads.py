"""The in-use facts of topics (policy/usage.py), read from the cluster for an `in_use` rule.

What one read asks (T topics, B brokers, G consumer groups, C coordinators, L leaders):
- Metadata for the topics (partition leaders, broker addresses): 1 request;
- ListGroups to every broker, at once: B requests (ListGroups answers for the groups that
  broker coordinates);
- ListOffsets MAX_TIMESTAMP (KIP-734) and LATEST to each partition leader: 2 L requests;
- then, only when G is within the bound (`max_groups`), FindCoordinator (v4, batched) for
  every group: 1 request; per coordinator, at once: one OffsetFetch (v8, every group of it,
  restricted to the topics' partitions), one DescribeGroups for its classic groups and one
  ConsumerGroupDescribe for its KIP-848 consumer groups, leaving out those ListGroups showed
  Empty (no members): at most 3 C requests;
- Fetch, to date the commits of groups without members on the topic: per leader, one request
  per distinct committed offset of a partition (4 KiB per partition: a batch header is
  enough), at once across leaders.
On a cluster with thousands of groups the OffsetFetch and describe responses grow with G (a
few dozen bytes per group and partition); G beyond the bound is not examined at all, and the
guard denies. The caller bounds the whole read with a timeout and fails closed.

A group whose member bytes cannot be read counts as having members on every topic (fail
closed); the members of groups of other protocol types (Connect) and of streams groups are not
examined, only their commits.
"""

from __future__ import annotations

import asyncio
import re
from collections import defaultdict
from collections.abc import Awaitable, Callable, Sequence
from datetime import timedelta
from typing import Any

from kio.schema.consumer_group_describe.v0.request import ConsumerGroupDescribeRequest
from kio.schema.describe_groups.v5.request import DescribeGroupsRequest
from kio.schema.errors import ErrorCode
from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic
from kio.schema.find_coordinator.v4.request import FindCoordinatorRequest
from kio.schema.list_groups.v5.request import ListGroupsRequest
from kio.schema.list_offsets.v8.request import (
    ListOffsetsPartition,
    ListOffsetsRequest,
    ListOffsetsTopic,
)
from kio.schema.metadata.v12.request import MetadataRequestTopic
from kio.schema.offset_fetch.v8.request import (
    OffsetFetchRequest,
    OffsetFetchRequestGroup,
    OffsetFetchRequestTopics,
)
from kio.schema.types import BrokerId, GroupId, TopicName
from kio.static.primitive import i8, i32, i32Timedelta, i64

from kafka_policy_proxy.codec.consumer_protocol import (
    CONSUMER_PROTOCOL,
    ProtocolError,
    assigned_topics,
    record_time,
    subscribed_topics,
)
from kafka_policy_proxy.codec.errors import CodecError
from kafka_policy_proxy.policy.usage import GroupUsage, TopicUsage
from kafka_policy_proxy.proxy.cluster.client import KafkaClient
from kafka_policy_proxy.proxy.cluster.connection import ClusterConnection
from kafka_policy_proxy.proxy.cluster.requests import kafka_error, metadata_request
from kafka_policy_proxy.proxy.cluster.unavailable import ReadFailed

Connect = Callable[[str, int], Awaitable[KafkaClient]]
Partition = tuple[str, int]
MAX_TIMESTAMP = -3  # KIP-734: the offset and timestamp of the record with the largest timestamp
LATEST = -1
FETCH_BYTES = 4096
GROUP_COORDINATOR = 0
_GONE = frozenset({ErrorCode.group_id_not_found})
# ListGroups states of groups without members.
_MEMBERLESS = frozenset({"Empty", "Dead"})
# ListGroups types whose offsets OffsetFetch does not serve.
_NOT_OFFSETS = frozenset({"share"})


class Brokers:
    """One connection per broker, opened on first use for this read, closed at its end."""

    def __init__(self, nodes: dict[int, tuple[str, int]], connect: Connect) -> None:
        self.nodes = nodes
        self._connect = connect
        self._clients: dict[int, asyncio.Task[KafkaClient]] = {}

    async def call(self, node: int, message: Any) -> Any:
        """Send one request to the broker; any failure raises ReadFailed naming it."""
        name = type(message).__name__.removesuffix("Request")
        if node not in self.nodes:
            raise ReadFailed(f"{name}: broker {node} is not in the cluster metadata")
        host, port = self.nodes[node]
        try:
            if node not in self._clients:
                self._clients[node] = asyncio.ensure_future(self._connect(host, port))
            client = await self._clients[node]
            return await client.request(message)
        except (OSError, EOFError, ValueError, CodecError) as exc:
            raise ReadFailed(f"{name} to broker {node} ({host}:{port}) failed: {exc}") from None

    async def close(self) -> None:
        """Close every connection opened."""
        for task in self._clients.values():
            if task.done() and not task.cancelled() and task.exception() is None:
                await task.result().close()
            else:
                task.cancel()


def _check(code: ErrorCode, what: str, message: str | None = None) -> None:
    if code is not ErrorCode.none:
        raise ReadFailed(f"{what}: {kafka_error(code, message)}")


async def read_usage(
    conn: ClusterConnection,
    connect: Connect,
    topics: Sequence[str],
    max_groups: int,
    read_at: int,
) -> dict[str, TopicUsage]:
    """The in-use facts of the topics that exist, as of `read_at` (epoch ms)."""
    response = await conn.call(
        metadata_request(
            tuple(MetadataRequestTopic(topic_id=None, name=TopicName(t)) for t in topics)
        )
    )
    nodes = {int(b.node_id): (str(b.host), int(b.port)) for b in response.brokers}
    leaders: dict[Partition, int] = {}
    for topic in response.topics:
        if topic.error_code in (ErrorCode.unknown_topic_or_partition, ErrorCode.unknown_topic_id):
            continue  # absent: the judge answers it as the broker would
        _check(topic.error_code, f"Metadata for topic {topic.name!r}")
        for p in topic.partitions:
            if int(p.leader_id) < 0:
                raise ReadFailed(f"partition {p.partition_index} of {topic.name!r} has no leader")
            leaders[(str(topic.name), int(p.partition_index))] = int(p.leader_id)
    found = sorted({t for t, _ in leaders})
    if not found:
        return {}
    brokers = Brokers(nodes, connect)
    try:
        (latest, ends), listed = await asyncio.gather(
            _offsets(brokers, leaders), _list_groups(brokers)
        )
        groups: dict[str, list[GroupUsage]] = {t: [] for t in found}
        if len(listed) <= max_groups and listed:
            groups = await _groups(conn, brokers, leaders, listed, found)
    finally:
        await brokers.close()
    return {
        t: TopicUsage(
            topic=t,
            read_at=read_at,
            latest=tuple(sorted((p, ts) for (n, p), ts in latest.items() if n == t)),
            ends=tuple(sorted((p, o) for (n, p), o in ends.items() if n == t)),
            groups=tuple(sorted(groups.get(t, ()), key=lambda g: g.group)),
            groups_listed=len(listed),
        )
        for t in found
    }


def _by_leader(leaders: dict[Partition, int]) -> dict[int, dict[str, list[int]]]:
    grouped: dict[int, dict[str, list[int]]] = defaultdict(lambda: defaultdict(list))
    for (topic, partition), leader in sorted(leaders.items()):
        grouped[leader][topic].append(partition)
    return grouped


async def _offsets(
    brokers: Brokers, leaders: dict[Partition, int]
) -> tuple[dict[Partition, int], dict[Partition, int]]:
    """Per partition: the latest record timestamp (if any record) and the high watermark."""

    def request(topics: dict[str, list[int]], timestamp: int) -> ListOffsetsRequest:
        return ListOffsetsRequest(
            replica_id=BrokerId(-1),
            isolation_level=i8(0),
            topics=tuple(
                ListOffsetsTopic(
                    name=TopicName(t),
                    partitions=tuple(
                        ListOffsetsPartition(
                            partition_index=i32(p),
                            current_leader_epoch=i32(-1),
                            timestamp=i64(timestamp),
                        )
                        for p in parts
                    ),
                )
                for t, parts in topics.items()
            ),
        )

    grouped = _by_leader(leaders)
    calls = [
        brokers.call(leader, request(topics, ts))
        for leader, topics in grouped.items()
        for ts in (MAX_TIMESTAMP, LATEST)
    ]
    latest: dict[Partition, int] = {}
    ends: dict[Partition, int] = {}
    for index, response in enumerate(await asyncio.gather(*calls)):
        for topic in response.topics:
            for p in topic.partitions:
                _check(
                    p.error_code, f"ListOffsets for {topic.name!r} partition {p.partition_index}"
                )
                key = (str(topic.name), int(p.partition_index))
                if index % 2 == 1:
                    ends[key] = int(p.offset)
                elif int(p.timestamp) >= 0:
                    latest[key] = int(p.timestamp)
    return latest, ends


async def _list_groups(brokers: Brokers) -> dict[str, tuple[str, str]]:
    """Every group whose offsets OffsetFetch serves: id -> (type, state), from every broker."""
    request = ListGroupsRequest(states_filter=(), types_filter=())
    responses = await asyncio.gather(*(brokers.call(n, request) for n in sorted(brokers.nodes)))
    listed: dict[str, tuple[str, str]] = {}
    for node, response in zip(sorted(brokers.nodes), responses, strict=True):
        _check(response.error_code, f"ListGroups on broker {node}")
        for g in response.groups:
            if g.group_type not in _NOT_OFFSETS:
                listed[str(g.group_id)] = (str(g.group_type), str(g.group_state))
    return listed


async def _groups(
    conn: ClusterConnection,
    brokers: Brokers,
    leaders: dict[Partition, int],
    listed: dict[str, tuple[str, str]],
    topics: Sequence[str],
) -> dict[str, list[GroupUsage]]:
    """The groups with members on, or commits on, each topic."""
    response = await conn.call(
        FindCoordinatorRequest(key_type=i8(GROUP_COORDINATOR), coordinator_keys=tuple(listed))
    )
    by_coordinator: dict[int, list[str]] = defaultdict(list)
    for c in response.coordinators:
        _check(c.error_code, f"FindCoordinator for group {c.key!r}", c.error_message)
        brokers.nodes.setdefault(int(c.node_id), (str(c.host), int(c.port)))
        by_coordinator[int(c.node_id)].append(str(c.key))
    partitions: dict[str, list[int]] = defaultdict(list)
    for topic, partition in sorted(leaders):
        partitions[topic].append(partition)
    results = await asyncio.gather(
        *(
            _at_coordinator(brokers, node, ids, listed, partitions)
            for node, ids in sorted(by_coordinator.items())
        )
    )
    committed: dict[tuple[str, str], dict[int, int]] = {}
    members: dict[str, frozenset[str]] = {}
    for commits, on in results:
        committed.update(commits)
        members.update(on)
    dated = await _consumed_at(brokers, leaders, committed, members)
    usage: dict[str, list[GroupUsage]] = {t: [] for t in topics}
    for topic in topics:
        for group in sorted(listed):
            offsets = committed.get((group, topic), {})
            here = topic in members.get(group, frozenset())
            if not offsets and not here:
                continue
            usage[topic].append(
                GroupUsage(
                    group=group,
                    state=listed[group][1],
                    members=here,
                    committed=tuple(sorted(offsets.items())),
                    consumed_at=tuple(
                        sorted(
                            (p, dated[(topic, p, o)])
                            for p, o in offsets.items()
                            if (topic, p, o) in dated
                        )
                    ),
                )
            )
    return usage


async def _at_coordinator(
    brokers: Brokers,
    node: int,
    ids: list[str],
    listed: dict[str, tuple[str, str]],
    partitions: dict[str, list[int]],
) -> tuple[dict[tuple[str, str], dict[int, int]], dict[str, frozenset[str]]]:
    """One coordinator's groups: committed offsets on the topics, and the topics members use."""
    wanted = tuple(
        OffsetFetchRequestTopics(name=TopicName(t), partition_indexes=tuple(i32(p) for p in ps))
        for t, ps in partitions.items()
    )
    # An Empty (or Dead) group has no members to describe: most of a large cluster's groups.
    live = [g for g in ids if listed[g][1] not in _MEMBERLESS]
    classic = [g for g in live if listed[g][0] in ("classic", "")]
    consumer = [g for g in live if listed[g][0] == "consumer"]
    offsets_call = brokers.call(
        node,
        OffsetFetchRequest(
            groups=tuple(OffsetFetchRequestGroup(group_id=GroupId(g), topics=wanted) for g in ids),
            require_stable=False,
        ),
    )
    calls: list[Awaitable[Any]] = [offsets_call]
    if classic:
        calls.append(
            brokers.call(
                node,
                DescribeGroupsRequest(
                    groups=tuple(GroupId(g) for g in classic), include_authorized_operations=False
                ),
            )
        )
    if consumer:
        calls.append(
            brokers.call(
                node,
                ConsumerGroupDescribeRequest(
                    group_ids=tuple(GroupId(g) for g in consumer),
                    include_authorized_operations=False,
                ),
            )
        )
    fetched, *described = await asyncio.gather(*calls)
    committed: dict[tuple[str, str], dict[int, int]] = {}
    for group in fetched.groups:
        if group.error_code in _GONE:
            continue
        _check(group.error_code, f"OffsetFetch for group {group.group_id!r}")
        for topic in group.topics:
            for p in topic.partitions:
                what = f"OffsetFetch for group {group.group_id!r} on {topic.name!r}"
                _check(p.error_code, what)
                if int(p.committed_offset) >= 0:
                    key = (str(group.group_id), str(topic.name))
                    committed.setdefault(key, {})[int(p.partition_index)] = int(p.committed_offset)
    on: dict[str, frozenset[str]] = {}
    for response in described:
        for group in response.groups:
            if group.error_code in _GONE:
                continue
            _check(group.error_code, f"describing group {group.group_id!r}")
            on[str(group.group_id)] = _member_topics(group, partitions)
    return committed, on


def _member_topics(group: Any, partitions: dict[str, list[int]]) -> frozenset[str]:
    """The topics among ours that the group's members are assigned or subscribed to."""
    ours = frozenset(partitions)
    used: set[str] = set()
    for member in group.members:
        if hasattr(member, "member_metadata"):  # DescribeGroups: a classic group
            if group.protocol_type != CONSUMER_PROTOCOL:
                continue
            try:
                used |= subscribed_topics(bytes(member.member_metadata))
                used |= assigned_topics(bytes(member.member_assignment))
            except (ProtocolError, UnicodeDecodeError):
                return ours  # cannot tell: counts as using every topic (fail closed)
        else:  # ConsumerGroupDescribe: a KIP-848 consumer group
            used.update(str(t) for t in member.subscribed_topic_names)
            used.update(str(tp.topic_name) for tp in member.assignment.topic_partitions)
            if member.subscribed_topic_regex:
                pattern = re.compile(member.subscribed_topic_regex)
                used.update(t for t in ours if pattern.fullmatch(t))
    return ours & used


async def _consumed_at(
    brokers: Brokers,
    leaders: dict[Partition, int],
    committed: dict[tuple[str, str], dict[int, int]],
    members: dict[str, frozenset[str]],
) -> dict[tuple[str, int, int], int]:
    """(topic, partition, committed offset) -> the timestamp of the batch holding offset - 1,
    for the commits of groups without members on the topic; what cannot be dated is left out."""
    wanted: set[tuple[str, int, int]] = set()
    for (group, topic), offsets in committed.items():
        if topic in members.get(group, frozenset()):
            continue
        wanted.update((topic, p, o) for p, o in offsets.items() if o > 0)
    dated: dict[tuple[str, int, int], int] = {}
    pending: dict[Partition, list[int]] = defaultdict(list)
    for topic, partition, offset in sorted(wanted):
        pending[(topic, partition)].append(offset)
    while pending:
        # One offset per partition per request: a Fetch names a partition once.
        round_ = {key: offsets.pop() for key, offsets in pending.items()}
        pending = defaultdict(list, {k: v for k, v in pending.items() if v})
        by_leader: dict[int, dict[Partition, int]] = defaultdict(dict)
        for key, offset in round_.items():
            by_leader[leaders[key]][key] = offset
        responses = await asyncio.gather(
            *(brokers.call(n, _fetch(targets)) for n, targets in by_leader.items())
        )
        for targets, response in zip(by_leader.values(), responses, strict=True):
            _check(response.error_code, "Fetch")
            for topic in response.responses:
                for p in topic.partitions:
                    key = (str(topic.topic), int(p.partition_index))
                    offset = targets[key]
                    if p.error_code is ErrorCode.offset_out_of_range:
                        continue  # the consumed record is gone (retention): undatable
                    _check(p.error_code, f"Fetch of {key[0]!r} partition {key[1]}")
                    at = record_time(bytes(p.records or b""), offset - 1)
                    if at is not None:
                        dated[(key[0], key[1], offset)] = at
    return dated


def _fetch(targets: dict[Partition, int]) -> FetchRequest:
    """A Fetch of the batch holding offset - 1 of each partition: its header is enough."""
    topics: dict[str, list[FetchPartition]] = defaultdict(list)
    for (topic, partition), offset in sorted(targets.items()):
        topics[topic].append(
            FetchPartition(
                partition=i32(partition),
                current_leader_epoch=i32(-1),
                fetch_offset=i64(offset - 1),
                last_fetched_epoch=i32(-1),
                log_start_offset=i64(-1),
                partition_max_bytes=i32(FETCH_BYTES),
            )
        )
    return FetchRequest(
        cluster_id=None,
        replica_id=BrokerId(-1),
        max_wait=i32Timedelta.parse(timedelta(0)),
        min_bytes=i32(0),
        max_bytes=i32(FETCH_BYTES * max(len(targets), 1)),
        isolation_level=i8(0),
        session_id=i32(0),
        session_epoch=i32(-1),
        topics=tuple(
            FetchTopic(topic=TopicName(t), partitions=tuple(ps)) for t, ps in topics.items()
        ),
        forgotten_topics_data=(),
        rack_id="",
    )
