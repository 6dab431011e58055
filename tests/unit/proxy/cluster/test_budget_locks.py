"""Budget turns: one holder per key at a time, in-process and across processes, never leaked."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from kafka_policy_proxy.policy.budgets import BudgetKey
from kafka_policy_proxy.policy.cluster import InMemoryCluster
from kafka_policy_proxy.policy.model import ConfigMap, TopicState
from kafka_policy_proxy.proxy.cluster.budget_locks import BudgetLocks, TurnTimeout, with_pending

A = BudgetKey("team", "a")
B = BudgetKey("team", "b")


@pytest.fixture(params=["memory", "files"])
def locks(request: pytest.FixtureRequest, tmp_path: Path) -> BudgetLocks:
    return BudgetLocks(tmp_path if request.param == "files" else None, wait_s=0.3, hold_s=5)


async def test_a_second_holder_waits_for_the_first(locks: BudgetLocks) -> None:
    first = await locks.acquire([A], 1)
    second = asyncio.ensure_future(locks.acquire([A], 2))
    other = await locks.acquire([B], 3)  # another key is not held up
    await asyncio.sleep(0.05)
    assert not second.done()
    first.release()
    (await second).release()
    other.release()


async def test_the_ledger_reaches_the_next_holder(locks: BudgetLocks) -> None:
    first = await locks.acquire([A], 1)
    assert first.pending() == []
    first.record([TopicState("a.x", partitions=4, replication_factor=3)])
    first.release()
    second = await locks.acquire([A], 2)
    (state,) = second.pending()
    assert (state.name, state.partitions, state.replication_factor) == ("a.x", 4, 3)
    second.release()


async def test_a_turn_not_had_in_time_fails_closed(locks: BudgetLocks) -> None:
    held = await locks.acquire([A], 1)
    with pytest.raises(TurnTimeout, match="budget a: another request held its turn"):
        await locks.acquire([A], 2)
    held.release()
    (await locks.acquire([A], 3)).release()


async def test_a_closed_connection_and_the_hold_limit_give_turns_back(tmp_path: Path) -> None:
    locks = BudgetLocks(tmp_path, wait_s=1, hold_s=0.1)
    await locks.acquire([A, B], 7)
    locks.close_connection(7)
    kept = await locks.acquire([A], 8)  # never released: the hold limit gives it back
    await asyncio.sleep(0.2)
    (await locks.acquire([A], 9)).release()
    kept.release()  # idempotent


async def test_another_process_holding_the_file_lock_is_waited_for(tmp_path: Path) -> None:
    one, two = BudgetLocks(tmp_path, wait_s=0.3), BudgetLocks(tmp_path, wait_s=2)
    held = await one.acquire([A], 1)
    waiting = asyncio.ensure_future(two.acquire([A], 1))
    await asyncio.sleep(0.1)
    assert not waiting.done()
    held.record([TopicState("a.y", partitions=2, replication_factor=1)])
    held.release()
    turn = await waiting
    assert [s.name for s in turn.pending()] == ["a.y"]
    turn.release()


def test_pending_changes_lie_over_what_was_read() -> None:
    read = InMemoryCluster.of(
        [TopicState("a.x", partitions=2, configs=ConfigMap({"retention.bytes": "1"}))]
    )
    pending = [
        TopicState("a.x", partitions=4, configs=ConfigMap({"retention.bytes": "9"})),
        TopicState("a.new", partitions=3, replication_factor=3),
    ]
    merged = with_pending(read, pending)
    assert merged.topic("a.x").partitions == 4  # type: ignore[union-attr]
    assert merged.topic("a.x").configs["retention.bytes"] == "9"  # type: ignore[union-attr]
    assert merged.topic("a.new") is not None
    assert with_pending(read, []) is read
