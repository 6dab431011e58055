"""TLS from the proxy to the brokers: SSL, SASL_SSL and mTLS listeners of the real cluster.

Three clients (Java AdminClient, confluent-kafka, kafka-python) go through the proxy; what
they are told is checked against the brokers themselves, and records make a round trip.
Misconfigured TLS must fail with a message that names the setting to change.
"""

from __future__ import annotations

import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from confluent_kafka import Consumer, Producer
from kafka import KafkaConsumer, KafkaProducer

from harness.proxy_process import ProxyProcess
from harness.throwaway_ca import ThrowawayCa
from tests.integration.admin_clients import (
    BrokerView,
    NewTopicSpec,
    Sasl,
    admin_clients,
    close_all,
)
from tests.integration.test_admin_clients import until

pytestmark = pytest.mark.integration

BOOTSTRAP_PORT = 31600
NODE_PORT_BASE = 31700
# The misconfigured proxies, while a scenario's proxy may still hold the ports above.
FAILING_PORTS = (32200, 32300)
QUIET = {"log_level": 3}
POLICY = """\
version: 1
rules:
  - name: alice-space
    match: {topic_prefix: alice., except_principals: ['User:alice']}
    deny: true
    message: only alice creates alice.* topics
  - name: no-scratch
    match: {topic_prefix: scratch.}
    deny: true
    message: scratch topics are not allowed here
"""


@dataclass(frozen=True)
class Scenario:
    """How the proxy reaches the brokers, and how clients reach the proxy."""

    name: str
    upstream: str  # the LocalKafka property holding the listener's bootstrap servers
    client_cert: bool = False  # mTLS to the brokers
    sasl: bool = False  # clients speak SASL_SSL to the proxy; cluster state logs in as admin
    extra: dict[str, Any] = field(default_factory=dict)


SCENARIOS = [
    Scenario("ssl", "ssl_bootstrap_servers"),
    Scenario("sasl_ssl", "sasl_ssl_bootstrap_servers", sasl=True),
    Scenario("mtls", "mtls_bootstrap_servers", client_cert=True),
]


