"""Reads for mutations (`fresh`, `since`), shared reads, and the pool, against a fake broker."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest

from kafka_policy_proxy.policy.model import ConfigMap, Fact
from kafka_policy_proxy.proxy.cluster.reader import ClusterStateReader
from kafka_policy_proxy.proxy.cluster.unavailable import ClusterStateUnavailable
from tests.unit.proxy.cluster.fake_broker import TOPIC_ID
from tests.unit.proxy.cluster.id_broker import IdBroker

STATE = frozenset({Fact.TOPIC_STATE})


async def started(brokers: Callable[..., Any], script: IdBroker, **options: Any) -> Any:
    script.broker = await brokers(script, **options)
    return script.broker


async def test_a_fresh_read_asks_the_cluster_where_a_cached_one_does_not(
    brokers: Callable[..., Any],
) -> None:
    script = IdBroker()
    broker = await started(brokers, script)
    reader = ClusterStateReader([broker.address], ttl_s=60)
    try:
        await reader.snapshot(STATE, topics=["orders"])
        await reader.snapshot(STATE, topics=["orders"])
        assert script.metadata_requests() == 1
        await reader.snapshot(STATE, topics=["orders"], fresh=STATE, since=reader.mark())
        assert script.metadata_requests() == 2
        # What the fresh read found serves the cached path too.
        await reader.snapshot(STATE, topics=["orders"])
        assert script.metadata_requests() == 2
    finally:
        await reader.close()


async def test_a_state_the_proxy_stored_itself_is_never_taken_as_fresh(
    brokers: Callable[..., Any],
) -> None:
    script = IdBroker()
    broker = await started(brokers, script)
    reader = ClusterStateReader([broker.address], ttl_s=60)
    try:
        before = (await reader.snapshot(STATE, topics=["orders"])).topic("orders")
        assert before is not None
        since = reader.mark()
        # Another proxy may have changed the topic since this one forwarded its change.
        reader.changed(replace(before, configs=ConfigMap({"retention.ms": "5"})))
        fresh = await reader.snapshot(STATE, topics=["orders"], fresh=STATE, since=since)
    finally:
        await reader.close()
    state = fresh.topic("orders")
    assert state is not None and state.configs == {"retention.ms": "1000"}
    assert script.metadata_requests() == 2


async def test_fresh_reads_share_a_read_begun_after_they_arrived_but_not_one_begun_before(
    brokers: Callable[..., Any],
) -> None:
    script = IdBroker()
    broker = await started(brokers, script)
    reader = ClusterStateReader([broker.address], ttl_s=60)
    now = reader.mark()
    try:
        # Ten mutations that arrived at `now`: one read serves them all.
        await asyncio.gather(
            *(reader.snapshot(STATE, topics=["orders"], fresh=STATE, since=now) for _ in range(10))
        )
        assert script.metadata_requests() == 1
        # One that arrives after a read began must not take what that read saw.
        script.metadata_seen.clear()
        first = asyncio.ensure_future(
            reader.snapshot(STATE, topics=["orders"], fresh=STATE, since=reader.mark())
        )
        async with asyncio.timeout(5):
            await script.metadata_seen.wait()  # the first one's read has begun
        await reader.snapshot(STATE, topics=["orders"], fresh=STATE, since=reader.mark())
        await first
        assert script.metadata_requests() == 3
    finally:
        await reader.close()


async def test_overlapping_reads_in_flight_ask_only_for_what_they_do_not_share(
    brokers: Callable[..., Any],
) -> None:
    script = IdBroker()
    broker = await started(brokers, script)
    reader = ClusterStateReader([broker.address], ttl_s=60)
    try:
        await asyncio.gather(
            reader.snapshot(STATE, topics=["a", "b", "c"]),
            reader.snapshot(STATE, topics=["b", "c", "d"]),
        )
    finally:
        await reader.close()
    assert script.ids_asked() == 4  # a, b, c, then d alone


async def test_a_failed_read_names_a_few_ids_and_counts_the_rest(
    brokers: Callable[..., Any],
) -> None:
    script = IdBroker(hang_over=0)
    broker = await started(brokers, script)
    reader = ClusterStateReader([broker.address], request_timeout_s=0.2)
    ids = sorted(str(uuid.uuid4()) for _ in range(2000))
    try:
        with pytest.raises(ClusterStateUnavailable) as failure:
            await reader.snapshot(STATE, topic_ids=ids)
    finally:
        await reader.close()
    message = str(failure.value)
    assert f"{ids[0]!r}, {ids[1]!r}, {ids[2]!r} and 1997 more" in message
    assert len(message) < 300


async def test_a_big_read_that_hangs_does_not_hold_a_small_one(
    brokers: Callable[..., Any],
) -> None:
    script = IdBroker(hang_over=16)
    broker = await started(brokers, script)
    reader = ClusterStateReader([broker.address], request_timeout_s=5)
    ids = [str(uuid.uuid4()) for _ in range(100)]
    try:
        big = asyncio.ensure_future(reader.snapshot(STATE, topic_ids=ids))
        await asyncio.sleep(0.05)
        # On the one connection the big read is not allowed on, at once.
        async with asyncio.timeout(2):
            small = await reader.snapshot(STATE, topics=["orders"])
        assert small.topic("orders") is not None
        assert not big.done()
        big.cancel()
    finally:
        await reader.close()
    assert broker.connections == 2


async def test_an_unknown_id_is_known_unknown_briefly_until_a_forwarded_create(
    brokers: Callable[..., Any],
) -> None:
    script = IdBroker(created=False)
    broker = await started(brokers, script)
    reader = ClusterStateReader([broker.address], ttl_s=60, unknown_id_ttl_s=0.2)
    topic_id = str(TOPIC_ID)
    try:
        await reader.snapshot(STATE, topic_ids=[topic_id])
        assert reader.unknown_ids([topic_id]) == {topic_id}
        await asyncio.sleep(0.3)
        assert reader.unknown_ids([topic_id]) == set()
        await reader.snapshot(STATE, topic_ids=[topic_id])
        assert reader.unknown_ids([topic_id]) == {topic_id}
        # The proxy forwarded a create: whatever id it got, no unknown id may hide it.
        reader.invalidate("orders")
        assert reader.unknown_ids([topic_id]) == set()
    finally:
        await reader.close()
