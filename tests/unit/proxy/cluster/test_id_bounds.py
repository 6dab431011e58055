"""What one request may make the proxy read: the id cap, the brief memory of unknown ids, the
bounded re-reads, fresh facts for mutations, and long batches judged off the event loop."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from kafka_policy_proxy.policy.builders import (
    create_request,
    delete_topic_request,
    incremental_alter_configs_request,
)
from kafka_policy_proxy.policy.loader import load_policy
from kafka_policy_proxy.policy.model import Fact, Principal
from kafka_policy_proxy.proxy.cluster.live_facts import (
    RESOLVE_RETRY_S,
    RETRY_MAX_IDS,
    LiveFacts,
    fresh_facts,
)
from kafka_policy_proxy.proxy.cluster.reader import ClusterStateReader
from tests.unit.proxy.cluster.fake_broker import TOPIC_ID
from tests.unit.proxy.cluster.id_broker import IdBroker

ALICE = Principal("User:alice")
PROTECTING = load_policy(
    """
version: 1
rules:
  - name: protected
    match: {topic: 'protected\\..+', actions: [delete]}
    deny: true
"""
)
NO_PAUSES = (0.0,) * len(RESOLVE_RETRY_S)


def deletes(ids: list[str]) -> list[Any]:
    return [delete_topic_request(None, i, principal=ALICE) for i in ids]


async def reader_for(brokers: Callable[..., Any], script: IdBroker) -> ClusterStateReader:
    script.broker = await brokers(script)
    return ClusterStateReader([script.broker.address], ttl_s=60, unknown_id_ttl_s=60)


async def test_a_thousand_made_up_ids_cost_one_read_of_at_most_the_cap(
    brokers: Callable[..., Any],
) -> None:
    script = IdBroker()
    reader = await reader_for(brokers, script)
    facts = LiveFacts(reader, NO_PAUSES, max_ids=100)
    ids = [str(uuid.uuid4()) for _ in range(1000)]
    try:
        verdicts = await facts.judge(PROTECTING, deletes(ids))
        # Every id is left undecided: the proxy answers UNKNOWN_TOPIC_ID for each.
        assert [v.decision for v in verdicts] == [None] * 1000
        assert (script.metadata_requests(), script.ids_asked()) == (1, 100)
        # The same ids again, within unknown_id_ttl_s: the hundred read are known unknown,
        # and the cap reads another hundred, never more.
        await facts.judge(PROTECTING, deletes(ids))
        assert (script.metadata_requests(), script.ids_asked()) == (2, 200)
    finally:
        await reader.close()


async def test_a_known_id_is_read_whatever_the_cap(brokers: Callable[..., Any]) -> None:
    script = IdBroker()
    reader = await reader_for(brokers, script)
    facts = LiveFacts(reader, NO_PAUSES, max_ids=1)
    try:
        await reader.snapshot({Fact.TOPIC_STATE}, topic_ids=[str(TOPIC_ID)])
        made_up = [str(uuid.uuid4()) for _ in range(5)]
        verdicts = await facts.judge(PROTECTING, deletes([str(TOPIC_ID), *made_up]))
    finally:
        await reader.close()
    assert verdicts[0].request.name == "orders"
    assert verdicts[0].decision is not None and verdicts[0].decision.allowed
    assert [v.decision for v in verdicts[1:]] == [None] * 5


async def test_a_few_unknown_ids_are_read_again_many_are_not(
    brokers: Callable[..., Any],
) -> None:
    few, many = IdBroker(created=False), IdBroker(created=False)
    for script, count, reads in (
        (few, RETRY_MAX_IDS, 1 + len(RESOLVE_RETRY_S)),
        (many, RETRY_MAX_IDS + 1, 1),
    ):
        reader = await reader_for(brokers, script)
        try:
            ids = [str(uuid.uuid4()) for _ in range(count)]
            await LiveFacts(reader, NO_PAUSES).judge(PROTECTING, deletes(ids))
        finally:
            await reader.close()
        assert script.metadata_requests() == reads
        # No request makes the proxy ask for more than this multiple of its own ids.
        assert script.ids_asked() <= (1 + len(RESOLVE_RETRY_S)) * count


async def test_an_id_created_between_the_reads_is_judged_by_its_name(
    brokers: Callable[..., Any],
) -> None:
    script = IdBroker(created=False)
    reader = await reader_for(brokers, script)
    facts = LiveFacts(reader, NO_PAUSES)
    original = reader.snapshot

    async def created_after_the_first_read(*args: Any, **kwargs: Any) -> Any:
        cluster = await original(*args, **kwargs)
        script.created = True
        return cluster

    reader.snapshot = created_after_the_first_read  # type: ignore[method-assign]
    try:
        [verdict] = await facts.judge(PROTECTING, deletes([str(TOPIC_ID)]))
    finally:
        await reader.close()
    assert verdict.request.name == "orders"
    assert script.metadata_requests() == 2


def test_mutations_of_existing_topics_read_every_fact_fresh_creates_the_defaults() -> None:
    alter = incremental_alter_configs_request(
        "t.a", [("retention.ms", "SET", "1")], principal=ALICE
    )
    assert fresh_facts([create_request("t.a", principal=ALICE)]) == {Fact.BROKER_DEFAULTS}
    assert fresh_facts([create_request("t.a", principal=ALICE), alter]) == frozenset(Fact)
    assert fresh_facts(deletes([str(TOPIC_ID)])) == frozenset(Fact)


class Counting(ThreadPoolExecutor):
    """An executor that remembers which threads judged."""

    def __init__(self) -> None:
        super().__init__(max_workers=1)
        self.used = 0

    def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> Any:
        self.used += 1
        return super().submit(fn, *args, **kwargs)


async def test_a_long_batch_is_judged_on_the_executor_a_short_one_inline(
    brokers: Callable[..., Any],
) -> None:
    script = IdBroker()
    reader = await reader_for(brokers, script)
    executor = Counting()
    facts = LiveFacts(reader, executor=executor)
    policy = load_policy("version: 1\nrules:\n  - name: names\n    name_pattern: '[a-z0-9.]+'\n")
    loop_thread = threading.get_ident()
    try:
        short = await facts.judge(
            policy, [create_request(f"t.{i}", principal=ALICE) for i in range(64)]
        )
        assert executor.used == 0
        long = await facts.judge(
            policy, [create_request(f"t.{i}", principal=ALICE) for i in range(65)]
        )
        assert executor.used == 1
    finally:
        await reader.close()
        executor.shutdown()
    assert all(v.decision is not None and v.decision.allowed for v in [*short, *long])
    assert threading.get_ident() == loop_thread
