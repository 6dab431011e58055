"""Cluster and security mutation APIs through the enforcing proxy, attacked as a hostile client.

The enforcing proxy runs tests/integration/data/policy.yaml, whose `admin_apis` let only
`User:platform-admin` (and `User:acl-*` for ACLs) call them. An anonymous client tries to add
ACLs, mint or change SCRAM credentials (raw frames, `kafka-configs`) and elect leaders
(`kafka-leader-election`); the outcome is read from the brokers directly, and a minted
credential is tried on the brokers' own SASL listener. A SASL proxy shows the allowed admin
getting through and another authenticated principal denied.
"""

from __future__ import annotations

import importlib
import os
import struct
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)

from harness.messages import build
from harness.proxy_process import ProxyProcess, sasl_enforcing_proxy
from harness.wire import WireClient
from kafka_policy_proxy.codec.api_classes import API_CLASSES, CLUSTER_MUTATIONS
from kafka_policy_proxy.codec.registry import request_class
from tests.integration.cluster_fixtures import TEST_POLICY
from tests.integration.enforcement_support import make_topic, settled
from tests.security.kafka_tools import command_config, tool

pytestmark = pytest.mark.integration

SASL_BOOTSTRAP_PORT = 30700
SASL_NODE_PORT_BASE = 30710  # node N on 30710 + N
ADMIN = "platform-admin"  # allowed every admin API by the test policy
ADMIN_PASSWORD = "platform-admin-secret"
ROUNDS = 3
CLUSTER_AUTHORIZATION_FAILED = 31
SECURITY_DISABLED = 54


def uid() -> str:
    return uuid.uuid4().hex[:8]


@pytest.fixture(scope="module")
def direct(kafka: Any) -> AdminClient:
    """An admin client on the brokers themselves (no proxy)."""
    return AdminClient({"bootstrap.servers": kafka.bootstrap_servers, "log_level": 3})


@pytest.fixture(scope="module")
def platform_admin(direct: AdminClient) -> Iterator[str]:
    """A SCRAM user the policy allows every admin API, created on the brokers directly."""
    info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192)
    upsert = UserScramCredentialUpsertion(ADMIN, info, ADMIN_PASSWORD.encode())
    direct.alter_user_scram_credentials([upsert])[ADMIN].result(30)
    yield ADMIN
    gone = UserScramCredentialDeletion(ADMIN, ScramMechanism.SCRAM_SHA_512)
    direct.alter_user_scram_credentials([gone])[ADMIN].result(30)


@pytest.fixture(scope="module")
def sasl_proxy(
    kafka: Any, platform_admin: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ProxyProcess]:
    """An enforcing proxy in front of the brokers' SCRAM listener: principals are real."""
    workdir = tmp_path_factory.mktemp("sasl-admin")
    process = sasl_enforcing_proxy(
        workdir, kafka, TEST_POLICY, (SASL_BOOTSTRAP_PORT, SASL_NODE_PORT_BASE)
    )
    yield process
    assert process.stop() == 0


def scram_client(bootstrap: str, user: str, password: str, mechanism: str) -> AdminClient:
    return AdminClient(
        {
            "bootstrap.servers": bootstrap,
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": mechanism,
            "sasl.username": user,
            "sasl.password": password,
            "log_level": 3,
        }
    )


def authenticates(kafka: Any, user: str, password: str, mechanism: str) -> bool:
    """Whether the brokers' own SASL listener accepts these credentials (no proxy)."""
    errors: list[KafkaError] = []
    client = AdminClient(
        {
            "bootstrap.servers": kafka.sasl_bootstrap_servers,
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": mechanism,
            "sasl.username": user,
            "sasl.password": password,
            "error_cb": errors.append,
            "log_level": 3,
        }
    )
    failures: list[KafkaError] = []
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            client.list_topics(timeout=1)
            return True
        except KafkaException as exc:
            failures.append(exc.args[0])
        # A refusal arrives through the error callback, served by poll; a failed try costs
        # a second, not the whole wait.
        client.poll(0.2)
        if any(e.code() == KafkaError._AUTHENTICATION for e in errors):
            return False
    raise AssertionError(f"neither authenticated nor refused within 20 s: {errors + failures}")


