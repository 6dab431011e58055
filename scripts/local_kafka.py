#!/usr/bin/env python3
"""Start, inspect and stop a real Apache Kafka cluster (KRaft) on 127.0.0.1 as plain JVMs.

Used by `make run`, the integration-test fixtures and the benchmarks. Stdlib only, except for
the throwaway CA of the TLS listeners (`throwaway_ca.py`, on the `cryptography` package), which
`up` imports. Importing it has no side effects.
"""

import argparse
import base64
import contextlib
import dataclasses
import fcntl
import importlib.util
import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any, NoReturn
from xml.sax.saxutils import quoteattr

DEFAULT_KAFKA_VERSION = "4.1.1"
DEFAULT_PORT_BASE = 19092
DEFAULT_BROKERS = 3
DEFAULT_TIMEOUT = 120.0
HOST = "127.0.0.1"
REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_DIR = REPO_ROOT / ".kafka"
POM = Path(__file__).resolve().parent / "kafka-pom.xml"
STATE_FILE = "cluster.json"
# Node ids above this would make the SASL port range run into the controller port.
MAX_NODE_ID = 100

SCRAM_USERS = {"admin": "admin-secret", "alice": "alice-secret", "bob": "bob-secret"}
SASL_MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512", "PLAIN")

# Kafka CLI script name -> main class, as in the bin/ scripts of the Kafka 4.1 distribution.
TOOLS: dict[str, str] = {
    "kafka-acls": "org.apache.kafka.tools.AclCommand",
    "kafka-broker-api-versions": "org.apache.kafka.tools.BrokerApiVersionsCommand",
    "kafka-client-metrics": "org.apache.kafka.tools.ClientMetricsCommand",
    "kafka-cluster": "org.apache.kafka.tools.ClusterTool",
    "kafka-configs": "kafka.admin.ConfigCommand",
    "kafka-console-consumer": "org.apache.kafka.tools.consumer.ConsoleConsumer",
    "kafka-console-producer": "org.apache.kafka.tools.ConsoleProducer",
    "kafka-console-share-consumer": "org.apache.kafka.tools.consumer.ConsoleShareConsumer",
    "kafka-consumer-groups": "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand",
    "kafka-consumer-perf-test": "org.apache.kafka.tools.ConsumerPerformance",
    "kafka-delegation-tokens": "org.apache.kafka.tools.DelegationTokenCommand",
    "kafka-delete-records": "org.apache.kafka.tools.DeleteRecordsCommand",
    "kafka-dump-log": "kafka.tools.DumpLogSegments",
    "kafka-e2e-latency": "org.apache.kafka.tools.EndToEndLatency",
    "kafka-features": "org.apache.kafka.tools.FeatureCommand",
    "kafka-get-offsets": "org.apache.kafka.tools.GetOffsetShell",
    "kafka-groups": "org.apache.kafka.tools.GroupsCommand",
    "kafka-leader-election": "org.apache.kafka.tools.LeaderElectionCommand",
    "kafka-log-dirs": "org.apache.kafka.tools.LogDirsCommand",
    "kafka-metadata-quorum": "org.apache.kafka.tools.MetadataQuorumCommand",
    "kafka-producer-perf-test": "org.apache.kafka.tools.ProducerPerformance",
    "kafka-reassign-partitions": "org.apache.kafka.tools.reassign.ReassignPartitionsCommand",
    "kafka-replica-verification": "org.apache.kafka.tools.ReplicaVerificationTool",
    "kafka-share-groups": "org.apache.kafka.tools.consumer.group.ShareGroupCommand",
    "kafka-storage": "kafka.tools.StorageTool",
    "kafka-streams-groups": "org.apache.kafka.tools.streams.StreamsGroupCommand",
    "kafka-topics": "org.apache.kafka.tools.TopicCommand",
    "kafka-transactions": "org.apache.kafka.tools.TransactionsCommand",
    "kafka-verifiable-consumer": "org.apache.kafka.tools.VerifiableConsumer",
    "kafka-verifiable-producer": "org.apache.kafka.tools.VerifiableProducer",
}

BROKER_JVM_OPTS = (
    "-Xms256m",
    "-Xmx512m",
    "-server",
    "-XX:+UseG1GC",
    "-XX:MaxGCPauseMillis=20",
    "-XX:InitiatingHeapOccupancyPercent=35",
    "-XX:+ExplicitGCInvokesConcurrent",
    "-XX:+ExitOnOutOfMemoryError",
    "-Djava.awt.headless=true",
)
# Test clusters: C1 only and the serial collector start a node on about 60% of the CPU (21
# against 35 CPU-seconds for three nodes) and idle lighter; throughput is not what they test.
LIGHT_BROKER_JVM_OPTS = (
    "-Xms256m",
    "-Xmx512m",
    "-XX:TieredStopAtLevel=1",
    "-XX:+UseSerialGC",
    "-XX:+ExitOnOutOfMemoryError",
    "-Djava.awt.headless=true",
)
TOOL_JVM_OPTS = ("-Xmx512m", "-Djava.awt.headless=true")
# Short-lived JVMs start about twice as fast with C1 only and the serial collector.
QUICK_JVM_OPTS = (*TOOL_JVM_OPTS, "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC")
# Tools that may move a lot of data keep the full JIT.
THROUGHPUT_TOOLS = frozenset(
    {
        "kafka-console-consumer",
        "kafka-console-producer",
        "kafka-console-share-consumer",
        "kafka-consumer-perf-test",
        "kafka-e2e-latency",
        "kafka-producer-perf-test",
        "kafka-replica-verification",
        "kafka-verifiable-consumer",
        "kafka-verifiable-producer",
    }
)

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

