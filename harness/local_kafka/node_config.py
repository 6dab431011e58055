"""The nodes' files: server.properties (listeners, SASL users, TLS stores), log4j2, certificates."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from xml.sax.saxutils import quoteattr

from harness.local_kafka.node import Node, config_path, node_dir
from harness.local_kafka.report import LocalKafkaError
from harness.local_kafka.settings import HOST, SASL_MECHANISMS, SCRAM_USERS

LOG4J_BROKER = """<?xml version="1.0" encoding="UTF-8"?>
<Configuration status="warn">
  <Appenders>
    <File name="kafka" fileName={kafka_log}>
      <PatternLayout pattern="[%d] %p %m (%c)%n"/>
    </File>
    <File name="stateChange" fileName={state_change_log}>
      <PatternLayout pattern="[%d] %p %m (%c)%n"/>
    </File>
  </Appenders>
  <Loggers>
    <Root level="info"><AppenderRef ref="kafka"/></Root>
    <Logger name="state.change.logger" level="info" additivity="false">
      <AppenderRef ref="stateChange"/>
    </Logger>
    <Logger name="kafka.request.logger" level="warn"/>
  </Loggers>
</Configuration>
"""


def node_properties(
    node: Node,
    directory: Path,
    *,
    controller_port: int,
    internal_rf: int,
    relay: tuple[int, int] | None,
    broker_props: Mapping[str, str],
) -> dict[str, str]:
    """The node's broker properties; `relay` is (RELAY listener port, port it advertises)."""
    tls_listeners = [
        f"SSL://{HOST}:{node.ssl_port}",
        f"SASL_SSL://{HOST}:{node.sasl_ssl_port}",
        f"MTLS://{HOST}:{node.mtls_port}",
    ]
    client_listeners = [
        f"PLAINTEXT://{HOST}:{node.port}",
        f"SASL_PLAINTEXT://{HOST}:{node.sasl_port}",
        *tls_listeners,
    ]
    listeners = list(client_listeners)
    if node.controller_port is not None:
        listeners.append(f"CONTROLLER://{HOST}:{node.controller_port}")
    advertised = [f"PLAINTEXT://{HOST}:{node.advertised_port}", *client_listeners[1:]]
    if relay is not None:
        listeners.append(f"RELAY://{HOST}:{relay[0]}")
        advertised.append(f"RELAY://{HOST}:{relay[1]}")
    plain_users = " ".join(f'user_{u}="{p}"' for u, p in SCRAM_USERS.items())
    scram_jaas = "org.apache.kafka.common.security.scram.ScramLoginModule required;"
    tls = directory / "tls"
    rf = str(internal_rf)
    props = {
        "process.roles": node.roles,
        "node.id": str(node.node_id),
        "controller.quorum.voters": f"1@{HOST}:{controller_port}",
        "controller.listener.names": "CONTROLLER",
        "listeners": ",".join(listeners),
        "advertised.listeners": ",".join(advertised),
        "listener.security.protocol.map": (
            "PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT,SSL:SSL,SASL_SSL:SASL_SSL,"
            "MTLS:SSL,CONTROLLER:PLAINTEXT,RELAY:PLAINTEXT"
        ),
        "inter.broker.listener.name": "PLAINTEXT",
        "sasl.enabled.mechanisms": ",".join(SASL_MECHANISMS),
        # PEM stores (KIP-651): the throwaway CA the cluster makes at `up`.
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(tls / "broker.keystore.pem"),
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(tls / "ca.pem"),
        "listener.name.mtls.ssl.client.auth": "required",
        "log.dirs": str(node_dir(directory, node.node_id) / "data"),
        "auto.create.topics.enable": "true",
        "num.partitions": "1",
        "default.replication.factor": "1",
        "offsets.topic.replication.factor": rf,
        "transaction.state.log.replication.factor": rf,
        "transaction.state.log.min.isr": "1",
        "share.coordinator.state.topic.replication.factor": rf,
        "share.coordinator.state.topic.min.isr": "1",
        "group.initial.rebalance.delay.ms": "0",
        # Few threads and recovery work: a 2-core machine runs several of these JVMs.
        "num.network.threads": "2",
        "num.io.threads": "4",
        "num.recovery.threads.per.data.dir": "1",
        "background.threads": "4",
        "log.retention.check.interval.ms": "300000",
        # A stopped broker leaves the metadata quickly, so tests of it do not wait long.
        "broker.session.timeout.ms": "6000",
        "broker.heartbeat.interval.ms": "1000",
        "controlled.shutdown.enable": "true",
    }
    for sasl in ("listener.name.sasl_plaintext", "listener.name.sasl_ssl"):
        props |= {
            f"{sasl}.sasl.enabled.mechanisms": ",".join(SASL_MECHANISMS),
            f"{sasl}.plain.sasl.jaas.config": (
                f"org.apache.kafka.common.security.plain.PlainLoginModule required {plain_users};"
            ),
            f"{sasl}.scram-sha-256.sasl.jaas.config": scram_jaas,
            f"{sasl}.scram-sha-512.sasl.jaas.config": scram_jaas,
        }
    props.update(broker_props)
    return props


def _escape_property(value: str) -> str:
    # java.util.Properties treats backslashes as escapes.
    return value.replace("\\", "\\\\")


def write_node_files(node: Node, directory: Path, properties: Mapping[str, str]) -> None:
    """Write the node's data folder, server.properties and log4j2.xml."""
    folder = node_dir(directory, node.node_id)
    (folder / "data").mkdir(parents=True, exist_ok=True)
    lines = [f"{key}={_escape_property(value)}" for key, value in properties.items()]
    config_path(directory, node.node_id).write_text("\n".join(lines) + "\n")
    (folder / "log4j2.xml").write_text(
        LOG4J_BROKER.format(
            kafka_log=quoteattr(str(folder / "kafka.log")),
            state_change_log=quoteattr(str(folder / "state-change.log")),
        )
    )


@dataclasses.dataclass(frozen=True)
class TlsFiles:
    """PEM files of a running cluster's TLS listeners."""

    ca: Path  # signs the broker certificate (which names IP 127.0.0.1 only)
    client_cert: Path  # accepted by the MTLS listener; subject CN=proxy
    client_key: Path


def make_certificates(directory: Path) -> None:
    """A throwaway CA in DIR/tls, a broker certificate with its PEM keystore, a `proxy` client."""
    try:
        # Imported here: `cryptography` is needed only from `up` on, not to inspect or stop.
        from harness.throwaway_ca import ThrowawayCa
    except ImportError as exc:
        raise LocalKafkaError(
            f"the TLS listeners need a throwaway CA ({exc}): run from the project's venv "
            "(make setup)"
        ) from None
    ca = ThrowawayCa(directory / "tls")
    ca.keystore(ca.issue("broker", server=True))
    ca.issue("proxy", server=False)
