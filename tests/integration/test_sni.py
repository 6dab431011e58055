"""SNI routing: one TLS port for bootstrap and every broker, with real clients and real names.

The proxy's certificate is a wildcard for *.kpp-sni.test. The Java clients resolve the names
through a hosts file of their own (-Djdk.net.hosts.file, via JAVA_TOOL_OPTIONS); kcat
(librdkafka) uses the system resolver, so the test adds the names to /etc/hosts (as root,
once, under a test-only domain; lines of others are never touched). Records go to a topic
with one partition led by each broker, and are read back from the brokers themselves.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import ssl
import subprocess
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from harness.proxy_process import ProxyProcess
from harness.throwaway_ca import ThrowawayCa
from tests.integration.admin_clients.java_admin import JavaAdmin
from tests.integration.admin_clients.model import NewTopicSpec

pytestmark = pytest.mark.integration

DOMAIN = "kpp-sni.test"
BOOTSTRAP_NAME = f"bootstrap.{DOMAIN}"
SNI_PORT = 18720
BOOTSTRAP_PORT = 18710
NODE_PORT_BASE = 18710  # the per-port listeners stay: nodes 1..3 on 18711..18713
ADMIN_PORT = 18731
POLICY = """\
version: 1
rules:
  - name: no-scratch
    match: {topic_prefix: scratch.}
    deny: true
    message: scratch topics are not allowed here