def scram_upsert_request(*users: str) -> Any:
    m = importlib.import_module(request_class(51, 0).__module__)
    upserts = tuple(
        build(
            m.ScramCredentialUpsertion,
            name=user,
            mechanism=1,  # SCRAM-SHA-256
            iterations=8192,
            salt=os.urandom(16),
            salted_password=os.urandom(32),
        )
        for user in users
    )
    return build(m.AlterUserScramCredentialsRequest, deletions=(), upsertions=upserts)


def create_acls_request(principal: str) -> Any:
    m = importlib.import_module(request_class(30, 3).__module__)
    creation = build(
        m.AclCreation,
        resource_type=2,  # TOPIC
        resource_name="*",
        resource_pattern_type=3,  # LITERAL
        principal=principal,
        host="*",
        operation=2,  # ALL
        permission_type=3,  # ALLOW
    )
    return build(m.CreateAclsRequest, creations=(creation,))


def elect_leaders_request(topic: str) -> Any:
    m = importlib.import_module(request_class(43, 2).__module__)
    partitions = (build(m.TopicPartitions, topic=topic, partitions=(0,)),)
    return build(
        m.ElectLeadersRequest, election_type=0, topic_partitions=partitions, timeout=30_000
    )


def no_acls_on_the_broker(kafka: Any) -> None:
    """Every broker, asked directly, holds no ACL: this cluster runs no authorizer, so each
    answers DescribeAcls with SECURITY_DISABLED (confluent-kafka reads that as no ACLs)."""
    m = importlib.import_module(request_class(29, 3).__module__)
    everything = build(
        m.DescribeAclsRequest,
        resource_type_filter=1,  # ANY
        resource_name_filter=None,
        pattern_type_filter=1,  # ANY
        principal_filter=None,
        host_filter=None,
        operation=1,  # ANY
        permission_type=1,  # ANY
    )
    for host, port in kafka.broker_addresses.values():
        client = WireClient(host, port)
        try:
            answer = client.request(everything)
        finally:
            client.close()
        assert (answer.error_code.value, answer.resources) == (SECURITY_DISABLED, ())


def has_scram_credential(direct: AdminClient, user: str) -> bool:
    try:
        description = direct.describe_user_scram_credentials([user])[user].result(30)
    except KafkaException as exc:
        assert exc.args[0].code() == KafkaError.RESOURCE_NOT_FOUND, exc
        return False
    return bool(description.scram_credential_infos)


def denials(proxy: ProxyProcess, api: str) -> list[dict[str, Any]]:
    return [
        e
        for e in proxy.audit_events()
        if e["action"] == "admin_api" and e["api"] == api and e["decision"] == "denied"
    ]


# --- an anonymous client through the enforcing proxy -----------------------------------------


def test_kafka_acls_add_is_denied_and_the_broker_holds_no_acl(
    kafka: Any, enforcing_proxy: ProxyProcess, direct: AdminClient
) -> None:
    for _ in range(ROUNDS):
        before = len(denials(enforcing_proxy, "CreateAcls"))
        result = tool(
            kafka,
            "kafka-acls",
            "--bootstrap-server",
            enforcing_proxy.bootstrap,
            "--add",
            "--allow-principal",
            f"User:mallory-{uid()}",
            "--operation",
            "All",
            "--topic",
            "*",
        )
        output = result.stdout + result.stderr
        assert "ClusterAuthorizationException" in output, output
        assert "may not call CreateAcls" in output, output
        assert len(denials(enforcing_proxy, "CreateAcls")) == before + 1
        settled(direct)
        no_acls_on_the_broker(kafka)


def test_raw_create_acls_is_answered_by_the_proxy_not_the_broker(
    enforcing_proxy: ProxyProcess,
) -> None:
    # The broker, with no authorizer, would answer SECURITY_DISABLED: 31 is the proxy's.
    client = WireClient("127.0.0.1", enforcing_proxy.bootstrap_port)
    try:
        for _ in range(ROUNDS):
            (result,) = client.request(create_acls_request(f"User:m-{uid()}")).results
            assert result.error_code.value == CLUSTER_AUTHORIZATION_FAILED
            assert "User:ANONYMOUS may not call CreateAcls" in result.error_message
    finally:
        client.close()


