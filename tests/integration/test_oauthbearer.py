"""OAUTHBEARER end to end: a cluster that accepts only OIDC tokens, and the proxy in front of it.

A test identity provider (harness/oauth_provider.py) issues short-lived RS256 JWTs with the
client-credentials grant; the broker checks them against its JWKS, with no clock skew allowed,
and limits every session to the token's lifetime (KIP-368). The proxy's own connections (the
cluster-state reader, the audit producer, `snapshot`) log in with a Kafka client properties
file; clients log in through the proxy with their own tokens (confluent-kafka's OIDC).
"""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewPartitions,
    NewTopic,
)

from harness.local_kafka import LocalKafka
from harness.oauth_provider import AUDIENCE, ISSUER, OAuthProvider
from harness.proxy_process import ProxyProcess
from kafka_policy_proxy.proxy.kafka_client.token_source import USER_AGENT

pytestmark = pytest.mark.integration

# This module's ports (18650-18699): the broker's listeners take 18650 + 8k (stride 8).
CLUSTER_PORT_BASE = 18650
PROVIDER_PORT = 18651
PROXY_PORTS = (18652, 18652)  # bootstrap, node base (node 1 on 18653)
PROXY_ADMIN = 18654
BAD_PROXY_PORTS = (18659, 18659)  # node 1 on 18660
BAD_PROXY_ADMIN = 18661
TOKEN_LIFETIME_S = 12
BIN = Path(sys.executable).parent
AUDIT_TOPIC = "kpp-audit"
CLIENTS = {"kpp-proxy": "proxy-secret", "kpp-snapshot": "snapshot-secret"} | {
    user: f"{user}-secret" for user in ("alice", "bob")
}
HANDLER = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginCallbackHandler"
MODULE = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"
POLICY = """\
version: 1
rules:
  - name: alice-space
    match: {topic_prefix: alice., except_principals: ['User:alice']}
    deny: true
    message: only alice creates alice.* topics
  - name: partition-bounds
    partitions: {min: 1, max: 6, max_increase: 1}
  - name: cleanup-immutable
    configs:
      cleanup.policy: {immutable: true}
"""


@pytest.fixture(scope="module")
def idp() -> Iterator[OAuthProvider]:
    """The identity provider: tokens for CLIENTS, each good for TOKEN_LIFETIME_S; `azp` is the
    client id, `sub` another name (uid-<client id>)."""
    provider = OAuthProvider(
        "127.0.0.1", PROVIDER_PORT, CLIENTS, lifetime_s=TOKEN_LIFETIME_S, sub_prefix="uid-"
    )
    provider.start()
    try:
        yield provider
    finally:
        provider.stop()


def broker_props(idp: OAuthProvider) -> dict[str, str]:
    """The SASL listeners take OAUTHBEARER only, validated against the JWKS."""
    props = {}
    for listener in ("listener.name.sasl_plaintext.", "listener.name.sasl_ssl."):
        props |= {
            f"{listener}sasl.enabled.mechanisms": "OAUTHBEARER",
            f"{listener}oauthbearer.sasl.jaas.config": f"{MODULE} required;",
            f"{listener}oauthbearer.sasl.server.callback.handler.class": (
                "org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler"
            ),
        }
    return props | {
        "sasl.oauthbearer.jwks.endpoint.url": idp.jwks_url,
        # The principal is the client id: the azp claim, not sub.
        "sasl.oauthbearer.sub.claim.name": "azp",
        "sasl.oauthbearer.expected.audience": AUDIENCE,
        "sasl.oauthbearer.expected.issuer": ISSUER,
        # An expired token is refused at once, and a session ends when its token expires.
        "sasl.oauthbearer.clock.skew.seconds": "0",
        "connections.max.reauth.ms": "600000",
    }


