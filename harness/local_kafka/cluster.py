"""LocalKafka: the local KRaft cluster's state, its view for clients, and its lifecycle."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import struct
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, NoReturn

from harness.local_kafka.jars import ensure_jars, jar_classpath, java_executable, tool_command_for
from harness.local_kafka.node import (
    Node,
    config_path,
    controller_port_of,
    node_dir,
    node_key,
    plan_node,
)
from harness.local_kafka.node_config import (
    TlsFiles,
    make_certificates,
    node_properties,
    write_node_files,
)
from harness.local_kafka.probe import check_ports_free, fetch_broker_ids, pid_alive
from harness.local_kafka.processes import (
    format_storage,
    new_cluster_id,
    print_log_tails,
    start_node,
)
from harness.local_kafka.report import LocalKafkaError, progress
from harness.local_kafka.settings import (
    BROKER_JVM_OPTS,
    DEFAULT_BROKERS,
    DEFAULT_PORT_BASE,
    DEFAULT_TIMEOUT,
    HOST,
    LIGHT_BROKER_JVM_OPTS,
    MAX_NODE_ID,
    STATE_FILE,
    default_kafka_version,
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
        port_stride: int = 100,
        jvm_opts: Sequence[str] = (),
    ) -> None:
        if not 1 <= brokers <= min(MAX_NODE_ID, port_stride):
            raise ValueError(f"brokers must be between 1 and {min(MAX_NODE_ID, port_stride)}")
        if not 1024 <= port_base <= 65535 - 7 * port_stride:
            raise ValueError(
                f"port_base must leave room for base..base+{7 * port_stride - 1} in 1024..65535"
            )
        # Ports per kind of listener: node N's SASL port is base + stride + N - 1, and so on.
        self.port_stride = port_stride
        # JVM options added to every node's (e.g. -D system properties a listener needs).
        self.jvm_opts: list[str] = list(jvm_opts)
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
        self._nodes: dict[int, Node] = {}
        self._procs: dict[int, subprocess.Popen[bytes]] = {}
        # The nodes of a stopped cluster (e.g. after `down --keep`), shown by `status`.
        self._recorded: list[Node] = []
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
        nodes = {int(n["node_id"]): Node.from_json(n) for n in state.get("nodes", [])}
        live = [n for n in nodes.values() if n.pid is not None and self._alive(n)]
        if not live:
            self._recorded = sorted(nodes.values(), key=node_key)
            self.cluster_id = state.get("cluster_id")
            return
        self.port_base = int(state["port_base"])
        self.port_stride = int(state.get("port_stride", 100))
        self.jvm_opts = [str(o) for o in state.get("jvm_opts", [])]
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
            "port_stride": self.port_stride,
            "jvm_opts": self.jvm_opts,
            "bootstrap_servers": self.bootstrap_servers,
            "sasl_bootstrap_servers": self.sasl_bootstrap_servers,
            "broker_props": self.broker_props,
            "internal_rf": self._internal_rf,
            "advertise_ports": {str(k): v for k, v in self.advertise_ports.items()},
            "relay_ports": {str(k): v for k, v in self.relay_ports.items()},
            "extra_jars": [str(j) for j in self.extra_jars],
            "nodes": [node.to_json() for node in sorted(self._nodes.values(), key=node_key)],
        }
        tmp = self.state_file.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(state, indent=2) + "\n")
        tmp.replace(self.state_file)

    def _alive(self, node: Node) -> bool:
        proc = self._procs.get(node.node_id)
        if proc is not None and proc.pid == node.pid:
            return proc.poll() is None
        return node.pid is not None and pid_alive(
            node.pid, str(config_path(self.directory, node.node_id))
        )

    def _running_nodes(self) -> list[Node]:
        return [n for n in sorted(self._nodes.values(), key=node_key) if n.pid is not None]

    # -- public view -----------------------------------------------------------------------

    @property
    def controller_port(self) -> int:
        """The port of the single KRaft controller (node 1)."""
        return controller_port_of(self.port_base, self.port_stride)

    def relay_listener_port(self, node_id: int) -> int:
        """The port of a node's RELAY listener (only with `relay_ports`)."""
        return self.port_base + 6 * self.port_stride + node_id - 1

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
            plan_node(i, self.port_base, self.advertise_ports, self.port_stride)
            for i in range(1, self._initial_brokers + 1)
        ]
        return {port for node in nodes for port in node.ports}

    def is_running(self) -> bool:
        """Whether every node recorded as started is alive."""
        running = self._running_nodes()
        return bool(running) and all(self._alive(n) for n in running)

    def node_status(self) -> list[dict[str, Any]]:
        """Per-node facts (id, roles, pid, ports, alive) for `status`, stopped nodes too."""
        nodes = sorted(self._nodes.values(), key=node_key) if self._nodes else self._recorded
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
            progress(f"cluster already running in {self.directory}")
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
        nodes = [
            plan_node(i, self.port_base, self.advertise_ports, self.port_stride)
            for i in range(1, self._initial_brokers + 1)
        ]
        check_ports_free([port for node in nodes for port in node.ports])
        libs = ensure_jars(self.kafka_version)
        self._clear_directory()
        make_certificates(self.directory)
        self._nodes = {node.node_id: node for node in nodes}
        self.cluster_id = new_cluster_id()
        for node in nodes:
            self._write_node_files(node)
        progress(f"formatting {len(nodes)} node(s) in {self.directory}")
        self._format(java, libs, nodes)
        progress(f"starting Kafka {self.kafka_version}: {len(nodes)} node(s)")
        try:
            for node in nodes:
                self._start(java, libs, node)
            self._save_state()
            self._wait_ready(timeout)
        except BaseException:
            # Never leave a half-started cluster behind; the directory keeps the logs.
            self._abort(nodes)
            raise
        progress(f"cluster ready in {time.monotonic() - started:.1f}s")
        return self.bootstrap_servers

    def add_broker(self, timeout: float = DEFAULT_TIMEOUT) -> int:
        """Start one more broker-only node, wait until Metadata lists it, return its node id."""
        if not self.is_running():
            raise LocalKafkaError(f"no running cluster in {self.directory}")
        node_id = max(self._nodes) + 1
        if node_id > MAX_NODE_ID:
            raise LocalKafkaError(f"at most {MAX_NODE_ID} nodes are supported")
        node = plan_node(node_id, self.port_base, self.advertise_ports, self.port_stride)
        check_ports_free(node.ports)
        java = java_executable()
        libs = ensure_jars(self.kafka_version)
        shutil.rmtree(node_dir(self.directory, node_id), ignore_errors=True)
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
        progress(f"node {node_id} joined on {HOST}:{node.port}")
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
        check_ports_free(node.ports)
        self._start(java_executable(), ensure_jars(self.kafka_version), node)
        self._save_state()
        self._wait_ready(timeout)

    def down(self, keep: bool = False) -> None:
        """Stop every node (brokers first, then the controller) and remove the directory."""
        running = self._running_nodes()
        alive = sum(1 for n in running if self._alive(n))
        if alive:
            progress(f"stopping {alive} node(s)")
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

    def _clear_directory(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        for stale in self.directory.glob("node-*"):
            shutil.rmtree(stale, ignore_errors=True)
        self.state_file.unlink(missing_ok=True)

    def _write_node_files(self, node: Node) -> None:
        relay = None
        if node.node_id in self.relay_ports:
            relay = (self.relay_listener_port(node.node_id), self.relay_ports[node.node_id])
        properties = node_properties(
            node,
            self.directory,
            controller_port=self.controller_port,
            internal_rf=self._internal_rf,
            relay=relay,
            broker_props=self.broker_props,
        )
        write_node_files(node, self.directory, properties)

    def _format(self, java: str, libs: Path, nodes: Sequence[Node]) -> None:
        assert self.cluster_id is not None
        format_storage(java, self._node_classpath(libs), self.directory, nodes, self.cluster_id)

    def _node_classpath(self, libs: Path) -> str:
        """Kafka's jars, then the extra ones (a broker policy must be there to format too)."""
        return os.pathsep.join([jar_classpath(libs), *map(str, self.extra_jars)])

    def _start(self, java: str, libs: Path, node: Node) -> None:
        opts = LIGHT_BROKER_JVM_OPTS if self.light_jvm else BROKER_JVM_OPTS
        proc = start_node(
            java, self._node_classpath(libs), self.directory, node, [*opts, *self.jvm_opts]
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

    def _fail(self, node: Node, reason: str) -> NoReturn:
        folder = node_dir(self.directory, node.node_id)
        print_log_tails(folder)
        raise LocalKafkaError(
            f"node {node.node_id} {reason}; stopped what was started, logs in {folder}"
        )

    def _abort(self, nodes: Sequence[Node]) -> None:
        self._terminate([n for n in nodes if n.controller_port is None], 10.0)
        self._terminate([n for n in nodes if n.controller_port is not None], 10.0)
        for node in nodes:
            node.pid = None
        self._save_state()

    def _terminate(self, nodes: Sequence[Node], grace: float) -> None:
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
            progress(f"node {node.node_id} ignored SIGTERM for {grace:.0f}s; killing it")
            with contextlib.suppress(ProcessLookupError):
                os.kill(node.pid, signal.SIGKILL)
        for node in nodes:
            proc = self._procs.pop(node.node_id, None)
            if proc is not None:
                proc.wait(timeout=10)
        while any(self._alive(n) for n in live):
            time.sleep(0.05)