def test_minting_scram_credentials_is_denied_and_they_do_not_authenticate(
    kafka: Any, enforcing_proxy: ProxyProcess, direct: AdminClient
) -> None:
    for _ in range(ROUNDS):
        mallory = f"mallory-{uid()}"
        client = WireClient("127.0.0.1", enforcing_proxy.bootstrap_port)
        try:
            # A new user, and a new password for the exempt admin: both in one request.
            answer = client.request(scram_upsert_request(mallory, "admin"))
        finally:
            client.close()
        assert sorted((r.user, r.error_code.value) for r in answer.results) == [
            ("admin", CLUSTER_AUTHORIZATION_FAILED),
            (mallory, CLUSTER_AUTHORIZATION_FAILED),
        ]
        password = f"pw-{uid()}"
        result = tool(
            kafka,
            "kafka-configs",
            "--bootstrap-server",
            enforcing_proxy.bootstrap,
            "--alter",
            "--add-config",
            f"SCRAM-SHA-256=[iterations=8192,password={password}]",
            "--entity-type",
            "users",
            "--entity-name",
            mallory,
        )
        output = result.stdout + result.stderr
        assert result.returncode != 0 and "ClusterAuthorizationException" in output, output
        settled(direct)
        assert not has_scram_credential(direct, mallory)
        assert not authenticates(kafka, mallory, password, "SCRAM-SHA-256")
    # The exempt admin's password is the one it had.
    assert authenticates(kafka, "admin", "admin-secret", "SCRAM-SHA-512")


def test_kafka_leader_election_is_denied(
    kafka: Any, enforcing_proxy: ProxyProcess, direct: AdminClient
) -> None:
    topic = f"elect.t-{uid()}"
    make_topic(direct, topic, partitions=1, replication=3)
    for _ in range(ROUNDS):
        before = len(denials(enforcing_proxy, "ElectLeaders"))
        result = tool(
            kafka,
            "kafka-leader-election",
            "--bootstrap-server",
            enforcing_proxy.bootstrap,
            "--election-type",
            "PREFERRED",
            "--all-topic-partitions",
        )
        output = result.stdout + result.stderr
        assert result.returncode != 0, output
        # The tool's words for a ClusterAuthorizationException.
        assert "Not authorized to perform leader election" in output, output
        assert len(denials(enforcing_proxy, "ElectLeaders")) == before + 1
        client = WireClient("127.0.0.1", enforcing_proxy.bootstrap_port)
        try:
            answer = client.request(elect_leaders_request(topic))
        finally:
            client.close()
        assert answer.error_code.value == CLUSTER_AUTHORIZATION_FAILED
        ((partition,),) = [r.partition_result for r in answer.replica_election_results]
        assert partition.error_code.value == CLUSTER_AUTHORIZATION_FAILED


def test_raced_pipelined_admin_calls_are_all_denied(
    kafka: Any, enforcing_proxy: ProxyProcess, direct: AdminClient
) -> None:
    users = [f"race-{uid()}" for _ in range(8)]
    codes: list[int] = []
    failures: list[BaseException] = []

    def attack(user: str) -> None:
        try:
            client = WireClient("127.0.0.1", enforcing_proxy.bootstrap_port)
            try:
                sent = [client.send(scram_upsert_request(user)) for _ in range(5)]
                sent += [client.send(create_acls_request(f"User:{user}")) for _ in range(5)]
                for expected in sent:
                    got, answer = client.receive()
                    assert got == expected
                    codes.extend(r.error_code.value for r in answer.results)
            finally:
                client.close()
        except BaseException as exc:
            failures.append(exc)

    threads = [threading.Thread(target=attack, args=(u,)) for u in users]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not failures, failures
    assert codes == [CLUSTER_AUTHORIZATION_FAILED] * (len(users) * 10)
    settled(direct)
    assert not any(has_scram_credential(direct, u) for u in users)
    no_acls_on_the_broker(kafka)


# --- authenticated principals through a SASL proxy -------------------------------------------


