"""TLS termination in front of the real cluster: client certificates name the principal."""

from __future__ import annotations

import socket
import ssl
import time
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from harness.proxy_process import ProxyProcess
from kafka_policy_proxy.codec.header import request_header
from kafka_policy_proxy.proxy.net.connection import framed
from tests.unit.proxy.tls_certs import TlsCerts, tls_certs_fixture  # noqa: F401

pytestmark = pytest.mark.integration

BOOTSTRAP_PORT = 31400
NODE_PORT_BASE = 31500
QUIET = {"log_level": 3}
POLICY = """\
version: 1
rules:
  - name: alice-space
    match: {topic_prefix: alice., except_principals: ['User:alice']}
    deny: true
"""
# alice's subject is CN=alice,OU=eng,O=Acme; bob's is just CN=bob.
MAPPING_RULES = ["RULE:^CN=([a-z]+),.*$/$1/L", "RULE:^CN=([a-z]+)$/$1/L", "DEFAULT"]


@pytest.fixture(scope="module")
def tls_proxy(
    kafka: Any, tls_certs: TlsCerts, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ProxyProcess]:
    """A proxy that terminates TLS, requires client certificates and enforces POLICY."""
    workdir = tmp_path_factory.mktemp("tls-proxy")
    policy = workdir / "policy.yaml"
    policy.write_text(POLICY)
    tls = {
        "cert_file": str(tls_certs.server_cert),
        "key_file": str(tls_certs.server_key),
        "ca_file": str(tls_certs.ca),
        "client_auth": "required",
        "principal_mapping_rules": MAPPING_RULES,
    }
    process = ProxyProcess(
        workdir,
        kafka.bootstrap_servers,
        BOOTSTRAP_PORT,
        NODE_PORT_BASE,
        extra={
            "listeners": {
                "tls": tls,
            },
            "policy": {"file": str(policy)},
            "audit": {"file": str(workdir / "audit.jsonl")},
        },
    )
    process.audit_path = workdir / "audit.jsonl"
    try:
        yield process
    finally:
        started = time.monotonic()
        assert process.stop() == 0, "the TLS proxy did not stop cleanly on SIGTERM"
        # Refused handshakes (the plain-TCP readiness probe too) must leave nothing to wait for.
        assert time.monotonic() - started < 5, "the TLS proxy waited for connections it never made"


def client_config(proxy: ProxyProcess, certs: TlsCerts, who: str) -> dict[str, Any]:
    """confluent-kafka settings to reach the proxy over TLS as one client certificate."""
    return {
        "bootstrap.servers": proxy.bootstrap,
        "security.protocol": "SSL",
        "ssl.ca.location": str(certs.ca),
        "ssl.certificate.location": str(certs.cert(who)),
        "ssl.key.location": str(certs.key(who)),
        **QUIET,
    }


def create(config: dict[str, Any], topic: str) -> None:
    """Create a topic, raising the KafkaException of a refusal."""
    admin = AdminClient(config)
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)


def test_certificate_principals_are_enforced_and_audited(
    tls_proxy: ProxyProcess, tls_certs: TlsCerts, kafka: Any
) -> None:
    create(client_config(tls_proxy, tls_certs, "alice"), "alice.t1")
    with pytest.raises(KafkaException) as refused:
        create(client_config(tls_proxy, tls_certs, "bob"), "alice.t2")
    assert refused.value.args[0].code() == KafkaError.POLICY_VIOLATION

    broker = AdminClient({"bootstrap.servers": kafka.bootstrap_servers, **QUIET})
    topics = broker.list_topics(timeout=30).topics
    assert "alice.t1" in topics
    assert "alice.t2" not in topics

    decisions = {
        (e["topic"], e["principal"], e["decision"])
        for e in tls_proxy.audit_events()
        if e["event"] == "decision" and e["api"] == "CreateTopics"
    }
    assert decisions == {("alice.t1", "User:alice", "allowed"), ("alice.t2", "User:bob", "denied")}


def test_a_client_without_certificate_is_refused(
    tls_proxy: ProxyProcess, tls_certs: TlsCerts
) -> None:
    context = ssl.create_default_context(cafile=tls_certs.ca)
    api_versions = framed(request_header(18, 0, 1, "no-cert"))
    with (
        socket.create_connection(("127.0.0.1", BOOTSTRAP_PORT), timeout=10) as raw,
        context.wrap_socket(raw, server_hostname="127.0.0.1") as client,
    ):
        # TLS 1.3: the client's handshake completes before the server checks its certificate.
        try:
            client.sendall(api_versions)
            answer = client.recv(1)
        except (ssl.SSLError, ConnectionResetError, BrokenPipeError):
            answer = b""
    assert answer == b""
    assert tls_proxy.alive()


def test_records_flow_over_tls(tls_proxy: ProxyProcess, tls_certs: TlsCerts) -> None:
    alice = client_config(tls_proxy, tls_certs, "alice")
    create(alice, "alice.records")
    producer = Producer(alice)
    values = [f"record-{i}".encode() for i in range(5)]
    for value in values:
        producer.produce("alice.records", value)
    assert producer.flush(30) == 0

    consumer = Consumer({**alice, "group.id": "tls-group", "auto.offset.reset": "earliest"})
    consumer.subscribe(["alice.records"])
    consumed: list[bytes] = []
    deadline = time.monotonic() + 30
    try:
        while len(consumed) < len(values) and time.monotonic() < deadline:
            for msg in consumer.consume(10, timeout=1):
                assert msg.error() is None, msg.error()
                consumed.append(msg.value() or b"")
    finally:
        consumer.close()
    assert consumed == values
