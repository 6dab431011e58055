"""The admin-client harness itself, against the real cluster (no proxy in between)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import pytest
from confluent_kafka import Producer

from tests.integration.admin_clients import (
    CLIENT_NAMES,
    AdminHarness,
    BrokerView,
    ConfigOp,
    NewTopicSpec,
    NotSupportedByClient,
    PartitionIncrease,
    Sasl,
    TopicOutcome,
    admin_clients,
    close_all,
    error_name,
    fold_per_topic,
)

OK = True
T = TypeVar("T")
# The optional operations, and which clients have them.
OPTIONAL = {
    "alter_configs": {"confluent", "kafka-python"},
    "alter_partition_reassignments": {"java", "kafka-python"},
    "delete_topics_by_id": {"java", "kafka-python"},
}


@pytest.fixture(scope="session")
def admins(kafka: Any) -> Iterator[dict[str, AdminHarness]]:
    """One harness per client (one JVM) for the whole session."""
    clients = admin_clients(kafka.bootstrap_servers, kafka.classpath())
    yield clients
    close_all(clients.values())


@pytest.fixture(scope="session")
def broker(kafka: Any) -> BrokerView:
    """The cluster as the brokers report it."""
    return BrokerView(kafka.bootstrap_servers)


@pytest.fixture(params=CLIENT_NAMES)
def admin(request: pytest.FixtureRequest, admins: dict[str, AdminHarness]) -> AdminHarness:
    """Each client in turn."""
    return admins[request.param]


def settles(read: Callable[[], object], expected: object, timeout: float = 20.0) -> None:
    """Poll `read` until it returns `expected`: broker metadata trails the controller a little."""
    deadline = time.monotonic() + timeout
    while (actual := read()) != expected and time.monotonic() < deadline:
        time.sleep(0.1)
    assert actual == expected


def until(read: Callable[[], T | None], timeout: float = 20.0) -> T:
    """Poll `read` until it returns something other than None (e.g. a new topic's id)."""
    deadline = time.monotonic() + timeout
    while (value := read()) is None and time.monotonic() < deadline:
        time.sleep(0.1)
    assert value is not None
    return value


def partitions(broker: BrokerView, topic: str) -> dict[int, list[int]]:
    """Partition -> replicas of `topic` on the broker; empty if it does not exist."""
    info = broker.describe(topic)
    return {} if info is None else info.partitions


def topic_id_on(broker: BrokerView, topic: str) -> uuid.UUID | None:
    """The id of `topic` on the broker, or None."""
    info = broker.describe(topic)
    return None if info is None else info.topic_id


def configs(broker: BrokerView, topic: str, names: list[str]) -> dict[str, str | None]:
    """The named configs of `topic` on the broker."""
    info = broker.describe(topic)
    assert info is not None, topic
    return {name: info.configs[name].value for name in names}


def produce(bootstrap: str, topic: str, partition: int, count: int) -> None:
    """Write `count` records to one partition."""
    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(count):
        producer.produce(topic, str(i).encode(), partition=partition)
    assert producer.flush(30) == 0


def test_fold_per_topic_keeps_first_seen_order_and_first_failure() -> None:
    outcomes = [
        TopicOutcome("b", OK),
        TopicOutcome("a", False, "POLICY_VIOLATION", "first"),
        TopicOutcome("b", False, "INVALID_REQUEST", "later"),
        TopicOutcome("a", False, "UNKNOWN_SERVER_ERROR", "second"),
    ]
    assert fold_per_topic(outcomes) == [outcomes[2], outcomes[1]]


def test_error_names_are_kafkas() -> None:
    assert [error_name(c) for c in (44, -1, 3, 6, 39)] == [
        "POLICY_VIOLATION",
        "UNKNOWN_SERVER_ERROR",
        "UNKNOWN_TOPIC_OR_PARTITION",
        "NOT_LEADER_OR_FOLLOWER",
        "INVALID_REPLICA_ASSIGNMENT",
    ]


@pytest.mark.integration
def test_topic_lifecycle(admin: AdminHarness, broker: BrokerView, kafka: Any) -> None:
    topic = f"harness-life-{admin.name}"
    missing = f"harness-missing-{admin.name}"
    settings = {"retention.ms": "3600000", "segment.bytes": "1048576"}
    created = admin.create_topics([NewTopicSpec(topic, 2, 2, configs=settings)])
    assert created == [TopicOutcome(topic, OK)]

    settles(lambda: list(admin.describe_topics([topic, missing])), [topic])
    # Each call may meet another broker, whose metadata can still trail.
    info = until(lambda: admin.describe_topics([topic]).get(topic))
    assert (len(info.partitions), info.replication_factor) == (2, 2)
    assert info.configs["retention.ms"].value == "3600000"
    assert info.configs["retention.ms"].source == "DYNAMIC_TOPIC_CONFIG"
    settles(lambda: partitions(broker, topic), info.partitions)
    settles(lambda: topic_id_on(broker, topic), info.topic_id)
    settles(lambda: admin.topic_id(topic), info.topic_id)
    assert admin.topic_id(missing) is None

    changes = {
        topic: [
            ConfigOp("retention.ms", "SET", "7200000"),
            ConfigOp("segment.bytes", "DELETE"),
        ],
        missing: [ConfigOp("retention.ms", "DELETE")],
    }
    assert admin.incremental_alter_configs(changes) == [
        TopicOutcome(topic, OK),
        TopicOutcome(
            missing, False, "UNKNOWN_TOPIC_OR_PARTITION", f"The topic '{missing}' does not exist."
        ),
    ]

    names = ["retention.ms", "segment.bytes"]
    # segment.bytes falls back to the broker default, 1 GiB.
    settles(
        lambda: configs(broker, topic, names),
        {"retention.ms": "7200000", "segment.bytes": "1073741824"},
    )

    if admin.supports("alter_configs"):
        assert admin.alter_configs({topic: {"retention.ms": "1800000"}}) == [
            TopicOutcome(topic, OK)
        ]
        settles(lambda: configs(broker, topic, ["retention.ms"]), {"retention.ms": "1800000"})

    assert admin.create_partitions([PartitionIncrease(topic, 3)]) == [TopicOutcome(topic, OK)]
    settles(lambda: len(partitions(broker, topic)), 3)

    produce(kafka.bootstrap_servers, topic, 0, 3)
    assert admin.delete_records({(topic, 0): 2, (topic, 1): 0}) == [TopicOutcome(topic, OK)]
    assert broker.low_watermarks(topic) == {0: 2, 1: 0, 2: 0}

    if admin.supports("alter_partition_reassignments"):
        replicas = partitions(broker, topic)[0]
        spare = min(set(kafka.broker_addresses) - set(replicas))
        target = [spare, replicas[0]]
        assert admin.alter_partition_reassignments({(topic, 0): target}) == [
            TopicOutcome(topic, OK)
        ]
        settles(lambda: partitions(broker, topic)[0], target)

    deleted = admin.delete_topics([topic, missing])
    assert deleted[0] == TopicOutcome(topic, OK)
    assert (deleted[1].topic, deleted[1].ok, deleted[1].error) == (
        missing,
        False,
        "UNKNOWN_TOPIC_OR_PARTITION",
    )
    assert deleted[1].message
    settles(lambda: topic in broker.topics(), False)


@pytest.mark.integration
def test_duplicate_create_fails_only_that_topic(admin: AdminHarness, broker: BrokerView) -> None:
    first, second = f"harness-dup-{admin.name}", f"harness-dup2-{admin.name}"
    assert admin.create_topics([NewTopicSpec(first, 1, 1)]) == [TopicOutcome(first, OK)]
    outcomes = admin.create_topics([NewTopicSpec(first, 1, 1), NewTopicSpec(second, 1, 1)])
    assert outcomes == [
        TopicOutcome(first, False, "TOPIC_ALREADY_EXISTS", f"Topic '{first}' already exists."),
        TopicOutcome(second, OK),
    ]
    settles(lambda: len(partitions(broker, second)), 1)
    assert admin.delete_topics([first, second]) == [
        TopicOutcome(first, OK),
        TopicOutcome(second, OK),
    ]


@pytest.mark.integration
def test_validate_only_creates_nothing(admin: AdminHarness, broker: BrokerView) -> None:
    # More replicas than any broker count the suite reaches (a test adds a fourth broker and
    # stops it; a stopped broker stays registered), so the broker refuses it in any order.
    valid, too_many = f"harness-validate-{admin.name}", f"harness-rf9-{admin.name}"
    outcomes = admin.create_topics(
        [NewTopicSpec(valid, 1, 1), NewTopicSpec(too_many, 1, 9)], validate_only=True
    )
    assert outcomes[0] == TopicOutcome(valid, OK)
    assert (outcomes[1].ok, outcomes[1].error) == (False, "INVALID_REPLICATION_FACTOR")
    assert outcomes[1].message
    assert admin.describe_topics([valid, too_many]) == {}
    assert not {valid, too_many} & broker.topics()


@pytest.mark.integration
def test_assignments_are_placed_as_asked(admin: AdminHarness, broker: BrokerView) -> None:
    topic = f"harness-assigned-{admin.name}"
    assert admin.create_topics([NewTopicSpec(topic, assignment=[[1, 2], [2, 3]])]) == [
        TopicOutcome(topic, OK)
    ]
    increase = PartitionIncrease(topic, 3, assignment=[[3, 1]])
    assert admin.create_partitions([increase], validate_only=True) == [TopicOutcome(topic, OK)]
    settles(lambda: partitions(broker, topic), {0: [1, 2], 1: [2, 3]})
    assert admin.create_partitions([increase]) == [TopicOutcome(topic, OK)]
    settles(lambda: partitions(broker, topic), {0: [1, 2], 1: [2, 3], 2: [3, 1]})
    assert admin.delete_topics([topic]) == [TopicOutcome(topic, OK)]


@pytest.mark.integration
def test_delete_by_id(admin: AdminHarness, broker: BrokerView) -> None:
    if not admin.supports("delete_topics_by_id"):
        with pytest.raises(NotSupportedByClient):
            admin.delete_topics_by_id([uuid.uuid4()])
        return
    topic = f"harness-byid-{admin.name}"
    assert admin.create_topics([NewTopicSpec(topic, 1, 1)]) == [TopicOutcome(topic, OK)]
    topic_id = until(lambda: admin.topic_id(topic))
    settles(lambda: topic_id_on(broker, topic), topic_id)
    unknown = uuid.uuid4()
    outcomes = admin.delete_topics_by_id([topic_id, unknown])
    assert outcomes[0] == TopicOutcome(str(topic_id), OK)
    assert (outcomes[1].topic, outcomes[1].error) == (str(unknown), "UNKNOWN_TOPIC_ID")
    settles(lambda: topic in broker.topics(), False)


@pytest.mark.integration
def test_optional_operations_match_the_client_library(admin: AdminHarness) -> None:
    for operation, clients in OPTIONAL.items():
        assert admin.supports(operation) == (admin.name in clients), operation
    if not admin.supports("alter_configs"):
        with pytest.raises(NotSupportedByClient):
            admin.alter_configs({"t": {"retention.ms": "1"}})
    if not admin.supports("alter_partition_reassignments"):
        with pytest.raises(NotSupportedByClient):
            admin.alter_partition_reassignments({("t", 0): None})


@pytest.mark.integration
def test_sasl_credentials_reach_every_client(kafka: Any) -> None:
    sasl = Sasl("SCRAM-SHA-256", "alice", "alice-secret")
    clients = admin_clients(kafka.sasl_bootstrap_servers, kafka.classpath(), sasl=sasl)
    try:
        for name, client in clients.items():
            topic = f"harness-sasl-{name}"
            outcome = client.create_topics([NewTopicSpec(topic, 1, 1)], validate_only=True)
            assert outcome == [TopicOutcome(topic, OK)], name
    finally:
        close_all(clients.values())
