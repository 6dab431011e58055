"""Policy enforcement through the proxy, with real clients, checked on the brokers directly.

The enforcing proxy runs tests/integration/data/policy.yaml. Every test reads the outcome
from the brokers themselves (BrokerView talks to the brokers, not the proxy).
"""

from __future__ import annotations

import dataclasses
import importlib
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic
from kafka import KafkaProducer
from kafka.errors import KafkaTimeoutError

from codec.registry import request_class
from harness.messages import build, metadata_request
from harness.proxy_process import ProxyProcess, sasl_enforcing_proxy
from harness.wire import WireClient
from tests.integration.admin_clients import (
    AdminHarness,
    BrokerView,
    ConfigOp,
    ConfluentAdmin,
    JavaAdmin,
    KafkaPythonAdmin,
    NewTopicSpec,
    PartitionIncrease,
    TopicOutcome,
    admin_clients,
    close_all,
)

pytestmark = pytest.mark.integration

CLASSES = {"java": JavaAdmin, "confluent": ConfluentAdmin, "kafka-python": KafkaPythonAdmin}


def clients_with(operation: str) -> list[str]:
    """The clients whose library has this admin operation (the others cannot be tested on it)."""
    return [
        name
        for name, cls in CLASSES.items()
        if getattr(cls, operation) is not getattr(AdminHarness, operation)
    ]


@pytest.fixture(scope="module")
def clients(enforcing_proxy: ProxyProcess, kafka: Any) -> Iterator[dict[str, AdminHarness]]:
    harnesses = admin_clients(enforcing_proxy.bootstrap, kafka.classpath())
    yield harnesses
    close_all(harnesses.values())


BROKERS: dict[int, tuple[str, int]] = {}


@pytest.fixture(scope="module", autouse=True)
def _brokers(kafka: Any) -> None:
    BROKERS.update(kafka.broker_addresses)


@pytest.fixture(scope="module")
def broker(kafka: Any) -> BrokerView:
    return BrokerView(kafka.bootstrap_servers)


@pytest.fixture(scope="module")
def direct(kafka: Any) -> AdminClient:
    """An admin client on the brokers themselves, to set up topics the policy would refuse."""
    return AdminClient({"bootstrap.servers": kafka.bootstrap_servers, "log_level": 3})


def uid() -> str:
    return uuid.uuid4().hex[:8]


def make_topic(direct: AdminClient, name: str, partitions: int = 1, replication: int = 1) -> None:
    """Create a topic on the brokers directly and wait until every broker's metadata has it."""
    for future in direct.create_topics([NewTopic(name, partitions, replication)]).values():
        future.result(30)
    metadata = metadata_request((name,))
    for host, port in BROKERS.values():
        client = WireClient(host, port)
        assert wait_for(lambda c=client: c.request(metadata).topics[0].error_code.value == 0)
        client.close()


def settled(direct: AdminClient) -> None:
    """Return once every broker has applied every metadata change committed before the call.

    KRaft's metadata is one ordered log, and the controller answers a change only once it is
    committed: a broker that shows a topic created now also shows whatever an earlier answered
    request changed. So "nothing changed" can be read at once, instead of after a sleep.
    """
    make_topic(direct, f"fence.{uid()}")


def by_topic(outcomes: list[TopicOutcome]) -> dict[str, TopicOutcome]:
    return {o.topic: o for o in outcomes}


def assert_denied(outcome: TopicOutcome, rule: str, proxy: ProxyProcess | None = None) -> None:
    """Denied by this rule: POLICY_VIOLATION naming it, or -1 where the version has no message.

    A client library that drops the message (kafka-python's reassignments) is checked against
    the proxy's audit log instead.
    """
    assert not outcome.ok, outcome
    if outcome.error == "POLICY_VIOLATION" and outcome.message is None and proxy is not None:
        rules = [
            v["rule"]
            for e in proxy.audit_events()
            if e["topic"] == outcome.topic and e["decision"] == "denied"
            for v in e["violations"]
        ]
        assert rule in rules, rules
    elif outcome.error == "POLICY_VIOLATION":
        assert f"[{rule}]" in (outcome.message or ""), outcome
    else:
        assert outcome.error == "UNKNOWN_SERVER_ERROR", outcome


def wait_for(check: Any, timeout: float = 15.0) -> bool:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)
    return True


