"""Policy enforcement through the proxy on every admin API, with each admin client that has it
(the Java AdminClient, confluent-kafka, kafka-python), checked on the brokers directly.

The enforcing proxy runs tests/integration/data/policy.yaml. Every test reads the outcome
from the brokers themselves (BrokerView talks to the brokers, not the proxy).
"""

from __future__ import annotations

import dataclasses
import json
import uuid
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

from harness.proxy_process import ProxyProcess
from tests.integration.admin_clients import (
    AdminHarness,
    BrokerView,
    ConfigOp,
    NewTopicSpec,
    PartitionIncrease,
)
from tests.integration.enforcement_support import (
    assert_denied,
    by_topic,
    clients_with,
    make_topic,
    settled,
    uid,
    wait_for,
)

pytestmark = pytest.mark.integration


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
    # Listed by one broker, the topic may not be described yet by the one that answers next.
    assert wait_for(lambda: broker.describe(ok) is not None), f"{ok} never showed on the brokers"
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
    # the reason is in the audit record, and the proxy's log line for the request names the
    # topic and its decision id.
    denied = outcomes[protected]
    assert (denied.ok, denied.error) == (False, "POLICY_VIOLATION"), denied
    assert_denied(dataclasses.replace(denied, message=None), "protected", enforcing_proxy)
    records = [
        e
        for e in enforcing_proxy.audit_events()
        if e["topic"] == protected and e["action"] == "delete_records"
    ]
    record = records[-1]  # a client that retried asked twice
    assert any("may not have records deleted" in v["message"] for v in record["violations"])
    assert wait_for(lambda: _denial_logged(enforcing_proxy, protected, record["decision_id"]))
    assert outcomes[plain].ok, outcomes[plain]
    assert broker.low_watermarks(plain) == {0: 5}
    assert broker.low_watermarks(protected) == {0: 0}


def _denial_logged(proxy: ProxyProcess, topic: str, decision_id: str) -> bool:
    """Whether a `policy denied` line of the proxy's log names the topic with this id."""
    lines = [json.loads(t) for t in proxy.log_text().splitlines() if t.startswith("{")]
    return any(
        (topic, decision_id) in zip(line["sample"], line["decision_ids"], strict=True)
        for line in lines
        if line.get("event") == "policy denied"
    )
