"""Override actions against the real cluster: the broker, read directly, has what the policy set.

A proxy enforces a policy that defaults min.insync.replicas, caps partitions and retention.ms,
and forces compression.type on `ov.` topics. Creates and config changes from the Java
AdminClient, confluent-kafka and kafka-topics reach the broker rewritten; validate_only shows
the effect and creates nothing; the audit event has what the client sent, what was forwarded
and the rule; auto-creation, which cannot carry the change, is refused.
"""

from __future__ import annotations

import subprocess
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kafka import KafkaProducer
from kafka.errors import KafkaTimeoutError

from harness.proxy_process import ProxyProcess
from tests.integration.admin_clients import (
    AdminHarness,
    BrokerView,
    ConfigOp,
    ConfluentAdmin,
    JavaAdmin,
    NewTopicSpec,
)
from tests.integration.enforcement_support import proxy_with_policy
from tests.integration.test_admin_clients import until

pytestmark = pytest.mark.integration

BOOTSTRAP_PORT, NODE_PORT_BASE = 21740, 21750
WEEK_MS = "604800000"
POLICY = {
    "version": 1,
    "rules": [
        {
            "name": "isr-default",
            "match": {"topic_prefix": "ov."},
            "configs": {"min.insync.replicas": {"default": 2}},
        },
        {"name": "width", "match": {"topic_prefix": "ov."}, "partitions": {"max": 6, "cap": True}},
        {
            "name": "retention-cap",
            "match": {"topic_prefix": "ov."},
            "configs": {"retention.ms": {"max": "7d", "cap": True}},
        },
        {
            "name": "zstd",
            "match": {"topic_prefix": "ov."},
            "configs": {"compression.type": {"force": "zstd"}},
        },
    ],
}


@pytest.fixture(scope="module")
def proxy(kafka: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProxyProcess]:
    workdir = tmp_path_factory.mktemp("overrides")
    yield from proxy_with_policy(kafka, workdir, POLICY, BOOTSTRAP_PORT, NODE_PORT_BASE)


@pytest.fixture(scope="module")
def broker(kafka: Any) -> BrokerView:
    return BrokerView(kafka.bootstrap_servers)


@pytest.fixture(params=["java", "confluent"])
def admin(
    request: pytest.FixtureRequest, kafka: Any, proxy: ProxyProcess
) -> Iterator[AdminHarness]:
    client: AdminHarness = (
        JavaAdmin(proxy.bootstrap, kafka.classpath())
        if request.param == "java"
        else ConfluentAdmin(proxy.bootstrap)
    )
    try:
        yield client
    finally:
        client.close()


def described(broker: BrokerView, topic: str) -> Any:
    """The topic as the broker describes it, once its metadata has reached that broker."""
    return until(lambda: broker.describe(topic))


def own_configs(broker: BrokerView, topic: str) -> dict[str, str | None]:
    info = described(broker, topic)
    return {k: v.value for k, v in info.configs.items() if v.source == "DYNAMIC_TOPIC_CONFIG"}


def events_for(proxy: ProxyProcess, topic: str) -> list[dict[str, Any]]:
    return [e for e in proxy.audit_events() if e["topic"] == topic]


def test_a_create_reaches_the_broker_with_the_policys_values(
    admin: AdminHarness, proxy: ProxyProcess, broker: BrokerView
) -> None:
    name = f"ov.{uuid.uuid4().hex[:8]}"
    spec = NewTopicSpec(
        name, 12, 1, configs={"retention.ms": "999999999999", "compression.type": "gzip"}
    )
    [outcome] = admin.create_topics([spec])
    assert outcome.ok, outcome
    info = described(broker, name)
    assert len(info.partitions) == 6
    assert own_configs(broker, name) == {
        "retention.ms": WEEK_MS,
        "compression.type": "zstd",
        "min.insync.replicas": "2",
    }
    [event] = events_for(proxy, name)
    assert event["decision"] == "allowed"
    assert event["request"]["requested"]["partitions"] == 12
    assert event["rewritten"]["requested"]["partitions"] == 6
    assert {
        (o["rule"], o["kind"], o["target"], o["before"], o["after"]) for o in event["overrides"]
    } == {
        ("width", "cap", "partitions", "12", "6"),
        ("retention-cap", "cap", "retention.ms", "999999999999", WEEK_MS),
        ("zstd", "force", "compression.type", "gzip", "zstd"),
        ("isr-default", "default", "min.insync.replicas", None, "2"),
    }