@pytest.mark.parametrize("client", clients_with("create_topics"))
def test_create_mixed_batch(
    clients: dict[str, AdminHarness], broker: BrokerView, client: str
) -> None:
    u = uid()
    ok, bad_name, too_big = f"ok.{u}", f"Bad_{u}", f"big.{u}"
    outcomes = by_topic(
        clients[client].create_topics(
            [
                NewTopicSpec(ok, 3, 1),
                NewTopicSpec(bad_name, 1, 1),
                NewTopicSpec(too_big, 60, 1),
            ]
        )
    )
    assert outcomes[ok].ok, outcomes[ok]
    assert outcomes[bad_name].error == "POLICY_VIOLATION"
    assert f"[naming] topic '{bad_name}'" in (outcomes[bad_name].message or "")
    assert outcomes[too_big].error == "POLICY_VIOLATION"
    assert "asks for 60 partitions; the limit is 6" in (outcomes[too_big].message or "")
    assert wait_for(lambda: ok in broker.topics())
    topics = broker.topics()
    assert bad_name not in topics and too_big not in topics
    info = broker.describe(ok)
    assert info is not None and len(info.partitions) == 3


@pytest.mark.parametrize("client", clients_with("create_topics"))
def test_validate_only_gets_the_same_answer_and_creates_nothing(
    clients: dict[str, AdminHarness], broker: BrokerView, direct: AdminClient, client: str
) -> None:
    u = uid()
    good, bad = f"vo.{u}", f"vo.{u}.huge"
    outcomes = by_topic(
        clients[client].create_topics(
            [NewTopicSpec(good, 2, 1), NewTopicSpec(bad, 40, 1)], validate_only=True
        )
    )
    assert outcomes[good].ok, outcomes[good]
    assert_denied(outcomes[bad], "partition-bounds")
    settled(direct)
    assert not {good, bad} & broker.topics()


@pytest.mark.parametrize("client", clients_with("incremental_alter_configs"))
def test_incremental_alter_configs(
    clients: dict[str, AdminHarness], broker: BrokerView, direct: AdminClient, client: str
) -> None:
    topic = f"cfg.{uid()}"
    make_topic(direct, topic)
    denied = by_topic(
        clients[client].incremental_alter_configs(
            {topic: [ConfigOp("retention.ms", "SET", "1000")]}
        )
    )
    assert_denied(denied[topic], "retention-bounds")
    info = broker.describe(topic)
    assert info is not None and info.configs["retention.ms"].value == "604800000"
    allowed = by_topic(
        clients[client].incremental_alter_configs(
            {topic: [ConfigOp("retention.ms", "SET", "7200000")]}
        )
    )
    assert allowed[topic].ok, allowed[topic]
    assert wait_for(lambda: broker.describe(topic).configs["retention.ms"].value == "7200000")


@pytest.mark.parametrize("client", clients_with("alter_configs"))
def test_legacy_alter_configs_is_a_full_replacement(
    clients: dict[str, AdminHarness], broker: BrokerView, direct: AdminClient, client: str
) -> None:
    topic = f"legacy.{uid()}"
    make_topic(direct, topic)
    denied = by_topic(clients[client].alter_configs({topic: {"retention.ms": "1000"}}))
    assert_denied(denied[topic], "retention-bounds")
    assert broker.describe(topic).configs["retention.ms"].value == "604800000"
    allowed = by_topic(clients[client].alter_configs({topic: {"retention.ms": "7200000"}}))
    assert allowed[topic].ok, allowed[topic]
    assert wait_for(lambda: broker.describe(topic).configs["retention.ms"].value == "7200000")


@pytest.mark.parametrize("client", clients_with("incremental_alter_configs"))
def test_immutable_cleanup_policy(
    clients: dict[str, AdminHarness], broker: BrokerView, direct: AdminClient, client: str
) -> None:
    topic = f"imm.{uid()}"
    make_topic(direct, topic)
    outcome = by_topic(
        clients[client].incremental_alter_configs(
            {topic: [ConfigOp("cleanup.policy", "SET", "compact")]}
        )
    )[topic]
    assert_denied(outcome, "cleanup-immutable")
    assert broker.describe(topic).configs["cleanup.policy"].value == "delete"