@pytest.fixture(scope="module")
def cluster(idp: OAuthProvider, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalKafka]:
    """One broker; its PLAINTEXT listener is the test's direct view of the outcome."""
    kafka = LocalKafka(
        tmp_path_factory.mktemp("oauth-kafka") / "cluster",
        brokers=1,
        port_base=CLUSTER_PORT_BASE,
        port_stride=8,
        light_jvm=True,
        broker_props=broker_props(idp),
        # Kafka 4 fetches from no URL that this system property does not list.
        jvm_opts=[f"-Dorg.apache.kafka.sasl.oauthbearer.allowed.urls={idp.jwks_url}"],
    )
    kafka.up(timeout=180)
    try:
        direct = AdminClient({"bootstrap.servers": kafka.bootstrap_servers})
        direct.create_topics([NewTopic(AUDIT_TOPIC, 1, 1)])[AUDIT_TOPIC].result(30)
        yield kafka
    finally:
        kafka.down()


def properties_file(
    directory: Path, idp: OAuthProvider, client: str, secret: str, ca: Path | None = None
) -> Path:
    """A Kafka client .properties file for `client`, its secret in a file of its own; over
    SASL_SSL if the cluster's `ca` is given."""
    secrets = directory / f"{client}.secrets"
    secrets.write_text(f"secret={secret}\n")
    path = directory / f"{client}.properties"
    tls = f"ssl.truststore.type=PEM\nssl.truststore.location={ca}\n" if ca else ""
    path.write_text(
        f"security.protocol={'SASL_SSL' if ca else 'SASL_PLAINTEXT'}\n"
        f"{tls}"
        "sasl.mechanism=OAUTHBEARER\n"
        f"sasl.oauthbearer.token.endpoint.url={idp.token_url}\n"
        f"sasl.login.callback.handler.class={HANDLER}\n"
        f'sasl.jaas.config={MODULE} required clientId="{client}" '
        f'clientSecret="${{file:{secrets}:secret}}" scope="kafka";\n'
        "config.providers=file\n"
        "config.providers.file.class=org.apache.kafka.common.config.provider.FileConfigProvider\n"
    )
    return path


def start_proxy(
    cluster: LocalKafka,
    idp: OAuthProvider,
    workdir: Path,
    *,
    secret: str,
    ports: tuple[int, int],
    admin: int,
) -> ProxyProcess:
    (workdir / "policy.yaml").write_text(POLICY)
    process = ProxyProcess(
        workdir,
        cluster.sasl_bootstrap_servers,
        *ports,
        extra={
            "upstream": {
                "bootstrap_servers": cluster.sasl_bootstrap_servers.split(","),
                "client_properties": str(properties_file(workdir, idp, "kpp-proxy", secret)),
            },
            "listeners": {
                # As the brokers: the policy's principals are User:<client id>.
                "oauthbearer_principal_claim": "azp",
            },
            "policy": {"file": str(workdir / "policy.yaml")},
            "admin": {"bind_host": "127.0.0.1", "port": admin},
            "audit": {
                "file": str(workdir / "audit.jsonl"),
                "kafka": {"topic": AUDIT_TOPIC, "linger_ms": 5, "delivery_timeout_s": 5},
            },
        },
    )
    process.audit_path = workdir / "audit.jsonl"
    return process


@pytest.fixture(scope="module")
def proxy(
    cluster: LocalKafka, idp: OAuthProvider, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ProxyProcess]:
    """The proxy in front of the OAUTHBEARER listener, logging in as kpp-proxy."""
    process = start_proxy(
        cluster,
        idp,
        tmp_path_factory.mktemp("oauth-proxy"),
        secret=CLIENTS["kpp-proxy"],
        ports=PROXY_PORTS,
        admin=PROXY_ADMIN,
    )
    try:
        yield process
    finally:
        assert process.stop() == 0
    assert CLIENTS["kpp-proxy"] not in process.log_text()