def test_the_allowed_admin_passes_and_another_principal_does_not(
    kafka: Any, sasl_proxy: ProxyProcess, direct: AdminClient, tmp_path: Path
) -> None:
    admin_config = command_config(tmp_path / "platform.properties", ADMIN, ADMIN_PASSWORD)
    other_config = command_config(tmp_path / "admin.properties", "admin", "admin-secret")
    for _ in range(ROUNDS):
        # ElectLeaders reaches the broker for the allowed admin only.
        allowed = tool(
            kafka,
            "kafka-leader-election",
            "--bootstrap-server",
            sasl_proxy.bootstrap,
            "--admin.config",
            str(admin_config),
            "--election-type",
            "PREFERRED",
            "--all-topic-partitions",
        )
        assert allowed.returncode == 0, allowed.stdout + allowed.stderr
        denied = tool(
            kafka,
            "kafka-leader-election",
            "--bootstrap-server",
            sasl_proxy.bootstrap,
            "--admin.config",
            str(other_config),
            "--election-type",
            "PREFERRED",
            "--all-topic-partitions",
        )
        assert denied.returncode != 0
        assert "Not authorized to perform leader election" in denied.stdout + denied.stderr

        # A SCRAM credential minted by the allowed admin is real on the broker.
        user = f"svc-{uid()}"
        password = f"pw-{uid()}"
        info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 8192)
        upsert = UserScramCredentialUpsertion(user, info, password.encode())
        admin = scram_client(sasl_proxy.bootstrap, ADMIN, ADMIN_PASSWORD, "SCRAM-SHA-512")
        admin.alter_user_scram_credentials([upsert])[user].result(30)
        settled(direct)
        assert has_scram_credential(direct, user)
        assert authenticates(kafka, user, password, "SCRAM-SHA-256")
        gone = UserScramCredentialDeletion(user, ScramMechanism.SCRAM_SHA_256)
        direct.alter_user_scram_credentials([gone])[user].result(30)

        # The same call by an authenticated but unlisted principal is denied.
        other = scram_client(sasl_proxy.bootstrap, "admin", "admin-secret", "SCRAM-SHA-512")
        stolen = f"stolen-{uid()}"
        upsert = UserScramCredentialUpsertion(stolen, info, password.encode())
        with pytest.raises(KafkaException) as raised:
            other.alter_user_scram_credentials([upsert])[stolen].result(30)
        # librdkafka's request carries a trailing byte: the denial is still an answer.
        assert raised.value.args[0].code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED
        settled(direct)
        assert not has_scram_credential(direct, stolen)

        # CreateAcls by the admin reaches the broker, which has no authorizer to take it.
        acls = tool(
            kafka,
            "kafka-acls",
            "--bootstrap-server",
            sasl_proxy.bootstrap,
            "--command-config",
            str(admin_config),
            "--add",
            "--allow-principal",
            "User:svc",
            "--operation",
            "Read",
            "--topic",
            "t",
        )
        assert "SecurityDisabledException" in acls.stdout + acls.stderr
    records = [e for e in sasl_proxy.audit_events() if e["action"] == "admin_api"]
    allowed_calls = {(e["principal"], e["api"]) for e in records if e["decision"] == "allowed"}
    denied_calls = {(e["principal"], e["api"]) for e in records if e["decision"] == "denied"}
    assert {
        ("User:platform-admin", "ElectLeaders"),
        ("User:platform-admin", "AlterUserScramCredentials"),
        ("User:platform-admin", "CreateAcls"),
    } <= allowed_calls
    assert {("User:admin", "ElectLeaders"), ("User:admin", "AlterUserScramCredentials")} <= (
        denied_calls
    )


def test_nothing_unclassified_is_advertised_or_accepted(enforcing_proxy: ProxyProcess) -> None:
    m = importlib.import_module(request_class(18, 3).__module__)
    versions = build(m.ApiVersionsRequest, client_software_name="t", client_software_version="1")
    for _ in range(ROUNDS):
        client = WireClient("127.0.0.1", enforcing_proxy.bootstrap_port)
        try:
            advertised = {int(e.api_key) for e in client.request(versions).api_keys}
            assert advertised <= set(API_CLASSES)
            assert CLUSTER_MUTATIONS & advertised  # judged, so offered: the broker has them
            # A key the proxy does not know (header v1: key, version, correlation id, no id).
            client.send_raw(struct.pack(">ihhih", 10, 93, 0, 7, -1))
            assert client.is_closed()
        finally:
            client.close()
