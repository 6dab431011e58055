"""Auto-created and Streams-declared topics are judged in a budget's turn, as CreateTopics are."""

from __future__ import annotations

import asyncio
import importlib
from pathlib import Path
from typing import Any

import pytest
from kio.schema.errors import ErrorCode
from kio.schema.streams_group_heartbeat.v0.response import StreamsGroupHeartbeatResponse

from harness.streams_messages import Internal, heartbeat
from kafka_policy_proxy.codec.admin_denials import filled
from kafka_policy_proxy.codec.registry import decode_exact, encode, response_class
from kafka_policy_proxy.policy.cluster import InMemoryCluster
from kafka_policy_proxy.policy.loader import load_policy
from kafka_policy_proxy.policy.model import TopicState
from kafka_policy_proxy.proxy.cluster.budget_locks import BudgetLocks
from kafka_policy_proxy.proxy.filters.api import Answer, Forward, ForwardModified, Verdict
from kafka_policy_proxy.proxy.filters.auto_create_guard import AutoCreateGuardFilter
from kafka_policy_proxy.proxy.filters.streams_topology import StreamsTopologyFilter
from tests.unit.proxy.contexts import context, settle
from tests.unit.proxy.enforcement_fakes import FakeReader, Records, live_facts
from tests.unit.proxy.filters.test_auto_create_guard import auto_create, metadata

POLICY = load_policy(
    """
version: 1
budgets:
  - name: pay
    topic_prefix: pay.
    max_topics: 1
  - name: app
    topic_prefix: app-
    max_topics: 1
"""
)
ORDERS = TopicState(name="orders", partitions=6, replication_factor=1)


@pytest.fixture
def records(tmp_path: Path) -> Records:
    return Records(tmp_path)


def guard(records: Records, reader: FakeReader | None = None) -> AutoCreateGuardFilter:
    facts = live_facts(reader or FakeReader(InMemoryCluster()))
    locks = BudgetLocks(wait_s=0.5)
    return AutoCreateGuardFilter(lambda: POLICY, facts, records.recorder, locks=locks)


async def ask(flt: AutoCreateGuardFilter, *names: str, connection_id: int) -> Verdict:
    verdict: Verdict = await settle(
        flt.on_request(context(3, 12, metadata(*names), connection_id=connection_id))
    )
    return verdict


def shown(*topics: tuple[str, ErrorCode]) -> bytes:
    """A Metadata v12 response body showing these topics with these errors."""
    m = importlib.import_module(response_class(3, 12).__module__)
    listed = tuple(
        filled(m.MetadataResponseTopic, code, "", name=name, partitions=()) for name, code in topics
    )
    return encode(filled(m.MetadataResponse, ErrorCode.none, "", brokers=(), topics=listed))


def turned_off(verdict: Verdict) -> bool:
    return isinstance(verdict, ForwardModified) and not auto_create(verdict)


async def test_a_racing_auto_creation_waits_and_counts_the_first_ones_topic(
    records: Records,
) -> None:
    flt = guard(records)
    first = await ask(flt, "pay.a", connection_id=1)
    assert isinstance(first, Forward) and first.hook is not None
    second = asyncio.ensure_future(ask(flt, "pay.b", connection_id=2))
    await asyncio.sleep(0.05)
    assert not second.done()  # its turn comes with the first one's answer
    # Being created: the reads do not show pay.a yet, the turn's ledger does.
    assert await settle(first.hook(shown(("pay.a", ErrorCode.leader_not_available))))
    assert turned_off(await second)
    last = records.read()[-1]
    assert (last["topic"], last["decision"]) == ("pay.b", "denied")
    assert last["violations"][0]["rule"] == "pay"


async def test_a_topic_the_answer_does_not_show_created_is_not_counted(records: Records) -> None:
    flt = guard(records)
    first = await ask(flt, "pay.a", connection_id=1)
    assert isinstance(first, Forward) and first.hook is not None
    await settle(first.hook(shown(("pay.a", ErrorCode.topic_authorization_failed))))
    assert isinstance(await ask(flt, "pay.b", connection_id=2), Forward)