"""
HOSTS_MARK = "# kafka-policy-proxy tests/integration/test_sni.py"


def broker_name(node: int) -> str:
    """The SNI name of a node, as the pattern makes it."""
    return f"broker-{node}.{DOMAIN}"


@dataclass(frozen=True)
class Sni:
    """The proxy with its SNI port, and what clients need to reach it by name."""

    proxy: ProxyProcess
    ca: Path
    nodes: list[int]
    hosts_file: Path  # for the JVM
    work: Path

    @property
    def bootstrap(self) -> str:
        """bootstrap.servers for the SNI port."""
        return f"{BOOTSTRAP_NAME}:{SNI_PORT}"


def add_to_etc_hosts(names: list[str]) -> None:
    """Map the names to 127.0.0.1 in /etc/hosts, idempotently (kcat reads no other file)."""
    hosts = Path("/etc/hosts")
    present = hosts.read_text()
    missing = [n for n in names if not any(n in line.split() for line in present.splitlines())]
    if not missing:
        return
    if not os.access(hosts, os.W_OK):
        pytest.fail(
            f"kcat resolves through the system: add '127.0.0.1 {' '.join(missing)}' to "
            "/etc/hosts (the test does it itself when run as root)"
        )
    with hosts.open("a") as out:
        out.write(f"127.0.0.1 {' '.join(missing)} {HOSTS_MARK}\n")


@pytest.fixture(scope="module")
def sni(kafka: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sni]:
    """A proxy with an SNI port, its wildcard certificate and a policy."""
    work = tmp_path_factory.mktemp("sni")
    ca = ThrowawayCa(work / "ca", "sni-ca")
    issued = ca.issue("wildcard", server=True, dns=[f"*.{DOMAIN}"])
    (work / "policy.yaml").write_text(POLICY)
    nodes = sorted(kafka.broker_addresses)
    names = [BOOTSTRAP_NAME, *(broker_name(n) for n in nodes)]
    hosts_file = work / "hosts"
    hosts_file.write_text("".join(f"127.0.0.1 {name}\n" for name in names))
    add_to_etc_hosts(names)
    proxy = ProxyProcess(
        work,
        kafka.bootstrap_servers,
        BOOTSTRAP_PORT,
        NODE_PORT_BASE,
        extra={
            "listeners": {
                "tls": {"cert_file": str(issued.cert), "key_file": str(issued.key)},
                "sni": {
                    "bootstrap_address": f"{BOOTSTRAP_NAME}:{SNI_PORT}",
                    "advertised_broker_address_pattern": f"broker-$(nodeId).{DOMAIN}",
                },
            },
            "admin": {"port": ADMIN_PORT},
            "policy": {"file": str(work / "policy.yaml")},
            "audit": {"file": str(work / "audit.jsonl")},
        },
    )
    proxy.audit_path = work / "audit.jsonl"
    try:
        yield Sni(proxy, ca.cert, nodes, hosts_file, work)
    finally:
        assert proxy.stop() == 0


@pytest.fixture(scope="module")
def topic(kafka: Any, sni: Sni) -> str:
    """A topic with one partition per broker, each led by a different broker."""
    name = f"sni-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap_servers})
    assignment = [[node] for node in sni.nodes]
    admin.create_topics([NewTopic(name, len(assignment), replica_assignment=assignment)])[
        name
    ].result(30)
    return name


def kcat(sni: Sni, *args: str, stdin: str | None = None) -> str:
    """Run kcat against the SNI port over TLS; fail with the way to install it if missing."""
    if shutil.which("kcat") is None:
        pytest.fail("kcat is not installed: apt-get install -y kcat (.ci/run does it)")
    done = subprocess.run(
        [
            "kcat",
            "-b",
            sni.bootstrap,
            "-X",
            "security.protocol=SSL",
            "-X",
            f"ssl.ca.location={sni.ca}",
            *args,
        ],
        check=False,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def on_the_brokers(kafka: Any, topic: str, partitions: int) -> dict[int, list[str]]:
    """Every record of the topic, per partition, read from the brokers directly."""
    consumer = Consumer(
        {"bootstrap.servers": kafka.bootstrap_servers, "group.id": f"check-{uuid.uuid4().hex}"}
    )
    try:
        found: dict[int, list[str]] = {p: [] for p in range(partitions)}
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p))[1] for p in found}
        while sum(len(v) for v in found.values()) < sum(ends.values()):
            message = consumer.poll(10)
            assert message is not None, f"records missing: have {found}, expected {ends}"
            assert message.error() is None
            found[message.partition()].append(message.value().decode())
        return found
    finally:
        consumer.close()


def test_kcat_sees_broker_names_and_round_trips_through_every_broker(
    sni: Sni, topic: str, kafka: Any
) -> None:
    listing = kcat(sni, "-L")  # the command docs/operations.md shows
    for node in sni.nodes:
        assert f"broker {node} at {broker_name(node)}:{SNI_PORT}" in listing
    metadata = json.loads(kcat(sni, "-L", "-J", "-t", topic))
    advertised = {b["id"]: b["name"] for b in metadata["brokers"]}
    assert advertised == {n: f"{broker_name(n)}:{SNI_PORT}" for n in sni.nodes}
    leaders = {p["partition"]: p["leader"] for p in metadata["topics"][0]["partitions"]}
    assert sorted(leaders.values()) == sni.nodes  # each broker leads one partition
    for partition in leaders:
        lines = "".join(f"kcat-{partition}-{i}\n" for i in range(5))
        kcat(sni, "-P", "-t", topic, "-p", str(partition), stdin=lines)
    read = kcat(sni, "-C", "-t", topic, "-o", "beginning", "-e", "-f", "%p %s\n")
    assert sorted(read.splitlines()) == sorted(
        f"{p} kcat-{p}-{i}" for p in leaders for i in range(5)
    )
    stored = on_the_brokers(kafka, topic, len(leaders))
    assert {p: sorted(v) for p, v in stored.items() if v} == {
        p: [f"kcat-{p}-{i}" for i in range(5)] for p in leaders
    }


def java_properties(sni: Sni) -> dict[str, str]:
    """SSL client settings for the Java clients (hostname verification on, as by default)."""
    return {
        "security.protocol": "SSL",
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(sni.ca),
    }


@pytest.fixture
def java_names(sni: Sni, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every JVM started from here resolves the test names through the test's hosts file."""
    monkeypatch.setenv("JAVA_TOOL_OPTIONS", f"-Djdk.net.hosts.file={sni.hosts_file}")


