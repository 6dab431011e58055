"""ClusterStateReader against the real cluster (no proxy): facts, caching, SASL, failing closed."""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
)

from harness.ports import refused_port
from kafka_policy_proxy.policy.model import Fact
from kafka_policy_proxy.proxy.cluster.broker_defaults import CREATE_DEFAULTS
from kafka_policy_proxy.proxy.cluster.client import KafkaClient, SaslCredentials
from kafka_policy_proxy.proxy.cluster.reader import ClusterStateReader
from kafka_policy_proxy.proxy.cluster.unavailable import ClusterStateUnavailable

pytestmark = pytest.mark.integration

T = TypeVar("T")
ALL_FACTS = frozenset(Fact)


def servers(csv: str) -> list[tuple[str, int]]:
    """'h:p,h:p' -> [(h, p), ...]."""
    return [(h, int(p)) for h, _, p in (s.rpartition(":") for s in csv.split(","))]


def unique(prefix: str) -> str:
    """A topic name no other test uses."""
    return f"cstate-{prefix}-{uuid.uuid4().hex[:8]}"


def kinds(sent: list[Any]) -> Counter[str]:
    """How many requests of each API were sent."""
    return Counter(type(m).__name__.removesuffix("Request") for m in sent)


@pytest.fixture(scope="module")
def admin(kafka: Any) -> AdminClient:
    """A confluent-kafka AdminClient straight at the brokers."""
    return AdminClient({"bootstrap.servers": kafka.bootstrap_servers})


def create(admin: AdminClient, topic: NewTopic) -> None:
    """Create a topic and wait for the controller's answer."""
    for future in admin.create_topics([topic], operation_timeout=30).values():
        future.result(timeout=30)


def describe(admin: AdminClient, topic: str) -> dict[str, str | None]:
    """The topic's configs as librdkafka reads them (retried while the topic reaches brokers)."""
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    deadline = time.monotonic() + 15
    while True:
        try:
            entries = admin.describe_configs([resource])[resource].result(timeout=30)
        except KafkaException as exc:
            unknown = exc.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART
            if not unknown or time.monotonic() > deadline:
                raise
            time.sleep(0.2)
            continue
        return {name: entry.value for name, entry in entries.items()}


def replicas(admin: AdminClient, topic: str) -> tuple[tuple[int, tuple[int, ...]], ...]:
    """The topic's replica assignment as librdkafka reads it (once the topic reached it)."""
    deadline = time.monotonic() + 15
    while True:
        metadata = admin.list_topics(topic, timeout=30).topics[topic]
        if metadata.error is None or time.monotonic() > deadline:
            return tuple(
                (p, tuple(metadata.partitions[p].replicas)) for p in sorted(metadata.partitions)
            )
        time.sleep(0.2)


async def eventually(read: Callable[[], Awaitable[T]], ok: Callable[[T], bool]) -> T:
    """Retry `read` until `ok` (metadata reaches every broker a moment after the controller)."""
    deadline = time.monotonic() + 15
    while True:
        value = await read()
        if ok(value) or time.monotonic() > deadline:
            return value
        await asyncio.sleep(0.2)


