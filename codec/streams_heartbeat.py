"""StreamsGroupHeartbeat (KIP-1071): the internal topics a topology makes the broker create.

A Streams member sends its topology when it joins (member epoch 0). The group coordinator
then creates every repartition source topic and state changelog topic the topology declares
that the cluster lacks, under the name as sent, with the declared partitions (0: decided by
the coordinator from the source topics), replication factor (0: the broker default) and
topic configs. Every other heartbeat carries no topology, and `has_topology` tells so from
the first few fields without decoding the request.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from kio.schema.errors import ErrorCode
from kio.schema.streams_group_heartbeat.v0.response import StreamsGroupHeartbeatResponse

from kafka_policy_proxy.codec.admin_denials import filled
from kafka_policy_proxy.codec.framing import Buffer
from kafka_policy_proxy.codec.prescan import count_elements, decode_untrusted
from kafka_policy_proxy.codec.registry import decode_exact, encode, request_class, response_class

STREAMS_GROUP_HEARTBEAT = 88
CHANGELOG = "changelog"
REPARTITION = "repartition"


@dataclass(frozen=True, slots=True)
class InternalTopic:
    """One internal topic a topology declares, as the broker would create it."""

    name: str
    kind: str  # CHANGELOG or REPARTITION
    partitions: int  # 0: the coordinator decides (see `partitions_bound`)
    replication_factor: int  # 0: the broker default
    configs: tuple[tuple[str, str], ...]
    subtopology: str
    # The subtopology's source topics: a changelog gets as many partitions as the widest.
    source_topics: tuple[str, ...]


def _uvarint(data: Buffer, pos: int) -> tuple[int, int]:
    view = memoryview(data)
    value = shift = 0
    for _ in range(5):
        byte = view[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7
    raise IndexError("varint too long")


def has_topology(api_version: int, data: Buffer, offset: int) -> bool:
    """Whether the heartbeat in data[offset:] carries a topology (True when unsure)."""
    if api_version != 0:
        return True  # a layout this scan does not know: the caller decodes it
    try:
        pos = offset
        for _ in range(2):  # group_id, member_id: compact strings
            length, pos = _uvarint(data, pos)
            pos += length - 1
        pos += 8  # member_epoch, endpoint_information_epoch
        for _ in range(2):  # instance_id, rack_id: compact nullable strings
            length, pos = _uvarint(data, pos)
            pos += max(length - 1, 0)
        pos += 4  # rebalance_timeout_ms
        return memoryview(data)[pos] != 0xFF  # a nullable struct: -1 when absent
    except IndexError:
        return True  # truncated: the full decode refuses it


def decode_heartbeat(api_version: int, data: Buffer, offset: int, max_elements: int) -> Any | None:
    """The request in data[offset:], pre-scanned; None if it declares more than `max_elements`
    array elements in all (counted before anything is decoded); CodecError if malformed."""
    cls = request_class(STREAMS_GROUP_HEARTBEAT, api_version)  # CodecError if unknown
    raw = bytes(data)
    if count_elements(cls, raw, offset, max_elements) is None:
        return None
    return decode_untrusted(cls, raw, offset)


def internal_topics(request: Any) -> list[InternalTopic]:
    """The internal topics the request's topology declares, in order, each name once."""
    topology = request.topology
    if topology is None:
        return []
    seen: dict[str, InternalTopic] = {}
    for sub in topology.subtopologies:
        sources = tuple(sub.source_topics) + tuple(t.name for t in sub.repartition_source_topics)
        for kind, infos in (
            (REPARTITION, sub.repartition_source_topics),
            (CHANGELOG, sub.state_changelog_topics),
        ):
            for info in infos:
                seen.setdefault(
                    info.name,
                    InternalTopic(
                        name=info.name,
                        kind=kind,
                        partitions=int(info.partitions),
                        replication_factor=int(info.replication_factor),
                        configs=tuple((c.key, c.value) for c in info.topic_configs),
                        subtopology=sub.subtopology_id,
                        source_topics=sources,
                    ),
                )
    return list(seen.values())


def partitions_bound(
    topics: list[InternalTopic], existing: Callable[[str], int | None]
) -> Mapping[str, int | None]:
    """Each topic's partition count as the coordinator would set it, or an upper bound.

    A declared count is taken as it is. A changelog without one gets the widest of its
    subtopology's sources; a repartition topic without one, the widest of its upstream
    sources, bounded here by the widest count anywhere in the topology. `existing` gives a
    topic's count in the cluster (None if absent). None: nothing to bound it by.
    """
    declared = {t.name: t.partitions for t in topics if t.partitions > 0}
    known = [*declared.values()]
    for topic in topics:
        known += [n for n in map(existing, topic.source_topics) if n is not None]
    widest = max(known, default=None)
    counts: dict[str, int | None] = {}
    for topic in topics:
        if topic.partitions > 0:
            counts[topic.name] = topic.partitions
        elif topic.kind == REPARTITION:
            counts[topic.name] = widest
        else:
            own = [declared.get(s) or existing(s) for s in topic.source_topics]
            own_known = [n for n in own if n is not None]
            # A flexible repartition source is bounded by the topology's widest count.
            flexible = len(own_known) < len(own)
            counts[topic.name] = widest if flexible or not own_known else max(own_known)
    return counts


def denial(message: str, error: ErrorCode = ErrorCode.streams_invalid_topology) -> bytes:
    """A heartbeat response body carrying only `error` and `message`."""
    return encode(filled(StreamsGroupHeartbeatResponse, error, message))


def accepted(api_version: int, body: bytes) -> bool:
    """Whether a heartbeat response shows no error: the coordinator took the topology and
    creates what it lacks; CodecError."""
    response: Any = decode_exact(response_class(STREAMS_GROUP_HEARTBEAT, api_version), body)
    return response.error_code is ErrorCode.none
