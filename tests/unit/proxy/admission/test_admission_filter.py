"""The admission filter: rate per principal (throttle answers or delays), audit budget, costs."""

from __future__ import annotations

import importlib
from collections.abc import Awaitable
from typing import Any

import pytest

from harness.messages import build
from kafka_policy_proxy.codec.registry import decode_exact, request_class, response_class
from kafka_policy_proxy.proxy.audit.budget import AuditBudget
from kafka_policy_proxy.proxy.filters.admission import AdmissionFilter, entries_of
from kafka_policy_proxy.proxy.filters.api import Answer, Forward, RequestContext, Verdict
from tests.unit.proxy.contexts import context, settle

CREATE_TOPICS, DELETE_TOPICS, CREATE_PARTITIONS = 19, 20, 37
THROTTLING_QUOTA_EXCEEDED, POLICY_VIOLATION = 89, 44


def create_topics(version: int, *names: str, validate_only: bool = True) -> Any:
    m = importlib.import_module(request_class(CREATE_TOPICS, version).__module__)
    topics = tuple(
        build(
            m.CreatableTopic,
            name=name,
            num_partitions=1,
            replication_factor=1,
            assignments=(),
            configs=(),
        )
        for name in names
    )
    return build(m.CreateTopicsRequest, topics=topics, timeout=30_000, validate_only=validate_only)


def delete_topics(version: int, *names: str) -> Any:
    m = importlib.import_module(request_class(DELETE_TOPICS, version).__module__)
    return build(m.DeleteTopicsRequest, topic_names=names, timeout=30_000)


def create_partitions(version: int, *names: str) -> Any:
    m = importlib.import_module(request_class(CREATE_PARTITIONS, version).__module__)
    topics = tuple(build(m.CreatePartitionsTopic, name=n, count=3, assignments=None) for n in names)
    return build(m.CreatePartitionsRequest, topics=topics, timeout=30_000, validate_only=False)


class Clock:
    """A clock that only moves when the filter sleeps."""

    def __init__(self) -> None:
        self.now = 0.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


class Budget:
    def __init__(self, spent: set[str]) -> None:
        self.spent = spent

    def allows(self, principal: str, client_address: str = "") -> bool:
        return principal not in self.spent


def admission(clock: Clock, *, rate: float = 10, burst: int = 10, **kw: Any) -> AdmissionFilter:
    return AdmissionFilter(
        concurrent=2,
        entries_per_second=rate,
        burst=burst,
        clock=clock,
        sleep=clock.sleep,
        **kw,
    )


def results(api_key: int, ctx: RequestContext, body: bytes) -> Any:
    return decode_exact(response_class(api_key, ctx.api_version), body)


async def verdict_of(f: AdmissionFilter, ctx: RequestContext) -> Verdict:
    result: Verdict | Awaitable[Verdict] = f.on_request(ctx)
    return await settle(result)  # type: ignore[no-any-return]


def test_the_cost_is_the_entry_count_read_without_decoding() -> None:
    names = [f"t{i}" for i in range(250)]
    assert entries_of(context(CREATE_TOPICS, 7, create_topics(7, *names))) == 250
    assert entries_of(context(DELETE_TOPICS, 4, delete_topics(4, "a", "b"))) == 2
    assert entries_of(context(CREATE_TOPICS, 7, create_topics(7))) == 1  # never free


async def test_within_the_rate_the_request_goes_on() -> None:
    clock = Clock()
    f = admission(clock)
    ctx = context(CREATE_TOPICS, 7, create_topics(7, *[f"t{i}" for i in range(10)]))
    assert isinstance(await verdict_of(f, ctx), Forward)
    assert clock.slept == []


@pytest.mark.parametrize(
    ("api_key", "version", "request_of"),
    [
        (CREATE_TOPICS, 6, create_topics),
        (CREATE_TOPICS, 7, create_topics),
        (DELETE_TOPICS, 5, delete_topics),
        (CREATE_PARTITIONS, 3, create_partitions),
    ],
)
async def test_over_the_rate_every_entry_is_throttled_with_the_time_to_wait(
    api_key: int, version: int, request_of: Any
) -> None:
    clock = Clock()
    f = admission(clock, rate=10, burst=10)
    batch = context(api_key, version, request_of(version, *[f"t{i}" for i in range(30)]))
    assert isinstance(await verdict_of(f, batch), Forward)  # a burst passes, 20 in debt
    clock.now = 0.5  # 5 paid back: 15 in debt at 10/s
    again = context(api_key, version, request_of(version, "a", "b", "c"))
    verdict = await verdict_of(f, again)
    assert isinstance(verdict, Answer)
    response = results(api_key, again, verdict.body)
    entries = (
        response.topics
        if api_key == CREATE_TOPICS
        else getattr(response, "responses", getattr(response, "results", None))
    )
    assert [int(e.error_code) for e in entries] == [THROTTLING_QUOTA_EXCEEDED] * 3
    assert response.throttle_time.total_seconds() == pytest.approx(1.5)
    assert clock.slept == []