async def test_a_topic_being_created_is_not_counted_twice(records: Records) -> None:
    flt = guard(records)
    first = await ask(flt, "pay.a", connection_id=1)
    assert isinstance(first, Forward) and first.hook is not None
    await settle(first.hook(shown(("pay.a", ErrorCode.leader_not_available))))
    # Another client asking for pay.a meanwhile: the broker has it, nothing more is created.
    assert isinstance(await ask(flt, "pay.a", connection_id=2), Forward)


async def test_a_turned_off_auto_creation_gives_the_turn_back(records: Records) -> None:
    flt = guard(records)
    assert turned_off(await ask(flt, "pay.a", "pay.b", connection_id=1))  # 2 topics over 1
    # Not kept until the hold's end: the next one is judged at once.
    assert isinstance(await asyncio.wait_for(ask(flt, "pay.c", connection_id=2), 0.2), Forward)


async def test_a_closed_connection_gives_the_turn_back(records: Records) -> None:
    flt = guard(records)
    assert isinstance(await ask(flt, "pay.a", connection_id=1), Forward)
    flt.on_close(1)  # no answer will come
    assert isinstance(await asyncio.wait_for(ask(flt, "pay.b", connection_id=2), 0.2), Forward)


async def test_a_turn_not_had_in_time_turns_auto_creation_off(records: Records) -> None:
    flt = guard(records)
    assert isinstance(await ask(flt, "pay.a", connection_id=1), Forward)
    assert turned_off(await ask(flt, "pay.b", connection_id=2))
    message = records.read()[-1]["violations"][0]["message"]
    assert "budget pay: another request held its turn for over 0.5 s" in message


def topology(records: Records) -> StreamsTopologyFilter:
    facts = live_facts(FakeReader(InMemoryCluster(topics=(ORDERS,))))
    locks = BudgetLocks(wait_s=0.5)
    return StreamsTopologyFilter(lambda: POLICY, facts, records.recorder, locks=locks)


async def join(flt: StreamsTopologyFilter, changelog: str, connection_id: int) -> Verdict:
    request = heartbeat("app", sources=["orders"], changelogs=[Internal(changelog)])
    verdict: Verdict = await settle(
        flt.on_request(context(88, 0, request, connection_id=connection_id))
    )
    return verdict


def heartbeat_answer(error: ErrorCode) -> bytes:
    return encode(filled(StreamsGroupHeartbeatResponse, error, ""))


async def test_a_racing_topology_waits_and_counts_the_first_ones_topics(records: Records) -> None:
    flt = topology(records)
    first = await join(flt, "app-s-changelog", 1)
    assert isinstance(first, Forward) and first.hook is not None
    second = asyncio.ensure_future(join(flt, "app-t-changelog", 2))
    await asyncio.sleep(0.05)
    assert not second.done()
    # The coordinator took the topology: it creates app-s-changelog after answering.
    await settle(first.hook(heartbeat_answer(ErrorCode.none)))
    answer = await second
    assert isinstance(answer, Answer)
    response: Any = decode_exact(StreamsGroupHeartbeatResponse, answer.body)
    assert response.error_code is ErrorCode.streams_invalid_topology
    assert "app-t-changelog" in response.error_message


async def test_a_topology_the_coordinator_refused_is_not_counted(records: Records) -> None:
    flt = topology(records)
    first = await join(flt, "app-s-changelog", 1)
    assert isinstance(first, Forward) and first.hook is not None
    await settle(first.hook(heartbeat_answer(ErrorCode.group_authorization_failed)))
    assert isinstance(await join(flt, "app-t-changelog", 2), Forward)


async def test_a_closed_heartbeat_connection_gives_the_turn_back(records: Records) -> None:
    flt = topology(records)
    assert isinstance(await join(flt, "app-s-changelog", 1), Forward)
    flt.on_close(1)
    assert isinstance(await asyncio.wait_for(join(flt, "app-t-changelog", 2), 0.2), Forward)


async def test_a_second_member_joining_with_the_same_topology_goes_on(records: Records) -> None:
    flt = topology(records)
    first = await join(flt, "app-s-changelog", 1)
    assert isinstance(first, Forward) and first.hook is not None
    await settle(first.hook(heartbeat_answer(ErrorCode.none)))
    # The coordinator creates app-s-changelog once: the second member's join does not count it.
    assert isinstance(await join(flt, "app-s-changelog", 2), Forward)