@pytest.mark.parametrize("client", clients_with("create_partitions"))
def test_create_partitions(
    clients: dict[str, AdminHarness], broker: BrokerView, direct: AdminClient, client: str
) -> None:
    topic = f"grow.{uid()}"
    make_topic(direct, topic, partitions=2)
    denied = by_topic(clients[client].create_partitions([PartitionIncrease(topic, 6)]))
    assert_denied(denied[topic], "partition-bounds")
    assert len(broker.describe(topic).partitions) == 2
    allowed = by_topic(clients[client].create_partitions([PartitionIncrease(topic, 3)]))
    assert allowed[topic].ok, allowed[topic]
    assert wait_for(lambda: len(broker.describe(topic).partitions) == 3)


@pytest.mark.parametrize("client", clients_with("alter_partition_reassignments"))
def test_reassignment_is_for_admins_only(
    clients: dict[str, AdminHarness],
    broker: BrokerView,
    direct: AdminClient,
    enforcing_proxy: ProxyProcess,
    client: str,
) -> None:
    topic = f"move.{uid()}"
    make_topic(direct, topic)
    before = broker.describe(topic).partitions[0]
    target = [next(b for b in (1, 2, 3) if b not in before)]
    outcome = by_topic(clients[client].alter_partition_reassignments({(topic, 0): target}))[topic]
    assert_denied(outcome, "reassign-admins", enforcing_proxy)
    settled(direct)
    assert broker.describe(topic).partitions[0] == before


@pytest.mark.parametrize("client", clients_with("delete_topics"))
def test_delete_topics(
    clients: dict[str, AdminHarness], broker: BrokerView, direct: AdminClient, client: str
) -> None:
    u = uid()
    protected, plain = f"protected.{u}", f"plain.{u}"
    make_topic(direct, protected)
    make_topic(direct, plain)
    outcomes = by_topic(clients[client].delete_topics([protected, plain]))
    assert_denied(outcomes[protected], "protected")
    assert outcomes[plain].ok, outcomes[plain]
    assert wait_for(lambda: plain not in broker.topics())
    assert protected in broker.topics()


@pytest.mark.parametrize("client", clients_with("delete_topics_by_id"))
def test_delete_topics_by_id(
    clients: dict[str, AdminHarness], broker: BrokerView, direct: AdminClient, client: str
) -> None:
    u = uid()
    protected, plain = f"protected.id-{u}", f"plain.id-{u}"
    make_topic(direct, protected)
    make_topic(direct, plain)
    ids = {name: broker.describe(name).topic_id for name in (protected, plain)}
    unknown = uuid.uuid4()
    outcomes = by_topic(clients[client].delete_topics_by_id([ids[protected], ids[plain], unknown]))
    assert_denied(outcomes[str(ids[protected])], "protected")
    assert outcomes[str(ids[plain])].ok
    # An id the cluster does not know is answered by the proxy, as the broker would answer it.
    assert outcomes[str(unknown)].error == "UNKNOWN_TOPIC_ID"
    assert wait_for(lambda: plain not in broker.topics())
    assert protected in broker.topics()


@pytest.mark.parametrize("client", clients_with("delete_records"))
def test_delete_records(
    clients: dict[str, AdminHarness],
    broker: BrokerView,
    kafka: Any,
    direct: AdminClient,
    *,
    enforcing_proxy: ProxyProcess,
    client: str,
) -> None:
    u = uid()
    protected, plain = f"protected.rec-{u}", f"plain.rec-{u}"
    producer = Producer({"bootstrap.servers": kafka.bootstrap_servers, "log_level": 3})
    for topic in (protected, plain):
        make_topic(direct, topic)
        for i in range(10):
            producer.produce(topic, f"{i}".encode())
    assert producer.flush(30) == 0
    outcomes = by_topic(clients[client].delete_records({(protected, 0): 5, (plain, 0): 5}))
    # No message field in any version: POLICY_VIOLATION (whatever legacy_error_code says);
    # the reason is in the audit record and the proxy's log.
    denied = outcomes[protected]
    assert (denied.ok, denied.error) == (False, "POLICY_VIOLATION"), denied
    assert_denied(dataclasses.replace(denied, message=None), "protected", enforcing_proxy)
    assert wait_for(lambda: "may not have records deleted" in enforcing_proxy.log_text())
    assert outcomes[plain].ok, outcomes[plain]
    assert broker.low_watermarks(plain) == {0: 5}
    assert broker.low_watermarks(protected) == {0: 0}