@pytest.mark.usefixtures("java_names")
def test_java_clients_produce_consume_and_are_refused_a_create(
    sni: Sni, topic: str, kafka: Any
) -> None:
    properties = sni.work / "client.properties"
    properties.write_text("".join(f"{k}={v}\n" for k, v in java_properties(sni).items()))
    common = ["--bootstrap-server", sni.bootstrap]
    values = [f"java-{i}" for i in range(30)]
    # Keyed, so that the default partitioner spreads them over the partitions (brokers).
    records = "".join(f"k{i}:{value}\n" for i, value in enumerate(values))
    produced = subprocess.run(
        kafka.tool_command(
            "kafka-console-producer",
            *common,
            "--producer.config",
            str(properties),
            "--topic",
            topic,
            *("--property", "parse.key=true", "--property", "key.separator=:"),
        ),
        input=records,
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert produced.returncode == 0, produced.stderr
    stored = on_the_brokers(kafka, topic, len(sni.nodes))
    assert sum(1 for values in stored.values() for v in values if v.startswith("java-")) == 30
    # More than one broker took java records.
    assert sum(1 for values in stored.values() if any(v.startswith("java-") for v in values)) > 1
    total = str(sum(len(values) for values in stored.values()))  # kcat's records too, if any
    consumed = subprocess.run(
        kafka.tool_command(
            "kafka-console-consumer",
            *common,
            *("--topic", topic, "--from-beginning", "--max-messages", total),
            *("--consumer.config", str(properties), "--timeout-ms", "60000"),
        ),
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert consumed.returncode == 0, consumed.stderr
    java_records = [line for line in consumed.stdout.splitlines() if line.startswith("java-")]
    assert sorted(java_records) == sorted(values)

    admin = JavaAdmin(sni.bootstrap, kafka.classpath(), java_properties(sni))
    try:
        denied = f"scratch.sni-{uuid.uuid4().hex[:6]}"
        allowed = f"sni-java-{uuid.uuid4().hex[:6]}"
        outcomes = admin.create_topics([NewTopicSpec(denied, 1, 1), NewTopicSpec(allowed, 1, 1)])
        by_topic = {o.topic: o for o in outcomes}
        assert not by_topic[denied].ok
        assert by_topic[denied].error == "POLICY_VIOLATION"
        assert "scratch topics are not allowed here" in (by_topic[denied].message or "")
        assert by_topic[allowed].ok
    finally:
        admin.close()
    brokers = AdminClient({"bootstrap.servers": kafka.bootstrap_servers})
    names = set(brokers.list_topics(timeout=30).topics)
    assert allowed in names and denied not in names
    decisions = {e["topic"]: e["decision"] for e in sni.proxy.audit_events()}
    assert decisions[denied] == "denied" and decisions[allowed] == "allowed"


def refused_handshake(server_name: str | None) -> ssl.SSLError:
    """The error of a TLS handshake on the SNI port asking for `server_name` (None: no SNI)."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    with (
        socket.create_connection(("127.0.0.1", SNI_PORT), timeout=10) as raw,
        pytest.raises(ssl.SSLError) as refused,
    ):
        context.wrap_socket(raw, server_hostname=server_name)
    return refused.value


def metric_lines(name: str) -> list[str]:
    """The lines of a metric family from /metrics."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{ADMIN_PORT}/metrics", timeout=5).read()
    return [line for line in text.decode().splitlines() if line.startswith(name)]


@pytest.mark.parametrize(
    ("server_name", "reason"),
    [
        (None, "no_sni"),
        (f"broker-99.{DOMAIN}", "unknown_name"),
        ("kafka.example.com", "unknown_name"),
    ],
)
def test_a_hello_that_routes_nowhere_gets_unrecognized_name(
    sni: Sni, server_name: str | None, reason: str
) -> None:
    error = refused_handshake(server_name)
    assert "UNRECOGNIZED_NAME" in str(error.reason)
    assert any(f'reason="{reason}"' in line for line in metric_lines("kpp_sni_refused_total"))
    assert "routes nowhere" in sni.proxy.log_text()


def test_the_per_port_listeners_still_serve_beside_the_sni_port(sni: Sni) -> None:
    context = {"bootstrap.servers": sni.proxy.bootstrap, "security.protocol": "SSL"}
    admin = AdminClient(context | {"ssl.ca.location": str(sni.ca)})
    brokers = admin.list_topics(timeout=30).brokers
    assert {b.id: (b.host, b.port) for b in brokers.values()} == {
        n: ("127.0.0.1", NODE_PORT_BASE + n) for n in sni.nodes
    }
