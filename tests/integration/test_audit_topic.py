"""The audit topic on a real cluster: CloudEvents keyed by topic, and what each
audit.on_failure mode does when the audit topic's leader is gone.

A cluster of its own (two brokers): the audit topic lives on broker 2 only, which the test
stops, so the shared cluster of the other tests is left alone.
"""

from __future__ import annotations

import json
import subprocess
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer

from harness.local_kafka import LocalKafka
from harness.proxy_process import ProxyProcess
from tests.integration.admin_clients import BrokerView, ConfluentAdmin, NewTopicSpec
from tests.integration.test_admin_clients import until
from tests.integration.test_metrics import probe, scrape, total

pytestmark = pytest.mark.integration

PORT_BASE = 28092
AUDIT_TOPIC = "proxy-audit"
POLICY = """\
version: 1
rules:
  - name: no-scratch
    match: {topic_prefix: scratch.}
    deny: true
    message: scratch topics are not allowed
"""
# mode -> (bootstrap port, node port base, admin port)
PORTS = {"open": (28400, 28410, 28420), "closed": (28430, 28440, 28450)}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """Two brokers, and the audit topic with its only replica on broker 2."""
    kafka = LocalKafka(
        tmp_path_factory.mktemp("audit-kafka") / "cluster",
        brokers=2,
        port_base=PORT_BASE,
        light_jvm=True,
    )
    kafka.up(timeout=180)
    try:
        # As an operator would (docs/operations.md), with the only replica on broker 2.
        create = kafka.tool_command(
            "kafka-topics",
            "--bootstrap-server",
            kafka.bootstrap_servers,
            "--create",
            "--topic",
            AUDIT_TOPIC,
            "--replica-assignment",
            "2",
        )
        subprocess.run(create, check=True, capture_output=True, timeout=120)
        yield kafka
    finally:
        kafka.down()


@pytest.fixture(scope="module")
def proxies(cluster: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """One proxy per audit.on_failure mode, both writing to the audit topic."""
    running: dict[str, ProxyProcess] = {}
    try:
        for mode, (bootstrap, nodes, admin) in PORTS.items():
            workdir = tmp_path_factory.mktemp(f"audit-{mode}")
            (workdir / "policy.yaml").write_text(POLICY)
            running[mode] = ProxyProcess(
                workdir,
                cluster.bootstrap_servers,
                bootstrap,
                nodes,
                extra={
                    "policy": {"file": str(workdir / "policy.yaml")},
                    "admin": {"bind_host": "127.0.0.1", "port": admin},
                    "audit": {
                        "proxy_id": f"proxy-{mode}",
                        "on_failure": mode,
                        "kafka": {
                            "topic": AUDIT_TOPIC,
                            "linger_ms": 5,
                            "delivery_timeout_s": 3,
                        },
                    },
                },
            )
        yield running
    finally:
        for process in running.values():
            assert process.stop() == 0


def audit_events(kafka: Any) -> list[tuple[bytes, dict[str, Any]]]:
    """Every (key, event) on the audit topic, read from the broker directly."""
    consumer = Consumer(
        {
            "bootstrap.servers": kafka.bootstrap_servers,
            "group.id": f"audit-reader-{uuid.uuid4()}",
            "auto.offset.reset": "earliest",
            "enable.partition.eof": True,
            "log_level": 3,
        }
    )
    consumer.subscribe([AUDIT_TOPIC])
    events = []
    try:
        for _ in range(30):
            message = consumer.poll(1.0)
            if message is None:
                continue
            if message.error() is not None:
                if message.error().code() == -191:  # _PARTITION_EOF: read everything
                    break
                continue
            events.append((message.key(), json.loads(message.value())))
    finally:
        consumer.close()
    return events


def dropped(admin_port: int) -> float:
    """kpp_audit_events_total{sink="kafka",result="dropped"} of one proxy."""
    return total(scrape(admin_port), "kpp_audit_events_total", sink="kafka", result="dropped")


def test_decisions_reach_the_audit_topic_as_cloudevents(
    cluster: Any, proxies: dict[str, ProxyProcess]
) -> None:
    admin = ConfluentAdmin(proxies["open"].bootstrap)
    try:
        outcomes = admin.create_topics(
            [NewTopicSpec("orders.audited", 1, 2), NewTopicSpec("scratch.audited", 1, 2)]
        )
    finally:
        admin.close()
    assert [o.ok for o in outcomes] == [True, False]

    def both() -> list[tuple[bytes, dict[str, Any]]] | None:
        events = audit_events(cluster)
        return events if len(events) >= 2 else None

    events = until(both)
    by_subject = {event["subject"]: (key, event) for key, event in events}
    for topic, decision in (("orders.audited", "allowed"), ("scratch.audited", "denied")):
        key, event = by_subject[topic]
        assert key == topic.encode()
        assert event["specversion"] == "1.0"
        assert event["type"] == "io.github.kafka-policy-proxy.decision"
        assert event["source"] == "kafka-policy-proxy/proxy-open"
        assert event["datacontenttype"] == "application/json"
        assert event["id"] == event["data"]["decision_id"]
        assert event["time"] == event["data"]["time"]
        assert event["data"]["topic"] == topic
        assert event["data"]["decision"] == decision
    scraped = scrape(PORTS["open"][2])
    assert total(scraped, "kpp_audit_events_total", sink="kafka", result="written") == 2


def test_with_the_audit_leader_gone_open_allows_and_closed_refuses(
    cluster: Any, proxies: dict[str, ProxyProcess]
) -> None:
    cluster.stop_broker(2)
    # Broker 1 only: the view's metadata must not send it to the stopped broker.
    broker = BrokerView(cluster.bootstrap_servers.split(",")[0])

    open_admin = ConfluentAdmin(proxies["open"].bootstrap)
    try:
        [allowed] = open_admin.create_topics([NewTopicSpec("orders.unaudited", 1, 1)])
    finally:
        open_admin.close()
    assert allowed.ok, allowed
    until(lambda: "orders.unaudited" in broker.topics() or None)
    until(lambda: dropped(PORTS["open"][2]) or None)
    assert dropped(PORTS["open"][2]) == 1
    assert "audit event dropped" in proxies["open"].log_text()

    closed_admin = ConfluentAdmin(proxies["closed"].bootstrap)
    try:
        [refused] = closed_admin.create_topics([NewTopicSpec("orders.refused", 1, 1)])
    finally:
        closed_admin.close()
    assert refused.error == "POLICY_VIOLATION", refused
    assert "the audit log cannot be written (audit.on_failure: closed)" in (refused.message or "")
    # The proxy answered only after deciding not to forward: the broker never saw it.
    assert "orders.refused" not in broker.topics()
    assert dropped(PORTS["closed"][2]) == 1
    assert probe("/healthz", PORTS["closed"][2]) == (200, "ok\n")