def test_auto_creation_by_a_producer(enforcing_proxy: ProxyProcess, broker: BrokerView) -> None:
    u = uid()
    denied, allowed = f"Auto_{u}", f"auto.{u}"
    producer = KafkaProducer(bootstrap_servers=enforcing_proxy.bootstrap, max_block_ms=4000)
    producer.send(allowed, b"x").get(30)
    with pytest.raises(KafkaTimeoutError):
        producer.send(denied, b"x").get(30)
    producer.close()
    assert allowed in broker.topics()
    assert denied not in broker.topics()
    events = [e for e in enforcing_proxy.audit_events() if e["topic"] == denied]
    assert events and events[0]["api"] == "Metadata" and events[0]["decision"] == "denied"
    assert events[0]["violations"][0]["rule"] == "naming"


def test_librdkafka_clients_work_through_the_enforcing_proxy(
    enforcing_proxy: ProxyProcess, direct: AdminClient
) -> None:
    topic = f"rd.{uid()}"
    make_topic(direct, topic)
    closed_before = enforcing_proxy.log_text().count("closing client connection")
    admin = AdminClient({"bootstrap.servers": enforcing_proxy.bootstrap, "log_level": 3})
    assert topic in admin.list_topics(timeout=10).topics
    producer = Producer({"bootstrap.servers": enforcing_proxy.bootstrap, "log_level": 3})
    for i in range(100):
        producer.produce(topic, f"{i}".encode())
    assert producer.flush(30) == 0
    assert enforcing_proxy.log_text().count("closing client connection") == closed_before


def test_audit_mode_rule_lets_the_request_through(
    clients: dict[str, AdminHarness], broker: BrokerView, enforcing_proxy: ProxyProcess
) -> None:
    topic = f"audited.{uid()}"
    outcome = clients["confluent"].create_topics(
        [NewTopicSpec(topic, 1, 1, configs={"segment.ms": "1000"})]
    )[0]
    assert outcome.ok, outcome
    assert wait_for(lambda: topic in broker.topics())
    event = next(e for e in enforcing_proxy.audit_events() if e["topic"] == topic)
    assert event["decision"] == "audit-would-deny"
    assert [v["rule"] for v in event["violations"]] == ["segment-audit"]
    assert event["request"]["requested"]["configs"]["segment.ms"] == "1000"
    assert event["principal"] == "User:ANONYMOUS"


def test_name_collision_and_case(clients: dict[str, AdminHarness], broker: BrokerView) -> None:
    u = uid()
    first = f"coll.x-{u}"
    assert clients["java"].create_topics([NewTopicSpec(first, 1, 1)])[0].ok
    assert wait_for(lambda: first in broker.topics())
    outcome = clients["java"].create_topics([NewTopicSpec(f"coll_x-{u}", 1, 1)])[0]
    assert_denied(outcome, "collision")
    upper = clients["java"].create_topics([NewTopicSpec(f"COLL.x-{u}", 1, 1)])[0]
    assert_denied(upper, "naming")


def _create_request(names: list[str], version: int = 7) -> Any:
    cls = request_class(19, version)
    module = importlib.import_module(cls.__module__)
    topics = tuple(
        build(
            module.CreatableTopic,
            name=n,
            num_partitions=1,
            replication_factor=1,
            assignments=(),
            configs=(),
        )
        for n in names
    )
    return build(cls, topics=topics, timeout=30_000, validate_only=False)


def test_every_node_listener_enforces(enforcing_proxy: ProxyProcess) -> None:
    for node in (1, 2, 3):
        client = WireClient("127.0.0.1", enforcing_proxy.node_port(node))
        response = client.request(_create_request([f"Node{node}_{uid()}"]))
        assert [t.error_code.value for t in response.topics] == [44]
        client.close()


def test_duplicates_in_one_batch(
    enforcing_proxy: ProxyProcess, broker: BrokerView, direct: AdminClient
) -> None:
    u = uid()
    bad, good = f"Dup_{u}", f"dup.{u}"
    client = WireClient("127.0.0.1", enforcing_proxy.bootstrap_port)
    response = client.request(_create_request([bad, good, bad, good]))
    codes = [(t.name, t.error_code.value) for t in response.topics]
    # Every copy of a denied name is denied; a repeated allowed name gets the broker's verdict.
    assert (bad, 44) in codes and (good, 42) in codes
    assert all(code in (42, 44) for _, code in codes)
    # The same connection still answers: the proxy has finished with the batch.
    assert len(client.request(metadata_request()).brokers) >= 3
    settled(direct)
    assert not {bad, good} & broker.topics()
    client.close()


