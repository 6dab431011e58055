"""Build and run Kroxylicious 0.12.0 with no filters, port per broker, as the bench's Java peer."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
_JAR = HERE / "target" / "kroxylicious-peer-1.jar"


def build() -> list[Path]:
    """`mvn package` once; the launcher jar and its dependencies, for the classpath."""
    if not _JAR.is_file():
        subprocess.run(["mvn", "-q", "-B", "package"], cwd=HERE, check=True)
    return [_JAR, *sorted((HERE / "target" / "lib").glob("*.jar"))]


def config(upstream: str, bootstrap_port: int, node_ids: range) -> dict[str, object]:
    """One virtual cluster, a port-per-broker gateway (node N on bootstrap_port + N), no filters."""
    return {
        "virtualClusters": [
            {
                "name": "bench",
                "targetCluster": {"bootstrapServers": upstream},
                "gateways": [
                    {
                        "name": "default",
                        "portIdentifiesNode": {
                            "bootstrapAddress": f"127.0.0.1:{bootstrap_port}",
                            "nodeStartPort": bootstrap_port + node_ids.start,
                            "nodeIdRanges": [
                                {
                                    "name": "brokers",
                                    "start": node_ids.start,
                                    "end": node_ids.stop - 1,
                                }
                            ],
                        },
                    }
                ],
            }
        ]
    }


class KroxyliciousProcess:
    """Kroxylicious in a JVM of its own; `threads` sets its Netty worker threads."""

    def __init__(
        self, workdir: Path, upstream: str, bootstrap_port: int, node_ids: range, threads: int
    ) -> None:
        classpath = os.pathsep.join(str(p) for p in build())
        path = workdir / "kroxylicious.yaml"
        path.write_text(yaml.safe_dump(config(upstream, bootstrap_port, node_ids)))
        java = shutil.which("java") or "java"
        self.bootstrap = f"127.0.0.1:{bootstrap_port}"
        self.threads = threads
        self._log = (workdir / "kroxylicious.log").open("ab")
        self.process = subprocess.Popen(
            [
                java,
                "-Xmx512m",
                f"-XX:ActiveProcessorCount={threads}",
                "-cp",
                classpath,
                "bench.KroxyliciousPeer",
                str(path),
            ],
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )
        _wait_for_port(bootstrap_port, self.process)

    def stop(self) -> None:
        """Stop the JVM."""
        self.process.terminate()
        try:
            self.process.wait(20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self._log.close()


def _wait_for_port(port: int, process: subprocess.Popen[bytes], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"Kroxylicious exited with {process.returncode}; see its log")
        try:
            socket.create_connection(("127.0.0.1", port), 0.5).close()
            return
        except OSError:
            time.sleep(0.2)
    raise RuntimeError(f"Kroxylicious did not listen on {port} within {timeout:.0f} s")
