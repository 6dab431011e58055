"""StreamsGroupHeartbeat: which heartbeats carry a topology, and what it would make the broker
create."""

from __future__ import annotations

from dataclasses import replace

import pytest
from kio.schema.errors import ErrorCode
from kio.schema.streams_group_heartbeat.v0.response import StreamsGroupHeartbeatResponse

from harness.streams_messages import Internal, heartbeat
from kafka_policy_proxy.codec.errors import CodecError
from kafka_policy_proxy.codec.registry import decode_exact, encode
from kafka_policy_proxy.codec.streams_heartbeat import (
    CHANGELOG,
    REPARTITION,
    decode_heartbeat,
    denial,
    has_topology,
    internal_topics,
    partitions_bound,
)


def test_only_a_join_with_a_topology_is_decoded() -> None:
    join = encode(heartbeat("app", sources=["in"], changelogs=[Internal("app-s-changelog")]))
    beat = encode(heartbeat("app", member_epoch=7))
    assert has_topology(0, join, 0)
    assert not has_topology(0, beat, 0)
    # Set instance and rack ids move the topology: the scan follows their lengths.
    ids = {"instance_id": "i" * 200, "rack_id": "r"}
    assert not has_topology(0, encode(replace(heartbeat("app", member_epoch=7), **ids)), 0)
    assert has_topology(0, encode(replace(heartbeat("app", sources=["in"]), **ids)), 0)
    assert not has_topology(0, b"\x00" + beat, 1)  # the body starts where it is told
    assert has_topology(0, join[:20], 0)  # truncated: left to the full decode, which refuses


def test_a_truncated_heartbeat_is_refused() -> None:
    join = encode(heartbeat("app", sources=["in"], changelogs=[Internal("app-s-changelog")]))
    with pytest.raises(CodecError):
        decode_heartbeat(0, join[:-3], 0, 1000)


def test_internal_topics_are_named_as_sent_with_their_settings() -> None:
    request = heartbeat(
        "app",
        sources=["orders"],
        changelogs=[Internal("app-store-changelog", 1000, 1, {"retention.ms": "1000"})],
        repartitions=[Internal("app-by-key-repartition", 6)],
    )
    topics = internal_topics(decode_heartbeat(0, encode(request), 0, 1000))
    assert [(t.name, t.kind, t.partitions, t.replication_factor) for t in topics] == [
        ("app-by-key-repartition", REPARTITION, 6, 0),
        ("app-store-changelog", CHANGELOG, 1000, 1),
    ]
    assert topics[1].configs == (("retention.ms", "1000"),)
    assert topics[1].source_topics == ("orders", "app-by-key-repartition")


def test_undeclared_partition_counts_follow_the_sources_or_are_bounded() -> None:
    request = heartbeat(
        "app",
        sources=["orders"],
        changelogs=[Internal("app-store-changelog")],
        repartitions=[Internal("app-fixed-repartition", 4)],
    )
    topics = internal_topics(decode_heartbeat(0, encode(request), 0, 1000))
    counts = partitions_bound(topics, {"orders": 12}.get)
    assert counts == {"app-fixed-repartition": 4, "app-store-changelog": 12}
    flexible = heartbeat("app", sources=["orders"], repartitions=[Internal("app-flex-repartition")])
    topics = internal_topics(decode_heartbeat(0, encode(flexible), 0, 1000))
    assert partitions_bound(topics, {"orders": 3}.get) == {"app-flex-repartition": 3}
    assert partitions_bound(topics, {}.get) == {"app-flex-repartition": None}


def test_a_denial_carries_the_error_and_the_message() -> None:
    response = decode_exact(StreamsGroupHeartbeatResponse, denial("no"))
    assert response.error_code is ErrorCode.streams_invalid_topology
    assert response.error_message == "no"


def test_a_topology_over_the_element_bound_is_not_decoded() -> None:
    many = [Internal(f"app-s{i}-changelog") for i in range(50)]
    join = encode(heartbeat("app", sources=["in"], changelogs=many))
    assert decode_heartbeat(0, join, 0, 40) is None
    assert len(internal_topics(decode_heartbeat(0, join, 0, 1000))) == 50
