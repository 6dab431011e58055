"""One Kafka client properties file for every connection the proxy makes to a secured cluster.

The cluster has no plaintext listener at all (tests/integration/secured_cluster.py): SSL with a
client certificate required, and SASL_SSL (SCRAM, PLAIN) with a client certificate required
too. A proxy in front of each listener gets `upstream.client_properties` only: PEM stores for
SSL, PKCS#12 stores (keytool, openssl) with SCRAM for SASL_SSL, secrets through ${file:},
${dir:} (a Secret volume) and ${env:}. For each: an allowed create and an allowed alter (both
judged on facts the cluster-state reader read), a denied create and a denied alter, each
checked on the broker itself; the decisions reach the audit topic (read from the broker);
`snapshot --command-config` reads the cluster. `pipeline ingest --topic --command-config`
reads the SSL proxy's audit topic into a lake (Spark: once, on the SSL cluster only).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
)

from harness.proxy_process import ProxyProcess
from tests.integration.secured_cluster import (
    CLIENT_KEY_PASSWORD,
    SecuredCluster,
    start_secured_cluster,
)

pytestmark = pytest.mark.integration

PORT_BASE = 18600  # the node: 18600-18603
PROXY_PORTS = {"ssl": 18610, "sasl_ssl": 18620}  # bootstrap; node 1 is the next port
BIN = Path(sys.executable).parent
DAY_MS = 24 * 3600 * 1000
POLICY = """\
version: 1
rules:
  - name: no-scratch
    match: {topic_prefix: scratch.}
    deny: true
    message: scratch topics are not allowed
  - name: retention-bounds
    configs:
      retention.ms: {min: 1h, max: 30d}
"""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecuredCluster]:
    secured = start_secured_cluster(tmp_path_factory.mktemp("secured") / "cluster", PORT_BASE)
    try:
        secured.create_topics("audit-ssl", "audit-sasl-ssl")
        yield secured
    finally:
        secured.stop()


def pem_properties(cluster: SecuredCluster, directory: Path) -> Path:
    """SSL with PEM stores: a keystore file (key and chain), its key password in a file."""
    keystore = directory / "client.keystore.pem"
    keystore.write_bytes(cluster.client_key.read_bytes() + cluster.client_cert.read_bytes())
    secrets = directory / "secrets.properties"
    secrets.write_text(f"key.password={CLIENT_KEY_PASSWORD}\n")
    path = directory / "client.properties"
    path.write_text(
        "# the SSL listener: no SASL, a client certificate\n"
        "security.protocol=SSL\n"
        "ssl.truststore.type=PEM\n"
        f"ssl.truststore.location={cluster.ca.cert}\n"
        "ssl.keystore.type=PEM\n"
        f"ssl.keystore.location={keystore}\n"
        f"ssl.key.password=${{file:{secrets}:key.password}}\n"
        "client.id=kafka-policy-proxy\n"
    )
    return path


def pkcs12_properties(
    cluster: SecuredCluster, directory: Path, mechanism: str, password_ref: str
) -> Path:
    """SASL_SSL with PKCS#12 stores made by keytool and openssl, as admin."""
    truststore, keystore = directory / "truststore.p12", directory / "keystore.p12"
    if not truststore.exists():
        keytool, openssl = shutil.which("keytool"), shutil.which("openssl")
        assert keytool and openssl, "keytool (the JDK) and openssl are needed on PATH"
        trust = ["-importcert", "-noprompt", "-storetype", "PKCS12", "-alias", "ca"]
        store = ["-keystore", str(truststore), "-storepass", "trust-secret"]
        subprocess.run([keytool, *trust, *store, "-file", str(cluster.ca.cert)], check=True)
        key = ["-inkey", str(cluster.client_key), "-passin", f"pass:{CLIENT_KEY_PASSWORD}"]
        out = ["-out", str(keystore), "-passout", "pass:store-secret", "-name", "client"]
        subprocess.run(
            [openssl, "pkcs12", "-export", "-in", str(cluster.client_cert), *key, *out],
            check=True,
        )
    module = "plain.PlainLoginModule" if mechanism == "PLAIN" else "scram.ScramLoginModule"
    path = directory / f"client-{mechanism}.properties"
    path.write_text(
        "security.protocol=SASL_SSL\n"
        f"sasl.mechanism={mechanism}\n"
        f"sasl.jaas.config=org.apache.kafka.common.security.{module} required \\\n"
        f'    username="admin" password="{password_ref}";\n'
        "ssl.truststore.type=PKCS12\n"
        f"ssl.truststore.location={truststore}\n"
        "ssl.truststore.password=trust-secret\n"
        "ssl.keystore.type=PKCS12\n"
        f"ssl.keystore.location={keystore}\n"
        "ssl.keystore.password=store-secret\n"
        "ssl.key.password=store-secret\n"
    )
    return path