def test_pipelined_mixed_requests_come_back_in_order(enforcing_proxy: ProxyProcess) -> None:
    client = WireClient("127.0.0.1", enforcing_proxy.bootstrap_port)
    metadata = metadata_request()
    sent = []
    for i in range(12):
        if i % 3 == 0:
            sent.append((client.send(_create_request([f"Pipe_{uid()}"])), "denied"))
        elif i % 3 == 1:
            sent.append((client.send(metadata), "metadata"))
        else:
            sent.append((client.send(_create_request([f"pipe.{uid()}"])), "created"))
    for correlation_id, kind in sent:
        got, response = client.receive()
        assert got == correlation_id
        if kind == "denied":
            assert response.topics[0].error_code.value == 44
        elif kind == "created":
            assert response.topics[0].error_code.value == 0
        else:
            assert len(response.brokers) >= 3
    client.close()


def test_policy_reload_while_clients_are_connected(
    enforcing_proxy: ProxyProcess, clients: dict[str, AdminHarness]
) -> None:
    assert enforcing_proxy.policy_path is not None
    original = enforcing_proxy.policy_path.read_text()
    admin = clients["confluent"]
    try:
        enforcing_proxy.policy_path.write_text(
            original.replace("partitions: {min: 1, max: 6", "partitions: {min: 1, max: 2")
        )
        assert wait_for(
            lambda: (
                not admin.create_topics([NewTopicSpec(f"r.{uid()}", 3, 1)], validate_only=True)[
                    0
                ].ok
            )
        )
        enforcing_proxy.policy_path.write_text("rules: [not: valid")
        assert wait_for(lambda: "policy reload refused" in enforcing_proxy.log_text())
        assert not admin.create_topics([NewTopicSpec(f"r.{uid()}", 3, 1)], validate_only=True)[0].ok
    finally:
        enforcing_proxy.policy_path.write_text(original)
    assert wait_for(
        lambda: admin.create_topics([NewTopicSpec(f"r.{uid()}", 3, 1)], validate_only=True)[0].ok
    )
    assert enforcing_proxy.alive()


@pytest.fixture(scope="module")
def sasl_proxy(kafka: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProxyProcess]:
    """An enforcing proxy in front of the brokers' SCRAM listener (SASL passes through)."""
    from tests.integration.cluster_fixtures import TEST_POLICY

    workdir = tmp_path_factory.mktemp("sasl")
    process = sasl_enforcing_proxy(workdir, kafka, TEST_POLICY, (30400, 30500))
    yield process
    assert process.stop() == 0


def _scram_admin(bootstrap: str, user: str) -> AdminClient:
    return AdminClient(
        {
            "bootstrap.servers": bootstrap,
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.username": user,
            "sasl.password": f"{user}-secret",
            "log_level": 3,
        }
    )


def test_sasl_principal_is_seen_by_a_principal_scoped_rule(
    sasl_proxy: ProxyProcess, broker: BrokerView
) -> None:
    u = uid()
    alice = _scram_admin(sasl_proxy.bootstrap, "alice")
    alice.create_topics([NewTopic(f"alice.own-{u}", 1, 1)])[f"alice.own-{u}"].result(30)
    bob = _scram_admin(sasl_proxy.bootstrap, "bob")
    with pytest.raises(Exception, match=r"\[alice-space\]"):
        bob.create_topics([NewTopic(f"alice.bob-{u}", 1, 1)])[f"alice.bob-{u}"].result(30)
    # Re-using the same SASL connections for another admin call keeps the principals.
    with pytest.raises(Exception, match=r"\[alice-space\]"):
        bob.create_partitions([NewPartitions(f"alice.own-{u}", 2)])[f"alice.own-{u}"].result(30)
    assert f"alice.own-{u}" in broker.topics()
    assert f"alice.bob-{u}" not in broker.topics()
    principals = {
        e["topic"]: e["principal"] for e in sasl_proxy.audit_events() if e["action"] == "create"
    }
    assert principals[f"alice.own-{u}"] == "User:alice"
    assert principals[f"alice.bob-{u}"] == "User:bob"