def client(bootstrap: str, idp: OAuthProvider, user: str) -> AdminClient:
    """A confluent-kafka admin client logging in as `user` with its own OIDC token."""
    return AdminClient(
        {
            "bootstrap.servers": bootstrap,
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "OAUTHBEARER",
            "sasl.oauthbearer.method": "oidc",
            "sasl.oauthbearer.token.endpoint.url": idp.token_url,
            "sasl.oauthbearer.client.id": user,
            "sasl.oauthbearer.client.secret": CLIENTS[user],
            "log_level": 3,
        }
    )


def outcome(future: Any) -> str:
    """'ok', or the Kafka error name a request's future failed with."""
    return failure(future)[0]


def failure(future: Any) -> tuple[str, str]:
    """('ok', ''), or the Kafka error name and message a request's future failed with."""
    try:
        future.result(30)
    except KafkaException as exc:
        return str(exc.args[0].name()), str(exc.args[0].str())
    return "ok", ""


def topic_config(cluster: LocalKafka, topic: str, key: str) -> str:
    direct = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    configs = direct.describe_configs([resource])[resource].result(30)
    return str(configs[key].value)


def partitions(cluster: LocalKafka, topic: str) -> int:
    direct = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    return len(direct.list_topics(topic, timeout=30).topics[topic].partitions)


def compaction(topic: str) -> ConfigResource:
    """An alter setting cleanup.policy=compact, which the policy refuses on an existing topic."""
    return ConfigResource(
        ConfigResource.Type.TOPIC,
        topic,
        incremental_configs=[
            ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.SET)
        ],
    )


def http_get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def metric(text: str, name: str) -> float:
    """The sum of a metric family's samples named exactly `name` (any labels)."""
    total = 0.0
    for line in text.splitlines():
        sample, _, value = line.rpartition(" ")
        if sample.split("{")[0] == name:
            total += float(value)
    return total


def test_decisions_through_the_proxy_use_the_principal_the_brokers_read_from_the_token(
    proxy: ProxyProcess, cluster: LocalKafka, idp: OAuthProvider
) -> None:
    topic = f"alice.orders-{uuid.uuid4().hex[:6]}"
    as_bob = client(proxy.bootstrap, idp, "bob")
    assert outcome(as_bob.create_topics([NewTopic(topic, 1, 1)])[topic]) == "POLICY_VIOLATION"
    as_alice = client(proxy.bootstrap, idp, "alice")
    assert outcome(as_alice.create_topics([NewTopic(topic, 1, 1)])[topic]) == "ok"
    assert partitions(cluster, topic) == 1


def test_decisions_on_the_current_state_read_it_with_the_proxys_token(
    proxy: ProxyProcess, cluster: LocalKafka, idp: OAuthProvider
) -> None:
    topic = f"orders.{uuid.uuid4().hex[:6]}"
    admin = client(proxy.bootstrap, idp, "alice")
    created = admin.create_topics([NewTopic(topic, 1, 1, config={"cleanup.policy": "delete"})])
    assert outcome(created[topic]) == "ok"
    # cleanup.policy is immutable: only its current value (read from the cluster) tells.
    resource = compaction(topic)
    error, message = failure(admin.incremental_alter_configs([resource])[resource])
    assert error == "POLICY_VIOLATION"
    assert "cleanup-immutable" in message, message
    assert topic_config(cluster, topic, "cleanup.policy") == "delete"
    # One more partition is allowed, three more are not: the current count decides.
    assert outcome(admin.create_partitions([NewPartitions(topic, 4)])[topic]) == (
        "POLICY_VIOLATION"
    )
    assert outcome(admin.create_partitions([NewPartitions(topic, 2)])[topic]) == "ok"
    assert partitions(cluster, topic) == 2
    status, _ = http_get(f"http://127.0.0.1:{PROXY_ADMIN}/readyz")
    assert status == 200