LOG4J_TOOLS = """<?xml version="1.0" encoding="UTF-8"?>
<Configuration status="warn">
  <Appenders>
    <Console name="stderr" target="SYSTEM_ERR">
      <PatternLayout pattern="[%d] %p %m (%c)%n"/>
    </Console>
  </Appenders>
  <Loggers>
    <Root level="warn"><AppenderRef ref="stderr"/></Root>
  </Loggers>
</Configuration>
"""


@dataclasses.dataclass(frozen=True)
class TlsFiles:
    """PEM files of a running cluster's TLS listeners."""

    ca: Path  # signs the broker certificate (which names IP 127.0.0.1 only)
    client_cert: Path  # accepted by the MTLS listener; subject CN=proxy
    client_key: Path


class LocalKafkaError(RuntimeError):
    """A launcher failure with a one-line message and the exit code the CLI should use."""

    def __init__(self, message: str, exit_code: int = 1) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def _progress(message: str) -> None:
    print(f"local-kafka: {message}", file=sys.stderr, flush=True)


def default_kafka_version() -> str:
    """The Kafka version to use: env KAFKA_VERSION, else the pinned default."""
    return os.environ.get("KAFKA_VERSION") or DEFAULT_KAFKA_VERSION


def cache_dir(kafka_version: str) -> Path:
    """The per-version cache folder, under XDG_CACHE_HOME (default ~/.cache)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "kafka-policy-proxy" / f"kafka-{kafka_version}"


def java_executable() -> str:
    """The `java` to run: $JAVA_HOME/bin/java if set, else the one on PATH."""
    java_home = os.environ.get("JAVA_HOME")
    if java_home and (Path(java_home) / "bin" / "java").is_file():
        return str(Path(java_home) / "bin" / "java")
    found = shutil.which("java")
    if found is None:
        raise LocalKafkaError("`java` not found: install a JDK (17 or newer) or set JAVA_HOME", 2)
    return found


def ensure_jars(kafka_version: str) -> Path:
    """Resolve Kafka's jars through Maven once per version, and return the cached libs dir."""
    root = cache_dir(kafka_version)
    libs = root / "libs"
    marker = root / ".complete"
    if marker.is_file() and libs.is_dir():
        return libs
    mvn = shutil.which("mvn")
    if mvn is None:
        raise LocalKafkaError(
            f"`mvn` not found: Maven is needed once to download Kafka {kafka_version}'s jars", 2
        )
    root.mkdir(parents=True, exist_ok=True)
    # A lock, so concurrent first starts (parallel test runs) download only once.
    with (root / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if marker.is_file() and libs.is_dir():
            return libs
        _progress(f"downloading Kafka {kafka_version} jars with Maven (first run only)")
        started = time.monotonic()
        staging = Path(tempfile.mkdtemp(prefix="libs.", dir=root))
        command = [
            mvn,
            "-q",
            "-B",
            "-f",
            str(POM),
            f"-Dkafka.version={kafka_version}",
            "dependency:copy-dependencies",
            "-DincludeScope=runtime",
            f"-DoutputDirectory={staging}",
        ]
        result = subprocess.run(command, capture_output=True, text=True, check=False)
        if result.returncode != 0 or not any(staging.glob("kafka_2.13-*.jar")):
            shutil.rmtree(staging, ignore_errors=True)
            output = (result.stdout + result.stderr).strip().splitlines()
            detail = output[-1] if output else f"exit code {result.returncode}"
            raise LocalKafkaError(f"Maven could not resolve Kafka {kafka_version}: {detail}", 2)
        shutil.rmtree(libs, ignore_errors=True)
        staging.rename(libs)
        marker.write_text(f"{kafka_version}\n")
        _progress(f"jars ready in {time.monotonic() - started:.1f}s: {libs}")
    return libs


def jar_classpath(libs: Path) -> str:
    """An explicit, sorted classpath of every jar in `libs`."""
    return os.pathsep.join(str(jar) for jar in sorted(libs.glob("*.jar")))


def _write_if_changed(path: Path, text: str) -> None:
    if not path.is_file() or path.read_text() != text:
        path.write_text(text)


def tool_command_for(kafka_version: str, name: str, *args: str) -> list[str]:
    """The argv that runs Kafka CLI tool `name` (its bin/ script name, `.sh` optional)."""
    script = name.removesuffix(".sh")
    main_class = TOOLS.get(script)
    if main_class is None:
        raise LocalKafkaError(f"unknown Kafka tool {name!r}; known: {', '.join(sorted(TOOLS))}", 2)
    java = java_executable()
    libs = ensure_jars(kafka_version)
    log_config = libs.parent / "tools-log4j2.xml"
    _write_if_changed(log_config, LOG4J_TOOLS)
    return [
        java,
        *(TOOL_JVM_OPTS if script in THROUGHPUT_TOOLS else QUICK_JVM_OPTS),
        f"-Dlog4j2.configurationFile={log_config}",
        "-cp",
        jar_classpath(libs),
        main_class,
        *args,
    ]


def port_is_free(port: int, host: str = HOST) -> bool:
    """Whether a listener could bind `host:port` now (TIME_WAIT leftovers do not count)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        # Kafka binds with SO_REUSEADDR too, so only a live listener really blocks it.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def _check_ports_free(ports: Sequence[int]) -> None:
    taken = [port for port in ports if not port_is_free(port)]
    if taken:
        listing = ", ".join(f"{HOST}:{port}" for port in taken)
        raise LocalKafkaError(
            f"port(s) already in use: {listing} (another cluster running? "
            "try `local-kafka down` or a different --port-base)",
            2,
        )


def _recv_exact(sock: socket.socket, size: int) -> bytes:
    chunks = bytearray()
    while len(chunks) < size:
        chunk = sock.recv(size - len(chunks))
        if not chunk:
            raise ConnectionError("connection closed mid-response")
        chunks += chunk
    return bytes(chunks)


def fetch_broker_ids(host: str, port: int, timeout: float = 3.0) -> dict[int, tuple[str, int]]:
    """Send a Metadata v4 request (no topics) and return node id -> advertised (host, port)."""
    client_id = b"local-kafka"
    # Header v1: api_key=3 (Metadata), api_version=4, correlation_id, client_id.
    header = struct.pack(">hhih", 3, 4, 1, len(client_id)) + client_id
    # Body: empty topic array (brokers only), allow_auto_topic_creation=false.
    body = struct.pack(">ib", 0, 0)
    request = header + body
    with socket.create_connection((host, port), timeout=timeout) as sock:
        sock.sendall(struct.pack(">i", len(request)) + request)
        (size,) = struct.unpack(">i", _recv_exact(sock, 4))
        payload = _recv_exact(sock, size)
    correlation_id, _throttle_ms, count = struct.unpack_from(">iii", payload, 0)
    if correlation_id != 1:
        raise ConnectionError(f"unexpected correlation id {correlation_id}")
    offset = 12
    brokers: dict[int, tuple[str, int]] = {}
    for _ in range(count):
        node_id, host_len = struct.unpack_from(">ih", payload, offset)
        offset += 6
        broker_host = payload[offset : offset + host_len].decode()
        offset += host_len
        broker_port, rack_len = struct.unpack_from(">ih", payload, offset)
        offset += 6 + max(rack_len, 0)
        brokers[node_id] = (broker_host, broker_port)
    return brokers


def _pid_alive(pid: int, marker: str) -> bool:
    """Whether `pid` runs and is still the JVM we started (its argv holds `marker`)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    proc = Path(f"/proc/{pid}")
    try:
        state = (proc / "stat").read_text().rsplit(")", 1)[1].split()[0]
        cmdline = (proc / "cmdline").read_bytes()
    except (OSError, IndexError):
        # No procfs (macOS): trust kill(0).
        return True
    return state != "Z" and marker.encode() in cmdline


def _tail(path: Path, lines: int = 40) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


def _new_cluster_id() -> str:
    # Kafka's Uuid text form: url-safe base64 of 16 random bytes, unpadded, never starting
    # with '-' (it would read as a CLI option).
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not text.startswith("-"):
            return text


@dataclasses.dataclass
class _Node:
    """One Kafka process: its id, roles, ports and pid."""

    node_id: int
    port: int
    sasl_port: int
    controller_port: int | None
    advertised_port: int
    ssl_port: int
    sasl_ssl_port: int
    mtls_port: int
    pid: int | None = None

    @property
    def roles(self) -> str:
        return "broker,controller" if self.controller_port is not None else "broker"

    @property
    def ports(self) -> list[int]:
        extra = [self.controller_port] if self.controller_port is not None else []
        return [
            self.port,
            self.sasl_port,
            self.ssl_port,
            self.sasl_ssl_port,
            self.mtls_port,
            *extra,
        ]

    def to_json(self) -> dict[str, Any]:
        return {
            "node_id": self.node_id,
            "roles": self.roles,
            "port": self.port,
            "sasl_port": self.sasl_port,
            "controller_port": self.controller_port,
            "advertised_port": self.advertised_port,
            "ssl_port": self.ssl_port,
            "sasl_ssl_port": self.sasl_ssl_port,
            "mtls_port": self.mtls_port,
            "pid": self.pid,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "_Node":
        return cls(
            node_id=int(data["node_id"]),
            port=int(data["port"]),
            sasl_port=int(data["sasl_port"]),
            controller_port=data.get("controller_port"),
            advertised_port=int(data["advertised_port"]),
            ssl_port=int(data["ssl_port"]),
            sasl_ssl_port=int(data["sasl_ssl_port"]),
            mtls_port=int(data["mtls_port"]),
            pid=data.get("pid"),
        )


class LocalKafka:
    """A local multi-broker KRaft cluster in `directory`, started and stopped as plain JVMs.

    If `directory` holds the state of a running cluster, the instance attaches to it (its
    recorded ports, version and settings win over the constructor's), so a second process can
    inspect or stop a cluster another one started.
    """

    def __init__(
        self,
        directory: Path,
        brokers: int = DEFAULT_BROKERS,
        port_base: int = DEFAULT_PORT_BASE,
        *,
        kafka_version: str | None = None,
        broker_props: Mapping[str, str] | None = None,
        advertise_ports: Mapping[int, int] | None = None,
        extra_jars: Sequence[Path] = (),
        light_jvm: bool = False,
        relay_ports: Mapping[int, int] | None = None,
    ) -> None:
        if not 1 <= brokers <= MAX_NODE_ID:
            raise ValueError(f"brokers must be between 1 and {MAX_NODE_ID}")
        if not 1024 <= port_base <= 65535 - 700:
            raise ValueError("port_base must leave room for base..base+699 in 1024..65535")
        self.directory = Path(directory).resolve()
        self.port_base = port_base
        self.kafka_version = kafka_version or default_kafka_version()
        self.broker_props: dict[str, str] = dict(broker_props or {})
        self.advertise_ports: dict[int, int] = dict(advertise_ports or {})
        # Jars added to every node's classpath, e.g. a broker-side policy.
        self.extra_jars: list[Path] = [Path(j).resolve() for j in extra_jars]
        # LIGHT_BROKER_JVM_OPTS instead of BROKER_JVM_OPTS (the test suite's clusters).
        self.light_jvm = light_jvm
        # node id -> a port in front of the node's RELAY listener (base+600+id-1), which
        # advertises that port: clients bootstrapped there see only relay ports (the bench's
        # byte-relay floor).
        self.relay_ports: dict[int, int] = dict(relay_ports or {})
        self.cluster_id: str | None = None
        self._initial_brokers = brokers
        # Replication factor of internal topics, fixed at `up` so added brokers agree with it.
        self._internal_rf = min(3, brokers)
        self._nodes: dict[int, _Node] = {}
        self._procs: dict[int, subprocess.Popen[bytes]] = {}
        # The nodes of a stopped cluster (e.g. after `down --keep`), shown by `status`.
        self._recorded: list[_Node] = []
        self._attach()

    # -- state -----------------------------------------------------------------------------

    @property
    def state_file(self) -> Path:
        """Path of the cluster's `cluster.json`."""
        return self.directory / STATE_FILE

    def _attach(self) -> None:
        try:
            state = json.loads(self.state_file.read_text())
        except (OSError, ValueError):
            return
        nodes = {int(n["node_id"]): _Node.from_json(n) for n in state.get("nodes", [])}
        live = [n for n in nodes.values() if n.pid is not None and self._alive(n)]
        if not live:
            self._recorded = sorted(nodes.values(), key=_node_key)
            self.cluster_id = state.get("cluster_id")
            return
        self.port_base = int(state["port_base"])
        self.kafka_version = str(state["kafka_version"])
        self.cluster_id = str(state["cluster_id"])
        self.broker_props = dict(state.get("broker_props", {}))
        self._internal_rf = int(state.get("internal_rf", min(3, len(nodes))))
        self.advertise_ports = {int(k): int(v) for k, v in state.get("advertise_ports", {}).items()}
        self.relay_ports = {int(k): int(v) for k, v in state.get("relay_ports", {}).items()}
        self.extra_jars = [Path(j) for j in state.get("extra_jars", [])]
        self._nodes = nodes

    def _save_state(self) -> None:
        state = {
            "kafka_version": self.kafka_version,
            "cluster_id": self.cluster_id,
            "port_base": self.port_base,
            "bootstrap_servers": self.bootstrap_servers,
            "sasl_bootstrap_servers": self.sasl_bootstrap_servers,
            "broker_props": self.broker_props,
            "internal_rf": self._internal_rf,
            "advertise_ports": {str(k): v for k, v in self.advertise_ports.items()},
            "relay_ports": {str(k): v for k, v in self.relay_ports.items()},
            "extra_jars": [str(j) for j in self.extra_jars],
            "nodes": [node.to_json() for node in sorted(self._nodes.values(), key=_node_key)],
        }
        tmp = self.state_file.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(state, indent=2) + "\n")
        tmp.replace(self.state_file)

    def _node_dir(self, node_id: int) -> Path:
        return self.directory / f"node-{node_id}"

    def _config_path(self, node_id: int) -> Path:
        return self._node_dir(node_id) / "server.properties"

    def _alive(self, node: _Node) -> bool:
        proc = self._procs.get(node.node_id)
        if proc is not None and proc.pid == node.pid:
            return proc.poll() is None
        return node.pid is not None and _pid_alive(node.pid, str(self._config_path(node.node_id)))

    def _running_nodes(self) -> list[_Node]:
        return [n for n in sorted(self._nodes.values(), key=_node_key) if n.pid is not None]

    # -- public view -----------------------------------------------------------------------

    @property
    def controller_port(self) -> int:
        """The port of the single KRaft controller (node 1)."""
        return self.port_base + 200

    def relay_listener_port(self, node_id: int) -> int:
        """The port of a node's RELAY listener (only with `relay_ports`)."""
        return self.port_base + 600 + node_id - 1

    @property
    def bootstrap_servers(self) -> str:
        """PLAINTEXT bootstrap servers (real listening ports), comma-separated."""
        return ",".join(f"{HOST}:{n.port}" for n in self._running_nodes())

    @property
    def sasl_bootstrap_servers(self) -> str:
        """SASL_PLAINTEXT bootstrap servers, comma-separated."""
        return ",".join(f"{HOST}:{n.sasl_port}" for n in self._running_nodes())

    @property
    def ssl_bootstrap_servers(self) -> str:
        """SSL bootstrap servers (server-authenticated TLS), comma-separated."""
        return ",".join(f"{HOST}:{n.ssl_port}" for n in self._running_nodes())

    @property
    def sasl_ssl_bootstrap_servers(self) -> str:
        """SASL_SSL bootstrap servers, comma-separated."""
        return ",".join(f"{HOST}:{n.sasl_ssl_port}" for n in self._running_nodes())

    @property
    def mtls_bootstrap_servers(self) -> str:
        """SSL bootstrap servers that require a client certificate, comma-separated."""
        return ",".join(f"{HOST}:{n.mtls_port}" for n in self._running_nodes())

    @property
    def tls_files(self) -> TlsFiles:
        """The cluster's CA, and a client certificate it accepts on the mTLS listener."""
        tls = self.directory / "tls"
        return TlsFiles(tls / "ca.pem", tls / "proxy.pem", tls / "proxy.key")

    @property
    def broker_addresses(self) -> dict[int, tuple[str, int]]:
        """Node id -> the real PLAINTEXT (host, port) it listens on, for running nodes."""
        return {n.node_id: (HOST, n.port) for n in self._running_nodes()}

    @property
    def all_broker_ports(self) -> set[int]:
        """Every port a node listens (or, before `up`, will listen) on: client, SASL, controller."""
        nodes = self._nodes.values() or [
            self._make_node(i) for i in range(1, self._initial_brokers + 1)
        ]
        return {port for node in nodes for port in node.ports}

    def is_running(self) -> bool:
        """Whether every node recorded as started is alive."""
        running = self._running_nodes()
        return bool(running) and all(self._alive(n) for n in running)

    def node_status(self) -> list[dict[str, Any]]:
        """Per-node facts (id, roles, pid, ports, alive) for `status`, stopped nodes too."""
        nodes = sorted(self._nodes.values(), key=_node_key) if self._nodes else self._recorded
        return [{**n.to_json(), "alive": n.pid is not None and self._alive(n)} for n in nodes]

    def log_files(self) -> list[Path]:
        """Every log file the nodes wrote (JVM stdout/stderr and log4j2 files)."""
        return sorted(self.directory.glob("node-*/*.log"))

    def classpath(self) -> str:
        """The classpath of Kafka's jars, for running small Java clients with `java -cp`."""
        return jar_classpath(ensure_jars(self.kafka_version))

    def tool_command(self, name: str, *args: str) -> list[str]:
        """The argv that runs Kafka CLI tool `name` (e.g. `kafka-topics`) with `args`."""
        return tool_command_for(self.kafka_version, name, *args)

    # -- lifecycle -------------------------------------------------------------------------

    def up(self, timeout: float = DEFAULT_TIMEOUT) -> str:
        """Start the cluster (or reuse the running one) and return its bootstrap servers."""
        if self._nodes and self.is_running():
            _progress(f"cluster already running in {self.directory}")
            self._wait_ready(timeout)
            return self.bootstrap_servers
        if any(self._alive(n) for n in self._running_nodes()):
            raise LocalKafkaError(
                f"the cluster in {self.directory} is only partly running; run `down` first"
            )
        missing = [str(jar) for jar in self.extra_jars if not jar.is_file()]
        if missing:
            raise LocalKafkaError(f"--jar: no such file: {', '.join(missing)}", 2)
        started = time.monotonic()
        java = java_executable()
        nodes = [self._make_node(i) for i in range(1, self._initial_brokers + 1)]
        _check_ports_free([port for node in nodes for port in node.ports])
        libs = ensure_jars(self.kafka_version)
        self._clear_directory()
        self._make_certificates()
        self._nodes = {node.node_id: node for node in nodes}
        self.cluster_id = _new_cluster_id()
        for node in nodes:
            self._write_node_files(node)
        _progress(f"formatting {len(nodes)} node(s) in {self.directory}")
        self._format(java, libs, nodes)
        _progress(f"starting Kafka {self.kafka_version}: {len(nodes)} node(s)")
        try:
            for node in nodes:
                self._start(java, libs, node)
            self._save_state()
            self._wait_ready(timeout)
        except BaseException:
            # Never leave a half-started cluster behind; the directory keeps the logs.
            self._abort(nodes)
            raise
        _progress(f"cluster ready in {time.monotonic() - started:.1f}s")
        return self.bootstrap_servers

    def add_broker(self, timeout: float = DEFAULT_TIMEOUT) -> int:
        """Start one more broker-only node, wait until Metadata lists it, return its node id."""
        if not self.is_running():
            raise LocalKafkaError(f"no running cluster in {self.directory}")
        node_id = max(self._nodes) + 1
        if node_id > MAX_NODE_ID:
            raise LocalKafkaError(f"at most {MAX_NODE_ID} nodes are supported")
        node = self._make_node(node_id)
        _check_ports_free(node.ports)
        java = java_executable()
        libs = ensure_jars(self.kafka_version)
        shutil.rmtree(self._node_dir(node_id), ignore_errors=True)
        self._nodes[node_id] = node
        self._write_node_files(node)
        self._format(java, libs, [node])
        try:
            self._start(java, libs, node)
            self._save_state()
            self._wait_ready(timeout)
        except BaseException:
            self._abort([node])
            raise
        _progress(f"node {node_id} joined on {HOST}:{node.port}")
        return node_id

    def stop_broker(self, node_id: int, grace: float = 30.0) -> None:
        """Stop one node (SIGTERM, then SIGKILL after `grace` seconds); it stays stopped."""
        node = self._nodes.get(node_id)
        if node is None:
            raise LocalKafkaError(f"no node {node_id} in {self.directory}")
        self._terminate([node], grace)
        node.pid = None
        self._save_state()

    def kill_broker(self, node_id: int) -> None:
        """SIGKILL one node, as a crash would (no controlled shutdown); it stays stopped."""
        node = self._nodes.get(node_id)
        if node is None:
            raise LocalKafkaError(f"no node {node_id} in {self.directory}")
        if node.pid is not None and self._alive(node):
            with contextlib.suppress(ProcessLookupError):
                os.kill(node.pid, signal.SIGKILL)
            self._terminate([node], 10.0)
        node.pid = None
        self._save_state()

    def start_broker(self, node_id: int, timeout: float = DEFAULT_TIMEOUT) -> None:
        """Start a stopped node again with its data, and wait until every node is ready."""
        node = self._nodes.get(node_id)
        if node is None:
            raise LocalKafkaError(f"no node {node_id} in {self.directory}")
        if node.pid is not None and self._alive(node):
            raise LocalKafkaError(f"node {node_id} is already running")
        _check_ports_free(node.ports)
        self._start(java_executable(), ensure_jars(self.kafka_version), node)
        self._save_state()
        self._wait_ready(timeout)

    def down(self, keep: bool = False) -> None:
        """Stop every node (brokers first, then the controller) and remove the directory."""
        running = self._running_nodes()
        alive = sum(1 for n in running if self._alive(n))
        if alive:
            _progress(f"stopping {alive} node(s)")
        # Brokers first: their controlled shutdown needs the controller still up.
        self._terminate([n for n in running if n.controller_port is None], 30.0)
        self._terminate([n for n in running if n.controller_port is not None], 30.0)
        for node in running:
            node.pid = None
        if keep:
            if self._nodes:
                self._save_state()
        elif self.state_file.is_file() or any(self.directory.glob("node-*")):
            shutil.rmtree(self.directory, ignore_errors=True)

    # -- internals -------------------------------------------------------------------------

    def _make_node(self, node_id: int) -> _Node:
        port = self.port_base + node_id - 1
        return _Node(
            node_id=node_id,
            port=port,
            sasl_port=self.port_base + 100 + node_id - 1,
            controller_port=self.controller_port if node_id == 1 else None,
            advertised_port=self.advertise_ports.get(node_id, port),
            ssl_port=self.port_base + 300 + node_id - 1,
            sasl_ssl_port=self.port_base + 400 + node_id - 1,
            mtls_port=self.port_base + 500 + node_id - 1,
        )

    def _make_certificates(self) -> None:
        ca = throwaway_ca().ThrowawayCa(self.directory / "tls")
        ca.keystore(ca.issue("broker", server=True))
        ca.issue("proxy", server=False)

    def _clear_directory(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        for stale in self.directory.glob("node-*"):
            shutil.rmtree(stale, ignore_errors=True)
        self.state_file.unlink(missing_ok=True)

    def _properties(self, node: _Node) -> dict[str, str]:
        internal_rf = str(self._internal_rf)
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
        if node.node_id in self.relay_ports:
            listeners.append(f"RELAY://{HOST}:{self.relay_listener_port(node.node_id)}")
            advertised.append(f"RELAY://{HOST}:{self.relay_ports[node.node_id]}")
        plain_users = " ".join(f'user_{u}="{p}"' for u, p in SCRAM_USERS.items())
        scram_jaas = "org.apache.kafka.common.security.scram.ScramLoginModule required;"
        tls = self.directory / "tls"
        props = {
            "process.roles": node.roles,
            "node.id": str(node.node_id),
            "controller.quorum.voters": f"1@{HOST}:{self.controller_port}",
            "controller.listener.names": "CONTROLLER",
            "listeners": ",".join(listeners),
            "advertised.listeners": ",".join(advertised),
            "listener.security.protocol.map": (
                "PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT,SSL:SSL,SASL_SSL:SASL_SSL,"
                "MTLS:SSL,CONTROLLER:PLAINTEXT,RELAY:PLAINTEXT"
            ),
            "inter.broker.listener.name": "PLAINTEXT",
            "sasl.enabled.mechanisms": ",".join(SASL_MECHANISMS),
            # PEM stores (KIP-651): the throwaway CA from _make_certificates.
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(tls / "broker.keystore.pem"),
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(tls / "ca.pem"),
            "listener.name.mtls.ssl.client.auth": "required",
            "log.dirs": str(self._node_dir(node.node_id) / "data"),
            "auto.create.topics.enable": "true",
            "num.partitions": "1",
            "default.replication.factor": "1",
            "offsets.topic.replication.factor": internal_rf,
            "transaction.state.log.replication.factor": internal_rf,
            "transaction.state.log.min.isr": "1",
            "share.coordinator.state.topic.replication.factor": internal_rf,
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
                    "org.apache.kafka.common.security.plain.PlainLoginModule required "
                    f"{plain_users};"
                ),
                f"{sasl}.scram-sha-256.sasl.jaas.config": scram_jaas,
                f"{sasl}.scram-sha-512.sasl.jaas.config": scram_jaas,
            }
        props.update(self.broker_props)
        return props

    def _write_node_files(self, node: _Node) -> None:
        node_dir = self._node_dir(node.node_id)
        (node_dir / "data").mkdir(parents=True, exist_ok=True)
        lines = [
            f"{key}={_escape_property(value)}" for key, value in self._properties(node).items()
        ]
        self._config_path(node.node_id).write_text("\n".join(lines) + "\n")
        (node_dir / "log4j2.xml").write_text(
            LOG4J_BROKER.format(
                kafka_log=quoteattr(str(node_dir / "kafka.log")),
                state_change_log=quoteattr(str(node_dir / "state-change.log")),
            )
        )

    def _format(self, java: str, libs: Path, nodes: Sequence[_Node]) -> None:
        assert self.cluster_id is not None
        classpath = self._node_classpath(libs)
        running: list[tuple[_Node, subprocess.Popen[str]]] = []
        for node in nodes:
            command = [
                java,
                *QUICK_JVM_OPTS,
                f"-Dlog4j2.configurationFile={self._node_dir(node.node_id) / 'log4j2.xml'}",
                "-cp",
                classpath,
                TOOLS["kafka-storage"],
                "format",
                "--config",
                str(self._config_path(node.node_id)),
                "--cluster-id",
                self.cluster_id,
                "--ignore-formatted",
            ]
            if node.controller_port is not None:
                # SCRAM credentials live in the metadata log, which the controller bootstraps.
                for mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
                    for user, password in SCRAM_USERS.items():
                        command += ["--add-scram", f"{mechanism}=[name={user},password={password}]"]
            proc = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
            running.append((node, proc))
        failures = []
        for node, proc in running:
            output, _ = proc.communicate()
            if proc.returncode != 0:
                failures.append(f"node {node.node_id}: {_java_error(output, proc.returncode)}")
        if failures:
            raise LocalKafkaError("kafka-storage format failed: " + "; ".join(failures))

    def _node_classpath(self, libs: Path) -> str:
        """Kafka's jars, then the extra ones (a broker policy must be there to format too)."""
        return os.pathsep.join([jar_classpath(libs), *map(str, self.extra_jars)])

    def _start(self, java: str, libs: Path, node: _Node) -> None:
        node_dir = self._node_dir(node.node_id)
        command = [
            java,
            *(LIGHT_BROKER_JVM_OPTS if self.light_jvm else BROKER_JVM_OPTS),
            f"-Dlog4j2.configurationFile={node_dir / 'log4j2.xml'}",
            f"-Dkafka.logs.dir={node_dir}",
            "-cp",
            self._node_classpath(libs),
            "kafka.Kafka",
            str(self._config_path(node.node_id)),
        ]
        with (node_dir / "server.log").open("ab") as out:
            proc = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=node_dir,
                start_new_session=True,
            )
        self._procs[node.node_id] = proc
        node.pid = proc.pid

    def _wait_ready(self, timeout: float) -> None:
        """Wait until every running node answers Metadata listing every running node."""
        deadline = time.monotonic() + timeout
        expected = {n.node_id for n in self._running_nodes()}
        pending = list(self._running_nodes())
        while pending:
            node = pending[0]
            if not self._alive(node):
                self._fail(node, "exited during startup")
            try:
                listed = fetch_broker_ids(HOST, node.port, timeout=2.0)
            except (OSError, struct.error):
                listed = {}
            if expected <= listed.keys():
                pending.pop(0)
                continue
            if time.monotonic() >= deadline:
                self._fail(
                    node, f"not ready after {timeout:.0f}s (Metadata lists {sorted(listed)})"
                )
            time.sleep(0.25)

    def _fail(self, node: _Node, reason: str) -> NoReturn:
        node_dir = self._node_dir(node.node_id)
        for log in (node_dir / "server.log", node_dir / "kafka.log"):
            tail = _tail(log)
            if tail:
                print(f"--- tail of {log} ---\n{tail}", file=sys.stderr)
        raise LocalKafkaError(
            f"node {node.node_id} {reason}; stopped what was started, logs in {node_dir}"
        )

    def _abort(self, nodes: Sequence[_Node]) -> None:
        self._terminate([n for n in nodes if n.controller_port is None], 10.0)
        self._terminate([n for n in nodes if n.controller_port is not None], 10.0)
        for node in nodes:
            node.pid = None
        self._save_state()

    def _terminate(self, nodes: Sequence[_Node], grace: float) -> None:
        live = [n for n in nodes if n.pid is not None and self._alive(n)]
        for node in live:
            assert node.pid is not None
            with contextlib.suppress(ProcessLookupError):
                os.kill(node.pid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        while live and time.monotonic() < deadline:
            live = [n for n in live if self._alive(n)]
            if live:
                time.sleep(0.1)
        for node in live:
            assert node.pid is not None
            _progress(f"node {node.node_id} ignored SIGTERM for {grace:.0f}s; killing it")
            with contextlib.suppress(ProcessLookupError):
                os.kill(node.pid, signal.SIGKILL)
        for node in nodes:
            proc = self._procs.pop(node.node_id, None)
            if proc is not None:
                proc.wait(timeout=10)
        while any(self._alive(n) for n in live):
            time.sleep(0.05)


def throwaway_ca() -> ModuleType:
    """The `throwaway_ca` module beside this file (it needs the `cryptography` package)."""
    path = Path(__file__).with_name("throwaway_ca.py")
    spec = importlib.util.spec_from_file_location("throwaway_ca", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("throwaway_ca", module)  # dataclasses look their module up there
    try:
        spec.loader.exec_module(module)
    except ImportError as exc:
        raise LocalKafkaError(
            f"the TLS listeners need a throwaway CA ({exc}): run from the project's venv "
            "(make setup)"
        ) from None
    return module


def _java_error(output: str, returncode: int) -> str:
    """The most telling line of a failed JVM's output: its last non-stack-trace line."""
    lines = [line for line in output.splitlines() if line.strip() and not line[0].isspace()]
    return lines[-1].strip() if lines else f"exit code {returncode}"


def _node_key(node: _Node) -> int:
    return node.node_id


def _escape_property(value: str) -> str:
    # java.util.Properties treats backslashes as escapes.
    return value.replace("\\", "\\\\")


# -- command line ----------------------------------------------------------------------------


def _parse_props(pairs: Sequence[str]) -> dict[str, str]:
    props = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise LocalKafkaError(f"--broker-prop expects key=value, got {pair!r}", 2)
        props[key.strip()] = value
    return props


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="local-kafka",
        description=(
            "Run a real Apache Kafka cluster (KRaft, plain JVMs) on 127.0.0.1 for development and "
            "tests. Node 1 is broker+controller, nodes 2..N are brokers. Node i listens on "
            "PLAINTEXT port-base+i-1 and SASL_PLAINTEXT port-base+100+i-1 (SCRAM-SHA-256/512 and "
            "PLAIN; users admin, alice, bob with password <name>-secret); the controller on "
            "port-base+200; SSL on port-base+300+i-1, SASL_SSL on port-base+400+i-1 and SSL "
            "requiring a client certificate on port-base+500+i-1, with a throwaway CA in "
            "DIR/tls (ca.pem; proxy.pem and proxy.key are a client certificate it signed). "
            "Jars come from Maven once and are cached under "
            "${XDG_CACHE_HOME:-~/.cache}/kafka-policy-proxy/."
        ),
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def add_dir(p: argparse.ArgumentParser) -> None:
        p.add_argument(
            "--dir",
            type=Path,
            default=DEFAULT_DIR,
            help=f"cluster directory (default: {DEFAULT_DIR})",
        )

    def add_version(p: argparse.ArgumentParser) -> None:
        p.add_argument(
            "--kafka-version",
            default=None,
            help=f"Kafka version (default: $KAFKA_VERSION or {DEFAULT_KAFKA_VERSION})",
        )

    up = sub.add_parser(
        "up",
        help="start a cluster; prints its bootstrap servers on stdout",
        description=(
            "Format storage, start the JVMs detached and wait until Metadata lists every broker. "
            "Prints the PLAINTEXT bootstrap servers on one line of stdout; progress goes to "
            "stderr. If the cluster in --dir is already running, just prints its servers."
        ),
    )
    add_dir(up)
    add_version(up)
    up.add_argument(
        "--brokers", type=int, default=DEFAULT_BROKERS, help="number of nodes (default: 3)"
    )
    up.add_argument(
        "--port-base",
        type=int,
        default=DEFAULT_PORT_BASE,
        help=f"first PLAINTEXT port (default: {DEFAULT_PORT_BASE})",
    )
    up.add_argument(
        "--broker-prop",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra broker property, repeatable; overrides the launcher's defaults",
    )
    up.add_argument(
        "--jar",
        action="append",
        default=[],
        type=Path,
        metavar="PATH",
        help="a jar added to every node's classpath, repeatable (e.g. a broker-side policy "
        "named by --broker-prop create.topic.policy.class.name=...)",
    )
    up.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_TIMEOUT,
        help=f"seconds to wait for the brokers (default: {DEFAULT_TIMEOUT:.0f})",
    )

    down = sub.add_parser(
        "down",
        help="stop the cluster and remove its directory",
        description="Stop every node "
        "(SIGTERM, brokers first; SIGKILL after 30 s) and remove the directory unless --keep.",
    )
    add_dir(down)
    down.add_argument("--keep", action="store_true", help="keep the directory (data and logs)")

    status = sub.add_parser(
        "status",
        help="show whether each node runs; prints bootstrap servers",
        description="Show each node's state and ports; exit 0 if all run, 1 otherwise.",
    )
    add_dir(status)

    add = sub.add_parser(
        "add-broker",
        help="start one more broker in the running cluster; prints its node id",
        description="Start one more broker-only node and wait until Metadata lists it.",
    )
    add_dir(add)
    add.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_TIMEOUT,
        help=f"seconds to wait (default: {DEFAULT_TIMEOUT:.0f})",
    )

    tool = sub.add_parser(
        "tool",
        help="run a Kafka CLI tool, e.g. `tool kafka-topics --bootstrap-server ... --list`",
        description=(
            "Run a Kafka CLI tool by its bin/ script name (with or without .sh) from the cached "
            "jars. Without NAME, list the known tools. Known: " + ", ".join(sorted(TOOLS)) + "."
        ),
    )
    add_dir(tool)
    add_version(tool)
    tool.add_argument("name", nargs="?", metavar="NAME", help="tool name, e.g. kafka-topics")
    tool.add_argument("args", nargs=argparse.REMAINDER, metavar="ARGS", help="the tool's args")
    return parser


