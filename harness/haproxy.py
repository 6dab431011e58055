"""Debian's HAProxy as a TCP load balancer in front of the proxy, sending PROXY protocol headers.

One frontend per proxy port (bootstrap and each broker), on an address of its own, so the
proxy can advertise the balancer's address to clients; each backend connects to the proxy from
`source`, so the proxy sees the balancer's address on the socket and the client's in the header.
"""

from __future__ import annotations

import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterable
from pathlib import Path

SEND_PROXY = {1: "send-proxy", 2: "send-proxy-v2"}


def haproxy_binary() -> str:
    """The haproxy command; fails with how to install it."""
    found = shutil.which("haproxy") or shutil.which("/usr/sbin/haproxy")
    assert found, "haproxy is missing: apt-get install -y haproxy (.ci/run installs it)"
    return found


class HAProxy:
    """haproxy -db with one TCP frontend per port, forwarding to the same port on `target`."""

    def __init__(
        self,
        workdir: Path,
        *,
        listen: str,
        target: str,
        source: str,
        ports: Iterable[int],
        version: int,
    ) -> None:
        self.listen = listen
        self.config_path = workdir / f"haproxy-v{version}.cfg"
        self.log_path = workdir / f"haproxy-v{version}.log"
        sections = [
            "global\n    maxconn 512\n",
            "defaults\n    mode tcp\n    timeout connect 5s\n"
            "    timeout client 120s\n    timeout server 120s\n",
        ]
        for port in sorted(ports):
            sections.append(
                f"listen proxy-{port}\n    bind {listen}:{port}\n    source {source}\n"
                f"    server proxy {target}:{port} {SEND_PROXY[version]}\n"
            )
        self.config_path.write_text("\n".join(sections))
        binary = haproxy_binary()
        subprocess.run([binary, "-c", "-q", "-f", str(self.config_path)], check=True)
        self._log = self.log_path.open("ab")
        self.process = subprocess.Popen(
            [binary, "-db", "-f", str(self.config_path)],
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )
        for port in ports:
            self._wait_for(port)

    def _wait_for(self, port: int, timeout: float = 20.0) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                socket.create_connection((self.listen, port), timeout=1).close()
                return
            except OSError:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(
                        f"haproxy does not listen on {self.listen}:{port}: "
                        f"{self.log_path.read_text(errors='replace')}"
                    ) from None
                time.sleep(0.05)

    def stop(self) -> None:
        """Stop haproxy (SIGUSR1 would wait for connections; the test is done with them)."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        self.process.wait(30)
        self._log.close()
