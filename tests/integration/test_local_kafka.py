"""The real-Kafka launcher (harness/local_kafka/) against the clusters it starts.

One 3-node cluster on port base 27092 serves the whole module; a 1-node cluster on 27592
checks the advertised-port override. Both are stopped however the tests end. Fixed ports stay
below Linux's ephemeral range (32768-60999), where any outgoing connection could take them.
"""

import json
import socket
import ssl
import subprocess
import sys
import time
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from harness import REPO
from harness.local_kafka import (
    TOOLS,
    LocalKafka,
    LocalKafkaError,
    default_kafka_version,
    ensure_jars,
    fetch_broker_ids,
    port_is_free,
)

pytestmark = pytest.mark.integration

PORT_BASE = 27092
SINGLE_PORT_BASE = 27592
HOST = "127.0.0.1"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalKafka]:
    kafka = LocalKafka(
        tmp_path_factory.mktemp("kafka") / "cluster", port_base=PORT_BASE, light_jvm=True
    )
    try:
        kafka.up(timeout=120)
        yield kafka
    finally:
        kafka.down()


def _run(
    command: list[str], timeout: float = 60, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        command, capture_output=True, text=True, timeout=timeout, check=False, cwd=cwd
    )


def _eventually(check: Callable[[], bool], timeout: float = 15.0) -> bool:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)
    return True


def _sasl_config(tmp_path: Path, mechanism: str, user: str, password: str) -> Path:
    module = (
        "org.apache.kafka.common.security.plain.PlainLoginModule"
        if mechanism == "PLAIN"
        else "org.apache.kafka.common.security.scram.ScramLoginModule"
    )
    path = tmp_path / f"{mechanism}-{user}.properties"
    path.write_text(
        "security.protocol=SASL_PLAINTEXT\n"
        f"sasl.mechanism={mechanism}\n"
        f'sasl.jaas.config={module} required username="{user}" password="{password}";\n'
    )
    return path


def test_every_node_reports_all_three_brokers(cluster: LocalKafka) -> None:
    expected = {1: (HOST, 27092), 2: (HOST, 27093), 3: (HOST, 27094)}
    assert cluster.bootstrap_servers == "127.0.0.1:27092,127.0.0.1:27093,127.0.0.1:27094"
    assert cluster.sasl_bootstrap_servers == "127.0.0.1:27192,127.0.0.1:27193,127.0.0.1:27194"
    assert cluster.broker_addresses == expected
    assert cluster.ssl_bootstrap_servers == "127.0.0.1:27392,127.0.0.1:27393,127.0.0.1:27394"
    assert cluster.sasl_ssl_bootstrap_servers == "127.0.0.1:27492,127.0.0.1:27493,127.0.0.1:27494"
    assert cluster.mtls_bootstrap_servers == "127.0.0.1:27592,127.0.0.1:27593,127.0.0.1:27594"
    tls_ports = {base + i for base in (27392, 27492, 27592) for i in range(3)}
    assert cluster.all_broker_ports == {27092, 27093, 27094, 27192, 27193, 27194, 27292} | tls_ports
    for host, port in expected.values():
        assert fetch_broker_ids(host, port) == expected


def test_tls_listeners_present_the_throwaway_ca(cluster: LocalKafka) -> None:
    files = cluster.tls_files
    context = ssl.create_default_context(cafile=files.ca)
    with (
        socket.create_connection((HOST, 27392), timeout=10) as raw,
        context.wrap_socket(raw, server_hostname=HOST) as tls,
    ):
        assert tls.getpeercert()["subjectAltName"] == (("IP Address", HOST),)
    context.load_cert_chain(files.client_cert, files.client_key)
    with (
        socket.create_connection((HOST, 27592), timeout=10) as raw,
        context.wrap_socket(raw, server_hostname=HOST) as tls,
    ):
        assert tls.version() in ("TLSv1.2", "TLSv1.3")


def test_state_file_lets_a_second_instance_attach(cluster: LocalKafka) -> None:
    state = json.loads(cluster.state_file.read_text())
    assert state["kafka_version"] == cluster.kafka_version
    assert [n["roles"] for n in state["nodes"]] == ["broker,controller", "broker", "broker"]
    # Constructor arguments that disagree with the running cluster are overridden by its state.
    attached = LocalKafka(cluster.directory, brokers=1, port_base=26092)
    assert attached.is_running()
    assert attached.bootstrap_servers == cluster.bootstrap_servers
    assert attached.cluster_id == state["cluster_id"]
    status = _run(
        [str(REPO / "scripts" / "local-kafka"), "status", "--dir", str(cluster.directory)]
    )
    assert status.returncode == 0, status.stderr
    assert status.stdout.strip() == cluster.bootstrap_servers
    assert status.stderr.count("running (pid") == 3


def test_brokers_log_to_files_in_their_node_folder(cluster: LocalKafka) -> None:
    names = {(p.parent.name, p.name) for p in cluster.log_files()}
    for node in ("node-1", "node-2", "node-3"):
        assert {(node, "server.log"), (node, "kafka.log")} <= names
    assert "Kafka Server started" in (cluster.directory / "node-2" / "kafka.log").read_text()


def _kafka_topics(
    cluster: LocalKafka, bootstrap: str, *args: str
) -> subprocess.CompletedProcess[str]:
    return _run(cluster.tool_command("kafka-topics", "--bootstrap-server", bootstrap, *args))


