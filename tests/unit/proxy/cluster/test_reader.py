"""The cluster-state reader against a fake broker: facts, caching, and forwarded changes."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from kafka_policy_proxy.codec.registry import encode
from kafka_policy_proxy.policy.model import ConfigMap, Fact
from kafka_policy_proxy.proxy.cluster.reader import ClusterStateReader
from kafka_policy_proxy.proxy.cluster.unavailable import ClusterStateUnavailable
from tests.unit.proxy.cluster.fake_broker import TOPIC_ID, Script, answers, describe, metadata


async def test_a_healthy_answer_becomes_the_topic_state(brokers: Callable[..., Any]) -> None:
    broker = await brokers(answers())
    reader = ClusterStateReader([broker.address])
    try:
        cluster = await reader.snapshot({Fact.TOPIC_STATE}, topics=["orders"])
    finally:
        await reader.close()
    state = cluster.topic("orders")
    assert state is not None
    assert (state.topic_id, state.partitions, state.replication_factor) == (str(TOPIC_ID), 1, 1)
    assert state.configs == {"retention.ms": "1000"}


@pytest.mark.parametrize(
    ("script", "message"),
    [
        (
            answers(describe_response=describe(ErrorCode.topic_authorization_failed)),
            "DescribeConfigs for topic 'orders': TOPIC_AUTHORIZATION_FAILED (29): not allowed",
        ),
        (
            answers(metadata(ErrorCode.topic_authorization_failed)),
            "Metadata for topic 'orders': TOPIC_AUTHORIZATION_FAILED (29)",
        ),
        (lambda key: b"\x01\x02", "Metadata to 127.0.0.1:"),
    ],
    ids=["describe-error", "metadata-error", "undecodable"],
)
async def test_broker_errors_fail_closed_and_are_not_cached(
    brokers: Callable[..., Any], script: Script, message: str
) -> None:
    broker = await brokers(script)
    reader = ClusterStateReader([broker.address], ttl_s=60)
    try:
        for _ in range(2):
            with pytest.raises(ClusterStateUnavailable) as failure:
                await reader.snapshot({Fact.TOPIC_STATE}, topics=["orders"])
            assert str(failure.value).startswith(
                "cannot read the state of topic(s) 'orders' from the cluster: "
            )
            assert message in str(failure.value)
    finally:
        await reader.close()
    assert broker.requests.count(3) == 2


async def test_a_deleted_topic_is_known_absent_by_name_and_by_id(
    brokers: Callable[..., Any],
) -> None:
    broker = await brokers(answers())
    reader = ClusterStateReader([broker.address], ttl_s=60)
    try:
        found = await reader.snapshot({Fact.TOPIC_STATE}, topics=["orders"])
        assert found.topic("orders") is not None
        asked = len(broker.requests)
        reader.deleted("orders", str(TOPIC_ID))
        # The broker still shows it (as one that has not applied the delete yet would).
        by_name = await reader.snapshot({Fact.TOPIC_STATE}, topics=["orders"])
        by_id = await reader.snapshot({Fact.TOPIC_STATE}, topic_ids=[str(TOPIC_ID)])
    finally:
        await reader.close()
    assert by_name.topic("orders") is None
    assert by_id.topic_by_id(str(TOPIC_ID)) is None
    assert len(broker.requests) == asked


async def test_a_forgotten_id_is_read_from_the_cluster_again(
    brokers: Callable[..., Any],
) -> None:
    created = False
    unknown = encode(metadata(ErrorCode.unknown_topic_id))

    def script(key: int) -> bytes | None:
        if key == 3 and not created:
            return unknown
        return answers()(key)

    broker = await brokers(script)
    reader = ClusterStateReader([broker.address], ttl_s=60)
    try:
        before = await reader.snapshot({Fact.TOPIC_STATE}, topic_ids=[str(TOPIC_ID)])
        created = True
        cached = await reader.snapshot({Fact.TOPIC_STATE}, topic_ids=[str(TOPIC_ID)])
        reader.forget_ids([str(TOPIC_ID)])
        after = await reader.snapshot({Fact.TOPIC_STATE}, topic_ids=[str(TOPIC_ID)])
    finally:
        await reader.close()
    assert before.topic_by_id(str(TOPIC_ID)) is None
    assert cached.topic_by_id(str(TOPIC_ID)) is None
    state = after.topic_by_id(str(TOPIC_ID))
    assert state is not None and state.name == "orders"


async def test_invalidating_a_topic_drops_an_id_entry_that_resolved_to_it(
    brokers: Callable[..., Any],
) -> None:
    broker = await brokers(answers())
    reader = ClusterStateReader([broker.address], ttl_s=60)
    try:
        await reader.snapshot({Fact.TOPIC_STATE}, topic_ids=[str(TOPIC_ID)])
        asked = len(broker.requests)
        reader.invalidate("orders")
        await reader.snapshot({Fact.TOPIC_STATE}, topic_ids=[str(TOPIC_ID)])
    finally:
        await reader.close()
    assert broker.requests[asked:] == [3, 32]


async def test_a_changed_topic_is_served_as_changed_without_a_round_trip(
    brokers: Callable[..., Any],
) -> None:
    broker = await brokers(answers())
    reader = ClusterStateReader([broker.address], ttl_s=60)
    try:
        before = await reader.snapshot({Fact.TOPIC_STATE}, topics=["orders"])
        await reader.snapshot({Fact.TOPIC_STATE}, topic_ids=[str(TOPIC_ID)])
        await reader.snapshot({Fact.TOPIC_NAMES})
        old = before.topic("orders")
        assert old is not None
        asked = len(broker.requests)
        reader.changed(replace(old, configs=ConfigMap({"retention.ms": "5"})))
        by_name = await reader.snapshot({Fact.TOPIC_STATE, Fact.TOPIC_NAMES}, topics=["orders"])
        # A config change moves no name or partition: the all-topics facts stay cached too.
        assert len(broker.requests) == asked
        # The id entry held the old state: it is read again, not served stale.
        await reader.snapshot({Fact.TOPIC_STATE}, topic_ids=[str(TOPIC_ID)])
    finally:
        await reader.close()
    changed = by_name.topic("orders")
    assert changed is not None and changed.configs == {"retention.ms": "5"}
    assert broker.requests[asked:] == [3, 32]
