"""The auto-create guard: a Metadata request that would create a denied topic cannot create."""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

import pytest

from harness.messages import build
from kafka_policy_proxy.codec.registry import decode_exact, request_class
from kafka_policy_proxy.policy.cluster import InMemoryCluster
from kafka_policy_proxy.policy.engine import CompiledPolicy
from kafka_policy_proxy.policy.loader import load_policy
from kafka_policy_proxy.policy.model import TopicState
from kafka_policy_proxy.proxy.filters.api import Close, Forward, ForwardModified, Verdict
from kafka_policy_proxy.proxy.filters.auto_create_guard import AutoCreateGuardFilter
from tests.unit.proxy.contexts import context, settle
from tests.unit.proxy.enforcement_fakes import FakeReader, Records, live_facts

POLICY = load_policy(
    """
version: 1
rules:
  - name: naming
    name_pattern: 'team\\.[a-z]+'
"""
)


@pytest.fixture
def records(tmp_path: Path) -> Records:
    return Records(tmp_path)


def metadata(*names: str, auto_create: bool = True) -> Any:
    m = importlib.import_module(request_class(3, 12).__module__)
    return build(
        m.MetadataRequest,
        topics=tuple(build(m.MetadataRequestTopic, topic_id=None, name=n) for n in names),
        allow_auto_topic_creation=auto_create,
        include_topic_authorized_operations=False,
    )


async def guard(
    reader: FakeReader, records: Records, request: Any, policy: CompiledPolicy | None = POLICY
) -> Verdict:
    ctx = context(3, 12, request)
    verdict: Verdict = await settle(
        AutoCreateGuardFilter(lambda: policy, live_facts(reader), records.recorder).on_request(ctx)
    )
    return verdict


def auto_create(verdict: ForwardModified) -> bool:
    ctx = context(3, 12, metadata())
    request: Any = decode_exact(request_class(3, 12), verdict.frame, ctx.body_offset())
    return bool(request.allow_auto_topic_creation)


async def test_a_denied_creation_goes_on_with_auto_creation_off(records: Records) -> None:
    verdict = await guard(FakeReader(), records, metadata("Bad_Name", "team.ok"))
    assert isinstance(verdict, ForwardModified)
    assert not auto_create(verdict)
    decisions = {r["topic"]: r["decision"] for r in records.read()}
    assert decisions == {"Bad_Name": "denied", "team.ok": "allowed"}


async def test_allowed_creations_go_on_unchanged_and_are_then_re_read(records: Records) -> None:
    reader = FakeReader()
    verdict = await guard(reader, records, metadata("team.ok"))
    assert isinstance(verdict, Forward) and verdict.hook is not None
    assert [r["decision"] for r in records.read()] == ["allowed"]
    assert verdict.hook(b"answer") == b"answer"
    assert reader.invalidated == ["team.ok"]


async def test_existing_topics_are_not_judged_and_cannot_be_created(records: Records) -> None:
    existing = TopicState(name="Bad_Name", partitions=1, replication_factor=1)
    reader = FakeReader(InMemoryCluster(topics=(existing,)))
    verdict = await guard(reader, records, metadata("Bad_Name"))
    # Should the topic be deleted before the broker reads this, it is not re-created unjudged.
    assert isinstance(verdict, ForwardModified)
    assert not auto_create(verdict)
    assert records.read() == []


async def test_unreadable_cluster_state_turns_auto_creation_off(records: Records) -> None:
    reader = FakeReader()
    reader.unavailable = True
    verdict = await guard(reader, records, metadata("team.ok"))
    assert isinstance(verdict, ForwardModified)
    assert not auto_create(verdict)


async def test_requests_that_cannot_create_are_not_looked_at(records: Records) -> None:
    reader = FakeReader()
    assert await guard(reader, records, metadata("Bad_Name", auto_create=False)) == Forward()
    assert await guard(reader, records, metadata("Bad_Name"), policy=None) == Forward()
    assert reader.asked == []


async def test_a_request_naming_more_topics_than_an_admin_request_may_is_not_judged(
    records: Records,
) -> None:
    # Judging it would cost a read and a judgement per name: auto-creation is turned off instead.
    reader = FakeReader()
    request = metadata(*(f"team.t{i}" for i in range(11)))
    ctx = context(3, 12, request)
    guard = AutoCreateGuardFilter(lambda: POLICY, live_facts(reader), records.recorder, 10)
    verdict = await settle(guard.on_request(ctx))
    assert isinstance(verdict, ForwardModified)
    assert not auto_create(verdict)
    assert reader.asked == [] and records.read() == []


async def test_before_v4_too_many_topics_to_judge_close_the_connection(records: Records) -> None:
    # v0-3 have no flag: the broker would auto-create every name unjudged.
    m = importlib.import_module(request_class(3, 3).__module__)
    topics = tuple(build(m.MetadataRequestTopic, name=f"team.t{i}") for i in range(11))
    ctx = context(3, 3, build(m.MetadataRequest, topics=topics))
    guard = AutoCreateGuardFilter(lambda: POLICY, live_facts(FakeReader()), records.recorder, 10)
    assert isinstance(await settle(guard.on_request(ctx)), Close)