@pytest.mark.parametrize(
    ("api_key", "version", "request_of"),
    [
        (CREATE_TOPICS, 5, create_topics),
        (DELETE_TOPICS, 4, delete_topics),
        (CREATE_PARTITIONS, 2, create_partitions),
    ],
)
async def test_a_version_without_the_throttle_error_waits_then_goes_on(
    api_key: int, version: int, request_of: Any
) -> None:
    clock = Clock()
    f = admission(clock, rate=10, burst=10)
    await verdict_of(f, context(api_key, version, request_of(version, *["x"] * 30)))
    verdict = await verdict_of(f, context(api_key, version, request_of(version, "a")))
    assert isinstance(verdict, Forward)
    assert sum(clock.slept) == pytest.approx(2.0)  # 20 in debt at 10/s


async def test_anonymous_connections_have_a_rate_each_and_a_principal_one_in_all() -> None:
    clock = Clock()
    f = admission(clock, rate=10, burst=10)
    flood = create_topics(7, *[f"t{i}" for i in range(50)])
    one = create_topics(7, "canary")
    await verdict_of(f, context(CREATE_TOPICS, 7, flood, connection_id=1))
    assert isinstance(await verdict_of(f, context(CREATE_TOPICS, 7, one, connection_id=1)), Answer)
    assert isinstance(await verdict_of(f, context(CREATE_TOPICS, 7, one, connection_id=2)), Forward)
    alice = "User:alice"
    await verdict_of(f, context(CREATE_TOPICS, 7, flood, connection_id=3, principal=alice))
    other = context(CREATE_TOPICS, 7, one, connection_id=4, principal=alice)
    assert isinstance(await verdict_of(f, other), Answer)


async def test_a_closed_anonymous_connection_takes_its_debt_with_it() -> None:
    clock = Clock()
    f = admission(clock, rate=10, burst=10)
    await verdict_of(f, context(CREATE_TOPICS, 7, create_topics(7, *["x"] * 50)))
    f.on_close(1)
    one = context(CREATE_TOPICS, 7, create_topics(7, "a"))
    assert isinstance(await verdict_of(f, one), Forward)


async def test_a_spent_audit_budget_denies_every_entry_as_a_policy_violation() -> None:
    clock = Clock()
    f = admission(clock, rate=1000, burst=1000, budget=Budget({"User:mallory"}))
    ctx = context(CREATE_TOPICS, 7, create_topics(7, "a", "b"), principal="User:mallory")
    verdict = await verdict_of(f, ctx)
    assert isinstance(verdict, Answer)
    response = results(CREATE_TOPICS, ctx, verdict.body)
    assert [int(t.error_code) for t in response.topics] == [POLICY_VIOLATION] * 2
    assert "audit.principal_budget_bytes_per_minute" in response.topics[0].error_message
    assert "User:mallory" in response.topics[0].error_message
    alice = context(CREATE_TOPICS, 7, create_topics(7, "a"), principal="User:alice")
    assert isinstance(await verdict_of(f, alice), Forward)


async def test_a_spent_audit_budget_answers_old_versions_with_the_legacy_code() -> None:
    clock = Clock()
    f = admission(clock, budget=Budget({"User:ANONYMOUS"}), legacy_error_code=POLICY_VIOLATION)
    ctx = context(DELETE_TOPICS, 4, delete_topics(4, "a", "b"))
    verdict = await verdict_of(f, ctx)
    assert isinstance(verdict, Answer)
    response = results(DELETE_TOPICS, ctx, verdict.body)
    assert [int(r.error_code) for r in response.responses] == [POLICY_VIOLATION] * 2


async def test_an_anonymous_flooder_spends_the_budget_of_its_own_host_only() -> None:
    # Unauthenticated clients share one principal; the budget tells them apart by host.
    budget = AuditBudget(1000)
    budget.charge("User:ANONYMOUS", 1000, "10.0.0.66:40000")
    f = admission(Clock(), rate=1000, burst=1000, budget=budget)

    def anonymous_from(address: str) -> RequestContext:
        ctx = context(CREATE_TOPICS, 7, create_topics(7, "a"))
        return RequestContext(
            ctx.connection_id, ctx.listener, address, ctx.principal, ctx.header, ctx.frame
        )

    assert isinstance(await verdict_of(f, anonymous_from("10.0.0.66:40001")), Answer)
    assert isinstance(await verdict_of(f, anonymous_from("10.0.0.7:50000")), Forward)