def _cmd_status(cluster: LocalKafka) -> int:
    nodes = cluster.node_status()
    if not nodes:
        print(f"no cluster in {cluster.directory}", file=sys.stderr)
        return 1
    alive = sum(1 for node in nodes if node["alive"])
    overall = "running" if alive == len(nodes) else f"{alive} of {len(nodes)} nodes running"
    print(f"cluster {cluster.cluster_id} in {cluster.directory}: {overall}", file=sys.stderr)
    for node in nodes:
        ports = (
            f"PLAINTEXT {HOST}:{node['port']}  SASL_PLAINTEXT {HOST}:{node['sasl_port']}  "
            f"SSL {HOST}:{node['ssl_port']}  SASL_SSL {HOST}:{node['sasl_ssl_port']}  "
            f"SSL+client-auth {HOST}:{node['mtls_port']}"
        )
        if node["controller_port"] is not None:
            ports += f"  CONTROLLER {HOST}:{node['controller_port']}"
        if node["advertised_port"] != node["port"]:
            ports += f"  (advertises {HOST}:{node['advertised_port']})"
        state = f"running (pid {node['pid']})" if node["alive"] else "stopped"
        line = f"  node {node['node_id']:<3} {node['roles']:<17} {state:<20} {ports}"
        print(line, file=sys.stderr)
    if alive:
        print(cluster.bootstrap_servers)
    return 0 if alive == len(nodes) else 1


