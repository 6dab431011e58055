"""The topic policy filter holds a budget's turn from the fact read through the broker's answer."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from kafka_policy_proxy.policy.cluster import InMemoryCluster
from kafka_policy_proxy.policy.loader import load_policy
from kafka_policy_proxy.policy.model import TopicState
from kafka_policy_proxy.proxy.cluster.budget_locks import BudgetLocks
from kafka_policy_proxy.proxy.filters.api import Answer, Forward
from kafka_policy_proxy.proxy.filters.topic_policy import TopicPolicyFilter
from tests.unit.proxy.contexts import context
from tests.unit.proxy.enforcement_fakes import FakeReader, Records, create_topics, live_facts
from tests.unit.proxy.filters.test_topic_policy import created, errors

POLICY = load_policy(
    """
version: 1
budgets:
  - name: pay
    topic_prefix: pay.
    max_partitions: 4
"""
)


@pytest.fixture
def records(tmp_path: Path) -> Records:
    return Records(tmp_path)


def budget_filter(reader: FakeReader, records: Records) -> TopicPolicyFilter:
    locks = BudgetLocks(wait_s=0.5)
    return TopicPolicyFilter(lambda: POLICY, live_facts(reader), records.recorder, -1, locks)


async def test_the_next_request_waits_for_the_answer_and_counts_what_it_created(
    records: Records,
) -> None:
    reader = FakeReader(InMemoryCluster())
    policy_filter = budget_filter(reader, records)
    first = await policy_filter.on_request(
        context(19, 7, create_topics(("pay.a", 3)), connection_id=1)
    )
    assert isinstance(first, Forward) and first.hook is not None
    second = asyncio.ensure_future(
        policy_filter.on_request(context(19, 7, create_topics(("pay.b", 2)), connection_id=2))
    )
    await asyncio.sleep(0.05)
    assert not second.done()  # its turn comes with the first one's answer
    first.hook(created("pay.a"))
    # The broker's metadata does not show pay.a yet: the turn's ledger counts it.
    answer = await second
    assert isinstance(answer, Answer)
    assert errors(answer.body) == [("pay.b", 44)]
    assert "pay uses 3 of its 4 partitions" in records.read()[-1]["violations"][0]["message"]


async def test_a_closed_connection_gives_the_turn_back(records: Records) -> None:
    reader = FakeReader(InMemoryCluster((TopicState("pay.x", partitions=1),)))
    policy_filter = budget_filter(reader, records)
    held = await policy_filter.on_request(
        context(19, 7, create_topics(("pay.a", 1)), connection_id=1)
    )
    assert isinstance(held, Forward)
    policy_filter.on_close(1)  # no answer will come
    after = await policy_filter.on_request(
        context(19, 7, create_topics(("pay.b", 1)), connection_id=2)
    )
    assert isinstance(after, Forward)


async def test_a_turn_not_had_in_time_denies(records: Records) -> None:
    policy_filter = budget_filter(FakeReader(InMemoryCluster()), records)
    await policy_filter.on_request(context(19, 7, create_topics(("pay.a", 1)), connection_id=1))
    late = await policy_filter.on_request(
        context(19, 7, create_topics(("pay.b", 1)), connection_id=2)
    )
    assert isinstance(late, Answer)
    message = records.read()[-1]["violations"][0]["message"]
    assert "budget pay: another request held its turn for over 0.5 s" in message