def test_kafka_topics_create_then_list(cluster: LocalKafka) -> None:
    bootstrap = cluster.bootstrap_servers
    create = ("--create", "--topic", "launcher-t1", "--partitions", "3")
    created = _kafka_topics(cluster, bootstrap, *create, "--replication-factor", "3")
    assert created.returncode == 0, created.stderr
    assert "Created topic launcher-t1" in created.stdout
    listed = _kafka_topics(cluster, bootstrap, "--list")
    assert listed.returncode == 0, listed.stderr
    assert "launcher-t1" in listed.stdout.split()
    described = _kafka_topics(cluster, bootstrap, "--describe", "--topic", "launcher-t1")
    assert "PartitionCount: 3" in described.stdout
    assert "ReplicationFactor: 3" in described.stdout


def test_sasl_listener_accepts_scram_and_plain_users(cluster: LocalKafka, tmp_path: Path) -> None:
    sasl_server = cluster.sasl_bootstrap_servers.split(",")[1]
    users = [("SCRAM-SHA-256", "alice"), ("SCRAM-SHA-512", "bob"), ("PLAIN", "admin")]
    for mechanism, user in users:
        config = _sasl_config(tmp_path, mechanism, user, f"{user}-secret")
        listed = _kafka_topics(cluster, sasl_server, "--command-config", str(config), "--list")
        assert listed.returncode == 0, f"{mechanism}/{user}: {listed.stderr}"
    wrong = _sasl_config(tmp_path, "SCRAM-SHA-512", "alice", "not-her-password")
    rejected = _kafka_topics(cluster, sasl_server, "--command-config", str(wrong), "--list")
    assert rejected.returncode != 0
    assert "Authentication failed" in rejected.stdout + rejected.stderr


def test_taken_port_fails_fast_with_a_clear_error(cluster: LocalKafka, tmp_path: Path) -> None:
    clash = LocalKafka(tmp_path / "clash", port_base=PORT_BASE)
    with pytest.raises(LocalKafkaError, match=r"port\(s\) already in use: 127\.0\.0\.1:27092"):
        clash.up(timeout=10)
    assert clash.state_file.exists() is False
    launcher = [sys.executable, "-m", "harness.local_kafka"]  # from the checkout
    cli_dir = str(tmp_path / "clash-cli")
    cli = _run([*launcher, "up", "--dir", cli_dir, "--port-base", str(PORT_BASE)], cwd=REPO)
    assert cli.returncode == 2
    assert cli.stdout == ""
    assert cli.stderr.count("\n") == 1
    assert cli.stderr.startswith("local-kafka: error: port(s) already in use")


def test_add_broker_joins_metadata_and_stop_broker_leaves_it(cluster: LocalKafka) -> None:
    node_id = cluster.add_broker()
    assert node_id == 4
    assert cluster.broker_addresses[4] == (HOST, 27095)
    assert set(fetch_broker_ids(HOST, 27092)) == {1, 2, 3, 4}
    assert set(fetch_broker_ids(HOST, 27095)) == {1, 2, 3, 4}
    assert {27095, 27195} <= cluster.all_broker_ports
    cluster.stop_broker(4)
    assert 4 not in cluster.broker_addresses
    assert port_is_free(27095)
    # Controlled shutdown fences the broker, so every node's Metadata drops it promptly.
    assert _eventually(lambda: set(fetch_broker_ids(HOST, 27092)) == {1, 2, 3}, 5.0)


def test_down_stops_every_jvm_and_frees_the_ports(cluster: LocalKafka) -> None:
    ports = cluster.all_broker_ports
    pids = [n["pid"] for n in json.loads(cluster.state_file.read_text())["nodes"] if n["pid"]]
    cluster.down()
    assert not cluster.directory.exists()
    assert [port for port in sorted(ports) if not port_is_free(port)] == []
    assert all(not Path(f"/proc/{pid}").exists() for pid in pids)


def test_advertised_port_override(tmp_path: Path) -> None:
    kafka = LocalKafka(
        tmp_path / "single",
        brokers=1,
        port_base=SINGLE_PORT_BASE,
        advertise_ports={1: 27599},
        light_jvm=True,
    )
    try:
        assert kafka.up(timeout=120) == f"{HOST}:{SINGLE_PORT_BASE}"
        assert kafka.broker_addresses == {1: (HOST, SINGLE_PORT_BASE)}
        assert fetch_broker_ids(HOST, SINGLE_PORT_BASE) == {1: (HOST, 27599)}
    finally:
        kafka.down()


def test_every_tool_main_class_is_in_the_jars() -> None:
    libs = ensure_jars(default_kafka_version())
    classes: set[str] = set()
    for jar in libs.glob("kafka*.jar"):
        with zipfile.ZipFile(jar) as archive:
            classes.update(archive.namelist())
    missing = {
        name: main
        for name, main in TOOLS.items()
        if main.replace(".", "/") + ".class" not in classes
    }
    assert missing == {}
    required = (
        "kafka-topics kafka-configs kafka-console-producer kafka-console-consumer "
        "kafka-consumer-groups kafka-delete-records kafka-reassign-partitions kafka-storage "
        "kafka-metadata-quorum"
    )
    assert set(required.split()) <= TOOLS.keys()
