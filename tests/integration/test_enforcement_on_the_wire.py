"""Policy enforcement through the proxy beyond the admin clients' calls: auto-creation by
producers, librdkafka clients, audit-mode rules, name collisions, every node's listener,
duplicates and pipelined requests on the wire, a reload under load, and a SASL principal.
Every outcome is read from the brokers themselves.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic
from kafka import KafkaProducer
from kafka.errors import KafkaTimeoutError

from harness.messages import build, metadata_request
from harness.proxy_process import ProxyProcess, sasl_enforcing_proxy
from harness.wire import WireClient
from kafka_policy_proxy.codec.registry import request_class
from tests.integration.admin_clients import (
    AdminHarness,
    BrokerView,
    NewTopicSpec,
)
from tests.integration.enforcement_support import (
    assert_denied,
    make_topic,
    settled,
    uid,
    wait_for,
)

pytestmark = pytest.mark.integration


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
