"""PROXY protocol behind a real load balancer: HAProxy (send-proxy, send-proxy-v2) in front of
the proxy, in front of the real cluster. The client binds 127.0.0.2, HAProxy reaches the proxy
from 127.0.0.5, and the proxy must name 127.0.0.2 in its audit; straight in, without the
header, a connection is closed."""

from __future__ import annotations

import socket
import struct
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaConsumer, KafkaProducer
from kafka.net.inet import KafkaNetSocket
from prometheus_client.parser import text_string_to_metric_families

from harness.haproxy import HAProxy
from harness.proxy_process import ProxyProcess
from tests.integration.admin_clients import BrokerView, KafkaPythonAdmin, NewTopicSpec

pytestmark = pytest.mark.integration

# This part's port range: 18750-18799.
BOOTSTRAP_PORT, NODE_PORT_BASE, ADMIN_PORT = 18751, 18760, 18799
PROXY_HOST = "127.0.0.1"  # where the proxy listens
BALANCER = "127.0.0.3"  # where HAProxy listens, and what the proxy advertises
BALANCER_SOURCE = "127.0.0.5"  # where HAProxy connects to the proxy from
CLIENT = "127.0.0.2"  # where the client connects from
POLICY = """\
version: 1
rules:
  - name: no-scratch
    match: {topic_prefix: scratch.}
    deny: true
    message: scratch topics are not allowed
"""


class _BoundSocket(KafkaNetSocket):
    """kafka-python's socket factory for `proxy_url="bind://ADDRESS"`: bind before connecting,
    so the client's connections come from ADDRESS (kafka-python has no setting of its own)."""

    SCHEMES = ("bind",)

    def __init__(self, proxy_url: str | None = None) -> None:
        super().__init__(proxy_url)
        self._address = (proxy_url or "bind://").removeprefix("bind://")

    def socket(self, *args: Any, **kwargs: Any) -> socket.socket:
        sock = socket.socket(*args, **kwargs)
        sock.bind((self._address, 0))
        return sock


FROM_CLIENT = {"proxy_url": f"bind://{CLIENT}"}


@pytest.fixture(scope="module")
def proxy(kafka: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProxyProcess]:
    """An enforcing proxy whose every listener requires the PROXY header."""
    workdir = tmp_path_factory.mktemp("proxy-protocol")
    (workdir / "policy.yaml").write_text(POLICY)
    process = ProxyProcess(
        workdir,
        kafka.bootstrap_servers,
        BOOTSTRAP_PORT,
        NODE_PORT_BASE,
        extra={
            "listeners": {
                "bind_host": PROXY_HOST,
                "advertised_host": BALANCER,
                "proxy_protocol": "required",
            },
            "policy": {"file": str(workdir / "policy.yaml"), "watch": False},
            "audit": {"file": str(workdir / "audit.jsonl")},
            "admin": {"bind_host": "127.0.0.1", "port": ADMIN_PORT},
        },
    )
    process.audit_path = workdir / "audit.jsonl"
    try:
        yield process
    finally:
        assert process.stop() == 0


@pytest.fixture(params=[1, 2], ids=["send-proxy", "send-proxy-v2"])
def balancer(
    request: pytest.FixtureRequest, proxy: ProxyProcess, kafka: Any, tmp_path: Path
) -> Iterator[HAProxy]:
    ports = [BOOTSTRAP_PORT, *(proxy.node_port(n) for n in kafka.broker_addresses)]
    haproxy = HAProxy(
        tmp_path,
        listen=BALANCER,
        target=PROXY_HOST,
        source=BALANCER_SOURCE,
        ports=ports,
        version=request.param,
    )
    try:
        yield haproxy
    finally:
        haproxy.stop()


def rejected(reason: str) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{ADMIN_PORT}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    return sum(
        s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == "kpp_proxy_protocol_rejected_total" and s.labels == {"reason": reason}
    )


def test_a_client_through_haproxy_is_named_in_the_audit(
    balancer: HAProxy, proxy: ProxyProcess, kafka: Any
) -> None:
    bootstrap = f"{BALANCER}:{BOOTSTRAP_PORT}"
    topic = f"orders.pp-{uuid.uuid4().hex[:8]}"
    direct = AdminClient({"bootstrap.servers": kafka.bootstrap_servers, "log_level": 3})
    for future in direct.create_topics([NewTopic(topic, 3, 1)]).values():
        future.result(30)

    # Produce and consume through haproxy -> proxy -> brokers, from 127.0.0.2.
    producer = KafkaProducer(bootstrap_servers=bootstrap, **FROM_CLIENT)
    for i in range(20):
        producer.send(topic, f"m{i}".encode(), partition=i % 3)
    producer.flush(30)
    producer.close()
    consumer = KafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        auto_offset_reset="earliest",
        consumer_timeout_ms=15000,
        **FROM_CLIENT,
    )
    received = {record.value for _, record in zip(range(20), consumer, strict=False)}
    consumer.close()
    assert received == {f"m{i}".encode() for i in range(20)}

    # A denied create: refused, never made on the brokers, and audited with the client's
    # address as haproxy saw it (not haproxy's own, 127.0.0.5).
    denied = f"scratch.pp-{uuid.uuid4().hex[:8]}"
    admin = KafkaPythonAdmin(bootstrap, **FROM_CLIENT)
    [outcome] = admin.create_topics([NewTopicSpec(denied, 1, 1)])
    admin.close()
    assert not outcome.ok and outcome.error == "POLICY_VIOLATION", outcome
    assert BrokerView(kafka.bootstrap_servers).describe(denied) is None
    [event] = [e for e in proxy.audit_events() if e["topic"] == denied]
    assert event["decision"] == "denied"
    assert event["client"].rsplit(":", 1)[0] == CLIENT


def test_a_connection_straight_to_the_proxy_is_closed(
    balancer: HAProxy, proxy: ProxyProcess
) -> None:
    before = rejected("no_header")
    api_versions = struct.pack("!ihhih", 12, 18, 3, 1, 0) + b"\x00\x00"
    with socket.create_connection((PROXY_HOST, BOOTSTRAP_PORT), timeout=10) as sock:
        local = sock.getsockname()
        sock.sendall(api_versions)
        assert sock.recv(4096) == b""  # closed, unanswered
    assert rejected("no_header") == before + 1
    assert f'"peer": "{local[0]}:{local[1]}"' in proxy.log_text()
