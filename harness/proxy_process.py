"""The proxy run as users run it (`kafka-policy-proxy run --config FILE`), for tests and benches."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml

from harness.ports import wait_for_port


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
        extra = dict(extra or {})
        # `extra`'s sections replace the defaults, but for listeners, whose keys it adds to.
        listeners = {
            "bind_host": "127.0.0.1",
            "advertised_host": "127.0.0.1",
            "bootstrap_port": bootstrap_port,
            "broker_port_base": port_base,
            **extra.pop("listeners", {}),
        }
        self.config_path.write_text(
            yaml.safe_dump(
                {
                    "listeners": listeners,
                    "upstream": {"bootstrap_servers": upstream.split(",")},
                    "logging": {"format": "json", "level": "info"},
                    "shutdown_timeout_s": 10,
                    **extra,
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
        try:
            # Generous: on a loaded machine importing the proxy alone can take tens of seconds.
            wait_for_port(bootstrap_port, timeout=60.0)
            self._wait_for_log("proxy ready")
        except BaseException:
            self.process.kill()  # a proxy that failed to start is not left running
            self.process.wait()
            self._log.close()
            raise

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