def audit_records(cluster: LocalKafka) -> list[dict[str, Any]]:
    """Every record on the audit topic, read from the broker directly."""
    consumer = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap_servers,
            "group.id": f"audit-{uuid.uuid4()}",
            "enable.partition.eof": True,
            "log_level": 3,
        }
    )
    consumer.assign([TopicPartition(AUDIT_TOPIC, 0, 0)])
    records = []
    try:
        while True:
            message = consumer.poll(10)
            assert message is not None, "the audit topic did not reach its end"
            if message.error():
                break
            records.append(json.loads(message.value()))
    finally:
        consumer.close()
    return records


def test_the_audit_producer_logs_in_with_the_proxys_token(
    proxy: ProxyProcess, cluster: LocalKafka, idp: OAuthProvider
) -> None:
    topic = f"alice.audit-{uuid.uuid4().hex[:6]}"
    as_bob = client(proxy.bootstrap, idp, "bob")
    assert outcome(as_bob.create_topics([NewTopic(topic, 1, 1)])[topic]) == "POLICY_VIOLATION"
    deadline = time.monotonic() + 30
    while True:
        found = [r["data"] for r in audit_records(cluster) if r["data"].get("topic") == topic]
        if found or time.monotonic() > deadline:
            break
    assert found, "no audit record for the denied create"
    assert "User:bob" in json.dumps(found[0])  # the principal the token's azp named
    assert found[0]["decision"] == "denied"