def _run(argv: Sequence[str]) -> int:
    args = _build_parser().parse_args(argv)
    if args.command == "up":
        cluster = LocalKafka(
            args.dir,
            brokers=args.brokers,
            port_base=args.port_base,
            kafka_version=args.kafka_version,
            broker_props=_parse_props(args.broker_prop),
            extra_jars=args.jar,
        )
        print(cluster.up(timeout=args.timeout), flush=True)
        return 0
    if args.command == "down":
        LocalKafka(args.dir).down(keep=args.keep)
        return 0
    if args.command == "status":
        return _cmd_status(LocalKafka(args.dir))
    if args.command == "add-broker":
        print(LocalKafka(args.dir).add_broker(timeout=args.timeout), flush=True)
        return 0
    if args.name is None:
        for name in sorted(TOOLS):
            print(f"{name:<30} {TOOLS[name]}")
        return 0
    # The running cluster's version, unless one was asked for explicitly.
    version = args.kafka_version or LocalKafka(args.dir).kafka_version
    command = tool_command_for(version, args.name, *args.args)
    sys.stdout.flush()
    os.execv(command[0], command)


def main(argv: Sequence[str] | None = None) -> int:
    """CLI entry point; returns the exit code."""
    try:
        return _run(sys.argv[1:] if argv is None else argv)
    except LocalKafkaError as exc:
        print(f"local-kafka: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