def cli(
    *args: str, env: dict[str, str] | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """Run `kafka-policy-proxy ARGS` as users run it."""
    return subprocess.run(
        [str(BIN / "kafka-policy-proxy"), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
        check=False,
    )


@dataclass
class Scenario:
    """One proxy in front of one listener, and how clients reach that proxy."""

    name: str
    proxy: ProxyProcess
    properties: Path
    upstream: str
    client: dict[str, Any]  # librdkafka settings for clients of the proxy
    audit_topic: str


@pytest.fixture(scope="module", params=["ssl", "sasl_ssl"])
def scenario(
    request: pytest.FixtureRequest,
    cluster: SecuredCluster,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Scenario]:
    name: str = request.param
    workdir = tmp_path_factory.mktemp(f"client-props-{name}")
    (workdir / "policy.yaml").write_text(POLICY)
    if name == "ssl":
        properties = pem_properties(cluster, workdir)
        upstream, client = cluster.ssl_bootstrap, {}
    else:
        # A Kubernetes Secret volume: one file per key.
        (workdir / "secret").mkdir()
        (workdir / "secret" / "password").write_text("admin-secret")
        ref = f"${{dir:{workdir / 'secret'}:password}}"
        properties = pkcs12_properties(cluster, workdir, "SCRAM-SHA-512", ref)
        upstream = cluster.sasl_ssl_bootstrap
        # Clients log in themselves, through the proxy, which re-originates their TLS.
        client = {
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanisms": "SCRAM-SHA-256",
            "sasl.username": "alice",
            "sasl.password": "alice-secret",
        }
    audit_topic = f"audit-{name.replace('_', '-')}"
    port = PROXY_PORTS[name]
    extra = {
        "upstream": {"bootstrap_servers": [upstream], "client_properties": str(properties)},
        "policy": {"file": str(workdir / "policy.yaml")},
        "audit": {"file": str(workdir / "audit.jsonl"), "kafka": {"topic": audit_topic}},
    }
    proxy = ProxyProcess(workdir, upstream, port, port, extra=extra)
    proxy.audit_path = workdir / "audit.jsonl"
    try:
        yield Scenario(name, proxy, properties, upstream, client, audit_topic)
    finally:
        assert proxy.stop() == 0
    log = proxy.log_text()
    for secret in ("admin-secret", "store-secret", "trust-secret", CLIENT_KEY_PASSWORD):
        assert secret not in log


def through_proxy(scenario: Scenario) -> AdminClient:
    return AdminClient(
        {"bootstrap.servers": scenario.proxy.bootstrap, "log_level": 3, **scenario.client}
    )


def retention(cluster: SecuredCluster, topic: str) -> str:
    """The topic's retention.ms as the broker itself has it."""
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    admin = AdminClient(cluster.direct())  # kept: its futures need it alive
    configs = admin.describe_configs([resource])[resource].result(30)
    return str(configs["retention.ms"].value)


def alter_retention(admin: AdminClient, topic: str, value_ms: int) -> None:
    entry = ConfigEntry("retention.ms", str(value_ms), incremental_operation=AlterConfigOpType.SET)
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[entry])
    admin.incremental_alter_configs([resource])[resource].result(30)


@pytest.fixture(scope="module")
def decided(scenario: Scenario, cluster: SecuredCluster) -> dict[str, Any]:
    """Two creates and two alters through the proxy; what the broker answered and holds."""
    admin = through_proxy(scenario)
    allowed, denied = f"ok.{uuid.uuid4().hex[:8]}", f"scratch.{uuid.uuid4().hex[:8]}"
    outcome: dict[str, Any] = {"allowed": allowed, "denied": denied}
    admin.create_topics([NewTopic(allowed, 1, 1)])[allowed].result(30)
    with pytest.raises(KafkaException) as refused:
        admin.create_topics([NewTopic(denied, 1, 1)])[denied].result(30)
    outcome["create_refusal"] = refused.value.args[0]
    alter_retention(admin, allowed, 2 * DAY_MS)
    with pytest.raises(KafkaException) as too_long:
        alter_retention(admin, allowed, 90 * DAY_MS)
    outcome["alter_refusal"] = too_long.value.args[0]
    return outcome


def test_decisions_judged_on_the_clusters_facts(
    scenario: Scenario, cluster: SecuredCluster, decided: dict[str, Any]
) -> None:
    assert "scratch topics are not allowed" in decided["create_refusal"].str()
    assert "retention.ms" in decided["alter_refusal"].str()
    topics = AdminClient(cluster.direct()).list_topics(timeout=30).topics
    assert decided["allowed"] in topics and decided["denied"] not in topics
    # The allowed alter reached the broker; the denied one did not.
    assert retention(cluster, decided["allowed"]) == str(2 * DAY_MS)
    # Each was judged on facts read over the properties' TLS and login, none failed closed.
    events = scenario.proxy.audit_events()
    assert not [e for e in events if "[cluster-state]" in json.dumps(e)]


def audit_records(cluster: SecuredCluster, topic: str, at_least: int) -> list[dict[str, Any]]:
    """The audit topic's records, read from the broker directly."""
    consumer = Consumer(
        cluster.direct(**{"group.id": f"check-{uuid.uuid4().hex}", "enable.auto.commit": False})
    )
    consumer.assign([TopicPartition(topic, 0, 0)])
    records: list[dict[str, Any]] = []
    try:
        for _ in range(60):
            for message in consumer.consume(100, timeout=0.5):
                assert message.error() is None, message.error()
                records.append(json.loads(message.value()))
            if len(records) >= at_least:
                break
    finally:
        consumer.close()
    return records


def test_the_audit_topic_receives_the_decisions(
    scenario: Scenario, cluster: SecuredCluster, decided: dict[str, Any]
) -> None:
    records = audit_records(cluster, scenario.audit_topic, at_least=4)
    by_topic: dict[str, list[str]] = {}
    for record in records:
        data = record["data"]
        by_topic.setdefault(data.get("topic"), []).append(data["decision"])
    assert by_topic[decided["denied"]] == ["denied"]
    assert sorted(by_topic[decided["allowed"]]) == ["allowed", "allowed", "denied"]


def test_snapshot_reads_the_cluster_with_the_same_file(
    scenario: Scenario, decided: dict[str, Any], tmp_path: Path
) -> None:
    out = tmp_path / "snapshot.jsonl"
    done = cli(
        "snapshot",
        *("--bootstrap-server", scenario.upstream, "--command-config", str(scenario.properties)),
        *("--out", str(out)),
    )
    assert done.returncode == 0, done.stderr
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    topics = {line["name"]: line for line in lines if line["kind"] == "topic"}
    assert decided["denied"] not in topics
    assert topics[decided["allowed"]]["configs"]["retention.ms"] == str(2 * DAY_MS)


def test_snapshot_with_plain_and_the_password_from_the_environment(
    cluster: SecuredCluster, tmp_path: Path
) -> None:
    properties = pkcs12_properties(cluster, tmp_path, "PLAIN", "${env:KPP_TEST_ADMIN_PASSWORD}")
    command = ["snapshot", "--bootstrap-server", cluster.sasl_ssl_bootstrap]
    command += ["--command-config", str(properties), "--out", "-"]
    done = cli(*command, env={"KPP_TEST_ADMIN_PASSWORD": "admin-secret"})
    assert done.returncode == 0, done.stderr
    assert '"name":"audit-ssl"' in done.stdout
    # A wrong password: the broker refuses the login (exit 1), the file is fine.
    done = cli(*command, env={"KPP_TEST_ADMIN_PASSWORD": "wrong"})
    assert done.returncode == 1, done.stderr
    assert "SASL authentication failed" in done.stderr


# Spark costs about a minute a run: once, on the SSL listener.
@pytest.mark.parametrize("scenario", ["ssl"], indirect=True)
def test_ingest_reads_the_audit_topic_with_the_same_file(
    scenario: Scenario, decided: dict[str, Any], tmp_path: Path
) -> None:
    lake = tmp_path / "lake"
    done = cli(
        *("pipeline", "ingest", "--topic", scenario.audit_topic),
        *("--bootstrap-server", scenario.upstream, "--command-config", str(scenario.properties)),
        *("--lake", str(lake), "--once", "--master", "local[1]"),
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads(done.stdout)
    assert summary["lines"]["events"] >= 4, summary
    # No secret reaches Spark's output: the options are redacted or never printed.
    assert CLIENT_KEY_PASSWORD not in done.stdout + done.stderr