def test_validate_only_shows_the_override_and_creates_nothing(
    admin: AdminHarness, proxy: ProxyProcess, broker: BrokerView
) -> None:
    name = f"ov.{uuid.uuid4().hex[:8]}"
    [outcome] = admin.create_topics([NewTopicSpec(name, 40, 1)], validate_only=True)
    assert outcome.ok, outcome
    assert name not in broker.topics()
    [event] = events_for(proxy, name)
    assert event["validate_only"] is True
    assert event["rewritten"]["requested"]["partitions"] == 6


def test_a_config_change_is_capped_and_a_removal_is_not_touched(
    admin: AdminHarness, proxy: ProxyProcess, broker: BrokerView
) -> None:
    name = f"ov.{uuid.uuid4().hex[:8]}"
    assert admin.create_topics([NewTopicSpec(name, 1, 1)])[0].ok
    [changed] = admin.incremental_alter_configs(
        {
            name: [
                ConfigOp("retention.ms", "SET", "999999999999"),
                ConfigOp("compression.type", "SET", "lz4"),
            ]
        }
    )
    assert changed.ok, changed
    assert until(lambda: own_configs(broker, name).get("retention.ms")) == WEEK_MS
    assert own_configs(broker, name)["compression.type"] == "zstd"
    [removed] = admin.incremental_alter_configs({name: [ConfigOp("retention.ms", "DELETE")]})
    assert removed.ok, removed
    assert until(lambda: "retention.ms" not in own_configs(broker, name) or None)


def test_kafka_topics_creates_are_rewritten_too(
    kafka: Any, proxy: ProxyProcess, broker: BrokerView
) -> None:
    name = f"ov.{uuid.uuid4().hex[:8]}"
    command = kafka.tool_command(
        "kafka-topics",
        "--bootstrap-server",
        proxy.bootstrap,
        "--create",
        "--topic",
        name,
        "--partitions",
        "10",
        "--replication-factor",
        "1",
        "--config",
        "retention.ms=-1",
    )
    subprocess.run(command, check=True, capture_output=True, timeout=120)
    info = described(broker, name)
    assert len(info.partitions) == 6
    assert own_configs(broker, name)["retention.ms"] == WEEK_MS


def test_auto_creation_cannot_carry_an_override_and_is_refused(
    proxy: ProxyProcess, broker: BrokerView
) -> None:
    name = f"ov.auto-{uuid.uuid4().hex[:8]}"
    producer = KafkaProducer(bootstrap_servers=proxy.bootstrap, max_block_ms=4000)
    try:
        with pytest.raises(KafkaTimeoutError):
            producer.send(name, b"x").get(30)
    finally:
        producer.close()
    assert name not in broker.topics()
    events = events_for(proxy, name)
    assert events and events[0]["api"] == "Metadata" and events[0]["decision"] == "denied"
    assert (
        "auto-creation cannot apply the policy's overrides"
        in events[0]["violations"][-1]["message"]
    )


def test_a_full_replacement_cannot_drop_a_forced_or_defaulted_config(
    proxy: ProxyProcess, broker: BrokerView
) -> None:
    name = f"ov.{uuid.uuid4().hex[:8]}"
    admin = ConfluentAdmin(proxy.bootstrap)
    try:
        assert admin.create_topics([NewTopicSpec(name, 1, 1)])[0].ok
        [replaced] = admin.alter_configs({name: {"retention.ms": "1000"}})
        assert replaced.ok, replaced
    finally:
        admin.close()
    assert until(lambda: own_configs(broker, name).get("retention.ms") == "1000" or None)
    assert own_configs(broker, name) == {
        "retention.ms": "1000",
        "compression.type": "zstd",
        "min.insync.replicas": "2",
    }
