"""The reader's connection against fake brokers: timeouts, broken connections, next servers."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from kafka_policy_proxy.policy.model import Fact
from kafka_policy_proxy.proxy.cluster.reader import ClusterStateReader
from kafka_policy_proxy.proxy.cluster.unavailable import ClusterStateUnavailable
from tests.unit.proxy.cluster.fake_broker import answers


async def test_a_broker_that_does_not_answer_times_out(brokers: Callable[..., Any]) -> None:
    broker = await brokers(lambda key: None)
    reader = ClusterStateReader([broker.address], request_timeout_s=0.2)
    try:
        with pytest.raises(ClusterStateUnavailable, match=r"Metadata to \S+ failed: timed out"):
            await reader.snapshot({Fact.BROKER_COUNT})
    finally:
        await reader.close()


async def test_after_a_failure_the_next_bootstrap_server_is_used(
    brokers: Callable[..., Any],
) -> None:
    broken = await brokers(lambda key: b"")
    healthy = await brokers(answers())
    reader = ClusterStateReader([broken.address, healthy.address], ttl_s=0)
    try:
        with pytest.raises(ClusterStateUnavailable):
            await reader.snapshot({Fact.BROKER_COUNT})
        cluster = await reader.snapshot({Fact.BROKER_COUNT})
    finally:
        await reader.close()
    assert cluster.broker_count() == 1
    assert (broken.connections, healthy.connections) == (1, 1)


async def test_a_server_that_closes_without_answering_is_passed_over_in_the_same_read(
    brokers: Callable[..., Any],
) -> None:
    # As a broker that is stopping or starting does: the read goes on to the next server.
    broken = await brokers(answers(), close_after=0)
    healthy = await brokers(answers())
    reader = ClusterStateReader([broken.address, healthy.address], ttl_s=0)
    try:
        cluster = await reader.snapshot({Fact.BROKER_COUNT})
    finally:
        await reader.close()
    assert cluster.broker_count() == 1
    assert (broken.connections, healthy.connections) == (1, 1)


@pytest.mark.parametrize("servers", [1, 2])
async def test_a_read_fails_closed_when_every_server_closes_without_answering_each_asked_once(
    brokers: Callable[..., Any], servers: int
) -> None:
    # With one server, nowhere else to go: once is enough (a TLS listener, say).
    broken = [await brokers(answers(), close_after=0) for _ in range(servers)]
    reader = ClusterStateReader([b.address for b in broken], ttl_s=0)
    try:
        with pytest.raises(ClusterStateUnavailable, match=r"Metadata to \S+ failed"):
            await reader.snapshot({Fact.BROKER_COUNT})
    finally:
        await reader.close()
    assert [b.connections for b in broken] == [1] * servers


async def test_a_connection_the_broker_closed_is_replaced_once(
    brokers: Callable[..., Any],
) -> None:
    broker = await brokers(answers(), close_after=1)
    reader = ClusterStateReader([broker.address], ttl_s=0)
    try:
        await reader.snapshot({Fact.BROKER_COUNT})
        await asyncio.sleep(0.05)  # the broker has closed the idle connection
        cluster = await reader.snapshot({Fact.BROKER_COUNT})
    finally:
        await reader.close()
    assert cluster.broker_count() == 1
    assert broker.connections == 2