@pytest.mark.parametrize("protocol", ["SASL_PLAINTEXT", "SASL_SSL"])
def test_snapshot_logs_in_with_a_command_config(
    protocol: str, cluster: LocalKafka, idp: OAuthProvider, tmp_path: Path
) -> None:
    topic = f"orders.snap-{uuid.uuid4().hex[:6]}"
    direct = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    direct.create_topics([NewTopic(topic, 3, 1)])[topic].result(30)
    tls = protocol == "SASL_SSL"
    ca = cluster.tls_files.ca if tls else None
    config = properties_file(tmp_path, idp, "kpp-snapshot", CLIENTS["kpp-snapshot"], ca)
    tokens_before = len(idp.issued("kpp-snapshot"))
    done = subprocess.run(
        [
            str(BIN / "kafka-policy-proxy"),
            "snapshot",
            "--bootstrap-server",
            cluster.sasl_ssl_bootstrap_servers if tls else cluster.sasl_bootstrap_servers,
            "--command-config",
            str(config),
            "--out",
            str(tmp_path / "snapshot.jsonl"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    lines = [json.loads(line) for line in (tmp_path / "snapshot.jsonl").read_text().splitlines()]
    topics = {line["name"]: line for line in lines if line.get("kind") == "topic"}
    assert topics[topic]["partitions"] == 3
    assert len(idp.issued("kpp-snapshot")[tokens_before:]) == 1


def test_the_reader_keeps_judging_across_token_expiries(
    proxy: ProxyProcess, cluster: LocalKafka, idp: OAuthProvider
) -> None:
    topic = f"orders.long-{uuid.uuid4().hex[:6]}"
    admin = client(proxy.bootstrap, idp, "alice")
    created = admin.create_topics([NewTopic(topic, 1, 1, config={"cleanup.policy": "delete"})])
    assert outcome(created[topic]) == "ok"
    resource = compaction(topic)
    # Past three token lifetimes: each judgement reads the topic's config fresh, so the
    # reader's connection must hold a valid session throughout (the broker ends a session
    # when its token expires; an expired token would be refused: no clock skew).
    started = time.time()
    outcomes = []
    while time.time() - started < 3 * TOKEN_LIFETIME_S + 2:
        outcomes.append(failure(admin.incremental_alter_configs([resource])[resource]))
        time.sleep(0.5)  # a client's pace, not a wait for an outcome
    # Denied by the rule, on the config read: never failed closed for want of cluster state.
    assert all(e == "POLICY_VIOLATION" and "cleanup-immutable" in m for e, m in outcomes), outcomes
    assert topic_config(cluster, topic, "cleanup.policy") == "delete"
    fetched = [r for r in idp.issued("kpp-proxy") if r.agent == USER_AGENT]
    assert all(r.expiry is not None for r in fetched)
    assert len(fetched) >= 4, fetched  # the first token and one refresh per lifetime at least
    # Each refresh came before the token in use expired (at 80-85% of its lifetime).
    for previous, refresh in itertools.pairwise(fetched):
        assert previous.expiry is not None
        assert refresh.at < previous.expiry, (previous, refresh)
    _, metrics = http_get(f"http://127.0.0.1:{PROXY_ADMIN}/metrics")
    assert metric(metrics, "kpp_cluster_state_reauthentications_total") >= 2
    assert metric(metrics, "kpp_oauth_token_fetches_total") >= 4
    assert 'kpp_cluster_state_requests_total{result="error"}' not in metrics or (
        _sample(metrics, 'kpp_cluster_state_requests_total{result="error"}') == 0
    )


def _sample(text: str, sample: str) -> float:
    for line in text.splitlines():
        if line.startswith(sample + " "):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


@pytest.fixture(scope="module")
def misconfigured_proxy(
    cluster: LocalKafka, idp: OAuthProvider, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ProxyProcess]:
    """A proxy whose properties file holds a wrong client secret."""
    process = start_proxy(
        cluster,
        idp,
        tmp_path_factory.mktemp("oauth-bad-proxy"),
        secret="not-the-secret",
        ports=BAD_PROXY_PORTS,
        admin=BAD_PROXY_ADMIN,
    )
    try:
        yield process
    finally:
        assert process.stop() == 0


def test_a_wrong_client_secret_fails_closed_and_says_why(
    misconfigured_proxy: ProxyProcess, cluster: LocalKafka, idp: OAuthProvider
) -> None:
    topic = f"orders.closed-{uuid.uuid4().hex[:6]}"
    admin = client(misconfigured_proxy.bootstrap, idp, "alice")
    # Clients still log in (their SASL passes through), but nothing guarded is forwarded.
    error, message = failure(admin.create_topics([NewTopic(topic, 1, 1)])[topic])
    assert error != "ok"
    assert "cluster" in message, message
    direct = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    assert topic not in direct.list_topics(timeout=30).topics
    status, body = http_get(f"http://127.0.0.1:{BAD_PROXY_ADMIN}/readyz")
    assert status == 503
    assert f"OAUTHBEARER token from {idp.token_url}: HTTP 401 invalid_client" in body, body
    _, metrics = http_get(f"http://127.0.0.1:{BAD_PROXY_ADMIN}/metrics")
    assert _sample(metrics, 'kpp_oauth_token_fetches_total{result="error"}') >= 1
    assert "HTTP 401 invalid_client" in misconfigured_proxy.log_text()
    assert "not-the-secret" not in misconfigured_proxy.log_text()


def test_ingest_reads_the_audit_topic_with_a_command_config(
    proxy: ProxyProcess, cluster: LocalKafka, idp: OAuthProvider, tmp_path: Path
) -> None:
    on_topic = {r["data"]["decision_id"] for r in audit_records(cluster)}
    assert on_topic, "the earlier tests' decisions should be on the audit topic"
    config = properties_file(tmp_path, idp, "kpp-snapshot", CLIENTS["kpp-snapshot"])
    tokens_before = len(idp.issued("kpp-snapshot"))
    done = subprocess.run(
        [
            str(BIN / "kafka-policy-proxy"),
            "pipeline",
            "ingest",
            "--topic",
            AUDIT_TOPIC,
            "--bootstrap-server",
            cluster.sasl_bootstrap_servers,
            "--command-config",
            str(config),
            "--lake",
            str(tmp_path / "lake"),
            "--once",
            "--master",
            "local[1]",
        ],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout)
    assert result["lines"]["events"] == len(on_topic)
    # Spark's Java Kafka client fetched its own token from the endpoint, with the file's secret.
    fetched = idp.issued("kpp-snapshot")[tokens_before:]
    assert fetched and all(r.expiry is not None for r in fetched), fetched
