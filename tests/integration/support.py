"""Shared pieces of the integration tests: the launcher, the proxy process, a connection watcher."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterable
from pathlib import Path
from types import ModuleType
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]


def load_launcher() -> ModuleType:
    """Import scripts/local_kafka.py (it is a script, not a package)."""
    spec = importlib.util.spec_from_file_location(
        "local_kafka", REPO / "scripts" / "local_kafka.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("local_kafka", module)
    spec.loader.exec_module(module)
    return module


def wait_for_port(port: int, timeout: float = 20.0) -> None:
    """Wait until something accepts connections on 127.0.0.1:port."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


class ProxyProcess:
    """The proxy run as users run it: `kafka-policy-proxy run --config FILE`, in a subprocess."""

    def __init__(
        self,
        workdir: Path,
        upstream: str,
        bootstrap_port: int,
        port_base: int,
        extra: dict[str, Any] | None = None,
        *,
        env: dict[str, str] | None = None,
    ) -> None:
        self.bootstrap_port = bootstrap_port
        self.port_base = port_base
        self.bootstrap = f"127.0.0.1:{bootstrap_port}"
        self.config_path = workdir / "proxy.yaml"
        self.log_path = workdir / "proxy.log"
        self.policy_path: Path | None = None
        self.audit_path: Path | None = None
        self.config_path.write_text(
            yaml.safe_dump(
                {
                    "listeners": {
                        "bind_host": "127.0.0.1",
                        "advertised_host": "127.0.0.1",
                        "bootstrap_port": bootstrap_port,
                        "broker_port_base": port_base,
                    },
                    "upstream": {"bootstrap_servers": upstream.split(",")},
                    "logging": {"format": "json", "level": "info"},
                    "shutdown_timeout_s": 10,
                    **(extra or {}),
                }
            )
        )
        self._log = self.log_path.open("ab")
        self.process = subprocess.Popen(
            [
                str(Path(sys.executable).parent / "kafka-policy-proxy"),
                "run",
                "--config",
                str(self.config_path),
            ],
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env=None if env is None else {**os.environ, **env},
        )
        wait_for_port(bootstrap_port)
        self._wait_for_log("proxy ready")

    def node_port(self, node_id: int) -> int:
        """The proxy listener that serves a broker node."""
        return self.port_base + node_id

    def audit_events(self) -> list[dict[str, Any]]:
        """The audit log's events so far."""
        assert self.audit_path is not None
        if not self.audit_path.exists():
            return []
        return [json.loads(line) for line in self.audit_path.read_text().splitlines() if line]

    def log_text(self) -> str:
        """Everything the proxy has logged so far."""
        return self.log_path.read_text(errors="replace")

    def alive(self) -> bool:
        """Whether the proxy process is still running."""
        return self.process.poll() is None

    def stop(self, timeout: float = 30.0) -> int:
        """SIGTERM the proxy and return its exit code."""
        if self.alive():
            self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout)
        finally:
            self._log.close()

    def _wait_for_log(self, text: str, timeout: float = 20.0) -> None:
        deadline = time.monotonic() + timeout
        while text not in self.log_text():
            if not self.alive() or time.monotonic() > deadline:
                raise RuntimeError(f"proxy did not log {text!r}:\n{self.log_text()}")
            time.sleep(0.05)


def sasl_enforcing_proxy(
    workdir: Path,
    kafka: Any,
    policy: Path,
    ports: tuple[int, int],
    mechanism: str = "SCRAM-SHA-512",
) -> ProxyProcess:
    """An enforcing proxy, with an audit log, in front of the brokers' SASL listener.

    SASL passes through from clients; the proxy's own cluster-state reads log in as `admin`.
    """
    audit = workdir / "audit.jsonl"
    process = ProxyProcess(
        workdir,
        kafka.sasl_bootstrap_servers,
        *ports,
        extra={
            "policy": {"file": str(policy)},
            "audit": {"file": str(audit)},
            "cluster_state": {
                "sasl": {"mechanism": mechanism, "username": "admin", "password": "admin-secret"}
            },
        },
    )
    process.audit_path = audit
    return process


def _socket_inodes(pid: int) -> set[str]:
    inodes = set()
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
    except OSError:
        pass
    return inodes


def _tcp_remote_ports(inodes: set[str]) -> set[int]:
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if fields[9] in inodes:
                ports.add(int(fields[2].rsplit(":", 1)[1], 16))
    return ports


class BrokerConnectionWatcher:
    """Samples the TCP connections of some processes and records any to a broker port.

    Sockets that already exist when watching starts are left out: other tests in the same
    process may hold direct broker connections on purpose (to check the brokers' view).
    """

    def __init__(self, broker_ports: Iterable[int], pids: Iterable[int] = ()) -> None:
        self.broker_ports = set(broker_ports)
        self.pids = {os.getpid(), *pids}
        self.seen_ports: set[int] = set()
        self.violations: set[int] = set()
        self._baseline: set[str] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> BrokerConnectionWatcher:
        self._baseline = _socket_inodes(os.getpid())
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.sample()

    def watch(self, pid: int) -> None:
        """Also watch this process (e.g. a Java CLI tool)."""
        self.pids.add(pid)

    def sample(self) -> None:
        """Look at the watched processes' connections once."""
        inodes: set[str] = set()
        for pid in list(self.pids):
            inodes |= _socket_inodes(pid)
        ports = _tcp_remote_ports(inodes - self._baseline)
        self.seen_ports |= ports
        self.violations |= ports & self.broker_ports

    def _run(self) -> None:
        while not self._stop.wait(0.02):
            self.sample()


PROXY_ADDRESS = re.compile(r"127\.0\.0\.1:\d+")