@pytest.fixture(scope="module")
def listener_ca(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """A second throwaway CA: it signs the proxy's own listener certificate."""
    ca = ThrowawayCa(tmp_path_factory.mktemp("ca"), "listener-ca")
    ca.issue("listener", server=True)
    return ca


def upstream_tls(kafka: Any, client_cert: bool) -> dict[str, Any]:
    """The upstream.tls section for the cluster's throwaway CA (and client certificate)."""
    files = kafka.tls_files
    tls: dict[str, Any] = {"ca_file": str(files.ca)}
    if client_cert:
        tls |= {"cert_file": str(files.client_cert), "key_file": str(files.client_key)}
    return tls


@pytest.fixture(scope="module", params=SCENARIOS, ids=lambda s: s.name)
def scenario_proxy(
    request: pytest.FixtureRequest,
    kafka: Any,
    listener_ca: Any,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[Scenario, ProxyProcess]]:
    """The proxy in front of one TLS listener of the cluster, enforcing POLICY."""
    scenario: Scenario = request.param
    workdir = tmp_path_factory.mktemp(f"upstream-{scenario.name}")
    (workdir / "policy.yaml").write_text(POLICY)
    extra: dict[str, Any] = {
        "upstream": {
            "bootstrap_servers": getattr(kafka, scenario.upstream).split(","),
            "tls": upstream_tls(kafka, scenario.client_cert),
        },
        "policy": {"file": str(workdir / "policy.yaml")},
        "audit": {"file": str(workdir / "audit.jsonl")},
    }
    if scenario.sasl:
        (workdir / "admin.password").write_text("admin-secret\n")
        extra["cluster_state"] = {
            "sasl": {
                "mechanism": "SCRAM-SHA-512",
                "username": "admin",
                "password_file": str(workdir / "admin.password"),
            }
        }
        extra["listeners"] = {
            "bind_host": "127.0.0.1",
            "advertised_host": "127.0.0.1",
            "bootstrap_port": BOOTSTRAP_PORT,
            "broker_port_base": NODE_PORT_BASE,
            "tls": {
                "cert_file": str(listener_ca.directory / "listener.pem"),
                "key_file": str(listener_ca.directory / "listener.key"),
            },
        }
    process = ProxyProcess(workdir, "", BOOTSTRAP_PORT, NODE_PORT_BASE, extra=extra)
    process.audit_path = workdir / "audit.jsonl"
    try:
        yield scenario, process
    finally:
        assert process.stop() == 0
    assert "admin-secret" not in process.log_text()


def client_settings(scenario: Scenario, listener_ca: Any, user: str) -> dict[str, dict[str, Any]]:
    """Per-client settings to reach the proxy: plaintext, or SASL_SSL as `user`."""
    if not scenario.sasl:
        return {"java": {}, "confluent": {}, "kafka-python": {}}
    ca = str(listener_ca.cert)
    return {
        "java": {
            "security.protocol": "SASL_SSL",
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": ca,
        },
        "confluent": {"security.protocol": "SASL_SSL", "ssl.ca.location": ca},
        "kafka-python": {"security_protocol": "SASL_SSL", "ssl_cafile": ca},
    }


def sasl_for(scenario: Scenario, user: str) -> Sasl | None:
    """SCRAM credentials of a user of the local cluster, in the SASL scenario."""
    return Sasl("SCRAM-SHA-512", user, f"{user}-secret") if scenario.sasl else None


def test_admin_requests_are_judged_over_tls(
    scenario_proxy: tuple[Scenario, ProxyProcess], kafka: Any, listener_ca: Any
) -> None:
    scenario, proxy = scenario_proxy
    broker = BrokerView(kafka.bootstrap_servers)
    user = "alice" if scenario.sasl else "anyone"
    clients = admin_clients(
        proxy.bootstrap,
        kafka.classpath(),
        extra=client_settings(scenario, listener_ca, user),
        sasl=sasl_for(scenario, user),
    )
    try:
        for name, client in clients.items():
            ok = f"orders.{scenario.name}-{name}"
            denied = f"scratch.{scenario.name}-{name}"
            outcomes = {
                o.topic: o
                for o in client.create_topics([NewTopicSpec(ok, 3, 3), NewTopicSpec(denied, 3, 3)])
            }
            assert outcomes[ok].ok, (name, outcomes[ok])
            assert outcomes[denied].error == "POLICY_VIOLATION", (name, outcomes[denied])
            assert "scratch topics are not allowed here" in (outcomes[denied].message or "")
            # Both went in one request: once the allowed one shows, a forwarded denial would too.
            assert len(until(lambda: broker.describe(ok)).partitions) == 3  # noqa: B023
            assert broker.describe(denied) is None, name
            deleted = client.delete_topics([ok])
            assert deleted[0].ok, (name, deleted)
    finally:
        close_all(clients.values())


@pytest.mark.parametrize("scenario_proxy", [SCENARIOS[1]], indirect=True, ids=["sasl_ssl"])
def test_the_principal_still_decides_over_sasl_ssl(
    scenario_proxy: tuple[Scenario, ProxyProcess], kafka: Any, listener_ca: Any
) -> None:
    scenario, proxy = scenario_proxy
    broker = BrokerView(kafka.bootstrap_servers)
    results = {}
    for user in ("alice", "bob"):
        clients = admin_clients(
            proxy.bootstrap,
            kafka.classpath(),
            extra=client_settings(scenario, listener_ca, user),
            sasl=sasl_for(scenario, user),
        )
        try:
            for name, client in clients.items():
                topic = f"alice.by-{user}-{name}"
                results[topic] = client.create_topics([NewTopicSpec(topic, 3, 3)])[0]
        finally:
            close_all(clients.values())
    for topic, outcome in results.items():
        if ".by-alice-" in topic:
            assert outcome.ok, outcome
            until(lambda: broker.describe(topic))  # noqa: B023
    # bob asked after alice: his topics would show by now had the proxy let them through.
    for topic, outcome in results.items():
        if ".by-bob-" in topic:
            assert outcome.error == "POLICY_VIOLATION", outcome
            assert broker.describe(topic) is None
    audited = {
        (e["topic"], e["principal"], e["decision"])
        for e in proxy.audit_events()
        if e["event"] == "decision" and e["topic"].startswith("alice.by-")
    }
    assert audited == {
        (t, f"User:{'alice' if '.by-alice-' in t else 'bob'}", "allowed" if o.ok else "denied")
        for t, o in results.items()
    }


def test_records_make_a_round_trip_over_tls(
    scenario_proxy: tuple[Scenario, ProxyProcess], kafka: Any, listener_ca: Any
) -> None:
    scenario, proxy = scenario_proxy
    topic = f"orders.records-{scenario.name}"
    settings = client_settings(scenario, listener_ca, "alice")
    sasl = sasl_for(scenario, "alice")
    clients = admin_clients(proxy.bootstrap, kafka.classpath(), extra=settings, sasl=sasl)
    try:
        assert clients["confluent"].create_topics([NewTopicSpec(topic, 3, 3)])[0].ok
    finally:
        close_all(clients.values())
    confluent = {"bootstrap.servers": proxy.bootstrap, **settings["confluent"], **QUIET}
    python = {"bootstrap_servers": proxy.bootstrap, **settings["kafka-python"]}
    if sasl is not None:
        confluent |= {
            "sasl.mechanisms": sasl.mechanism,
            "sasl.username": sasl.username,
            "sasl.password": sasl.password,
        }
        python |= {
            "sasl_mechanism": sasl.mechanism,
            "sasl_plain_username": sasl.username,
            "sasl_plain_password": sasl.password,
        }
    sent = [f"confluent-{i}".encode() for i in range(5)]
    producer = Producer(confluent)
    for value in sent:
        producer.produce(topic, value, key=value)
    assert producer.flush(30) == 0
    kp_sent = [f"kafka-python-{i}".encode() for i in range(5)]
    kp_producer = KafkaProducer(**python)
    for value in kp_sent:
        kp_producer.send(topic, value, key=value)
    kp_producer.flush(30)
    kp_producer.close()

    consumer = Consumer(
        {**confluent, "group.id": f"g-{uuid.uuid4()}", "auto.offset.reset": "earliest"}
    )
    consumer.subscribe([topic])
    got: list[bytes] = []
    try:
        for _ in range(60):
            message = consumer.poll(1.0)
            if message is not None and message.error() is None:
                got.append(message.value())
            if len(got) == len(sent) + len(kp_sent):
                break
    finally:
        consumer.close()
    assert sorted(got) == sorted(sent + kp_sent)

    kp_consumer = KafkaConsumer(
        topic, auto_offset_reset="earliest", consumer_timeout_ms=20000, **python
    )
    kp_got: list[bytes] = []
    try:
        # Iteration ends after consumer_timeout_ms without a record: stop once all are in.
        for record in kp_consumer:
            kp_got.append(record.value)
            if len(kp_got) == len(sent) + len(kp_sent):
                break
    finally:
        kp_consumer.close()
    assert sorted(kp_got) == sorted(sent + kp_sent)


# --- misconfiguration: each failure names the setting --------------------------------------


def start_failing(
    workdir: Path, kafka: Any, upstream: list[str], tls: dict[str, Any] | None
) -> ProxyProcess:
    """A proxy that is expected to start but reach no broker."""
    extra: dict[str, Any] = {"upstream": {"bootstrap_servers": upstream}}
    if tls is not None:
        extra["upstream"]["tls"] = tls
    extra["upstream"]["connect_timeout_s"] = 5
    return ProxyProcess(workdir, "", *FAILING_PORTS, extra=extra)


def first_ssl_server(kafka: Any) -> str:
    """The SSL listener of the first broker."""
    return str(kafka.ssl_bootstrap_servers.split(",")[0])


@pytest.mark.parametrize(
    ("case", "setting"),
    [
        ("wrong CA", "upstream.tls.ca_file"),
        ("hostname mismatch", "upstream.tls.check_hostname"),
        ("no client certificate for an mTLS listener", "upstream.tls.cert_file"),
        ("plaintext to an SSL listener", "set upstream.tls"),
        ("TLS to a plaintext listener", "Remove upstream.tls"),
    ],
)
def test_a_broken_tls_setup_names_the_setting(
    case: str, setting: str, kafka: Any, listener_ca: Any, tmp_path: Path
) -> None:
    ssl_server = first_ssl_server(kafka)
    upstream, tls = {
        "wrong CA": ([ssl_server], {"ca_file": str(listener_ca.cert)}),
        "hostname mismatch": (
            [ssl_server.replace("127.0.0.1", "localhost")],
            upstream_tls(kafka, False),
        ),
        "no client certificate for an mTLS listener": (
            [kafka.mtls_bootstrap_servers.split(",")[0]],
            upstream_tls(kafka, False),
        ),
        "plaintext to an SSL listener": ([ssl_server], None),
        "TLS to a plaintext listener": (
            [kafka.bootstrap_servers.split(",")[0]],
            upstream_tls(kafka, False),
        ),
    }[case]
    proxy = start_failing(tmp_path, kafka, upstream, tls)
    try:
        assert "no broker answered at start" in proxy.log_text()
        assert setting in proxy.log_text(), proxy.log_text()
    finally:
        assert proxy.stop() == 0


def test_check_hostname_false_accepts_a_certificate_for_another_name(
    kafka: Any, tmp_path: Path
) -> None:
    tls = {**upstream_tls(kafka, False), "check_hostname": False}
    server = first_ssl_server(kafka).replace("127.0.0.1", "localhost")
    proxy = start_failing(tmp_path, kafka, [server], tls)
    try:
        assert "no broker answered at start" not in proxy.log_text()
        assert "broker address learned" in proxy.log_text()
    finally:
        assert proxy.stop() == 0


def test_an_expired_client_certificate_stops_run(
    kafka: Any, listener_ca: Any, tmp_path: Path
) -> None:
    expired = listener_ca.issue("expired-client", server=False, expired=True)
    config = tmp_path / "proxy.yaml"
    tls = {**upstream_tls(kafka, False), "cert_file": str(expired.cert)}
    tls["key_file"] = str(expired.key)
    config.write_text(
        yaml.safe_dump({"upstream": {"bootstrap_servers": [first_ssl_server(kafka)], "tls": tls}})
    )
    run = subprocess.run(
        [str(Path(sys.executable).parent / "kafka-policy-proxy"), "run", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert run.returncode == 2, run.stderr
    assert f"upstream.tls.cert_file: {expired.cert}: the certificate expired on" in run.stderr