@pytest.fixture(scope="module")
def topics(kafka: Any, admin: AdminClient) -> dict[str, str]:
    """Two topics: plain (3 partitions, RF 2) and with overrides (2 partitions, RF 3)."""
    names = {"plain": unique("plain"), "override": unique("override")}
    create(admin, NewTopic(names["plain"], 3, 2))
    create(
        admin,
        NewTopic(
            names["override"],
            2,
            3,
            config={"retention.ms": "3600000", "cleanup.policy": "compact"},
        ),
    )
    return names


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Every request message any KafkaClient sends, in order."""
    messages: list[Any] = []
    original = KafkaClient.request

    async def recording(self: KafkaClient, message: Any) -> Any:
        messages.append(message)
        return await original(self, message)

    monkeypatch.setattr(KafkaClient, "request", recording)
    return messages


@pytest.fixture
async def reader(kafka: Any) -> AsyncIterator[ClusterStateReader]:
    """A reader with a cache long enough never to expire during a test."""
    instance = ClusterStateReader(servers(kafka.bootstrap_servers), ttl_s=60)
    yield instance
    await instance.close()


def uncached(kafka: Any) -> ClusterStateReader:
    """A reader that caches nothing, to wait for the metadata to reach the brokers."""
    return ClusterStateReader(servers(kafka.bootstrap_servers), ttl_s=0)


async def test_topic_state_has_partitions_replicas_and_effective_configs(
    kafka: Any, admin: AdminClient, topics: dict[str, str]
) -> None:
    reader = uncached(kafka)
    try:
        wanted = [topics["plain"], topics["override"], "cstate-no-such-topic"]
        cluster = await eventually(
            lambda: reader.snapshot({Fact.TOPIC_STATE}, topics=wanted),
            lambda c: all(c.topic(t) is not None for t in wanted[:2]),
        )
    finally:
        await reader.close()
    plain, override = cluster.topic(topics["plain"]), cluster.topic(topics["override"])
    assert plain is not None and override is not None
    assert cluster.topic("cstate-no-such-topic") is None
    assert (plain.partitions, plain.replication_factor) == (3, 2)
    assert (override.partitions, override.replication_factor) == (2, 3)
    assert plain.assignment == replicas(admin, topics["plain"])
    assert all(len(set(r)) == 2 for _, r in plain.assignment)
    assert plain.topic_id is not None and uuid.UUID(plain.topic_id).int != 0
    assert not plain.internal and not plain.marked_for_deletion
    assert override.configs["retention.ms"] == "3600000"
    assert override.configs["cleanup.policy"] == "compact"
    assert plain.configs["cleanup.policy"] == "delete"
    assert dict(override.configs) == describe(admin, topics["override"])
    assert dict(plain.configs) == describe(admin, topics["plain"])


async def test_topic_by_id_resolves_and_unknown_ids_yield_nothing(
    kafka: Any, reader: ClusterStateReader, topics: dict[str, str]
) -> None:
    by_name = await eventually(
        lambda: reader.snapshot({Fact.TOPIC_STATE}, topics=[topics["override"]]),
        lambda c: c.topic(topics["override"]) is not None,
    )
    state = by_name.topic(topics["override"])
    assert state is not None and state.topic_id is not None
    unknown = [str(uuid.uuid4()), "not-a-uuid", str(uuid.UUID(int=0))]
    cluster = await reader.snapshot({Fact.TOPIC_STATE}, topic_ids=[state.topic_id, *unknown])
    assert cluster.topic_by_id(state.topic_id) == state
    assert cluster.topic_names(include_internal=True) == {topics["override"]}
    assert all(cluster.topic_by_id(i) is None for i in unknown)


async def test_names_total_partitions_and_broker_count(
    kafka: Any, admin: AdminClient, topics: dict[str, str]
) -> None:
    # Looking up a group's coordinator makes the broker create __consumer_offsets; the answer
    # may be NOT_COORDINATOR while the new topic loads, which does not matter here.
    group = unique("group")
    with contextlib.suppress(KafkaException):
        admin.describe_consumer_groups([group])[group].result(timeout=30)
    reader = uncached(kafka)

    async def both() -> tuple[Any, Any]:
        facts = {Fact.TOPIC_NAMES, Fact.TOTAL_PARTITIONS, Fact.BROKER_COUNT}
        return await reader.snapshot(facts), admin.list_topics(timeout=30)

    try:
        # Other tests' topics may still be reaching some brokers: wait until both views agree.
        cluster, metadata = await eventually(
            both,
            lambda pair: (
                "__consumer_offsets" in pair[0].topic_names(include_internal=True)
                and set(topics.values()) <= pair[0].topic_names()
                and pair[0].topic_names(include_internal=True) == set(pair[1].topics)
            ),
        )
    finally:
        await reader.close()
    everything = cluster.topic_names(include_internal=True)
    assert "__consumer_offsets" in everything
    assert everything == set(metadata.topics)
    internal = {t.name for t in cluster.topics if t.internal}
    assert "__consumer_offsets" in internal
    assert cluster.topic_names() == everything - internal
    assert cluster.total_partitions() == sum(len(t.partitions) for t in metadata.topics.values())
    assert cluster.broker_count() == len(metadata.brokers) == len(kafka.broker_addresses)


async def test_broker_defaults_equal_a_fresh_topics_configs(kafka: Any, admin: AdminClient) -> None:
    fresh = unique("fresh")
    create(admin, NewTopic(fresh))
    reader = uncached(kafka)
    try:
        defaults = await reader.snapshot({Fact.BROKER_DEFAULTS})
    finally:
        await reader.close()
    computed = dict(defaults.broker_default_configs())
    assert {computed.pop(name) for name in CREATE_DEFAULTS} == {"1"}  # as local_kafka sets them
    assert computed == describe(admin, fresh)


async def test_log_retention_ms_on_the_brokers_outranks_the_hours(
    kafka: Any, admin: AdminClient
) -> None:
    """The multi-unit synonym: a dynamic log.retention.ms wins over the static hours."""

    def set_everywhere(value: str | None) -> None:
        op = AlterConfigOpType.SET if value is not None else AlterConfigOpType.DELETE
        entry = ConfigEntry("log.retention.ms", value, incremental_operation=op)
        for node_id in kafka.broker_addresses:  # one broker per call, as librdkafka requires
            broker = ConfigResource(
                ConfigResource.Type.BROKER, str(node_id), incremental_configs=[entry]
            )
            admin.incremental_alter_configs([broker])[broker].result(timeout=30)

    set_everywhere("5400000")
    reader = uncached(kafka)
    try:
        cluster = await eventually(
            lambda: reader.snapshot({Fact.BROKER_DEFAULTS}),
            lambda c: c.broker_default_configs()["retention.ms"] == "5400000",
        )
        assert cluster.broker_default_configs()["retention.ms"] == "5400000"
        fresh = unique("minutes")
        create(admin, NewTopic(fresh, 1, 3))
        assert describe(admin, fresh)["retention.ms"] == "5400000"
    finally:
        await reader.close()
        set_everywhere(None)


async def test_a_second_snapshot_within_the_ttl_sends_no_request(
    reader: ClusterStateReader, topics: dict[str, str], sent: list[Any]
) -> None:
    first = await reader.snapshot(ALL_FACTS, topics=[topics["plain"]])
    # All-topics, named and broker-id Metadata; topic and broker DescribeConfigs.
    assert kinds(sent) == {"Metadata": 3, "DescribeConfigs": 2}
    second = await reader.snapshot(ALL_FACTS, topics=[topics["plain"]])
    assert len(sent) == 5
    assert second == first


async def test_concurrent_identical_snapshots_share_one_fetch(
    reader: ClusterStateReader, topics: dict[str, str], sent: list[Any]
) -> None:
    facts = {Fact.TOPIC_STATE, Fact.TOPIC_NAMES}
    results = await asyncio.gather(
        *(reader.snapshot(facts, topics=[topics["plain"]]) for _ in range(10))
    )
    assert kinds(sent) == {"Metadata": 2, "DescribeConfigs": 1}
    assert all(r == results[0] for r in results)


async def test_the_cache_expires_after_the_ttl(
    kafka: Any, topics: dict[str, str], sent: list[Any]
) -> None:
    reader = ClusterStateReader(servers(kafka.bootstrap_servers), ttl_s=0.2)
    try:
        await reader.snapshot({Fact.TOPIC_STATE}, topics=[topics["plain"]])
        await reader.snapshot({Fact.TOPIC_STATE}, topics=[topics["plain"]])
        assert kinds(sent) == {"Metadata": 1, "DescribeConfigs": 1}
        await asyncio.sleep(0.25)
        await reader.snapshot({Fact.TOPIC_STATE}, topics=[topics["plain"]])
        assert kinds(sent) == {"Metadata": 2, "DescribeConfigs": 2}
    finally:
        await reader.close()


async def test_invalidate_drops_the_topic_and_the_aggregates(
    kafka: Any, reader: ClusterStateReader, admin: AdminClient, sent: list[Any]
) -> None:
    topic, other = unique("altered"), unique("other")
    create(admin, NewTopic(topic, 1, 3))
    create(admin, NewTopic(other, 1, 3))
    facts = {Fact.TOPIC_STATE, Fact.TOPIC_NAMES}
    waiter = uncached(kafka)
    try:
        await eventually(
            lambda: waiter.snapshot(facts, topics=[topic, other]),
            lambda c: c.topic(topic) is not None and c.topic(other) is not None,
        )
    finally:
        await waiter.close()
    before = await reader.snapshot(facts, topics=[topic, other])
    resource = ConfigResource(
        ConfigResource.Type.TOPIC,
        topic,
        incremental_configs=[
            ConfigEntry("retention.ms", "7200000", incremental_operation=AlterConfigOpType.SET)
        ],
    )
    admin.incremental_alter_configs([resource])[resource].result(timeout=30)
    assert await reader.snapshot(facts, topics=[topic, other]) == before
    sent.clear()

    async def invalidated() -> Any:
        reader.invalidate(topic)
        return await reader.snapshot(facts, topics=[topic, other])

    after = await eventually(
        invalidated,
        lambda c: (t := c.topic(topic)) is not None and t.configs["retention.ms"] == "7200000",
    )
    assert after.topic(other) == before.topic(other)
    # Each round fetched the aggregates and `topic` again, never `other`.
    rounds = kinds(sent)["DescribeConfigs"]
    assert kinds(sent) == {"Metadata": 2 * rounds, "DescribeConfigs": rounds}
    described = {r.resource_name for m in sent for r in getattr(m, "resources", ())}
    assert described == {topic}


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-512", "SCRAM-SHA-256", "PLAIN"])
async def test_the_proxys_own_sasl_credentials(
    kafka: Any, topics: dict[str, str], mechanism: str
) -> None:
    credentials = SaslCredentials(mechanism, "admin", "admin-secret")
    reader = ClusterStateReader(servers(kafka.sasl_bootstrap_servers), sasl=credentials)
    try:
        cluster = await reader.snapshot({Fact.TOPIC_NAMES, Fact.BROKER_DEFAULTS})
    finally:
        await reader.close()
    assert set(topics.values()) <= cluster.topic_names()
    assert cluster.broker_default_configs()["cleanup.policy"] == "delete"


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-512", "PLAIN"])
async def test_a_wrong_password_fails_closed(kafka: Any, mechanism: str) -> None:
    credentials = SaslCredentials(mechanism, "admin", "not-the-password")
    reader = ClusterStateReader(servers(kafka.sasl_bootstrap_servers), sasl=credentials)
    try:
        with pytest.raises(ClusterStateUnavailable, match="SASL authentication failed"):
            await reader.snapshot({Fact.TOPIC_NAMES})
    finally:
        await reader.close()


async def test_an_unreachable_cluster_fails_closed() -> None:
    with refused_port() as first, refused_port() as second:
        ports = [first, second]
        reader = ClusterStateReader([("127.0.0.1", p) for p in ports], request_timeout_s=2)
        try:
            with pytest.raises(ClusterStateUnavailable) as failure:
                await reader.snapshot({Fact.BROKER_COUNT})
        finally:
            await reader.close()
    message = str(failure.value)
    assert "the topic list and broker count" in message
    assert all(f"127.0.0.1:{p}" in message for p in ports)


async def test_a_dead_bootstrap_server_is_skipped(kafka: Any, topics: dict[str, str]) -> None:
    with refused_port() as dead:
        reader = ClusterStateReader([("127.0.0.1", dead), *servers(kafka.bootstrap_servers)])
        try:
            cluster = await reader.snapshot({Fact.TOPIC_NAMES})
        finally:
            await reader.close()
    assert set(topics.values()) <= cluster.topic_names()
