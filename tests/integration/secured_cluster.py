"""A one-node Kafka cluster with no plaintext listener at all: SSL and SASL_SSL, mTLS required.

Listeners: SSL (client certificate required), SASL_SSL (SCRAM-SHA-256/512 and PLAIN, client
certificate required too), and an SSL listener for the node itself (inter-broker, no client
certificate) and the KRaft controller over SSL. Built from the harness's pieces (jars, node
files, `kafka-storage format` with the SCRAM users, the JVM) on fixed ports, since
`LocalKafka` always has a PLAINTEXT listener.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from confluent_kafka.admin import AdminClient, NewTopic

from harness.local_kafka.jars import ensure_jars, jar_classpath, java_executable
from harness.local_kafka.node import Node, node_dir
from harness.local_kafka.node_config import write_node_files
from harness.local_kafka.processes import format_storage, new_cluster_id, start_node
from harness.local_kafka.settings import (
    DEFAULT_KAFKA_VERSION,
    HOST,
    LIGHT_BROKER_JVM_OPTS,
    SASL_MECHANISMS,
    SCRAM_USERS,
)
from harness.throwaway_ca import ThrowawayCa

CLIENT_KEY_PASSWORD = "client-key-secret"


@dataclass
class SecuredCluster:
    """The running node: its listeners, its CA and a client certificate it accepts."""

    directory: Path
    ssl_port: int
    sasl_ssl_port: int
    ca: ThrowawayCa
    process: subprocess.Popen[bytes] | None = None

    @property
    def ssl_bootstrap(self) -> str:
        return f"{HOST}:{self.ssl_port}"

    @property
    def sasl_ssl_bootstrap(self) -> str:
        return f"{HOST}:{self.sasl_ssl_port}"

    @property
    def client_cert(self) -> Path:
        return self.ca.directory / "client.pem"

    @property
    def client_key(self) -> Path:
        """The client certificate's key, encrypted with CLIENT_KEY_PASSWORD."""
        return self.ca.directory / "client.key"

    def direct(self, **extra: Any) -> dict[str, Any]:
        """librdkafka settings for the SSL listener, written out here (not by the product)."""
        return {
            "bootstrap.servers": self.ssl_bootstrap,
            "security.protocol": "SSL",
            "ssl.ca.location": str(self.ca.cert),
            "ssl.certificate.location": str(self.client_cert),
            "ssl.key.location": str(self.client_key),
            "ssl.key.password": CLIENT_KEY_PASSWORD,
            "log_level": 3,
            **extra,
        }

    def create_topics(self, *names: str) -> None:
        """Create topics directly on the broker (auto-creation is off)."""
        admin = AdminClient(self.direct())
        futures = admin.create_topics([NewTopic(name, 1, 1) for name in names])
        for future in futures.values():
            future.result(60)

    def stop(self) -> None:
        """Stop the node's JVM (its own process group), killing it after 30 s."""
        if self.process is None or self.process.poll() is not None:
            return
        os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(10)


def start_secured_cluster(
    directory: Path, port_base: int, timeout: float = 180.0
) -> SecuredCluster:
    """Start the node on port_base .. port_base+3 and wait until it answers over TLS."""
    directory.mkdir(parents=True, exist_ok=True)
    ca = ThrowawayCa(directory / "tls")
    ca.keystore(ca.issue("broker", server=True))
    ca.issue("client", server=False, key_password=CLIENT_KEY_PASSWORD)
    ssl_port, sasl_ssl_port, internal_port, controller_port = range(port_base, port_base + 4)
    node = Node(1, ssl_port, sasl_ssl_port, controller_port, ssl_port, ssl_port, sasl_ssl_port, 0)
    plain_users = " ".join(f'user_{u}="{p}"' for u, p in SCRAM_USERS.items())
    scram = "org.apache.kafka.common.security.scram.ScramLoginModule required;"
    tls = ca.directory
    props = {
        "process.roles": "broker,controller",
        "node.id": "1",
        "controller.quorum.voters": f"1@{HOST}:{controller_port}",
        "controller.listener.names": "CONTROLLER",
        "listeners": f"SSL://{HOST}:{ssl_port},SASL_SSL://{HOST}:{sasl_ssl_port},"
        f"INTERNAL://{HOST}:{internal_port},CONTROLLER://{HOST}:{controller_port}",
        "advertised.listeners": f"SSL://{HOST}:{ssl_port},SASL_SSL://{HOST}:{sasl_ssl_port},"
        f"INTERNAL://{HOST}:{internal_port}",
        "listener.security.protocol.map": "SSL:SSL,SASL_SSL:SASL_SSL,INTERNAL:SSL,CONTROLLER:SSL",
        "inter.broker.listener.name": "INTERNAL",
        "listener.name.ssl.ssl.client.auth": "required",
        "listener.name.sasl_ssl.ssl.client.auth": "required",
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(tls / "broker.keystore.pem"),
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(ca.cert),
        "sasl.enabled.mechanisms": ",".join(SASL_MECHANISMS),
        "listener.name.sasl_ssl.sasl.enabled.mechanisms": ",".join(SASL_MECHANISMS),
        "listener.name.sasl_ssl.plain.sasl.jaas.config": (
            f"org.apache.kafka.common.security.plain.PlainLoginModule required {plain_users};"
        ),
        "listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config": scram,
        "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config": scram,
        "log.dirs": str(node_dir(directory, 1) / "data"),
        "auto.create.topics.enable": "false",
        "num.partitions": "1",
        "offsets.topic.replication.factor": "1",
        "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1",
        "share.coordinator.state.topic.replication.factor": "1",
        "share.coordinator.state.topic.min.isr": "1",
        "group.initial.rebalance.delay.ms": "0",
        "num.network.threads": "2",
        "num.io.threads": "2",
        "background.threads": "2",
    }
    write_node_files(node, directory, props)
    java = java_executable()
    classpath = jar_classpath(ensure_jars(DEFAULT_KAFKA_VERSION))
    format_storage(java, classpath, directory, [node], new_cluster_id())
    cluster = SecuredCluster(directory, ssl_port, sasl_ssl_port, ca)
    cluster.process = start_node(java, classpath, directory, node, LIGHT_BROKER_JVM_OPTS)
    try:
        _wait_ready(cluster, timeout)
    except BaseException:
        cluster.stop()
        raise
    return cluster


def _wait_ready(cluster: SecuredCluster, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    admin = AdminClient(cluster.direct(log_level=0))  # quiet while the node starts
    while True:
        assert cluster.process is not None
        if cluster.process.poll() is not None:
            raise RuntimeError(f"the secured node exited; see {cluster.directory}/node-1")
        try:
            if admin.list_topics(timeout=2).brokers:
                return
        except Exception:
            if time.monotonic() > deadline:
                raise
        time.sleep(0.5)
